"""A fake Anthropic Messages server on loopback, for summarizer tests.

It speaks ``POST /v1/messages`` with the standard library's ``http.server`` in a daemon
thread on ``127.0.0.1`` port 0, like :mod:`fake_openai_server`, records every request (raw
body bytes, headers, path, the status it answered) and answers with the API's documented
shapes (https://docs.claude.com/en/api/errors: ``{"type": "error", "error": {"type",
"message"}, "request_id"}``).  Like the real API it refuses a request without an
``anthropic-version`` header (400), without ``x-api-key`` (401, unless ``require_key`` is
off), or whose body lacks ``model``, an integer ``max_tokens`` or a ``messages`` list (400).
It misbehaves on demand with :meth:`FakeAnthropic.set_mode`:

``ok``               a deterministic summary derived from the request (message count, sha prefix),
                     ``stop_reason: "end_turn"``, ``usage`` with ``input_tokens`` / ``output_tokens``;
                     a caption request gets the deterministic caption of
                     :func:`fake_openai_server.caption_of`.
``blocks``           the summary split over two text blocks with a ``thinking`` block between.
``stop_sequence``    the summary with ``stop_reason: "stop_sequence"``.
``max_tokens``       a partial text with ``stop_reason: "max_tokens"``.
``refusal``          ``stop_reason: "refusal"``.
``empty``            no content blocks, ``stop_reason: "end_turn"``.
``prompt_too_long``  HTTP 400 ``invalid_request_error`` "prompt is too long: ..." when the body
                     exceeds ``max_chars``; ``ok`` otherwise.
``413``              HTTP 413 ``request_too_large`` when the body exceeds ``max_chars``.
``429``              the first ``times`` requests get HTTP 429 ``rate_limit_error`` with
                     ``retry-after: retry_after``.
``529``              the first ``times`` requests get HTTP 529 ``overloaded_error`` (with
                     ``retry-after`` when ``retry_after`` is not empty).
``500``              the first ``times`` requests get HTTP 500 ``api_error``.
``spend_limit``      HTTP 429 ``rate_limit_error`` whose ``error.details.error_code`` is
                     ``enforced_spend_limit_reached``.
``401`` / ``403``    ``authentication_error`` / ``permission_error`` whose message echoes the
                     ``x-api-key`` header, as a careless server might.
``404``              ``not_found_error`` naming the model.
``timeout``          the first ``times`` requests sleep ``delay`` seconds before answering.
``huge``             HTTP 200 with a valid answer of ``size`` bytes and its ``Content-Length``.
``huge_unsized``     HTTP 200 streaming ``size`` bytes with no ``Content-Length`` (until close).
``huge_chunked``     HTTP 200 streaming ``size`` bytes with ``Transfer-Encoding: chunked``.
``trickle``          HTTP 200, headers at once, then the body one byte every ``delay`` seconds.
``trickle_head``     the status line and headers one byte every ``delay`` seconds (with ``size``
                     bytes of padding headers), then the answer.
``scripted``         whatever ``answer(request, headers)`` returns: a :class:`Raw` answer written
                     byte for byte, or any JSON value sent as HTTP 200 (after the checks above).

The text of every failure mode carries :data:`FAILURE_MARK`, so a test can prove that no
error text ever became a summary.  The server is bounded: bodies over 32 MB get HTTP 413
and requests past :attr:`FakeAnthropic.max_requests` HTTP 529, unrecorded; a slow answer
stops once the client is gone or after ``lifetime`` seconds, when the server shuts down.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fake_openai_server import FAILURE_MARK, Raw, Recorded, caption_of, streamed, write_raw

__all__ = ["FakeAnthropic", "FAILURE_MARK", "Raw", "Recorded", "fake_anthropic", "message"]

_MAX_BODY = 32 * 1024 * 1024
_MODES = (
    "ok", "blocks", "stop_sequence", "max_tokens", "refusal", "empty", "prompt_too_long", "413",
    "429", "529", "500", "spend_limit", "401", "403", "404", "timeout", "huge", "huge_unsized",
    "trickle", "huge_chunked", "trickle_head", "scripted",
)
_COUNTED = ("429", "529", "500", "timeout")  # modes that fail ``times`` times, then answer ok


@dataclass
class _Mode:
    name: str = "ok"
    times: int = 1
    retry_after: str = "2"
    delay: float = 1.0
    max_chars: int = 10_000
    size: int = 8 * 1024 * 1024
    answer: Callable[[Any, dict[str, str]], Any] | None = None
    served: int = 0  # failures served so far in this mode


def _error(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message, **extra},
            "request_id": "req_fake"}


def message(request: Any, content: Any, stop: Any = "end_turn", **fields: Any) -> dict[str, Any]:
    """A Messages answer: ``content`` (a text, or a list of blocks); ``fields`` set at the top level."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    answer = _message(request, blocks, stop, b"")
    answer.update(fields)
    return answer


def _message(request: Any, content: Any, stop: Any, body: bytes) -> dict[str, Any]:
    prompt = max(1, len(body) // 4)
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "unknown") if isinstance(request, dict) else "unknown",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": "###" if stop == "stop_sequence" else None,
        "usage": {"input_tokens": prompt, "output_tokens": 17, "cache_read_input_tokens": 0},
    }


def summary_text(request: Any, body: bytes) -> str:
    """The deterministic summary of a request: its message count and sha256 prefix (or a caption)."""
    caption = caption_of(request)
    if caption is not None:
        return caption
    messages = request.get("messages", []) if isinstance(request, dict) else []
    digest = hashlib.sha256(body).hexdigest()[:12]
    return (
        f"  Asked:\n- summarize {len(messages)} messages (request {digest})\n"
        f"Done:\n- recorded by the fake Anthropic server\n  "
    )


class FakeAnthropic:
    """The fake server; use it through the :func:`fake_anthropic` fixture or as a context manager."""

    def __init__(self, *, lifetime: float = 120.0, max_requests: int = 5000, require_key: bool = True) -> None:
        self.requests: list[Recorded] = []
        self.max_requests = max_requests
        self.require_key = require_key
        self._mode = _Mode()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-anthropic", daemon=True)
        self._deadline = time.monotonic() + lifetime
        self._watchdog = threading.Timer(lifetime, self.stop)
        self._watchdog.daemon = True
        self._stopped = False

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FakeAnthropic:
        self._thread.start()
        self._watchdog.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._watchdog.cancel()
        self._server.shutdown()
        self._server.server_close()

    @property
    def stopped(self) -> bool:
        return self._stopped or time.monotonic() > self._deadline

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control -------------------------------------------------------------------------
    def set_mode(self, name: str, **options: Any) -> None:
        """Switch the behaviour (see the module docstring); counters restart."""
        if name not in _MODES:
            raise ValueError(f"unknown mode {name!r}; expected one of {', '.join(_MODES)}")
        unknown = set(options) - {"times", "retry_after", "delay", "max_chars", "size", "answer"}
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for mode {name!r}")
        with self._lock:
            self._mode = _Mode(name, **options)

    def statuses(self) -> list[int]:
        with self._lock:
            return [r.status for r in self.requests]

    # -- answering -----------------------------------------------------------------------
    def _decide(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], Any, float]:
        """Return (status, extra headers, JSON answer or a streaming mode name, delay) for one request."""
        with self._lock:
            mode = self._mode
            name = mode.name
            failing = mode.served < mode.times
            if name in _COUNTED and failing:
                mode.served += 1
        key = headers.get("x-api-key", "")
        if "anthropic-version" not in headers:
            return 400, {}, _error("invalid_request_error", f"{FAILURE_MARK}: anthropic-version: header is required"), 0.0
        if self.require_key and not key and name not in ("401", "403"):
            return 401, {}, _error("authentication_error", f"{FAILURE_MARK}: x-api-key header is required"), 0.0
        try:
            request = json.loads(body)
        except ValueError:
            return 400, {}, _error("invalid_request_error", f"{FAILURE_MARK}: the body is not JSON"), 0.0
        if (
            not isinstance(request, dict)
            or not isinstance(request.get("model"), str)
            or isinstance(request.get("max_tokens"), bool)
            or not isinstance(request.get("max_tokens"), int)
            or not isinstance(request.get("messages"), list)
        ):
            return 400, {}, _error(
                "invalid_request_error", f"{FAILURE_MARK}: model, max_tokens and messages are required"), 0.0
        text = summary_text(request, body)
        if name == "scripted" and mode.answer is not None:
            return 200, {}, mode.answer(request, headers), 0.0
        if name in ("prompt_too_long", "413") and len(body) > mode.max_chars:
            if name == "413":
                return 413, {}, _error("request_too_large", f"{FAILURE_MARK}: Request exceeds the maximum size"), 0.0
            return 400, {}, _error(
                "invalid_request_error",
                f"{FAILURE_MARK}: prompt is too long: {len(body)} tokens > {mode.max_chars} maximum"), 0.0
        if name == "429" and failing:
            return 429, {"retry-after": mode.retry_after}, _error(
                "rate_limit_error", f"{FAILURE_MARK}: Number of request tokens has exceeded your rate limit"), 0.0
        if name == "529" and failing:
            extra = {"retry-after": mode.retry_after} if mode.retry_after else {}
            return 529, extra, _error("overloaded_error", f"{FAILURE_MARK}: Overloaded"), 0.0
        if name == "500" and failing:
            return 500, {}, _error("api_error", f"{FAILURE_MARK}: Internal server error"), 0.0
        if name == "spend_limit":
            return 429, {"retry-after": "1"}, _error(
                "rate_limit_error", f"{FAILURE_MARK}: You have reached your specified API usage limits.",
                details={"error_code": "enforced_spend_limit_reached"}), 0.0
        if name == "401":
            return 401, {}, _error("authentication_error", f"{FAILURE_MARK}: invalid x-api-key {key}"), 0.0
        if name == "403":
            return 403, {}, _error("permission_error", f"{FAILURE_MARK}: key {key} may not use this model"), 0.0
        if name == "404":
            return 404, {}, _error("not_found_error", f"{FAILURE_MARK}: model: {request['model']}"), 0.0
        if name == "blocks":
            head, _, tail = text.partition("Done:")
            content = [{"type": "text", "text": head},
                       {"type": "thinking", "thinking": f"{FAILURE_MARK} private", "signature": "x"},
                       {"type": "text", "text": "Done:" + tail}]
            return 200, {}, _message(request, content, "end_turn", body), 0.0
        if name == "stop_sequence":
            return 200, {}, _message(request, [{"type": "text", "text": text}], "stop_sequence", body), 0.0
        if name == "max_tokens":
            partial = [{"type": "text", "text": f"Asked:\n- {FAILURE_MARK} partial"}]
            return 200, {}, _message(request, partial, "max_tokens", body), 0.0
        if name == "refusal":
            return 200, {}, _message(request, [{"type": "text", "text": f"{FAILURE_MARK} no"}], "refusal", body), 0.0
        if name == "empty":
            return 200, {}, _message(request, [], "end_turn", body), 0.0
        if name in ("huge", "huge_unsized", "huge_chunked", "trickle", "trickle_head"):
            size = mode.size if name.startswith("huge") or name == "trickle_head" else 0
            blocks = [{"type": "text", "text": "FILLER" if name.startswith("huge") else text}]
            return 200, {}, streamed(name, size, mode.delay, _message(request, blocks, "end_turn", body)), 0.0
        answer = _message(request, [{"type": "text", "text": text}], "end_turn", body)
        return 200, {}, answer, (mode.delay if name == "timeout" and failing else 0.0)


def _handler_for(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "FakeAnthropic/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, answer: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(answer).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", "req_fake")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (a timeout test)
                pass

        def do_GET(self) -> None:  # noqa: N802
            self._send(405, _error("invalid_request_error", f"{FAILURE_MARK}: only POST /v1/messages"))

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._send(413, _error("request_too_large", f"{FAILURE_MARK}: Request exceeds the maximum size"))
                return
            if len(fake.requests) >= fake.max_requests:
                self._send(529, _error("overloaded_error", f"{FAILURE_MARK}: the fake server's bound was reached"))
                return
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            record = Recorded("POST", self.path, headers, body, mode=fake._mode.name)
            with fake._lock:
                fake.requests.append(record)
            if self.path.split("?", 1)[0] != "/v1/messages":
                record.status = 404
                self._send(404, _error("not_found_error", f"{FAILURE_MARK}: unknown path {self.path}"))
                return
            status, extra, answer, delay = fake._decide(body, headers)
            record.status = status
            if isinstance(answer, Raw):
                record.status = answer.status
                record.delayed = answer.head_delay or answer.body_delay
                self.close_connection = True
                write_raw(self.wfile, answer, lambda: fake.stopped)
                return
            if delay:
                record.delayed = delay
                time.sleep(delay)
            self._send(status, answer, extra)

    return Handler


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """Yield a started :class:`FakeAnthropic` in mode ``ok``; stop it after the test."""
    server = FakeAnthropic().start()
    try:
        yield server
    finally:
        server.stop()
