"""Estimate the BPE token count of a text in one pass, without tokenizing it (compiled).

The compiled twin of ``compaction/tokens/_estimate_py.py``, which documents the algorithm and is
the specification: same names, same order, same error messages, same features and the same
integer estimate for every ``str``.  The pass over the text (``_scan``) reads the code points
straight from the string's PEP 393 buffer (1, 2 or 4 bytes a character) without creating a
Python object per character, into a C pair table; the features are summed from that table in C
and the estimate is the same double sums, in the same order, with the coefficients of each
encoding converted once into a C array (``_CoefficientVector``), so that a message-sized text
costs no Python object per cell or per feature.  Directives are in ``setup.py``.
"""

import array
from collections.abc import Iterable

from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromDouble
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.string cimport memset

from ..errors import EncodingDataMissing
from .estimator_coefficients import COEFFICIENTS
from .estimator_coefficients import FEATURE_NAMES as _FITTED_FEATURE_NAMES

cdef extern from "Python.h":
    int PyUnicode_KIND(object text)
    void* PyUnicode_DATA(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND
    ctypedef unsigned char Py_UCS1
    ctypedef unsigned short Py_UCS2

__all__ = ["estimate_tokens", "text_features", "char_class", "FEATURE_NAMES", "N_CLASSES"]

cdef enum:
    C_BOUNDARY = 0
    C_DIGIT = 3
    C_N_CLASSES = 16
    C_HALF = 256  # C_N_CLASSES * C_N_CLASSES: one half of the pair table
    C_TABLE = 512  # both halves
    C_MAX_FEATURES = 64  # room for FEATURE_NAMES (checked below)
    C_SHORT = 128  # shorter texts skip the four table copies of _scan_units (one table)

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


_ASCII_CLASSES = tuple(_ascii_class(cp) for cp in range(128))


cdef unsigned char _c_ascii_classes[128]
cdef unsigned char _c_latin1_classes[256]


cdef inline unsigned char _c_char_class(Py_UCS4 cp) noexcept nogil:
    # keep in step with char_class() below (the same chain of tests)
    if cp < 128:
        return _c_ascii_classes[cp]
    if cp < 0x800:
        if cp == 0x85 or cp == 0xA0:
            return 6  # BLANK
        if cp < 0xC0 or cp == 0xD7 or cp == 0xF7:
            return 9  # SYMBOL
        return 8  # LATIN
    if cp < 0x10000:
        if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF:
            return 10  # HAN
        if 0x3040 <= cp <= 0x30FF or 0x31F0 <= cp <= 0x31FF or 0xFF66 <= cp <= 0xFF9F:
            return 11  # KANA
        if 0xAC00 <= cp <= 0xD7AF or 0x1100 <= cp <= 0x11FF or 0x3130 <= cp <= 0x318F:
            return 12  # HANGUL
        if cp == 0x3000 or cp == 0x1680 or 0x2000 <= cp <= 0x200A or 0x2028 <= cp <= 0x2029:
            return 6  # BLANK
        if cp == 0x202F or cp == 0x205F:
            return 6  # BLANK
        if 0x3001 <= cp <= 0x303F or 0xFF00 <= cp <= 0xFF65 or 0xFE30 <= cp <= 0xFE4F:
            return 13  # CJK_PUNCT
        return 14  # OTHER
    if 0x20000 <= cp <= 0x3FFFF:
        return 10  # HAN
    return 15  # ASTRAL


def char_class(cp: int) -> int:
    """Return the character class (``LOWER`` ... ``ASTRAL``) of the code point ``cp``."""
    if cp < 0 or cp > 0x10FFFF:
        raise ValueError(f"char_class() expected a code point in 0..0x10FFFF, got {cp}")
    return _c_char_class(<Py_UCS4>cp)


cdef int _i
for _i in range(128):
    _c_ascii_classes[_i] = _ASCII_CLASSES[_i]
for _i in range(256):
    _c_latin1_classes[_i] = _c_char_class(<Py_UCS4>_i)

# _c_digit_steps[phase * 16 + mask]: four characters at once of the digit phase of _scan().
# ``mask`` has bit k set when character k of the four is an ASCII digit; ``phase`` is the
# position modulo 3 of the next digit in the current run (0 after any other class).  The
# entry is ``tokens << 2 | new_phase``.
cdef unsigned char _c_digit_steps[48]
cdef int _phase, _mask, _k, _p, _tokens
for _phase in range(3):
    for _mask in range(16):
        _p = _phase
        _tokens = 0
        for _k in range(4):
            if _mask & (1 << _k):
                if _p == 0:
                    _tokens += 1
                _p = (_p + 1) % 3
            else:
                _p = 0
        _c_digit_steps[_phase * 16 + _mask] = (_tokens << 2) | _p


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
_FEATURE_PAIRS = (
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

FEATURE_NAMES = ("digit_tokens",) + tuple(name for name, _ in _FEATURE_PAIRS)


ctypedef fused _code_unit:
    Py_UCS1
    Py_UCS2
    Py_UCS4


cdef inline unsigned char _unit_class(Py_UCS4 cp) noexcept nogil:
    if cp < 256:
        return _c_latin1_classes[cp]
    return _c_char_class(cp)


cdef Py_ssize_t _scan_units(const _code_unit* data, Py_ssize_t length, Py_ssize_t* pairs) noexcept nogil:
    # The hot loop of _scan() for one PEP 393 kind; returns digit_tokens, adds into pairs.
    # Four characters a step, each counted into its own copy of the pair table (``pairs``
    # itself and three more) so that runs of one class (a long word: the same cell again and
    # again) do not serialize on one counter.  The digit phase of the twin (position in the
    # digit run modulo 3, reset by any other class) advances four characters at once through
    # _c_digit_steps; the last characters go one at a time, exactly as in the twin.  A text
    # shorter than C_SHORT goes one character at a time into ``pairs`` only: clearing and
    # adding up the three other copies would cost more than the whole pass.
    cdef Py_ssize_t copies[3 * C_TABLE]
    cdef Py_ssize_t* t0 = pairs
    cdef Py_ssize_t* t1 = copies
    cdef Py_ssize_t* t2 = copies + C_TABLE
    cdef Py_ssize_t* t3 = copies + 2 * C_TABLE
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t j
    cdef Py_ssize_t digit_tokens = 0
    cdef int phase = 0
    cdef int prev = C_BOUNDARY
    cdef int cls, c0, c1, c2, c3
    cdef Py_UCS4 prev_cp = 0xFFFFFFFF  # no code point: the first character repeats nothing
    cdef Py_UCS4 cp, p0, p1, p2, p3
    cdef unsigned char step
    cdef bint unrolled = length >= C_SHORT
    if unrolled:
        memset(copies, 0, sizeof(copies))
        while i + 4 <= length:
            p0 = data[i]
            p1 = data[i + 1]
            p2 = data[i + 2]
            p3 = data[i + 3]
            c0 = _unit_class(p0)
            c1 = _unit_class(p1)
            c2 = _unit_class(p2)
            c3 = _unit_class(p3)
            step = _c_digit_steps[phase * 16 + (c0 == C_DIGIT) + 2 * (c1 == C_DIGIT)
                                  + 4 * (c2 == C_DIGIT) + 8 * (c3 == C_DIGIT)]
            digit_tokens += step >> 2
            phase = step & 3
            t0[(p0 == prev_cp) * C_HALF + prev * C_N_CLASSES + c0] += 1
            t1[(p1 == p0) * C_HALF + c0 * C_N_CLASSES + c1] += 1
            t2[(p2 == p1) * C_HALF + c1 * C_N_CLASSES + c2] += 1
            t3[(p3 == p2) * C_HALF + c2 * C_N_CLASSES + c3] += 1
            prev = c3
            prev_cp = p3
            i += 4
    while i < length:
        cp = data[i]
        cls = _unit_class(cp)
        if cls == C_DIGIT:
            if prev != C_DIGIT:
                phase = 0
            if phase == 0:
                digit_tokens += 1
            phase += 1
            if phase == 3:
                phase = 0
        t0[(cp == prev_cp) * C_HALF + prev * C_N_CLASSES + cls] += 1
        prev = cls
        prev_cp = cp
        i += 1
    t0[prev * C_N_CLASSES + C_BOUNDARY] += 1
    if unrolled:
        for j in range(C_TABLE):
            pairs[j] += t1[j] + t2[j] + t3[j]
    return digit_tokens


cdef Py_ssize_t _c_scan(object text, Py_ssize_t* pairs) noexcept:
    # _scan() into a C table: zeroes ``pairs`` (C_TABLE cells), fills it, returns digit_tokens.
    cdef Py_ssize_t digit_tokens
    cdef Py_ssize_t length = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    memset(pairs, 0, C_TABLE * sizeof(Py_ssize_t))
    with nogil:
        if kind == PyUnicode_1BYTE_KIND:
            digit_tokens = _scan_units(<const Py_UCS1*>data, length, pairs)
        elif kind == PyUnicode_2BYTE_KIND:
            digit_tokens = _scan_units(<const Py_UCS2*>data, length, pairs)
        else:
            digit_tokens = _scan_units(<const Py_UCS4*>data, length, pairs)
    return digit_tokens


# The cells of _FEATURE_PAIRS as C arrays: feature k (k >= 1) is the sum of the cells
# _c_cells[_c_cell_ends[k - 1] : _c_cell_ends[k]] (_c_cell_ends[0] == 0).
cdef Py_ssize_t _c_n_features = len(FEATURE_NAMES)
if _c_n_features > C_MAX_FEATURES:
    raise ImportError(f"_estimate_c has room for {C_MAX_FEATURES} features, not {_c_n_features}")
cdef unsigned short* _c_cells = NULL
cdef Py_ssize_t _c_cell_ends[C_MAX_FEATURES]
_C_CELLS_OWNER = array.array("H", [cell for _name, cells in _FEATURE_PAIRS for cell in cells])
cdef unsigned short[::1] _c_cells_view = _C_CELLS_OWNER
_c_cells = &_c_cells_view[0]
_c_cell_ends[0] = 0
for _k, (_name, _cells) in enumerate(_FEATURE_PAIRS):
    _c_cell_ends[_k + 1] = _c_cell_ends[_k] + len(_cells)


cdef void _c_text_features(object text, double* features) noexcept:
    # text_features() into a C array of _c_n_features doubles (text is a str or a subclass).
    cdef Py_ssize_t pairs[C_TABLE]
    cdef Py_ssize_t k, j, total
    features[0] = <double>_c_scan(text, pairs)
    for k in range(1, _c_n_features):
        total = 0
        for j in range(_c_cell_ends[k - 1], _c_cell_ends[k]):
            total += pairs[_c_cells[j]]
        features[k] = <double>total


def _scan(str text):
    """Count the class pairs of ``text`` and its ASCII digit tokens in one pass (the hot loop).

    Returns:
        ``(pairs, digit_tokens)``: the 2 x 16 x 16 pair table, flattened as
        ``[same][previous class][class]`` where ``same`` is 1 when the character repeats the
        previous one, and ``sum(ceil(len(run) / 3))`` over the runs of ASCII digits.
    """
    cdef Py_ssize_t c_pairs[C_TABLE]
    cdef Py_ssize_t digit_tokens = _c_scan(text, c_pairs)
    pairs = [c_pairs[i] for i in range(C_TABLE)]
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
    cdef double features[C_MAX_FEATURES]
    cdef Py_ssize_t k
    _c_text_features(text, features)
    result = PyTuple_New(_c_n_features)
    for k in range(_c_n_features):
        value = PyFloat_FromDouble(features[k])
        Py_INCREF(value)
        PyTuple_SET_ITEM(result, k, value)
    return result


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
    cdef _CoefficientVector vector = _c_coefficient_vectors.get(encoding)
    cdef double features[C_MAX_FEATURES]
    cdef double total = 0.0  # the same IEEE double sums in the same order as the twin's floats
    cdef volatile double product  # stored, hence rounded: never fused into total (no FMA)
    cdef Py_ssize_t k
    if vector is None:
        vector = _coefficient_vector(encoding)
        if vector is None:  # not one coefficient per feature: the twin's path and its error
            coefficients = _coefficients(encoding)
            features_tuple = text_features(text)
            py_total = 0.0
            for coefficient, feature in zip(coefficients, features_tuple, strict=True):
                py_total += coefficient * feature
            if py_total <= 0.0:
                return 0
            return int(py_total + 0.5)
    if not isinstance(text, str):
        raise TypeError(f"text_features() expected a str, got {type(text).__name__}; decode bytes first")
    _c_text_features(text, features)
    for k in range(_c_n_features):
        product = vector.values[k] * features[k]
        total += product
    if total <= 0.0:
        return 0
    return PyLong_FromDouble(total + 0.5)


cdef class _CoefficientVector:
    """The coefficients of one encoding as a C array of doubles, in FEATURE_NAMES order."""

    cdef double values[C_MAX_FEATURES]


# encoding -> _CoefficientVector, filled on the first call with each encoding
cdef dict _c_coefficient_vectors = {}


cdef _CoefficientVector _coefficient_vector(encoding):
    # Returns the cached vector of ``encoding``, raising _coefficients()'s errors; None when
    # the coefficients do not have one value per feature (left to the twin's zip error).
    cdef _CoefficientVector vector
    cdef Py_ssize_t k
    coefficients = _coefficients(encoding)
    if len(coefficients) != _c_n_features:
        return None
    vector = _CoefficientVector()
    for k in range(_c_n_features):
        vector.values[k] = coefficients[k]
    _c_coefficient_vectors[encoding] = vector
    return vector
