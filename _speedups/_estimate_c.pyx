"""Estimate the BPE token count of a text in one pass, without tokenizing it (compiled).

The compiled twin of ``compaction/tokens/_estimate_py.py``, which documents the algorithm and is
the specification: same names, same error messages, the same pair counts and the same integer
estimate for every ``str``.  The pass reads the code points straight from the string's PEP 393
buffer (1, 2 or 4 bytes a character) and adds the weight of each pair of codes from the
encoding's table (int32, fixed point) into one 64-bit integer: no Python object per character
and no floating point, so the sum is exactly the twin's.  A run of ASCII digits is consumed in
one inner loop (its internal pairs weigh 0; it costs ``ceil(n / 3)`` tokens).  The class of a
non-ASCII character of the Basic Multilingual Plane comes from a 64 KiB table built at import.
Directives are in ``setup.py``.
"""

import sys

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

from .estimator_tables import BOUNDARY, CLASS_BASE, N_CODES, REPEAT_BASE, SCALE_BITS, TRADITIONAL_HAN, weight_table

cdef extern from "Python.h":
    int PyUnicode_KIND(object text)
    void* PyUnicode_DATA(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND
    ctypedef unsigned char Py_UCS1
    ctypedef unsigned short Py_UCS2

__all__ = ["estimate_tokens", "pair_counts", "char_class", "char_code", "N_CODES", "BOUNDARY"]

cdef enum:
    C_N_CODES = 187
    C_CLASS_BASE = 128
    C_REPEAT_BASE = 157
    C_BOUNDARY = 186
    C_SCALE_BITS = 16

if (N_CODES, CLASS_BASE, REPEAT_BASE, BOUNDARY, SCALE_BITS) != (
    C_N_CODES, C_CLASS_BASE, C_REPEAT_BASE, C_BOUNDARY, C_SCALE_BITS
):
    raise ImportError("_estimate_c was built for another code space than compaction.tokens.estimator_tables")

# Character classes, as in the twin.
cdef enum:
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


cdef inline uint8_t _ascii_class(Py_UCS4 cp) noexcept nogil:
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


cdef uint8_t _c_char_class(Py_UCS4 cp) noexcept nogil:
    # keep in step with char_class() of the twin (the same chain of tests; its
    # HAN_TRADITIONAL test is written into the tables built below)
    if cp < 128:
        return _ascii_class(cp)
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


cdef uint8_t _bmp_class[65536]  # char class of every code point below 0x10000
cdef uint8_t _bmp_code[65536]  # its code (not repeating the character before it)
cdef Py_ssize_t _cp
for _cp in range(65536):
    _bmp_class[_cp] = _c_char_class(<Py_UCS4>_cp)
    _bmp_code[_cp] = _cp if _cp < 128 else C_CLASS_BASE + _bmp_class[_cp]
for _ch in TRADITIONAL_HAN:  # the twin's ``cp in _TRADITIONAL_HAN`` test, as table entries
    _bmp_class[ord(_ch)] = HAN_TRADITIONAL
    _bmp_code[ord(_ch)] = C_CLASS_BASE + HAN_TRADITIONAL


cdef inline uint8_t _class_of(Py_UCS4 cp) noexcept nogil:
    if cp < 65536:
        return _bmp_class[cp]
    return _c_char_class(cp)


cdef inline unsigned int _code_of(unsigned int cp, unsigned int prev_cp) noexcept nogil:
    # char_code() of the twin: the code from _bmp_code, moved up by REPEAT_BASE - CLASS_BASE
    # for a non-ASCII character repeating the one before it (without a branch: mixed text such
    # as CJK with ASCII punctuation would mispredict it)
    cdef unsigned int code = _bmp_code[cp] if cp < 65536 else C_CLASS_BASE + _c_char_class(cp)
    return code + ((cp == prev_cp) & (cp >= 128)) * (C_REPEAT_BASE - C_CLASS_BASE)


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
    return _class_of(<Py_UCS4>cp)


def char_code(cp: int, prev_cp: int = -1) -> int:
    """Return the code of the character ``cp`` when it follows the character ``prev_cp``.

    Raises:
        ValueError: ``cp`` is not in ``0..0x10FFFF``.
    """
    if not isinstance(cp, int):
        raise TypeError(f"char_code() expected an int code point, got {type(cp).__name__}")
    if 0 <= cp < 128:
        return cp
    return (C_REPEAT_BASE if cp == prev_cp else C_CLASS_BASE) + char_class(cp)


ctypedef fused _unit:
    Py_UCS1
    Py_UCS2
    Py_UCS4


# _steps8[phase * 256 + mask]: eight characters at once of the digit phase.  ``mask`` has bit k
# set when character k of the eight is an ASCII digit; ``phase`` is the position modulo 3 of the
# next digit in the current run (0 after any other character): a digit at phase 0 starts a
# token.  The entry is ``tokens << 2 | new_phase``.
cdef uint8_t _steps8[3 * 256]


def _fill_steps():
    cdef int phase, mask, k, p, tokens
    for phase in range(3):
        for mask in range(256):
            p = phase
            tokens = 0
            for k in range(8):
                if mask & (1 << k):
                    if p == 0:
                        tokens += 1
                    p = (p + 1) % 3
                else:
                    p = 0
            _steps8[phase * 256 + mask] = (tokens << 2) | p


_fill_steps()

# The blocks below read several characters as one little-endian 64-bit word (SWAR): on a
# big-endian machine every character goes the one-at-a-time way.
cdef bint _little_endian = sys.byteorder == "little"

cdef inline uint64_t _load64(const void* p) noexcept nogil:
    cdef uint64_t x
    memcpy(&x, p, 8)
    return x


# Per byte lane holding an ASCII character v: bit 7 of (v + 0x50) is set when v >= 0x30 ("0")
# and bit 7 of (v + 0x46) when v >= 0x3A (past "9"); no lane carries into the next since
# v < 0x80.  A multiplication then gathers bit 7 of each lane into a mask whose bit k is lane k
# (every partial product lands on its own bit, so nothing carries).  Two- and four-byte
# strings are packed into byte lanes first (_sum_units).
cdef inline unsigned int _digit_mask8(uint64_t x) noexcept nogil:
    # eight 8-bit lanes, all < 0x80 -> bit k set when lane k is an ASCII digit
    cdef uint64_t bits = (x + 0x5050505050505050ULL) & ~(x + 0x4646464646464646ULL) & 0x8080808080808080ULL
    return <unsigned int>(((bits >> 7) * 0x0102040810204080ULL) >> 56)


cdef inline int64_t _pairs8(const int32_t* w, Py_ssize_t row, unsigned int c0, unsigned int c1,
                            unsigned int c2, unsigned int c3, unsigned int c4, unsigned int c5,
                            unsigned int c6, unsigned int c7) noexcept nogil:
    return ((<int64_t>w[row + c0] + w[c0 * C_N_CODES + c1])
            + (<int64_t>w[c1 * C_N_CODES + c2] + w[c2 * C_N_CODES + c3])
            + (<int64_t>w[c3 * C_N_CODES + c4] + w[c4 * C_N_CODES + c5])
            + (<int64_t>w[c5 * C_N_CODES + c6] + w[c6 * C_N_CODES + c7]))


cdef int64_t _sum_units(const _unit* s, Py_ssize_t n, const int32_t* w, Py_ssize_t* digits) noexcept nogil:
    # The pass of estimate_tokens(): the sum of the weights of every pair of codes, boundaries
    # included (a digit next to a digit or a boundary weighs 0 in every table); adds the digit
    # tokens into ``digits``.  A block of eight ASCII characters (most of an agent's text) goes
    # at once with no branch inside, its digits advancing the digit phase through _steps8; any
    # other character goes alone, exactly as in the twin.
    cdef int64_t total = 0
    cdef Py_ssize_t row = C_BOUNDARY * C_N_CODES
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t end
    cdef Py_ssize_t d = 0
    cdef unsigned int phase = 0
    cdef unsigned int step
    cdef uint64_t x, y, z, v, packed
    cdef unsigned int cp, code, c7
    cdef unsigned int prev_cp = 0xFFFFFFFF  # no code point: the first character repeats nothing
    while True:
        if _little_endian:
            while i + 8 <= n:
                # the next eight characters as eight bytes of one word, or stop at a non-ASCII one
                if _unit is Py_UCS1:
                    packed = _load64(s + i)
                    if packed & 0x8080808080808080ULL:
                        break
                elif _unit is Py_UCS2:
                    x = _load64(s + i)
                    y = _load64(s + i + 4)
                    if (x | y) & 0xFF80FF80FF80FF80ULL:
                        break
                    x = (x | (x >> 8)) & 0x0000FFFF0000FFFFULL
                    y = (y | (y >> 8)) & 0x0000FFFF0000FFFFULL
                    packed = ((x | (x >> 16)) & 0xFFFFFFFFULL) | ((y | (y >> 16)) << 32)
                else:
                    x = _load64(s + i)
                    y = _load64(s + i + 2)
                    z = _load64(s + i + 4)
                    v = _load64(s + i + 6)
                    if (x | y | z | v) & 0xFFFFFF80FFFFFF80ULL:
                        break
                    packed = (((x | (x >> 24)) & 0xFFFFULL) | (((y | (y >> 24)) & 0xFFFFULL) << 16)
                              | (((z | (z >> 24)) & 0xFFFFULL) << 32) | (((v | (v >> 24)) & 0xFFFFULL) << 48))
                step = _steps8[phase * 256 + _digit_mask8(packed)]
                d += step >> 2
                phase = step & 3
                c7 = s[i + 7]  # (a Py_UCS4 is no C integer to Cython: copy before arithmetic)
                total += _pairs8(w, row, s[i], s[i + 1], s[i + 2], s[i + 3], s[i + 4], s[i + 5], s[i + 6], c7)
                row = c7 * C_N_CODES
                prev_cp = c7
                i += 8
        if i >= n:
            break
        # the next eight characters (or the rest) one at a time: the block stopped at one of
        # them, and in mixed text (CJK with ASCII punctuation) a block would stop again soon
        end = i + 8 if i + 8 < n else n
        while i < end:
            cp = s[i]
            code = _code_of(cp, prev_cp)
            if cp - 48 < 10:
                d += phase == 0
                phase = phase + 1 if phase < 2 else 0
            else:
                phase = 0
            total += w[row + code]
            row = code * C_N_CODES
            prev_cp = cp
            i += 1
    digits[0] += d
    return total + w[row + C_BOUNDARY]


cdef class _Table:
    """One encoding's weight table, held alive with a pointer to its ``N_CODES ** 2`` int32."""

    cdef object owner
    cdef const int32_t* weights


cdef dict _tables = {}


cdef _Table _table(encoding):
    cdef _Table table = _tables.get(encoding)
    cdef const int32_t[::1] view
    if table is None:
        owner = weight_table(encoding)  # raises EncodingDataMissing
        view = owner
        table = _Table()
        table.owner = owner
        table.weights = &view[0]
        _tables[encoding] = table
    return table


def estimate_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Estimate how many tokens ``encoding`` would make of ``text``, without tokenizing it.

    Args:
        text: any ``str``; special tokens are treated as ordinary text.
        encoding: ``"o200k_base"`` (default) or ``"cl100k_base"``.

    Returns:
        The estimated token count (tokens): 0 for ``""``, else ``>= 1``; exact for a text of
        ASCII digits only.

    Raises:
        TypeError: ``text`` is not a ``str``.
        EncodingDataMissing: no weight table for ``encoding``, or its file is damaged.
    """
    cdef _Table table = _table(encoding)
    if not isinstance(text, str):
        raise TypeError(f"pair_counts() expected a str, got {type(text).__name__}; decode bytes first")
    cdef const int32_t* w = table.weights
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t digits = 0
    cdef int64_t total
    if kind == PyUnicode_1BYTE_KIND:
        total = _sum_units(<const Py_UCS1*>data, n, w, &digits)
    elif kind == PyUnicode_2BYTE_KIND:
        total = _sum_units(<const Py_UCS2*>data, n, w, &digits)
    else:
        total = _sum_units(<const Py_UCS4*>data, n, w, &digits)
    total += (<int64_t>digits) << C_SCALE_BITS
    if n == 0:
        return 0
    if total < 0:
        total = 0
    total = (total + (1 << (C_SCALE_BITS - 1))) >> C_SCALE_BITS
    return total if total > 1 else 1


cdef Py_ssize_t _count_units(const _unit* s, Py_ssize_t n, Py_ssize_t* counts) noexcept nogil:
    # pair_counts() of the twin, pair by pair (no digit-run shortcut); returns digit_tokens.
    cdef Py_ssize_t i
    cdef Py_ssize_t digits = 0
    cdef Py_ssize_t run = 0
    cdef Py_ssize_t prev = C_BOUNDARY
    cdef unsigned int cp
    cdef unsigned int prev_cp = 0xFFFFFFFF
    cdef Py_ssize_t code
    for i in range(n):
        cp = s[i]
        code = _code_of(cp, prev_cp)
        if 48 <= code <= 57:
            if run % 3 == 0:
                digits += 1
            run += 1
        else:
            run = 0
        counts[prev * C_N_CODES + code] += 1
        prev = code
        prev_cp = cp
    counts[prev * C_N_CODES + C_BOUNDARY] += 1
    return digits


def pair_counts(text: str) -> tuple[int, dict[int, int]]:
    """Count the code pairs of ``text`` and its ASCII digit tokens in one pass.

    Returns:
        ``(digit_tokens, {previous * N_CODES + current: count})``, as the twin.

    Raises:
        TypeError: ``text`` is not a ``str``.
        MemoryError: no room for the ``N_CODES ** 2`` counters.
    """
    if not isinstance(text, str):
        raise TypeError(f"pair_counts() expected a str, got {type(text).__name__}; decode bytes first")
    cdef Py_ssize_t* counts = <Py_ssize_t*>calloc(C_N_CODES * C_N_CODES, sizeof(Py_ssize_t))
    if counts == NULL:
        raise MemoryError("pair_counts() could not allocate its pair table")
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t digits, cell
    try:
        if kind == PyUnicode_1BYTE_KIND:
            digits = _count_units(<const Py_UCS1*>data, n, counts)
        elif kind == PyUnicode_2BYTE_KIND:
            digits = _count_units(<const Py_UCS2*>data, n, counts)
        else:
            digits = _count_units(<const Py_UCS4*>data, n, counts)
        result = {}
        for cell in range(C_N_CODES * C_N_CODES):
            if counts[cell]:
                result[cell] = counts[cell]
        return digits, result
    finally:
        free(counts)
