"""Differential tests of the backtracking BPE count (the compiled counter's long-miss path).

The compiled counter counts a long miss without merging: the backtracking encoder of GitHub's
``bpe`` crate over each token's split (``_speedups/_count_c.pyx``, ``_backtrack_count``), whose
readable specification is ``_count_py.BacktrackingBPE``.  Both are held to tiktoken's
``encode_single_piece`` (and whole texts to ``encode_ordinary``): the split tables of the two
twins are compared entry by entry; every token of both vocabularies counts 1; hypothesis aims
CJK runs, mixed scripts and emoji, runs of one or two characters, base64 and concatenations of
random tokens (any bytes, not only UTF-8) at both; whole texts are counted with the path forced
for every miss and at its default thresholds (ASCII pieces of 24 bytes, others of 4, the 128-byte
stack limit, tokens of 64 bytes and more), cold and warm.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from types import ModuleType

import pytest
from counting_twins import ENCODING_NAMES, tiktoken_count
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.tokens.encodings import get_encoding

#: The compiled counter's thresholds (``_backtrack_min``, ``_backtrack_min_other``): ASCII
#: misses of 24 bytes or more and other misses of 4 or more are counted by backtracking.
MIN_ASCII = 24
MIN_OTHER = 4


def single_piece_count(piece: bytes, encoding: str) -> int:
    """tiktoken's BPE of one piece, counted (the reference of a piece's count)."""
    return len(get_encoding(encoding)._core_bpe.encode_single_piece(piece))


@pytest.fixture(scope="module")
def twin_bpe(py_impl: ModuleType) -> dict[str, object]:
    """The pure-Python specification of both encodings (built once: a few seconds)."""
    return {encoding: py_impl.backtracking_bpe(encoding) for encoding in ENCODING_NAMES}


@pytest.fixture(scope="module")
def forced(c_impl: ModuleType) -> Iterator[ModuleType]:
    """The compiled module with every miss counted by backtracking, the tables built now."""
    previous = c_impl._set_backtracking(1, 1, 0)
    try:
        yield c_impl
    finally:
        c_impl._set_backtracking(*previous)


def test_thresholds_are_the_documented_ones(c_impl: ModuleType) -> None:
    previous = c_impl._set_backtracking(5, 6, 7)
    try:
        assert previous == (MIN_ASCII, MIN_OTHER, 1 << 20)
        assert c_impl._set_backtracking(*previous) == (5, 6, 7)
    finally:
        c_impl._set_backtracking(*previous)


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_split_tables_of_the_twins_agree(
    c_impl: ModuleType, twin_bpe: dict[str, object], encoding: str
) -> None:
    twin = twin_bpe[encoding]
    compiled = c_impl._backtrack_splits(encoding)
    assert compiled is not None
    assert len(compiled) == len(twin.split) == (200_000 - 2 if encoding == "o200k_base" else 100_256)
    assert [i for i, (a, b) in enumerate(zip(compiled, twin.split, strict=True)) if a != b] == []
    # every token but the 256 bytes is some merge of two tokens of lower rank
    merged = [rank for rank, (first, second) in enumerate(twin.split) if (first, second) != (rank, rank)]
    assert len(merged) == len(twin.split) - 256
    assert all(max(twin.split[rank]) < rank for rank in merged)
    tokens = twin.tokens
    assert all(
        tokens[first] + tokens[second] == tokens[rank]
        for rank in merged
        for first, second in [twin.split[rank]]
    )


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_every_token_counts_one(c_impl: ModuleType, twin_bpe: dict[str, object], encoding: str) -> None:
    # the crate's check of a vocabulary: BPE of each token's bytes gives the token back
    twin = twin_bpe[encoding]
    assert [t for t in twin.tokens if c_impl._backtrack_piece(encoding, t) != 1] == []
    assert [t for t in twin.tokens if twin.count(t) != 1] == []


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_concatenations_of_random_tokens(
    c_impl: ModuleType, twin_bpe: dict[str, object], encoding: str
) -> None:
    # any bytes, not only UTF-8: two to six random tokens, so that merges cross their boundaries
    twin = twin_bpe[encoding]
    rng = random.Random(14)
    wrong = []
    for _ in range(3000):
        piece = b"".join(rng.choice(twin.tokens) for _ in range(rng.randint(2, 6)))
        expected = single_piece_count(piece, encoding)
        if c_impl._backtrack_piece(encoding, piece) != expected or twin.count(piece) != expected:
            wrong.append(piece)
    assert wrong == []


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_remembered_pair_answers_equal_the_walks(
    c_impl: ModuleType, twin_bpe: dict[str, object], encoding: str
) -> None:
    # _compatible's answers are remembered per pair of ranks: pieces made of few tokens, so that
    # pairs recur, counted twice (the second pass answers from the table) both count as tiktoken
    twin = twin_bpe[encoding]
    rng = random.Random(41)
    tokens = rng.sample(twin.tokens, 40)
    pieces = [b"".join(rng.choice(tokens) for _ in range(rng.randint(2, 8))) for _ in range(1500)]
    expected = [single_piece_count(piece, encoding) for piece in pieces]
    for _ in range(2):
        assert [c_impl._backtrack_piece(encoding, piece) for piece in pieces] == expected


cjk = st.text(
    alphabet=st.sampled_from(
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长"
        "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコサシスセソ"
        "한국어의문장입니다가나다라마바사아자차카타파하는을를에서"
    ),
    min_size=1,
    max_size=90,
)
mixed = st.text(
    alphabet=st.sampled_from(
        list("abcXYZ019 _-=+/.,'\"\n\t")
        + list("éüßøñçœ")
        + list("абвгдеёжЖЩ")
        + list("αβγδΩ")
        + list("שלוםمرحبا")
        + list("नमस्ते")
        + list("中文日本語한국")
        + ["😀", "🙂", "👍", "\U0001f3fd", "\U0001f1eb", "\U0001f1f7", "\u200d", "\u0301"]
    ),
    min_size=1,
    max_size=160,
)
runs = st.builds(
    lambda unit, count: unit * count,
    st.sampled_from(["a", "ab", " ", "=", "-", "中", "中文", "😀", "\n", "0", "é", "  a", "\u0301"]),
    st.integers(min_value=1, max_value=200),
)
base64_like = st.text(
    alphabet=st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"),
    min_size=1,
    max_size=300,
)
any_text = st.one_of(cjk, mixed, runs, base64_like)


@settings(max_examples=400, deadline=None)
@given(text=any_text, encoding=st.sampled_from(ENCODING_NAMES))
def test_pieces_count_as_tiktoken_counts_them(
    c_impl: ModuleType, twin_bpe: dict[str, object], text: str, encoding: str
) -> None:
    piece = text.encode("utf-8")
    expected = single_piece_count(piece, encoding)
    assert c_impl._backtrack_piece(encoding, piece) == expected
    assert twin_bpe[encoding].count(piece) == expected


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(any_text, min_size=1, max_size=6), encoding=st.sampled_from(ENCODING_NAMES))
def test_texts_count_as_tiktoken_counts_them_every_miss_backtracked(
    forced: ModuleType, parts: list[str], encoding: str
) -> None:
    text = " ".join(parts)
    expected = tiktoken_count(text, encoding)
    assert forced.PieceCounter(encoding, memo_size=0).count(text) == expected
    warm = forced.PieceCounter(encoding)
    assert [warm.count(text), warm.count(text)] == [expected, expected]


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_pieces_at_each_boundary(c_impl: ModuleType, encoding: str) -> None:
    # lengths each side of the thresholds (ASCII 24 bytes, others 4), of the 128-byte stack
    # arrays, and of tokens of 64 bytes and more (runs of spaces, '=' and '-' are such tokens)
    previous = c_impl._set_backtracking(MIN_ASCII, MIN_OTHER, 0)
    try:
        texts = []
        for length in (2, 3, 4, 5, 8, 9, 16, 17, 23, 24, 25, 63, 64, 65, 127, 128, 129, 200, 300):
            texts += [
                "x" + "qz" * (length // 2),  # one ASCII word that is many tokens
                "中" * (length // 3 + 1),
                "é" * (length // 2 + 1),
                "😀" * (length // 4 + 1),
                " " * length,
                "=" * length,
                "-" * length + "x",
                "".join(random.Random(length).choice("ACGTacgt+/") for _ in range(length)),
            ]
        counter = c_impl.PieceCounter(encoding, memo_size=0)
        assert [t for t in texts if counter.count(t) != tiktoken_count(t, encoding)] == []
        for text in texts:
            for piece in counter.pieces(text):
                data = piece.encode("utf-8")
                assert c_impl._backtrack_piece(encoding, data) == single_piece_count(data, encoding), piece
    finally:
        c_impl._set_backtracking(*previous)
