"""Session 16: CLI and import messages that are true and complete.

Each test says what was wrong before its fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from compaction.errors import InvalidTranscript, RecipeError
from compaction.formats import NothingRead, load_transcript
from compaction.formats._shown import printable
from compaction.model_names import MAX_MODEL_NAME_CHARS
from compaction.recipe import Recipe, load_recipe
from tests.cli_runner import cli
from tests.lenient_checks import jsonl_with_bad_lines

# -- 5. a recipe's summarizer.model is checked as its model is -------------------------------------

UNPRINTABLE = ["\n", "\r", "\t", "\x1b", "\u200b", "\ufeff", "\x00", "\u2028"]


def write_summarizer_recipe(path: Path, model: str) -> Path:
    """Write a recipe whose ``[summarizer] model`` is ``model`` (an ``openai`` summarizer): a TOML
    basic string, every character that does not print (and the quote and backslash) as ``\\uXXXX``."""
    quoted = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in model)
    path.write_text(
        'budget_tokens = 4000\n[summarizer]\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\n'
        f'model = "{quoted}"\n',
        "utf-8",
    )
    return path


@settings(max_examples=40, deadline=None)
@example(prefix="llama3", char="\n", suffix="X")
@given(
    prefix=st.text(st.characters(codec="utf-8").filter(str.isprintable), min_size=1, max_size=40).filter(
        str.strip
    ),
    char=st.sampled_from(UNPRINTABLE),
    suffix=st.text(st.characters(codec="utf-8").filter(str.isprintable), max_size=20),
)
def test_a_summarizer_model_that_does_not_print_is_refused_naming_the_key_and_position(
    prefix: str, char: str, suffix: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: ``[summarizer] model = "llama3\\nX"`` loaded and was sent in every summary request."""
    path = write_summarizer_recipe(tmp_path_factory.mktemp("recipe") / "r.toml", prefix + char + suffix)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: key 'summarizer.model': expected a model name, found ")
    assert message.endswith(f": a character that does not print ({char!r}) at position {len(prefix)}")
    assert message.isprintable()
    assert isinstance(caught.value, ValueError)


@settings(max_examples=30, deadline=None)
@example(length=MAX_MODEL_NAME_CHARS)
@example(length=MAX_MODEL_NAME_CHARS + 1)
@example(length=10_240)
@given(length=st.integers(1, 3 * MAX_MODEL_NAME_CHARS))
def test_a_summarizer_model_over_256_characters_is_refused(length: int) -> None:
    """Before: a 10 KB summarizer model loaded."""
    name = ("qwen2.5-" * length)[:length]
    settings_ = {"kind": "openai", "base_url": "http://127.0.0.1:9", "model": name}
    if length <= MAX_MODEL_NAME_CHARS:
        assert Recipe().replace(summarizer=settings_).summarizer.model == name
        return
    with pytest.raises(RecipeError) as caught:
        Recipe().replace(summarizer=settings_)
    assert str(caught.value) == (
        f"<replace>: key 'summarizer.model': expected a model name, found {name[:80]!r}...: "
        f"a name of {length:,} characters; at most 256 are taken"
    )


@pytest.mark.parametrize("model", ["", "   ", "\t"])
def test_a_blank_summarizer_model_is_refused(model: str) -> None:
    with pytest.raises(RecipeError) as caught:
        Recipe().replace(summarizer={"kind": "openai", "base_url": "http://127.0.0.1:9", "model": model})
    assert str(caught.value) == (
        f"<replace>: key 'summarizer.model': expected a non-empty string, found string {model!r}"
    )


def test_the_cli_refuses_a_summarizer_model_that_does_not_print_in_one_line(tmp_path: Path) -> None:
    transcript = jsonl_with_bad_lines(tmp_path / "chat.jsonl", 4, set())
    recipe = write_summarizer_recipe(tmp_path / "r.toml", "llama3\x1b[2JX")
    result = cli("run", transcript, "--recipe", recipe)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        f"compaction: error: {recipe}: key 'summarizer.model': expected a model name, found "
        "'llama3\\x1b[2JX': a character that does not print ('\\x1b') at position 6\n"
    )


# -- 3. the skipped lines are listed in file order ---------------------------------------------------


def jsonl_with_two_kinds_of_damage(path: Path, total: int, cut: set[int], bad_image: set[int]) -> Path:
    """Write ``total`` alternating chat lines; those in ``cut`` are invalid JSON (found as the line
    is read), those in ``bad_image`` hold an image whose data is not base64 (found once every
    line is read, when the messages are checked)."""
    lines = []
    for number in range(1, total + 1):
        role = "user" if number % 2 else "assistant"
        if number in bad_image:
            image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "!!!"}}
            lines.append(json.dumps({"role": role, "content": [image]}))
            continue
        line = json.dumps({"role": role, "content": f"message {number} about the login form"})
        lines.append(line[:-12] if number in cut else line)
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def listed_lines(problems: list[str], path: Path) -> list[int]:
    return [int(p[len(f"{path}:") :].partition(":")[0]) for p in problems]


@settings(max_examples=40, deadline=None)
@example(cut={4}, bad_image={2})
@given(
    cut=st.sets(st.integers(1, 30), min_size=1, max_size=8),
    bad_image=st.sets(st.integers(1, 30), min_size=1, max_size=8),
)
def test_lenient_problems_come_in_file_order(
    cut: set[int], bad_image: set[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: a line found malformed once the file was read (an image that is not base64) was
    listed after every invalid-JSON line, whatever its place: line 4, then line 2."""
    bad_image -= cut
    assume(bad_image and len(cut | bad_image) < 30)
    path = jsonl_with_two_kinds_of_damage(tmp_path_factory.mktemp("order") / "chat.jsonl", 30, cut, bad_image)
    parsed = load_transcript(path, format="openai", lenient=True)
    assert parsed.skipped == len(cut | bad_image)
    assert listed_lines(parsed.problems, path) == sorted(cut | bad_image)


def test_run_lenient_lists_the_skipped_lines_in_file_order(tmp_path: Path) -> None:
    path = jsonl_with_two_kinds_of_damage(tmp_path / "chat.jsonl", 12, cut={4, 9}, bad_image={2, 7})
    result = cli("run", path, "--budget", "4000", "--lenient")
    assert result.exit_code == 0, result.stderr
    listed = [line for line in result.stderr.splitlines() if line.startswith("  ")]
    assert [line.strip().partition(": ")[0] for line in listed] == [f"{path}:{n}" for n in (2, 4, 7, 9)]
    assert listed[0].endswith(
        "malformed assistant message: content[0]: invalid base64 image data: unexpected character '!'"
    )
    assert ": invalid JSON: " in listed[1]


# -- 2. --format X under which every line is bad lists them, not only the first ----------------------


def chat_lines_without_roles(path: Path, total: int) -> Path:
    """Write ``total`` JSON lines none of which is a chat message (no ``role``)."""
    path.write_text("".join(json.dumps({"kind": "event", "n": n}) + "\n" for n in range(total)), "utf-8")
    return path


@settings(max_examples=12, deadline=None)
@example(total=2)
@example(total=5)
@example(total=6)
@given(total=st.integers(2, 14))  # one line alone is a JSON document, not JSONL
def test_a_format_under_which_every_line_is_bad_lists_them_first(
    total: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: ``--format openai --lenient`` on a file none of whose lines is a chat message said
    only the first line's problem ("the first: line 1: ...") and nothing of the others."""
    folder = tmp_path_factory.mktemp("allbad")
    path = chat_lines_without_roles(folder / "events.jsonl", total)
    with pytest.raises(NothingRead) as caught:
        load_transcript(path, format="openai", lenient=True)
    assert isinstance(caught.value, InvalidTranscript) and caught.value.skipped == total
    why = "unknown role None; expected system, developer, user, assistant, tool or function"
    assert caught.value.problems == [f"{path}:{n}: {why}" for n in range(1, total + 1)]
    plural = "s" if total != 1 else ""
    expected = [f"skipped {total} malformed line{plural}:"]
    expected += [f"  {path}:{n}: {why}" for n in range(1, min(total, 5) + 1)]
    expected += [f"  ... and {total - 5} more"] if total > 5 else []
    expected.append(f"compaction: error: {caught.value}")
    for args in (
        ("run", path, "--budget", "4000", "--format", "openai", "--lenient"),
        ("import", path, "--store", folder / "s.db", "--format", "openai", "--lenient"),
    ):
        result = cli(*args)
        assert result.exit_code == 1 and result.stdout == ""
        assert result.stderr.splitlines() == expected


# -- 1. every line of the file is accounted for: skipped, joined, left out, or no message ------------

PI = Path(__file__).resolve().parent.parent / "examples" / "pi__pi-mono__before-compaction.jsonl"


def pi_with_line_damaged(path: Path, number: int) -> Path:
    """Write the shipped pi session with line ``number`` (1-based) cut short."""
    lines = PI.read_text("utf-8").splitlines()
    lines[number - 1] = lines[number - 1][:-12]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def table_row(table: str, what: str) -> str:
    """Return the value of row ``what`` of a table ``run`` prints, its wrapped lines joined."""
    cells = [
        [c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")
    ]
    start = next(i for i, row in enumerate(cells) if row[0] == what)
    end = next((i for i in range(start + 1, len(cells)) if cells[i][0]), len(cells))
    return " ".join(row[1] for row in cells[start:end])


def test_the_shipped_pi_session_with_one_line_damaged_accounts_for_every_line(tmp_path: Path) -> None:
    """Before: 1 line damaged, 2 messages fewer (962 -> 960), and the report said only "1 skipped".

    Line 6 is an assistant turn between two tool results (lines 5 and 7): skipped, it leaves the
    two results one after the other, and they are joined into one user turn (one turn answers
    a fan-out), so a second message goes without a line being lost.
    """
    records = [json.loads(line) for line in PI.read_text("utf-8").splitlines()]
    assert [r["message"]["role"] for r in records[4:7]] == ["toolResult", "assistant", "toolResult"]
    clean = json.loads(cli("run", PI, "--budget", "16000", "--json").stdout)["read"]
    assert clean == {
        "lines": 1003,
        "records": 990,
        "messages": 962,
        "skipped": 0,
        "tool_results_joined": 15,
        "empty_left_out": 13,
        "lines_without_a_message": 13,
    }
    path = pi_with_line_damaged(tmp_path / "pi.jsonl", 6)
    damaged = cli("run", path, "--budget", "16000", "--lenient", "--json")
    assert damaged.exit_code == 0, damaged.stderr
    report = json.loads(damaged.stdout)
    assert report["messages"] == 960 and report["skipped"] == 1
    assert report["read"] == {
        **clean,
        "records": 989,
        "messages": 960,
        "skipped": 1,
        "tool_results_joined": 16,
    }
    table = cli("run", path, "--budget", "16000", "--lenient")
    assert table_row(table.stdout, "read") == (
        "1,003 lines: 960 messages, 1 line skipped, 16 tool results joined to the turn before, "
        "13 empty messages left out, 13 lines with no message of their own"
    )
    assert table_row(table.stdout, "messages") == "960"
    imported = cli("import", path, "--store", tmp_path / "s.db", "--lenient")
    assert imported.stdout == (
        f"{path}: pi, 1,003 lines: 960 messages, 1 line skipped, 16 tool results joined to the turn "
        "before, 13 empty messages left out, 13 lines with no message of their own; 960 added "
        "(960 in conversation 'pi' of the store)\n"
    )
    assert imported.stderr.splitlines()[0] == "skipped 1 malformed line, and 1 note:"


@st.composite
def chat_with_tools(draw: st.DrawFn) -> tuple[list[str], set[int]]:
    """OpenAI Chat JSONL lines: turns of a user ask, an assistant making 0-3 tool calls (or an
    empty answer) and one tool message per call; and the 1-based numbers of lines to cut short."""
    lines: list[str] = []
    for turn in range(draw(st.integers(1, 8))):
        lines.append(json.dumps({"role": "user", "content": f"ask {turn}"}))
        calls = draw(st.integers(-1, 3))
        if calls < 0:
            lines.append(json.dumps({"role": "assistant", "content": ""}))  # nothing to show: left out
            continue
        ids = [f"call_{turn}_{n}" for n in range(calls)]
        tool_calls = [
            {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}} for i in ids
        ]
        lines.append(
            json.dumps({"role": "assistant", "content": f"answer {turn}", "tool_calls": tool_calls or None})
        )
        lines += [json.dumps({"role": "tool", "tool_call_id": i, "content": f"output of {i}"}) for i in ids]
    cut = draw(st.sets(st.integers(1, len(lines)), max_size=len(lines) // 2))
    return lines, cut


@settings(max_examples=60, deadline=None)
@given(chat=chat_with_tools())
def test_every_line_of_a_chat_transcript_is_accounted_for(
    chat: tuple[list[str], set[int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """lines = messages + skipped + tool results joined + empty left out, and each figure is what
    the lines say: a tool message joins the message kept before it when that one is a tool message too."""
    lines, cut = chat
    assume(len(lines) > 1)
    path = tmp_path_factory.mktemp("chat") / "chat.jsonl"
    path.write_text(
        "\n".join(line[:-12] if n in cut else line for n, line in enumerate(lines, 1)) + "\n", "utf-8"
    )
    kept = [json.loads(line) for n, line in enumerate(lines, 1) if n not in cut]
    empty = [m for m in kept if m["role"] == "assistant" and not m["content"] and not m.get("tool_calls")]
    shown = [m for m in kept if not any(m is e for e in empty)]
    joined = sum(1 for a, b in zip(shown, shown[1:], strict=False) if a["role"] == b["role"] == "tool")
    assume(shown)  # a file with no message left is NothingRead (tested above)
    parsed = load_transcript(path, format="openai", lenient=True)
    tally = parsed.read
    assert (tally.lines, tally.skipped, tally.joined, tally.left_out) == (
        len(lines),
        len(cut),
        joined,
        len(empty),
    )
    assert tally.messages == len(parsed.messages) == len(shown) - joined
    assert tally.lines == tally.messages + tally.skipped + tally.joined + tally.left_out
    assert tally.other_lines == 0
    described = tally.describe()
    assert described.startswith(
        f"{len(lines):,} line{'s' if len(lines) != 1 else ''}: {tally.messages:,} message"
    )
    assert (f"{joined} tool result" in described) == (joined > 0)


# -- 4. a file name holding a control character is printed escaped ---------------------------------

CONTROL = ["\n", "\r", "\t", "\x1b", "\x1b[2J", "\x07", "\x7f", "\u202e", "\u200b", "\u2028"]


@settings(max_examples=25, deadline=None)
@example(stem="chat", control="\n")
@example(stem="chat", control="\x1b[2J")
@given(
    stem=st.text(st.characters(codec="utf-8", exclude_characters="/\\").filter(str.isprintable), max_size=12),
    control=st.sampled_from(CONTROL),
)
def test_a_file_name_with_a_control_character_is_printed_escaped(
    stem: str, control: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: ``compaction run $'chat\\n.jsonl'`` printed the name raw in its error and report
    lines: a line break split a one-line error in two, an ESC reached the terminal."""
    folder = tmp_path_factory.mktemp("names")
    path = jsonl_with_bad_lines(folder / f"{stem}{control}.jsonl", 4, {2})
    escaped = str(path).replace(control, control.encode("unicode_escape").decode("ascii"))
    assert escaped != str(path) and escaped.isprintable()

    def lines(text: str) -> list[str]:
        assert all(line.isprintable() for line in text.split("\n")), text
        return text.split("\n")

    strict = cli("run", path, "--budget", "4000")
    assert strict.exit_code == 1
    assert lines(strict.stderr)[0].startswith(f"compaction: error: {escaped}:2: invalid JSON: ")
    assert len(strict.stderr.splitlines()) == 1
    lenient = cli("run", path, "--budget", "4000", "--lenient", "--out", folder / f"out{control}.json")
    assert lenient.exit_code == 0, lenient.stderr
    assert lines(lenient.stderr)[:2] == [
        "skipped 1 malformed line:",
        f"  {escaped}:2: invalid JSON: Unterminated string starting at column 34",
    ]
    # the table's title wraps where the temporary path is long: compared without the white space
    assert "".join(f"compaction run: {escaped}".split()) in "".join(" ".join(lines(lenient.stdout)).split())
    imported = cli("import", path, "--store", folder / f"s{control}.db", "--lenient", "--conversation", "c")
    assert imported.exit_code == 0, imported.stderr
    assert lines(imported.stdout)[0].startswith(f"{escaped}: openai, 4 lines: 3 messages, 1 line skipped; ")
    assert (
        lines(imported.stderr)[1] == f"  {escaped}:2: invalid JSON: Unterminated string starting at column 34"
    )


def test_printable_escapes_only_what_does_not_print() -> None:
    assert printable("chat.jsonl") == "chat.jsonl"
    assert printable("a b\n\x1b[2J\u202e\u00e9.jsonl") == "a b\\n\\x1b[2J\\u202e\u00e9.jsonl"
    assert printable(printable("a\nb")) == "a\\nb"  # once escaped, it prints


@pytest.mark.parametrize("command", ["replay", "eval"])
def test_replay_and_eval_print_a_transcript_name_escaped_in_their_title(command: str, tmp_path: Path) -> None:
    """Before: their table titles printed the file name raw (a line break split the title)."""
    path = jsonl_with_bad_lines(tmp_path / "r\x1bx\n.jsonl", 6, set())
    result = cli(command, path, "--budget", "4000")
    assert result.exit_code == 0, result.stderr
    title = "".join(result.stdout.split("┏")[0].split())  # rich wraps it, at a space or within a word
    assert "".join(f"{tmp_path}/r\\x1bx\\n.jsonl (openai, 6 messages,".split()) in title
    assert all(line.isprintable() for line in result.stdout.split("\n"))


@settings(max_examples=8, deadline=None)
@example(total=2)
@example(total=9)
@given(total=st.integers(2, 12))
def test_a_strict_format_under_which_every_line_fails_says_all_of_them_fail(
    total: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: without --lenient, the error named the first line and told to skip such lines with
    --lenient, which then imported nothing: now it says all N lines fail, so --lenient would not help."""
    path = chat_lines_without_roles(tmp_path_factory.mktemp("strict") / "events.jsonl", total)
    result = cli("run", path, "--budget", "4000", "--format", "openai")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        f"compaction: error: {path}:1: unknown role None; expected system, developer, user, assistant, tool "
        f"or function; all {total:,} lines that might hold a chat message (an object with a 'role' and its "
        "'content') fail as 'openai' (the first is said here), so --lenient would import nothing\n"
    )
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path, format="openai")
    assert (caught.value.path, caught.value.line) == (str(path), 1)


def test_a_strict_format_under_which_some_lines_read_still_says_to_skip_them(tmp_path: Path) -> None:
    path = jsonl_with_bad_lines(tmp_path / "chat.jsonl", 6, {1, 3})
    result = cli("run", path, "--budget", "4000", "--format", "openai")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"compaction: error: {path}:1: invalid JSON: ")
    assert result.stderr.endswith("; fix it, or skip such lines with --lenient (lenient=True in Python)\n")
