"""``compaction serve`` driven by the official ``openai`` and ``anthropic`` SDKs, on real sockets.

Each SDK holds one agent conversation of 300 turns through the proxy (uvicorn on loopback)
to a loopback upstream that records every body it receives (``RecordingUpstream`` in
``serve_support.py``).  Every other turn the upstream calls a tool and the next turn carries
its output; turns alternate between streamed and whole answers in pairs, so tool calls and
text arrive both ways.  The history far exceeds the small budget; every body the upstream
receives must be within it (counted independently of the engine), pair every tool call with
its result, be one the provider accepts, and carry the user's newest message.  The store
must hold the whole conversation, once, in one store.

The Anthropic run is an expected failure (strict): the engine summarizes the newest user
message when it carries a ``tool_result`` ahead of the ask (turn 115), so the ask never ships.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
from serve_support import RecordingUpstream, conversations, served_app, stored_messages
from strategies import check_provider_grammar, check_tool_pairing, independent_tokens

from compaction.serve.ledger import Ledger

TURNS = 300
BUDGET = 3000
KEY = "sk-test-SDKKEYabcdefghijklmnop0123"
OUTPUT = "FAILED tests/test_parser.py::test_case - AssertionError: expected list, got None\n"
TOOLS_OPENAI = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
TOOLS_ANTHROPIC = [{"name": "bash", "description": "Run a shell command.",
                    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]


def _ask(turn: int) -> str:
    return f"ask {turn}: look at parser case {turn} and report" + (" [tool]" if turn % 2 == 0 else "")


def _streamed(turn: int) -> bool:
    return (turn // 2) % 2 == 1


def _check_bodies(received: list[tuple[str, dict[str, Any]]], api: str, asks: list[str]) -> None:
    assert len(received) == TURNS
    for turn, ((_path, body), ask) in enumerate(zip(received, asks, strict=True)):
        assert independent_tokens(body, "gpt-4o") <= BUDGET, turn
        check_provider_grammar(body, api)
        check_tool_pairing(body, api)
        newest = RecordingUpstream.newest_user_text(api, body)
        assert newest == ask or newest.endswith("\n\n" + ask), turn  # the newest ask ships raw, last
        assert (body.get("stream") is True) == _streamed(turn)


def _ledger(store_dir: Path) -> list[dict[str, Any]]:
    ledger = Ledger(store_dir / "requests.sqlite")
    try:
        return ledger.rows()
    finally:
        ledger.close()


def _check_store(store_dir: Path, expected: int) -> None:
    (conversation,) = conversations(store_dir)  # one conversation, never forked
    stored = stored_messages(store_dir, conversation)
    assert len(stored) == expected
    rows = _ledger(store_dir)
    assert len(rows) == TURNS and {r["status"] for r in rows} == {200}
    assert all(r["answer_recorded"] == 1 for r in rows)
    assert all(r["tokens_shipped"] <= BUDGET for r in rows)
    assert sum(r["events"] for r in rows) >= 3  # compacted again and again
    assert {r["stream"] for r in rows} == {0, 1}


def test_openai_sdk_holds_a_300_turn_conversation_within_budget(tmp_path: Path) -> None:
    store_dir = tmp_path / "stores"
    with RecordingUpstream() as upstream, served_app(store_dir, upstream.base_url, budget=BUDGET) as proxy:
        client = openai.OpenAI(base_url=proxy, api_key=KEY, max_retries=0, timeout=30)
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
        asks: list[str] = []
        pending: str | None = None
        raw_chars = 0
        for turn in range(TURNS):
            if pending is not None:
                history.append({"role": "tool", "tool_call_id": pending, "content": OUTPUT})
            asks.append(_ask(turn))
            history.append({"role": "user", "content": asks[-1]})
            text, calls = "", []
            if _streamed(turn):
                stream = client.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS_OPENAI,
                                                        max_tokens=64, stream=True,
                                                        stream_options={"include_usage": True})
                for chunk in stream:
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        for call in choice.delta.tool_calls or []:
                            if call.id:
                                calls.append({"id": call.id, "type": "function",
                                              "function": {"name": call.function.name, "arguments": ""}})
                            calls[-1]["function"]["arguments"] += call.function.arguments or ""
            else:
                answer = client.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS_OPENAI,
                                                        max_tokens=64)
                message = answer.choices[0].message
                text = message.content or ""
                calls = [c.model_dump(exclude_none=True) for c in message.tool_calls or []]
            assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                assistant["tool_calls"] = calls
            history.append(assistant)
            pending = calls[0]["id"] if calls else None
            assert (pending is not None) == (turn % 2 == 0)
            assert pending is not None or text == f"ack: {asks[-1][-60:]}"
            raw_chars = len(json.dumps(history))
    assert raw_chars > BUDGET * 4 * 5  # the history is far over the budget (5 times at 4 characters a token)
    _check_bodies(upstream.received, "openai", asks)
    _check_store(store_dir, len(history))


def _anthropic_block(block: Any) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    assert block.type == "tool_use"
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def test_anthropic_sdk_holds_a_300_turn_conversation_within_budget(tmp_path: Path) -> None:
    store_dir = tmp_path / "stores"
    with RecordingUpstream() as upstream, served_app(store_dir, upstream.base_url, budget=BUDGET) as proxy:
        client = anthropic.Anthropic(base_url=proxy.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=30)
        history: list[dict[str, Any]] = []
        asks: list[str] = []
        pending: str | None = None
        for turn in range(TURNS):
            asks.append(_ask(turn))
            content: list[dict[str, Any]] = []
            if pending is not None:
                content.append({"type": "tool_result", "tool_use_id": pending, "content": OUTPUT})
            content.append({"type": "text", "text": asks[-1]})
            history.append({"role": "user", "content": content})
            options: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 64, "system": "You are a coding agent.",
                                       "messages": history, "tools": TOOLS_ANTHROPIC}
            if _streamed(turn):
                with client.messages.stream(**options) as stream:
                    for _text in stream.text_stream:
                        pass
                    final = stream.get_final_message()
            else:
                final = client.messages.create(**options)
            blocks = [_anthropic_block(b) for b in final.content]
            history.append({"role": "assistant", "content": blocks})
            calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
            pending = calls[0] if calls else None
            assert (pending is not None) == (turn % 2 == 0)
            assert pending is not None or blocks == [{"type": "text", "text": f"ack: {asks[-1][-60:]}"}]
    assert len(json.dumps(history)) > BUDGET * 4 * 5
    _check_bodies(upstream.received, "anthropic", asks)
    _check_store(store_dir, 1 + len(history))  # the system prompt is the store's first message
