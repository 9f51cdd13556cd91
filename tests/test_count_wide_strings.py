"""The compiled counter reads a 2-byte string's pieces a word (four units) at a time.

Pieces of every length from 1 to 20 characters, at every distance from the end of the string
(where fewer than 8 or 16 units are left, the word loads give way to a loop), ASCII or holding
one character below U+0100 ("é") or above it ("ā"): the count is tiktoken's, and a piece is
remembered once whatever the kind of the string that holds it.
"""

from __future__ import annotations

from types import ModuleType

from counting_twins import c_impl, tiktoken_count
from hypothesis import given, settings
from hypothesis import strategies as st

__all__ = ["c_impl"]  # the fixture, imported

WIDE = "\u0100"  # makes a string 2 bytes a character; a piece of its own, after a newline

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyzQXZ0123456789_", min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    word=words,
    inner=st.sampled_from(["", "é", "ā", "ÿ", "\u0301"]),
    at=st.integers(0, 20),
    tail=st.integers(0, 18),
    encoding=st.sampled_from(["o200k_base", "cl100k_base"]),
)
def test_pieces_of_a_wide_string_count_as_tiktoken_counts(
    c_impl: ModuleType, word: str, inner: str, at: int, tail: int, encoding: str
) -> None:
    piece = word[:at] + inner + word[at:]
    # the piece, then ``tail`` characters after it, then the wide character last
    text = " " + piece + " " + "x" * tail + "\n" + WIDE
    counter = c_impl.PieceCounter(encoding)
    assert counter.count(text) == tiktoken_count(text, encoding)
    shorter = text[-(len(piece) + tail + 4) :]  # the piece nearer the start as well
    assert counter.count(shorter) == tiktoken_count(shorter, encoding)


@settings(max_examples=200, deadline=None)
@given(word=words, inner=st.sampled_from(["", "é", "ÿ"]))
def test_a_piece_is_remembered_once_across_string_kinds(c_impl: ModuleType, word: str, inner: str) -> None:
    piece = " " + word + inner + word
    narrow = piece  # one byte a character (every character here is below U+0100)
    counter = c_impl.PieceCounter("o200k_base")
    assert counter.count(narrow) == tiktoken_count(narrow, "o200k_base")
    remembered = counter.memo_len
    # the same piece in a 2-byte string, then in a 4-byte one (after " 7", which ends any run
    # before it): a hit, nothing new remembered but the wide character's own piece
    for wide in (" 7" + WIDE, " 7\U0001f600"):
        assert counter.pieces(narrow + wide)[: len(counter.pieces(narrow))] == counter.pieces(narrow)
        assert counter.count(narrow + wide) == tiktoken_count(narrow + wide, "o200k_base")
        assert counter.memo_len <= remembered + 1
        remembered = counter.memo_len
