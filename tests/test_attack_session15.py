"""Hostile input against what session 15 built, each defect pinned by a test that failed before its fix.

1. A lenient parse's listing of skipped lines (``run --lenient``, ``import --lenient``, and the
   strict error) quoted the transcript as it was: an ``sk-...`` key or a ``Bearer`` token in a
   bad line was printed, terminal escapes in a line (a Craft Agents message ``type``) reached the
   terminal raw, and a megabyte on a bad line was printed whole.
2. A JSON document cut right after a complete element (between two messages, the commonest
   cut) was named damaged without the format its part before the cut reads as: the repair
   dropped that last complete element, so a one-message file repaired to ``[]``.
3. A JSON text cut inside ``Infinity``, ``-Infinity`` or ``NaN`` (which Python's ``json`` writes
   for such floats and reads back) was not called cut short (seen as a flaky failure of
   test_defects_session15's every-prefix property).
4. A model name whose Claude version had more than 4,300 digits (``claude-sonnet-999...``) was a
   ValueError traceback in every compile (``refuses_prefill`` converted it to an int).
5. ``--model`` took a name holding a line break, a terminal escape or only a zero-width space
   (it would ship in the request's ``model``): it is now the usage error a blank name is.
6. A UTF-16 (or UTF-32) transcript, as Windows tools write them, was called binary content; read
   as a format named with ``--format``, UTF-16 without a byte order mark even decoded (NUL is
   UTF-8) and was called invalid JSON at line 1: both now say the encoding and how to convert.
7. A JSON document nested 100,000 deep (``[[[[...``) was said to match none of the formats:
   detection now says it is nested too deeply to parse, as ``--format`` did.
8. A JSON document followed by more (a second document, or garbage after the first) was said to
   match none of the formats: it is now named invalid JSON holding more than one value, where the
   extra starts and the format the first value reads as.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import cli
from hypothesis import given
from hypothesis import strategies as st

from compaction.errors import InvalidTranscript, UnknownFormat
from compaction.formats import load_transcript
from compaction.formats._json_damage import cut_short, repaired_prefix
from compaction.formats._shown import LIMIT, REDACTED, shown
from compaction.formats._sniff import wide_encoding
from compaction.prefill import refuses_prefill

ROOT = Path(__file__).resolve().parent.parent
FORMAT_DATA = ROOT / "tests" / "data" / "formats"

KEY = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdef"
BEARER = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0cGFydA"


def chat_line(role: str, text: str) -> str:
    return json.dumps({"role": role, "content": text})


# -- 1. what a skipped line is said to hold ------------------------------------------------------------


def hostile_chat(path: Path) -> Path:
    """A chat JSONL whose bad lines hold a key, a Bearer token and terminal escapes."""
    lines = [
        chat_line("user", "fix the login"),
        json.dumps(KEY),
        json.dumps([f"Authorization: Bearer {BEARER}"]),
        json.dumps("\x1b[2J\x1b]0;pwned\x07"),
        chat_line("assistant", "done"),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def hostile_craft(path: Path, kind: str) -> Path:
    """The Craft Agents sample with one message of type ``kind`` (its content no string) inserted."""
    lines = (FORMAT_DATA / "craft-agents__session.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(3, json.dumps({"type": kind, "content": 1}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_run_lenient_lists_skipped_lines_without_their_secrets(tmp_path: Path) -> None:
    """Before: stderr and --json showed the whole key and the Bearer token."""
    path = hostile_chat(tmp_path / "t.jsonl")
    result = cli("run", path, "--lenient", "--budget", "4000", "--json")
    assert result.exit_code == 0, result.stderr
    problems = json.loads(result.stdout)["problems"]
    assert problems[0] == f'{path}:2: expected a JSON object, found str "{REDACTED}"'
    # the list is clipped to 60 characters ("..." inside the token), and the rest of the token redacted
    assert problems[1] == f'{path}:3: expected a JSON object, found list ["Authorization: Bearer {REDACTED}'
    table = cli("run", path, "--lenient", "--budget", "4000")
    assert table.exit_code == 0, table.stderr
    assert "skipped 3 malformed lines" in table.stderr
    assert f'{path}:2: expected a JSON object, found str "{REDACTED}"' in table.stderr
    said = result.stderr + result.stdout + table.stderr + table.stdout
    assert KEY[:12] not in said and BEARER[:12] not in said


def test_terminal_escapes_in_a_bad_line_are_printed_escaped(tmp_path: Path) -> None:
    """Before: the raw ESC and BEL of a Craft Agents message type reached stderr."""
    path = hostile_craft(tmp_path / "c.jsonl", "\x1b[2J\x1b[31mPWNED\x1b]0;evil\x07")
    lenient = cli("run", path, "--lenient", "--budget", "4000")
    assert lenient.exit_code == 0, lenient.stderr
    assert (
        f"{path}:4: a \\x1b[2J\\x1b[31mPWNED\\x1b]0;evil\\x07 message needs a string 'content'"
        in lenient.stderr
    )
    strict = cli("import", path, "--store", tmp_path / "s.db")
    assert strict.exit_code == 1
    assert strict.stderr.startswith(f"compaction: error: {path}:4: a \\x1b[2J")
    for result in (lenient, strict):
        assert "\x1b" not in result.stderr and "\x07" not in result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "s.db").exists()  # the failed import stored nothing


def test_a_megabyte_on_a_bad_line_is_listed_cut(tmp_path: Path) -> None:
    """Before: the whole million-character type was printed (and kept in --json)."""
    path = hostile_craft(tmp_path / "c.jsonl", "Z" * 1_000_000)
    result = cli("run", path, "--lenient", "--budget", "4000", "--json")
    assert result.exit_code == 0, result.stderr
    (problem,) = json.loads(result.stdout)["problems"]
    assert len(problem) < LIMIT + len(str(path)) + 60
    assert problem.endswith("ZZ message needs a string 'content'")  # what is wrong is kept
    assert f"({1_000_000 + len('a  message needs a string ') + 9 - LIMIT:,} characters cut)" in problem
    table = cli("run", path, "--lenient", "--budget", "4000")
    assert "skipped 1 malformed line:" in table.stderr
    assert max(len(line) for line in table.stderr.splitlines()) < LIMIT + len(str(path)) + 60


def test_the_lenient_import_lists_the_same_safe_problems(tmp_path: Path) -> None:
    parsed = load_transcript(hostile_chat(tmp_path / "t.jsonl"), lenient=True)
    assert parsed.skipped == 3
    assert all(KEY[:12] not in p and BEARER[:12] not in p and p.isprintable() for p in parsed.problems)
    assert [m.role for m in parsed.messages] == ["user", "assistant"]


@given(st.text(max_size=3000))
def test_shown_is_one_printable_bounded_line(text: str) -> None:
    out = shown(text)
    assert out.isprintable()
    assert "\n" not in out and "\x1b" not in out
    assert len(out) <= 4 * LIMIT + 60  # an escape is at most 10 characters ("\U0010ffff"), most are 4 to 6
    if text.isprintable() and len(text) <= LIMIT and not any(w in text for w in ("sk-", "Bearer", "bearer")):
        assert out == text or REDACTED in out  # other key shapes aside, printable text passes unchanged


@given(
    st.text(st.characters(codec="ascii"), max_size=200), st.text(st.characters(codec="ascii"), max_size=200)
)
def test_shown_never_shows_a_key_whatever_surrounds_it(before: str, after: str) -> None:
    out = shown(f"{before} {KEY} {after}")
    assert KEY not in out and KEY[8:] not in out


# -- 2. a JSON document cut right after a complete element ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ('[{"role": "user", "content": "hi"}', '[{"role": "user", "content": "hi"}]'),
        ('[{"role": "user", "content": "hi"}  \n', '[{"role": "user", "content": "hi"}]'),
        (
            '{"messages": [{"role": "user", "content": "hi"}',
            '{"messages": [{"role": "user", "content": "hi"}]}',
        ),
        ('{"model": "m", "messages": []', '{"model": "m", "messages": []}'),
        ('["a", "b"', '["a", "b"]'),
    ],
)
def test_a_cut_right_after_a_complete_element_keeps_it(text: str, kept: str) -> None:
    """Before: '[{"role": "user", "content": "hi"}' repaired to '[]'."""
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(text)
    assert repaired_prefix(text, caught.value.pos) == kept


def test_a_one_message_file_cut_before_its_last_bracket_names_its_format(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('[{"role": "user", "content": "hi"}', encoding="utf-8")
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    assert "up to there it reads as 'openai'" in str(caught.value)
    assert "cut short?" in str(caught.value)


chat_messages = st.lists(
    st.builds(
        lambda role, text: {"role": role, "content": text},
        st.sampled_from(["user", "assistant"]),
        st.text(max_size=20),
    ),
    min_size=1,
    max_size=6,
)


@given(chat_messages, st.data(), st.sampled_from([None, 1]))
def test_a_list_cut_after_any_element_repairs_to_the_elements_before_the_cut(
    messages: list[dict[str, str]], data: st.DataObject, indent: int | None
) -> None:
    text = json.dumps(messages, indent=indent)
    keep = data.draw(st.integers(1, len(messages)))
    cut = json.dumps(messages[:keep], indent=indent)[:-1].rstrip()  # up to the keep-th message's "}"
    assert text.startswith(cut) and cut.endswith("}")
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(cut)
    assert cut_short(caught.value)
    repaired = repaired_prefix(cut, caught.value.pos)
    assert repaired is not None and json.loads(repaired) == messages[:keep]


# -- 3. cut inside Infinity, -Infinity, NaN -----------------------------------------------------------


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
def test_a_text_cut_inside_a_non_finite_float_is_cut_short(literal: str) -> None:
    """Before: '[1.5, Inf' was said to be broken in the middle, not cut short."""
    for end in range(1, len(literal)):
        text = "[1.5, " + literal[:end]
        with pytest.raises(json.JSONDecodeError) as caught:
            json.loads(text)
        assert cut_short(caught.value), text
        assert repaired_prefix(text, caught.value.pos) == "[1.5]"


# -- 4. a Claude version of thousands of digits --------------------------------------------------------


@pytest.fixture
def ends_on_assistant(tmp_path: Path) -> tuple[Path, Path]:
    """A transcript ending on the assistant's turn, and a store holding it."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(chat_line("user", "fix it") + "\n" + chat_line("assistant", "done") + "\n", "utf-8")
    store = tmp_path / "s.db"
    assert cli("import", transcript, "--store", store).exit_code == 0
    return transcript, store


@pytest.mark.parametrize(
    "model", ["claude-sonnet-" + "9" * 5000, "claude-" + "9" * 5000 + "-opus", "claude-opus-4-" + "6" * 5000]
)
def test_a_model_with_a_huge_version_number_is_no_claude_that_refuses_a_prefill(
    model: str, ends_on_assistant: tuple[Path, Path]
) -> None:
    """Before: ValueError: Exceeds the limit (4300 digits) for integer string conversion."""
    assert refuses_prefill(model) is False
    transcript, store = ends_on_assistant
    for args in (["compile", "--store", store], ["run", transcript], ["inspect", "--store", store, "--json"]):
        result = cli(*args, "--budget", "4000", "--model", model)
        # a name this long is now refused before any work (tests/test_left_session15.py, 4.)
        assert result.exit_code == 2, (args[0], result.stderr[-300:])
        assert f"a name of {len(model):,} characters; at most 256 are taken" in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("model", "refuses"),
    [
        ("claude-opus-4-6", True),
        ("claude-opus-4-10", True),
        ("claude-4.6-opus", True),
        ("claude-sonnet-4-5", False),
    ],
)
def test_claude_versions_still_read_as_before(model: str, refuses: bool) -> None:
    assert refuses_prefill(model) is refuses


# -- 5. --model holding characters that do not print --------------------------------------------------


@pytest.mark.parametrize(
    "model", ["gpt-4o\nEVIL", "gpt-4o\r", "\u200b", "\ufeff", "claude-opus-4-6\x1b[31m", "a\tb"]
)
@pytest.mark.parametrize("command", ["compile", "run", "inspect", "replay"])
def test_a_model_name_that_does_not_print_is_a_usage_error(
    command: str, model: str, ends_on_assistant: tuple[Path, Path]
) -> None:
    """Before: exit 0, the name shipped in the request as it was."""
    transcript, store = ends_on_assistant
    args = {
        "compile": ["compile", "--store", store],
        "run": ["run", transcript],
        "inspect": ["inspect", "--store", store, "--json"],
        "replay": ["replay", transcript],
    }[command]
    result = cli(*args, "--budget", "4000", "--model", model)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "Invalid value for '--model': expected a model name" in result.stderr
    assert "a character that does not print" in result.stderr
    assert "\x1b" not in result.stderr and "\u200b" not in result.stderr


def test_a_model_name_with_a_space_inside_is_still_taken(ends_on_assistant: tuple[Path, Path]) -> None:
    _transcript, store = ends_on_assistant
    result = cli("compile", "--store", store, "--budget", "4000", "--model", "my model")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["model"] == "my model"


# -- 6. UTF-16 and UTF-32 transcripts -----------------------------------------------------------------

CHAT = chat_line("user", "fix it") + "\n" + chat_line("assistant", "done") + "\n"


@pytest.mark.parametrize(
    ("codec", "named"),
    [
        ("utf-16", "UTF-16"),
        ("utf-16-le", "UTF-16"),
        ("utf-16-be", "UTF-16"),
        ("utf-32", "UTF-32"),
        ("utf-32-le", "UTF-32"),
        ("utf-32-be", "UTF-32"),
    ],
)
@pytest.mark.parametrize("document", [False, True])
def test_a_utf16_transcript_is_named_so_with_how_to_convert_it(
    codec: str, named: str, document: bool, tmp_path: Path
) -> None:
    """Before: "the content is binary, not text" when detected; with --format openai, "not UTF-8
    text (byte 0 ...)", or for UTF-16 without a byte order mark "invalid JSON at line 1"."""
    text = json.dumps([json.loads(line) for line in CHAT.splitlines()]) if document else CHAT
    path = tmp_path / "t.json"
    path.write_bytes(text.encode(codec))
    assert wide_encoding(path.read_bytes()[:8]) == named
    detected = cli("import", path, "--store", tmp_path / "s.db")
    assert detected.exit_code == 1 and "Traceback" not in detected.stderr
    assert (
        f"the file is {named} text, not UTF-8: convert it with iconv -f {named} -t UTF-8" in detected.stderr
    )
    assert "binary" not in detected.stderr
    chosen = cli("import", path, "--store", tmp_path / "s.db", "--format", "openai")
    assert chosen.exit_code == 1
    assert f"not UTF-8 text but {named}: convert it with iconv -f {named} -t UTF-8" in chosen.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    "head", [b"", b"{}", b"[1]", b'{"a": "\x00"}', b"hi\x00", b"\x00\x00", b"\xef\xbb\xbf{"]
)
def test_utf8_and_binary_heads_are_no_wide_encoding(head: bytes) -> None:
    assert wide_encoding(head) is None


# -- 7. a JSON document nested 100,000 deep --------------------------------------------------------


@pytest.mark.parametrize("text", ["[" * 100_000, "[" * 100_000 + "]" * 100_000, '{"a":' * 50_000])
def test_a_document_nested_past_what_python_parses_is_said_to_be_nested_too_deeply(
    text: str, tmp_path: Path
) -> None:
    """Before: "cannot tell the transcript format (the content matches none of them)"."""
    path = tmp_path / "deep.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UnknownFormat) as caught:
        load_transcript(path)
    assert "nested too deeply to parse: more than 256 levels are refused" in str(caught.value)
    result = cli("run", path, "--budget", "4000")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "nested too deeply" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- 8. more than one JSON value ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "where", "guess"),
    [
        ('[{"role": "user", "content": "hi"}] trailing garbage', "line 1, column 37", "openai"),
        (
            '[{"role": "user", "content": "hi"}]\n[{"role": "user", "content": "again"}]\n',
            "line 2, column 1",
            "openai",
        ),
        ('{"messages": [{"role": "user", "content": "hi"}]}{"messages": []}', "line 1, column 50", "openai"),
        ("[1, 2]\n[3]\n", "line 2, column 1", None),
    ],
)
def test_a_file_of_more_than_one_json_value_is_named_so(
    content: str, where: str, guess: str | None, tmp_path: Path
) -> None:
    """Before: "cannot tell the transcript format (the content matches none of them)"."""
    path = tmp_path / "t.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    said = str(caught.value)
    assert not isinstance(caught.value, UnknownFormat)
    assert f"invalid JSON: more than one JSON value (after the first, more starts at {where})" in said
    assert (f"the first reads as {guess!r}" in said) == (guess is not None)
    result = cli("import", path, "--store", tmp_path / "s.db")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.db").exists()
