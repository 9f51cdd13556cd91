"""Count the exact BPE tokens of a text: pre-tokenize, then a memo of piece counts (pure Python).

This module is the readable specification of the exact fast path;
``compaction.tokens._count_c`` (``_speedups/_count_c.pyx``) is its compiled twin and must split
every ``str`` into the same pieces and return the same count.  Import
:mod:`compaction.tokens.fast`, which picks one of the two.

The algorithm
-------------
tiktoken encodes a text in two stages: a **pre-tokenizer** (a regular expression, the encoding's
``pat_str``) cuts the text into pieces, and **byte-pair encoding** runs inside each piece
independently.  So a text's token count is the sum of its pieces' counts, and a piece always
costs the same number of tokens wherever it occurs.  Agent histories repeat the same pieces
(``" the"``, ``"\\n"``, ``"    "``, ``"def"``, ``'":'``) millions of times, so:

1. **Split** the text with the encoding's pattern (:func:`split_pattern`): ``o200k_base`` and
   ``cl100k_base`` patterns, evaluated by the ``regex`` package with leftmost-first alternation,
   greedy and possessive quantifiers and the ``(?!\\S)`` look-ahead, exactly as tiktoken's
   ``fancy-regex`` applies them.  The Unicode classes of the pattern (``\\p{L}``, ``\\p{Lu}``,
   ... ``\\p{N}``) are replaced by the explicit code point ranges of
   :mod:`compaction.tokens._unicode_tables`: tiktoken's tables are Unicode 16.0, the ``regex``
   package's may be another version, and a letter tiktoken does not know must not join a word.
2. **Count** each piece: look it up in a memo (piece -> tokens); on a miss, ask tiktoken's BPE
   for that one piece (``CoreBPE.encode_single_piece``, which skips the regex) and remember the
   count.  The memo is bounded: it holds at most ``memo_size`` pieces, each at most
   :data:`MAX_MEMO_PIECE` characters long (longer pieces are counted every time), and it is
   cleared when full, so memory stays bounded whatever the input.
3. **Sum** the counts.

Exact by construction: ``count(text) == len(encoding.encode_ordinary(text))`` for every ``str``
(special-token text such as ``<|endoftext|>`` is ordinary text; a lone surrogate counts as
U+FFFD, as tiktoken makes it).  A warm memo gives the same
answer as a cold one.  Every step is linear in the length of the text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import regex

from ..errors import EncodingDataMissing
from ._unicode_tables import LOWER, MARK, NUMBER, OTHER_LETTER, UPPER, class_ranges
from .encodings import ENCODINGS, get_encoding

__all__ = ["PieceCounter", "count_tokens", "ENCODING_NAMES", "DEFAULT_MEMO_SIZE", "MAX_MEMO_PIECE"]

#: The encodings whose pre-tokenizer is implemented.
ENCODING_NAMES = ("cl100k_base", "o200k_base")
#: Pieces a counter remembers before it clears its memo.
DEFAULT_MEMO_SIZE = 65536
#: Longest piece (characters) kept in the memo; longer pieces are counted on every call.
MAX_MEMO_PIECE = 32

# The property names of the patterns -> the classes of _unicode_tables they stand for.
_PROPERTY_CLASSES: dict[str, tuple[int, ...]] = {
    "L": (UPPER, LOWER, OTHER_LETTER),
    "Lu": (UPPER,),
    "Lt": (UPPER,),
    "Ll": (LOWER,),
    "Lm": (OTHER_LETTER,),
    "Lo": (OTHER_LETTER,),
    "M": (MARK,),
    "N": (NUMBER,),
}


def _class_set(name: str) -> str:
    """Return the ranges of property ``name`` in character-class syntax, without brackets."""
    return "".join(
        f"\\U{first:08x}" if first == last else f"\\U{first:08x}-\\U{last:08x}"
        for first, last in class_ranges(*_PROPERTY_CLASSES[name])
    )


def split_pattern(encoding: str) -> regex.Pattern[str]:
    """Return ``encoding``'s pre-tokenizer with tiktoken's Unicode classes spelled out.

    Each ``\\p{X}`` of ``ENCODINGS[encoding].pat_str`` becomes its ranges: inside a character
    class as they are, outside one in brackets.  Everything else of the pattern is unchanged.
    """
    pattern = ENCODINGS[encoding].pat_str
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and pattern.startswith("\\p{", i):
            end = pattern.index("}", i)
            ranges = _class_set(pattern[i + 3 : end])
            out.append(ranges if in_class else f"[{ranges}]")
            i = end + 1
            continue
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        out.append(ch)
        i += 1
    return regex.compile("".join(out))


def single_piece_bpe(encoding: str) -> Callable[[bytes], list[int]]:
    """Return tiktoken's BPE of one piece (UTF-8 bytes -> token ids), without the regex split.

    ``CoreBPE.encode_single_piece`` is what ``encode_ordinary`` runs on each piece: the whole
    piece if it is one token, else the byte-pair merges.
    """
    return get_encoding(encoding)._core_bpe.encode_single_piece  # type: ignore[no-any-return]


def _check_encoding(encoding: str) -> None:
    """Raise :class:`EncodingDataMissing` unless ``encoding`` has a pre-tokenizer here."""
    if encoding not in ENCODING_NAMES:
        known = ", ".join(ENCODING_NAMES)
        raise EncodingDataMissing(
            f"no pre-tokenizer for encoding {encoding!r}; expected one of: {known}"
        )


class PieceCounter:
    """Count the tokens of texts in one encoding, remembering the count of every short piece.

    Args:
        encoding: ``"o200k_base"`` (default) or ``"cl100k_base"``.
        memo_size: pieces remembered before the memo is cleared (``0``: remember none).

    Raises:
        EncodingDataMissing: no pre-tokenizer for ``encoding``, or its rank file is missing.
        ValueError: ``memo_size`` is negative.

    Example:
        >>> PieceCounter("o200k_base").count("hello world")
        2
    """

    def __init__(self, encoding: str = "o200k_base", memo_size: int = DEFAULT_MEMO_SIZE) -> None:
        _check_encoding(encoding)
        if memo_size < 0:
            raise ValueError(f"memo_size must be >= 0 pieces, got {memo_size}")
        self.encoding = encoding
        self.memo_size = memo_size
        self._bpe: Callable[[bytes], list[int]] = single_piece_bpe(encoding)
        self._pattern = split_pattern(encoding)
        self._memo: dict[str, int] = {}

    @property
    def memo_len(self) -> int:
        """The number of pieces remembered now (``<= memo_size``)."""
        return len(self._memo)

    def clear(self) -> None:
        """Forget every remembered piece."""
        self._memo.clear()

    def pieces(self, text: str) -> list[str]:
        """Return the pre-tokenizer's pieces of ``text``, in order (they join back to ``text``)."""
        if not isinstance(text, str):
            raise TypeError(f"pieces() expected a str, got {type(text).__name__}; decode bytes first")
        return self._pattern.findall(text)

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` (tokens), ``len(encode_ordinary(text))``.

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise TypeError(f"count() expected a str, got {type(text).__name__}; decode bytes first")
        try:
            return self._count(text)
        except UnicodeEncodeError:
            # as tiktoken's encode_ordinary: lone surrogates become U+FFFD, pairs are joined
            return self._count(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))

    def _count(self, text: str) -> int:
        """Split ``text``, look each piece up, sum (the hot loop of :meth:`count`)."""
        memo = self._memo
        total = 0
        for piece in self._pattern.findall(text):
            tokens = memo.get(piece)
            if tokens is None:
                tokens = len(self._bpe(piece.encode("utf-8")))
                if len(piece) <= MAX_MEMO_PIECE and self.memo_size:
                    if len(memo) >= self.memo_size:
                        memo.clear()
                    memo[piece] = tokens
            total += tokens
        return total


_counters: dict[str, PieceCounter] = {}
_lock = threading.Lock()


def _counter(encoding: str) -> PieceCounter:
    """Return the shared :class:`PieceCounter` of ``encoding``, made on first use."""
    counter = _counters.get(encoding)
    if counter is None:
        with _lock:
            counter = _counters.get(encoding)
            if counter is None:
                counter = _counters[encoding] = PieceCounter(encoding)
    return counter


def count_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Return the exact number of tokens of ``text`` in ``encoding`` (tokens).

    Equal to ``len(tiktoken_encoding.encode_ordinary(text))``; special-token text counts as
    ordinary text.  One shared memo per encoding.

    Raises:
        TypeError: ``text`` is not a ``str``.
        EncodingDataMissing: no pre-tokenizer for ``encoding``.

    Example:
        >>> count_tokens("hello world")
        2
    """
    return _counter(encoding).count(text)
