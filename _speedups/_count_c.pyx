"""Count the exact BPE tokens of a text: pre-tokenize, then a memo of piece counts (compiled).

The compiled twin of ``compaction/tokens/_count_py.py``, which documents the algorithm and is
the specification: same names, same order, same error messages, the same pieces and the same
count for every ``str``.  Only the pass over the text is native, one call per text: a
hand-written scanner reproduces each alternative of the ``o200k_base`` and ``cl100k_base``
split patterns (leftmost-first alternation, greedy and possessive quantifiers, the ``(?!\\S)``
look-ahead, as tiktoken's ``fancy-regex`` applies them) on the string's PEP 393 buffer, with the
character classes of ``compaction/tokens/_unicode_tables.py`` in a two-level table, and looks
each piece up in a C hash table keyed by its code points.  tiktoken's BPE is called only for a
piece the memo does not hold.  Directives are in ``setup.py``.
"""

import threading

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcpy, memset

from ..errors import EncodingDataMissing
from ._unicode_tables import LOWER, MARK, NUMBER, OTHER_LETTER, SPACE, UPPER, class_table
from .encodings import get_encoding

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

__all__ = ["PieceCounter", "count_tokens", "ENCODING_NAMES", "DEFAULT_MEMO_SIZE", "MAX_MEMO_PIECE"]

ENCODING_NAMES = ("cl100k_base", "o200k_base")
DEFAULT_MEMO_SIZE = 65536
MAX_MEMO_PIECE = 64

# --------------------------------------------------------------------------- character classes

# Flags of a code point, what the two patterns test.
cdef enum:
    F_UPPER = 1      # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]  (o200k's first letter set)
    F_LOWER = 2      # [\p{Ll}\p{Lm}\p{Lo}\p{M}]        (o200k's second letter set)
    F_LETTER = 4     # \p{L}
    F_NUMBER = 8     # \p{N}
    F_SPACE = 16     # \s
    F_NEWLINE = 32   # [\r\n]
    C_MAX_MEMO_PIECE = 64

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


cdef inline Py_ssize_t _cased_word_end(const _unit* s, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    # [A]*[B]+ from j (A = F_UPPER, B = F_LOWER), greedy with backtracking; -1 if no match
    cdef Py_ssize_t a = j
    cdef Py_ssize_t e
    while a < n and _flags(s, a) & F_UPPER:
        a += 1
    if a < n and _flags(s, a) & F_LOWER:
        e = a + 1
        while e < n and _flags(s, e) & F_LOWER:
            e += 1
        return e
    while a > j:  # give back [A]* characters until one can start [B]+
        a -= 1
        if _flags(s, a) & F_LOWER:
            return a + 1
    return -1


cdef inline Py_ssize_t _upper_word_end(const _unit* s, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    # [A]+[B]* from j; -1 if no match
    cdef Py_ssize_t a = j
    while a < n and _flags(s, a) & F_UPPER:
        a += 1
    if a == j:
        return -1
    while a < n and _flags(s, a) & F_LOWER:
        a += 1
    return a


cdef inline Py_ssize_t _space_run_end(const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and _flags(s, i) & F_SPACE:
        i += 1
    return i


cdef inline Py_ssize_t _last_newline_end(const _unit* s, Py_ssize_t i, Py_ssize_t w) noexcept nogil:
    # \s*[\r\n] within the whitespace run [i, w): one past its last newline; -1 if none
    while w > i:
        w -= 1
        if _flags(s, w) & F_NEWLINE:
            return w + 1
    return -1


cdef Py_ssize_t _o200k_piece_end(const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    # The end of the piece o200k_base's pattern matches at i (i < n), alternative by alternative.
    cdef uint8_t f = _flags(s, i)
    cdef Py_ssize_t e, w
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
    w = _space_run_end(s, i, n)
    e = _last_newline_end(s, i, w)
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
    cdef Py_ssize_t e, w
    # 1. '(?i:[sdmt]|ll|ve|re)
    if s[i] == 39:
        e = _cl100k_contraction(s, i, n)
        if e:
            return i + e
    # 2. [^\r\n\p{L}\p{N}]?+\p{L}++
    e = i + 1 if _prefix(f) else i
    if e < n and _flags(s, e) & F_LETTER:
        e += 1
        while e < n and _flags(s, e) & F_LETTER:
            e += 1
        return e
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
    w = _space_run_end(s, i, n)
    if w == n:
        return n
    # 6. \s*[\r\n]
    e = _last_newline_end(s, i, w)
    if e >= 0:
        return e
    # 7. \s+(?!\S)
    if w - i >= 2:
        return w - 1
    # 8. \s
    return i + 1


cdef inline Py_ssize_t _piece_end(bint cl100k, const _unit* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    if cl100k:
        return _cl100k_piece_end(s, i, n)
    return _o200k_piece_end(s, i, n)


# --------------------------------------------------------------------------- the memo

cdef class PieceCounter


ctypedef struct _Slot:
    uint32_t hash
    uint8_t length      # code points (<= MAX_MEMO_PIECE); 0 marks an empty slot
    uint8_t packed      # 1: ``key`` holds the code points themselves (see _hash_piece)
    uint16_t tokens     # <= 4 * MAX_MEMO_PIECE: a token holds at least one byte
    uint64_t key        # the packed code points, or their offset in _Memo.keys


ctypedef struct _Memo:
    _Slot* slots
    size_t mask         # slots - 1: a power of two, grown to keep them at most 3/4 full
    size_t max_slots    # the last size: at least twice the memo size
    size_t used
    size_t limit        # memo_size
    uint32_t* keys
    size_t keys_used
    size_t keys_capacity


cdef inline uint32_t _hash_piece(const _unit* s, Py_ssize_t i, Py_ssize_t e, uint64_t* packed,
                                 bint* is_packed) noexcept nogil:
    # FNV-1a of the piece's code points.  A piece of at most 8 code points below 256 (most
    # pieces) is also packed into 64 bits, one byte each (``is_packed``), so that the memo
    # compares it in one step without touching the key arena.
    cdef uint32_t h = 2166136261U
    cdef uint64_t p = 0
    cdef uint32_t high = 0
    cdef uint32_t cp
    cdef int shift = 0
    cdef Py_ssize_t length = e - i
    while i < e:
        cp = s[i]
        h = (h ^ cp) * 16777619U
        if _unit is not Py_UCS1:
            high |= cp
        if shift < 64:
            p |= (<uint64_t>(cp & 0xFF)) << shift
        shift += 8
        i += 1
    packed[0] = p
    is_packed[0] = length <= 8 and high < 256
    return h ^ (h >> 15)


cdef inline _Slot* _find(_Memo* memo, uint32_t h, uint64_t packed, bint is_packed, const _unit* s,
                         Py_ssize_t i, Py_ssize_t e) noexcept nogil:
    # The slot holding piece s[i:e], or the empty slot where it belongs.
    cdef size_t index = h & memo.mask
    cdef _Slot* slot
    cdef uint32_t* key
    cdef Py_ssize_t k
    cdef uint8_t length = <uint8_t>(e - i)
    while True:
        slot = &memo.slots[index]
        if slot.length == 0:
            return slot
        if slot.hash == h and slot.length == length and slot.packed == is_packed:
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
        if old[j].length:
            index = old[j].hash & (size - 1)
            while slots[index].length:
                index = (index + 1) & (size - 1)
            slots[index] = old[j]
    memo.slots = slots
    memo.mask = size - 1
    free(old)
    return 0


cdef int _remember(_Memo* memo, uint32_t h, uint64_t packed, bint is_packed, const _unit* s,
                   Py_ssize_t i, Py_ssize_t e, Py_ssize_t tokens) except -1:
    cdef _Slot* slot
    cdef uint32_t* keys
    cdef size_t capacity
    cdef Py_ssize_t k
    if memo.limit == 0:
        return 0
    if memo.used >= memo.limit:
        memset(memo.slots, 0, (memo.mask + 1) * sizeof(_Slot))
        memo.used = 0
        memo.keys_used = 0
    if 4 * (memo.used + 1) > 3 * (memo.mask + 1) and memo.mask + 1 < memo.max_slots:
        _grow(memo)
    if not is_packed and memo.keys_used + (e - i) > memo.keys_capacity:
        capacity = memo.keys_capacity * 2 if memo.keys_capacity else 4096
        keys = <uint32_t*>realloc(memo.keys, capacity * sizeof(uint32_t))
        if keys == NULL:
            raise MemoryError()
        memo.keys = keys
        memo.keys_capacity = capacity
    slot = _find(memo, h, packed, is_packed, s, i, e)
    if slot.length:
        return 0  # already there
    slot.hash = h
    slot.length = <uint8_t>(e - i)
    slot.packed = is_packed
    slot.tokens = <uint16_t>tokens
    if is_packed:
        slot.key = packed
    else:
        slot.key = memo.keys_used
        for k in range(e - i):
            memo.keys[memo.keys_used + k] = s[i + k]
        memo.keys_used += e - i
    memo.used += 1
    return 0


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
    cdef _Memo* memo = &counter._memo
    while i < n:
        e = _piece_end(cl100k, s, i, n)
        if e - i <= C_MAX_MEMO_PIECE:
            h = _hash_piece(s, i, e, &packed, &is_packed)
            slot = _find(memo, h, packed, is_packed, s, i, e)
            if slot.length:
                total += slot.tokens
            else:
                tokens = len(counter._bpe(PyUnicode_AsUTF8String(PyUnicode_Substring(text, i, e))))
                _remember(memo, h, packed, is_packed, s, i, e, tokens)
                total += tokens
        else:
            total += len(counter._bpe(PyUnicode_AsUTF8String(PyUnicode_Substring(text, i, e))))
        i = e
    return total


cdef list _pieces_units(bint cl100k, const _unit* s, Py_ssize_t n, object text):
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t e
    cdef list out = []
    while i < n:
        e = _piece_end(cl100k, s, i, n)
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


cdef class PieceCounter:
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

    cdef readonly str encoding
    cdef readonly Py_ssize_t memo_size
    cdef object _bpe
    cdef bint _cl100k
    cdef _Memo _memo

    def __init__(self, encoding: str = "o200k_base", memo_size: int = DEFAULT_MEMO_SIZE) -> None:
        cdef size_t slots = 8
        _check_encoding(encoding)
        if memo_size < 0:
            raise ValueError(f"memo_size must be >= 0 pieces, got {memo_size}")
        self.encoding = encoding
        self.memo_size = memo_size
        self._bpe = single_piece_bpe(encoding)
        self._cl100k = encoding == "cl100k_base"
        while slots < 2 * <size_t>memo_size:
            slots *= 2
        self._memo.max_slots = slots
        slots = min(slots, 1024)
        free(self._memo.slots)
        self._memo.slots = <_Slot*>calloc(slots, sizeof(_Slot))
        if self._memo.slots == NULL:
            raise MemoryError()
        self._memo.mask = slots - 1
        self._memo.used = 0
        self._memo.limit = memo_size
        self._memo.keys_used = 0

    def __dealloc__(self):
        free(self._memo.slots)
        free(self._memo.keys)

    @property
    def memo_len(self) -> int:
        """The number of pieces remembered now (``<= memo_size``)."""
        return self._memo.used

    def clear(self) -> None:
        """Forget every remembered piece."""
        memset(self._memo.slots, 0, (self._memo.mask + 1) * sizeof(_Slot))
        self._memo.used = 0
        self._memo.keys_used = 0

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
