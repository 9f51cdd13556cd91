"""Craft Agents (Claude Agent SDK) sessions: header, stored messages, tools, screenshots, notices."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.formats import detect_format, load_transcript

SAMPLE = Path(__file__).resolve().parent / "data" / "formats" / "craft-agents__session.jsonl"


def test_the_sample_imports_with_tools_paired_and_the_screenshot_kept() -> None:
    parsed = load_transcript(SAMPLE)
    assert parsed.format == "craft-agents" and parsed.skipped == 0
    messages = parsed.messages
    assert [m.role for m in messages] == ["user"] + ["assistant", "user"] * 5 + ["assistant"]
    user = messages[0]
    assert user.content[0]["text"].startswith("The login button overlaps the footer")
    png = base64.b64decode(user.content[1]["source"]["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 64
    assert user.content[2]["text"].startswith("[attachment not included: 'design-spec.pdf' (application/pdf")
    uses = [b["id"] for m in messages for b in m.content if b["type"] == "tool_use"]
    results = [b for m in messages for b in m.content if b["type"] == "tool_result"]
    assert uses == ["toolu_01Grep", "toolu_01Read", "toolu_01Task", "toolu_02Grep", "toolu_01Edit"]
    assert [b["tool_use_id"] for b in results] == uses
    assert [b["is_error"] for b in results] == [False, False, False, False, True]
    assert messages[1].content[0]["text"] == "I'll look at the login page styles."
    assert messages[1].meta["model"] == "claude-sonnet-4-5-20250929"


def test_subagent_tools_and_notices_are_kept() -> None:
    messages = load_transcript(SAMPLE).messages
    sub = [m for m in messages if m.meta.get("subagent") == "toolu_01Task"]
    assert [m.role for m in sub] == ["assistant", "user"]
    notices = [n for m in messages for n in m.meta.get("craft_notices", [])]
    assert [n["type"] for n in notices] == ["status", "info"]
    assert notices[1]["content"] == "Permission mode changed to Allow All"


def test_detected_from_its_header() -> None:
    assert detect_format(SAMPLE) == "craft-agents"


def test_a_tool_record_without_its_id_is_named_by_line(tmp_path: Path) -> None:
    lines = SAMPLE.read_text().splitlines()
    record = json.loads(lines[3])
    del record["toolUseId"]
    lines[3] = json.dumps(record)
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    parsed = load_transcript(path, lenient=True)
    assert parsed.skipped == 1
    assert parsed.problems == [f"{path}:4: a tool message needs string 'toolUseId' and 'toolName'"]


@settings(max_examples=50, deadline=None)
@given(
    texts=st.lists(
        st.tuples(st.sampled_from(["user", "assistant"]), st.text(min_size=1, max_size=40)),
        min_size=1,
        max_size=8,
    )
)
def test_user_and_assistant_texts_round_trip(tmp_path_factory, texts: list[tuple[str, str]]) -> None:
    header = {"id": "s", "workspaceRootPath": "~/w", "createdAt": 1, "messageCount": len(texts)}
    records = [header] + [
        {"id": f"m{i}", "type": role, "content": text} for i, (role, text) in enumerate(texts)
    ]
    path = tmp_path_factory.mktemp("c") / "session.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    messages = load_transcript(path).messages
    joined: list[tuple[str, list[str]]] = []
    for role, text in texts:
        if joined and joined[-1][0] == role == "assistant":
            joined[-1][1].append(text)
        else:
            joined.append((role, [text]))
    assert [(m.role, [b["text"] for b in m.content]) for m in messages] == joined
