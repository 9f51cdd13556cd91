"""Tool definitions: accepted in either provider's shape, rendered per format, counted in the budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from compaction import InvalidMessage, Recipe, Store, compile_request
from compaction.blocks import Message
from compaction.cli import main
from compaction.tokens.encodings import get_encoding
from compaction.tools import TOOL_DEFINITION_OVERHEAD, normalize_tools, tools_tokens

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "file to read"}},
    "required": ["path"],
}
OPENAI_TOOL = {
    "type": "function",
    "function": {"name": "read_file", "description": "Read a file.", "parameters": SCHEMA},
}
ANTHROPIC_TOOL = {"name": "read_file", "description": "Read a file.", "input_schema": SCHEMA}


def _store() -> Store:
    store = Store(":memory:")
    store.append(
        [
            Message("user", ({"type": "text", "text": "read setup.py"},)),
            Message("assistant", ({"type": "text", "text": "sure"},)),
            Message("user", ({"type": "text", "text": "thanks"},)),
        ]
    )
    return store


def test_both_shapes_normalize_to_the_same_definition() -> None:
    assert normalize_tools([OPENAI_TOOL]) == normalize_tools([ANTHROPIC_TOOL])
    assert normalize_tools([OPENAI_TOOL])[0] == {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": SCHEMA,
    }


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_tools_are_rendered_and_counted(fmt: str) -> None:
    with _store() as store:
        recipe = Recipe(budget_tokens=4000, cache_breakpoints=False)  # the definitions as given
        bare = compile_request(store, recipe, format=fmt)
        offered = compile_request(store, recipe, format=fmt, tools=[ANTHROPIC_TOOL])
    body = offered.request.body()
    if fmt == "openai":
        assert body["tools"] == [OPENAI_TOOL]
    else:
        assert body["tools"] == [ANTHROPIC_TOOL]
    wire_json = json.dumps(body["tools"][0], sort_keys=True, separators=(",", ":"))
    expected = TOOL_DEFINITION_OVERHEAD + len(get_encoding().encode_ordinary(wire_json))
    assert (
        offered.tokens - bare.tokens
        == expected
        == tools_tokens(normalize_tools([ANTHROPIC_TOOL]), fmt, "o200k_base")
    )


def test_tools_push_a_tight_budget_into_over_budget() -> None:
    with _store() as store:
        bare = compile_request(store, Recipe(budget_tokens=4000))
        from compaction import OverBudget

        with pytest.raises(OverBudget):
            compile_request(store, Recipe(budget_tokens=bare.tokens + 5), tools=[OPENAI_TOOL])


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        (["read_file"], "tools[0]: a tool definition must be an object"),
        ([{"description": "no name"}], "tools[0]: a tool definition needs a non-empty string 'name'"),
        (
            [{"name": "x", "input_schema": "object"}],
            "tools[0] (x): the parameters / input_schema must be a JSON schema",
        ),
        ([ANTHROPIC_TOOL, OPENAI_TOOL], "each name must be unique; repeated: read_file"),
    ],
)
def test_bad_definitions_are_named(tools: list, fragment: str) -> None:
    with pytest.raises(
        InvalidMessage,
        match=fragment.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        normalize_tools(tools)


def test_cli_tools_option(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([OPENAI_TOOL]), encoding="utf-8")
    out = tmp_path / "request.json"
    transcript = (
        Path(__file__).resolve().parent.parent
        / "examples"
        / "swe-agent__marshmallow-1867__function-calling.traj"
    )
    result = CliRunner().invoke(
        main, ["run", str(transcript), "--budget", "6000", "--tools", str(tools), "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(out.read_text())
    assert body["tools"] == [OPENAI_TOOL] and json.loads(result.stdout)["tokens_after"] <= 6000
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    failed = CliRunner().invoke(main, ["run", str(transcript), "--budget", "6000", "--tools", str(bad)])
    assert failed.exit_code == 1 and "bad.json: tool definitions must be a JSON array" in failed.output
