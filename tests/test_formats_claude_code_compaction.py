"""Claude Code compact_boundary: the summary Claude Code wrote is a prior compaction, not a user turn."""

from __future__ import annotations

import json
from pathlib import Path

from compaction.formats import load_transcript

SUMMARY = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\nAnalysis: the user asked to fix the date parser ..."
)


def _event(kind: str, uuid: str, parent: str | None, body, **extra) -> str:
    event = {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/w",
        "sessionId": "s1",
        "version": "1.0.84",
        "type": kind,
        "uuid": uuid,
        "timestamp": f"2025-08-20T10:00:{len(uuid):02d}Z",
        **extra,
    }
    if kind in ("user", "assistant"):
        event["message"] = {"role": kind, "content": body}
    return json.dumps(event)


def _session(tmp: Path, with_flag: bool = True, tail: bool = True) -> Path:
    lines = [
        _event("user", "u1", None, "Fix the date parser in src/dates.py"),
        _event("assistant", "a1", "u1", [{"type": "text", "text": "Looking at src/dates.py now."}]),
        _event(
            "system",
            "b1",
            None,
            None,
            subtype="compact_boundary",
            content="Conversation compacted",
            logicalParentUuid="a1",
            level="info",
            compactMetadata={"trigger": "manual", "preTokens": 51234},
        ),
        _event(
            "user",
            "u2",
            "b1",
            SUMMARY,
            isVisibleInTranscriptOnly=True,
            **({"isCompactSummary": True} if with_flag else {}),
        ),
    ]
    if tail:
        lines.append(_event("user", "u3", "u2", "Now run the tests."))
        lines.append(_event("assistant", "a3", "u3", [{"type": "text", "text": "All 12 tests pass."}]))
    path = tmp / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_compact_summary_is_kept_as_a_prior_compaction_not_a_user_turn(tmp_path: Path) -> None:
    parsed = load_transcript(_session(tmp_path))
    assert parsed.format == "claude-code"
    texts = [(m.role, m.content[0]["text"]) for m in parsed.messages]
    assert texts == [
        ("user", "Fix the date parser in src/dates.py"),  # the raw messages it replaced stay
        ("assistant", "Looking at src/dates.py now."),
        ("user", "Now run the tests."),
        ("assistant", "All 12 tests pass."),
    ]
    compaction = parsed.messages[2].meta["claude_code_compaction"]
    assert compaction["summary"] == SUMMARY
    assert compaction["trigger"] == "manual" and compaction["preTokens"] == 51234
    assert compaction["boundary_uuid"] == "b1" and compaction["summary_uuid"] == "u2"
    assert not any(SUMMARY in b.get("text", "") for m in parsed.messages for b in m.content)


def test_a_summary_without_the_flag_after_a_boundary_is_still_recognised(tmp_path: Path) -> None:
    parsed = load_transcript(_session(tmp_path, with_flag=False))
    assert len(parsed.messages) == 4
    assert parsed.messages[2].meta["claude_code_compaction"]["summary"] == SUMMARY


def test_a_summary_at_the_end_goes_to_the_last_message(tmp_path: Path) -> None:
    parsed = load_transcript(_session(tmp_path, tail=False))
    assert [m.role for m in parsed.messages] == ["user", "assistant"]
    assert parsed.messages[-1].meta["claude_code_compaction"]["summary"] == SUMMARY


def test_a_session_resumed_from_a_compaction_keeps_the_summary_as_its_first_message(tmp_path: Path) -> None:
    """A file that opens with the summary has nothing else of what came before: the summary stays a message."""
    from compaction.asks import ask_text
    from compaction.eval_baselines import agent_summary

    lines = [
        _event("system", "b1", None, None, subtype="compact_boundary", compactMetadata={"trigger": "auto"}),
        _event("user", "u2", "b1", SUMMARY, isCompactSummary=True),
        _event("user", "u3", "u2", "Now run the tests."),
        _event("assistant", "a3", "u3", [{"type": "text", "text": "All 12 tests pass."}]),
    ]
    path = tmp_path / "resumed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    messages = load_transcript(path).messages
    assert [m.role for m in messages] == ["user", "user", "assistant"]
    first = messages[0]
    assert first.meta["kind"] == "compaction_summary"
    assert "fix the date parser" in first.content[0]["text"]
    assert first.meta["claude_code_compaction"]["trigger"] == "auto"
    assert ask_text(first) is None and ask_text(messages[1]) == "Now run the tests."
    found = agent_summary(messages)
    assert found is not None and found[1:] == (1, "Claude Code compact summary")
