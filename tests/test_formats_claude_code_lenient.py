"""Claude Code sessions under --lenient: a bad line loses that line only; sidechains and rewinds said."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.formats import load_transcript


def _event(index: int, parent: str | None, *, sidechain: bool = False, text: str | None = None) -> dict:
    role = "user" if index % 2 == 0 else "assistant"
    message: dict = {"role": role, "content": [{"type": "text", "text": text or f"message {index}"}]}
    if role == "assistant":
        message["id"] = f"msg_{index}"
    return {
        "type": role,
        "uuid": f"u{index}",
        "parentUuid": parent,
        "isSidechain": sidechain,
        "sessionId": "s",
        "timestamp": f"2025-06-14T11:{index:02d}:00Z",
        "message": message,
    }


def _session(count: int) -> list[str]:
    return [json.dumps(_event(i, f"u{i - 1}" if i else None)) for i in range(count)]


def _write(tmp: Path, lines: list[str]) -> Path:
    path = tmp / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _texts(path: Path) -> list[str]:
    return [m.content[0]["text"] for m in load_transcript(path, lenient=True).messages]


def test_a_bad_line_in_the_middle_keeps_everything_before_and_after_it(tmp_path: Path) -> None:
    lines = _session(10)
    lines[4] = lines[4][:50]  # u4, the user's second ask, cut mid-line
    path = _write(tmp_path, lines)
    parsed = load_transcript(path, lenient=True)
    assert [m.content[0]["text"] for m in parsed.messages] == [f"message {i}" for i in range(10) if i != 4]
    assert [m.source_id for m in parsed.messages][3:5] == ["u3", "u5"]
    assert parsed.skipped == 1
    assert [p[len(str(path)) + 1 :] for p in parsed.problems] == [
        "5: invalid JSON: Expecting property name enclosed in double quotes at column 51",
        "6: parentUuid 'u4' is in no event of the file (line 5 was skipped); the events after it are "
        "kept in file order",
    ]


@settings(max_examples=60, deadline=None)
@given(count=st.integers(min_value=2, max_value=30), data=st.data())
def test_lenient_loses_exactly_the_bad_lines(tmp_path_factory, count: int, data: st.DataObject) -> None:
    lines = _session(count)
    broken = data.draw(st.sets(st.integers(min_value=0, max_value=count - 1), max_size=max(1, count // 3)))
    for index in broken:
        lines[index] = data.draw(st.sampled_from(["{broken", "[1]", '{"no": "type"}', lines[index][:30]]))
    path = _write(tmp_path_factory.mktemp("cc"), lines)
    parsed = load_transcript(path, lenient=True)
    assert [m.content[0]["text"] for m in parsed.messages] == [
        f"message {i}" for i in range(count) if i not in broken
    ]
    assert parsed.skipped == len(broken)
    skipped_lines = sorted(
        int(p[len(str(path)) + 1 :].split(":")[0]) for p in parsed.problems if "kept" not in p
    )
    assert skipped_lines == [i + 1 for i in sorted(broken)]


def test_sidechain_events_are_reported_not_dropped_silently(tmp_path: Path) -> None:
    lines = _session(4)
    lines[2:2] = [
        json.dumps(_event(10, None, sidechain=True, text="sub-agent task")),
        json.dumps(_event(11, "u10", sidechain=True, text="sub-agent answer")),
    ]
    path = _write(tmp_path, lines)
    parsed = load_transcript(path)
    assert [m.content[0]["text"] for m in parsed.messages] == [f"message {i}" for i in range(4)]
    assert parsed.skipped == 0
    assert [p[len(str(path)) + 1 :] for p in parsed.problems] == [
        "3: 2 sidechain events (a sub-agent's conversation, isSidechain: true, kept verbatim in the meta "
        "'claude_code_sidechain' of the next message; lines 3, 4) are not imported into the main conversation"
        " (compaction import --branches imports each sidechain as a branch)"
    ]
    kept = parsed.messages[2].meta["claude_code_sidechain"]
    assert [(r["line"], r["uuid"], r["type"]) for r in kept] == [(3, "u10", "user"), (4, "u11", "assistant")]
    assert kept[1]["message"]["content"] == [{"type": "text", "text": "sub-agent answer"}]
    assert all("claude_code_sidechain" not in m.meta for m in parsed.messages[:2] + parsed.messages[3:])


def test_a_rewind_is_kept_in_file_order_and_said(tmp_path: Path) -> None:
    lines = _session(4)  # u0 ask, u1 answer, u2 ask, u3 answer
    lines.append(json.dumps({**_event(4, "u1", text="the ask after a rewind"), "uuid": "u4"}))
    path = _write(tmp_path, lines)
    parsed = load_transcript(path)
    assert [m.content[0]["text"] for m in parsed.messages] == [
        "message 0",
        "message 1",
        "message 2",
        "message 3",
        "the ask after a rewind",
    ]
    assert [p[len(str(path)) + 1 :] for p in parsed.problems] == [
        "5: parentUuid 'u1' is the event at line 2, not the one before (line 4): a rewind or an edited "
        "message; the events between are kept in file order (compaction import --branches imports them as a branch)"
    ]


def test_progress_events_carrying_a_subagent_message_are_reported(tmp_path: Path) -> None:
    lines = _session(4)
    sub = {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "sub"}]},
    }
    progress = {
        "type": "progress",
        "uuid": "p1",
        "parentUuid": "u1",
        "parentToolUseID": "toolu_1",
        "data": {"type": "agent_progress", "agentId": "a1", "message": sub},
    }
    hook = {"type": "progress", "uuid": "p2", "parentUuid": "p1", "data": {"type": "hook_progress"}}
    lines[2:2] = [json.dumps(progress), json.dumps(hook)]
    lines[4] = json.dumps(_event(2, "p2"))
    path = _write(tmp_path, lines)
    parsed = load_transcript(path)
    assert [m.content[0]["text"] for m in parsed.messages] == [f"message {i}" for i in range(4)]
    assert [p[len(str(path)) + 1 :] for p in parsed.problems] == [
        "3: 1 progress event carrying a sub-agent's message (data.message, under the parentToolUseID "
        "call; line 3) is not imported into the main conversation (compaction import --branches imports each "
        "sub-agent's as a conversation of its own)"
    ]


def test_a_trailing_sidechain_is_kept_on_the_last_message_and_a_too_deep_one_only_reported(
    tmp_path: Path,
) -> None:
    deep: dict = {}
    for _ in range(120):
        deep = {"x": deep}
    trailing = _event(20, None, sidechain=True, text="late sub-agent note")
    too_deep = {**_event(21, "u20", sidechain=True), "message": {"role": "assistant", "content": [deep]}}
    lines = _session(2) + [json.dumps(trailing), json.dumps(too_deep)]
    path = _write(tmp_path, lines)
    parsed = load_transcript(path)
    assert [(r["line"], r["uuid"]) for r in parsed.messages[-1].meta["claude_code_sidechain"]] == [(3, "u20")]
    notes = [p[len(str(path)) + 1 :] for p in parsed.problems]  # in file order (session 16)
    assert notes[1] == (
        "4: this sidechain event nests more than 98 levels of JSON, too deep to keep in a message's "
        "meta; it is only reported"
    )
    assert notes[0].startswith("3: 2 sidechain events") and notes[0].endswith(
        "lines 3, 4) are not imported into the main conversation"
        " (compaction import --branches imports each sidechain as a branch)"
    )
