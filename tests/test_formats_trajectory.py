"""Converted trajectories: tool_call / tool_output / tool_use blocks once each, sub-agents kept."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.formats import detect_format, load_transcript
from compaction.formats.trajectory import split_role

DATA = Path(__file__).resolve().parent / "data" / "formats"
SAMPLE = DATA / "trajectory__subagent-tool-calls.json"


def test_the_sample_imports_each_tool_call_once_with_its_result() -> None:
    parsed = load_transcript(SAMPLE)
    assert parsed.format == "trajectory" and parsed.skipped == 0
    uses = [b["id"] for m in parsed.messages for b in m.content if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in parsed.messages for b in m.content if b["type"] == "tool_result"]
    assert uses == ["toolu_01", "toolu_02", "toolu_s1", "toolu_03", "toolu_04"]
    assert sorted(results) == sorted(uses)
    # no block of the converter's own types ships, and no _metadata rides in a block
    kinds = {b["type"] for m in parsed.messages for b in m.content}
    assert kinds == {"text", "tool_use", "tool_result", "citation_marker"}
    assert all("_metadata" not in b for m in parsed.messages for b in m.content)
    first = next(m for m in parsed.messages if any(b.get("id") == "toolu_01" for b in m.content))
    assert first.meta["block_metadata"]["toolu_01"] == {"source_index": 3, "converter": "trajectory-export"}
    error = next(b for m in parsed.messages for b in m.content if b.get("tool_use_id") == "toolu_01")
    assert error["is_error"] is True and "AssertionError" in error["content"]


def test_subagent_messages_are_kept_after_the_call_they_run_in() -> None:
    messages = load_transcript(SAMPLE).messages
    sub = [m for m in messages if m.meta.get("subagent") == "a1f3"]
    assert [m.role for m in sub] == ["user", "assistant", "user", "assistant"]
    assert sub[-1].content[0]["text"].startswith("Two places: src/dates.py:41")
    order = [(m.role, m.meta.get("subagent")) for m in messages]
    task_result = next(
        i for i, m in enumerate(messages) if any(b.get("tool_use_id") == "toolu_02" for b in m.content)
    )
    assert order[task_result - 1] == ("assistant", None)  # the Task call, answered right after it
    assert order[task_result + 1] == ("user", "a1f3")  # the sub-agent's run follows the answer


def test_tool_output_inside_an_assistant_message_splits_it() -> None:
    messages = load_transcript(SAMPLE).messages
    assert [m.role for m in messages[2:6]] == ["assistant", "user", "assistant", "user"]
    assert messages[4].content[0]["text"].startswith("A DST gap")


def test_detection_names_the_trajectory_not_the_chat_formats(tmp_path: Path) -> None:
    assert detect_format(SAMPLE) == "trajectory"
    lines = tmp_path / "t.jsonl"
    lines.write_text("\n".join(json.dumps(m) for m in json.loads(SAMPLE.read_text())["messages"]) + "\n")
    parsed = load_transcript(lines)
    assert parsed.format == "trajectory" and len(parsed.messages) == 15


def test_an_unknown_role_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps({"messages": [{"role": "narrator", "content": [{"type": "tool_call", "name": "x"}]}]})
    )
    parsed = load_transcript(path, lenient=True)
    assert parsed.skipped == 1 and "unknown role 'narrator'" in parsed.problems[0]


@settings(max_examples=100, deadline=None)
@given(
    base=st.sampled_from(["user", "assistant", "system", "tool"]),
    spelling=st.sampled_from(["-subagent-", "_subagent_", "-sub-agent-", "-agent-"]),
    agent=st.text(alphabet="abcdef0123456789", min_size=1, max_size=12),
)
def test_split_role_finds_the_base_role_and_the_subagent(base: str, spelling: str, agent: str) -> None:
    assert split_role(f"{base}{spelling}{agent}") == (base, agent)
    assert split_role(base) == (base, None)


@settings(max_examples=60, deadline=None)
@given(
    calls=st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=4), min_size=1, max_size=6, unique=True),
    twice=st.booleans(),
)
def test_round_trip_each_call_once_whatever_the_repeats(
    tmp_path_factory, calls: list[str], twice: bool
) -> None:
    content = []
    for call in calls:
        content.append(
            {"type": "tool_call", "id": call, "name": "run", "arguments": {"x": call}, "_metadata": {"i": 1}}
        )
        if twice:
            content.append({"type": "tool_use", "id": call, "name": "run", "input": {"x": call}})
    results = [{"type": "tool_output", "tool_call_id": call, "output": call.upper()} for call in calls]
    doc = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": results + (results if twice else [])},
        ]
    }
    path = tmp_path_factory.mktemp("t") / "t.json"
    path.write_text(json.dumps(doc))
    messages = load_transcript(path).messages
    uses = [b for m in messages for b in m.content if b["type"] == "tool_use"]
    answers = [b for m in messages for b in m.content if b["type"] == "tool_result"]
    assert [b["id"] for b in uses] == calls and [b["input"] for b in uses] == [{"x": c} for c in calls]
    assert [(b["tool_use_id"], b["content"]) for b in answers] == [(c, c.upper()) for c in calls]
