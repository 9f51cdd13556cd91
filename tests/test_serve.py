"""``compaction serve`` in-process: conversations, compaction, answers, credentials, rewrites.

The app runs through httpx's ``ASGITransport``; the upstream is an httpx ``MockTransport``
that records what the proxy sends (``tests/serve_support.py``).  Real sockets, streaming and
hostile upstreams are in ``test_serve_live.py``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_support import (
    MockUpstream,
    Seen,
    anthropic_answer,
    conversations,
    make_app,
    openai_answer,
    post,
    stored_messages,
)
from strategies import check_provider_grammar, check_tool_pairing, independent_tokens

from compaction.serve.ledger import Ledger

OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
KEY = "sk-proj-SECRETabcdefgh0123456789XYZ"
PARAGRAPH = (
    "The build failed in module parser.py because the tokenizer returned a None where a list "
    "was expected; we traced it to the fallback branch and rewrote the guard. "
)


def _ledger(tmp_path: Path) -> list[dict[str, Any]]:
    ledger = Ledger(tmp_path / "stores" / "requests.sqlite")
    try:
        return ledger.rows()
    finally:
        ledger.close()


def test_healthz(tmp_path: Path) -> None:
    import asyncio

    app = make_app(tmp_path, MockUpstream())

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client:
            return await client.get("/healthz")

    answer = asyncio.run(go())
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


def test_openai_turns_append_only_what_is_new(tmp_path: Path) -> None:
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "List the files."},
    ]
    headers = {"Authorization": f"Bearer {KEY}"}
    first = post(app, OPENAI, {"model": "gpt-4o", "messages": history, "temperature": 0.2}, headers)
    assert first.status_code == 200, first.text
    assert first.json() == openai_answer()  # the upstream's body, unchanged
    (conversation,) = conversations(tmp_path / "stores")
    assert conversation.startswith("openai-")
    # the answer landed in the store
    assert stored_messages(tmp_path / "stores", conversation)[-1] == ("assistant", [{"type": "text", "text": "done"}])

    history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "Now read README."}]
    second = post(app, OPENAI, {"model": "gpt-4o", "messages": history, "temperature": 0.2}, headers)
    assert second.status_code == 200
    stored = stored_messages(tmp_path / "stores", conversation)
    assert [role for role, _ in stored] == ["system", "user", "assistant", "user", "assistant"]
    assert conversations(tmp_path / "stores") == [conversation]
    rows = _ledger(tmp_path)
    assert [(r["appended"], r["stored"], r["answer_recorded"]) for r in rows] == [(2, 2, 1), (1, 4, 1)]
    assert rows[0]["input_tokens"] == 123 and rows[0]["output_tokens"] == 7 and rows[0]["cache_read_tokens"] == 64
    # what went upstream: the client's fields, its credentials, the compiled messages
    sent = upstream.seen[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["temperature"] == 0.2 and sent.body["model"] == "gpt-4o"
    assert sent.body["messages"] == history


def test_anthropic_system_tools_and_headers_pass(tmp_path: Path) -> None:
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream)
    tools = [{"name": "bash", "description": "run", "input_schema": {"type": "object"}, "strict": True}]
    body = {
        "model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "Be careful.",
        "messages": [{"role": "user", "content": "hello"}], "tools": tools, "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "u1"},
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "b1", "cookie": "c=1"}
    answer = post(app, ANTHROPIC, body, headers)
    assert answer.status_code == 200, answer.text
    sent = upstream.seen[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["anthropic-beta"] == "b1" and "cookie" not in sent.headers
    assert sent.body["tools"] == tools and sent.body["tool_choice"] == {"type": "auto"}
    assert sent.body["metadata"] == {"user_id": "u1"} and sent.body["max_tokens"] == 1024
    assert [b["text"] for b in sent.body["system"]] == ["Be careful."]
    assert sent.body["messages"][0]["content"][0]["text"] == "hello"
    check_provider_grammar(sent.body, "anthropic")
    (conversation,) = conversations(tmp_path / "stores")
    assert conversation.startswith("anthropic-")
    assert [r for r, _ in stored_messages(tmp_path / "stores", conversation)] == ["system", "user", "assistant"]


def _long_history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        history.append({"role": "user", "content": f"Ask {turn}: fix bug {turn}. " + PARAGRAPH * 3})
        call = {"id": f"call_{turn}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"cmd": f"pytest -k t{turn}"})}}
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": f"FAILED t{turn}\n" + PARAGRAPH * 8})
        history.append({"role": "assistant", "content": f"Fixed {turn}. " + PARAGRAPH})
    return history


def test_long_conversation_is_compacted_within_budget(tmp_path: Path) -> None:
    budget = 3000
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream, budget=budget)
    history = _long_history(30)
    headers = {"X-Compaction-Conversation": "agent-1", "Authorization": f"Bearer {KEY}"}
    sent_history: list[dict[str, Any]] = [history[0]]
    raw_chars = 0
    for turn in range(30):
        sent_history += history[1 + 4 * turn: 1 + 4 * turn + 4]
        sent_history.append({"role": "user", "content": f"Continue with {turn}"})
        answer = post(app, OPENAI, {"model": "gpt-4o", "messages": sent_history}, headers)
        assert answer.status_code == 200, answer.text
        sent_history.append({"role": "assistant", "content": "done"})
        raw_chars = len(json.dumps(sent_history))
    assert raw_chars > budget * 4 * 5  # the raw history is far over the budget
    rows = _ledger(tmp_path)
    assert len(upstream.seen) == 30 and len(rows) == 30
    for seen, row in zip(upstream.seen, rows, strict=True):
        assert row["tokens_shipped"] <= budget
        assert independent_tokens(seen.body, "gpt-4o") <= budget
        check_provider_grammar(seen.body, "openai")
        check_tool_pairing(seen.body, "openai")
    last = upstream.seen[-1].body["messages"]
    assert last[-1] == {"role": "user", "content": "Continue with 29"}  # the newest ask ships raw
    assert sum(r["events"] for r in rows) >= 1
    # the first request stores 6 messages; each later one the 4 of its turn and the ask (the
    # previous answer, echoed back, is held already)
    assert [r["appended"] for r in rows] == [6] + [5] * 29
    (conversation,) = conversations(tmp_path / "stores")
    assert conversation == "agent-1"
    assert len(stored_messages(tmp_path / "stores", "agent-1")) == 1 + 30 * 6


def test_rewritten_history_forks_and_leaves_the_old_store_whole(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream())
    base = [{"role": "system", "content": "S"}, {"role": "user", "content": "first ask"}]
    assert post(app, OPENAI, {"model": "gpt-4o", "messages": base}).status_code == 200
    grown = base + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "second"}]
    assert post(app, OPENAI, {"model": "gpt-4o", "messages": grown}).status_code == 200
    (conversation,) = conversations(tmp_path / "stores")
    before = stored_messages(tmp_path / "stores", conversation)
    # the client edits the assistant's answer and asks again
    edited = base + [{"role": "assistant", "content": "something else"}, {"role": "user", "content": "second"}]
    assert post(app, OPENAI, {"model": "gpt-4o", "messages": edited}).status_code == 200
    # a regenerate: the same request as before the last answer
    assert post(app, OPENAI, {"model": "gpt-4o", "messages": grown}).status_code == 200
    assert stored_messages(tmp_path / "stores", conversation) == before
    assert conversations(tmp_path / "stores") == [conversation, f"{conversation}.2", f"{conversation}.3"]
    fork = stored_messages(tmp_path / "stores", f"{conversation}.2")
    assert fork[2] == ("assistant", [{"type": "text", "text": "something else"}])
    # the fork goes on: its next turn extends it, nothing new is forked
    more = edited + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "third"}]
    assert post(app, OPENAI, {"model": "gpt-4o", "messages": more}).status_code == 200
    assert len(conversations(tmp_path / "stores")) == 3
    assert len(stored_messages(tmp_path / "stores", f"{conversation}.2")) == 7


def test_credentials_never_stored_or_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def leaky(seen: Seen) -> httpx.Response:
        return httpx.Response(200, json=openai_answer(f"your key is {KEY}, keep it safe"))

    upstream = MockUpstream(leaky)
    app = make_app(tmp_path, upstream)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"my key: {KEY} -- use it"}]}
    with caplog.at_level(logging.DEBUG):
        answer = post(app, OPENAI, body, {"Authorization": f"Bearer {KEY}", "X-Compaction-Conversation": "c1"})
    assert answer.status_code == 200
    assert KEY in answer.text  # the client gets the upstream's answer unchanged
    assert upstream.seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in json.dumps(upstream.seen[0].body)  # redacted from the history it holds
    stored = stored_messages(tmp_path / "stores", "c1")
    assert "[redacted]" in stored[0][1][0]["text"] and "[redacted]" in stored[1][1][0]["text"]
    for path in (tmp_path / "stores").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
            assert KEY[:12].encode() not in path.read_bytes(), path
    assert "conversation=c1" in caplog.text
    assert KEY not in caplog.text and KEY[:12] not in caplog.text


def test_upstream_error_passes_through(tmp_path: Path) -> None:
    error = {"error": {"message": "Rate limit reached", "type": "rate_limit", "code": "rate_limit_exceeded"}}

    async def limited(seen: Seen) -> httpx.Response:
        return httpx.Response(429, json=error, headers={"retry-after": "7", "x-request-id": "r1"})

    app = make_app(tmp_path, MockUpstream(limited))
    answer = post(app, OPENAI, {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 429 and answer.json() == error
    assert answer.headers["retry-after"] == "7" and answer.headers["x-request-id"] == "r1"
    (conversation,) = conversations(tmp_path / "stores")
    assert [r for r, _ in stored_messages(tmp_path / "stores", conversation)] == ["user"]  # no answer stored


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"model": "gpt-4o", "messages": []}).encode(), 400, "non-empty 'messages'"),
        (json.dumps({"model": "gpt-4o", "messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "wizard"),
        (json.dumps({"model": "gpt-4o", "max_tokens": -5, "messages": [{"role": "user", "content": "x"}]}).encode(),
         400, "max_tokens"),
        (json.dumps({"model": "gpt-4", "max_tokens": 8100, "messages": [{"role": "user", "content": "x"}]}).encode(),
         400, "--budget"),
    ],
)
def test_bad_requests_get_one_clear_error(tmp_path: Path, body: bytes, status: int, needle: str) -> None:
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream)
    answer = post(app, OPENAI, body, {"content-type": "application/json"})
    assert answer.status_code == status
    message = answer.json()["error"]["message"]
    assert needle in message and message.startswith("compaction serve: ") and "\n" not in message
    assert upstream.seen == []


def test_request_body_cap_and_conversation_header(tmp_path: Path) -> None:
    from compaction.serve import Limits

    app = make_app(tmp_path, MockUpstream(), limits=Limits(max_request_bytes=2000))
    body = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "x" * 5000}]}
    answer = post(app, ANTHROPIC, body, {"x-api-key": KEY})
    assert answer.status_code == 413
    assert answer.json()["type"] == "error" and answer.json()["error"]["type"] == "request_too_large"
    assert answer.json()["error"]["message"] == (
        "compaction serve: the request body exceeds 2,000 bytes (the proxy's cap; raise it with "
        "compaction serve --max-request-mb)")
    small = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    bad = post(app, ANTHROPIC, small, {"X-Compaction-Conversation": "../../etc/passwd"})
    assert bad.status_code == 400 and "X-Compaction-Conversation" in bad.json()["error"]["message"]
    assert conversations(tmp_path / "stores") == []


def test_over_budget_answers_413(tmp_path: Path) -> None:
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream, budget=300)
    body = {"model": "gpt-4o", "messages": [{"role": "system", "content": PARAGRAPH * 30},
                                            {"role": "user", "content": "hi"}]}
    answer = post(app, OPENAI, body)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "context_too_large"
    assert upstream.seen == []


def test_anthropic_tool_answer_is_stored_and_echo_matches(tmp_path: Path) -> None:
    blocks = [
        {"type": "thinking", "thinking": "let me look", "signature": "sig123"},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "a.py"}},
    ]

    async def answer(seen: Seen) -> httpx.Response:
        return httpx.Response(200, json=anthropic_answer(blocks))

    upstream = MockUpstream(answer)
    app = make_app(tmp_path, upstream)
    history: list[dict[str, Any]] = [{"role": "user", "content": "read a.py"}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 512, "messages": history}
    assert post(app, ANTHROPIC, body).status_code == 200
    # the client echoes the answer without its thinking, as some clients do, and the result
    history += [{"role": "assistant", "content": blocks[1:]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "x = 1"}]}]
    assert post(app, ANTHROPIC, {**body, "messages": history}).status_code == 200
    (conversation,) = conversations(tmp_path / "stores")  # no fork
    stored = stored_messages(tmp_path / "stores", conversation)
    assert stored[1] == ("assistant", blocks)
    assert stored[2][1][0]["type"] == "tool_result"
    assert _ledger(tmp_path)[0]["cache_write_tokens"] == 20
    check_provider_grammar(upstream.seen[-1].body, "anthropic")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(
        st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=1, max_value=12)),
        min_size=1, max_size=12,
    ),
    api=st.sampled_from(["openai", "anthropic"]),
)
def test_every_forwarded_request_is_one_the_provider_accepts(
    tmp_path_factory: pytest.TempPathFactory, turns: list[tuple[int, int]], api: str
) -> None:
    """Random agent turns (0..3 parallel tool calls, outputs of various sizes), driven turn by turn."""
    tmp_path = tmp_path_factory.mktemp("grammar")
    budget = 1500
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream, budget=budget)
    history: list[dict[str, Any]] = []
    if api == "anthropic":
        history.append({"role": "user", "content": "start"})
    else:
        history += [{"role": "system", "content": "agent"}, {"role": "user", "content": "start"}]
    for index, (calls, size) in enumerate(turns):
        ids = [f"call_{index}_{c}" for c in range(calls)]
        if api == "openai":
            if ids:
                history.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}} for i in ids]})
                history += [{"role": "tool", "tool_call_id": i, "content": PARAGRAPH * size} for i in ids]
            else:
                history += [{"role": "assistant", "content": "ok " * size}, {"role": "user", "content": f"go {index}"}]
        else:
            if ids:
                history.append({"role": "assistant", "content": [
                    {"type": "tool_use", "id": i, "name": "bash", "input": {}} for i in ids]})
                history.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": PARAGRAPH * size} for i in ids]})
            else:
                history += [{"role": "assistant", "content": "ok " * size}, {"role": "user", "content": f"go {index}"}]
        path = OPENAI if api == "openai" else ANTHROPIC
        body = {"model": "gpt-4o" if api == "openai" else "claude-sonnet-4-5", "max_tokens": 100, "messages": history}
        answer = post(app, path, body, {"X-Compaction-Conversation": "g"})
        assert answer.status_code == 200, answer.text
        history.append({"role": "assistant", "content": "done" if api == "openai" else [{"type": "text", "text": "done"}]})
        history.append({"role": "user", "content": f"after {index}"})
    assert conversations(tmp_path / "stores") == ["g"]
    for seen in upstream.seen:
        check_provider_grammar(seen.body, api)
        check_tool_pairing(seen.body, api)
    for row in _ledger(tmp_path):
        assert row["tokens_shipped"] <= budget


def test_text_only_recipe_never_ships_an_image(tmp_path: Path) -> None:
    from fake_openai_server import image_inputs
    from strategies import png_b64

    from compaction import Recipe

    upstream = MockUpstream()
    app = make_app(tmp_path, upstream, recipe=Recipe(vision=False))
    shot = f"data:image/png;base64,{png_b64(64, 48)}"
    body = {"model": "gpt-4o", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is on screen?"},
                                     {"type": "image_url", "image_url": {"url": shot}}]}]}
    answer = post(app, OPENAI, body)
    assert answer.status_code == 200, answer.text
    sent = upstream.seen[0].body
    assert image_inputs(json.dumps(sent).encode()) == 0 and "data:image" not in json.dumps(sent)
    assert "image not shown" in json.dumps(sent)
    (conversation,) = conversations(tmp_path / "stores")
    assert stored_messages(tmp_path / "stores", conversation)[0][1][1]["type"] == "image"  # kept in the store
