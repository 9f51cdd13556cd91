"""``POST /v1/responses``: the OpenAI Responses API through ``compaction serve``.

The official ``openai`` SDK (``client.responses.create``, streamed and not) talks to the proxy
(uvicorn on loopback) in front of the loopback fake upstream (``tests/fake_openai_server.py``,
which answers ``/v1/responses`` and calls a tool when an ask ends with ``[tool]``).  A
conversation of :data:`TURNS` turns far exceeds the budget: every body the upstream receives
is within it (counted independently of the engine), answers every ``function_call`` with its
``function_call_output``, and carries the newest ask; the store holds the whole conversation
once.  A ``previous_response_id`` request passes through as sent, not compacted; an SSE
stream reaches the client byte for byte.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fake_openai_server import FakeOpenAI, newest_user_text, response_events, response_object
from serve_support import conversations, post, served_app, settings, stored_messages
from strategies import independent_tokens
from test_outputs_openai_responses import check_items

from compaction.serve import create_app
from compaction.serve.ledger import Ledger

TURNS = 160
BUDGET = 4000
KEY = "sk-test-RESPONSESKEYabcdefghijkl0123"
INSTRUCTIONS = "You are a coding agent. Fix what the user asks."
TOOLS = [{"type": "function", "name": "bash", "description": "Run a shell command.",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
OUTPUT = "FAILED tests/test_parser.py::test_case - AssertionError: expected list, got None\n" * 10


def _ask(turn: int) -> str:
    return f"ask {turn}: look at parser case {turn} and report" + (" [tool]" if turn % 2 == 0 else "")


def _streamed(turn: int) -> bool:
    return (turn // 2) % 2 == 1


def _items(response: Any) -> list[dict[str, Any]]:
    """A response's output items as the client sends them back (plain dicts, unset fields left out)."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def _call(client: openai.OpenAI, items: list[dict[str, Any]], stream: bool) -> list[dict[str, Any]]:
    kwargs: dict[str, Any] = {"model": "gpt-4o", "instructions": INSTRUCTIONS, "input": items, "tools": TOOLS,
                              "max_output_tokens": 400}
    if not stream:
        return _items(client.responses.create(**kwargs))
    completed = None
    text = []
    for event in client.responses.create(**kwargs, stream=True):
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        if event.type == "response.completed":
            completed = event.response
    assert completed is not None
    output = _items(completed)
    if output[0]["type"] == "message":
        assert "".join(text) == output[0]["content"][0]["text"]
    return output


def _app(tmp_path: Path, upstream: str) -> Any:
    """The proxy in-process (driven by ``post``) over a real upstream URL."""
    return create_app(settings(tmp_path, upstream=upstream, budget=BUDGET))


def _ledger(store_dir: Path) -> list[dict[str, Any]]:
    ledger = Ledger(store_dir / "requests.sqlite")
    try:
        return ledger.rows()
    finally:
        ledger.close()


def test_openai_sdk_responses_conversation_stays_within_budget(tmp_path: Path) -> None:
    store_dir = tmp_path / "stores"
    asks: list[str] = []
    with FakeOpenAI(lifetime=600) as fake, served_app(store_dir, fake.base_url, budget=BUDGET) as base:
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)
        items: list[dict[str, Any]] = []
        calls = 0
        for turn in range(TURNS):
            items.append({"role": "user", "content": _ask(turn)})
            asks.append(_ask(turn))
            output = _call(client, items, _streamed(turn))
            items += output
            for item in output:
                if item["type"] == "function_call":  # run the tool; the next turn carries its output
                    calls += 1
                    items.append({"type": "function_call_output", "call_id": item["call_id"],
                                  "output": f"{item['call_id']}\n{OUTPUT}"})
        received = [r for r in fake.requests if r.path == "/v1/responses"]
    assert calls == TURNS // 2
    assert len(received) == TURNS
    raw_tokens = independent_tokens({"instructions": INSTRUCTIONS, "input": items}, "gpt-4o")
    assert raw_tokens > 5 * BUDGET  # the history far exceeds the budget
    for turn, (record, ask) in enumerate(zip(received, asks, strict=True)):
        body = record.json()
        assert record.headers["authorization"] == f"Bearer {KEY}"
        assert independent_tokens(body, "gpt-4o") <= BUDGET, turn
        check_items(body)
        newest = newest_user_text(body)
        assert newest == ask or newest.endswith("\n\n" + ask), turn  # the newest ask ships, last
        assert (body.get("stream") is True) == _streamed(turn)
        assert body["tools"] == TOOLS and body["max_output_tokens"] == 400 and body["model"] == "gpt-4o"
        assert body["instructions"].startswith(INSTRUCTIONS)
    # the store holds the whole conversation once: instructions, every item, every answer
    (conversation,) = conversations(store_dir)
    stored = stored_messages(store_dir, conversation)
    assert stored[0] == ("system", [{"type": "text", "text": INSTRUCTIONS}])
    stored_text = json.dumps(stored)
    assert all(stored_text.count(json.dumps(ask)[1:-1]) >= 1 for ask in asks)
    rows = _ledger(store_dir)
    assert len(rows) == TURNS and {r["status"] for r in rows} == {200} and {r["api"] for r in rows} == {"responses"}
    assert all(r["answer_recorded"] == 1 for r in rows)
    assert all(r["tokens_shipped"] <= BUDGET for r in rows)
    assert all(r["input_tokens"] and r["output_tokens"] == 9 for r in rows)  # usage from the upstream, recorded
    assert sum(r["events"] for r in rows) >= 3  # compacted again and again
    assert all(r["appended"] <= 3 for r in rows[1:])  # only what is new is appended


def test_a_stream_passes_through_byte_for_byte(tmp_path: Path) -> None:
    with FakeOpenAI(lifetime=120) as fake, served_app(tmp_path / "stores", fake.base_url, budget=BUDGET) as base:
        body = {"model": "gpt-4o", "input": [{"role": "user", "content": "hello there"}], "stream": True}
        with httpx.Client(timeout=30) as http, http.stream("POST", f"{base}/responses", json=body,
                                                           headers={"Authorization": f"Bearer {KEY}"}) as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            got = b"".join(answer.iter_raw())
        (record,) = fake.requests
    assert got == response_events(response_object(record.json(), 1))
    (conversation,) = conversations(tmp_path / "stores")
    assert stored_messages(tmp_path / "stores", conversation) == [
        ("user", [{"type": "text", "text": "hello there"}]),
        ("assistant", [{"type": "text", "text": "ack: hello there"}]),
    ]


def test_previous_response_id_passes_through_not_compacted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAI(lifetime=120) as fake:
        app = _app(tmp_path, fake.base_url)
        sent = json.dumps({"model": "gpt-4o", "previous_response_id": "resp_upstream_42",
                           "input": [{"role": "user", "content": "and now?"}], "store": True}).encode()
        with caplog.at_level(logging.INFO, logger="compaction.serve"):
            answer = post(app, "/v1/responses", sent, {"Authorization": f"Bearer {KEY}",
                                                       "Content-Type": "application/json"})
        assert answer.status_code == 200
        assert answer.json()["output"][0]["content"][0]["text"] == "ack: and now?"
        (record,) = fake.requests
    assert record.path == "/v1/responses" and record.body == sent  # as sent, byte for byte
    assert conversations(tmp_path / "stores") == []  # nothing stored: the upstream holds the conversation
    assert any("previous_response_id given: forwarded as sent, not compacted" in r.getMessage() for r in caplog.records)
    assert any("not_compacted" in r.getMessage() for r in caplog.records)  # the request's own log line


@pytest.mark.parametrize(
    "body,needle",
    [
        ({"model": "gpt-4o"}, "'input': a non-empty string or list of items"),
        ({"model": "gpt-4o", "input": []}, "'input': a non-empty string or list of items"),
        ({"model": "gpt-4o", "input": "hi", "instructions": 3}, "instructions must be a string; found int"),
        ({"model": "gpt-4o", "input": [{"type": "function_call", "call_id": 5}]}, "malformed input items"),
    ],
)
def test_bad_responses_bodies_get_one_clear_error(tmp_path: Path, body: dict[str, Any], needle: str) -> None:
    app = _app(tmp_path, "http://127.0.0.1:9/v1")
    answer = post(app, "/v1/responses", body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert needle in error["message"] and error["message"].startswith("compaction serve: ")
    assert conversations(tmp_path / "stores") == []


def test_a_string_input_is_one_user_message(tmp_path: Path) -> None:
    with FakeOpenAI(lifetime=120) as fake:
        app = _app(tmp_path, fake.base_url)
        answer = post(app, "/v1/responses", {"model": "gpt-4o", "input": "just a string", "instructions": "Be brief."})
        assert answer.status_code == 200
        forwarded = fake.requests[0].json()
    assert forwarded["instructions"] == "Be brief."
    assert forwarded["input"] == [{"type": "message", "role": "user",
                                   "content": [{"type": "input_text", "text": "just a string"}]}]


def test_a_responses_stream_that_stalls_ends_with_an_error_event(tmp_path: Path) -> None:
    from serve_support import live_server
    from test_serve_live import SteppedUpstream

    from compaction.serve import Limits, ServeSettings

    first = response_events(response_object({"input": "hi"}, 1)).split(b"\n\n")[0] + b"\n\n"
    upstream = SteppedUpstream([first], stall=True)
    try:
        settings_ = ServeSettings(upstream.base_url, tmp_path / "stores", limits=Limits(stream_idle_seconds=0.5))
        with live_server(create_app(settings_)) as proxy:
            upstream.go.set()
            answer = httpx.post(f"{proxy}/responses", json={"model": "gpt-4o", "input": "hi", "stream": True},
                                timeout=10)
    finally:
        upstream.close()
    assert answer.status_code == 200  # the headers had gone out already
    assert answer.content.startswith(first)
    name, data = answer.content[len(first):].decode().strip().split("\n")
    assert name == "event: error"
    error = json.loads(data.removeprefix("data: "))
    assert error["type"] == "error" and error["code"] == "upstream_timeout"
    assert error["message"].startswith("compaction serve: ") and "paused longer than 0.5 s" in error["message"]
    (conversation,) = conversations(tmp_path / "stores")
    assert [role for role, _ in stored_messages(tmp_path / "stores", conversation)] == ["user"]  # no answer stored
