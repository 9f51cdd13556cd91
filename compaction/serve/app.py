"""``compaction serve``: an OpenAI Chat / Responses / Anthropic Messages proxy that compacts each conversation.

Routes: ``POST /v1/chat/completions`` (forwarded to ``{upstream}/chat/completions``),
``POST /v1/responses`` (to ``{upstream}/responses``), ``POST /v1/messages`` (to
``{upstream}/messages``), ``GET /healthz``, ``GET /metrics`` (Prometheus text: :mod:`.metrics`).
A Responses request that names a ``previous_response_id`` continues a conversation the
upstream keeps: the proxy cannot see its history, so it forwards such a body as sent, not
compacted, and says so in its log line.

Per request: read the body (bounded), find the conversation and append what is new
(:mod:`.conversations`), compile with the recipe in events mode under the budget (``--budget``,
or the model's window minus ``max_tokens``: :mod:`.budget`), put the compiled ``messages``
(and ``system``) into the client's body in place of its own, every other field as the client
sent it, and forward with the client's credentials (:mod:`.forwarding`).  Answers pass back
unchanged, streamed chunk by chunk or whole; the assistant's answer is appended to the store
once complete and the usage the provider reported goes to the ledger (:mod:`.ledger`).

Why Starlette under uvicorn: the proxy already speaks HTTP upstream through httpx, which is
a dependency of the package and runs on anyio like Starlette, so one async stack serves both
sides; Starlette's ``StreamingResponse`` relays SSE chunk by chunk with backpressure;
httpx's ``ASGITransport`` drives the same app in-process for unit tests, and uvicorn serves it
on a real socket.  aiohttp would bring a second HTTP client and event-loop model beside httpx.

Blocking work (SQLite, compiling, summarizing) runs in worker threads, one request per
conversation at a time: each conversation's stores stay open between requests on a thread of
their own, at most ``open_conversations`` of them (:mod:`.stores`); the upstream call holds no lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..blocks import Message, escape_lone_surrogates
from ..calibration import record_proxy_usage
from ..errors import CompactionError, OverBudget, StoreError
from ..pipeline import compress_and_compile
from ..recipe import Recipe, SummarizerSettings
from ..summarizers._secrets import scrub_key
from ..tokens.counting import blocks_text_tokens
from ._errors import BadRequest, ServeError, UpstreamError
from .answers import SSEAssembler, Usage, answer_from_body, usage_from_body
from .budget import request_budget
from .conversations import (
    Api,
    ConversationBook,
    IncomingMemo,
    Resolved,
    conversation_id,
    conversation_start,
    header_conversation,
    incoming_messages,
    scrub_messages,
)
from .forwarding import Limits, Upstream, credentials, response_headers
from .ledger import Ledger, RequestRecord
from .metrics import Metrics
from .stores import DEFAULT_OPEN_CONVERSATIONS, Slot, StorePool

__all__ = ["ServeSettings", "create_app", "CONVERSATION_HEADER"]

logger = logging.getLogger("compaction.serve")

#: The request header that names a conversation explicitly.
CONVERSATION_HEADER = "x-compaction-conversation"
_PATHS: dict[str, str] = {"openai": "/chat/completions", "anthropic": "/messages", "responses": "/responses"}
#: The request format each API's compiled request is rendered in.
_FORMATS: dict[str, str] = {"openai": "openai", "anthropic": "anthropic", "responses": "openai-responses"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 409: "invalid_request_error", 413: "request_too_large",
                    500: "api_error", 502: "api_error", 504: "timeout_error"}


@dataclass(frozen=True)
class ServeSettings:
    """How the proxy runs.

    Attributes:
        upstream: the upstream base URL, ending in ``/v1`` (``https://api.openai.com/v1``).
        store_dir: where conversation stores and the request ledger live.
        recipe: compaction settings (its budget, format and model are set per request).
        budget: a fixed input budget (tokens) for every request; ``None``: the model's window
            minus the request's ``max_tokens``.
        limits: time and size bounds.
        open_conversations: conversations whose stores stay open between requests (least
            recently used closed first), so the engine's per-store caches stay warm.
    """

    upstream: str
    store_dir: Path
    recipe: Recipe = field(default_factory=Recipe)
    budget: int | None = None
    limits: Limits = field(default_factory=Limits)
    open_conversations: int = DEFAULT_OPEN_CONVERSATIONS


@dataclass
class _Parsed:
    body: dict[str, Any]
    messages: list[Message]
    base: str
    budget: int
    passthrough: bool = False  # forwarded as sent (Responses previous_response_id)
    keys: list[str] = field(default_factory=list)  # the client's credentials, scrubbed from what is stored


@dataclass
class _Prepared:
    resolved: Resolved
    body: bytes
    tokens: int
    events: int
    tokens_in: int


def _scrubbed(text: str, keys: Sequence[str]) -> str:
    """Return ``text`` with every credential in ``keys`` redacted (an error shown or logged)."""
    for key in keys:
        text = scrub_key(text, key)
    return text


def error_body(api: str, status: int, code: str, message: str) -> dict[str, Any]:
    """Return the proxy's own error in the API's error shape (so SDKs show the message)."""
    text = f"compaction serve: {message}"
    if api == "anthropic":
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": text}}
    return {"error": {"message": text, "type": "compaction_proxy_error", "code": code, "param": None}}


def _stream_error(api: str, code: str, message: str) -> bytes:
    """The SSE event that ends a stream the upstream broke off."""
    if api == "responses":
        event = {"type": "error", "code": code, "message": f"compaction serve: {message}", "param": None}
        return f"event: error\ndata: {json.dumps(event)}\n\n".encode()
    payload = json.dumps(error_body(api, 502, code, message))
    if api == "anthropic":
        return f"event: error\ndata: {payload}\n\n".encode()
    return f"data: {payload}\n\n".encode()


def outgoing_body(client: dict[str, Any], compiled: bytes) -> bytes:
    """Return the body sent upstream: the client's, with the compiled ``messages`` and ``system``.

    Every other field is the client's (``model``, ``max_tokens``, ``temperature``, ``stream``,
    ``tools``, ``tool_choice``...); fields the compiled request adds that the client did not
    send (``prompt_cache_key``) are added.  The client's tools go as they came: the compiled
    rendering drops fields the engine does not model (``strict``, ``cache_control``).
    """
    rendered = json.loads(compiled)
    body = {k: v for k, v in client.items() if k != "system"}
    body["messages"] = rendered["messages"]
    if "system" in rendered:
        body["system"] = rendered["system"]
    for key, value in rendered.items():
        if key not in body and key not in ("model", "max_tokens", "tools", "system"):
            body[key] = value
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return escape_lone_surrogates(text).encode("utf-8")


def outgoing_responses_body(client: dict[str, Any], compiled: bytes) -> bytes:
    """Return the Responses body sent upstream: the client's, with the compiled ``input`` and ``instructions``.

    Every other field is the client's (``model``, ``max_output_tokens``, ``stream``, ``tools``
    as sent, hosted tools included, ``reasoning``, ``store``, ``include``...); the client's
    ``instructions`` are the first message of the history, so the compiled ones replace them.
    """
    rendered = json.loads(compiled)
    body = {k: v for k, v in client.items() if k not in ("input", "instructions")}
    if "instructions" in rendered:
        body["instructions"] = rendered["instructions"]
    body["input"] = rendered["input"]
    for key, value in rendered.items():
        if key not in body and key not in ("model", "max_output_tokens", "tools"):
            body[key] = value
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return escape_lone_surrogates(text).encode("utf-8")


class _Proxy:
    def __init__(self, settings: ServeSettings, transport: httpx.AsyncBaseTransport | None) -> None:
        self.settings = settings
        self.book = ConversationBook(settings.store_dir)
        self.ledger = Ledger(Path(settings.store_dir) / "requests.sqlite")
        self.upstream = Upstream(settings.upstream, settings.limits, transport=transport)
        self.pool = StorePool(settings.open_conversations)
        self.metrics = Metrics()

    async def close(self) -> None:
        await self.upstream.aclose()
        await anyio.to_thread.run_sync(self.pool.close)
        self.ledger.close()

    # -- blocking work (worker threads) -----------------------------------------------------
    def _prepare(
        self, api: Api, base: str, parsed: _Parsed, budget: int, slot: Slot
    ) -> _Prepared:
        body, stores = parsed.body, slot.stores
        memo = slot.memo.setdefault("incoming", IncomingMemo())
        messages, exact = memo.prepare(parsed.messages, parsed.keys)
        resolved = self.book.resolve(base, messages, stores, exact)
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise BadRequest(f"model must be a string; found {type(model).__name__}")
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise BadRequest(f"tools must be a list; found {type(tools).__name__}")
        if api == "responses":  # hosted tools (web_search, file_search...) are the upstream's; not counted
            tools = [t for t in tools if isinstance(t, dict) and t.get("type") == "function"]
        changes: dict[str, Any] = {"budget_tokens": budget, "output_format": _FORMATS[api]}
        if model:
            changes["model"] = model
        recipe = self.settings.recipe.replace(**changes)
        store = stores.get(resolved.path)
        before = len(store.events())
        try:
            compiled, _ = compress_and_compile(store, recipe, mode="events", tools=tools)
        except OverBudget as err:
            if recipe.summarizer.kind == "extractive":
                raise
            # the recipe's summarizer failed or could not do enough: a request is never held
            # up by it, so this turn compacts with the offline summarizer (413 if even that fails)
            logger.warning("conversation %s: the summarizer could not make the request fit (%s); "
                           "compacting this turn offline", resolved.conversation, str(err)[:200])
            offline = recipe.replace(summarizer=SummarizerSettings())
            compiled, _ = compress_and_compile(store, offline, mode="events", tools=tools)
        events = len(store.events()) - before
        new = messages[len(messages) - resolved.appended:] if resolved.appended else []
        tokens_in = sum(blocks_text_tokens(m.content, recipe.encoding) for m in new)
        outgoing = outgoing_responses_body if api == "responses" else outgoing_body
        return _Prepared(resolved, outgoing(body, compiled.request.payload), compiled.tokens, events, tokens_in)

    # -- one request ------------------------------------------------------------------------
    async def handle(self, request: Request, api: Api) -> Response:
        record = RequestRecord(api)
        keys = credentials(request.headers, request.url.query)
        try:
            response = await self._handle(request, api, record, keys)
        except ServeError as err:
            response = self._error(api, record, err.status, err.code, _scrubbed(str(err), keys))
        except OverBudget as err:
            response = self._error(api, record, 413, "context_too_large", _scrubbed(str(err), keys))
        except StoreError as err:
            response = self._error(api, record, 500, "store_error", _scrubbed(str(err), keys))
        except (ValueError, TypeError) as err:  # the library refusing the client's input
            response = self._error(api, record, 400, "bad_request", _scrubbed(str(err), keys))
        except CompactionError as err:
            response = self._error(api, record, 500, "compaction_error", _scrubbed(str(err), keys))
        if not isinstance(response, StreamingResponse):
            self._finish(record)
        return response

    def _error(self, api: str, record: RequestRecord, status: int, code: str, message: str) -> JSONResponse:
        record.status, record.error = status, code
        return JSONResponse(error_body(api, status, code, message), status_code=status)

    def _finish(self, record: RequestRecord) -> None:
        logger.info(record.log_line())
        self.metrics.observe(record)
        try:
            self.ledger.add(record)
        except Exception as err:  # the ledger is bookkeeping: never fail a request over it
            logger.warning("the request ledger refused a row: %s", type(err).__name__)

    async def _read_body(self, request: Request) -> bytes:
        cap = self.settings.limits.max_request_bytes
        too_large = (f"the request body exceeds {cap:,} bytes (the proxy's cap; raise it with "
                     "compaction serve --max-request-mb)")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise BadRequest(too_large, status=413, code="request_too_large")
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > cap:
                raise BadRequest(too_large, status=413, code="request_too_large")
        return bytes(data)

    def _parse(self, api: Api, data: bytes, keys: list[str], header: str | None) -> _Parsed:
        """Parse and scrub the client's history, find its base id (a worker thread: CPU-bound)."""
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as err:
            raise BadRequest(f"the request body is not JSON ({type(err).__name__})") from err
        if not isinstance(body, dict):
            raise BadRequest(f"the request body must be a JSON object; found {type(body).__name__}")
        budget = request_budget(body, self.settings.budget)
        if api == "responses" and body.get("previous_response_id") is not None:
            return _Parsed(body, [], "", budget, passthrough=True)
        # unscrubbed here: the conversation's IncomingMemo scrubs only what it has not seen
        messages = incoming_messages(api, body, strip_cache_control=b"cache_control" in data)
        start = scrub_messages(conversation_start(messages), keys)
        return _Parsed(body, messages, conversation_id(api, start, header_conversation(header)), budget, keys=keys)

    async def _handle(self, request: Request, api: Api, record: RequestRecord, keys: list[str]) -> Response:
        began = time.monotonic()
        data = await self._read_body(request)
        header = request.headers.get(CONVERSATION_HEADER)
        parsed = await anyio.to_thread.run_sync(self._parse, api, data, keys, header)
        body, messages, base, budget = parsed.body, parsed.messages, parsed.base, parsed.budget
        record.stream = body.get("stream") is True
        record.model = body.get("model") if isinstance(body.get("model"), str) else None
        resolved: Resolved | None = None
        if parsed.passthrough:
            # the conversation lives on the upstream (previous_response_id): the proxy sees only
            # its newest items, so the body goes as the client sent it
            logger.info("responses: previous_response_id given: forwarded as sent, not compacted "
                        "(the upstream holds the conversation)")
            record.error = "not_compacted"
            outgoing = data
        else:
            record.conversation, record.messages_in, record.budget = base, len(messages), budget
            async with self.pool.hold(base) as slot:
                prepared = await slot.run(self._prepare, api, base, parsed, budget, slot)
            resolved = prepared.resolved
            record.conversation, record.appended, record.stored = (
                resolved.conversation, resolved.appended, resolved.stored)
            record.tokens_shipped, record.events = prepared.tokens, prepared.events
            record.tokens_in = prepared.tokens_in
            outgoing = prepared.body

        started = time.monotonic()
        record.overhead_ms = (started - began) * 1000
        upstream = await self.upstream.open(_PATHS[api], request.url.query, outgoing, request.headers)
        record.status = upstream.status_code
        headers = response_headers(upstream.headers)
        streamed = upstream.headers.get("content-type", "").startswith("text/event-stream")
        if upstream.status_code >= 300 or not streamed:
            data = await self.upstream.read(upstream, started)
            record.upstream_ms = (time.monotonic() - started) * 1000
            if upstream.status_code < 300:
                await self._record_answer(api, record, resolved, keys, data)
            return Response(data, status_code=upstream.status_code, headers=headers)
        return StreamingResponse(
            self._relay(api, record, resolved, keys, upstream, started),
            status_code=upstream.status_code,
            headers=headers,
        )

    async def _record_answer(
        self, api: Api, record: RequestRecord, resolved: Resolved | None, keys: Sequence[str], data: bytes
    ) -> None:
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError) as err:
            raise UpstreamError("the upstream answered 2xx with a body that is not JSON", code="bad_upstream") from err
        self._usage(record, usage_from_body(api, parsed))
        await self._store_answer(record, resolved, keys, answer_from_body(api, parsed))

    async def _store_answer(
        self, record: RequestRecord, resolved: Resolved | None, keys: Sequence[str], answer: Message | None
    ) -> None:
        if answer is None or resolved is None:
            return
        (answer,) = scrub_messages([answer], keys)
        async with self.pool.hold(resolved.base) as slot:
            record.answer_recorded = await slot.run(
                self.book.record_answer, resolved.conversation, resolved.stored, answer, slot.stores
            )
            # our count of the shipped request beside the provider's usage: what calibration fits
            path = self.book.path_of(resolved.conversation)
            await slot.run(lambda: record_proxy_usage(slot.stores.get(path), record))

    @staticmethod
    def _usage(record: RequestRecord, usage: Usage) -> None:
        for name, value in usage.as_dict().items():
            setattr(record, name, value)

    async def _relay(
        self, api: Api, record: RequestRecord, resolved: Resolved | None, keys: Sequence[str],
        upstream: httpx.Response, started: float,
    ) -> AsyncIterator[bytes]:
        assembler = SSEAssembler(api)
        stored = False

        async def store() -> None:
            record.upstream_ms = (time.monotonic() - started) * 1000
            self._usage(record, assembler.usage)
            try:
                await self._store_answer(record, resolved, keys, assembler.answer())
            except CompactionError as err:
                record.error = "answer_not_stored"
                logger.warning("conversation %s: the answer was not stored: %s", record.conversation,
                               _scrubbed(str(err), keys))

        try:
            try:
                async for chunk in self.upstream.relay(upstream, started):
                    assembler.feed(chunk)
                    if assembler.ended and not stored:
                        # stored before the client sees the last event: its next request,
                        # sent as soon as it does, finds the answer in the store
                        stored = True
                        await store()
                    yield chunk
            except UpstreamError as err:
                record.error = err.code
                yield _stream_error(api, err.code, _scrubbed(str(err), keys))
                return
            if not stored:
                await store()
        finally:
            self._finish(record)


def create_app(settings: ServeSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> Starlette:
    """Return the proxy as an ASGI application (serve it with uvicorn, or drive it with httpx).

    Args:
        settings: upstream, store directory, recipe, budget and bounds.
        transport: an httpx transport for the upstream side (tests); default: the network.

    Raises:
        InvalidArgument: the upstream is not an http(s) base URL.
        OSError: the store directory cannot be created.
    """
    proxy = _Proxy(settings, transport)

    async def chat_completions(request: Request) -> Response:
        return await proxy.handle(request, "openai")

    async def messages(request: Request) -> Response:
        return await proxy.handle(request, "anthropic")

    async def responses(request: Request) -> Response:
        return await proxy.handle(request, "responses")

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        return Response(proxy.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.close()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.proxy = proxy
    return app
