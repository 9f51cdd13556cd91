"""A fake OpenAI-compatible Chat Completions server on loopback, for summarizer tests.

It speaks ``POST /v1/chat/completions`` (and ``POST /v1/responses``: a deterministic
:func:`response_object`, a ``function_call`` when the newest ask ends with ``[tool]``,
streamed as Responses SSE events when asked) with the standard library's ``http.server`` in a
daemon thread on ``127.0.0.1`` port 0, records every request (raw body bytes, headers,
path, the status it answered) and misbehaves on demand with :meth:`FakeOpenAI.set_mode`:

``ok``             a deterministic summary derived from the request (message count, sha prefix);
                   a caption request (system prompt "You caption one image...") gets a
                   deterministic caption naming the sha256 prefix of the image's bytes
                   (:func:`caption_of`).
``text_only``      HTTP 400 ``image_input_not_supported`` to any request holding an image
                   (an ``image_url`` / ``input_image`` / ``image`` part or a ``data:image/``
                   URI anywhere in the body); ``ok`` otherwise.
``timeout``        the first ``times`` requests sleep ``delay`` seconds (past the client's
                   timeout) before answering; later ones are ``ok``.
``429``            the first ``times`` requests get HTTP 429 with ``Retry-After: retry_after``.
``500``            the first ``times`` requests get HTTP 500 (``status`` to pick another 5xx).
``context_length`` HTTP 400 ``context_length_exceeded`` when the body exceeds ``max_chars``.
``empty``          ``content: ""`` with ``finish_reason: "stop"``.
``length``         a partial text with ``finish_reason: "length"``.
``refusal``        ``message.refusal`` set, no content.
``content_filter`` a partial text with ``finish_reason: "content_filter"``.
``401``            HTTP 401 whose message echoes the ``Authorization`` header, as some servers do.
``400_echo``       HTTP 400 (a bad parameter) whose message echoes the ``Authorization`` header.
``huge``           HTTP 200 with a valid answer of ``size`` bytes and its ``Content-Length``.
``huge_unsized``   HTTP 200 streaming ``size`` bytes with no ``Content-Length`` (until close).
``huge_chunked``   HTTP 200 streaming ``size`` bytes with ``Transfer-Encoding: chunked``.
``trickle``        HTTP 200, headers at once, then the body one byte every ``delay`` seconds.
``trickle_head``   the status line and headers one byte every ``delay`` seconds (with ``size``
                   bytes of padding headers), then the answer.
``scripted``       whatever ``answer(request, headers)`` returns: a :class:`Raw` answer written
                   byte for byte, or any JSON value sent as HTTP 200 (``request`` is the parsed
                   body, ``headers`` the request's headers, lower-cased).

:class:`Raw` and :func:`write_raw` are shared with :mod:`fake_anthropic_server`.

The text of every failure mode carries :data:`FAILURE_MARK`, so a test can prove that no
error text ever became a summary.  The server is bounded: bodies over 32 MB (``max_body``) and
requests past :attr:`FakeOpenAI.max_requests` get HTTP 503 unrecorded, and it shuts itself down after
``lifetime`` seconds if a test forgets to.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "FakeOpenAI", "Recorded", "Raw", "FAILURE_MARK", "completion", "image_inputs", "fake_openai", "streamed",
    "write_raw", "caption_of", "CAPTION_PROMPT_START", "response_object", "response_events", "newest_user_text",
]

FAILURE_MARK = "FAKE-SERVER-FAILURE-TEXT"
#: How the system prompt of a caption request begins (compaction.captions.CAPTION_SYSTEM_PROMPT).
CAPTION_PROMPT_START = "You caption one image"
_MAX_BODY = 32 * 1024 * 1024
_MODES = (
    "ok", "text_only", "timeout", "429", "500", "context_length", "empty", "length", "refusal",
    "content_filter", "401", "400_echo", "huge", "huge_unsized", "huge_chunked", "trickle", "trickle_head",
    "scripted",
)


@dataclass
class Raw:
    """An answer written as given, for misbehaviour a JSON answer cannot express.

    Attributes:
        status: the HTTP status.
        headers: headers sent as given, in order (``Content-Length`` is added when ``sized``).
        body: the body bytes, or a JSON value serialized compactly.
        sized: send ``Content-Length``; otherwise the body ends when the connection closes.
        chunked: send the body with ``Transfer-Encoding: chunked`` (never sized).
        head_delay: seconds between bytes of the status line and headers.
        body_delay: seconds between bytes of the body.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = b""
    sized: bool = True
    chunked: bool = False
    head_delay: float = 0.0
    body_delay: float = 0.0

    def data(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode("utf-8")


def write_raw(wfile: Any, raw: Raw, stopped: Callable[[], bool]) -> None:
    """Write ``raw`` to ``wfile``; stop when the client is gone or ``stopped()`` turns true."""
    data = raw.data()
    headers = dict(raw.headers)
    if raw.chunked:
        headers["Transfer-Encoding"] = "chunked"
    elif raw.sized:
        headers.setdefault("Content-Length", str(len(data)))
    headers.setdefault("Connection", "close")
    head = f"HTTP/1.1 {raw.status} Fake\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"

    def paced(payload: bytes, delay: float, step: int) -> bool:
        step = 1 if delay else step
        for start in range(0, len(payload), step):
            if stopped():
                return False
            wfile.write(payload[start : start + step])
            if delay:
                wfile.flush()
                time.sleep(delay)
        wfile.flush()
        return True

    try:
        if not paced(head.encode("latin-1"), raw.head_delay, len(head)):
            return
        if not raw.chunked:
            paced(data, raw.body_delay, 65536)
            return
        step = 1 if raw.body_delay else 65536
        for start in range(0, len(data), step):
            piece = data[start : start + step]
            if not paced(b"%x\r\n" % len(piece) + piece + b"\r\n", raw.body_delay / (len(piece) + 5), 65536):
                return
        paced(b"0\r\n\r\n", 0.0, 16)
    except OSError:  # the client gave up
        pass


def streamed(how: str, size: int, delay: float, answer: Any) -> Raw:
    """The :class:`Raw` answer of the ``huge*``, ``trickle`` and ``trickle_head`` modes."""
    if how == "trickle_head":
        padding = {f"X-Padding-{i}": "p" * 60 for i in range(max(1, size // 80))}
        return Raw(200, {"Content-Type": "application/json", **padding}, answer, head_delay=delay)
    if how == "trickle":
        return Raw(200, {"Content-Type": "application/json"}, answer, body_delay=delay)
    filler = b"x" * size
    body = json.dumps(answer).encode("utf-8").replace(b"FILLER", filler)
    return Raw(200, {"Content-Type": "application/json"}, body, sized=how == "huge", chunked=how == "huge_chunked")



def image_inputs(body: bytes) -> int:
    """Return the image inputs in a request body: image parts plus ``data:image/`` URIs."""
    count = body.count(b"data:image/")

    def walk(value: Any) -> int:
        if isinstance(value, dict):
            own = 1 if value.get("type") in ("image_url", "input_image", "image") else 0
            return own + sum(walk(v) for v in value.values())
        if isinstance(value, list):
            return sum(walk(v) for v in value)
        return 0

    try:
        parsed = json.loads(body)
    except ValueError:
        return count
    parts = walk(parsed)
    return max(count, parts)


def _system_text(request: dict[str, Any]) -> str:
    system = request.get("system")
    if isinstance(system, list):
        return "".join(b.get("text", "") for b in system if isinstance(b, dict))
    if isinstance(system, str):
        return system
    for message in request.get("messages", []):
        if isinstance(message, dict) and message.get("role") == "system":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _image_bytes(value: Any) -> list[bytes]:
    """Return the bytes of every base64 image in a parsed body (OpenAI data URLs, Anthropic sources)."""
    found: list[bytes] = []
    if isinstance(value, dict):
        source = value.get("source")
        if value.get("type") == "image" and isinstance(source, dict) and isinstance(source.get("data"), str):
            found.append(base64.b64decode(source["data"]))
        url = value.get("image_url", {}).get("url") if isinstance(value.get("image_url"), dict) else None
        if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
            found.append(base64.b64decode(url.split(";base64,", 1)[1]))
        for item in value.values():
            found.extend(_image_bytes(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_image_bytes(item))
    return found


def caption_of(request: Any) -> str | None:
    """Return the fake's caption for a caption request (``None`` for any other request).

    It names the number of images and the sha256 prefix (12 hex digits) of each one's bytes.
    """
    if not isinstance(request, dict) or not _system_text(request).startswith(CAPTION_PROMPT_START):
        return None
    images = _image_bytes(request.get("messages", []))
    hashes = ", ".join(hashlib.sha256(data).hexdigest()[:12] for data in images) or "none"
    return f"A fake caption of {len(images)} image(s): a picture whose bytes hash to {hashes}."


@dataclass
class Recorded:
    """One request the server received, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int = 0
    mode: str = ""
    delayed: float = 0.0  # seconds the answer was held back (a timeout test)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Mode:
    name: str = "ok"
    times: int = 1
    retry_after: str = "2"
    status: int = 500
    delay: float = 1.0
    max_chars: int = 10_000
    size: int = 8 * 1024 * 1024
    answer: Callable[[Any, dict[str, str]], Any] | None = None
    served: int = 0  # failures served so far in this mode
    extra: dict[str, Any] = field(default_factory=dict)


class FakeOpenAI:
    """The fake server; use it through the :func:`fake_openai` fixture or as a context manager."""

    def __init__(self, *, lifetime: float = 120.0, max_requests: int = 5000, max_body: int = _MAX_BODY) -> None:
        self.requests: list[Recorded] = []
        self.max_requests = max_requests
        self.max_body = max_body
        self._mode = _Mode()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._watchdog = threading.Timer(lifetime, self.stop)
        self._watchdog.daemon = True
        self._stopped = False

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
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

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control -------------------------------------------------------------------------
    def set_mode(self, name: str, **options: Any) -> None:
        """Switch the behaviour (see the module docstring); counters restart."""
        if name not in _MODES:
            raise ValueError(f"unknown mode {name!r}; expected one of {', '.join(_MODES)}")
        known = {"times", "retry_after", "status", "delay", "max_chars", "size", "answer"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for mode {name!r}")
        with self._lock:
            self._mode = _Mode(name, **options)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def statuses(self) -> list[int]:
        with self._lock:
            return [r.status for r in self.requests]

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [r.body for r in self.requests]

    # -- answering -----------------------------------------------------------------------
    def _decide(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], Any, float]:
        """Return (status, extra headers, JSON answer, delay seconds) for one request."""
        with self._lock:
            mode = self._mode
            name = mode.name
            failing = mode.served < mode.times
            if name in ("timeout", "429", "500") and failing:
                mode.served += 1
        try:
            request = json.loads(body)
        except ValueError:
            return 400, {}, _error("invalid_json", f"{FAILURE_MARK}: the body is not JSON"), 0.0
        auth = headers.get("authorization", "")
        if name == "scripted" and mode.answer is not None:
            return 200, {}, mode.answer(request, headers), 0.0
        if name in ("huge", "huge_unsized", "huge_chunked", "trickle", "trickle_head"):
            size = mode.size if name.startswith("huge") or name == "trickle_head" else 0
            text = "FILLER" if name.startswith("huge") else _ok(request, body)["choices"][0]["message"]["content"]
            raw = streamed(name, size, mode.delay, _completion(request, text, "stop"))
            return 200, {}, raw, 0.0
        if name == "text_only" and image_inputs(body):
            return 400, {}, _error(
                "image_input_not_supported",
                f"{FAILURE_MARK}: Image input is not supported for this model.",
            ), 0.0
        if name == "timeout" and failing:
            return 200, {}, _ok(request, body), mode.delay
        if name == "429" and failing:
            return 429, {"Retry-After": mode.retry_after}, _error(
                "rate_limit_exceeded", f"{FAILURE_MARK}: Rate limit reached.", "requests"), 0.0
        if name == "500" and failing:
            failure = _error(None, f"{FAILURE_MARK}: The server had an error.", "server_error")
            return mode.status, {}, failure, 0.0
        if name == "context_length" and len(body) > mode.max_chars:
            return 400, {}, _error(
                "context_length_exceeded",
                f"{FAILURE_MARK}: This model's maximum context length is {mode.max_chars} characters. "
                f"However, your messages resulted in {len(body)} characters.",
            ), 0.0
        if name == "empty":
            return 200, {}, _completion(request, "", "stop"), 0.0
        if name == "length":
            return 200, {}, _completion(request, f"Asked:\n- {FAILURE_MARK} partial", "length"), 0.0
        if name == "content_filter":
            return 200, {}, _completion(request, f"{FAILURE_MARK} filtered", "content_filter"), 0.0
        if name == "refusal":
            answer = _completion(request, None, "stop")
            answer["choices"][0]["message"]["refusal"] = f"{FAILURE_MARK}: I can't help with that."
            return 200, {}, answer, 0.0
        if name == "401":
            return 401, {}, _error(
                "invalid_api_key", f"{FAILURE_MARK}: Incorrect API key provided: {auth}.",
                "invalid_request_error"), 0.0
        if name == "400_echo":
            return 400, {}, _error(
                "unsupported_parameter", f"{FAILURE_MARK}: bad parameter; you sent {auth}."), 0.0
        return 200, {}, _ok(request, body), 0.0


def _error(code: str | None, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": kind, "param": None}}


def completion(request: Any, content: Any, finish: Any = "stop", **fields: Any) -> dict[str, Any]:
    """A Chat Completions answer carrying ``content``; ``fields`` are set at the top level."""
    answer = _completion(request, content, finish)
    answer.update(fields)
    return answer


def _completion(request: Any, content: Any, finish: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model", "unknown") if isinstance(request, dict) else "unknown",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _ok(request: Any, body: bytes) -> dict[str, Any]:
    """A deterministic summary naming the message count and the request's sha256 prefix (or a caption)."""
    caption = caption_of(request)
    if caption is not None:
        return _completion(request, caption, "stop")
    messages = request.get("messages", []) if isinstance(request, dict) else []
    digest = hashlib.sha256(body).hexdigest()[:12]
    text = (
        f"  Asked:\n- summarize {len(messages)} messages (request {digest})\n"
        f"Done:\n- recorded by the fake server\n  "
    )
    answer = _completion(request, text, "stop")
    prompt = max(1, len(body) // 4)
    answer["usage"] = {"prompt_tokens": prompt, "completion_tokens": 17, "total_tokens": prompt + 17}
    return answer


def newest_user_text(request: Any) -> str:
    """The text of the last user message of a Responses ``input`` (a string input is one)."""
    items = request.get("input") if isinstance(request, dict) else None
    if isinstance(items, str):
        return items
    for item in reversed(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "\n\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "input_text")
    return ""


def response_object(request: Any, number: int) -> dict[str, Any]:
    """A completed Responses API answer to ``request`` (the ``number``-th the fake served).

    When the newest user message ends with ``[tool]`` and the input does not end with a
    ``function_call_output``, the answer is a ``function_call`` of ``bash`` (``call_id``
    ``call_<number>``); otherwise an assistant message ``ack: <newest user text>``.
    """
    items = request.get("input") if isinstance(request, dict) else None
    last = items[-1] if isinstance(items, list) and items else {}
    ask = newest_user_text(request)
    output: list[dict[str, Any]]
    if ask.endswith("[tool]") and not (isinstance(last, dict) and last.get("type") == "function_call_output"):
        output = [{"type": "function_call", "id": f"fc_{number}", "call_id": f"call_{number}", "name": "bash",
                   "arguments": json.dumps({"cmd": f"pytest -k case{number}"}), "status": "completed"}]
    else:
        output = [{"type": "message", "id": f"msg_{number}", "status": "completed", "role": "assistant",
                   "content": [{"type": "output_text", "text": f"ack: {ask}", "annotations": []}]}]
    prompt = max(1, len(json.dumps(request)) // 4)
    return {
        "id": f"resp_{number}", "object": "response", "created_at": 0, "status": "completed",
        "model": request.get("model", "unknown") if isinstance(request, dict) else "unknown",
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": prompt, "output_tokens": 9, "total_tokens": prompt + 9,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }


def response_events(response: dict[str, Any]) -> bytes:
    """The SSE stream of ``response``: created, each output item added and done (text as deltas), completed."""
    events: list[dict[str, Any]] = []
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events.append({"type": "response.created", "response": pending})
    for index, item in enumerate(response["output"]):
        events.append({"type": "response.output_item.added", "output_index": index, "item": {**item, "status": "in_progress"}})
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for start in range(0, len(text), 7):
                events.append({"type": "response.output_text.delta", "output_index": index, "content_index": 0,
                               "item_id": item["id"], "delta": text[start:start + 7]})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': n})}\n\n".encode()
        for n, event in enumerate(events)
    )


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "FakeOpenAI/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, answer: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(answer).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (a timeout test)
                pass

        def _respond(self, record: Recorded, body: bytes, number: int) -> None:
            """``POST /v1/responses``: a :func:`response_object`, streamed when the request asks."""
            try:
                request = json.loads(body)
            except ValueError:
                record.status = 400
                self._send(400, _error("invalid_json", f"{FAILURE_MARK}: the body is not JSON"))
                return
            if not isinstance(request, dict):
                record.status = 400
                self._send(400, _error("invalid_request", f"{FAILURE_MARK}: the body is not an object"))
                return
            response = response_object(request, number)
            record.status = 200
            if request.get("stream") is not True:
                self._send(200, response)
                return
            data = response_events(response)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass

        def do_GET(self) -> None:  # noqa: N802
            self._send(404, _error("not_found", f"{FAILURE_MARK}: only POST /v1/chat/completions"))

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > fake.max_body or len(fake.requests) >= fake.max_requests:
                self._send(503, _error("overloaded", f"{FAILURE_MARK}: the fake server's bound was reached"))
                return
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            record = Recorded("POST", self.path, headers, body, mode=fake._mode.name)
            with fake._lock:
                fake.requests.append(record)
                number = len(fake.requests)
            if self.path.split("?", 1)[0] == "/v1/responses":
                self._respond(record, body, number)
                return
            if self.path.split("?", 1)[0] != "/v1/chat/completions":
                record.status = 404
                self._send(404, _error("not_found", f"{FAILURE_MARK}: unknown path {self.path}"))
                return
            status, extra, answer, delay = fake._decide(body, headers)
            if isinstance(answer, Raw):
                record.status = answer.status
                self.close_connection = True
                write_raw(self.wfile, answer, lambda: fake.stopped)
                return
            record.status = status
            if delay:
                record.delayed = delay
                time.sleep(delay)
            self._send(status, answer, extra)

    return Handler


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """Yield a started :class:`FakeOpenAI` in mode ``ok``; stop it after the test."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
