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

1. **Split** the text with the encoding's pattern (``ENCODINGS[encoding].pat_str``), evaluated by
   the ``regex`` package with leftmost-first alternation, greedy and possessive quantifiers and
   the ``(?!\\S)`` look-ahead, exactly as tiktoken's ``fancy-regex`` applies them.  One catch:
   the pattern's Unicode classes (``\\p{L}``, ``\\p{Lu}``, ... ``\\p{N}``, ``\\s``) are tiktoken's
   Unicode 16.0 (:mod:`compaction.tokens._unicode_tables`), and the ``regex`` package may be
   another version (17.0 knows 17,559 letters, digits and marks tiktoken treats as
   unassigned symbols, and U+0295 changed from ``Ll`` to ``Lo``).  Only the class of a character matters to the pattern, so a text
   holding such a character is split as a copy of it in which each of them is replaced by a
   character of its tiktoken class (:data:`_STAND_INS`, one code point for one, so the
   positions of the pieces are the same), and the pieces are cut from the original text.
2. **Count** each piece.  An ASCII piece of at most :data:`MAX_TOKEN_PIECE` characters (its
   UTF-8 bytes are its characters) is first looked up in the encoding's ranks: one that is a
   token counts 1 and is not remembered (most pieces of first-time text are such words with
   their leading space; the memo then holds the pieces that cost a merge, and stays small).
   Nor is one of at most :data:`MAX_MERGELESS_PIECE` characters that is no token: only its
   pairs can merge (two characters: 2 tokens; three: 2 if one of its two pairs is a token,
   else 3), which the compiled twin reads from its table of pairs (base64 data is cut into
   many such pieces).  Any other piece: look it up in a memo (piece -> tokens); on a miss, ask
   tiktoken's BPE
   for that one piece (``CoreBPE.encode_single_piece``, which skips the regex) and remember the
   count (the compiled twin merges a missed piece itself, or, once a process has counted 1 MB
   of long misses, counts it without merging, by backtracking: :class:`BacktrackingBPE` is that
   algorithm, written out here as its specification).  The memo is bounded: it holds at most ``memo_size`` pieces, each at most
   :data:`MAX_MEMO_PIECE` characters long (longer pieces are counted every time), at most
   :data:`MAX_MEMO_CHARS` characters in all, so memory stays bounded whatever the input.  It
   never wipes itself: it keeps two **generations**, the newer one (where pieces are added)
   and the older one.  A piece found only in the older one is copied into the newer one, so
   a piece in use survives.  When the newer one is full (half of ``memo_size`` pieces, or
   half of :data:`MAX_MEMO_CHARS` characters), the older one is forgotten and the newer one
   becomes the older; the pieces seen since the last turn-over are kept.  (With an odd
   ``memo_size`` the older one is also forgotten when the two together hold ``memo_size``.)
   So a text of up to half ``memo_size`` distinct pieces counted twice hits on every piece the
   second time, and one of up to ``memo_size`` on at least half of them, where a memo cleared
   when full (this memo before) started the second pass empty.
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
from ._unicode_tables import (
    LOWER,
    MARK,
    NUMBER,
    OTHER,
    OTHER_LETTER,
    SPACE,
    UPPER,
    class_table,
    regex_class_table,
)
from .encodings import ENCODINGS, get_encoding

__all__ = [
    "PieceCounter",
    "count_tokens",
    "ENCODING_NAMES",
    "DEFAULT_MEMO_SIZE",
    "MAX_MEMO_PIECE",
    "MAX_MEMO_CHARS",
    "MAX_TOKEN_PIECE",
    "MAX_MERGELESS_PIECE",
]

#: The encodings whose pre-tokenizer is implemented.
ENCODING_NAMES = ("cl100k_base", "o200k_base")
#: Pieces a counter remembers at most (two generations of half as many each).  A 6 MB text of
#: 124k distinct pieces counted twice hits on them all the second time (bench/bench_count_memo.py).
DEFAULT_MEMO_SIZE = 1 << 18
#: Longest piece (characters) kept in the memo; longer pieces are counted on every call.
MAX_MEMO_PIECE = 4096
#: Characters of all remembered pieces together at most (half of it a generation; bounds the
#: memo's memory: long pieces such as base64 image data repeat in a transcript too).
MAX_MEMO_CHARS = 1 << 22
#: Longest ASCII piece (characters) looked up in the ranks before the memo: one that is a token
#: counts 1 and is not remembered (the compiled twin reads such a piece in two 64-bit words).
MAX_TOKEN_PIECE = 16
#: Longest ASCII piece (characters) that is counted from the ranks without the memo when it is
#: no token either (only its pairs can merge).
MAX_MERGELESS_PIECE = 3

#: A character of each class of :mod:`._unicode_tables` on which every Unicode version agrees.
_STAND_INS: dict[int, str] = {
    OTHER: "\u20ac",  # EURO SIGN (Sc)
    UPPER: "\u0416",  # CYRILLIC CAPITAL LETTER ZHE (Lu)
    LOWER: "\u0436",  # CYRILLIC SMALL LETTER ZHE (Ll)
    OTHER_LETTER: "\u4e2d",  # a CJK ideograph (Lo)
    MARK: "\u0301",  # COMBINING ACUTE ACCENT (Mn)
    NUMBER: "\u0663",  # ARABIC-INDIC DIGIT THREE (Nd)
    SPACE: "\u2003",  # EM SPACE (Zs, White_Space)
}


class _Disagreements:
    """The code points the ``regex`` package classifies otherwise than tiktoken, found once."""

    def __init__(self) -> None:
        ours = class_table()
        theirs = regex_class_table()
        self.stand_ins: dict[int, str] = {}
        ranges: list[list[int]] = []
        for cp in range(len(ours)):
            if ours[cp] != theirs[cp]:
                self.stand_ins[cp] = _STAND_INS[ours[cp]]
                if ranges and ranges[-1][1] == cp - 1:
                    ranges[-1][1] = cp
                else:
                    ranges.append([cp, cp])
        members = "".join(f"\\U{first:08x}-\\U{last:08x}" for first, last in ranges)
        # finds any of them; finds nothing when the two versions agree everywhere
        self.search = regex.compile(f"[{members}]" if ranges else "(?!)").search


_disagreements: _Disagreements | None = None
_disagreements_lock = threading.Lock()


def _find_disagreements() -> _Disagreements:
    """Return the :class:`_Disagreements` of this process (about 0.5 s the first time)."""
    global _disagreements
    with _disagreements_lock:
        if _disagreements is None:
            _disagreements = _Disagreements()
        return _disagreements


def single_piece_bpe(encoding: str) -> Callable[[bytes], list[int]]:
    """Return tiktoken's BPE of one piece (UTF-8 bytes -> token ids), without the regex split.

    ``CoreBPE.encode_single_piece`` is what ``encode_ordinary`` runs on each piece: the whole
    piece if it is one token, else the byte-pair merges.
    """
    return get_encoding(encoding)._core_bpe.encode_single_piece


class BacktrackingBPE:
    """Count the BPE tokens of one piece by backtracking, without merging (the specification).

    The compiled twin counts a long miss this way (``_speedups/_count_c.pyx``,
    ``_backtrack_count``; ASCII pieces of 24 bytes or more and other pieces of 4 or more, once
    1 MB of such pieces has been counted in the process); this twin asks tiktoken, and the tests
    hold all three to the same counts.  The algorithm is the backtracking encoder of GitHub's
    ``bpe`` crate (https://github.com/github/rust-gems, ``crates/bpe``: ``backtrack_encoder.rs``
    and ``is_valid_token_pair`` in ``byte_pair_encoding.rs``; the argument is its README's).
    Two tokens are *compatible* when BPE of their bytes together gives those two tokens back.
    BPE's encoding of a text is its only split into tokens in which every two neighbours are
    compatible, so it is found left to right: take the longest token that starts the rest of
    the text and is compatible with the token before it (a shorter one where the longest is
    not); where no token fits, step back and take the token before shorter.  A position from
    which no encoding goes on is remembered, so each is given up once (linear time).

    Compatibility is decided from each token's *split*, the two tokens BPE merged into it
    (:meth:`compatible`): undo the later merge of the two sides of the boundary, again and
    again, and look across the boundary for a pair that BPE would have merged first (the split
    of a token of lower rank than the merges undone so far).  The splits are found once, in
    rank order: a token's split is its longest prefix that is a token ``first`` whose rest is a
    token ``second``, both of lower rank and compatible (by the splits found so far), the next
    shorter prefix where not; a byte has none (its split is itself twice).

    Args:
        ranks: token bytes -> rank, the ranks 0 to ``len(ranks) - 1``, every byte a token.

    Raises:
        ValueError: the ranks are not such.

    Example:
        >>> bpe = BacktrackingBPE(get_encoding("o200k_base")._mergeable_ranks)  # doctest: +SKIP
        >>> bpe.count("你好世界".encode())  # doctest: +SKIP
        2
    """

    def __init__(self, ranks: dict[bytes, int]) -> None:
        tokens = sorted(ranks, key=ranks.__getitem__)
        if [ranks[token] for token in tokens] != list(range(len(tokens))):
            raise ValueError("ranks must be 0 to len(ranks) - 1, each once")
        if any(bytes([byte]) not in ranks for byte in range(256)):
            raise ValueError("every byte must be a token")
        self.ranks = ranks
        self.tokens = tokens
        self.max_length = max(map(len, tokens))
        self.split: list[tuple[int, int]] = []
        for rank, token in enumerate(tokens):
            self.split.append(self._find_split(rank, token))

    def _find_split(self, rank: int, token: bytes) -> tuple[int, int]:
        """The split of ``token`` (``rank``), the splits of every lower rank being known."""
        cut = self.longest_token(token, 0, len(token) - 1) if len(token) > 1 else 0
        while cut:
            first = self.ranks[token[:cut]]
            second = self.ranks.get(token[cut:])
            if (
                second is not None
                and first < rank
                and second < rank
                and self.compatible(token, cut, first, second)
            ):
                return first, second
            cut = self.longest_token(token, 0, cut - 1) if cut > 1 else 0
        return rank, rank

    def longest_token(self, text: bytes, at: int, most: int) -> int:
        """The length (bytes) of the longest token ``text[at:at + length]``, ``length <= most``."""
        for length in range(min(most, self.max_length, len(text) - at), 1, -1):
            if text[at : at + length] in self.ranks:
                return length
        return 1

    def compatible(self, text: bytes, at: int, first: int, second: int) -> bool:
        """Whether BPE of tokens ``first`` (ending at byte ``at`` of ``text``) and ``second``
        (starting there) together gives them back."""
        limit = len(self.tokens)  # above every rank: no merge undone yet
        while True:
            span = text[at - len(self.tokens[first]) : at + len(self.tokens[second])]
            combined = self.ranks.get(span)
            if (
                combined is not None
                and combined < limit
                and combined < len(self.split)
                and self.split[combined] == (first, second)
            ):
                return False  # BPE merges these two parts before the merges undone
            if first > second:  # first was merged last: undo it (its right part stays)
                limit = first
                first = self.split[first][1]
                if first == limit:  # a byte: undo second's merge instead
                    limit = second + 1
                    second = self.split[second][0]
                    if second + 1 == limit:
                        return True  # two bytes, no pair merged across the boundary
            else:
                limit = second + 1
                second = self.split[second][0]
                if second + 1 == limit:
                    limit = first
                    first = self.split[first][1]
                    if first == limit:
                        return True

    def count(self, piece: bytes) -> int:
        """Return the number of tokens of ``piece`` (tokens), ``len(encode_single_piece(piece))``."""
        n = len(piece)
        if n == 0:
            return 0
        ends: list[int] = []  # where each chosen token ends
        chosen: list[int] = []  # its rank
        dead = [False] * (n + 1)  # no encoding of the rest goes on from a token ending here
        at = 0
        length = self.longest_token(piece, 0, n)
        while True:
            rank = self.ranks[piece[at : at + length]]
            if not dead[at + length] and (not chosen or self.compatible(piece, at, chosen[-1], rank)):
                at += length
                chosen.append(rank)
                ends.append(at)
                if at == n:
                    return len(chosen)
                length = self.longest_token(piece, at, n - at)
            elif length > 1:
                length = self.longest_token(piece, at, length - 1)
            else:  # no token fits here: step back, try the token before shorter
                dead[at] = True
                chosen.pop()
                end = ends.pop()
                at = ends[-1] if ends else 0
                length = end - at


_backtracking: dict[str, BacktrackingBPE] = {}
_backtracking_lock = threading.Lock()


def backtracking_bpe(encoding: str) -> BacktrackingBPE:
    """Return the :class:`BacktrackingBPE` of ``encoding``, built on first use (about 2 s for
    ``o200k_base`` in pure Python; the compiled twin builds its tables in about 0.1 s)."""
    bpe = _backtracking.get(encoding)
    if bpe is None:
        with _backtracking_lock:
            bpe = _backtracking.get(encoding)
            if bpe is None:
                bpe = _backtracking[encoding] = BacktrackingBPE(get_encoding(encoding)._mergeable_ranks)
    return bpe


def _check_encoding(encoding: str) -> None:
    """Raise :class:`EncodingDataMissing` unless ``encoding`` has a pre-tokenizer here."""
    if encoding not in ENCODING_NAMES:
        known = ", ".join(ENCODING_NAMES)
        raise EncodingDataMissing(f"no pre-tokenizer for encoding {encoding!r}; expected one of: {known}")


class PieceCounter:
    """Count the tokens of texts in one encoding, remembering the count of every short piece.

    Args:
        encoding: ``"o200k_base"`` (default) or ``"cl100k_base"``.
        memo_size: pieces remembered at most, in two generations (``0``: remember none).

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
        self._ranks: dict[bytes, int] = get_encoding(encoding)._mergeable_ranks
        self._pattern = regex.compile(ENCODINGS[encoding].pat_str)
        self._disagreements = _find_disagreements()
        self._generation = (memo_size + 1) // 2
        self._memo: dict[str, int] = {}  # the newer generation
        self._memo_chars = 0
        self._older: dict[str, int] = {}  # the older generation

    @property
    def memo_len(self) -> int:
        """The number of pieces remembered now, in both generations (``<= memo_size``).

        A piece copied from the older generation into the newer one counts twice.
        """
        return len(self._memo) + len(self._older)

    def clear(self) -> None:
        """Forget every remembered piece."""
        self._memo = {}
        self._memo_chars = 0
        self._older = {}

    def _remember(self, piece: str, tokens: int) -> None:
        """Add ``piece`` to the newer generation, turning the generations over when it is full."""
        if len(self._memo) >= self._generation or self._memo_chars + len(piece) > MAX_MEMO_CHARS // 2:
            self._older = self._memo
            self._memo = {}
            self._memo_chars = 0
        if len(self._memo) + len(self._older) >= self.memo_size:
            self._older = {}
        self._memo[piece] = tokens
        self._memo_chars += len(piece)

    def pieces(self, text: str) -> list[str]:
        """Return the pre-tokenizer's pieces of ``text``, in order (they join back to ``text``)."""
        if not isinstance(text, str):
            raise TypeError(f"pieces() expected a str, got {type(text).__name__}; decode bytes first")
        return self._split(text)

    def _split(self, text: str) -> list[str]:
        """Return the pieces of ``text``: the regex split, with tiktoken's Unicode classes."""
        if text.isascii() or self._disagreements.search(text) is None:
            return self._pattern.findall(text)
        stood_in = text.translate(self._disagreements.stand_ins)
        pieces = []
        start = 0
        for piece in self._pattern.findall(stood_in):
            pieces.append(text[start : start + len(piece)])
            start += len(piece)
        return pieces

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
        ranks = self._ranks
        for piece in self._split(text):
            if len(piece) <= MAX_TOKEN_PIECE and piece.isascii():
                word = piece.encode("ascii")
                if word in ranks:
                    total += 1  # one token, not remembered
                    continue
                if len(piece) <= MAX_MERGELESS_PIECE:
                    total += len(self._bpe(word))  # no merge loop, not remembered
                    continue
            tokens = memo.get(piece)
            if tokens is None:
                tokens = self._older.get(piece)
                if tokens is None:
                    tokens = len(self._bpe(piece.encode("utf-8")))
                if len(piece) <= MAX_MEMO_PIECE and self.memo_size:
                    self._remember(piece, tokens)
                    memo = self._memo
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
