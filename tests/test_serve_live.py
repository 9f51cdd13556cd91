"""``compaction serve`` on real sockets: uvicorn on loopback, loopback fake upstreams.

Streaming passes through chunk by chunk (the client holds the first event before the
upstream sends the second) and the assembled answer lands in the store; hostile upstreams
(a hang, a huge body, garbage, a stream that stalls, nobody listening) give the client a
clear 502 / 504; the command itself serves and logs one line per request without the key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_anthropic_server import FakeAnthropic, fake_anthropic  # noqa: F401  (fixture)
from fake_openai_server import FakeOpenAI, Raw, fake_openai  # noqa: F401  (fixture)
from serve_support import conversations, free_port, live_server, stored_messages, wait_until_serving

from compaction.serve import Limits, ServeSettings, create_app
from compaction.serve.ledger import Ledger

KEY = "sk-ant-SECRETqrstuvwx9876543210ABC"


def _app(tmp_path: Path, upstream: str, **limits: Any) -> Any:
    return create_app(ServeSettings(upstream, tmp_path / "stores", limits=Limits(**limits)))


def _rows(tmp_path: Path) -> list[dict[str, Any]]:
    ledger = Ledger(tmp_path / "stores" / "requests.sqlite")
    try:
        return ledger.rows()
    finally:
        ledger.close()


def _sse(events: list[tuple[str | None, Any]]) -> list[bytes]:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append(f"{head}data: {payload}\n\n".encode())
    return out


OPENAI_EVENTS = _sse([
    (None, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
    (None, {"choices": [{"index": 0, "delta": {"content": "lo"}}]}),
    (None, {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":"}}]}}]}),
    (None, {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": " \"ls\"}"}}]}}]}),
    (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    (None, {"choices": [], "usage": {"prompt_tokens": 55, "completion_tokens": 12}}),
    (None, "[DONE]"),
])

ANTHROPIC_EVENTS = _sse([
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 77, "output_tokens": 1, "cache_read_input_tokens": 40}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "thinking_delta", "thinking": "look first"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "signature_delta", "signature": "SIG"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1,
                             "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1,
                             "delta": {"type": "text_delta", "text": "Running "}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1,
                             "delta": {"type": "text_delta", "text": "it."}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("content_block_start", {"type": "content_block_start", "index": 2,
                             "content_block": {"type": "tool_use", "id": "toolu_7", "name": "bash", "input": {}}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 2,
                             "delta": {"type": "input_json_delta", "partial_json": "{\"cmd\": "}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 2,
                             "delta": {"type": "input_json_delta", "partial_json": "\"make\"}"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 2}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
    ("message_stop", {"type": "message_stop"}),
])


class SteppedUpstream:
    """A loopback SSE upstream that sends one event, then waits for :attr:`go` before the rest.

    With ``stall`` it never sends the rest (a stream that hangs mid-way).
    """

    def __init__(self, events: list[bytes], *, stall: bool = False) -> None:
        self.events = events
        self.stall = stall
        self.go = threading.Event()
        self.bodies: list[Any] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.close_connection = True
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                    self.wfile.write(outer.events[0])
                    self.wfile.flush()
                    if not outer.go.wait(10) or outer.stall:
                        time.sleep(3 if outer.stall else 0)
                        return
                    for event in outer.events[1:]:
                        self.wfile.write(event)
                        self.wfile.flush()
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.go.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stepped() -> Iterator[SteppedUpstream]:
    upstream = SteppedUpstream(OPENAI_EVENTS)
    try:
        yield upstream
    finally:
        upstream.close()


def test_openai_stream_passes_chunk_by_chunk_and_lands_in_the_store(tmp_path: Path, stepped: SteppedUpstream) -> None:
    body = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "list files"}]}
    received = bytearray()
    with live_server(_app(tmp_path, stepped.base_url)) as proxy:
        with httpx.Client(timeout=10) as client:
            with client.stream("POST", f"{proxy}/chat/completions", json=body,
                               headers={"Authorization": f"Bearer {KEY}"}) as answer:
                assert answer.status_code == 200
                assert answer.headers["content-type"].startswith("text/event-stream")
                chunks = answer.iter_raw()
                first = next(chunks)  # arrives while the upstream still holds the rest back
                assert first == OPENAI_EVENTS[0]
                stepped.go.set()
                received += first
                for chunk in chunks:
                    received += chunk
    assert bytes(received) == b"".join(OPENAI_EVENTS)  # unchanged
    assert stepped.bodies[0]["stream"] is True and stepped.bodies[0]["stream_options"] == {"include_usage": True}
    (conversation,) = conversations(tmp_path / "stores")
    stored = stored_messages(tmp_path / "stores", conversation)
    assert stored[-1] == ("assistant", [{"type": "text", "text": "Hello"},
                                        {"type": "tool_use", "id": "call_9", "name": "bash", "input": {"cmd": "ls"}}])
    (row,) = _rows(tmp_path)
    assert (row["stream"], row["status"], row["input_tokens"], row["output_tokens"], row["answer_recorded"]) == (
        1, 200, 55, 12, 1)


def test_anthropic_stream_is_assembled_with_thinking_and_tool_input(
    tmp_path: Path, fake_anthropic: FakeAnthropic  # noqa: F811
) -> None:
    stream = b"".join(ANTHROPIC_EVENTS)
    fake_anthropic.set_mode("scripted", answer=lambda request, headers: Raw(
        200, {"Content-Type": "text/event-stream"}, stream, sized=False))
    body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": True, "system": "sys",
            "messages": [{"role": "user", "content": "build it"}]}
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    with live_server(_app(tmp_path, fake_anthropic.base_url + "/v1")) as proxy:
        answer = httpx.post(f"{proxy}/messages", json=body, headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.content == stream
    assert fake_anthropic.requests[0].headers["x-api-key"] == KEY
    (conversation,) = conversations(tmp_path / "stores")
    stored = stored_messages(tmp_path / "stores", conversation)
    assert stored[-1] == ("assistant", [
        {"type": "thinking", "thinking": "look first", "signature": "SIG"},
        {"type": "text", "text": "Running it."},
        {"type": "tool_use", "id": "toolu_7", "name": "bash", "input": {"cmd": "make"}},
    ])
    (row,) = _rows(tmp_path)
    assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"]) == (77, 30, 40)


def test_a_stream_that_stalls_ends_with_an_error_event_and_stores_nothing(tmp_path: Path) -> None:
    upstream = SteppedUpstream(OPENAI_EVENTS, stall=True)
    try:
        body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with live_server(_app(tmp_path, upstream.base_url, stream_idle_seconds=0.5)) as proxy:
            upstream.go.set()
            started = time.monotonic()
            answer = httpx.post(f"{proxy}/chat/completions", json=body, timeout=10)
            elapsed = time.monotonic() - started
    finally:
        upstream.close()
    assert answer.status_code == 200  # the headers had gone out already
    assert answer.content.startswith(OPENAI_EVENTS[0])
    tail = answer.content[len(OPENAI_EVENTS[0]):]
    error = json.loads(tail.decode().removeprefix("data: "))
    assert error["error"]["code"] == "upstream_timeout" and "paused longer than 0.5 s" in error["error"]["message"]
    assert elapsed < 3
    (conversation,) = conversations(tmp_path / "stores")
    assert [r for r, _ in stored_messages(tmp_path / "stores", conversation)] == ["user"]
    assert _rows(tmp_path)[0]["error"] == "upstream_timeout"


@pytest.mark.parametrize(
    ("mode", "options", "limits", "status", "code"),
    [
        ("timeout", {"delay": 5.0, "times": 1}, {"timeout_seconds": 0.5}, 504, "upstream_timeout"),
        ("trickle", {"delay": 0.2}, {"timeout_seconds": 1.0}, 504, "upstream_timeout"),
        ("trickle_head", {"delay": 0.05, "size": 4000}, {"timeout_seconds": 0.5}, 504, "upstream_timeout"),
        ("huge", {"size": 3_000_000}, {"max_response_bytes": 1_000_000}, 502, "upstream_too_large"),
        ("huge_unsized", {"size": 3_000_000}, {"max_response_bytes": 1_000_000}, 502, "upstream_too_large"),
        ("huge_chunked", {"size": 3_000_000}, {"max_response_bytes": 1_000_000}, 502, "upstream_too_large"),
    ],
)
def test_hostile_upstream_gives_a_clear_error(
    tmp_path: Path, fake_openai: FakeOpenAI, mode: str, options: dict[str, Any],  # noqa: F811
    limits: dict[str, Any], status: int, code: str,
) -> None:
    fake_openai.set_mode(mode, **options)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    with live_server(_app(tmp_path, fake_openai.base_url, **limits)) as proxy:
        started = time.monotonic()
        answer = httpx.post(f"{proxy}/chat/completions", json=body, timeout=20)
        elapsed = time.monotonic() - started
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and error["message"].startswith("compaction serve: the upstream")
    assert elapsed < 4
    (conversation,) = conversations(tmp_path / "stores")
    assert [r for r, _ in stored_messages(tmp_path / "stores", conversation)] == ["user"]


def test_garbage_and_silence(tmp_path: Path, fake_openai: FakeOpenAI) -> None:  # noqa: F811
    fake_openai.set_mode("scripted", answer=lambda request, headers: Raw(
        200, {"Content-Type": "application/json"}, b"<html>\x00\xff not json"))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    with live_server(_app(tmp_path, fake_openai.base_url)) as proxy:
        garbage = httpx.post(f"{proxy}/chat/completions", json=body, timeout=10)
    assert garbage.status_code == 502
    assert garbage.json()["error"]["message"] == (
        "compaction serve: the upstream answered 2xx with a body that is not JSON")
    nobody = f"http://127.0.0.1:{free_port()}/v1"
    with live_server(_app(tmp_path / "b", nobody)) as proxy:
        refused = httpx.post(f"{proxy}/messages", json={**body, "max_tokens": 5}, timeout=10)
    assert refused.status_code == 502
    assert refused.json()["type"] == "error" and "cannot reach the upstream" in refused.json()["error"]["message"]


def test_upstream_errors_pass_through_over_sockets(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:  # noqa: F811
    fake_anthropic.set_mode("529", times=5, retry_after="3")
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    with live_server(_app(tmp_path, fake_anthropic.base_url + "/v1")) as proxy:
        answer = httpx.post(f"{proxy}/messages", json=body, timeout=10,
                            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert answer.status_code == 529
    assert answer.json()["error"]["type"] == "overloaded_error" and answer.headers["retry-after"] == "3"
    assert answer.headers["request-id"] == "req_fake"


def test_the_command_serves_and_logs_without_the_key(tmp_path: Path, fake_openai: FakeOpenAI) -> None:  # noqa: F811
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "compaction", "serve", "--upstream", fake_openai.base_url,
               "--port", str(port), "--store-dir", str(tmp_path / "stores"), "--budget", "4000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        wait_until_serving(process, port)
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"the key {KEY} leaked"}]}
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=10,
                            headers={"Authorization": f"Bearer {KEY}", "X-Compaction-Conversation": "cli-1"})
        assert answer.status_code == 200, answer.text
        assert fake_openai.requests[0].headers["authorization"] == f"Bearer {KEY}"
    finally:
        process.terminate()
        _out, err = process.communicate(timeout=15)
    log = err.decode()
    assert "conversation=cli-1" in log and "status=200" in log and "budget=4000" in log
    assert KEY not in log and KEY[:12] not in log
    assert f"127.0.0.1:{port}" in log
    assert stored_messages(tmp_path / "stores", "cli-1")[-1][0] == "assistant"


def _texts(messages: list[Any]) -> list[str]:
    out = []
    for message in messages:
        content = message["content"] if isinstance(message, dict) else message[1]
        if isinstance(content, str):
            out.append(content)
        else:
            out.append("".join(b.get("text", "") for b in content if isinstance(b, dict)))
    return out


def test_concurrent_conversations_do_not_cross(tmp_path: Path) -> None:
    """24 clients in threads, 3 turns each: 16 named by their start, 8 sharing one start."""
    from concurrent.futures import ThreadPoolExecutor

    from serve_support import MockUpstream

    upstream = MockUpstream()
    app = create_app(ServeSettings("http://upstream.test/v1", tmp_path / "stores", budget=2000),
                     transport=upstream.transport())
    histories: dict[int, list[dict[str, Any]]] = {}

    def client(index: int, proxy: str) -> None:
        shared = index >= 16
        history: list[dict[str, Any]] = [
            {"role": "user", "content": "shared start" if shared else f"conv-{index} start"}]
        with httpx.Client(timeout=30) as http:
            for turn in range(3):
                answer = http.post(f"{proxy}/chat/completions", json={"model": "gpt-4o", "messages": history})
                assert answer.status_code == 200, answer.text
                history += [{"role": "assistant", "content": "done"},
                            {"role": "user", "content": f"conv-{index} turn {turn}"}]
        histories[index] = history

    with live_server(app) as proxy, ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(client, i, proxy) for i in range(24)]:
            future.result()
    assert len(upstream.seen) == 72
    for seen in upstream.seen:  # each request holds only its own conversation's text
        owners = {t.split()[0] for t in _texts(seen.body["messages"]) if t.startswith("conv-")}
        assert len(owners) <= 1, owners
    stores = {name: stored_messages(tmp_path / "stores", name) for name in conversations(tmp_path / "stores")}
    for index, history in histories.items():  # every client's history is kept whole in some store
        sent = _texts(history[:-1])
        assert any(_texts(stored)[: len(sent)] == sent for stored in stores.values()), index
    named = [n for n, stored in stores.items() if _texts(stored)[0].startswith("conv-")]
    assert len(named) == 16
    assert all(len(stores[n]) == 6 for n in named)  # 3 asks, 3 answers, nothing twice
    assert len(stores) - len(named) >= 8  # the shared start diverged into one store (or fork) per client
    rows = _rows(tmp_path)
    assert len(rows) == 72 and {r["status"] for r in rows} == {200}
