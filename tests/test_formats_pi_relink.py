"""pi tree sessions: a bad line never loses the messages before it; blob: image references kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.cli import main
from compaction.errors import InvalidTranscript
from compaction.formats import LenientLoss, load_transcript


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
    assert parsed.problems[0].endswith(":6: invalid JSON: Unterminated string starting at column 33")
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
    assert parsed.skipped == 0
    assert [p.split(".jsonl:", 1)[1] for p in parsed.problems] == [
        "4: 1 conversation entry on branches the session left (line 4) is not imported into this "
        "conversation: only the active branch, from the root to the last entry, is (compaction import "
        "--branches imports each other branch as a branch of it)"
    ]


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


def _lost_session() -> list[str]:
    """A branched session whose two bad lines leave one message that nothing can place.

    Lines: header, e0 (root), [bad: m1, child of e0], o1 (child of m1), x (child of e0),
    [bad: m2], r (child of m2), s (child of r).  The walk from s re-links r to x; o1 hangs
    under the skipped m1, and whether it belonged to the active branch is unknowable.
    """
    header = json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/w"})
    entries = [
        _entry(0, None, "user", "the task"),
        None,
        {**_entry(1, "m1", "assistant", "an answer under a skipped line"), "id": "o1"},
        {**_entry(2, "e0", "assistant", "another answer"), "id": "x"},
        None,
        {**_entry(3, "m2", "user", "go on"), "id": "r"},
        {**_entry(4, "r", "assistant", "done"), "id": "s"},
    ]
    return [header] + [json.dumps(e) if e is not None else '{"type": "message", "id": ' for e in entries]


def test_a_lenient_import_that_would_lose_more_than_the_bad_lines_fails(tmp_path: Path) -> None:
    path = _write(tmp_path, _lost_session())
    with pytest.raises(LenientLoss) as caught:
        load_transcript(path, lenient=True)
    error = caught.value
    assert (error.skipped, error.unplaced, error.path) == (2, 1, str(path))
    assert isinstance(error, InvalidTranscript) and isinstance(error, ValueError)
    assert str(error) == (
        f"{path}: a lenient import would lose 1 message beyond the 2 skipped lines (1 message "
        "(line 4) could not be placed: their chain to the root runs through a missing entry and the "
        "re-linked active branch does not reach them); nothing was imported: repair the skipped "
        "lines (3, 6) and import again"
    )
    assert error.skipped_lines == [3, 6]
    assert [p.split(".jsonl:", 1)[1].split(":", 1)[0] for p in error.problems] == ["3", "4", "6", "7"]  # file order


def test_the_same_session_with_its_lines_repaired_imports_whole(tmp_path: Path) -> None:
    lines = _lost_session()
    lines[2] = json.dumps({**_entry(9, "e0", "user", "the skipped ask"), "id": "m1"})
    lines[5] = json.dumps({**_entry(8, "x", "user", "the other skipped ask"), "id": "m2"})
    parsed = load_transcript(_write(tmp_path, lines))
    assert [m.content[0]["text"] for m in parsed.messages] == [
        "the task",
        "another answer",
        "the other skipped ask",
        "go on",
        "done",
    ]


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_branched_session_never_loses_a_message_silently(tmp_path_factory, data: st.DataObject) -> None:
    """Every message entry is imported, skipped (a bad line), or named in a note; else LenientLoss."""
    count = data.draw(st.integers(min_value=2, max_value=25))
    parents: list[int | None] = [None]
    for index in range(1, count):  # mostly the previous entry, sometimes a branch off an earlier one
        parents.append(
            data.draw(st.one_of(st.just(index - 1), st.integers(min_value=0, max_value=index - 1)))
        )
    lines = [json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/w"})]
    lines += [json.dumps(_entry(i, None if p is None else f"e{p}")) for i, p in enumerate(parents)]
    broken = data.draw(st.sets(st.integers(min_value=1, max_value=count), max_size=max(1, count // 4)))
    for number in broken:
        lines[number] = "{broken"
    path = _write(tmp_path_factory.mktemp("p"), lines)
    try:
        parsed = load_transcript(path, lenient=True)
    except LenientLoss as error:
        assert broken and error.unplaced >= 1 and error.skipped == len(broken)
        return
    noted = sum(
        int(p.split(": ", 1)[1].split(" ")[0]) for p in parsed.problems if "branches the session left" in p
    )
    assert len(parsed.messages) + noted + parsed.skipped == count
    assert parsed.skipped == len(broken)
    if not broken:  # exactly the path from the root to the last entry
        path_ids, node = [], count - 1
        while node is not None:
            path_ids.append(node)
            node = parents[node]
        assert [m.source_id for m in parsed.messages] == [f"e{i}" for i in reversed(path_ids)]


def test_the_import_command_fails_in_one_line_and_stores_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, _lost_session())
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(main, ["import", str(path), "--store", str(store), "--lenient"])
    assert result.exit_code != 0
    (line,) = result.stderr.strip().splitlines()
    assert "a lenient import would lose 1 message beyond the 2 skipped lines" in line and str(path) in line


def test_the_import_command_prints_the_notes_of_a_clean_import(tmp_path: Path) -> None:
    lines = _session(4)
    lines.insert(3, json.dumps(_entry(90, "e0", "assistant", "abandoned answer")))
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(
        main, ["import", str(_write(tmp_path, lines)), "--store", str(store), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["skipped"] == 0 and report["messages"] == 4
    assert [p.split(".jsonl:", 1)[1].split(":")[0] for p in report["problems"]] == ["4"]
