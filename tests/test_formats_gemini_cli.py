"""Gemini CLI stream-json: deltas joined, tool calls paired, never mistaken for Agent TARS."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.formats import agent_tars, detect_format, load_transcript
from compaction.formats._sniff import Sample

SAMPLE = Path(__file__).resolve().parent / "data" / "formats" / "gemini-cli__stream-json-tool-session.jsonl"


def test_the_sample_imports_as_gemini_cli_with_every_call_answered() -> None:
    parsed = load_transcript(SAMPLE)
    assert parsed.format == "gemini-cli" and parsed.skipped == 0
    assert [m.role for m in parsed.messages] == ["user"] + ["assistant", "user"] * 5 + ["assistant"]
    uses = [b["id"] for m in parsed.messages for b in m.content if b["type"] == "tool_use"]
    results = [b for m in parsed.messages for b in m.content if b["type"] == "tool_result"]
    assert len(uses) == 5 and [b["tool_use_id"] for b in results] == uses
    assert parsed.messages[1].content[0]["text"] == "I'll run the parser tests to see the failure."
    assert parsed.messages[-1].content == (
        {"type": "text", "text": "Fixed: the tokenizer now skips escaped quotes; all 38 parser tests pass."},
    )
    failed = results[2]
    assert failed["is_error"] is True
    assert failed["content"].startswith("Error (edit_no_occurrence_found): Failed to edit, 0 occurrences")
    assert parsed.messages[1].meta["model"] == "gemini-2.5-pro"
    assert parsed.messages[-1].meta["gemini_result"][0]["stats"]["tool_calls"] == 5
    assert parsed.messages[4].meta["gemini_errors"][0]["severity"] == "warning"


def test_detected_as_gemini_and_agent_tars_refuses_its_events() -> None:
    assert detect_format(SAMPLE) == "gemini-cli"
    head = SAMPLE.read_text()
    assert not agent_tars.sniff(Sample(head))
    # a stream that starts at a tool result (a tail of a log) is still Gemini's
    tail = "\n".join(head.splitlines()[5:]) + "\n"
    assert not agent_tars.sniff(Sample(tail))


def test_a_bad_event_is_named_by_its_line(tmp_path: Path) -> None:
    lines = SAMPLE.read_text().splitlines()
    lines[4] = json.dumps({"type": "tool_use", "timestamp": "t", "tool_id": "x"})
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(lines) + "\n")
    parsed = load_transcript(path, format="gemini-cli", lenient=True)
    assert parsed.skipped == 1 and parsed.problems == [
        f"{path}:5: a tool_use event needs a string 'tool_name'"
    ]


@settings(max_examples=80, deadline=None)
@given(chunks=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=8))
def test_assistant_deltas_join_into_the_text_they_stream(tmp_path_factory, chunks: list[str]) -> None:
    events = [
        {"type": "init", "timestamp": "t", "session_id": "s", "model": "m"},
        {"type": "message", "timestamp": "t", "role": "user", "content": "go"},
    ]
    events += [
        {"type": "message", "timestamp": "t", "role": "assistant", "content": c, "delta": True}
        for c in chunks
    ]
    path = tmp_path_factory.mktemp("g") / "g.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    messages = load_transcript(path).messages
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content == ({"type": "text", "text": "".join(chunks)},)
