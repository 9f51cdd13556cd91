"""Tests of the memo bypass: an ASCII piece of at most MAX_TOKEN_PIECE characters that is one
token counts 1 and is not remembered, nor is one of at most MAX_MERGELESS_PIECE characters that is
no token (counted from its pairs); every other piece goes through the memo as before."""

from __future__ import annotations

from types import ModuleType

import pytest
import regex
from counting_twins import ENCODING_NAMES, tiktoken_count
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.tokens.encodings import ENCODINGS, get_encoding


def is_token(piece: str, encoding: str) -> bool:
    return piece.encode("utf-8") in get_encoding(encoding)._mergeable_ranks


def test_the_bounds_are_the_same_in_both_twins(c_impl: ModuleType, py_impl: ModuleType) -> None:
    assert c_impl.MAX_TOKEN_PIECE == py_impl.MAX_TOKEN_PIECE == 16
    assert c_impl.MAX_MERGELESS_PIECE == py_impl.MAX_MERGELESS_PIECE == 3


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_short_pieces_that_are_no_token_are_counted_without_the_memo(impl: ModuleType, encoding: str) -> None:
    # two characters: 2 tokens; three: 2 if a pair merges, 3 if none does; four: the memo's
    counter = impl.PieceCounter(encoding)
    cases = {"Zx": 2, "QBu": 2, "+jj": 2, "zqx": None, "Bodt": None}
    for piece, tokens in cases.items():
        assert counter.pieces(piece) == [piece]
        assert not is_token(piece, encoding)
        expected = tiktoken_count(piece, encoding)
        if tokens is not None:
            assert expected == tokens, piece
        assert counter.count(piece) == expected
        assert counter.count(piece) == expected
    assert counter.memo_len == 1  # "Bodt" alone: four characters are past MAX_MERGELESS_PIECE


@settings(max_examples=200, deadline=None)
@given(piece=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=2, max_size=3))
def test_three_ascii_characters_count_as_tiktoken(impl: ModuleType, piece: str) -> None:
    # whatever the pieces the pre-tokenizer cuts: each of at most 3 characters counted from pairs
    for encoding in ENCODING_NAMES:
        counter = impl.PieceCounter(encoding)
        assert counter.count(piece) == tiktoken_count(piece, encoding)
        assert counter.memo_len == 0


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_short_ascii_tokens_are_not_remembered(impl: ModuleType, encoding: str) -> None:
    counter = impl.PieceCounter(encoding)
    # one character, two (the pairs table), three to eight (the rank slots): each one token
    for piece in ("x", "\x00", " a", "\n\n", "the", " the", " return", " because", "________"):
        assert counter.pieces(piece) == [piece]
        assert is_token(piece, encoding), piece
        assert len(piece) <= impl.MAX_TOKEN_PIECE
        assert counter.count(piece) == 1
        assert counter.memo_len == 0, piece
        assert counter.count(piece) == 1  # counted again, warm: still one lookup, still 1


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_the_boundaries_at_eight_and_sixteen_characters(impl: ModuleType, encoding: str) -> None:
    # tokens of both encodings: up to 8 characters packed in one word, 9 to 16 in two (the
    # compiled twin), none remembered; 17 characters go through the memo
    pieces = [" publish", " research", " straightforward", " responsibilities"]
    assert [len(piece) for piece in pieces] == [8, 9, impl.MAX_TOKEN_PIECE, impl.MAX_TOKEN_PIECE + 1]
    counter = impl.PieceCounter(encoding)
    for piece in pieces:
        assert is_token(piece, encoding)
        assert counter.count(piece) == 1
    assert counter.memo_len == 1
    assert counter.count("".join(pieces)) == 4  # again, warm
    assert counter.count("".join(pieces) + "\n" + "".join(pieces)) == 9
    assert counter.memo_len == 1


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_short_pieces_that_are_no_token_are_remembered(impl: ModuleType, encoding: str) -> None:
    counter = impl.PieceCounter(encoding)
    piece = " qzxjvkw"  # eight ASCII characters, several tokens
    assert counter.pieces(piece) == [piece]
    assert not is_token(piece, encoding)
    expected = tiktoken_count(piece, encoding)
    assert expected > 1
    assert counter.count(piece) == expected
    assert counter.memo_len == 1
    assert counter.count(piece) == expected
    assert counter.memo_len == 1


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_non_ascii_tokens_go_through_the_memo(impl: ModuleType, encoding: str) -> None:
    # a token of non-ASCII characters (its UTF-8 bytes are not its code points) is remembered
    counter = impl.PieceCounter(encoding)
    for piece in (" é", "é", " café"):
        assert counter.pieces(piece) == [piece]
        assert counter.count(piece) == tiktoken_count(piece, encoding)
    assert counter.memo_len == 3


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
@pytest.mark.parametrize("wide", ["", "\u00e9", "\u4e2d", "\U0001f600"])
def test_every_string_kind_bypasses_the_memo(impl: ModuleType, encoding: str, wide: str) -> None:
    # the ASCII pieces of a 1-, 2- or 4-byte string are the same pieces: not remembered in any
    text = " the cat straightforward" + ("\n" + wide if wide else "")
    counter = impl.PieceCounter(encoding)
    assert counter.count(text) == tiktoken_count(text, encoding)
    remembered = 0 if not wide else len([p for p in counter.pieces(text) if not p.isascii()])
    assert counter.memo_len == remembered


_WORDS = st.sampled_from(
    [
        "the",
        " the",
        " cat",
        "x",
        " publish",
        " research",
        " straightforward",
        " responsibilities",
        " qzxjvkw",
        " café",
        "中文",
        "\n",
        "  ",
        "42",
        "!",
        "QBu",
        "Zx",
        "+jj",
        "zqx",
        "Bodt",
    ]
)


@settings(max_examples=80, deadline=None)
@given(
    batch=st.lists(st.lists(_WORDS, min_size=1, max_size=40).map("".join), min_size=1, max_size=6),
    memo_size=st.integers(0, 9),
)
def test_twins_agree_on_counts_and_the_memo(
    c_impl: ModuleType, py_impl: ModuleType, batch: list[str], memo_size: int
) -> None:
    # compiled == pure Python == tiktoken on each text, cold and warm; the same pieces remembered
    for encoding in ENCODING_NAMES:
        c_counter = c_impl.PieceCounter(encoding, memo_size=memo_size)
        py_counter = py_impl.PieceCounter(encoding, memo_size=memo_size)
        for text in batch + batch:
            expected = tiktoken_count(text, encoding)
            assert c_counter.count(text) == py_counter.count(text) == expected
            assert c_counter.memo_len == py_counter.memo_len <= memo_size


@settings(max_examples=80, deadline=None)
@given(text=st.text(st.characters(max_codepoint=0x7F), max_size=200))
def test_ascii_text_cold_equals_warm(impl: ModuleType, text: str) -> None:
    counter = impl.PieceCounter("o200k_base")
    expected = tiktoken_count(text, "o200k_base")
    assert counter.count(text) == expected
    assert counter.count(text) == expected
    assert impl.PieceCounter("o200k_base", memo_size=0).count(text) == expected


@settings(max_examples=150, deadline=None)
@given(
    unit=st.text(st.sampled_from("AaBb0+/="), min_size=1, max_size=4),
    repeat=st.integers(30, 700),
    tail=st.text(st.sampled_from("AaBbQz"), max_size=5),
)
def test_long_pieces_merge_as_tiktoken(c_impl: ModuleType, unit: str, repeat: int, tail: str) -> None:
    # pieces past 128 bytes take the heap merge; runs of a few letters (base64 padding, "AAAA")
    # push many keys of equal rank, each popped in the order of tiktoken's scan
    text = unit * repeat + tail
    for encoding in ENCODING_NAMES:
        assert c_impl.PieceCounter(encoding, memo_size=0).count(text) == tiktoken_count(text, encoding)


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(st.sampled_from("aZqQ'sStTdDlLvVrReEmM éÉªºµßÀÿ×0_-\n\t"), min_size=1, max_size=40),
    padding=st.sampled_from(
        ["", "x", "xxxxxxxx", " ABCDEFGHabcdefgh", "\u2019", "\u4e2d", "\U0001f600 ", "\u2019s\u0130\u0131"]
    ),
)
def test_latin1_letters_at_the_ends_of_words_split_as_the_regex(
    c_impl: ModuleType, text: str, padding: str
) -> None:
    # the compiled scanner skips the ASCII letters of a 1-byte string eight at a time, the last
    # fewer than eight too, and looks a character up only where it is not ASCII: Latin-1
    # letters (upper, lower, ª º: other letters, µ ß ÿ, × no letter) before, after and between
    # ASCII ones, at every distance from the end of the text; and the same in strings of the
    # other widths, scanned a character at a time (the padding: a curly quote or an ideograph
    # makes a 2-byte string, an emoji a 4-byte one)
    for encoding in ENCODING_NAMES:
        pattern = regex.compile(ENCODINGS[encoding].pat_str)
        for candidate in (text, padding + text, text + padding):
            counter = c_impl.PieceCounter(encoding, memo_size=0)
            assert counter.pieces(candidate) == pattern.findall(candidate)
            assert counter.count(candidate) == tiktoken_count(candidate, encoding)
