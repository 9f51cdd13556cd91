"""Estimate the BPE token count of a text in one pass, without tokenizing it (pure Python).

This module is the readable specification of the estimator; ``compaction.tokens._estimate_c``
(``_speedups/_estimate_c.pyx``) is its compiled twin and must return exactly the same features
and the same integer estimate for every ``str``.  Import :mod:`compaction.tokens.estimate`, which
picks one of the two.

The algorithm
-------------
1. **Classes.**  Every code point falls in one of 15 character classes (:func:`char_class`):
   ASCII lower / upper letters, ASCII digits, the space, newlines (``\\n``, ``\\r``), other
   blanks (tab, form feed, no-break and ideographic spaces...), ASCII punctuation (and control
   characters), non-ASCII letters of the two-byte UTF-8 range (Latin accents, Greek, Cyrillic,
   Hebrew, Arabic...), two-byte symbols (``©``, ``×``...), Han ideographs, kana, Hangul, CJK and
   full-width punctuation, any other three-byte character (``—``, ``→``, box drawing, Indic...)
   and astral characters (emoji).  A 16th class, ``BOUNDARY``, stands before the first and after
   the last character.
2. **One pass.**  We count every adjacent pair of classes ``(previous, current)`` in a 16 x 16
   table, boundaries included, and in a second 16 x 16 table the pairs where the character
   repeats the previous one (``"===="``, runs of spaces, ``"━━━"``: BPE merges those into long
   tokens).  Class pairs are what the pre-tokenizers of ``o200k_base`` and
   ``cl100k_base`` split on: a word starts where a letter follows a non-letter, ``o200k_base``
   splits ``camelCase`` where an upper-case letter follows a lower-case one, a space before a
   letter or a punctuation mark is merged into it but a space before a digit is a token of its
   own, a newline after punctuation joins the punctuation's piece, and so on.
3. **Digits, exactly.**  Both encodings split a run of ASCII digits into groups of at most
   three (``\\p{N}{1,3}``) and every group of one to three ASCII digits is a single token, so a
   run of ``n`` digits costs exactly ``ceil(n / 3)`` tokens.  The pass keeps the position of the
   current digit in its run modulo 3 and counts the digits at position 0: that is
   ``digit_tokens``, whose coefficient is exactly 1.
4. **Features.**  ``text_features`` turns the pair table into the :data:`FEATURE_NAMES` counts
   (each the sum of a fixed set of pair cells, :data:`_FEATURE_PAIRS`), after ``digit_tokens``.
   For a text made only of ASCII digits every feature but ``digit_tokens`` is zero.
5. **Linear model.**  The estimate is ``sum(coefficient * feature)`` in feature order, with one
   coefficient vector per encoding (no intercept), rounded half up and clamped at 0.  The
   coefficients are fitted by ``scripts/fit_estimator.py`` (weighted least squares on
   message-sized pieces of real agent transcripts and synthetic prose, code, JSON, CJK and base64
   text against tiktoken) and stored in :mod:`compaction.tokens.estimator_coefficients`, which
   also records the error measured on held-out pieces of each corpus.

Both the pass and the features are linear in the length of the text (no quadratic step) and
use constant memory besides the text.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import EncodingDataMissing
from .estimator_coefficients import COEFFICIENTS
from .estimator_coefficients import FEATURE_NAMES as _FITTED_FEATURE_NAMES

__all__ = ["estimate_tokens", "text_features", "char_class", "FEATURE_NAMES", "N_CLASSES"]

BOUNDARY = 0
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
N_CLASSES = 16


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
    """Return the character class (``LOWER`` ... ``ASTRAL``) of the code point ``cp``."""
    if cp < 128:
        return _ASCII_CLASSES[cp]
    if cp < 0x800:
        if cp == 0x85 or cp == 0xA0:
            return BLANK
        if cp < 0xC0 or cp == 0xD7 or cp == 0xF7:
            return SYMBOL
        return LATIN
    if cp < 0x10000:
        if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF:
            return HAN
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
        return OTHER
    if 0x20000 <= cp <= 0x3FFFF:
        return HAN
    return ASTRAL


def _pairs(previous: Iterable[int], current: Iterable[int]) -> tuple[int, ...]:
    """Return the cells of the pair table of every ``(previous, current)`` combination.

    Both halves of the table: pairs of two different characters and pairs of a repeated one.
    """
    current = tuple(current)
    return tuple(
        same * N_CLASSES * N_CLASSES + p * N_CLASSES + c for same in (0, 1) for p in previous for c in current
    )


def _repeats(classes: Iterable[int]) -> tuple[int, ...]:
    """Return the cells of the pair table that count a character of ``classes`` repeating itself."""
    return tuple(N_CLASSES * N_CLASSES + c * N_CLASSES + c for c in classes)


_ALL = tuple(range(N_CLASSES))
_LETTERS = (LOWER, UPPER, LATIN)
_NOT_LETTERS = tuple(c for c in _ALL if c not in _LETTERS)
_CASED = (LOWER, UPPER)

# Each feature after ``digit_tokens`` is the sum of these cells of the pair table.
_FEATURE_PAIRS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("lower", _pairs(_ALL, [LOWER])),
    ("upper", _pairs(_ALL, [UPPER])),
    ("word_starts", _pairs(_NOT_LETTERS, _LETTERS)),
    ("lower_to_upper", _pairs([LOWER], [UPPER])),
    ("upper_to_lower", _pairs([UPPER], [LOWER])),
    ("upper_to_upper", _pairs([UPPER], [UPPER])),
    ("letter_digit_switches", _pairs(_CASED, [DIGIT]) + _pairs([DIGIT], _CASED)),
    ("spaces", _pairs(_ALL, [SPACE])),
    ("space_to_space", _pairs([SPACE], [SPACE])),
    ("loose_spaces", _pairs([SPACE], [DIGIT, BOUNDARY, BLANK, NEWLINE])),
    ("newlines", _pairs(_ALL, [NEWLINE])),
    ("newline_runs", _pairs([c for c in _ALL if c != NEWLINE], [NEWLINE])),
    ("indents", _pairs([NEWLINE], [SPACE, BLANK])),
    ("punct_to_newline", _pairs([PUNCT], [NEWLINE])),
    ("blanks", _pairs(_ALL, [BLANK])),
    ("punct", _pairs(_ALL, [PUNCT])),
    ("punct_runs", _pairs([c for c in _ALL if c != PUNCT], [PUNCT])),
    ("punct_to_letter", _pairs([PUNCT], _CASED)),
    ("space_to_punct", _pairs([SPACE], [PUNCT])),
    ("digit_punct_switches", _pairs([DIGIT], [PUNCT]) + _pairs([PUNCT], [DIGIT])),
    ("latin", _pairs(_ALL, [LATIN])),
    ("symbols", _pairs(_ALL, [SYMBOL])),
    ("han", _pairs(_ALL, [HAN])),
    ("kana", _pairs(_ALL, [KANA])),
    ("hangul", _pairs(_ALL, [HANGUL])),
    ("cjk_runs", _pairs([c for c in _ALL if c not in (HAN, KANA, HANGUL)], [HAN, KANA, HANGUL])),
    ("cjk_punct", _pairs(_ALL, [CJK_PUNCT])),
    ("other", _pairs(_ALL, [OTHER])),
    ("astral", _pairs(_ALL, [ASTRAL])),
    ("repeated_spaces", _repeats([SPACE, BLANK])),
    ("repeated_punct", _repeats([PUNCT])),
    ("repeated_symbols", _repeats([SYMBOL, OTHER, CJK_PUNCT, ASTRAL])),
    ("repeated_letters", _repeats([LOWER, UPPER, LATIN, HAN, KANA, HANGUL])),
)

FEATURE_NAMES: tuple[str, ...] = ("digit_tokens",) + tuple(name for name, _ in _FEATURE_PAIRS)


def _scan(text: str) -> tuple[list[int], int]:
    """Count the class pairs of ``text`` and its ASCII digit tokens in one pass (the hot loop).

    Returns:
        ``(pairs, digit_tokens)``: the 2 x 16 x 16 pair table, flattened as
        ``[same][previous class][class]`` where ``same`` is 1 when the character repeats the
        previous one, and ``sum(ceil(len(run) / 3))`` over the runs of ASCII digits.
    """
    pairs = [0] * (2 * N_CLASSES * N_CLASSES)
    digit_tokens = 0
    phase = 0
    prev = BOUNDARY
    prev_cp = -1
    for ch in text:
        cp = ord(ch)
        cls = _ASCII_CLASSES[cp] if cp < 128 else char_class(cp)
        if cls == DIGIT:
            if prev != DIGIT:
                phase = 0
            if phase == 0:
                digit_tokens += 1
            phase += 1
            if phase == 3:
                phase = 0
        same = 1 if cp == prev_cp else 0
        pairs[same * N_CLASSES * N_CLASSES + prev * N_CLASSES + cls] += 1
        prev = cls
        prev_cp = cp
    pairs[prev * N_CLASSES + BOUNDARY] += 1
    return pairs, digit_tokens


def text_features(text: str) -> tuple[float, ...]:
    """Return the estimator's features of ``text``, in :data:`FEATURE_NAMES` order.

    Args:
        text: any ``str``.

    Returns:
        One float per name in :data:`FEATURE_NAMES` (counts of characters or class pairs).

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text_features() expected a str, got {type(text).__name__}; decode bytes first")
    pairs, digit_tokens = _scan(text)
    features = [float(digit_tokens)]
    for _name, cells in _FEATURE_PAIRS:
        total = 0
        for cell in cells:
            total += pairs[cell]
        features.append(float(total))
    return tuple(features)


def _coefficients(encoding: str) -> tuple[float, ...]:
    """Return the fitted coefficients of ``encoding``, in :data:`FEATURE_NAMES` order."""
    if _FITTED_FEATURE_NAMES != FEATURE_NAMES:
        raise EncodingDataMissing(
            "compaction.tokens.estimator_coefficients was fitted for other features than "
            "FEATURE_NAMES; run scripts/fit_estimator.py to refit it"
        )
    try:
        return COEFFICIENTS[encoding]
    except KeyError:
        known = ", ".join(sorted(COEFFICIENTS))
        raise EncodingDataMissing(
            f"no estimator coefficients for encoding {encoding!r}; expected one of: {known}"
        ) from None


def estimate_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Estimate how many tokens ``encoding`` would make of ``text``, without tokenizing it.

    Args:
        text: any ``str``; special tokens are treated as ordinary text.
        encoding: ``"o200k_base"`` (default) or ``"cl100k_base"``.

    Returns:
        The estimated token count (tokens), ``>= 0``; exact for a text of ASCII digits only.
        The error measured on held-out text is in
        ``compaction.tokens.estimator_coefficients.HELD_OUT_MAPE``.

    Raises:
        TypeError: ``text`` is not a ``str``.
        EncodingDataMissing: no coefficients for ``encoding``.

    Example:
        >>> estimate_tokens("1234567")
        3
    """
    coefficients = _coefficients(encoding)
    features = text_features(text)
    total = 0.0
    for coefficient, feature in zip(coefficients, features, strict=True):
        total += coefficient * feature
    if total <= 0.0:
        return 0
    return int(total + 0.5)
