"""Tests of the exact fast token counter: both implementations, the dispatcher, tiktoken parity."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import regex
from counting_twins import ENCODING_NAMES, tiktoken_count
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import canonical_json
from compaction.errors import EncodingDataMissing
from compaction.formats import load_transcript
from compaction.tokens import _unicode_tables
from compaction.tokens.encodings import ENCODINGS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
# --------------------------------------------------------------------------- dispatcher


def test_dispatcher_picks_the_compiled_module_by_default() -> None:
    if os.environ.get("COMPACTION_NO_EXTENSIONS", "") not in ("", "0"):
        pytest.skip("COMPACTION_NO_EXTENSIONS is set for this run")
    from compaction.tokens import _count_c, fast

    assert fast.IMPLEMENTATION == "c"
    assert fast.count_tokens is _count_c.count_tokens
    assert fast.PieceCounter is _count_c.PieceCounter


@pytest.mark.parametrize(("value", "expected"), [("1", "py"), ("yes", "py"), ("0", "c"), ("", "c")])
def test_environment_variable_selects_the_implementation(value: str, expected: str) -> None:
    env = dict(os.environ, COMPACTION_NO_EXTENSIONS=value)
    code = (
        "from compaction.tokens import fast; "
        "print(fast.IMPLEMENTATION, fast.count_tokens.__module__, fast.count_tokens('hello world'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    implementation, module, count = out.stdout.split()
    assert implementation == expected
    assert module == f"compaction.tokens._count_{expected}"
    assert count == "2"


# --------------------------------------------------------------------------- API and errors


def test_api_is_the_same(c_impl: ModuleType, py_impl: ModuleType) -> None:
    assert c_impl.__all__ == py_impl.__all__
    for name in ("ENCODING_NAMES", "DEFAULT_MEMO_SIZE", "MAX_MEMO_PIECE", "MAX_MEMO_CHARS"):
        assert getattr(c_impl, name) == getattr(py_impl, name)


def test_errors(impl: ModuleType) -> None:
    with pytest.raises(TypeError, match="count\\(\\) expected a str, got bytes; decode bytes first"):
        impl.count_tokens(b"abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pieces\\(\\) expected a str, got int"):
        impl.PieceCounter().pieces(3)
    with pytest.raises(EncodingDataMissing, match="expected one of: cl100k_base, o200k_base"):
        impl.count_tokens("abc", "p50k_base")
    with pytest.raises(LookupError):
        impl.PieceCounter("r50k_base")
    with pytest.raises(ValueError, match="memo_size must be >= 0 pieces, got -1"):
        impl.PieceCounter("o200k_base", memo_size=-1)


def test_known_counts(impl: ModuleType) -> None:
    assert impl.count_tokens("") == 0
    assert impl.count_tokens("hello world") == 2
    assert impl.PieceCounter("o200k_base").pieces("Hello world's 1234!\n") == [
        "Hello",
        " world's",
        " ",
        "123",
        "4",
        "!\n",
    ]
    assert impl.PieceCounter("cl100k_base").pieces("Hello world's 1234!\n") == [
        "Hello",
        " world",
        "'s",
        " ",
        "123",
        "4",
        "!\n",
    ]
    counter = impl.PieceCounter("cl100k_base")
    assert counter.encoding == "cl100k_base"
    assert counter.memo_size == impl.DEFAULT_MEMO_SIZE


# --------------------------------------------------------------------------- differential, generated text

FRAGMENTS = [
    # letters of every case class, scripts, marks
    "hello",
    "World",
    "HTTPServer",
    "camelCase",
    "ǅungla",
    "ǈ",
    "ß",
    "İstanbul",
    "ſ",
    "Ωμέγα",
    "Привет",
    "ΣΑΣ",
    "שלום",
    "مرحبا",
    "नमस्ते",
    "தமிழ்",
    "ภาษาไทย",
    "ქართ",
    "中文字符",
    "日本語のテキスト",
    "カタカナ",
    "한국어",
    "e\u0301",
    "\u0301\u0302",
    "a\u20dd",
    "\u0903",
    "ʕ",
    "ʰ",
    "ꙮ",
    # emoji, ZWJ sequences, skin tones, flags, variation selectors
    "👍",
    "👍🏽",
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "🇫🇷",
    "❤️",
    "\u200d",
    "\U0001f3fd",
    "\ufe0f",
    # whitespace and newlines
    " ",
    "  ",
    "    ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\r",
    "\r\r\n",
    " \n ",
    "\u00a0",
    "\u2028",
    "\u2029",
    "\u3000",
    "\u2003",
    "\x0b",
    "\x0c",
    "\x85",
    "\u200b",
    "\x1c",
    "\x1f",
    "\u180e",
    "\ufeff",
    # digits, ASCII and not
    "1",
    "12",
    "123",
    "1234",
    "1234567",
    "٣٤٥",
    "१२३",
    "１２３",
    "Ⅻ",
    "½",
    "²",
    "𝟙𝟚",
    "0x1F",
    # contractions in any case
    "'s",
    "'S",
    "'t",
    "'T",
    "'re",
    "'RE",
    "'Re",
    "'ve",
    "'VE",
    "'m",
    "'M",
    "'ll",
    "'LL",
    "'Ll",
    "'d",
    "'D",
    "'ſ",
    "'x",
    "''",
    "don't",
    "I'LL",
    "'",
    # special-token text, punctuation runs with newlines and slashes
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|endofprompt|>",
    "...",
    "!!!",
    '"',
    "://",
    "/",
    "//\n",
    "!\n/",
    ".\r\n",
    "?!\n\n",
    '{"a": 1}',
    "=>",
    "#",
    "@",
    "$",
    "€",
    "©",
    "→",
    "─",
    "—",
    "、",
    "。",
    "！",
    # characters where Unicode versions disagree (tiktoken is Unicode 16.0)
    "\U00010940",
    "\U000323b0",
    "\u1acf",
    "\ua7cb",
    "\u1c89",
    "\U00010d40",
    "\U00031350",
    "\U0002ebf0",
    "\u0897",
]

texts = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=80),
    st.text(max_size=80),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
    st.lists(
        st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(codec="utf-8"), max_size=4)), max_size=30
    ).map("".join),
)


@settings(max_examples=1500, deadline=None)
@given(text=texts)
def test_compiled_equals_pure_python_equals_tiktoken(
    c_impl: ModuleType, py_impl: ModuleType, text: str
) -> None:
    for encoding in ENCODING_NAMES:
        expected = tiktoken_count(text, encoding)
        assert c_impl.count_tokens(text, encoding) == expected
        assert py_impl.count_tokens(text, encoding) == expected
        c_pieces = c_impl.PieceCounter(encoding, memo_size=0).pieces(text)
        assert c_pieces == py_impl.PieceCounter(encoding, memo_size=0).pieces(text)
        assert "".join(c_pieces) == text


@pytest.fixture(scope="module")
def disagreeing_code_points() -> frozenset[int]:
    """The code points the ``regex`` package classifies otherwise than tiktoken (Unicode 16.0)."""
    ours = _unicode_tables.class_table()
    theirs = _unicode_tables.regex_class_table()
    return frozenset(cp for cp in range(0x110000) if ours[cp] != theirs[cp])


def test_unicode_discrepancies_are_the_documented_ones(disagreeing_code_points: frozenset[int]) -> None:
    ours = _unicode_tables.class_table()
    theirs = _unicode_tables.regex_class_table()
    for cp in disagreeing_code_points:
        if cp == 0x295:  # LATIN LETTER PHARYNGEAL VOICED FRICATIVE: Ll until Unicode 16.0, Lo since 17.0
            assert (ours[cp], theirs[cp]) == (_unicode_tables.LOWER, _unicode_tables.OTHER_LETTER)
        else:  # assigned in Unicode 17.0: unknown to tiktoken
            assert ours[cp] == _unicode_tables.OTHER, hex(cp)


@settings(max_examples=800, deadline=None)
@given(text=texts)
def test_pieces_equal_the_regex_split(
    c_impl: ModuleType, disagreeing_code_points: frozenset[int], text: str
) -> None:
    text = "".join(ch for ch in text if ord(ch) not in disagreeing_code_points)
    for encoding in ENCODING_NAMES:
        expected = regex.findall(ENCODINGS[encoding].pat_str, text)
        assert c_impl.PieceCounter(encoding, memo_size=0).pieces(text) == expected


# Texts around every code point whose tokens depend on the character's class (see
# _unicode_tables._PROBES), one per line; the counters must agree with tiktoken on each block of
# 4096 code points.
SWEEP_TEMPLATES = ("{c}'s", "{c}1234", "a   {c}", "x{c}x")


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_every_code_point_agrees_with_tiktoken(c_impl: ModuleType, encoding: str) -> None:
    counter = c_impl.PieceCounter(encoding)
    mismatches = []
    for template in SWEEP_TEMPLATES:
        for block in range(0, 0x110000, 4096):
            if 0xD800 <= block <= 0xDFFF:
                continue
            text = "\n".join(template.replace("{c}", chr(cp)) for cp in range(block, block + 4096))
            if counter.count(text) != tiktoken_count(text, encoding):
                mismatches.append((template, hex(block)))
    assert mismatches == []


@pytest.mark.parametrize(
    "text", ["\ud800", "a\udfffb", "\ud83d\ude00 x", "x\ude00\ud83d", "\ud800\ud800's 12"]
)
def test_surrogates_count_as_tiktoken_counts_them(impl: ModuleType, text: str) -> None:
    for encoding in ENCODING_NAMES:
        assert impl.PieceCounter(encoding).count(text) == tiktoken_count(text, encoding)
        assert impl.PieceCounter(encoding).pieces(text)  # split as they are


# --------------------------------------------------------------------------- real transcripts


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


@pytest.fixture(scope="module")
def example_texts() -> list[str]:
    """Every string of every message of every transcript in examples/, tool inputs as JSON."""
    out: list[str] = []
    for path in sorted(EXAMPLES.rglob("*")):
        if not path.is_file() or path.name == "README.md":
            continue
        for message in load_transcript(path, lenient=True).messages:
            for block in message.content:
                out.extend(_strings(block))
                if block.get("type") == "tool_use":
                    out.append(canonical_json(block.get("input", {})))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_every_example_message_is_exact(impl: ModuleType, example_texts: list[str], encoding: str) -> None:
    assert len(example_texts) > 1000
    counter = impl.PieceCounter(encoding)
    mismatches = [t for t in example_texts if counter.count(t) != tiktoken_count(t, encoding)]
    assert mismatches == []
    whole = "\n".join(example_texts)
    assert counter.count(whole) == tiktoken_count(whole, encoding)


# --------------------------------------------------------------------------- the memo


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(texts, min_size=1, max_size=8))
def test_cold_memo_equals_warm_memo(impl: ModuleType, batch: list[str]) -> None:
    for encoding in ENCODING_NAMES:
        cold = [impl.PieceCounter(encoding, memo_size=0).count(t) for t in batch]
        warm_counter = impl.PieceCounter(encoding)
        first = [warm_counter.count(t) for t in batch]
        again = [warm_counter.count(t) for t in batch]
        assert cold == first == again


def test_memo_bound_is_respected(impl: ModuleType) -> None:
    counter = impl.PieceCounter("o200k_base", memo_size=50)
    # 1000 distinct pieces of several tokens each: remembered (an ASCII piece that is one token,
    # or of at most three characters, is not)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [f"{letters[i // 676 % 26]}{letters[i // 26 % 26]}{letters[i % 26]}qzxjvw" for i in range(1000)]
    for start in range(0, 1000, 7):
        text = " ".join(words[start : start + 40])
        assert counter.count(text) == tiktoken_count(text, "o200k_base")
        assert counter.memo_len <= 50
    assert counter.memo_len > 0
    counter.clear()
    assert counter.memo_len == 0
    nothing = impl.PieceCounter("o200k_base", memo_size=0)
    assert nothing.count("a b c") == 3
    assert nothing.memo_len == 0


def test_long_pieces_are_not_remembered(impl: ModuleType) -> None:
    counter = impl.PieceCounter("o200k_base")
    long_piece = "a" * (impl.MAX_MEMO_PIECE + 1)
    assert counter.pieces(long_piece) == [long_piece]
    counter.count(long_piece)
    assert counter.memo_len == 0
    counter.count("a" * impl.MAX_MEMO_PIECE)
    assert counter.memo_len == 1


def test_long_pieces_are_remembered_within_the_character_bound(impl: ModuleType) -> None:
    # base64 image data in a transcript: long pieces, counted again on every call
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    counter = impl.PieceCounter("o200k_base")
    piece = "".join(rng.choice(alphabet) for _ in range(impl.MAX_MEMO_PIECE))
    assert counter.pieces(piece) == [piece]
    expected = tiktoken_count(piece, "o200k_base")
    assert counter.count(piece) == expected
    assert counter.memo_len == 1
    assert counter.count(piece) == expected
    most = impl.MAX_MEMO_CHARS // impl.MAX_MEMO_PIECE
    for k in range(most + 2):
        # distinct pieces of MAX_MEMO_PIECE letters: the memo is cleared before it would pass
        # MAX_MEMO_CHARS characters
        other = alphabet[k % 26] + alphabet[k // 26 % 26] + alphabet[k // 676 % 26] + piece[3:]
        counter.count(other)
        assert 1 <= counter.memo_len <= most
    assert counter.memo_len < most


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_short_runs_merge_as_tiktoken_merges(impl: ModuleType, encoding: str) -> None:
    # equal ranks side by side: the leftmost pair merges first, as in tiktoken
    counter = impl.PieceCounter(encoding, memo_size=0)
    for unit in ("a", "A", "aB", "ab", "=", "!?", " ", "\n", "1", "中", "é", "😀", "\u0301", "AA=="):
        for repeat in range(1, 70):
            text = unit * repeat
            assert counter.count(text) == tiktoken_count(text, encoding), (unit, repeat)


# --------------------------------------------------------------------------- long runs


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
@pytest.mark.parametrize(
    "unit", [" ", "a", "A", "1", "!", "\n", "\r\n", "中", "😀", "\u0301", "\u00a0", "aB", " \n"]
)
def test_long_runs_of_one_character(impl: ModuleType, encoding: str, unit: str) -> None:
    # a linear scanner; a quadratic one would take minutes on these texts
    for text in (unit * 100_000, "x" + unit * 100_000 + "x", unit * 100_000 + " "):
        counter = impl.PieceCounter(encoding)
        assert counter.count(text) == tiktoken_count(text, encoding)
        assert "".join(counter.pieces(text)) == text


def test_memo_is_shared_by_the_string_kinds(impl: ModuleType) -> None:
    # a piece is remembered once, whether its text is stored 1, 2 or 4 bytes a character
    counter = impl.PieceCounter("o200k_base")
    base = "def get_value(self):\n                return self.counterexamples + 42  # ok"
    assert counter.count(base) == tiktoken_count(base, "o200k_base")
    remembered = counter.memo_len
    for wide in (" 中", " 😀", " é"):
        # the extra piece sits at the end, after a newline: the other pieces are unchanged
        text = base + "\n" + wide
        assert counter.pieces(text)[: len(counter.pieces(base))] == counter.pieces(base)
        assert counter.count(text) == tiktoken_count(text, "o200k_base")
        assert counter.memo_len <= remembered + 2, wide
        remembered = counter.memo_len


# --------------------------------------------------------------------------- the memo's generations


@settings(max_examples=60, deadline=None)
@given(
    batch=st.lists(st.lists(st.integers(0, 400), min_size=1, max_size=60), min_size=1, max_size=12),
    memo_size=st.integers(0, 41),
)
def test_twins_remember_the_same_pieces(
    c_impl: ModuleType, py_impl: ModuleType, batch: list[list[int]], memo_size: int
) -> None:
    # the generations turn over at the same pieces in both twins: the same memo_len after each text
    c_counter = c_impl.PieceCounter("o200k_base", memo_size=memo_size)
    py_counter = py_impl.PieceCounter("o200k_base", memo_size=memo_size)
    for numbers in batch:
        text = " ".join(f"w{n}" for n in numbers)
        assert c_counter.count(text) == py_counter.count(text) == tiktoken_count(text, "o200k_base")
        assert c_counter.memo_len == py_counter.memo_len <= memo_size


def _words(count: int) -> str:
    """``count`` distinct pieces: a space and nine letters each, several tokens (remembered)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return "".join(
        f" {letters[k // 676 % 26]}{letters[k // 26 % 26]}{letters[k % 26]}qzxjvw" for k in range(count)
    )


def test_memo_keeps_pieces_in_use_when_full(py_impl: ModuleType, c_impl: ModuleType) -> None:
    # Before: the memo was cleared when full, so a text of more distinct pieces than it holds
    # was counted twice with no hit on the second pass.  Two generations keep the pieces in use.
    for size, expected_misses in ((200, 49), (300, 0)):
        text = _words(150)
        expected = tiktoken_count(text, "o200k_base")
        twin = py_impl.PieceCounter("o200k_base", memo_size=size)
        compiled = c_impl.PieceCounter("o200k_base", memo_size=size)
        assert len(twin.pieces(text)) == 150
        assert twin.count(text) == compiled.count(text) == expected
        assert twin.memo_len == compiled.memo_len == 150
        calls: list[bytes] = []
        bpe = twin._bpe
        twin._bpe = lambda piece, calls=calls, bpe=bpe: calls.append(piece) or bpe(piece)
        assert twin.count(text) == compiled.count(text) == expected
        # memo_size 200 (generations of 100): the older generation holds the first 100 pieces,
        # the newer the last 50; the second pass copies the first 50 into the newer one, which
        # turns over when the 51st is copied, so misses the next 49; the last 50 are found in the
        # older one.  Before, a memo cleared when full missed all 150 once they passed its size.
        # A memo of 300 holds all 150 in one generation.
        assert len(calls) == expected_misses
        assert twin.memo_len == compiled.memo_len


def test_memo_of_one_piece(impl: ModuleType) -> None:
    counter = impl.PieceCounter("o200k_base", memo_size=1)
    # pieces of several tokens each (an ASCII piece that is one token is not remembered)
    for text in ("supercalifragilistic expialidocious", "antidisestablishment", "zzqxjkvwb quixotically"):
        assert counter.count(text) == tiktoken_count(text, "o200k_base")
        assert counter.memo_len == 1
