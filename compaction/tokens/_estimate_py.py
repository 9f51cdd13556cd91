"""Estimate the BPE token count of a text in one pass, without tokenizing it (pure Python).

This module is the readable specification of the estimator; ``compaction.tokens._estimate_c``
(``_speedups/_estimate_c.pyx``) is its compiled twin and must return exactly the same pair
counts and the same integer estimate for every ``str``.  Import
:mod:`compaction.tokens.estimate`, which picks one of the two.

The algorithm
-------------
1. **Codes.**  Every character gets a code (:func:`char_code`), one of :data:`N_CODES`: an
   ASCII character is its own code (``0..127``: ``"e"``, ``" "``, ``"{"`` and ``"\\n"`` each
   have a weight of their own); any other character is coded by its class
   (:func:`char_class`: by script, since each script has its own share of a BPE vocabulary and
   so its own rate of tokens per character: Greek, Cyrillic (the Russian alphabet; apart, the
   other letters of the Slavic languages, Ukrainian, Bulgarian, Serbian... (``ъ`` included),
   which mark languages with fewer tokens of their own; and apart again the letters of
   Kazakh, Kyrgyz, Tatar..., U+0460-U+052F), Hebrew, Arabic, other two-byte letters (Latin
   with accents, IPA, Armenian...), Vietnamese's Latin Extended Additional, Devanagari,
   Bengali, Gurmukhi with Gujarati and Oriya, the scripts of southern India (Tamil, Telugu,
   Kannada, Malayalam, Sinhala), Thai and Lao, Han (the characters only Traditional Chinese
   writes, ``TRADITIONAL_HAN``, apart), kana, Hangul; and two-byte symbols, CJK
   punctuation, blanks, other three-byte characters, astral characters), at
   ``CLASS_BASE + class``, or at ``REPEAT_BASE + class`` when it repeats the character before
   it (``"━━━"``, ``"。。"``: BPE merges those into long tokens).  :data:`BOUNDARY` stands
   before the first and after the last character.
2. **Pairs.**  The model is a table of weights (tokens) over every adjacent pair of codes
   ``(previous, current)``, boundaries included: ``W[previous * N_CODES + current]``.  Pairs are
   what BPE and the pre-tokenizers of ``o200k_base`` and ``cl100k_base`` act on: a space before
   a letter joins the word, ``"th"`` and ``"in"`` sit inside one token far more often than
   ``"qz"`` or ``"x7"`` (English words cost less per letter than identifiers, hex digests and
   base64), a newline after ``"{"`` starts an indented line, and so on.  A class-pair model
   (29 x 29 cells) is the special case of one weight per pair of classes; the fitter starts
   from it and learns per-character corrections where the corpus supports them.
3. **Digits, exactly.**  Both encodings split a run of ASCII digits into groups of at most
   three (``\\p{N}{1,3}``) and every group of one to three ASCII digits is a single token, so a
   run of ``n`` digits costs exactly ``ceil(n / 3)`` tokens: that is ``digit_tokens``.  The
   weights of a digit after a digit, and of a boundary next to a digit, are 0, so that a text of
   ASCII digits only is estimated exactly.
4. **Fixed point.**  Weights are integers in units of ``2 ** -SCALE_BITS`` tokens, so both twins
   compute the same integer sum ``(digit_tokens << SCALE_BITS) + sum(W[cell] * count)`` with no
   floating-point rounding; the estimate is that sum rounded half up to whole tokens.
5. **Floors.**  Every run of letters (an ASCII letter or one of a letter class, ``LETTER_CODES``) and every
   group of digits is a piece of its own to both pre-tokenizers, hence at least one token.  The
   fitter keeps every weight at 0 or more and the weight of a letter after a non-letter at 1 or
   more, so the estimate is never below the number of words plus ``digit_tokens`` (no cycle of
   pairs such as ``" é é é"`` is priced at nothing); it is at least 1 for a text that is not
   empty (0 for the empty text).

The tables are fitted by ``scripts/fit_estimator.py`` against tiktoken on message-sized pieces of
real agent transcripts and other corpora (:mod:`compaction.tokens.estimator_tables`).

The pass is linear in the length of the text and uses constant memory besides the text (and the
pair counts, at most ``N_CODES ** 2`` entries, in :func:`pair_counts`).
"""

from __future__ import annotations

from collections import Counter

from .estimator_tables import (
    BOUNDARY,
    CLASS_BASE,
    N_CODES,
    REPEAT_BASE,
    SCALE_BITS,
    TRADITIONAL_HAN,
    weight_table,
)

_TRADITIONAL_HAN = frozenset(ord(ch) for ch in TRADITIONAL_HAN)

__all__ = ["estimate_tokens", "pair_counts", "char_class", "char_code", "N_CODES", "BOUNDARY"]

# Character classes (the non-ASCII ones are used in codes; the ASCII ones name the byte ranges).
LOWER = 1
UPPER = 2
DIGIT = 3
SPACE = 4
NEWLINE = 5
BLANK = 6
PUNCT = 7
LATIN = 8
SYMBOL = 9
HAN = 10
KANA = 11
HANGUL = 12
CJK_PUNCT = 13
OTHER = 14
ASTRAL = 15
GREEK = 16
CYRILLIC = 17
HEBREW = 18
ARABIC = 19
VIETNAMESE = 20
DEVANAGARI = 21
INDIC = 22
THAI = 23
CYRILLIC_EXT = 24
INDIC_SOUTH = 25
HAN_TRADITIONAL = 26
INDIC_WEST = 27
CYRILLIC_ASIAN = 28
N_CLASSES = 29

_HALF = 1 << (SCALE_BITS - 1)


def _ascii_class(cp: int) -> int:
    """Return the class of the ASCII code point ``cp`` (``0 <= cp < 128``)."""
    if 97 <= cp <= 122:
        return LOWER
    if 65 <= cp <= 90:
        return UPPER
    if 48 <= cp <= 57:
        return DIGIT
    if cp == 32:
        return SPACE
    if cp == 10 or cp == 13:
        return NEWLINE
    if cp == 9 or cp == 11 or cp == 12:
        return BLANK
    return PUNCT


_ASCII_CLASSES: tuple[int, ...] = tuple(_ascii_class(cp) for cp in range(128))


def char_class(cp: int) -> int:
    """Return the character class (``LOWER`` ... ``ASTRAL``) of the code point ``cp``.

    Raises:
        TypeError: ``cp`` is not an ``int``.
        ValueError: ``cp`` is not in ``0..0x10FFFF``.
    """
    if not isinstance(cp, int):
        raise TypeError(f"char_class() expected an int code point, got {type(cp).__name__}")
    if cp < 0 or cp > 0x10FFFF:
        raise ValueError(f"char_class() expected a code point in 0..0x10FFFF, got {cp}")
    if cp < 128:
        return _ASCII_CLASSES[cp]
    if cp < 0x800:
        if cp == 0x85 or cp == 0xA0:
            return BLANK
        if cp < 0xC0 or cp == 0xD7 or cp == 0xF7:
            return SYMBOL
        if cp < 0x370:
            return LATIN
        if cp < 0x400:
            return GREEK
        if 0x410 <= cp < 0x450 and cp != 0x42A and cp != 0x44A:
            return CYRILLIC
        if cp < 0x460 or cp == 0x490 or cp == 0x491:
            return CYRILLIC_EXT
        if cp < 0x530:
            return CYRILLIC_ASIAN
        if 0x590 <= cp < 0x600:
            return HEBREW
        if 0x600 <= cp < 0x700 or 0x750 <= cp < 0x780:
            return ARABIC
        return LATIN
    if cp < 0x10000:
        if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF:
            return HAN_TRADITIONAL if cp in _TRADITIONAL_HAN else HAN
        if 0x3040 <= cp <= 0x30FF or 0x31F0 <= cp <= 0x31FF or 0xFF66 <= cp <= 0xFF9F:
            return KANA
        if 0xAC00 <= cp <= 0xD7AF or 0x1100 <= cp <= 0x11FF or 0x3130 <= cp <= 0x318F:
            return HANGUL
        if cp == 0x3000 or cp == 0x1680 or 0x2000 <= cp <= 0x200A or 0x2028 <= cp <= 0x2029:
            return BLANK
        if cp == 0x202F or cp == 0x205F:
            return BLANK
        if 0x3001 <= cp <= 0x303F or 0xFF00 <= cp <= 0xFF65 or 0xFE30 <= cp <= 0xFE4F:
            return CJK_PUNCT
        if 0x900 <= cp < 0x980:
            return DEVANAGARI
        if 0x980 <= cp < 0xA00:
            return INDIC
        if 0xA00 <= cp < 0xB80:
            return INDIC_WEST
        if 0xB80 <= cp < 0xE00:
            return INDIC_SOUTH
        if 0xE00 <= cp < 0xF00:
            return THAI
        if 0x1E00 <= cp < 0x1F00:
            return VIETNAMESE
        if 0x1F00 <= cp < 0x2000:
            return GREEK
        if 0x8A0 <= cp < 0x900:
            return ARABIC
        return OTHER
    if 0x20000 <= cp <= 0x3FFFF:
        return HAN
    return ASTRAL


def char_code(cp: int, prev_cp: int = -1) -> int:
    """Return the code of the character ``cp`` when it follows the character ``prev_cp``.

    Args:
        cp: a code point, ``0..0x10FFFF``.
        prev_cp: the code point before it, or ``-1`` at the start of the text.

    Returns:
        ``cp`` itself for ASCII; ``CLASS_BASE + char_class(cp)`` for any other character, or
        ``REPEAT_BASE + char_class(cp)`` when ``cp == prev_cp``.

    Raises:
        ValueError: ``cp`` is not in ``0..0x10FFFF``.
    """
    if not isinstance(cp, int):
        raise TypeError(f"char_code() expected an int code point, got {type(cp).__name__}")
    if 0 <= cp < 128:
        return cp
    return (REPEAT_BASE if cp == prev_cp else CLASS_BASE) + char_class(cp)


def _is_digit(code: int) -> bool:
    return 48 <= code <= 57


def pair_counts(text: str) -> tuple[int, dict[int, int]]:
    """Count the code pairs of ``text`` and its ASCII digit tokens in one pass.

    Args:
        text: any ``str``.

    Returns:
        ``(digit_tokens, counts)``: ``sum(ceil(len(run) / 3))`` over the runs of ASCII digits,
        and ``{previous * N_CODES + current: number of times}`` over every adjacent pair of codes,
        the boundaries before the first and after the last character included (the empty
        text has the one pair ``(BOUNDARY, BOUNDARY)``).

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"pair_counts() expected a str, got {type(text).__name__}; decode bytes first")
    if type(text) is not str:
        text = str.__str__(text)  # a subclass's own characters, whatever its __iter__ says
    counts: Counter[int] = Counter()
    digit_tokens = 0
    run = 0  # length of the current run of ASCII digits
    prev = BOUNDARY
    prev_cp = -1
    for ch in text:
        cp = ord(ch)
        code = char_code(cp, prev_cp)
        if _is_digit(code):
            if run % 3 == 0:
                digit_tokens += 1
            run += 1
        else:
            run = 0
        counts[prev * N_CODES + code] += 1
        prev = code
        prev_cp = cp
    counts[prev * N_CODES + BOUNDARY] += 1
    return digit_tokens, dict(counts)


def estimate_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Estimate how many tokens ``encoding`` would make of ``text``, without tokenizing it.

    Args:
        text: any ``str``; special tokens are treated as ordinary text.
        encoding: ``"o200k_base"`` (default) or ``"cl100k_base"``.

    Returns:
        The estimated token count (tokens): 0 for ``""``, else ``>= 1``; exact for a text of
        ASCII digits only.  The error measured on held-out text is in
        ``compaction.tokens.estimator_fit.HELD_OUT_MAPE``.

    Raises:
        TypeError: ``text`` is not a ``str``.
        EncodingDataMissing: no weight table for ``encoding``, or its file is damaged.

    Example:
        >>> estimate_tokens("1234567")
        3
    """
    table = weight_table(encoding)
    if type(text) is not str and isinstance(text, str):
        text = str.__str__(text)  # a subclass's own characters, whatever its methods say
    digit_tokens, counts = pair_counts(text)
    total = digit_tokens << SCALE_BITS
    for cell, count in counts.items():
        total += table[cell] * count
    if not text:
        return 0
    # a text that is not empty is at least one token (the tables' floors make it at least one
    # per word and per digit group: see the module's docstring)
    return max(1, (max(total, 0) + _HALF) >> SCALE_BITS)
