"""Count the exact BPE tokens of a text: pre-tokenize, then a memo of piece counts (compiled).

The compiled twin of ``compaction/tokens/_count_py.py``, which documents the algorithm and is
the specification: same names, same order, same error messages, the same pieces and the same
count for every ``str``.  Only the pass over the text is native, one call per text: a
hand-written scanner reproduces each alternative of the ``o200k_base`` and ``cl100k_base``
split patterns (leftmost-first alternation, greedy and possessive quantifiers, the ``(?!\\S)``
look-ahead, as tiktoken's ``fancy-regex`` applies them) on the string's PEP 393 buffer, with the
character classes of ``compaction/tokens/_unicode_tables.py`` in a two-level table (in ASCII
text, 63 characters at a time from bit masks of their classes: see "blocks" below), and looks
each piece up in a C hash table keyed by its code points (an ASCII piece of at most
``MAX_TOKEN_PIECE`` characters first in the rank table: one that is a token counts 1, and one of
at most ``MAX_MERGELESS_PIECE`` is counted from its pairs, neither remembered, as in the twin; the
code points of one of at most 8, packed in 64 bits, are its UTF-8 bytes, so this is one memory
access).  A piece the memo does not hold is
counted by a native byte-pair merge loop (tiktoken's algorithm: see ``_bpe_count``) on the
encoding's ranks, read from the checked rank file (``rank_file``) straight into a C table:
the compiled counter builds no Python dict of the ranks and no tiktoken encoder (the twin asks
tiktoken for each missed piece).  Once a process has counted 1 MB of long misses, they are
counted without merging, by backtracking over each token's split (``_backtrack_count``, whose
specification is the twin's ``BacktrackingBPE``).  Directives are in ``setup.py``.
"""

import threading

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

from ..errors import EncodingDataMissing
from ._unicode_tables import LOWER, MARK, NUMBER, OTHER_LETTER, SPACE, UPPER, class_table
from .encodings import get_encoding, rank_file

cdef extern from "Python.h":
    int PyUnicode_KIND(object text)
    void* PyUnicode_DATA(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND
    ctypedef unsigned char Py_UCS1
    ctypedef unsigned short Py_UCS2
    object PyUnicode_Substring(object text, Py_ssize_t start, Py_ssize_t end)
    object PyUnicode_AsUTF8String(object text)

__all__ = ["PieceCounter", "count_tokens", "ENCODING_NAMES", "DEFAULT_MEMO_SIZE", "MAX_MEMO_PIECE",
           "MAX_MEMO_CHARS", "MAX_TOKEN_PIECE", "MAX_MERGELESS_PIECE"]

ENCODING_NAMES = ("cl100k_base", "o200k_base")
DEFAULT_MEMO_SIZE = 1 << 18
MAX_MEMO_PIECE = 4096
MAX_MEMO_CHARS = 1 << 22
MAX_TOKEN_PIECE = 16
MAX_MERGELESS_PIECE = 3

# --------------------------------------------------------------------------- character classes

# Flags of a code point, what the two patterns test.
cdef enum:
    F_UPPER = 1      # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]  (o200k's first letter set)
    F_LOWER = 2      # [\p{Ll}\p{Lm}\p{Lo}\p{M}]        (o200k's second letter set)
    F_LETTER = 4     # \p{L}
    F_NUMBER = 8     # \p{N}
    F_SPACE = 16     # \s
    F_NEWLINE = 32   # [\r\n]
    C_MAX_MEMO_PIECE = 4096
    C_MAX_MEMO_CHARS = 1 << 22
    C_SMALL_PIECE = 64     # a miss this short is encoded on the stack
    PACKED = 0x8000        # _Slot.shape: ``key`` holds the code points themselves
    C_MAX_TOKEN_PIECE = 16  # MAX_TOKEN_PIECE

_CLASS_FLAGS = {
    UPPER: F_UPPER | F_LETTER,
    LOWER: F_LOWER | F_LETTER,
    OTHER_LETTER: F_UPPER | F_LOWER | F_LETTER,
    MARK: F_UPPER | F_LOWER,
    NUMBER: F_NUMBER,
    SPACE: F_SPACE,
}

cdef uint8_t _latin1[256]
cdef uint16_t _stage1[0x1100]      # code point >> 8 -> block
cdef uint8_t* _stage2 = NULL       # block * 256 + (code point & 0xFF) -> flags


def _build_flag_tables():
    """Fill the two-level flag table from _unicode_tables (once, at import)."""
    global _stage2
    classes = class_table()
    flags = bytes(_CLASS_FLAGS.get(cls, 0) for cls in range(256))
    flat = bytearray(classes.translate(flags))
    flat[10] |= F_NEWLINE
    flat[13] |= F_NEWLINE
    blocks = {}
    order = []
    for high in range(0x1100):
        block = bytes(flat[high << 8 : (high + 1) << 8])
        index = blocks.get(block)
        if index is None:
            index = blocks[block] = len(order)
            order.append(block)
        _stage1[high] = index
    data = b"".join(order)
    _stage2 = <uint8_t*>calloc(len(data), 1)
    if _stage2 == NULL:
        raise MemoryError()
    memcpy(_stage2, <const char*>data, len(data))
    for cp in range(256):
        _latin1[cp] = flat[cp]


_build_flag_tables()


ctypedef fused _unit:
    Py_UCS1
    Py_UCS2
    Py_UCS4


cdef inline uint8_t _flags(const _unit* s, Py_ssize_t i) noexcept nogil:
    cdef uint32_t cp = s[i]
    if _unit is Py_UCS1:
        return _latin1[cp]
    else:
        if cp < 256:
            return _latin1[cp]
        return _stage2[(<uint32_t>_stage1[cp >> 8] << 8) | (cp & 0xFF)]


cdef inline bint _prefix(uint8_t f) noexcept nogil:
    # [^\r\n\p{L}\p{N}]
    return not (f & (F_NEWLINE | F_LETTER | F_NUMBER))


cdef inline bint _symbol(uint8_t f) noexcept nogil:
    # [^\s\p{L}\p{N}]
    return not (f & (F_SPACE | F_LETTER | F_NUMBER))


cdef inline uint32_t _fold(uint32_t cp) noexcept nogil:
    # simple case folding, as far as the contractions need it
    if 65 <= cp <= 90:
        return cp + 32
    if cp == 0x17F:  # LATIN SMALL LETTER LONG S folds to s
        return 115
    return cp


cdef inline Py_ssize_t _o200k_contraction(const _unit* s, Py_ssize_t e, Py_ssize_t n) noexcept nogil:
    # length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at e, 0 if none
    cdef uint32_t c1, c2
    if e + 1 >= n or s[e] != 39:
        return 0
    c1 = _fold(s[e + 1])
    if c1 == 115 or c1 == 116 or c1 == 109 or c1 == 100:  # s t m d
        return 2
    if e + 2 < n:
        c2 = _fold(s[e + 2])
        if (c1 == 114 or c1 == 118) and c2 == 101:  # re ve
            return 3
        if c1 == 108 and c2 == 108:  # ll
            return 3
    return 0


cdef inline Py_ssize_t _cl100k_contraction(const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # length of '(?i:[sdmt]|ll|ve|re) at i, 0 if none
    return _o200k_contraction(s, i, n)  # the same set of suffixes, in the same order of length


cdef extern from *:
    """
    #if defined(_MSC_VER)
    #include <intrin.h>
    static __inline int _count_c_ctz64(unsigned long long x) {
        unsigned long i; _BitScanForward64(&i, x); return (int)i;
    }
    #define _COUNT_C_LITTLE_ENDIAN 1
    #else
    #define _count_c_ctz64(x) __builtin_ctzll(x)
    #define _COUNT_C_LITTLE_ENDIAN (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
    #endif
    #define _COUNT_C_HIGH_BITS 0x8080808080808080ULL
    #define _COUNT_C_LOW_BITS 0x0101010101010101ULL
    """
    uint64_t HIGH_BITS "_COUNT_C_HIGH_BITS"
    uint64_t LOW_BITS "_COUNT_C_LOW_BITS"
    int _count_c_ctz64(uint64_t x) noexcept nogil
    bint _COUNT_C_LITTLE_ENDIAN


cdef inline Py_ssize_t _ascii_run(const _unit* s, Py_ssize_t e, Py_ssize_t n, uint64_t lo,
                                  uint64_t hi) noexcept nogil:
    # Past the run of ASCII characters in [lo, hi] (32 <= lo, hi < 128) from e, eight at a time
    # (SWAR) in a 1-byte string on a little-endian host, the last fewer than eight copied after
    # zeros (no zero is in [lo, hi]); elsewhere e itself, and the caller's loop of flag tests
    # goes on from there.  A character loop's exit is a branch the predictor mostly misses; this
    # loop mostly runs once.
    cdef uint64_t w, x, m
    if _unit is Py_UCS1:
        if _COUNT_C_LITTLE_ENDIAN:
            while True:
                if e + 8 <= n:
                    memcpy(&w, s + e, 8)
                elif e < n:
                    w = 0
                    memcpy(&w, s + e, n - e)
                else:
                    return e
                x = w | HIGH_BITS
                # high bit of each byte: b >= lo, and not b >= hi + 1, and b < 128
                m = (x - lo * LOW_BITS) & ~(x - (hi + 1) * LOW_BITS) & ~w & HIGH_BITS
                if m != HIGH_BITS:
                    return e + (_count_c_ctz64(m ^ HIGH_BITS) >> 3)
                e += 8
    return e


cdef inline Py_ssize_t _run_end(const _unit* s, Py_ssize_t e, Py_ssize_t n, uint64_t lo, uint64_t hi,
                                uint8_t flag) noexcept nogil:
    # Past the run of characters with ``flag`` from e; [lo, hi]: the ASCII characters that have
    # it (A-Z for F_UPPER, a-z for F_LOWER).  In a 1-byte string on a little-endian host the
    # ASCII stretches are skipped by _ascii_run to their end, so a character is looked up only
    # where it is not ASCII (a branch the predictor gets right in ASCII text).
    if _unit is Py_UCS1:
        if _COUNT_C_LITTLE_ENDIAN:
            while True:
                e = _ascii_run(s, e, n, lo, hi)
                if e < n and s[e] >= 128 and _latin1[s[e]] & flag:
                    e += 1
                else:
                    return e
    e = _ascii_run(s, e, n, lo, hi)
    while e < n and _flags(s, e) & flag:
        e += 1
    return e


cdef inline Py_ssize_t _cased_word_end(const _unit* s, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    # [A]*[B]+ from j (A = F_UPPER, B = F_LOWER), greedy with backtracking; -1 if no match
    cdef Py_ssize_t a = _run_end(s, j, n, 65, 90, F_UPPER)  # A-Z
    cdef Py_ssize_t e = _run_end(s, a, n, 97, 122, F_LOWER)  # a-z
    if e > a:
        return e
    while a > j:  # give back [A]* characters until one can start [B]+
        a -= 1
        if _flags(s, a) & F_LOWER:
            return a + 1
    return -1


cdef inline Py_ssize_t _upper_word_end(const _unit* s, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    # [A]+[B]* from j; -1 if no match
    cdef Py_ssize_t a = _run_end(s, j, n, 65, 90, F_UPPER)
    if a == j:
        return -1
    return _run_end(s, a, n, 97, 122, F_LOWER)


cdef inline Py_ssize_t _letter_run_end(const _unit* s, Py_ssize_t e, Py_ssize_t n) noexcept nogil:
    # \p{L}* from e
    cdef Py_ssize_t a
    while True:
        a = _ascii_run(s, e, n, 97, 122)
        e = _ascii_run(s, a, n, 65, 90)
        if e == a:  # neither a-z nor A-Z next: one flag test
            if e < n and _flags(s, e) & F_LETTER:
                e += 1
            else:
                return e


cdef inline Py_ssize_t _space_run_end(const _unit* s, Py_ssize_t i, Py_ssize_t n,
                                      Py_ssize_t* newline_end) noexcept nogil:
    # The end of the whitespace run from i; newline_end: one past its last [\r\n], -1 if none
    # (the end of \s*[\r\n] there)
    cdef uint8_t f
    newline_end[0] = -1
    while True:
        i = _ascii_run(s, i, n, 32, 32)  # spaces
        if i == n:
            return i
        f = _flags(s, i)
        if not f & F_SPACE:
            return i
        if f & F_NEWLINE:
            newline_end[0] = i + 1
        i += 1


cdef Py_ssize_t _o200k_piece_end(const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # The end of the piece o200k_base's pattern matches at i (i < n), alternative by alternative.
    cdef uint8_t f = _flags(s, i)
    cdef Py_ssize_t e, w
    # The common cases first, decided by the first one or two characters: alternatives 1 and 2
    # are only tried where one of them matches (one does wherever [A] or [B] is, with or
    # without a prefix before it); the general order below for the rest (a mark at i: both a
    # prefix and a letter of [A] and [B]).
    if f & (F_UPPER | F_LOWER):
        if not _prefix(f):
            # a letter at i, not a prefix: 1 or 2 without it
            e = _cased_word_end(s, i, n)
            if e < 0:
                e = _upper_word_end(s, i, n)
            return e + _o200k_contraction(s, e, n)
    elif _prefix(f):
        if i + 1 < n and _flags(s, i + 1) & (F_UPPER | F_LOWER):
            # a prefix and a letter: 1 or 2 with the prefix
            e = _cased_word_end(s, i + 1, n)
            if e < 0:
                e = _upper_word_end(s, i + 1, n)
            return e + _o200k_contraction(s, e, n)
        return _o200k_tail_end(s, i, n, f)  # neither 1 nor 2 (nor 3): [A] and [B] hold no prefix
    else:
        return _o200k_tail_end(s, i, n, f)  # a newline or a number: neither 1 nor 2
    # 1. [^\r\n\p{L}\p{N}]?[A]*[B]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
    if _prefix(f):
        e = _cased_word_end(s, i + 1, n)
        if e >= 0:
            return e + _o200k_contraction(s, e, n)
    e = _cased_word_end(s, i, n)
    if e >= 0:
        return e + _o200k_contraction(s, e, n)
    # 2. [^\r\n\p{L}\p{N}]?[A]+[B]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
    if _prefix(f):
        e = _upper_word_end(s, i + 1, n)
        if e >= 0:
            return e + _o200k_contraction(s, e, n)
    e = _upper_word_end(s, i, n)
    if e >= 0:
        return e + _o200k_contraction(s, e, n)
    return _o200k_tail_end(s, i, n, f)


cdef inline Py_ssize_t _o200k_tail_end(const _unit* s, Py_ssize_t i, Py_ssize_t n, uint8_t f) noexcept nogil:
    # Alternatives 3 to 7 of o200k_base's pattern at i, where 1 and 2 do not match.
    cdef Py_ssize_t e, w
    # 3. \p{N}{1,3}
    if f & F_NUMBER:
        e = i + 1
        while e < n and e < i + 3 and _flags(s, e) & F_NUMBER:
            e += 1
        return e
    # 4. ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
    e = i + 1 if s[i] == 32 else i
    if e < n and _symbol(_flags(s, e)):
        e += 1
        while e < n and _symbol(_flags(s, e)):
            e += 1
        while e < n and (s[e] == 13 or s[e] == 10 or s[e] == 47):
            e += 1
        return e
    # 5. \s*[\r\n]+
    w = _space_run_end(s, i, n, &e)
    if e >= 0:
        return e
    # 6. \s+(?!\S)
    if w == n or w - i >= 2:
        return w if w == n else w - 1
    # 7. \s+
    return w


cdef Py_ssize_t _cl100k_piece_end(const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # The end of the piece cl100k_base's pattern matches at i (i < n), alternative by alternative.
    cdef uint8_t f = _flags(s, i)
    cdef Py_ssize_t e, w, nl
    # 1. '(?i:[sdmt]|ll|ve|re)
    if s[i] == 39:
        e = _cl100k_contraction(s, i, n)
        if e:
            return i + e
    # 2. [^\r\n\p{L}\p{N}]?+\p{L}++
    e = i + 1 if _prefix(f) else i
    if e < n and _flags(s, e) & F_LETTER:
        return _letter_run_end(s, e + 1, n)
    # 3. \p{N}{1,3}+
    if f & F_NUMBER:
        e = i + 1
        while e < n and e < i + 3 and _flags(s, e) & F_NUMBER:
            e += 1
        return e
    # 4. ' ?[^\s\p{L}\p{N}]++[\r\n]*+'
    e = i + 1 if s[i] == 32 else i
    if e < n and _symbol(_flags(s, e)):
        e += 1
        while e < n and _symbol(_flags(s, e)):
            e += 1
        while e < n and (s[e] == 13 or s[e] == 10):
            e += 1
        return e
    # 5. \s++$
    w = _space_run_end(s, i, n, &nl)
    if w == n:
        return n
    # 6. \s*[\r\n]
    if nl >= 0:
        return nl
    # 7. \s+(?!\S)
    if w - i >= 2:
        return w - 1
    # 8. \s
    return i + 1


cdef inline Py_ssize_t _piece_end(bint cl100k, const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    if cl100k:
        return _cl100k_piece_end(s, i, n)
    return _o200k_piece_end(s, i, n)


# --------------------------------------------------------------------------- blocks of 64 characters
#
# The scanner above tests one character at a time, and a run's end is a loop exit the branch
# predictor mostly misses.  In ASCII text the pieces are found from bit masks instead: a *block*
# holds, for the 63 characters from ``start``, one 64-bit mask per ASCII character class the
# patterns test (bit p: character start + p is in the class), made 16 or 32 characters at a
# time with SSE2 or AVX2 (a portable loop elsewhere).  A run of a class from p then ends at p + ctz(~mask >> p), and
# a piece is a few such runs.  Only the ASCII classes are in the masks: a character of 128 or
# more is *unknown* (the scalar code decides it), and so is bit 63 (the character after the
# block).  A piece that starts with an ASCII character is found in the block when every
# character its alternatives examine is known, which is when the one that ends its last run is
# (a run stops at the first unknown character); otherwise the block gives no answer, and the
# piece is found by the scanner above (after moving the block to the piece where only the
# block's end was in the way).  Past the end of the text a block holds no class, as the
# patterns see it: no character (nothing for \S to match).  SSE2 is the baseline of x86-64;
# AVX2 (32 characters at a time) is used where the processor has it.

cdef extern from *:
    """
    /* (building with -DCOUNT_C_PORTABLE_BLOCKS tries the portable classifier on x86 too) */
    #if !defined(COUNT_C_PORTABLE_BLOCKS) && \\
        (defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2))
    #include <emmintrin.h>
    #define _COUNT_C_SSE2 1
    #else
    #define _COUNT_C_SSE2 0
    #endif
    #if defined(_MSC_VER)
    static __inline int _count_c_top64(unsigned long long x) {
        unsigned long i; _BitScanReverse64(&i, x); return (int)i;
    }
    #else
    #define _count_c_top64(x) (63 - __builtin_clzll(x))
    #endif

    /* The ASCII classes of 64 characters: bit q of each mask is character q's. */
    typedef struct {
        unsigned long long lower;    /* a-z */
        unsigned long long upper;    /* A-Z */
        unsigned long long digit;    /* 0-9 */
        unsigned long long space;    /* \\t \\n \\v \\f \\r and ' ' (\\s) */
        unsigned long long newline;  /* \\r \\n */
        unsigned long long slash;    /* / */
        unsigned long long other;    /* 128 or more: not classified here */
    } _count_c_classes;

    /* The portable classifier (any target; the reference of the SSE2 one). */
    #define _COUNT_C_CLASSIFY_PORTABLE(NAME, T)                                      \\
    static void NAME(const T* p, _count_c_classes* c) {                              \\
        int q;                                                                       \\
        unsigned long long bit;                                                      \\
        unsigned int x;                                                              \\
        memset(c, 0, sizeof(*c));                                                    \\
        for (q = 0; q < 64; q++) {                                                   \\
            x = p[q];                                                                \\
            bit = 1ULL << q;                                                         \\
            if (x >= 128) { c->other |= bit; continue; }                            \\
            if (x - 97u < 26u) c->lower |= bit;                                      \\
            if (x - 65u < 26u) c->upper |= bit;                                      \\
            if (x - 48u < 10u) c->digit |= bit;                                      \\
            if (x - 9u < 5u || x == 32) c->space |= bit;                             \\
            if (x == 10 || x == 13) c->newline |= bit;                               \\
            if (x == 47) c->slash |= bit;                                            \\
        }                                                                            \\
    }
    _COUNT_C_CLASSIFY_PORTABLE(_count_c_classify_portable_ucs1, Py_UCS1)
    _COUNT_C_CLASSIFY_PORTABLE(_count_c_classify_portable_ucs2, Py_UCS2)

    /* The low bytes of p[0:length] (1 <= length <= 8; eight units readable from p), the first
       in the lowest byte, zero above, in *out; 0 if one of those units is above 0xFF. */
    #if _COUNT_C_SSE2
    static const uint16_t _count_c_units_kept[16] = {
        0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0, 0, 0, 0, 0, 0, 0, 0};
    static inline int _count_c_pack_ucs2(const Py_UCS2* p, Py_ssize_t length, uint64_t* out) {
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i*)p),
                                  _mm_loadu_si128((const __m128i*)(_count_c_units_kept + 8 - length)));
        __m128i high = _mm_cmpeq_epi8(_mm_srli_epi16(v, 8), _mm_setzero_si128());
        _mm_storel_epi64((__m128i*)out, _mm_packus_epi16(v, v));
        return _mm_movemask_epi8(high) == 0xFFFF;
    }
    #else
    static inline int _count_c_pack_ucs2(const Py_UCS2* p, Py_ssize_t length, uint64_t* out) {
        uint64_t w = 0;
        unsigned int high = 0;
        Py_ssize_t k;
        for (k = 0; k < length; k++) {
            high |= p[k];
            w |= (uint64_t)(p[k] & 0xFF) << (8 * k);
        }
        *out = w;
        return high < 256;
    }
    #endif

    #if _COUNT_C_SSE2
    /* 0xFF in each byte lo <= b < lo + count (unsigned): b - lo + 128 < count - 128, signed */
    static inline __m128i _count_c_range(__m128i v, int lo, int count) {
        return _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8((char)(128 - lo))),
                              _mm_set1_epi8((char)(count - 128)));
    }
    /* the classes of 16 bytes (a byte of 128 or more: other) into bits shift to shift + 15 */
    #define _COUNT_C_CLASSIFY16(V, SHIFT) do {                                                \\
        __m128i v_ = (V);                                                                    \\
        int shift_ = (SHIFT);                                                                \\
        lower |= (unsigned long long)_mm_movemask_epi8(_count_c_range(v_, 97, 26)) << shift_; \\
        upper |= (unsigned long long)_mm_movemask_epi8(_count_c_range(v_, 65, 26)) << shift_; \\
        digit |= (unsigned long long)_mm_movemask_epi8(_count_c_range(v_, 48, 10)) << shift_; \\
        space |= (unsigned long long)_mm_movemask_epi8(_mm_or_si128(                         \\
            _count_c_range(v_, 9, 5), _mm_cmpeq_epi8(v_, _mm_set1_epi8(32)))) << shift_;      \\
        newline |= (unsigned long long)_mm_movemask_epi8(_mm_or_si128(                       \\
            _mm_cmpeq_epi8(v_, _mm_set1_epi8(10)), _mm_cmpeq_epi8(v_, _mm_set1_epi8(13)))) << shift_; \\
        slash |= (unsigned long long)_mm_movemask_epi8(_mm_cmpeq_epi8(v_, _mm_set1_epi8(47))) << shift_; \\
        other |= (unsigned long long)_mm_movemask_epi8(v_) << shift_;                        \\
    } while (0)
    #define _COUNT_C_CLASSES_STORE(c) do {                                                   \\
        (c)->lower = lower; (c)->upper = upper; (c)->digit = digit; (c)->space = space;     \\
        (c)->newline = newline; (c)->slash = slash; (c)->other = other;                     \\
    } while (0)
    static inline void _count_c_classify_sse2_ucs1(const Py_UCS1* p, _count_c_classes* c) {
        unsigned long long lower = 0, upper = 0, digit = 0, space = 0, newline = 0, slash = 0, other = 0;
        _COUNT_C_CLASSIFY16(_mm_loadu_si128((const __m128i*)p), 0);
        _COUNT_C_CLASSIFY16(_mm_loadu_si128((const __m128i*)(p + 16)), 16);
        _COUNT_C_CLASSIFY16(_mm_loadu_si128((const __m128i*)(p + 32)), 32);
        _COUNT_C_CLASSIFY16(_mm_loadu_si128((const __m128i*)(p + 48)), 48);
        _COUNT_C_CLASSES_STORE(c);
    }
    /* 16 UCS2 units to bytes: 256 to 0x7FFF saturate to 255, and 0x8000 or more are made 255 */
    static inline __m128i _count_c_narrow(const Py_UCS2* p) {
        __m128i a = _mm_loadu_si128((const __m128i*)p);
        __m128i b = _mm_loadu_si128((const __m128i*)(p + 8));
        return _mm_or_si128(_mm_packus_epi16(a, b),
                            _mm_packs_epi16(_mm_srai_epi16(a, 15), _mm_srai_epi16(b, 15)));
    }
    static inline void _count_c_classify_sse2_ucs2(const Py_UCS2* p, _count_c_classes* c) {
        unsigned long long lower = 0, upper = 0, digit = 0, space = 0, newline = 0, slash = 0, other = 0;
        _COUNT_C_CLASSIFY16(_count_c_narrow(p), 0);
        _COUNT_C_CLASSIFY16(_count_c_narrow(p + 16), 16);
        _COUNT_C_CLASSIFY16(_count_c_narrow(p + 32), 32);
        _COUNT_C_CLASSIFY16(_count_c_narrow(p + 48), 48);
        _COUNT_C_CLASSES_STORE(c);
    }
    #else
    #define _count_c_classify_sse2_ucs1 _count_c_classify_portable_ucs1
    #define _count_c_classify_sse2_ucs2 _count_c_classify_portable_ucs2
    #endif

    /* AVX2, where the processor has it (GCC and Clang on x86: a function for that target,
       chosen at import by _count_c_pick_classifier), 32 bytes at a time. */
    #if _COUNT_C_SSE2 && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    #define _COUNT_C_AVX2 1
    #define _COUNT_C_TARGET_AVX2 __attribute__((target("avx2")))
    _COUNT_C_TARGET_AVX2 static inline __m256i _count_c_range32(__m256i v, int lo, int count) {
        return _mm256_cmpgt_epi8(_mm256_set1_epi8((char)(count - 128)),
                                 _mm256_add_epi8(v, _mm256_set1_epi8((char)(128 - lo))));
    }
    #define _COUNT_C_MASK32(x) ((unsigned long long)(unsigned int)_mm256_movemask_epi8(x) << shift_)
    #define _COUNT_C_CLASSIFY32(V, SHIFT) do {                                               \\
        __m256i v_ = (V);                                                                   \\
        int shift_ = (SHIFT);                                                               \\
        lower |= _COUNT_C_MASK32(_count_c_range32(v_, 97, 26));                             \\
        upper |= _COUNT_C_MASK32(_count_c_range32(v_, 65, 26));                             \\
        digit |= _COUNT_C_MASK32(_count_c_range32(v_, 48, 10));                             \\
        space |= _COUNT_C_MASK32(_mm256_or_si256(_count_c_range32(v_, 9, 5),                \\
                                                 _mm256_cmpeq_epi8(v_, _mm256_set1_epi8(32)))); \\
        newline |= _COUNT_C_MASK32(_mm256_or_si256(_mm256_cmpeq_epi8(v_, _mm256_set1_epi8(10)), \\
                                                   _mm256_cmpeq_epi8(v_, _mm256_set1_epi8(13)))); \\
        slash |= _COUNT_C_MASK32(_mm256_cmpeq_epi8(v_, _mm256_set1_epi8(47)));             \\
        other |= _COUNT_C_MASK32(v_);                                                       \\
    } while (0)
    _COUNT_C_TARGET_AVX2 static void _count_c_classify_avx2_ucs1(const Py_UCS1* p, _count_c_classes* c) {
        unsigned long long lower = 0, upper = 0, digit = 0, space = 0, newline = 0, slash = 0, other = 0;
        _COUNT_C_CLASSIFY32(_mm256_loadu_si256((const __m256i*)p), 0);
        _COUNT_C_CLASSIFY32(_mm256_loadu_si256((const __m256i*)(p + 32)), 32);
        _COUNT_C_CLASSES_STORE(c);
    }
    /* 32 UCS2 units to bytes as _count_c_narrow; the packs work per 128-bit lane, so the
       quarters come out as units 0-7, 16-23, 8-15, 24-31 and are put back in order */
    _COUNT_C_TARGET_AVX2 static inline __m256i _count_c_narrow32(const Py_UCS2* p) {
        __m256i a = _mm256_loadu_si256((const __m256i*)p);
        __m256i b = _mm256_loadu_si256((const __m256i*)(p + 16));
        __m256i v = _mm256_or_si256(_mm256_packus_epi16(a, b),
                                    _mm256_packs_epi16(_mm256_srai_epi16(a, 15), _mm256_srai_epi16(b, 15)));
        return _mm256_permute4x64_epi64(v, 0xD8);
    }
    _COUNT_C_TARGET_AVX2 static void _count_c_classify_avx2_ucs2(const Py_UCS2* p, _count_c_classes* c) {
        unsigned long long lower = 0, upper = 0, digit = 0, space = 0, newline = 0, slash = 0, other = 0;
        _COUNT_C_CLASSIFY32(_count_c_narrow32(p), 0);
        _COUNT_C_CLASSIFY32(_count_c_narrow32(p + 32), 32);
        _COUNT_C_CLASSES_STORE(c);
    }
    static int _count_c_avx2 = 0;
    static void _count_c_pick_classifier(void) {
        __builtin_cpu_init();
        _count_c_avx2 = __builtin_cpu_supports("avx2") != 0;
    }
    #else
    #define _COUNT_C_AVX2 0
    #define _count_c_classify_avx2_ucs1 _count_c_classify_sse2_ucs1
    #define _count_c_classify_avx2_ucs2 _count_c_classify_sse2_ucs2
    static int _count_c_avx2 = 0;
    static void _count_c_pick_classifier(void) {}
    #endif

    /* The classifier of this build and processor. */
    static inline void _count_c_classify_ucs1(const Py_UCS1* p, _count_c_classes* c) {
        if (_COUNT_C_AVX2 && _count_c_avx2)
            _count_c_classify_avx2_ucs1(p, c);
        else
            _count_c_classify_sse2_ucs1(p, c);
    }
    static inline void _count_c_classify_ucs2(const Py_UCS2* p, _count_c_classes* c) {
        if (_COUNT_C_AVX2 && _count_c_avx2)
            _count_c_classify_avx2_ucs2(p, c);
        else
            _count_c_classify_sse2_ucs2(p, c);
    }
    """
    ctypedef struct _count_c_classes:
        uint64_t lower
        uint64_t upper
        uint64_t digit
        uint64_t space
        uint64_t newline
        uint64_t slash
        uint64_t other
    bint _COUNT_C_SSE2
    bint _count_c_avx2
    bint _count_c_pack_ucs2(const Py_UCS2* p, Py_ssize_t length, uint64_t* out) noexcept nogil
    void _count_c_pick_classifier() noexcept nogil
    int _count_c_top64(uint64_t x) noexcept nogil
    void _count_c_classify_sse2_ucs1(const Py_UCS1* p, _count_c_classes* c) noexcept nogil
    void _count_c_classify_sse2_ucs2(const Py_UCS2* p, _count_c_classes* c) noexcept nogil
    void _count_c_classify_avx2_ucs1(const Py_UCS1* p, _count_c_classes* c) noexcept nogil
    void _count_c_classify_avx2_ucs2(const Py_UCS2* p, _count_c_classes* c) noexcept nogil
    void _count_c_classify_ucs1(const Py_UCS1* p, _count_c_classes* c) noexcept nogil
    void _count_c_classify_ucs2(const Py_UCS2* p, _count_c_classes* c) noexcept nogil
    void _count_c_classify_portable_ucs1(const Py_UCS1* p, _count_c_classes* c) noexcept nogil
    void _count_c_classify_portable_ucs2(const Py_UCS2* p, _count_c_classes* c) noexcept nogil


cdef enum:
    BLOCK = 63                   # characters a block classifies (bit 63: the one after them)
    REFILL = 56                  # a piece this far into the block starts the next block
    TOP = 0x8000000000000000     # bit 63


ctypedef struct _Block:
    Py_ssize_t start     # the text position of bit 0
    uint64_t letter      # [A-Za-z]
    uint64_t lower       # [a-z]
    uint64_t upper       # [A-Z]
    uint64_t digit       # [0-9]
    uint64_t space       # ASCII \s
    uint64_t newline     # [\r\n]
    uint64_t symbol      # ASCII [^\s\p{L}\p{N}]: the other characters of the text below 128
    uint64_t newline_slash  # [\r\n/]
    uint64_t text        # the characters of the text (not past its end)
    uint64_t unknown     # 128 or more, and bit 63: what the masks do not decide


_count_c_pick_classifier()
#: The block classifiers this build has on this processor, the one in use first.
_BLOCK_CLASSIFIERS = (("avx2",) if _count_c_avx2 else ()) + (("sse2",) if _COUNT_C_SSE2 else ()) + ("portable",)


def _block_classes(text, classifier=_BLOCK_CLASSIFIERS[0]):
    """Return the ASCII class masks of the first 64 characters of ``text``, for the tests.

    ``text`` is a ``str`` of at least 64 characters of the 1- or 2-byte kind; ``classifier``
    is one of :data:`_BLOCK_CLASSIFIERS` (the one in use by default).  Returns ``(lower, upper,
    digit, space, newline, slash, other)``: bit q of each is whether character q is in
    ``[a-z]``, ``[A-Z]``, ``[0-9]``, ASCII ``\\s``, ``[\\r\\n]``, ``/``, or is 128 or more.

    Raises:
        TypeError: ``text`` is not a ``str``.
        ValueError: ``text`` is shorter than 64 characters or of the 4-byte kind, or
            ``classifier`` is not one of :data:`_BLOCK_CLASSIFIERS`.
    """
    if not isinstance(text, str):
        raise TypeError(f"_block_classes() expected a str, got {type(text).__name__}")
    if PyUnicode_GET_LENGTH(text) < 64:
        raise ValueError(f"_block_classes() needs 64 characters or more, got {len(text)}")
    if classifier not in _BLOCK_CLASSIFIERS:
        raise ValueError(f"_block_classes() classifier must be one of {_BLOCK_CLASSIFIERS}, got {classifier!r}")
    cdef int kind = PyUnicode_KIND(text)
    cdef _count_c_classes c
    cdef const void* data = PyUnicode_DATA(text)
    if kind == PyUnicode_1BYTE_KIND:
        if classifier == "avx2":
            _count_c_classify_avx2_ucs1(<const Py_UCS1*>data, &c)
        elif classifier == "sse2":
            _count_c_classify_sse2_ucs1(<const Py_UCS1*>data, &c)
        else:
            _count_c_classify_portable_ucs1(<const Py_UCS1*>data, &c)
    elif kind == PyUnicode_2BYTE_KIND:
        if classifier == "avx2":
            _count_c_classify_avx2_ucs2(<const Py_UCS2*>data, &c)
        elif classifier == "sse2":
            _count_c_classify_sse2_ucs2(<const Py_UCS2*>data, &c)
        else:
            _count_c_classify_portable_ucs2(<const Py_UCS2*>data, &c)
    else:
        raise ValueError("_block_classes() takes 1- or 2-byte strings; this one holds a character above U+FFFF")
    return (c.lower, c.upper, c.digit, c.space, c.newline, c.slash, c.other)


cdef inline void _block_init(_Block* b) noexcept nogil:
    b.start = -2 * BLOCK  # no block yet: the first piece fills one


cdef void _fill_block(_Block* b, const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # Classify the BLOCK characters from i (fewer at the end of the text: the rest hold no class).
    cdef _unit tail[64]
    cdef const _unit* p = s + i
    cdef _count_c_classes c
    cdef uint64_t text
    cdef uint32_t shift = 0
    if n - i >= 64:
        text = TOP - 1
    else:
        text = (<uint64_t>1 << (n - i)) - 1
        if n >= 64:  # the text's last 64 characters, i at bit ``shift``
            shift = <uint32_t>(64 - (n - i))
            p = s + n - 64
        else:
            memset(tail, 0, sizeof(tail))
            memcpy(tail, p, (n - i) * sizeof(_unit))
            p = tail
    if _unit is Py_UCS1:
        _count_c_classify_ucs1(p, &c)
    elif _unit is Py_UCS2:
        _count_c_classify_ucs2(p, &c)
    else:
        memset(&c, 0, sizeof(c))  # never called: 4-byte text has no blocks
    if shift:
        c.lower >>= shift
        c.upper >>= shift
        c.digit >>= shift
        c.space >>= shift
        c.newline >>= shift
        c.slash >>= shift
        c.other >>= shift
    b.start = i
    b.lower = c.lower & text
    b.upper = c.upper & text
    b.letter = b.lower | b.upper
    b.digit = c.digit & text
    b.space = c.space & text
    b.newline = c.newline & text
    b.newline_slash = (c.newline | c.slash) & text
    b.symbol = text & ~(b.letter | b.digit | b.space | c.other)
    b.text = text
    b.unknown = c.other | TOP


cdef inline uint32_t _block_run(uint64_t mask, uint32_t p) noexcept nogil:
    # The end of the run of ``mask`` from bit p (p <= 63; bit 63 of ``mask`` is clear)
    return p + _count_c_ctz64(~mask >> p)


cdef inline Py_ssize_t _o200k_block_end(_Block* b, const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # The end of o200k_base's piece at i from the block's masks (i - start < BLOCK, s[i] < 128),
    # -1 if the block does not decide it.  The alternatives on ASCII characters: 1 and 2 are
    # one piece, [A-Z]*[a-z]* after an optional prefix, when a letter starts it (alternative 1
    # where [a-z] follows, else 2: no ASCII character is both); then 3 and 4; 5 to 7 on a space
    # run.  Every character a piece's alternatives examine is in a class of the masks but the
    # one that ends its last run (or, for 1 and 2, one of the contraction after it, which
    # _o200k_contraction reads itself): the piece is decided when that one is not unknown.
    cdef uint32_t k = <uint32_t>(i - b.start)
    cdef uint64_t bit = <uint64_t>1 << k
    cdef uint32_t e, j
    cdef uint64_t newlines
    if b.letter & bit or (b.letter & (bit << 1) and not (b.newline | b.digit) & bit):
        # 1, 2. [^\r\n\p{L}\p{N}]?[A]*[B]+ or [A]+[B]*, then a contraction
        e = _block_run(b.lower, _block_run(b.upper, k + ((b.letter & bit) == 0)))
        if (b.unknown >> e) & 1:
            return -1
        return b.start + e + _o200k_contraction(s, b.start + e, n)
    if b.digit & bit:
        # 3. \p{N}{1,3}
        e = _block_run(b.digit, k)
        if e - k >= 3:
            return i + 3
        return -1 if (b.unknown >> e) & 1 else b.start + e
    # 4. ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
    j = k + (s[i] == 32)
    if b.symbol & (<uint64_t>1 << j):
        e = _block_run(b.newline_slash, _block_run(b.symbol, j))
        return -1 if (b.unknown >> e) & 1 else b.start + e
    # a space run from i
    e = _block_run(b.space, k)
    if (b.unknown >> e) & 1:
        return -1
    # 5. \s*[\r\n]+: to the last newline of the run
    newlines = b.newline & ((<uint64_t>1 << e) - bit)
    if newlines:
        return b.start + _count_c_top64(newlines) + 1
    # 6. \s+(?!\S): all of it before the end of the text, else all but the last if two or more
    if not (b.text >> e) & 1:
        return b.start + e
    if e - k >= 2:
        return b.start + e - 1
    # 7. \s+
    return b.start + e


cdef inline Py_ssize_t _cl100k_block_end(_Block* b, const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # The end of cl100k_base's piece at i from the block's masks (i - start < BLOCK, s[i] < 128),
    # -1 if the block does not decide it; as _o200k_block_end.
    cdef uint32_t k = <uint32_t>(i - b.start)
    cdef uint64_t bit = <uint64_t>1 << k
    cdef uint32_t e, j
    cdef uint64_t newlines
    cdef Py_ssize_t c
    # 1. '(?i:[sdmt]|ll|ve|re)
    if s[i] == 39:
        c = _cl100k_contraction(s, i, n)
        if c:
            return i + c
    if b.letter & bit or (b.letter & (bit << 1) and not (b.newline | b.digit) & bit):
        # 2. [^\r\n\p{L}\p{N}]?+\p{L}++
        e = _block_run(b.letter, k + ((b.letter & bit) == 0))
        return -1 if (b.unknown >> e) & 1 else b.start + e
    if b.digit & bit:
        # 3. \p{N}{1,3}+
        e = _block_run(b.digit, k)
        if e - k >= 3:
            return i + 3
        return -1 if (b.unknown >> e) & 1 else b.start + e
    # 4. ' ?[^\s\p{L}\p{N}]++[\r\n]*+'
    j = k + (s[i] == 32)
    if b.symbol & (<uint64_t>1 << j):
        e = _block_run(b.newline, _block_run(b.symbol, j))
        return -1 if (b.unknown >> e) & 1 else b.start + e
    e = _block_run(b.space, k)
    if (b.unknown >> e) & 1:
        return -1
    # 5. \s++$
    if not (b.text >> e) & 1:
        return b.start + e
    # 6. \s*[\r\n]
    newlines = b.newline & ((<uint64_t>1 << e) - bit)
    if newlines:
        return b.start + _count_c_top64(newlines) + 1
    # 7. \s+(?!\S)
    if e - k >= 2:
        return b.start + e - 1
    # 8. \s
    return i + 1


cdef Py_ssize_t _block_miss(_Block* b, bint cl100k, const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # The piece at i where the block gave no answer: move the block to i and try again where
    # its end was in the way (the first unknown character from i is bit 63), else the scanner.
    cdef uint32_t k = <uint32_t>(i - b.start)
    cdef Py_ssize_t e
    if k > 0 and k + _count_c_ctz64(b.unknown >> k) == BLOCK and b.start + BLOCK < n:
        _fill_block(b, s, i, n)
        e = _cl100k_block_end(b, s, i, n) if cl100k else _o200k_block_end(b, s, i, n)
        if e >= 0:
            return e
    return _piece_end(cl100k, s, i, n)


cdef inline Py_ssize_t _next_piece_end(_Block* b, bint cl100k, const _unit* s, Py_ssize_t i,
                                       Py_ssize_t n) noexcept nogil:
    # The end of the piece at i (i < n): from the block of masks where it decides, else the
    # scanner (always for 4-byte text, and where a character of 128 or more starts the piece).
    # A new block starts at a piece REFILL characters or more into the old one, before it is
    # tried there (pieces found, json: 18.9M instructions on main; 10.2M moving the block at
    # 56 characters, 10.9M at 40, 10.3M at 59, 10.8M where the block's end gets in the way).
    cdef Py_ssize_t e
    if _unit is Py_UCS4:
        return _piece_end(cl100k, s, i, n)
    else:
        if s[i] >= 128:
            return _piece_end(cl100k, s, i, n)
        if i - b.start >= REFILL:
            _fill_block(b, s, i, n)
        e = _cl100k_block_end(b, s, i, n) if cl100k else _o200k_block_end(b, s, i, n)
        if e >= 0:
            return e
        return _block_miss(b, cl100k, s, i, n)


# --------------------------------------------------------------------------- the memo

cdef class PieceCounter


ctypedef struct _Slot:
    uint32_t hash
    uint16_t shape      # code points (<= MAX_MEMO_PIECE) | PACKED (see _hash_piece); 0: empty
    uint16_t tokens     # <= 4 * MAX_MEMO_PIECE: a token holds at least one byte
    uint64_t key        # the packed code points, or their offset in _Memo.keys


ctypedef struct _Memo:
    _Slot* slots
    size_t mask         # slots - 1: a power of two, grown to keep them at most 3/4 full
    size_t max_slots    # the last size: at least twice the memo size
    size_t used
    uint32_t* keys
    size_t keys_used
    size_t chars        # code points of the remembered pieces (<= MAX_MEMO_CHARS // 2)
    size_t keys_capacity


cdef inline uint32_t _mix(uint64_t x) noexcept nogil:
    x ^= x >> 32
    x *= 0xD6E8FEB86659FD93ULL
    x ^= x >> 32
    return <uint32_t>x


cdef inline uint64_t _low_bytes(const _unit* s, Py_ssize_t i, Py_ssize_t count) noexcept nogil:
    # The low bytes of the ``count`` (<= 8) code points from s[i], one byte each, the first in
    # the lowest byte; zero above.
    cdef uint64_t p = 0
    cdef uint32_t cp
    cdef Py_ssize_t k
    for k in range(count):
        cp = s[i + k]
        p |= (<uint64_t>(cp & 0xFF)) << (8 * k)
    return p


cdef inline uint64_t _pack4(uint64_t w) noexcept nogil:
    # The low bytes of the four 16-bit units of w (little-endian), in its low 32 bits.
    w &= 0x00FF00FF00FF00FFULL
    w = (w | (w >> 8)) & 0x0000FFFF0000FFFFULL
    return (w | (w >> 16)) & 0xFFFFFFFFULL


cdef inline uint64_t _word(const _unit* s, Py_ssize_t i) noexcept nogil:
    # _low_bytes(s, i, 8): for a 1-byte kind, one unaligned load; for a 2-byte kind two, their
    # units' low bytes packed without a loop (little-endian hosts; on a big-endian one the memo
    # only keeps some pieces twice, once per kind)
    cdef uint64_t w, v
    if _unit is Py_UCS1:
        memcpy(&w, s + i, 8)
        return w
    elif _unit is Py_UCS2:
        if _COUNT_C_LITTLE_ENDIAN:
            memcpy(&w, s + i, 8)
            memcpy(&v, s + i + 4, 8)
            return _pack4(w) | (_pack4(v) << 32)
        return _low_bytes(s, i, 8)
    else:
        return _low_bytes(s, i, 8)


cdef inline uint64_t _units_or(const _unit* s, Py_ssize_t i, Py_ssize_t e) noexcept nogil:
    # The bitwise or of the code points s[i:e] (e > i) of a 2- or 4-byte string: nonzero above
    # bit 7 where one is not ASCII, above bit 15 where one is above U+FFFF.  A 2-byte string
    # of at least four units is read four units a load, the last load overlapping (an or
    # counts a unit twice harmlessly): no loop over characters, whose exit the branch
    # predictor mostly misses.
    cdef uint64_t w
    cdef uint64_t acc = 0
    cdef uint32_t cp
    cdef Py_ssize_t k
    if _unit is Py_UCS2:
        if _COUNT_C_LITTLE_ENDIAN and e - i >= 4:
            k = i
            while k + 4 < e:
                memcpy(&w, s + k, 8)
                acc |= w
                k += 4
            memcpy(&w, s + e - 4, 8)
            acc |= w
            acc |= acc >> 32
            return (acc | (acc >> 16)) & 0xFFFF
    for k in range(i, e):
        cp = s[k]
        acc |= cp
    return acc


cdef inline uint32_t _hash_piece(const _unit* s, Py_ssize_t i, Py_ssize_t e, Py_ssize_t n,
                                 uint64_t* packed, bint* is_packed) noexcept nogil:
    # The memo's hash of the piece s[i:e], a function of its code points alone (the same for a
    # piece of a 1-, 2- or 4-byte string).  A piece of at most 8 code points below 256 (most
    # pieces) is packed into 64 bits, one byte each (``is_packed``), so that the memo compares
    # it in one step without touching the key arena; a 1-byte string reads it with one load,
    # without a loop over its characters (whose exit the branch predictor would mostly miss).
    # A longer piece of code points below 256 is hashed eight bytes a step; any other piece
    # (FNV-1a) one code point a step.
    cdef Py_ssize_t length = e - i
    cdef Py_ssize_t k
    cdef uint64_t p
    cdef uint64_t h
    cdef uint32_t high = 0
    cdef uint32_t fnv, cp
    if _unit is Py_UCS2:
        if length <= 8 and i + 8 <= n:
            # the eight units from i in one 16-byte load, those past the piece masked off, their
            # low bytes packed (SSE2; a loop where there is none)
            if _count_c_pack_ucs2(s + i, length, &p):
                packed[0] = p
                is_packed[0] = True
                return _mix(p * 0x9E3779B97F4A7C15ULL + <uint64_t>length)
            high = 256   # a unit above 0xFF
        else:
            high = <uint32_t>_units_or(s, i, e)
    elif _unit is not Py_UCS1:
        high = <uint32_t>_units_or(s, i, e)
    if _unit is not Py_UCS1:
        if high >= 256:
            is_packed[0] = False
            packed[0] = 0
            fnv = 2166136261U
            for k in range(i, e):
                cp = s[k]
                fnv = (fnv ^ cp) * 16777619U
            return fnv ^ (fnv >> 15)
    if length <= 8:
        if _unit is Py_UCS1 and i + 8 <= n:
            memcpy(&p, s + i, 8)
            p &= 0xFFFFFFFFFFFFFFFFULL >> (64 - 8 * length)
        else:
            p = _low_bytes(s, i, length)
        packed[0] = p
        is_packed[0] = True
        return _mix(p * 0x9E3779B97F4A7C15ULL + <uint64_t>length)
    packed[0] = 0
    is_packed[0] = False
    h = <uint64_t>length * 0x9E3779B97F4A7C15ULL
    k = i
    while k + 8 <= e:
        h = (h ^ _word(s, k)) * 0xFF51AFD7ED558CCDULL
        h ^= h >> 29
        k += 8
    if k < e:
        if _unit is Py_UCS4:
            p = _low_bytes(s, k, e - k)
        else:
            p = _word(s, e - 8) >> (8 * (8 - (e - k)))   # the last e - k bytes (length > 8)
        h = (h ^ p) * 0xC4CEB9FE1A85EC53ULL
    return _mix(h)


cdef inline _Slot* _find(_Memo* memo, uint32_t h, uint64_t packed, bint is_packed, const _unit* s,
                         Py_ssize_t i, Py_ssize_t e) noexcept nogil:
    # The slot holding piece s[i:e], or the empty slot where it belongs.
    cdef size_t index = h & memo.mask
    cdef _Slot* slot
    cdef uint32_t* key
    cdef Py_ssize_t k
    cdef Py_ssize_t length = e - i
    cdef uint16_t shape = <uint16_t>(length | (PACKED if is_packed else 0))
    while True:
        slot = &memo.slots[index]
        if slot.shape == 0:
            return slot
        if slot.hash == h and slot.shape == shape:
            if is_packed:
                if slot.key == packed:
                    return slot
            else:
                key = memo.keys + slot.key
                k = 0
                while k < length and key[k] == s[i + k]:
                    k += 1
                if k == length:
                    return slot
        index = (index + 1) & memo.mask


cdef int _grow(_Memo* memo) except -1:
    # Double the slots and re-insert every remembered piece.
    cdef size_t size = (memo.mask + 1) * 2
    cdef _Slot* old = memo.slots
    cdef size_t old_size = memo.mask + 1
    cdef size_t j, index
    cdef _Slot* slots = <_Slot*>calloc(size, sizeof(_Slot))
    if slots == NULL:
        raise MemoryError()
    for j in range(old_size):
        if old[j].shape:
            index = old[j].hash & (size - 1)
            while slots[index].shape:
                index = (index + 1) & (size - 1)
            slots[index] = old[j]
    memo.slots = slots
    memo.mask = size - 1
    free(old)
    return 0


cdef inline void _forget(_Memo* memo) noexcept nogil:
    memset(memo.slots, 0, (memo.mask + 1) * sizeof(_Slot))
    memo.used = 0
    memo.keys_used = 0
    memo.chars = 0


cdef inline void _make_room(PieceCounter counter, Py_ssize_t length) noexcept:
    # Before a piece of ``length`` code points is added: when the newer generation is full, the
    # older one is forgotten and the newer one becomes the older (its buffers are reused, so a
    # turn-over allocates nothing); the rule of _count_py.PieceCounter._remember.
    cdef _Memo spare
    if counter._memo.used >= counter._generation or counter._memo.chars + length > C_MAX_MEMO_CHARS // 2:
        spare = counter._older
        counter._older = counter._memo
        counter._memo = spare
        _forget(&counter._memo)
    if counter._memo.used + counter._older.used >= <size_t>counter.memo_size:
        _forget(&counter._older)


cdef int _remember(_Memo* memo, uint32_t h, uint64_t packed, bint is_packed, const _unit* s,
                   Py_ssize_t i, Py_ssize_t e, Py_ssize_t tokens) except -1:
    # Add the piece s[i:e] to ``memo`` (the newer generation, with room: see _make_room).
    cdef _Slot* slot
    cdef uint32_t* keys
    cdef size_t capacity
    cdef Py_ssize_t k
    if 4 * (memo.used + 1) > 3 * (memo.mask + 1) and memo.mask + 1 < memo.max_slots:
        _grow(memo)
    if not is_packed and memo.keys_used + (e - i) > memo.keys_capacity:
        capacity = memo.keys_capacity if memo.keys_capacity else 4096
        while memo.keys_used + (e - i) > capacity:
            capacity *= 2
        keys = <uint32_t*>realloc(memo.keys, capacity * sizeof(uint32_t))
        if keys == NULL:
            raise MemoryError()
        memo.keys = keys
        memo.keys_capacity = capacity
    slot = _find(memo, h, packed, is_packed, s, i, e)
    if slot.shape:
        return 0  # already there
    slot.hash = h
    slot.shape = <uint16_t>((e - i) | (PACKED if is_packed else 0))
    slot.tokens = <uint16_t>tokens
    if is_packed:
        slot.key = packed
    else:
        slot.key = memo.keys_used
        for k in range(e - i):
            memo.keys[memo.keys_used + k] = s[i + k]
        memo.keys_used += e - i
    memo.used += 1
    memo.chars += e - i
    return 0


# --------------------------------------------------------------------------- native BPE

# A miss is counted here rather than by tiktoken's ``encode_single_piece``: the same algorithm
# (the whole piece if it is one token; else repeatedly merge the adjacent pair of parts whose
# concatenation has the lowest rank, the leftmost of equal ranks, until no pair is a token; the
# count is the number of parts), on the encoding's ranks (``rank_file``), in a C hash table.
# A min-heap of (rank, start) with lazy deletion finds the pair tiktoken's linear scan finds.
#
# The cost of a miss is the latency of the rank table (8 MB for o200k_base, read at random), so
# the table is laid out for one memory access a lookup: a slot holds the token's first eight
# bytes and its length (three tokens in four are at most eight bytes long: they compare without
# touching the arena of token bytes, and so does every span that is no token), the table sits
# in 2 MB pages where the system gives them (no TLB miss per lookup), and the merge loop
# computes both of a merge's new lookups before it reads either slot, prefetching both.  Most
# spans the merge loop looks up are no token (two in three of them in agent text, five in six in
# CJK and base64), so a Bloom filter of the tokens (256 KB for o200k_base, ten bits a token, one
# 64-bit word a lookup: about 2% false positives), which stays in the core's cache, answers
# most of those without touching the table.

cdef extern from *:
    """
    #define _COUNT_C_NO_RANK 0xFFFFFFFFu
    """
    # A C constant: Cython compiles a DEF this large (above a C int) as a Python int, so the
    # with-GIL _bpe_count compared each rank with it through Python objects (a PyLong made for
    # the whole-piece lookup of every miss and for each pair the heap merge pushed).
    const uint32_t NO_RANK "_COUNT_C_NO_RANK"   # no token
DEF STACK_PIECE = 128   # a piece of at most this many bytes is merged with arrays on the stack
DEF SHORT_PIECE = 96    # ... and one of at most this many by tiktoken's scan (_bpe_count_short)


ctypedef struct _RankSlot:
    uint64_t head       # the token's first min(8, length) bytes (_head); 0 above
    uint32_t rank
    uint32_t shape      # length (bytes, 1-255) | offset of the token's bytes in the arena << 8; 0: empty


ctypedef struct _Ranks:
    uint32_t pairs[65536]   # the rank of every two-byte sequence, NO_RANK if none
    _RankSlot* slots
    size_t mask
    uint64_t* bloom         # a Bloom filter of the tokens: _maybe_token
    size_t bloom_mask       # its words - 1 (a power of two)
    int shift               # 64 - log2(slots): a hash's top bits are its first slot
    uint8_t* arena          # the tokens' bytes, and 8 bytes of zeros after the last
    Py_ssize_t max_length   # the longest token (bytes): a longer span is never a token
    size_t tokens           # how many tokens (their ranks: 0 to tokens - 1, or see _Backtrack)
    _Backtrack* backtrack   # the tables of _backtrack_count: NULL until built (_backtrack_of)
    size_t merged_bytes     # bytes of pieces merged by _bpe_count since (see _count_piece)
    bint no_backtrack       # the ranks are not 0 to tokens - 1 or a byte is no token: never built


ctypedef struct _Backtrack:
    uint32_t* split         # 2 a rank: the two tokens BPE merges into it, each its rank | its
                            # length << 24; the rank itself twice if none (a byte)
    uint32_t* offset        # the offset of each rank's bytes in _Ranks.arena
    uint8_t* length         # each rank's length (bytes)
    uint64_t* lead_lengths  # per first two bytes: bit L - 1 set if a token of L bytes (2 to
                            # 63) starts with them, bit 63 if one of 64 or more does
    uint64_t* char_lengths  # the same per three-byte UTF-8 character (its 16-bit code point)
    uint32_t* char_rank     # the rank of each three-byte character that is a token (code point)
    uint64_t* parts         # bit 2 * rank: the rank is the first of a split, + 1: the second
    uint64_t* pair_cache    # _compatible's answers for recent pairs of ranks: _compatible_cached
    uint32_t byte_rank[256] # the rank of each one-byte token


cdef _Ranks* _rank_tables[2]   # [cl100k]: built on first use, kept for the process


cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    /* Zeroed memory for a table read at random: 2 MB-aligned and advised into transparent huge
       pages on Linux (one TLB entry for 2 MB instead of 512), plain calloc elsewhere; free()
       releases either. */
    static void* _count_c_table_alloc(size_t size) {
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        void* p = NULL;
        size_t huge = (size_t)2 << 20;
        if (size >= huge) {
            size = (size + huge - 1) & ~(huge - 1);
            if (posix_memalign(&p, huge, size) != 0) return NULL;
            madvise(p, size, MADV_HUGEPAGE);
            memset(p, 0, size);
            return p;
        }
    #endif
        return calloc(size, 1);
    }
    #if defined(__GNUC__) || defined(__clang__)
    #define _count_c_prefetch(p) __builtin_prefetch((p), 0, 3)
    #else
    #define _count_c_prefetch(p) ((void)(p))
    #endif
    """
    void* _table_alloc "_count_c_table_alloc"(size_t size) noexcept nogil
    void _prefetch "_count_c_prefetch"(const void* p) noexcept nogil


cdef inline uint64_t _head(const uint8_t* b, Py_ssize_t n) noexcept nogil:
    # The first min(8, n) bytes of b (n >= 1), the first in the lowest byte, zero above.  Reads
    # eight bytes: every buffer passed here has eight readable bytes past its end.
    cdef uint64_t w = 0
    cdef Py_ssize_t k
    if _COUNT_C_LITTLE_ENDIAN:
        memcpy(&w, b, 8)
        k = 8 - n
        k &= ~(k >> 63)   # max(8 - n, 0): the bytes to clear, without a branch on the length
        return w & (0xFFFFFFFFFFFFFFFFULL >> (8 * k))
    for k in range(min(n, 8)):
        w |= (<uint64_t>b[k]) << (8 * k)
    return w


cdef inline uint64_t _hash_span(const uint8_t* b, Py_ssize_t n, uint64_t head) noexcept nogil:
    # The hash of the n bytes b (whose _head is ``head``); its top bits pick the slot.
    cdef uint64_t h = (head ^ (<uint64_t>n << 56)) * 0x9E3779B97F4A7C15ULL
    cdef uint64_t w
    cdef Py_ssize_t k = 8
    while k < n:   # the bytes after the first eight, eight a step (the last step: zero-padded)
        w = _head(b + k, n - k)
        h = ((h ^ (h >> 29)) ^ w) * 0xFF51AFD7ED558CCDULL
        k += 8
    return h ^ (h >> 32)


cdef inline uint64_t _hash_short(uint64_t head, Py_ssize_t n) noexcept nogil:
    # _hash_span of a span of n <= 8 bytes, from its _head alone (the same value)
    cdef uint64_t h = (head ^ (<uint64_t>n << 56)) * 0x9E3779B97F4A7C15ULL
    return h ^ (h >> 32)


cdef inline uint64_t _bloom_bits(uint64_t h) noexcept nogil:
    # The three bits of a span of hash h in its word of the Bloom filter.
    return ((1ULL << ((h >> 20) & 63)) | (1ULL << ((h >> 26) & 63))) | (1ULL << ((h >> 14) & 63))


cdef inline bint _maybe_token(const _Ranks* r, uint64_t h) noexcept nogil:
    # False: the span of hash h is no token; True: it may be one (look it up).
    cdef uint64_t bits = _bloom_bits(h)
    return (r.bloom[<size_t>h & r.bloom_mask] & bits) == bits


cdef inline uint32_t _probe(const _Ranks* r, const uint8_t* b, Py_ssize_t n, uint64_t head,
                            uint64_t h) noexcept nogil:
    # The rank of the token b[:n] (head and h: its _head and _hash_span), NO_RANK if none.
    cdef size_t index = <size_t>(h >> r.shift)
    cdef const _RankSlot* slot
    while True:
        slot = &r.slots[index]
        if slot.shape == 0:
            return NO_RANK
        if slot.head == head and (slot.shape & 0xFF) == <uint32_t>n:
            if n <= 8:
                return slot.rank
            if n <= 16:   # the rest in one word each (the arena and b: eight bytes readable past)
                if _head(r.arena + (slot.shape >> 8) + 8, n - 8) == _head(b + 8, n - 8):
                    return slot.rank
            elif memcmp(r.arena + (slot.shape >> 8) + 8, b + 8, n - 8) == 0:
                return slot.rank
        index = (index + 1) & r.mask


cdef inline uint32_t _probe_short(const _Ranks* r, uint64_t head, Py_ssize_t n, uint64_t h) noexcept nogil:
    # _probe of a span of n <= 8 bytes, whose _head ``head`` is all of it: no arena to compare,
    # and small enough that the compiler inlines it in the hot loop (_probe it does not, there).
    cdef size_t index = <size_t>(h >> r.shift)
    cdef const _RankSlot* slot
    while True:
        slot = &r.slots[index]
        if slot.shape == 0:
            return NO_RANK
        if slot.head == head and (slot.shape & 0xFF) == <uint32_t>n:
            return slot.rank
        index = (index + 1) & r.mask


cdef inline uint32_t _rank(const _Ranks* r, const uint8_t* b, Py_ssize_t n) noexcept nogil:
    # The rank of the token b[:n] (n >= 1, eight readable bytes past b + n), NO_RANK if none.
    cdef uint64_t head, h
    if n > r.max_length:
        return NO_RANK
    if n == 2:
        return r.pairs[(<uint32_t>b[0] << 8) | b[1]]
    head = _head(b, n)
    h = _hash_span(b, n, head)
    if not _maybe_token(r, h):
        return NO_RANK
    return _probe(r, b, n, head, h)


cdef void _free_ranks(_Ranks* r) noexcept:
    if r != NULL:
        free(r.slots)
        free(r.arena)
        free(r.bloom)
        _free_backtrack(r.backtrack)
        free(r)


cdef uint8_t _base64[256]   # the value of each base64 digit; 255: not one


def _build_base64_table():
    """Fill the base64 digit table (once, at import)."""
    cdef const unsigned char* digits = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    cdef int k
    memset(_base64, 255, 256)
    for k in range(64):
        _base64[digits[k]] = <uint8_t>k


_build_base64_table()


cdef Py_ssize_t _unbase64(const uint8_t* text, Py_ssize_t n, uint8_t* out) noexcept nogil:
    # Decode the base64 text[:n] ('=' padding allowed at its end) into ``out``; -1 if invalid.
    cdef uint32_t group = 0
    cdef int bits = 0
    cdef Py_ssize_t k
    cdef Py_ssize_t written = 0
    cdef uint8_t value
    while n > 0 and text[n - 1] == 61:  # '='
        n -= 1
    for k in range(n):
        value = _base64[text[k]]
        if value == 255:
            return -1
        group = (group << 6) | value
        bits += 6
        if bits >= 8:
            bits -= 8
            out[written] = <uint8_t>(group >> bits)
            written += 1
    return written


cdef _Ranks* _build_ranks(bytes rank_text) except NULL:
    # The native table of a rank file: lines of "<token bytes in base64> <rank>".
    cdef const uint8_t* text = <const uint8_t*>rank_text
    cdef Py_ssize_t size = len(rank_text)
    cdef Py_ssize_t start, space, end, n
    cdef size_t table = 8
    cdef int bits = 3
    cdef size_t tokens = 0
    cdef size_t total = 0
    cdef size_t offset = 0
    cdef size_t index
    cdef uint64_t head, rank, h
    cdef _Ranks* r
    # first pass: the number of tokens and an upper bound of their bytes
    start = 0
    while start < size:
        end = start
        while end < size and text[end] != 10:
            end += 1
        if end > start:
            tokens += 1
            total += <size_t>(end - start) * 3 // 4
        start = end + 1
    while table < 2 * tokens:
        table *= 2
        bits += 1
    if total >= (1 << 24):
        raise ValueError(f"rank file too large for the native table: {total} bytes of tokens")
    r = <_Ranks*>calloc(1, sizeof(_Ranks))
    if r == NULL:
        raise MemoryError()
    r.slots = <_RankSlot*>_table_alloc(table * sizeof(_RankSlot))
    r.arena = <uint8_t*>calloc(total + 8, 1)
    r.bloom = <uint64_t*>calloc(table // 16, sizeof(uint64_t))   # 8 bits a slot: 10 a token
    if r.slots == NULL or r.arena == NULL or r.bloom == NULL:
        _free_ranks(r)
        raise MemoryError()
    r.mask = table - 1
    r.shift = 64 - bits
    r.bloom_mask = table // 16 - 1
    for index in range(65536):
        r.pairs[index] = NO_RANK
    start = 0
    while start < size:
        end = start
        while end < size and text[end] != 10:
            end += 1
        if end > start:
            space = start
            while space < end and text[space] != 32:
                space += 1
            n = _unbase64(text + start, space - start, r.arena + offset)
            rank = 0
            for index in range(<size_t>(space + 1), <size_t>end):
                if not 48 <= text[index] <= 57 or rank > NO_RANK:
                    n = -1
                    break
                rank = rank * 10 + (text[index] - 48)
            if n <= 0 or n > 255 or space + 1 >= end or rank >= NO_RANK:
                _free_ranks(r)
                raise ValueError(f"malformed rank file line: {rank_text[start:end][:80]!r}")
            head = _head(r.arena + offset, n)
            h = _hash_span(r.arena + offset, n, head)
            r.bloom[<size_t>h & r.bloom_mask] |= _bloom_bits(h)
            index = <size_t>(h >> r.shift)
            while r.slots[index].shape:
                index = (index + 1) & r.mask
            r.slots[index].head = head
            r.slots[index].rank = <uint32_t>rank
            r.slots[index].shape = <uint32_t>((offset << 8) | <size_t>n)
            offset += n
            r.tokens += 1
            if n > r.max_length:
                r.max_length = n
            if n == 2:
                r.pairs[(<uint32_t>r.arena[offset - 2] << 8) | r.arena[offset - 1]] = <uint32_t>rank
        start = end + 1
    memset(r.arena + offset, 0, 8)   # the tail _head reads past the last token
    return r


cdef _Ranks* _ranks_of(str encoding, bint cl100k) except NULL:
    cdef _Ranks* r = _rank_tables[cl100k]
    if r == NULL:
        rank_text = rank_file(encoding)  # Python code: another thread may build the table meanwhile
        r = _build_ranks(rank_text)
        if _rank_tables[cl100k] == NULL:
            _rank_tables[cl100k] = r
        else:
            _free_ranks(r)
            r = _rank_tables[cl100k]
    return r


cdef inline void _heap_push(uint64_t* heap, Py_ssize_t* size, uint64_t key) noexcept nogil:
    cdef Py_ssize_t k = size[0]
    cdef Py_ssize_t parent
    size[0] = k + 1
    while k > 0:
        parent = (k - 1) >> 1
        if heap[parent] <= key:
            break
        heap[k] = heap[parent]
        k = parent
    heap[k] = key


cdef inline uint64_t _heap_pop(uint64_t* heap, Py_ssize_t* size) noexcept nogil:
    # Floyd's pop: the hole at the root goes down to a leaf along the smaller children (one
    # comparison a level, without a branch), then the last key goes up from there (mostly not
    # at all: it came from the bottom).  Keys are totally ordered, so the pops come in the same
    # order as with the textbook sift-down.
    cdef uint64_t top = heap[0]
    cdef Py_ssize_t n = size[0] - 1
    cdef uint64_t last = heap[n]
    cdef Py_ssize_t k = 0
    cdef Py_ssize_t child, parent
    size[0] = n
    if n == 0:
        return top
    child = 1
    while child + 1 < n:
        child += heap[child + 1] < heap[child]
        heap[k] = heap[child]
        k = child
        child = 2 * k + 1
    if child < n:   # one child only
        heap[k] = heap[child]
        k = child
    while k > 0:
        parent = (k - 1) >> 1
        if heap[parent] <= last:
            break
        heap[k] = heap[parent]
        k = parent
    heap[k] = last
    return top


cdef inline bint _prepare(const _Ranks* r, const uint8_t* b, Py_ssize_t n, uint64_t* head,
                          uint64_t* h) noexcept nogil:
    # The _head and _hash_span of the span b[:n] (3 <= n), and whether it may be a token (then
    # its slot is prefetched).
    if n > r.max_length:
        return False
    head[0] = _head(b, n)
    h[0] = _hash_span(b, n, head[0])
    if not _maybe_token(r, h[0]):
        return False
    _prefetch(&r.slots[<size_t>(h[0] >> r.shift)])
    return True


cdef inline uint64_t _lowest_key(const uint64_t* key, Py_ssize_t width) noexcept nogil:
    # The least of key[:width] (width a multiple of 8), eight a step without a branch per key:
    # a loop whose trip count varies from merge to merge is a branch the predictor misses.
    cdef uint64_t lowest = ~(<uint64_t>0)
    cdef Py_ssize_t k = 0
    while True:
        lowest = key[k] if key[k] < lowest else lowest
        lowest = key[k + 1] if key[k + 1] < lowest else lowest
        lowest = key[k + 2] if key[k + 2] < lowest else lowest
        lowest = key[k + 3] if key[k + 3] < lowest else lowest
        lowest = key[k + 4] if key[k + 4] < lowest else lowest
        lowest = key[k + 5] if key[k + 5] < lowest else lowest
        lowest = key[k + 6] if key[k + 6] < lowest else lowest
        lowest = key[k + 7] if key[k + 7] < lowest else lowest
        k += 8
        if k >= width:
            return lowest


cdef Py_ssize_t _bpe_count_short(const _Ranks* r, const uint8_t* b, Py_ssize_t n) noexcept nogil:
    # _bpe_count of a piece of 3 to SHORT_PIECE bytes that is no token, with tiktoken's
    # ``_byte_pair_merge`` order: merge the adjacent pair of parts of the lowest rank, the
    # leftmost of equal ones, until no pair is a token; for a few parts cheaper than the heap.
    # A part is named by the byte it starts at; ``key[k]``: the rank of live part k with the
    # next one, << 32 | k (so that the least key is the leftmost of the lowest ranks), all ones
    # where part k is merged away, is the last, or k is past the piece.  The keys stay in place
    # (no shifting: its trip count would vary) and are scanned at a fixed width, a multiple of
    # eight; ``nxt[k]``/``prv[k]``: the next and previous live parts.
    cdef uint64_t key[SHORT_PIECE + 8]
    cdef uint8_t nxt[SHORT_PIECE + 1]
    cdef uint8_t prv[SHORT_PIECE + 1]
    cdef Py_ssize_t width = (n - 1 + 7) & ~7
    cdef Py_ssize_t parts = n
    cdef Py_ssize_t k, best, after, end, before
    cdef uint64_t lowest
    cdef uint64_t right_head, right_hash, left_head, left_hash
    cdef bint right, left
    for k in range(n - 1):
        key[k] = ((<uint64_t>r.pairs[(<uint32_t>b[k] << 8) | b[k + 1]]) << 32) | <uint64_t>k
        nxt[k] = <uint8_t>(k + 1)
        prv[k] = <uint8_t>(k - 1)
    for k in range(n - 1, width):
        key[k] = ~(<uint64_t>0)
    nxt[n - 1] = <uint8_t>n
    prv[n - 1] = <uint8_t>(n - 2)
    while True:
        lowest = _lowest_key(key, width)
        if (lowest >> 32) >= NO_RANK:
            return parts
        best = <Py_ssize_t>(lowest & 0xFFFFFFFFU)
        after = nxt[best]          # merged into best
        end = nxt[after]           # where the merged part ends: the next live part, or n
        key[after] = ~(<uint64_t>0)
        nxt[best] = <uint8_t>end
        parts -= 1
        # the merged part with the next one, the previous one with the merged part: both spans
        # prepared (hashed, their slots prefetched) before either is looked up
        right = end < n and _prepare(r, b + best, nxt[end] - best, &right_head, &right_hash)
        left = best > 0 and _prepare(r, b + prv[best], end - prv[best], &left_head, &left_hash)
        if end < n:
            prv[end] = <uint8_t>best
            key[best] = (((<uint64_t>_probe(r, b + best, nxt[end] - best, right_head, right_hash))
                          if right else <uint64_t>NO_RANK) << 32) | <uint64_t>best
        else:
            key[best] = ~(<uint64_t>0)
        if best > 0:
            before = prv[best]
            key[before] = (((<uint64_t>_probe(r, b + before, end - before, left_head, left_hash))
                            if left else <uint64_t>NO_RANK) << 32) | <uint64_t>before


cdef Py_ssize_t _bpe_count(const _Ranks* r, const uint8_t* b, Py_ssize_t n) except -1:
    # len(encode_single_piece(b[:n])): tiktoken's merges, counted (eight readable bytes past
    # b + n, for _head).
    cdef uint32_t stack[4 * (STACK_PIECE + 1)]
    cdef uint64_t stack_heap[3 * STACK_PIECE]
    cdef uint32_t* nxt
    cdef uint32_t* prv
    cdef uint32_t* pair
    cdef uint64_t* heap
    cdef Py_ssize_t heap_size = 0
    cdef Py_ssize_t parts = n
    cdef Py_ssize_t i
    cdef uint32_t rank, start, merged, after, end
    cdef uint32_t before = 0
    cdef uint64_t key, right_head, right_hash, left_head, left_hash
    cdef bint right, left
    if n <= 1:
        return n
    if _rank(r, b, n) != NO_RANK:
        return 1
    if n == 2:
        return 2
    if n <= SHORT_PIECE:
        return _bpe_count_short(r, b, n)
    if n <= STACK_PIECE:
        nxt = stack
        heap = stack_heap
    else:
        nxt = <uint32_t*>malloc(3 * (n + 1) * sizeof(uint32_t) + 3 * n * sizeof(uint64_t))
        if nxt == NULL:
            raise MemoryError()
        heap = <uint64_t*>(nxt + 3 * (n + 1))
    prv = nxt + (n + 1)
    pair = prv + (n + 1)
    for i in range(n):
        nxt[i] = <uint32_t>(i + 1)
        prv[i] = <uint32_t>(i - 1)
        pair[i] = NO_RANK
    for i in range(n - 1):
        rank = r.pairs[(<uint32_t>b[i] << 8) | b[i + 1]]
        pair[i] = rank
        if rank != NO_RANK:
            _heap_push(heap, &heap_size, ((<uint64_t>rank) << 32) | <uint64_t>i)
    while heap_size:
        key = _heap_pop(heap, &heap_size)
        rank = <uint32_t>(key >> 32)
        start = <uint32_t>(key & 0xFFFFFFFFU)
        if pair[start] != rank:
            continue  # stale: the part is gone or its pair has changed since
        merged = nxt[start]
        after = nxt[merged]
        nxt[start] = after
        if after < n:
            prv[after] = start
        pair[merged] = NO_RANK
        parts -= 1
        # the two spans the merge makes (the merged part with the next one, the previous part
        # with it), hashed and prefetched before either slot is read
        right = False
        left = False
        if after < n:
            end = nxt[after]
            right = _prepare(r, b + start, end - start, &right_head, &right_hash)
        if start > 0:
            before = prv[start]
            left = _prepare(r, b + before, after - before, &left_head, &left_hash)
        rank = _probe(r, b + start, end - start, right_head, right_hash) if right else NO_RANK
        pair[start] = rank
        if rank != NO_RANK:
            _heap_push(heap, &heap_size, ((<uint64_t>rank) << 32) | <uint64_t>start)
        if start > 0:
            rank = _probe(r, b + before, after - before, left_head, left_hash) if left else NO_RANK
            pair[before] = rank
            if rank != NO_RANK:
                _heap_push(heap, &heap_size, ((<uint64_t>rank) << 32) | <uint64_t>before)
    if nxt != stack:
        free(nxt)
    return parts


# --------------------------------------------------------------------------- backtracking BPE

# A long miss is counted by the backtracking encoder of GitHub's ``bpe`` crate (rust-gems,
# crates/bpe/src/backtrack_encoder.rs; the argument is in its README), as
# ``_count_py.backtrack_count`` does it in Python, where the algorithm is written out: the BPE
# encoding of a text is its only split into tokens where each two neighbours are *compatible*
# (BPE of their bytes together gives those two back), so take the longest token at the start,
# then at each boundary the longest token compatible with the one before it, a shorter one where
# none is, and step back a token where no token fits at all (a bit per position remembers where
# no encoding goes on).  Whether two tokens are compatible is decided by undoing BPE's merges at
# their boundary (``_compatible``, the crate's ``is_valid_token_pair``) with each token's *split*:
# the two tokens BPE merged into it, found once per encoding (``_build_backtrack``).  The merge
# loop above costs a scan or a heap operation per merge, about two merges a byte in CJK text;
# this costs a few rank lookups per token.  Which lengths to look up at a position is read from
# a mask of the lengths of the tokens that start with its first two bytes (with its character
# where that is a three-byte one, CJK: two lookups a token instead of four, and a token that
# is that character alone is read from a table of them).  The tables (about 4 MB for
# o200k_base, 0.1 s to build) are built once per process, when the pieces they would count
# have reached ``_backtrack_after`` bytes (1 MB): a process that counts a few texts never
# builds them, so the cold start stays as it was, and one that counts many pays for them
# within its first few MB of such text.  Only pieces this is faster for are counted so
# (``_backtrack_min``: measured on the bench corpora): a short ASCII piece is merged faster.

cdef Py_ssize_t _backtrack_min = 24            # ASCII misses of at least this many bytes
cdef Py_ssize_t _backtrack_min_other = 4       # other misses of at least this many bytes
cdef size_t _backtrack_after = 1 << 20         # ... after this many merged bytes in the process


def _set_backtracking(Py_ssize_t min_ascii, Py_ssize_t min_other, size_t after_bytes):
    """Count ASCII misses of at least ``min_ascii`` bytes and others of at least ``min_other``
    by backtracking once ``after_bytes`` bytes of such misses have been merged in the process
    (tests: ``_set_backtracking(1, 1, 0)`` uses it for every miss at once); return the
    previous triple."""
    global _backtrack_min, _backtrack_min_other, _backtrack_after
    previous = (_backtrack_min, _backtrack_min_other, _backtrack_after)
    _backtrack_min = min_ascii
    _backtrack_min_other = min_other
    _backtrack_after = after_bytes
    return previous


cdef extern from *:
    """
    #if defined(_MSC_VER)
    static __inline int _count_c_clz64(unsigned long long x) {
        unsigned long i; _BitScanReverse64(&i, x); return 63 - (int)i;
    }
    #else
    #define _count_c_clz64(x) __builtin_clzll(x)
    #endif
    #define _COUNT_C_NO_SPLIT 0xFFFFFFFFu
    """
    int _count_c_clz64(uint64_t x) noexcept nogil
    const uint32_t NO_SPLIT "_COUNT_C_NO_SPLIT"   # a split not found yet (while building)


cdef void _free_backtrack(_Backtrack* t) noexcept:
    if t != NULL:
        free(t.split)
        free(t.offset)
        free(t.length)
        free(t.lead_lengths)
        free(t.char_lengths)
        free(t.char_rank)
        free(t.parts)
        free(t.pair_cache)
        free(t)


cdef inline Py_ssize_t _longest_token(const _Ranks* r, const _Backtrack* t, const uint8_t* b,
                                      Py_ssize_t most, uint32_t* rank) noexcept nogil:
    # The length of the longest token b[:L], L <= most (1 <= most), and its rank in ``rank``:
    # only the lengths of tokens that start with b's first two bytes are looked up, longest first.
    cdef uint64_t lengths
    cdef Py_ssize_t length
    cdef uint32_t found
    cdef uint32_t character = 0
    if most >= 2:
        lengths = t.lead_lengths[(<uint32_t>b[0] << 8) | b[1]]
        if most >= 3 and b[0] & 0xF0 == 0xE0 and b[1] & 0xC0 == 0x80 and b[2] & 0xC0 == 0x80:
            # a three-byte character: the lengths of the tokens that start with it (and 2), and
            # its own rank where it is one (read without the rank table)
            character = ((<uint32_t>b[0] & 0x0F) << 12) | ((<uint32_t>b[1] & 0x3F) << 6) | (b[2] & 0x3F)
            lengths = (lengths & 2) | t.char_lengths[character]
        if most >= 64 and lengths >> 63:
            length = min(most, r.max_length)
            while length >= 64:
                found = _rank(r, b, length)
                if found != NO_RANK:
                    rank[0] = found
                    return length
                length -= 1
        if most < 64:
            lengths &= (1ULL << most) - 1
        lengths &= ~(1ULL << 63)
        while lengths:
            length = 64 - _count_c_clz64(lengths)
            if length == 3 and character:
                rank[0] = t.char_rank[character]
                return 3
            found = _rank(r, b, length)
            if found != NO_RANK:
                rank[0] = found
                return length
            lengths ^= 1ULL << (length - 1)
    rank[0] = t.byte_rank[b[0]]
    return 1


cdef inline bint _compatible(const _Ranks* r, const _Backtrack* t, const uint8_t* b, Py_ssize_t at,
                             uint32_t first, uint32_t second) noexcept nogil:
    # Whether BPE of the two tokens first = b[at - len(first):at] and second = b[at:at + len(second)]
    # (each given as its rank | its length << 24, as _Backtrack.split holds them) together gives
    # them back: undo the merges on each side of the boundary ``at``, the later one first, and
    # look for a token across it that BPE would have merged before (a pair of the two parts
    # there that is some token's split, of a rank below ``limit``, the rank of the last merge
    # undone).  The crate's ``is_valid_token_pair``; ``b`` has eight readable bytes past every
    # span looked up.
    cdef uint32_t limit = NO_RANK
    cdef uint32_t combined
    cdef uint32_t left = first & 0xFFFFFF      # ranks
    cdef uint32_t right = second & 0xFFFFFF
    cdef uint32_t first_part, second_part
    while True:
        # the parts each side splits into, read first: both reads under way at once
        first_part = t.split[2 * left + 1]
        second_part = t.split[2 * right]
        # only a first part of some split next to a second part of one can be that split
        if (t.parts[left >> 5] >> (2 * (left & 31))) & (t.parts[right >> 5] >> (2 * (right & 31) + 1)) & 1:
            combined = _rank(r, b + at - (first >> 24), (first >> 24) + (second >> 24))
            if combined != NO_RANK and combined < limit and t.split[2 * combined] == first \
                    and t.split[2 * combined + 1] == second:
                return False
        if left > right:
            limit = left
            first = first_part
            left = first & 0xFFFFFF
            if left == limit:
                limit = right + 1
                second = second_part
                right = second & 0xFFFFFF
                if right + 1 == limit:
                    return True
        else:
            limit = right + 1
            second = second_part
            right = second & 0xFFFFFF
            if right + 1 == limit:
                limit = left
                first = first_part
                left = first & 0xFFFFFF
                if left == limit:
                    return True


DEF PAIR_CACHE_BITS = 14   # _Backtrack.pair_cache: 16,384 entries (128 KB)


cdef inline bint _compatible_cached(const _Ranks* r, _Backtrack* t, const uint8_t* b, Py_ssize_t at,
                                    uint32_t first, uint32_t second) noexcept nogil:
    # _compatible(r, t, b, at, first, second), remembered: its answer depends on the two tokens
    # alone (the span across ``at`` is their bytes), and the same pairs recur (two characters
    # of a script that follow each other often, in text after text), so a direct-mapped table
    # keyed by the two ranks answers most calls with one load instead of the walk down both
    # splits.  An entry: the ranks (24 bits each), bit 62 set (not empty), bit 63 the answer.
    # Only the finished tables may be remembered (while _build_backtrack runs, an answer can
    # change as later splits are found), so _build_backtrack calls _compatible itself.
    cdef uint64_t key = ((<uint64_t>(first & 0xFFFFFF)) << 24) | (second & 0xFFFFFF) | (1ULL << 62)
    cdef uint64_t* entry = &t.pair_cache[(key * 0x9E3779B97F4A7C15ULL) >> (64 - PAIR_CACHE_BITS)]
    cdef bint answer
    if (entry[0] & ~(1ULL << 63)) == key:
        return <bint>(entry[0] >> 63)
    answer = _compatible(r, t, b, at, first, second)
    entry[0] = key | (<uint64_t>answer << 63)
    return answer


cdef Py_ssize_t _backtrack_count(const _Ranks* r, _Backtrack* t, const uint8_t* b,
                                 Py_ssize_t n) except -1:
    # len(encode_single_piece(b[:n])) (n >= 1, eight readable bytes past b + n): the crate's
    # BacktrackEncoder, counted.  ``ends[k]``: where the k-th token ends; ``ranks[k]``: its rank;
    # ``dead[p]``: no encoding of b[p:] goes on from a token ending at p.
    cdef uint32_t stack_ends[STACK_PIECE + 1]
    cdef uint32_t stack_ranks[STACK_PIECE + 1]
    cdef uint8_t stack_dead[STACK_PIECE + 1]
    cdef uint32_t* ends = stack_ends
    cdef uint32_t* ranks = stack_ranks
    cdef uint8_t* dead = stack_dead
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t length
    cdef uint32_t rank
    if n > STACK_PIECE:
        ends = <uint32_t*>malloc((n + 1) * (2 * sizeof(uint32_t) + 1))
        if ends == NULL:
            raise MemoryError()
        ranks = ends + (n + 1)
        dead = <uint8_t*>(ranks + (n + 1))
    memset(dead, 0, n + 1)
    length = _longest_token(r, t, b, n, &rank)
    while True:
        rank |= <uint32_t>length << 24
        if not dead[pos + length] and (count == 0 or _compatible_cached(r, t, b, pos, ranks[count - 1], rank)):
            pos += length
            ranks[count] = rank
            ends[count] = <uint32_t>pos
            count += 1
            if pos == n:
                break
            _prefetch(&t.split[2 * (rank & 0xFFFFFF)])   # the next _compatible reads it
            length = _longest_token(r, t, b + pos, n - pos, &rank)
        elif length > 1:
            length = _longest_token(r, t, b + pos, length - 1, &rank)
        else:
            # no token fits at pos: step back, and try the token before it shorter
            if count == 0:   # b[0] is a token: never
                if ends != stack_ends:
                    free(ends)
                raise AssertionError("backtracking found no encoding")
            dead[pos] = 1
            count -= 1
            rank = ranks[count] & 0xFFFFFF
            pos = ends[count - 1] if count else 0
            length = ends[count] - pos
    if ends != stack_ends:
        free(ends)
    return count


cdef _Backtrack* _build_backtrack(_Ranks* r) except? NULL:
    # The tables of _backtrack_count for the ranks ``r``; NULL (and r.no_backtrack) when the
    # ranks are not 0 to r.tokens - 1 or a byte is no token.  Each token's split is the crate's
    # (``BytePairEncoding::from_dictionary``): in rank order, the longest token prefix ``first``
    # whose rest ``second`` is a token, both of lower rank, compatible with each other (by the
    # splits found so far); the next shorter prefix where not; none for a token of one byte.
    cdef _Backtrack* t = <_Backtrack*>calloc(1, sizeof(_Backtrack))
    cdef size_t k, index
    cdef uint32_t rank, first, second
    cdef const uint8_t* b
    cdef Py_ssize_t length, cut
    if t == NULL:
        raise MemoryError()
    t.split = <uint32_t*>malloc(2 * r.tokens * sizeof(uint32_t))
    t.offset = <uint32_t*>malloc(r.tokens * sizeof(uint32_t))
    t.length = <uint8_t*>calloc(r.tokens, 1)
    t.lead_lengths = <uint64_t*>calloc(65536, sizeof(uint64_t))
    t.char_lengths = <uint64_t*>calloc(65536, sizeof(uint64_t))
    t.char_rank = <uint32_t*>calloc(65536, sizeof(uint32_t))
    t.parts = <uint64_t*>calloc(r.tokens // 32 + 1, sizeof(uint64_t))
    t.pair_cache = <uint64_t*>calloc(1 << PAIR_CACHE_BITS, sizeof(uint64_t))
    if t.split == NULL or t.offset == NULL or t.length == NULL or t.lead_lengths == NULL \
            or t.char_lengths == NULL or t.char_rank == NULL or t.parts == NULL \
            or t.pair_cache == NULL:
        _free_backtrack(t)
        raise MemoryError()
    memset(t.split, 0xFF, 2 * r.tokens * sizeof(uint32_t))
    for k in range(256):
        t.byte_rank[k] = NO_RANK
    for index in range(r.mask + 1):
        if r.slots[index].shape == 0:
            continue
        rank = r.slots[index].rank
        length = r.slots[index].shape & 0xFF
        if rank >= r.tokens or t.length[rank]:   # a gap in the ranks (or a rank twice)
            _free_backtrack(t)
            r.no_backtrack = True
            return NULL
        t.offset[rank] = r.slots[index].shape >> 8
        t.length[rank] = <uint8_t>length
        b = r.arena + t.offset[rank]
        if length == 1:
            t.byte_rank[b[0]] = rank
        else:
            t.lead_lengths[(<uint32_t>b[0] << 8) | b[1]] |= 1ULL << (min(length, 64) - 1)
        if length >= 3 and b[0] & 0xF0 == 0xE0 and b[1] & 0xC0 == 0x80 and b[2] & 0xC0 == 0x80:
            k = ((<uint32_t>b[0] & 0x0F) << 12) | ((<uint32_t>b[1] & 0x3F) << 6) | (b[2] & 0x3F)
            t.char_lengths[k] |= 1ULL << (min(length, 64) - 1)
            if length == 3:
                t.char_rank[k] = rank
    for k in range(256):
        if t.byte_rank[k] == NO_RANK:
            _free_backtrack(t)
            r.no_backtrack = True
            return NULL
    for rank in range(<uint32_t>r.tokens):
        b = r.arena + t.offset[rank]
        length = t.length[rank]
        t.split[2 * rank] = rank | <uint32_t>length << 24
        t.split[2 * rank + 1] = rank | <uint32_t>length << 24
        if length == 1:
            continue
        cut = _longest_token(r, t, b, length - 1, &first)
        while True:
            second = _rank(r, b + cut, length - cut)
            if second != NO_RANK and first < rank and second < rank \
                    and _compatible(r, t, b, cut, first | <uint32_t>cut << 24,
                                    second | <uint32_t>(length - cut) << 24):
                t.split[2 * rank] = first | <uint32_t>cut << 24
                t.split[2 * rank + 1] = second | <uint32_t>(length - cut) << 24
                t.parts[first >> 5] |= 1ULL << (2 * (first & 31))
                t.parts[second >> 5] |= 1ULL << (2 * (second & 31) + 1)
                break
            if cut == 1:
                break
            cut = _longest_token(r, t, b, cut - 1, &first)
    return t


cdef _Backtrack* _backtrack_of(_Ranks* r) except? NULL:
    # r.backtrack, built on the first call (under the GIL, as every caller holds it).
    if r.backtrack == NULL and not r.no_backtrack:
        r.backtrack = _build_backtrack(r)
    return r.backtrack


def _backtrack_splits(encoding):
    """Each rank's split as ``[(first, second), ...]`` (ranks; the rank twice for a byte), the
    tables built if need be; ``None`` where the ranks do not allow them (tests)."""
    cdef _Ranks* r = _ranks_of(encoding, encoding == "cl100k_base")
    cdef _Backtrack* t = _backtrack_of(r)
    cdef size_t rank
    if t == NULL:
        return None
    return [(t.split[2 * rank] & 0xFFFFFF, t.split[2 * rank + 1] & 0xFFFFFF) for rank in range(r.tokens)]


def _backtrack_piece(encoding, piece):
    """The backtracking count of the bytes ``piece`` (tokens) in ``encoding``, its tables built
    if need be; ``None`` where the ranks do not allow it (tests)."""
    cdef _Ranks* r = _ranks_of(encoding, encoding == "cl100k_base")
    cdef bytes data = bytes(piece) + b"\0" * 8
    cdef _Backtrack* t = _backtrack_of(r)
    if t == NULL:
        return None
    if len(piece) == 0:
        return 0
    return _backtrack_count(r, t, <const uint8_t*>data, len(piece))


cdef inline Py_ssize_t _utf8(const _unit* s, Py_ssize_t i, Py_ssize_t e, uint8_t* out) noexcept nogil:
    # Encode s[i:e] as UTF-8 into ``out`` (room for 4 bytes a code point); -1 on a surrogate.
    cdef Py_ssize_t n = 0
    cdef uint32_t cp
    while i < e:
        cp = s[i]
        if cp < 0x80:
            out[n] = <uint8_t>cp
            n += 1
        elif cp < 0x800:
            out[n] = <uint8_t>(0xC0 | (cp >> 6))
            out[n + 1] = <uint8_t>(0x80 | (cp & 0x3F))
            n += 2
        elif cp < 0x10000:
            if 0xD800 <= cp <= 0xDFFF:
                return -1
            out[n] = <uint8_t>(0xE0 | (cp >> 12))
            out[n + 1] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
            out[n + 2] = <uint8_t>(0x80 | (cp & 0x3F))
            n += 3
        else:
            out[n] = <uint8_t>(0xF0 | (cp >> 18))
            out[n + 1] = <uint8_t>(0x80 | ((cp >> 12) & 0x3F))
            out[n + 2] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
            out[n + 3] = <uint8_t>(0x80 | (cp & 0x3F))
            n += 4
        i += 1
    return n


cdef inline Py_ssize_t _count_short_ascii(const _Ranks* r, uint64_t head, Py_ssize_t n) noexcept nogil:
    # The tokens of the ASCII piece of n (1 to 8) bytes ``head`` (their _head) where no merge
    # loop is needed, 0 where it is (the memo's): 1 if the piece is one token (one lookup in the
    # pairs, or one Bloom filter word and, where it may be one, one rank slot: _hash_span of
    # n <= 8 bytes reads ``head`` alone); 2 for two bytes that are none; for three that are
    # none, 2 if one of their pairs is a token (they merge, and the whole is none), else 3.
    cdef uint64_t h
    cdef uint32_t first = <uint32_t>head & 0xFF
    cdef uint32_t second = <uint32_t>(head >> 8) & 0xFF
    cdef uint32_t third
    if n <= 2:
        # every byte is a token; two are one where their pair is (for one byte ``second`` is 0
        # and the pair read is ignored): no branch on the length, which the predictor misses
        return 1 + ((n == 2) & (r.pairs[(first << 8) | second] == NO_RANK))
    h = _hash_short(head, n)
    _prefetch(&r.slots[<size_t>(h >> r.shift)])   # most such pieces are tokens: both loads at once
    if _maybe_token(r, h) and _probe_short(r, head, n, h) != NO_RANK:
        return 1
    if n == 3:
        third = <uint32_t>(head >> 16) & 0xFF
        if r.pairs[(first << 8) | second] != NO_RANK or r.pairs[(second << 8) | third] != NO_RANK:
            return 2
        return 3
    return 0


cdef inline bint _is_long_token(const _Ranks* r, const _unit* s, Py_ssize_t i, Py_ssize_t e,
                                Py_ssize_t n) noexcept nogil:
    # Whether the piece s[i:e] of 9 to 16 code points is ASCII and one token.  An ASCII 1-byte
    # string holds its UTF-8 bytes: they are read in place where 16 bytes are left (_head reads
    # eight past the second word); a 2-byte string's are packed from four loads where 16 units
    # are left; elsewhere they are copied to the stack one by one, zeros after them.
    cdef uint8_t buf[24]
    cdef const uint8_t* b = NULL
    cdef uint64_t first, second, h
    cdef Py_ssize_t length = e - i
    cdef Py_ssize_t k
    cdef uint32_t high = 0
    cdef uint32_t cp
    cdef uint64_t w0, w1, w2, w3
    if _unit is Py_UCS1:
        if _COUNT_C_LITTLE_ENDIAN and i + 16 <= n:
            b = <const uint8_t*>s + i
    elif _unit is Py_UCS2:
        if _COUNT_C_LITTLE_ENDIAN and i + 16 <= n:
            # sixteen units in four loads, those past the piece (9 to 16 units) masked off
            memcpy(&w0, s + i, 8)
            memcpy(&w1, s + i + 4, 8)
            memcpy(&w2, s + i + 8, 8)
            memcpy(&w3, s + i + 12, 8)
            if length <= 12:
                w3 = 0
                if length < 12:
                    w2 &= 0xFFFFFFFFFFFFFFFFULL >> (64 - 16 * (length - 8))
            elif length < 16:
                w3 &= 0xFFFFFFFFFFFFFFFFULL >> (64 - 16 * (length - 12))
            if (w0 | w1 | w2 | w3) & 0xFF80FF80FF80FF80ULL:
                return False
            first = _pack4(w0) | (_pack4(w1) << 32)
            second = _pack4(w2) | (_pack4(w3) << 32)
            memcpy(buf, &first, 8)
            memcpy(buf + 8, &second, 8)
            memset(buf + 16, 0, 8)
            b = buf
    if b == NULL:
        memset(buf, 0, 24)
        for k in range(length):
            cp = s[i + k]
            high |= cp
            buf[k] = <uint8_t>cp
        if high >= 128:
            return False
        b = buf
    first = _head(b, 8)
    second = _head(b + 8, length - 8)
    if (first | second) & HIGH_BITS:
        return False
    h = _hash_span(b, length, first)
    _prefetch(&r.slots[<size_t>(h >> r.shift)])
    if not _maybe_token(r, h):
        return False
    return _probe(r, b, length, first, h) != NO_RANK


cdef Py_ssize_t _count_piece(PieceCounter counter, const _unit* s, Py_ssize_t i, Py_ssize_t e,
                             object text) except -1:
    # The tokens of the piece s[i:e] (a memo miss), by the native BPE; its UTF-8 bytes on the
    # stack if it is short (with the eight bytes after them _bpe_count reads).  A piece with a
    # lone surrogate raises the UnicodeEncodeError count() handles, as the twin's
    # ``piece.encode("utf-8")`` does.
    cdef uint8_t buf[4 * C_SMALL_PIECE + 8]
    cdef uint8_t* bytes_ = buf
    cdef Py_ssize_t n
    cdef Py_ssize_t tokens = 0
    cdef _Ranks* r = counter._ranks
    cdef bint backtrack
    if e - i > C_SMALL_PIECE:
        bytes_ = <uint8_t*>malloc(4 * (e - i) + 8)
        if bytes_ == NULL:
            raise MemoryError()
    n = _utf8(s, i, e, bytes_)
    if n >= 0:
        memset(bytes_ + n, 0, 8)
        try:
            backtrack = n >= (_backtrack_min if n == e - i else _backtrack_min_other)
            if backtrack and r.backtrack == NULL and not r.no_backtrack:
                r.merged_bytes += n
                if r.merged_bytes >= _backtrack_after:
                    _backtrack_of(r)
            if backtrack and r.backtrack != NULL:
                tokens = _backtrack_count(r, r.backtrack, bytes_, n)
            else:
                tokens = _bpe_count(r, bytes_, n)
        finally:
            if bytes_ != buf:
                free(bytes_)
        return tokens
    if bytes_ != buf:
        free(bytes_)
    PyUnicode_AsUTF8String(PyUnicode_Substring(text, i, e))  # raises UnicodeEncodeError
    raise AssertionError("a piece that is no valid UTF-8 encoded")


cdef Py_ssize_t _count_units(PieceCounter counter, const _unit* s, Py_ssize_t n, object text) except -1:
    # The hot loop of PieceCounter.count(): split, look up, sum; tiktoken only on a miss.
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t e
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t tokens
    cdef uint32_t h
    cdef uint64_t packed
    cdef bint is_packed
    cdef _Slot* slot
    cdef bint cl100k = counter._cl100k
    cdef _Memo* memo = &counter._memo      # the newer generation (its struct, swapped in place)
    cdef _Memo* older = &counter._older
    cdef bint remember = counter.memo_size > 0
    cdef _Block block
    _block_init(&block)
    while i < n:
        e = _next_piece_end(&block, cl100k, s, i, n)
        if e - i <= C_MAX_MEMO_PIECE:
            if 8 < e - i <= C_MAX_TOKEN_PIECE and _is_long_token(counter._ranks, s, i, e, n):
                # an ASCII piece of 9 to MAX_TOKEN_PIECE characters that is one token (before
                # the memo's hash, which it does not need)
                total += 1
                i = e
                continue
            h = _hash_piece(s, i, e, n, &packed, &is_packed)
            if is_packed and not packed & HIGH_BITS:
                # an ASCII piece of at most 8 characters: its UTF-8 bytes are the packed code
                # points; one that is a token, or of at most
                # MAX_MERGELESS_PIECE (3), is counted from the ranks, not remembered
                tokens = _count_short_ascii(counter._ranks, packed, e - i)
                if tokens:
                    total += tokens
                    i = e
                    continue
            slot = _find(memo, h, packed, is_packed, s, i, e)
            if slot.shape:
                total += slot.tokens
            else:
                slot = _find(older, h, packed, is_packed, s, i, e) if older.used else NULL
                if slot != NULL and slot.shape:
                    tokens = slot.tokens
                else:
                    tokens = _count_piece(counter, s, i, e, text)
                if remember:
                    _make_room(counter, e - i)
                    _remember(memo, h, packed, is_packed, s, i, e, tokens)
                total += tokens
        else:
            total += _count_piece(counter, s, i, e, text)
        i = e
    return total


cdef list _pieces_units(bint cl100k, const _unit* s, Py_ssize_t n, object text):
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t e
    cdef list out = []
    cdef _Block block
    _block_init(&block)
    while i < n:
        e = _next_piece_end(&block, cl100k, s, i, n)
        out.append(PyUnicode_Substring(text, i, e))
        i = e
    return out


def single_piece_bpe(encoding):
    """Return tiktoken's BPE of one piece (UTF-8 bytes -> token ids), without the regex split.

    ``CoreBPE.encode_single_piece`` is what ``encode_ordinary`` runs on each piece: the whole
    piece if it is one token, else the byte-pair merges.
    """
    return get_encoding(encoding)._core_bpe.encode_single_piece


def _check_encoding(encoding):
    """Raise :class:`EncodingDataMissing` unless ``encoding`` has a pre-tokenizer here."""
    if encoding not in ENCODING_NAMES:
        known = ", ".join(ENCODING_NAMES)
        raise EncodingDataMissing(
            f"no pre-tokenizer for encoding {encoding!r}; expected one of: {known}"
        )


cdef int _init_memo(_Memo* memo, size_t max_slots) except -1:
    # An empty generation of at most ``max_slots`` slots (a power of two), 1024 to start with.
    cdef size_t slots = min(max_slots, <size_t>1024)
    free(memo.slots)
    memo.slots = <_Slot*>calloc(slots, sizeof(_Slot))
    if memo.slots == NULL:
        raise MemoryError()
    memo.max_slots = max_slots
    memo.mask = slots - 1
    memo.used = 0
    memo.keys_used = 0
    memo.chars = 0
    return 0


cdef class PieceCounter:
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

    cdef readonly str encoding
    cdef readonly Py_ssize_t memo_size
    cdef bint _cl100k
    cdef size_t _generation
    cdef _Memo _memo
    cdef _Memo _older
    cdef _Ranks* _ranks

    def __init__(self, encoding: str = "o200k_base", memo_size: int = DEFAULT_MEMO_SIZE) -> None:
        cdef size_t slots = 8
        _check_encoding(encoding)
        if memo_size < 0:
            raise ValueError(f"memo_size must be >= 0 pieces, got {memo_size}")
        self.encoding = encoding
        self.memo_size = memo_size
        self._cl100k = encoding == "cl100k_base"
        self._ranks = _ranks_of(encoding, self._cl100k)
        self._generation = (<size_t>memo_size + 1) // 2
        while slots < 2 * self._generation:
            slots *= 2
        _init_memo(&self._memo, slots)
        _init_memo(&self._older, slots)

    def __dealloc__(self):
        free(self._memo.slots)
        free(self._memo.keys)
        free(self._older.slots)
        free(self._older.keys)

    @property
    def memo_len(self) -> int:
        """The number of pieces remembered now, in both generations (``<= memo_size``).

        A piece copied from the older generation into the newer one counts twice.
        """
        return self._memo.used + self._older.used

    def clear(self) -> None:
        """Forget every remembered piece."""
        _forget(&self._memo)
        _forget(&self._older)

    def pieces(self, text: str) -> list[str]:
        """Return the pre-tokenizer's pieces of ``text``, in order (they join back to ``text``)."""
        if not isinstance(text, str):
            raise TypeError(f"pieces() expected a str, got {type(text).__name__}; decode bytes first")
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
        cdef int kind = PyUnicode_KIND(text)
        cdef void* data = PyUnicode_DATA(text)
        if kind == PyUnicode_1BYTE_KIND:
            return _pieces_units(self._cl100k, <const Py_UCS1*>data, n, text)
        if kind == PyUnicode_2BYTE_KIND:
            return _pieces_units(self._cl100k, <const Py_UCS2*>data, n, text)
        return _pieces_units(self._cl100k, <const Py_UCS4*>data, n, text)

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

    cdef Py_ssize_t _count(self, str text) except -1:
        # Split ``text``, look each piece up, sum (the hot loop of count()).
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
        cdef int kind = PyUnicode_KIND(text)
        cdef void* data = PyUnicode_DATA(text)
        if kind == PyUnicode_1BYTE_KIND:
            return _count_units(self, <const Py_UCS1*>data, n, text)
        if kind == PyUnicode_2BYTE_KIND:
            return _count_units(self, <const Py_UCS2*>data, n, text)
        return _count_units(self, <const Py_UCS4*>data, n, text)


_counters = {}
_lock = threading.Lock()


def _counter(encoding):
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
