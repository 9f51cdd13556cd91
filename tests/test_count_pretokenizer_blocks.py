"""Tests of the compiled counter's blocks: the pieces of ASCII text found from bit masks of 63
characters at a time (``_speedups/_count_c.pyx``, ``_fill_block`` and ``_o200k_block_end`` /
``_cl100k_block_end``), the per-character scanner wherever a block does not decide a piece.

Every test holds the compiled pieces to the pure-Python twin's (the ``regex`` package on the
encoding's pattern) and the count to tiktoken's, on texts whose runs cross the blocks' edges
(16, 32, 64 and 128 characters) and mix the characters where the masks hand over to the
scanner: letters of 128 or more, marks, U+017F (which folds to ``s`` in the contractions),
spaces of 128 or more, digits that are no ASCII digit.  Each text is also counted as a 2-byte
and a 4-byte string (with one character of that kind appended).
"""

from __future__ import annotations

from types import ModuleType

import pytest
from counting_twins import ENCODING_NAMES, tiktoken_count
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.tokens._unicode_tables import LOWER, NUMBER, SPACE, UPPER, class_table

#: Fragments a text is made of: each class the masks hold, the contractions (in both cases and
#: with U+017F), and characters of 128 or more of every class the scanner decides.
FRAGMENTS_1BYTE = (
    "a",
    "word",
    "Ab",
    "ABC",
    "xY",
    " ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    " \n",
    "\x0b",
    "\x0c",
    "'",
    "'s",
    "'S",
    "'t",
    "'re",
    "'VE",
    "'m",
    "'ll",
    "'Ll",
    "'d",
    "'x",
    "0",
    "12",
    "345",
    "6789",
    "/",
    "//",
    ".",
    '":',
    "{",
    "}",
    "-",
    "_",
    "\x00",
    "\x7f",
    "\xe9",
    "\xc9",
    "\xa0",
    "\x85",
    "\xaa",
    "\xb2",
    "\xbd",
    "\xd7",
    "\xff",
)
FRAGMENTS_WIDE = FRAGMENTS_1BYTE + (
    "\u017f",
    "'\u017f",
    "e\u0301",
    "\u0301",
    "\u4e2d\u6587",
    "\u2028",
    "\u3000",
    "\u2003",
    "\u03a9\u03c9",
    "\u0416",
    "\u0663",
    "\u01c5",
    "\u02b0",
    "\u20ac",
    "\U0001f600",
)
#: Lengths around the edges of 16, 32, 64 (a block holds 63) and 128 characters.
LENGTHS = (1, 2, 15, 16, 17, 31, 32, 33, 62, 63, 64, 65, 66, 126, 127, 128, 129, 130)


@st.composite
def texts(draw: st.DrawFn, fragments: tuple[str, ...]) -> str:
    """A text of one of LENGTHS characters, made of runs of fragments of 1 to 70 repeats (mostly
    1 to 3: the pieces then cut across each other's classes)."""
    repeats = st.one_of(st.integers(1, 3), st.integers(1, 70))
    runs = draw(st.lists(st.tuples(st.sampled_from(fragments), repeats), min_size=1, max_size=40))
    body = "".join(fragment * repeats for fragment, repeats in runs)
    length = draw(st.sampled_from(LENGTHS))
    while len(body) < length:
        body += body
    start = draw(st.integers(0, len(body) - length))
    return body[start : start + length]


def assert_as_the_twin(c_impl: ModuleType, py_impl: ModuleType, text: str) -> None:
    """The compiled pieces are the twin's and the count is tiktoken's, for both encodings, on
    ``text`` and on it as a 2-byte and a 4-byte string."""
    for encoding in ENCODING_NAMES:
        compiled = c_impl.PieceCounter(encoding)
        twin = py_impl.PieceCounter(encoding)
        for variant in (text, text + "\u0100", text + "\U0001f600"):
            pieces = compiled.pieces(variant)
            assert pieces == twin.pieces(variant), (encoding, variant)
            assert "".join(pieces) == variant
            assert compiled.count(variant) == tiktoken_count(variant, encoding), (encoding, variant)


@settings(max_examples=400, deadline=None)
@given(text=texts(FRAGMENTS_1BYTE))
def test_1byte_texts_split_as_the_twin(c_impl: ModuleType, py_impl: ModuleType, text: str) -> None:
    assert_as_the_twin(c_impl, py_impl, text)


@settings(max_examples=400, deadline=None)
@given(text=texts(FRAGMENTS_WIDE))
def test_wide_texts_split_as_the_twin(c_impl: ModuleType, py_impl: ModuleType, text: str) -> None:
    assert_as_the_twin(c_impl, py_impl, text)


@settings(max_examples=200, deadline=None)
@given(
    head=st.integers(0, 130),
    run=st.sampled_from(["a", "Z", "aB", "7", " ", "\n", "\t", "!", "/", "\xe9", "\u4e2d"]),
    length=st.one_of(st.integers(1, 4), st.integers(1, 140)),
    tail=st.sampled_from(["", "x", "X", "'s", "'\u017f", " ", "\n", "1", "!", "\xa0", "\u0301", "\u2028"]),
)
def test_a_run_across_block_edges_splits_as_the_twin(
    c_impl: ModuleType, py_impl: ModuleType, head: int, run: str, length: int, tail: str
) -> None:
    # a run of one class starting anywhere in the first blocks and ending anywhere after them
    text = ("ab " * 50)[:head] + run * length + tail
    assert_as_the_twin(c_impl, py_impl, text)


@pytest.mark.parametrize("space", [" ", "\t", "\n", "\r\n", "\xa0", "\u3000"])
@pytest.mark.parametrize("length", [61, 62, 63, 64, 65, 126, 127, 128])
def test_space_runs_at_the_block_edge_and_the_text_end(
    c_impl: ModuleType, py_impl: ModuleType, space: str, length: int
) -> None:
    # \s+(?!\S) gives back the last space before a character and keeps it at the end of the text
    for text in (space * length, "x" + space * length, space * length + "x", "x" + space * length + "y"):
        assert_as_the_twin(c_impl, py_impl, text)


def test_block_pieces_of_a_json_line(c_impl: ModuleType) -> None:
    # the pieces themselves, not only their agreement with the twin: o200k keeps [\r\n/]* on a
    # symbol run, \s+(?!\S) leaves one space for the word after it, numbers go by three
    text = '{\n  "path": "a/b",\n  "n": 12345, "it\'s": "DONE\'LL"}\n'
    assert c_impl.PieceCounter("o200k_base").pieces(text) == [
        "{\n",
        " ",
        ' "',
        "path",
        '":',
        ' "',
        "a",
        "/b",
        '",\n',
        " ",
        ' "',
        "n",
        '":',
        " ",
        "123",
        "45",
        ",",
        ' "',
        "it's",
        '":',
        ' "',
        "DONE'LL",
        '"}\n',
    ]


def expected_classes(text: str) -> tuple[int, ...]:
    """The masks _block_classes should give, from tiktoken's classes (the flag table's source)."""
    table = class_table()
    masks = [0] * 7
    for q, char in enumerate(text[:64]):
        cp = ord(char)
        bit = 1 << q
        if cp >= 128:
            masks[6] |= bit
            continue
        cls = table[cp]
        masks[0] |= bit if cls == LOWER else 0
        masks[1] |= bit if cls == UPPER else 0
        masks[2] |= bit if cls == NUMBER else 0
        masks[3] |= bit if cls == SPACE else 0
        masks[4] |= bit if char in "\r\n" else 0
        masks[5] |= bit if char == "/" else 0
    return tuple(masks)


def test_the_ascii_classes_are_the_flag_tables(c_impl: ModuleType) -> None:
    # every code point below 256, and 2-byte ones whose low byte is ASCII or whose high bit is
    # set (narrowing them to bytes must call them all 128 or more), by every classifier
    assert c_impl._BLOCK_CLASSIFIERS[-1] == "portable"
    latin1 = "".join(map(chr, range(256)))
    wide = "".join(chr(cp) for cp in (0x100, 0x120, 0x161, 0x17F, 0x7F41, 0x8000, 0x8020, 0xFF0A, 0xFFFF))
    for classifier in c_impl._BLOCK_CLASSIFIERS:
        for start in range(0, 256, 64):
            block = latin1[start : start + 64]
            assert c_impl._block_classes(block, classifier) == expected_classes(block), classifier
            for mixed in ((wide + block)[:64], (block[:20] + wide * 7)[:64]):
                assert c_impl._block_classes(mixed, classifier) == expected_classes(mixed), classifier


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]), min_size=64, max_size=64))
def test_the_classifiers_agree(c_impl: ModuleType, text: str) -> None:
    for classifier in c_impl._BLOCK_CLASSIFIERS:
        assert c_impl._block_classes(text, classifier) == expected_classes(text), classifier


@pytest.mark.parametrize(
    ("bad", "classifier"), [("x" * 63, "portable"), ("\U0001f600" * 64, "portable"), ("x" * 64, "neon")]
)
def test_block_classes_refuses_what_it_cannot_classify(c_impl: ModuleType, bad: str, classifier: str) -> None:
    with pytest.raises(ValueError, match="_block_classes"):
        c_impl._block_classes(bad, classifier)
