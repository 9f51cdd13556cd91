"""pi tree sessions: a bad line never loses the messages before it; blob: image references kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.errors import InvalidTranscript
from compaction.formats import load_transcript


def _entry(index: int, parent: str | None, role: str = "user", text: str | None = None) -> dict:
    message = {"role": role, "content": [{"type": "text", "text": text or f"message {index}"}]}
    return {
        "type": "message",
        "id": f"e{index}",
        "parentId": parent,
        "timestamp": f"t{index}",
        "message": message,
    }


def _session(count: int) -> list[str]:
    lines = [json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/w"})]
    for index in range(count):
        role = "user" if index % 2 == 0 else "assistant"
        lines.append(json.dumps(_entry(index, f"e{index - 1}" if index else None, role)))
    return lines


def _write(tmp: Path, lines: list[str]) -> Path:
    path = tmp / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_bad_line_in_the_middle_keeps_everything_before_and_after_it(tmp_path: Path) -> None:
    lines = _session(10)
    lines[5] = lines[5][:40]  # entry e4 (a user message) is cut mid-line
    parsed = load_transcript(_write(tmp_path, lines), lenient=True)
    texts = [m.content[0]["text"] for m in parsed.messages]
    assert texts == [f"message {i}" for i in range(10) if i != 4]
    assert parsed.skipped == 1
    assert parsed.problems[0].endswith(":6: invalid JSON: Unterminated string starting at at column 33")
    assert parsed.problems[1].endswith(
        ":7: parentId 'e4' is in no entry of the file (a skipped or missing line); "
        "the 4 entries written before line 7 were re-linked in file order"
    )


def test_strict_parsing_still_stops_at_the_bad_line(tmp_path: Path) -> None:
    lines = _session(6)
    lines[3] = "{not json"
    with pytest.raises(InvalidTranscript, match=r":4: invalid JSON"):
        load_transcript(_write(tmp_path, lines))


def test_an_abandoned_branch_stays_out_and_the_active_one_is_whole(tmp_path: Path) -> None:
    lines = _session(4)
    lines.insert(3, json.dumps(_entry(90, "e0", "assistant", "abandoned answer")))  # a sibling of e1
    parsed = load_transcript(_write(tmp_path, lines))
    assert [m.content[0]["text"] for m in parsed.messages] == [f"message {i}" for i in range(4)]
    assert parsed.problems == []


def test_a_blob_image_reference_is_kept_as_a_reference_and_its_text_stays(tmp_path: Path) -> None:
    result = {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "screenshot",
        "content": [
            {"type": "text", "text": "Took a screenshot of the page."},
            {"type": "image", "data": "blob:sha256:9f2c0d5e7a1b", "mimeType": "image/png"},
        ],
    }
    call = {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": "c1", "name": "screenshot", "arguments": {}}],
    }
    lines = [
        json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/w"}),
        json.dumps({"type": "message", "id": "a", "parentId": None, "message": call}),
        json.dumps({"type": "message", "id": "b", "parentId": "a", "message": result}),
    ]
    messages = load_transcript(_write(tmp_path, lines)).messages
    content = messages[1].content[0]["content"]
    assert content[0] == {"type": "text", "text": "Took a screenshot of the page."}
    assert content[1] == {
        "type": "image",
        "source": {"type": "reference", "reference": "blob:sha256:9f2c0d5e7a1b", "media_type": "image/png"},
    }


@settings(max_examples=60, deadline=None)
@given(count=st.integers(min_value=3, max_value=30), data=st.data())
def test_lenient_loses_exactly_the_bad_lines(tmp_path_factory, count: int, data: st.DataObject) -> None:
    lines = _session(count)
    broken = data.draw(st.sets(st.integers(min_value=1, max_value=count), max_size=max(1, count // 3)))
    for number in broken:
        lines[number] = "{broken"
    parsed = load_transcript(_write(tmp_path_factory.mktemp("p"), lines), lenient=True)
    kept = [f"message {i}" for i in range(count) if i + 1 not in broken]
    texts = [t for m in parsed.messages for t in [m.content[0]["text"]]]
    assert texts == kept
    assert parsed.skipped == len(broken)
