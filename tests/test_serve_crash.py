"""``compaction serve`` killed with SIGKILL mid-stream, then restarted on the same ``--store-dir``.

The real command runs in a subprocess over a loopback upstream that streams an answer slowly
(its first event, then nothing until the test lets it go).  The proxy is killed with
``kill -9`` while the client holds that first event; a new proxy on the same directory opens
the store, holds every committed message (the ask of the broken turn included, no partial
answer), and the client's retry and next turn extend the same conversation: nothing appended
twice, no fork.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import (
    RecordingUpstream,
    _openai_bytes,
    conversations,
    free_port,
    stored_messages,
    wait_until_serving,
)

from compaction.serve.ledger import Ledger

HOLD = "[hold]"


class SlowUpstream:
    """A loopback OpenAI Chat upstream; a streamed answer to an ask ending in ``[hold]`` stops
    after its first event until :attr:`release` is set (then the rest goes, or the write fails)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = threading.Event()
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                ask = RecordingUpstream.newest_user_text("openai", body).rsplit("\n\n", 1)[-1]
                stream = body.get("stream") is True
                payload = _openai_bytes(f"ack: {ask[-60:]}", None, {}, body, stream)
                self.close_connection = True
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: "
                                     + (b"text/event-stream" if stream else b"application/json") + b"\r\n\r\n")
                    if stream and ask.endswith(HOLD):
                        first, rest = payload.split(b"\n\n", 1)
                        self.wfile.write(first + b"\n\n")
                        self.wfile.flush()
                        outer.held.set()
                        outer.release.wait(20)
                        payload = rest
                    self.wfile.write(payload)
                    self.wfile.flush()
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow() -> Iterator[SlowUpstream]:
    upstream = SlowUpstream()
    try:
        yield upstream
    finally:
        upstream.close()


@contextmanager
def serving(upstream: str, store_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``compaction serve`` as a process on a free loopback port; yields it and its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "compaction", "serve", "--upstream", upstream, "--port", str(port),
               "--store-dir", str(store_dir), "--budget", "4000"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_until_serving(process, port)
        yield process, f"http://127.0.0.1:{port}/v1"
    finally:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=15)


def _ask(proxy: str, history: list[dict[str, Any]], *, stream: bool) -> str:
    """One whole turn through the proxy; returns the assistant's text."""
    body = {"model": "gpt-4o", "messages": history, "stream": stream}
    answer = httpx.post(f"{proxy}/chat/completions", json=body, headers={"X-Compaction-Conversation": "crash-1"},
                        timeout=20)
    assert answer.status_code == 200, answer.text
    if not stream:
        return str(answer.json()["choices"][0]["message"]["content"])
    text = ""
    for line in answer.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


def _texts(store_dir: Path) -> list[tuple[str, str]]:
    return [(role, "".join(b.get("text", "") for b in content))
            for role, content in stored_messages(store_dir, "crash-1")]


def test_sigkill_mid_stream_loses_no_committed_message_and_the_conversation_continues(
    tmp_path: Path, slow: SlowUpstream
) -> None:
    stores = tmp_path / "stores"
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                     {"role": "user", "content": "first ask"}]
    with serving(slow.base_url, stores) as (process, proxy):
        history.append({"role": "assistant", "content": _ask(proxy, history, stream=False)})
        history.append({"role": "user", "content": "second ask, streamed " + HOLD})
        body = {"model": "gpt-4o", "messages": history, "stream": True}
        with httpx.Client(timeout=20) as client, client.stream(
            "POST", f"{proxy}/chat/completions", json=body, headers={"X-Compaction-Conversation": "crash-1"}
        ) as answer:
            assert answer.status_code == 200
            chunks = answer.iter_raw()
            first = next(chunks)
            assert first.startswith(b"data: {") and b"ack: " in first  # mid-stream: the rest is held back
            assert slow.held.is_set()
            os.kill(process.pid, signal.SIGKILL)
            assert process.wait(10) == -signal.SIGKILL
            with pytest.raises(httpx.HTTPError):  # the client sees the stream break off
                for _chunk in chunks:
                    pass
    slow.release.set()

    # the store opens whole: every committed message, the broken turn's ask, no partial answer
    committed = [("system", "You are a coding agent."), ("user", "first ask"), ("assistant", "ack: first ask"),
                 ("user", "second ask, streamed " + HOLD)]
    database = stores / "conversations" / "crash-1.sqlite"
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert _texts(stores) == committed

    with serving(slow.base_url, stores) as (_process, proxy):
        retried = _ask(proxy, history, stream=True)  # the client retries the broken turn as it was
        assert retried == "ack: second ask, streamed " + HOLD
        history.append({"role": "assistant", "content": retried})
        history.append({"role": "user", "content": "third ask"})
        third = _ask(proxy, history, stream=False)
    assert third == "ack: third ask"
    assert conversations(stores) == ["crash-1"]  # no fork
    assert _texts(stores) == committed + [("assistant", retried), ("user", "third ask"), ("assistant", third)]
    # the upstream got the whole conversation each time (it fits the budget), the newest ask last
    assert [m["content"] for m in slow.bodies[-1]["messages"]][-1] == "third ask"
    assert len(slow.bodies[-1]["messages"]) == 6
    ledger = Ledger(stores / "requests.sqlite")
    try:
        rows = ledger.rows()
    finally:
        ledger.close()
    # the killed request wrote no row; the retry appended nothing new (its ask was committed), the
    # next turn only its ask (the retry's answer was recorded when its stream completed)
    assert [(r["appended"], r["stored"], r["status"], r["answer_recorded"]) for r in rows] == [
        (2, 2, 200, 1), (0, 4, 200, 1), (1, 6, 200, 1)]
