"""Input at the limits of what parsing accepts: deep nesting, huge first lines, forced formats.

Reproductions of issue 10: 330 nested ``tool_result`` levels and a deeply nested ``--tools``
schema crashed with ``RecursionError``; a JSONL file whose first line is over 64 KiB was "of no
known format"; a ``--format`` that reads nothing from the file succeeded with 0 messages (10 of
63 combinations of the examples).  Each now parses, or fails with one clear error naming the
file, the place and the limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import CASES, EXAMPLES

from compaction import (
    InvalidMessage,
    InvalidTranscript,
    Message,
    Recipe,
    Store,
    compile_request,
    load_transcript,
)
from compaction.blocks import MAX_BLOCK_DEPTH, MAX_JSON_DEPTH, validate_block
from compaction.cli import main
from compaction.errors import InvalidArgument
from compaction.formats import FORMATS, detect_format, parse_messages
from compaction.formats._common import MAX_RECORD_DEPTH
from compaction.tokens.counting import count_text
from compaction.tools import normalize_tools, parse_tools_json, tools_tokens

BIG = 200 * 1024


def cli(*args: str | Path) -> Result:
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, [str(a) for a in args])


def user_error(result: Result, *fragments: str) -> str:
    """Assert ``result`` is one clear error line (exit 1, no traceback) holding ``fragments``."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    err = result.stderr
    assert "Traceback" not in err and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# -- deep nesting ------------------------------------------------------------------------------------


def nested_result(levels: int) -> dict[str, Any]:
    """Return a ``tool_result`` holding a ``tool_result`` ... ``levels`` deep, ids ``t0`` (innermost) up."""
    block: dict[str, Any] = {"type": "text", "text": "leaf"}
    for level in range(levels):
        block = {"type": "tool_result", "tool_use_id": f"t{level}", "content": [block]}
    return block


def deep_json(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


def chat(levels: int) -> list[dict[str, Any]]:
    """An Anthropic conversation whose tool result nests ``levels`` tool results deep."""
    return [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{levels - 1}", "name": "sh", "input": {}}],
        },
        {"role": "user", "content": [nested_result(levels)]},
        {"role": "assistant", "content": "done"},
    ]


def test_the_deepest_tool_result_nesting_allowed_is_accepted_everywhere(tmp_path: Path) -> None:
    validate_block(nested_result(MAX_BLOCK_DEPTH))
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"messages": chat(MAX_BLOCK_DEPTH)}), "utf-8")
    assert len(load_transcript(path).messages) == 4
    assert cli("run", path, "--budget", "8000").exit_code == 0


@pytest.mark.parametrize("levels", [MAX_BLOCK_DEPTH + 1, 330])
def test_deeper_tool_results_are_refused_on_the_api_path(levels: int) -> None:
    """Before: 330 levels were a ``RecursionError`` in ``counting.blocks_text_tokens``."""
    with pytest.raises(
        InvalidMessage, match=f"content\\[0\\]: tool_result blocks nest more than {MAX_BLOCK_DEPTH} deep"
    ):
        Message("user", (nested_result(levels),))
    with pytest.raises(InvalidMessage, match="nest more than"):
        validate_block(nested_result(levels), where="block")


def test_a_block_nested_past_any_recursion_limit_is_refused_without_recursing() -> None:
    with pytest.raises(InvalidMessage, match="nest more than"):
        validate_block(nested_result(100_000))
    with pytest.raises(InvalidMessage, match=f"JSON nests more than {MAX_JSON_DEPTH} levels"):
        validate_block({"type": "tool_use", "id": "c", "name": "n", "input": deep_json(100_000)})


@pytest.mark.parametrize("levels", [MAX_BLOCK_DEPTH + 1, 330])
def test_deeper_tool_results_are_refused_at_parse_time_naming_file_and_line(
    levels: int, tmp_path: Path
) -> None:
    """Before: 330 levels imported and then crashed counting with a ``RecursionError`` traceback."""
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in chat(levels)) + "\n", "utf-8")
    with pytest.raises(InvalidTranscript, match="deep.jsonl:3: .*nest") as caught:
        load_transcript(path, format="anthropic")
    assert str(MAX_BLOCK_DEPTH) in str(caught.value) or str(MAX_RECORD_DEPTH) in str(caught.value)
    user_error(cli("run", path, "--budget", "8000"), "deep.jsonl:3", "nest")
    parsed = load_transcript(path, lenient=True)
    assert parsed.skipped == 1 and [m.role for m in parsed.messages] == ["user", "assistant", "assistant"]


def test_deep_json_in_a_block_is_refused_and_the_limit_is_inclusive() -> None:
    ok = {"type": "tool_use", "id": "c", "name": "n", "input": deep_json(MAX_JSON_DEPTH - 1)}
    validate_block(ok)  # the block itself is the first level
    too_deep = {"type": "tool_use", "id": "c", "name": "n", "input": deep_json(MAX_JSON_DEPTH)}
    with pytest.raises(InvalidMessage, match="content\\[1\\]: the tool_use block's JSON nests more than 100"):
        Message("assistant", ({"type": "text", "text": "x"}, too_deep))
    with pytest.raises(InvalidMessage, match="the odd block's JSON"):
        validate_block({"type": "odd", "payload": [deep_json(MAX_JSON_DEPTH)]})
    with pytest.raises(InvalidMessage, match="meta: nests more than"):
        Message("user", ({"type": "text", "text": "x"},), meta={"x": deep_json(MAX_JSON_DEPTH + 1)})


def test_a_self_referencing_block_is_refused_not_looped_on() -> None:
    block: dict[str, Any] = {"type": "odd"}
    block["self"] = block
    with pytest.raises(InvalidMessage, match="nests more than"):
        validate_block(block)


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_deep_tool_arguments_text_is_kept_raw(fmt: str) -> None:
    arguments = json.dumps(deep_json(500))
    if fmt == "openai":
        call = {"id": "c", "type": "function", "function": {"name": "n", "arguments": arguments}}
        messages = [{"role": "assistant", "content": None, "tool_calls": [call]}]
        (message,) = parse_messages(messages, format=fmt)
        assert message.content[0]["input"] == {"_raw_arguments": arguments}
    else:
        too_deep = [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "n", "input": deep_json(500)}],
            }
        ]
        with pytest.raises(InvalidTranscript, match="messages\\[0\\].*nests more than 100"):
            parse_messages(too_deep, format=fmt)


def test_json_nested_past_the_record_limit_is_refused_per_line_and_per_document(tmp_path: Path) -> None:
    deep_line = json.dumps({"role": "user", "content": "x", "extra": deep_json(MAX_RECORD_DEPTH)})
    path = tmp_path / "deep.jsonl"
    path.write_text(deep_line + '\n{"role":"assistant","content":"ok"}\n', "utf-8")
    with pytest.raises(
        InvalidTranscript, match=f"deep.jsonl:1: JSON nested more than {MAX_RECORD_DEPTH} levels"
    ):
        load_transcript(path, format="openai")
    assert load_transcript(path, format="openai", lenient=True).skipped == 1
    document = tmp_path / "deep.json"
    document.write_text(
        json.dumps([{"role": "user", "content": "x", "extra": deep_json(MAX_RECORD_DEPTH)}]), "utf-8"
    )
    with pytest.raises(InvalidTranscript, match="nothing can be skipped"):
        load_transcript(document, format="openai")


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_json_too_deep_for_the_parser_is_invalid_input(depth: int, tmp_path: Path) -> None:
    path = tmp_path / "deeper.jsonl"
    deep = '{"role": "user", "content": ' + "[" * depth + "]" * depth + "}\n"
    path.write_text(deep + '{"role": "assistant", "content": "ok"}\n', "utf-8")
    with pytest.raises(InvalidTranscript, match="nested too deeply"):
        load_transcript(path, format="openai")
    user_error(
        cli("run", path, "--budget", "1000", "--format", "anthropic"), "deeper.jsonl:1", "nested too deeply"
    )


def schema(levels: int) -> dict[str, Any]:
    """A JSON schema of ``levels`` nested objects (two JSON levels each)."""
    value: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"a": value}}
    return value


def test_a_deeply_nested_tool_schema_is_refused_naming_the_tool() -> None:
    """Before: ``RecursionError`` in ``canonical_json`` while counting the definitions."""
    fine = normalize_tools([{"name": "ok", "parameters": schema(40)}])
    assert tools_tokens(fine, "openai", "o200k_base") > 0
    for shape in (
        {"name": "deep", "parameters": schema(2_000)},
        {"type": "function", "function": {"name": "deep", "parameters": schema(2_000)}},
        {"name": "deep", "input_schema": schema(60)},
    ):
        with pytest.raises(
            InvalidMessage, match=r"tools\[1\] \(deep\): the definition nests more than 100 levels"
        ):
            normalize_tools([{"name": "ok"}, shape])


def test_a_deeply_nested_tools_file_is_one_clear_error(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "deep", "parameters": schema(300)}]), "utf-8")
    transcript = tmp_path / "chat.json"
    transcript.write_text(json.dumps([{"role": "user", "content": "hi"}]), "utf-8")
    user_error(
        cli("run", transcript, "--budget", "8000", "--tools", tools), "tools[0] (deep)", "nests more than 100"
    )
    store = Store(":memory:")
    try:
        store.append(load_transcript(transcript).messages)
        with pytest.raises(InvalidMessage, match="nests more than"):
            compile_request(
                store, Recipe(budget_tokens=8000), tools=[{"name": "deep", "parameters": schema(2_000)}]
            )
    finally:
        store.close()


def test_tool_definitions_too_deep_for_the_json_parser_are_invalid_input() -> None:
    text = '[{"name": "deep", "parameters": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}]"
    with pytest.raises(InvalidMessage, match="tools.json: tool definitions nest too deeply to parse"):
        parse_tools_json(text, "tools.json")
    with pytest.raises(InvalidMessage, match="tools.json: tool definitions must be a JSON array"):
        parse_tools_json("{}", "tools.json")
    with pytest.raises(InvalidMessage, match="must be a JSON array: Expecting"):
        parse_tools_json("[", "tools.json")
    assert parse_tools_json('[{"name": "ls"}]') == [{"name": "ls"}]


# -- a first line longer than the detection head ---------------------------------------------------------


def big_output() -> str:
    line = "drwxr-xr-x  12 user  staff   384 Dec  9 00:53 packages/coding-agent/src\n"
    return (line * (BIG // len(line) + 1))[:BIG]


def pi_with_a_big_first_record(tmp_path: Path) -> Path:
    lines = (EXAMPLES / "pi__pi-mono__before-compaction.jsonl").read_text("utf-8").splitlines()
    first = {
        "type": "message",
        "timestamp": "2025-12-08T22:41:00.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": "ls output:\n" + big_output()}]},
    }
    path = tmp_path / "pi-session.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", "utf-8")
    return path


def claude_code_with_a_big_first_record(tmp_path: Path) -> Path:
    lines = (
        (EXAMPLES / "claude-code" / "claude-code-log__representative_messages.jsonl")
        .read_text("utf-8")
        .splitlines()
    )
    event = json.loads(lines[0])
    event["message"]["content"][0]["text"] = "Here is the log:\n" + big_output()
    path = tmp_path / "claude-session.jsonl"
    path.write_text("\n".join([json.dumps(event), *lines[1:]]) + "\n", "utf-8")
    return path


def openai_with_a_big_first_record(tmp_path: Path) -> Path:
    messages = [
        {"role": "system", "content": "You are a coding agent. Repository listing:\n" + big_output()},
        {"role": "user", "content": "what is in packages?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "coding-agent"},
        {"role": "assistant", "content": "the coding agent"},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in messages) + "\n", "utf-8")
    return path


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (pi_with_a_big_first_record, "pi"),
        (claude_code_with_a_big_first_record, "claude-code"),
        (openai_with_a_big_first_record, "openai"),
    ],
    ids=["pi", "claude-code", "openai"],
)
def test_a_first_record_over_64_kib_is_read_whole_for_detection(
    make: Any, expected: str, tmp_path: Path
) -> None:
    """Before: "cannot tell the transcript format (the content matches none of them)"."""
    path = make(tmp_path)
    assert len(path.read_text("utf-8").split("\n", 1)[0].encode()) > 200 * 1024
    assert detect_format(path) == expected
    parsed = load_transcript(path)
    assert parsed.format == expected and parsed.messages
    assert big_output() in parsed.messages[0].content[0]["text"]
    result = cli("run", path, "--budget", "100000", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["format"] == expected


def test_a_head_given_by_the_caller_is_all_detection_reads(tmp_path: Path) -> None:
    path = openai_with_a_big_first_record(tmp_path)
    head = path.read_bytes()[: 64 * 1024]
    with pytest.raises(InvalidTranscript, match="matches none"):
        detect_format(path, head=head)
    assert detect_format(path, head=path.read_bytes()) == "openai"


def test_a_whole_file_on_one_line_is_one_record(tmp_path: Path) -> None:
    path = tmp_path / "one-line.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": big_output()}]}), "utf-8")
    assert detect_format(path) == "openai"
    assert len(load_transcript(path).messages) == 1


# -- a forced format that reads nothing --------------------------------------------------------------


def shipped_transcripts() -> list[Path]:
    examples = [p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md"]
    cases = [p for p in CASES.glob("*") if p.suffix in (".json", ".jsonl")]
    return sorted(examples + cases)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("path", shipped_transcripts(), ids=lambda p: p.name)
def test_a_forced_format_imports_messages_or_fails_never_zero(path: Path, fmt: str) -> None:
    """Before: 10 of 63 combinations of the examples exited 0 with "0 messages"."""
    for lenient in (False, True):
        try:
            parsed = load_transcript(path, format=fmt, lenient=lenient)
        except InvalidTranscript as err:
            assert str(path) in str(err)
            continue
        assert parsed.messages, f"{path.name} read as {fmt} (lenient={lenient}) gave 0 messages and no error"


def test_a_forced_format_that_reads_nothing_says_what_it_reads_and_what_the_file_is(tmp_path: Path) -> None:
    path = EXAMPLES / "claude-code" / "claude-code-log__representative_messages.jsonl"
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path, format="pi")
    message = str(caught.value)
    assert message.startswith(f"{path}: read as 'pi', nothing was imported: none of its ")
    assert "pi session entry" in message and "it would be 'claude-code'" in message
    user_error(
        cli("run", path, "--budget", "8000", "--format", "codex"),
        "read as 'codex'",
        "'response_item'",
        "'claude-code'",
    )
    store = tmp_path / "store.sqlite"
    user_error(cli("import", path, "--store", store, "--format", "agent-tars"), "read as 'agent-tars'")


def test_everything_skipped_under_a_forced_format_is_an_error_naming_the_first_problem() -> None:
    path = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"
    with pytest.raises(
        InvalidTranscript, match="the 1,003 items that might were malformed and skipped"
    ) as caught:
        load_transcript(path, format="openai", lenient=True)
    assert "(the first: line " in str(caught.value) and "it would be 'pi'" in str(caught.value)


def test_a_forced_right_format_on_a_file_with_no_messages_says_so(tmp_path: Path) -> None:
    path = tmp_path / "header-only.jsonl"
    path.write_text('{"type":"session","id":"s","cwd":"/w","timestamp":"2025-01-01T00:00:00Z"}\n', "utf-8")
    assert load_transcript(path).messages == []  # detected: an empty session is not an error
    with pytest.raises(InvalidTranscript, match="look like 'pi', so it holds no message yet"):
        load_transcript(path, format="pi")


# -- wrong-typed arguments -----------------------------------------------------------------------------


def test_wrong_typed_arguments_are_invalid_arguments(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]), "utf-8")
    for call in (
        lambda: Message("user", 5),  # type: ignore[arg-type]
        lambda: load_transcript(None),  # type: ignore[arg-type]
        lambda: load_transcript(path, format=5),  # type: ignore[arg-type]
        lambda: count_text(5),  # type: ignore[arg-type]
        lambda: count_text("x", encoding=[]),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidArgument):
            call()
    assert count_text("") == 0 and load_transcript(str(path)).messages
