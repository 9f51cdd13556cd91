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
             limits: Limits | None = None, upstream: str = UPSTREAM) -> ServeSettings:
    return ServeSettings(upstream=upstream, store_dir=tmp_path / "stores", recipe=recipe or Recipe(),
                         budget=budget, limits=limits or Limits())


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
