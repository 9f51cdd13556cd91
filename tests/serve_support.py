"""Shared pieces of the ``compaction serve`` tests: an in-process upstream, a driver, a live server.

* :class:`MockUpstream`: an httpx ``MockTransport`` that records every request the proxy sends
  upstream and answers with a handler (JSON, SSE, errors, a hang).
* :func:`post`: one request to the app through httpx's ``ASGITransport`` (no socket).
* :class:`LiveServer`: the app under uvicorn in a thread on a free loopback port.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from compaction import Recipe, Store
from compaction.serve import Limits, ServeSettings, create_app

UPSTREAM = "http://upstream.test/v1"


@dataclass
class Seen:
    """One request the upstream received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Handler = Callable[[Seen], Awaitable[httpx.Response]]


def openai_answer(text: str = "done", *, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Chat Completions answer with usage."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 123, "completion_tokens": 7, "total_tokens": 130,
                  "prompt_tokens_details": {"cached_tokens": 64}},
    }


def anthropic_answer(content: list[dict[str, Any]]) -> dict[str, Any]:
    """An Anthropic Messages answer with usage."""
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": content, "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 321, "output_tokens": 9, "cache_read_input_tokens": 100,
                  "cache_creation_input_tokens": 20},
    }


@dataclass
class MockUpstream:
    """Records what the proxy sends; answers with ``handler`` (default: a short answer)."""

    handler: Handler | None = None
    seen: list[Seen] = field(default_factory=list)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(await request.aread())
        seen = Seen(request.url.path, {k.lower(): v for k, v in request.headers.items()}, body)
        self.seen.append(seen)
        if self.handler is not None:
            return await self.handler(seen)
        if seen.path.endswith("/messages"):
            return httpx.Response(200, json=anthropic_answer([{"type": "text", "text": "done"}]))
        return httpx.Response(200, json=openai_answer())

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)


def settings(tmp_path: Path, *, budget: int | None = None, recipe: Recipe | None = None,
             limits: Limits | None = None, upstream: str = UPSTREAM, open_conversations: int = 64) -> ServeSettings:
    return ServeSettings(upstream=upstream, store_dir=tmp_path / "stores", recipe=recipe or Recipe(),
                         budget=budget, limits=limits or Limits(), open_conversations=open_conversations)


def post(app: Any, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST ``body`` (a dict as JSON, or bytes as they are) to the app in-process."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy", timeout=30) as client:
            if isinstance(body, bytes):
                return await client.post(path, content=body, headers=headers)
            return await client.post(path, json=body, headers=headers)

    return asyncio.run(go())


def stored_messages(store_dir: Path, conversation: str) -> list[Any]:
    """Return ``(role, content)`` of every message of a conversation's store."""
    with Store(store_dir / "conversations" / f"{conversation}.sqlite", create=False) as store:
        return [(m.role, list(m.content)) for m in store.messages()]


def conversations(store_dir: Path) -> list[str]:
    return sorted(p.stem for p in (store_dir / "conversations").glob("*.sqlite"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_serving(process: subprocess.Popen[Any], port: int, seconds: float = 30) -> None:
    """Return once the ``compaction serve`` ``process`` answers ``/healthz`` on ``port`` (200).

    Raises:
        AssertionError: the process exited first (its stderr in the message, when piped), or
            ``seconds`` passed.
    """
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.1)


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on loopback in a thread; yield its base URL (``.../v1``)."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="serve-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)


def make_app(tmp_path: Path, upstream: MockUpstream | None = None, **options: Any) -> Any:
    """The app over ``upstream`` (a :class:`MockUpstream`), or over the network when ``None``."""
    transport = upstream.transport() if upstream is not None else None
    return create_app(settings(tmp_path, **options), transport=transport)


class RecordingUpstream:
    """A loopback upstream speaking both APIs that records every request body it receives.

    ``POST /v1/chat/completions`` and ``POST /v1/messages`` answer in the API's shape, whole or
    as SSE when the body says ``stream: true`` (OpenAI usage only with
    ``stream_options.include_usage``).  The answer is a tool call (``bash``, id
    ``call_<n>`` / ``toolu_<n>``) when the newest user text ends with ``[tool]``, else the text
    ``ack: <the newest user text's last paragraph, last 60 characters>``, so each answer names its own
    conversation (a compiled request may put summaries ahead of the newest ask in one message).  :attr:`received` holds ``(path, body)`` in arrival order.
    """

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.received: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.received.append((self.path, body))
                    outer._calls += 1
                    number = outer._calls
                api = "anthropic" if self.path.endswith("/messages") else "openai"
                stream = body.get("stream") is True
                payload = outer.answer(api, body, number, stream)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            # 50 agents at once: the default listen backlog of 5 overflowed on a loaded machine
            # and the kernel reset connections (the proxy then said "cannot reach the upstream")
            request_queue_size = 128
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> RecordingUpstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def newest_user_text(api: str, body: dict[str, Any]) -> str:
        """The text of the newest user message of a request body, its text parts joined by blank lines."""
        for message in reversed(body.get("messages") or []):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                return content
            texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            if texts:
                return "\n\n".join(texts)
            if api == "openai":
                return ""
        return ""

    def answer(self, api: str, body: dict[str, Any], number: int, stream: bool) -> bytes:
        """The answer to one request, JSON or SSE bytes."""
        ask = self.newest_user_text(api, body).rsplit("\n\n", 1)[-1]  # the ask, after any summaries
        tool = ask.endswith("[tool]")
        text = "" if tool else f"ack: {ask[-60:]}"
        args = {"cmd": f"echo {number}"}
        if api == "openai":
            return _openai_bytes(text, f"call_{number}" if tool else None, args, body, stream)
        return _anthropic_bytes(text, f"toolu_{number}" if tool else None, args, stream)


def _sse_bytes(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n")
    return "".join(out).encode()


def _openai_bytes(text: str, call: str | None, args: dict[str, Any], body: dict[str, Any], stream: bool) -> bytes:
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}
    calls = [{"id": call, "type": "function", "function": {"name": "bash", "arguments": json.dumps(args)}}] if call else None
    finish = "tool_calls" if call else "stop"
    if not stream:
        answer = openai_answer(text, tool_calls=calls)
        answer["choices"][0]["finish_reason"] = finish
        if call:
            answer["choices"][0]["message"]["content"] = None
        return json.dumps(answer).encode()
    head = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o"}
    events: list[tuple[str | None, Any]] = [(None, {**head, "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": text[:5]}, "finish_reason": None}]})]
    if text[5:]:
        events.append((None, {**head, "choices": [{"index": 0, "delta": {"content": text[5:]}, "finish_reason": None}]}))
    if call:
        arguments = json.dumps(args)
        events.append((None, {**head, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": 0, "id": call, "type": "function", "function": {"name": "bash", "arguments": arguments[:6]}}]}}]}))
        events.append((None, {**head, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": arguments[6:]}}]}}]}))
    events.append((None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, {**head, "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return _sse_bytes(events)


def _anthropic_bytes(text: str, call: str | None, args: dict[str, Any], stream: bool) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    if call:
        content.append({"type": "tool_use", "id": call, "name": "bash", "input": args})
    if not stream:
        answer = anthropic_answer(content)
        answer["stop_reason"] = "tool_use" if call else "end_turn"
        return json.dumps(answer).encode()
    start = {"id": "msg_s", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5",
             "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 1}}
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(content):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            for piece in (block["text"][:5], block["text"][5:]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "text_delta", "text": piece}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": "bash", "input": {}}}))
            arguments = json.dumps(block["input"])
            for piece in (arguments[:6], arguments[6:]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "input_json_delta", "partial_json": piece}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "usage": {"output_tokens": 5},
                                     "delta": {"stop_reason": "tool_use" if call else "end_turn", "stop_sequence": None}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse_bytes(events)


@contextmanager
def served_app(store_dir: Path, upstream: str, *, budget: int | None = None, recipe: Recipe | None = None) -> Iterator[str]:
    """The proxy over ``upstream`` under uvicorn on loopback; yields its base URL (``.../v1``)."""
    app = create_app(ServeSettings(upstream=upstream, store_dir=store_dir, recipe=recipe or Recipe(), budget=budget))
    with live_server(app) as base:
        yield base
