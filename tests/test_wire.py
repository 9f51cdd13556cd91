"""The wire gate's tool pairing: each call answered in the very next turn, once."""

from __future__ import annotations

import json

from compaction.blocks import Message
from compaction.policy import ImageSettings
from compaction.wire import OutboundRequest, gate


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def _use(tool_id: str) -> dict:
    return {"type": "tool_use", "id": tool_id, "name": "bash", "input": {"command": "ls"}}


def _result(tool_id: str, text: str = "ok") -> dict:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def _gate(messages: list[Message], fmt: str):
    request = OutboundRequest("compile", None, tuple((m.role, m.content) for m in messages))
    return gate(request, ImageSettings(), format=fmt)


def _openai_pairs_ok(body: dict) -> bool:
    """Every tool_call is answered by tool messages directly after it, and no tool message is stray."""
    messages = body["messages"]
    for index, message in enumerate(messages):
        if message["role"] == "assistant" and message.get("tool_calls"):
            want = {c["id"] for c in message["tool_calls"]}
            got = set()
            for follower in messages[index + 1 :]:
                if follower["role"] != "tool":
                    break
                got.add(follower["tool_call_id"])
            if want != got:
                return False
        if message["role"] == "tool":
            before = messages[index - 1]
            if before["role"] not in ("assistant", "tool"):
                return False
    return True


def test_a_result_arriving_after_another_user_turn_becomes_loud_text() -> None:
    messages = [
        Message("user", (_text("list files"),)),
        Message("assistant", (_use("a"),)),
        Message("user", (_text("also, hurry"),)),
        Message("assistant", (_text("working on it"),)),
        Message("user", (_result("a", "file1\nfile2"),)),
    ]
    for fmt in ("openai", "anthropic"):
        gated = _gate(messages, fmt)
        body = json.loads(gated.payload)
        kinds = sorted(r.kind for r in gated.replacements)
        assert kinds == ["orphan_tool_result", "orphan_tool_use"]
        text = gated.payload.decode()
        assert "no result was recorded for it" in text and "file1" in text  # nothing dropped
        if fmt == "openai":
            assert not any(m.get("tool_calls") for m in body["messages"])
            assert not any(m["role"] == "tool" for m in body["messages"])


def test_a_second_result_for_one_call_becomes_text() -> None:
    messages = [
        Message("assistant", (_use("a"),)),
        Message("user", (_result("a", "first"), _result("a", "second"))),
    ]
    gated = _gate(messages, "openai")
    body = json.loads(gated.payload)
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    assert [t["content"] for t in tools] == ["first"]
    assert [r.kind for r in gated.replacements] == ["orphan_tool_result"]
    assert "second" in gated.payload.decode()
    assert _openai_pairs_ok(body)


def test_consecutive_assistant_messages_form_one_turn_in_openai() -> None:
    messages = [
        Message("user", (_text("go"),)),
        Message("assistant", (_use("a"), _use("b"))),
        Message("assistant", (_text("both started"),)),
        Message("user", (_result("a"), _result("b"), _text("and?"))),
    ]
    gated = _gate(messages, "openai")
    body = json.loads(gated.payload)
    assert gated.replacements == ()
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "tool", "user"]
    assert body["messages"][1]["content"] == "both started"
    assert _openai_pairs_ok(body)
    anthropic = json.loads(_gate(messages, "anthropic").payload)
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]
    assert [b["type"] for b in anthropic["messages"][2]["content"]] == ["tool_result", "tool_result", "text"]
