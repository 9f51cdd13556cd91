"""Differential tests of the compiled counter's miss path against tiktoken and the pure-Python twin.

The compiled counter answers a memo miss with its own byte-pair merge loop over a native rank
table (``_speedups/_count_c.pyx``): a slot holds a token's first eight bytes and its length, the
rest of a longer token is compared in an arena; a Bloom filter answers most spans that are no
token; a piece of up to 96 bytes is merged by tiktoken's scan, one of up to 128 by a heap with
arrays on the stack, a longer one on the heap; the merge loops hash and prefetch both of a
merge's new spans before they read either.  These tests aim text at each of those paths: every token of
the vocabulary as a piece of its own (whole-piece hits, short and long), near-misses of long
tokens (same first eight bytes, another length or tail), and long pieces of CJK, base64, repeated
letters, emoji and mixed scripts on both sides of the 96- and 128-byte boundaries.  Every count is compared
with ``len(encode_ordinary(text))``, without a memo (``memo_size=0``) and with one.
"""

from __future__ import annotations

import base64
import random
from types import ModuleType

import pytest
from counting_twins import ENCODING_NAMES, tiktoken_count
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.tokens.encodings import get_encoding, rank_file


def vocabulary_texts(encoding: str) -> list[str]:
    """Every token of ``encoding`` whose bytes are valid UTF-8, as text, in rank order."""
    texts = []
    for line in rank_file(encoding).splitlines():
        if line:
            try:
                texts.append(base64.b64decode(line.split()[0]).decode("utf-8"))
            except UnicodeDecodeError:
                continue
    return texts


@pytest.fixture(scope="module")
def vocabularies() -> dict[str, list[str]]:
    return {encoding: vocabulary_texts(encoding) for encoding in ENCODING_NAMES}


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_every_token_counts_as_tiktoken_counts_it(
    c_impl: ModuleType, vocabularies: dict[str, list[str]], encoding: str
) -> None:
    # each token alone: a whole-piece lookup of every slot of the table (a token's text may be
    # more than one piece, and then more than one token: tiktoken is the reference either way)
    vocabulary = vocabularies[encoding]
    assert len(vocabulary) > 0.9 * (200_000 if encoding == "o200k_base" else 100_000)
    counter = c_impl.PieceCounter(encoding, memo_size=0)
    encode = get_encoding(encoding).encode_ordinary
    wrong = [text for text in vocabulary if counter.count(text) != len(encode(text))]
    assert wrong == []
    ones = sum(counter.count(text) == 1 for text in vocabulary)
    assert ones > 0.9 * len(vocabulary)


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_near_misses_of_long_tokens(
    c_impl: ModuleType, vocabularies: dict[str, list[str]], encoding: str
) -> None:
    # tokens longer than the eight bytes a slot holds, cut short, lengthened and with their last
    # character changed: the same first eight bytes, so only the length or the arena tells them
    # apart from the token
    long_tokens = [text for text in vocabularies[encoding] if len(text.encode("utf-8")) > 8]
    assert len(long_tokens) > 1000
    counter = c_impl.PieceCounter(encoding, memo_size=0)
    rng = random.Random(14)
    for token in rng.sample(long_tokens, 3000):
        last = token[-1]
        changed = chr(ord(last) + 1) if last.isalpha() and ord(last) < 0xFFFF else "x"
        for text in (token[:-1], token + token[-1], token[:-1] + changed, token + "s", token * 2):
            assert counter.count(text) == tiktoken_count(text, encoding), (token, text)


def _base64_text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


CJK = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
HANGUL = st.characters(min_codepoint=0xAC00, max_codepoint=0xD7A3)
KANA = st.characters(min_codepoint=0x3041, max_codepoint=0x30FF)
EMOJI = st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF)
LETTERS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
MIXED = st.one_of(
    CJK,
    HANGUL,
    KANA,
    EMOJI,
    LETTERS,
    st.characters(min_codepoint=0x0400, max_codepoint=0x04FF),  # Cyrillic
    st.characters(min_codepoint=0x0600, max_codepoint=0x06FF),  # Arabic
    st.characters(min_codepoint=0x0900, max_codepoint=0x097F),  # Devanagari
    st.characters(min_codepoint=0x00C0, max_codepoint=0x024F),  # Latin with diacritics
    st.sampled_from("\u0301\u0308\u200d\ufe0f"),  # combining marks, joiner, variation selector
)

#: Long pieces: lengths around 64 characters (the stack buffer of UTF-8 bytes) and 128 bytes
#: (the stack arrays of the merge loop), and far beyond.
long_pieces = st.one_of(
    st.text(CJK, min_size=20, max_size=600),
    st.text(st.one_of(CJK, KANA, HANGUL), min_size=20, max_size=300),
    st.binary(min_size=40, max_size=3000).map(_base64_text),
    st.text(
        st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="),
        min_size=60,
        max_size=2000,
    ),
    st.tuples(LETTERS, st.integers(1, 400)).map(lambda pair: pair[0] * pair[1]),
    st.tuples(st.text(LETTERS, min_size=1, max_size=4), st.integers(1, 200)).map(
        lambda pair: pair[0] * pair[1]
    ),
    st.text(EMOJI, min_size=1, max_size=200),
    st.text(MIXED, min_size=1, max_size=400),
    st.text(LETTERS, min_size=100, max_size=1000),
)


@settings(max_examples=600)
@given(text=long_pieces)
def test_long_pieces_count_as_tiktoken_counts_them(
    c_impl: ModuleType, py_impl: ModuleType, text: str
) -> None:
    for encoding in ENCODING_NAMES:
        expected = tiktoken_count(text, encoding)
        assert c_impl.PieceCounter(encoding, memo_size=0).count(text) == expected
        assert c_impl.PieceCounter(encoding).count(text) == expected
        assert py_impl.PieceCounter(encoding, memo_size=0).count(text) == expected


@settings(max_examples=300)
@given(
    parts=st.lists(
        st.one_of(long_pieces, st.sampled_from([" ", "\n", ", ", " the", "==", "/", "0"])),
        min_size=1,
        max_size=8,
    )
)
def test_texts_of_long_pieces_cold_and_warm(c_impl: ModuleType, parts: list[str]) -> None:
    text = "".join(parts)
    counter = c_impl.PieceCounter("o200k_base")
    expected = tiktoken_count(text, "o200k_base")
    assert counter.count(text) == expected
    assert counter.count(text) == expected  # warm: from the memo


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_pieces_at_the_stack_boundaries(c_impl: ModuleType, encoding: str) -> None:
    # UTF-8 pieces of 88 to 104 bytes (tiktoken's scan up to 96), of 120 to 136 (the heap's stack
    # arrays hold 128) and of 60 to 68 characters (the UTF-8 stack buffer holds 64), of one-,
    # two-, three- and four-byte characters
    counter = c_impl.PieceCounter(encoding, memo_size=0)
    rng = random.Random(7)
    for alphabet, width in (
        ("abcdefghij", 1),
        ("абвгдежзий", 2),
        ("的一是不了人我在有他", 3),
        ("😀😁😂🤣😃", 4),
    ):
        sizes = [
            *range(88 // width, 105 // width + 1),
            *range(120 // width, 137 // width + 1),
            *range(60, 69),
        ]
        for size in sizes:
            for _ in range(5):
                text = "".join(rng.choice(alphabet) for _ in range(size))
                assert counter.count(text) == tiktoken_count(text, encoding), (text, size)
