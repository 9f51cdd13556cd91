"""The import report counts the unknown blocks it imported, by type (library, import and run --json)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import KNOWN_BLOCK_TYPES, Message
from compaction.cli import main
from compaction.formats import load_transcript, unknown_block_counts

DATA = Path(__file__).resolve().parent / "data" / "formats"
RESPONSES = DATA / "openai-responses__agent-input-items.json"


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()


def test_unknown_blocks_are_counted_by_type_tool_results_included() -> None:
    messages = [
        Message("user", ({"type": "text", "text": "a"}, {"type": "input_file", "file_id": "f"})),
        Message(
            "assistant",
            (
                {"type": "tool_use", "id": "t", "name": "n", "input": {}},
                {"type": "web_search_call", "id": "w"},
                {"type": "encrypted_reasoning", "provider": "openai", "encrypted_content": "e"},
            ),
        ),
        Message(
            "user",
            (
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "input_file", "file_id": "g"}],
                    "is_error": False,
                },
            ),
        ),
    ]
    assert unknown_block_counts(messages) == {"input_file": 2, "web_search_call": 1}


def test_every_sample_reports_its_unknown_blocks() -> None:
    found = {path.name: load_transcript(path).unknown_blocks for path in sorted(DATA.glob("*.json*"))}
    assert found["openai-responses__agent-input-items.json"] == {"web_search_call": 1}
    assert found["trajectory__subagent-tool-calls.json"] == {"citation_marker": 1}
    assert all(
        not counts
        for name, counts in found.items()
        if not name.startswith(("openai-responses", "trajectory"))
    )


def test_import_and_run_json_say_how_many_unknown_blocks_of_which_types(tmp_path: Path) -> None:
    runner = _runner()
    result = runner.invoke(main, ["import", str(RESPONSES), "--store", str(tmp_path / "s.db"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["unknown_blocks"] == {"web_search_call": 1}
    result = runner.invoke(main, ["import", str(RESPONSES), "--store", str(tmp_path / "t.db")])
    assert result.exit_code == 0
    assert "unknown blocks kept verbatim: 1 web_search_call" in result.stderr
    result = runner.invoke(main, ["run", str(RESPONSES), "--budget", "4000", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["format"] == "openai-responses" and report["unknown_blocks"] == {"web_search_call": 1}
    assert report["tokens_after"] <= 4000


_KINDS = st.sampled_from(sorted(KNOWN_BLOCK_TYPES | {"x_one", "x_two", "encrypted_reasoning"}))


@settings(max_examples=80, deadline=None)
@given(kinds=st.lists(st.lists(_KINDS, min_size=1, max_size=5), max_size=6))
def test_the_counts_are_exactly_the_types_outside_the_known_ones(kinds: list[list[str]]) -> None:
    blocks = {
        "text": {"type": "text", "text": "t"},
        "image": {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        "tool_use": {"type": "tool_use", "id": "u", "name": "n", "input": {}},
        "tool_result": {
            "type": "tool_result",
            "tool_use_id": "u",
            "content": [{"type": "x_two"}],
            "is_error": False,
        },
        "thinking": {"type": "thinking", "thinking": "t", "signature": "s"},
        "redacted_thinking": {"type": "redacted_thinking", "data": "d"},
        "encrypted_reasoning": {
            "type": "encrypted_reasoning",
            "provider": "openai",
            "encrypted_content": "e",
        },
        "x_one": {"type": "x_one"},
        "x_two": {"type": "x_two"},
    }
    messages = [Message("user", tuple(blocks[k] for k in message)) for message in kinds]
    flat = [k for message in kinds for k in message]
    expected = {"x_one": flat.count("x_one"), "x_two": flat.count("x_two") + flat.count("tool_result")}
    assert unknown_block_counts(messages) == {
        k: v for k, v in sorted(expected.items(), key=lambda p: (-p[1], p[0])) if v
    }
