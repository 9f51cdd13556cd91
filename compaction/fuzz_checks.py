"""Independent checks of what leaves the engine: request bodies, the store, raised errors.

The checks read only the serialized request bytes (``payload``), the store and the raised
errors.  Nothing here calls the engine's own counting or wire helpers, except the image
pricing module, which the budget check uses on purpose (images are priced from pixel size by
the provider formula, never by their text).  ``compaction fuzz`` and the property tests in
``tests/`` share them; each check raises ``AssertionError`` with what is wrong.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from .blocks import iter_strings
from .errors import ImageError
from .imageinfo import image_size
from .summarizers import ExtractiveSummarizer
from .tokens.encodings import get_encoding
from .tokens.image_pricing import price_image
from .types import RequestFormatName

__all__ = [
    "png_bytes",
    "png_b64",
    "CapturingSummarizer",
    "DATA_URI",
    "payload_json",
    "iter_strings",
    "b64_tolerant",
    "WireImage",
    "wire_images",
    "check_tool_pairing",
    "check_provider_grammar",
    "independent_tokens",
    "PLACEHOLDER",
    "placeholders_in",
    "store_snapshot",
]

# -- images ----------------------------------------------------------------------------------


def png_bytes(width: int, height: int, seed: int = 0) -> bytes:
    """Return a valid grayscale PNG of ``width`` x ``height`` px, built by hand."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes([(seed + x + y) % 256 for x in range(width)]) for y in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def png_b64(width: int, height: int, seed: int = 0) -> str:
    return base64.b64encode(png_bytes(width, height, seed)).decode("ascii")


# -- capture ---------------------------------------------------------------------------------


@dataclass
class CapturingSummarizer:
    """Record every summarizer request's bytes (what an HTTP summarizer sends), then extract."""

    encoding: str = "o200k_base"
    name: str = "capturing"
    request_format: RequestFormatName = "openai"
    model: str | None = None
    max_output_tokens: int | None = None
    requests: list[tuple[str, bytes]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inner = ExtractiveSummarizer(self.encoding)

    def summarize(self, request: Any, *, kind: Any) -> Any:
        self.requests.append((kind, bytes(request.payload)))
        self.tokens.append(request.tokens)
        return self.inner.summarize(request, kind=kind)

    def close(self) -> None:
        self.inner.close()


# -- reading payloads ------------------------------------------------------------------------

DATA_URI = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64,[A-Za-z0-9+/]+={0,2}")


def payload_json(payload: bytes) -> dict[str, Any]:
    body = json.loads(payload.decode("utf-8"))
    assert isinstance(body, dict)
    return body



def b64_tolerant(text: str) -> bytes | None:
    """Decode base64 that may lack its padding; ``None`` when it cannot be base64 at all."""
    core = text.rstrip("=")
    if len(core) % 4 == 1:
        return None
    return base64.b64decode(core + "=" * (-len(core) % 4), validate=True)


@dataclass(frozen=True)
class WireImage:
    """One image input found in a body: its bytes (``None`` for a URL) and its URL."""

    data: bytes | None
    url: str | None


def _chat_shape(body: dict[str, Any], format: str = "openai") -> tuple[dict[str, Any], str]:
    """Read an OpenAI Responses body (``input`` items) as the Chat Completions messages it stands for."""
    if "input" in body and "messages" not in body:
        from .outputs.openai_responses import chat_view

        return chat_view(body), "openai"
    return body, format


def wire_images(body: dict[str, Any]) -> list[WireImage]:
    """Return every image input of a body, in document order.

    OpenAI ``image_url`` parts, Anthropic ``image`` blocks (anywhere, nested in tool results
    too), and any ``data:image/...;base64,`` inside any other string.
    """
    found: list[WireImage] = []

    def from_url(url: str) -> WireImage:
        if url.startswith("data:"):
            data = b64_tolerant(url.split(",", 1)[1])
            assert data is not None, "an undecodable data: URI shipped as an image"
            return WireImage(data, None)
        return WireImage(None, url)

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            kind = value.get("type")
            if kind == "image_url":
                image_url = value["image_url"]
                found.append(from_url(image_url["url"] if isinstance(image_url, dict) else image_url))
                return
            if kind == "image" and isinstance(value.get("source"), dict):
                source = value["source"]
                if source.get("type") == "base64":
                    found.append(WireImage(base64.b64decode(source["data"]), None))
                else:
                    found.append(WireImage(None, source.get("url")))
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and ";base64," in value:
            for match in DATA_URI.finditer(value):
                found.append(from_url(match.group(0)))

    body, _ = _chat_shape(body)
    walk(body.get("messages", []))
    walk(body.get("system", ""))
    return found


def check_tool_pairing(body: dict[str, Any], format: str) -> None:
    """Assert every tool call has its result and every result its call, in the wire shape."""
    body, format = _chat_shape(body, format)
    messages = body["messages"]
    if format == "openai":
        for index, message in enumerate(messages):
            if message["role"] == "assistant":
                for call in message.get("tool_calls") or []:
                    answered = False
                    for later in messages[index + 1 :]:
                        if later["role"] == "tool" and later["tool_call_id"] == call["id"]:
                            answered = True
                            break
                        if later["role"] == "assistant":
                            break
                    assert answered, f"tool call {call['id']} has no following tool message"
            if message["role"] == "tool":
                earlier_calls = [
                    call["id"]
                    for earlier in messages[:index]
                    if earlier["role"] == "assistant"
                    for call in earlier.get("tool_calls") or []
                ]
                assert message["tool_call_id"] in earlier_calls, f"tool message {message['tool_call_id']} has no call"
        return
    assert format == "anthropic"
    for index, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        uses = [b["id"] for b in content if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
        if uses:
            assert message["role"] == "assistant"
            assert index + 1 < len(messages), f"tool_use {uses} in the last message"
            following = messages[index + 1]
            assert following["role"] == "user"
            answered_ids = {b["tool_use_id"] for b in following["content"] if b.get("type") == "tool_result"}
            assert set(uses) <= answered_ids, f"tool_use {set(uses) - answered_ids} not answered in the next message"
        if results:
            assert message["role"] == "user"
            assert index > 0, "tool_result in the first message"
            previous = messages[index - 1]
            called = {b["id"] for b in previous["content"] if b.get("type") == "tool_use"}
            assert set(results) <= called, f"tool_result {set(results) - called} without a tool_use just before"


def check_provider_grammar(body: dict[str, Any], format: str) -> None:
    """Assert a body is one the provider accepts, read independently of the engine's own check.

    OpenAI Chat: every ``tool_calls`` id is answered by the ``tool`` messages that immediately
    follow its assistant message, once each, nothing in between; a ``tool`` message answers a
    call of that assistant message; tool call ids are unique; image parts only in user
    messages.  Anthropic Messages: the first turn is the user's, turns alternate, images only
    in user turns (tool results included), every ``tool_use`` is answered in the next user
    turn by ``tool_result`` blocks that come first, every result answers a call of the turn
    before, ids are unique.  OpenAI Responses: read as the Chat messages it stands for.
    """
    body, format = _chat_shape(body, format)
    messages = body["messages"]
    if format == "openai":
        ids: list[str] = []
        open_calls: list[str] = []
        for index, message in enumerate(messages):
            role = message["role"]
            assert role in ("system", "user", "assistant", "tool"), role
            if role == "tool":
                assert message["tool_call_id"] in open_calls, f"message {index}: stray tool message"
                open_calls.remove(message["tool_call_id"])
                assert isinstance(message["content"], str)
                continue
            assert not open_calls, f"message {index}: {role} message before the results of {open_calls}"
            if role != "user" and isinstance(message.get("content"), list):
                assert all(p.get("type") == "text" for p in message["content"]), f"message {index}: image in {role}"
            calls = [c["id"] for c in message.get("tool_calls") or []]
            ids.extend(calls)
            open_calls = list(calls)
        assert not open_calls, f"unanswered calls at the end: {open_calls}"
        assert len(ids) == len(set(ids)), f"repeated tool call ids: {ids}"
        return
    assert format == "anthropic"
    assert not messages or messages[0]["role"] == "user"
    uses_all: list[str] = []
    for index, message in enumerate(messages):
        if index:
            assert messages[index - 1]["role"] != message["role"], f"message {index}: same role twice"
        content = message["content"] if isinstance(message["content"], list) else []
        kinds = [b.get("type") for b in content]
        unsigned = [b for b in content if b.get("type") == "thinking" and not b.get("signature")]
        assert not unsigned, f"message {index}: a thinking block without a signature"
        if message["role"] == "assistant":
            assert "image" not in kinds and "tool_result" not in kinds, f"message {index}: {kinds}"
            uses = [b["id"] for b in content if b.get("type") == "tool_use"]
            uses_all.extend(uses)
            following = messages[index + 1]["content"] if index + 1 < len(messages) else []
            answered = [b["tool_use_id"] for b in following if isinstance(b, dict) and b.get("type") == "tool_result"]
            assert sorted(answered) == sorted(uses), f"message {index}: calls {uses}, next turn answers {answered}"
        else:
            assert "tool_use" not in kinds
            results = kinds.count("tool_result")
            assert kinds[:results] == ["tool_result"] * results, f"message {index}: results not first"
            if results:
                previous = messages[index - 1]["content"] if index else []
                called = {b["id"] for b in previous if b.get("type") == "tool_use"}
                assert {b["tool_use_id"] for b in content if b.get("type") == "tool_result"} <= called
    assert len(uses_all) == len(set(uses_all)), f"repeated tool_use ids: {uses_all}"


# -- independent token count -----------------------------------------------------------------

_STRUCTURAL_KEYS = frozenset({"type", "media_type"})


def independent_tokens(body: dict[str, Any], model: str) -> int:
    """Count a body's tokens without the engine's counter.

    o200k tokens of every string value of the messages (roles, ids, names, arguments, texts;
    the wire ``type`` tags and image sources left out), plus 3 per message and 3 for the
    request; every image input priced from its pixel size by the pricing module (a URL image
    at the model's maximum).
    """
    body, _ = _chat_shape(body)
    encoding = get_encoding("o200k_base")
    total = 3

    def strings(value: Any, key: str | None = None) -> int:
        if isinstance(value, str):
            if key in _STRUCTURAL_KEYS:
                return 0
            return len(encoding.encode_ordinary(DATA_URI.sub("", value)))
        if isinstance(value, dict):
            if value.get("type") in ("image", "image_url"):
                return 0
            return sum(strings(v, k) for k, v in value.items())
        if isinstance(value, list):
            return sum(strings(v) for v in value)
        return 0

    if body.get("system"):
        total += 3 + strings(body["system"])
    for message in body["messages"]:
        total += 3 + strings(message)
    for image in wire_images(body):
        if image.data is None:
            total += price_image(None, None, model).tokens
        else:
            width: int | None
            height: int | None
            try:
                _media, width, height = image_size(image.data)
            except ImageError:  # an unreadable header is charged the model's maximum
                width = height = None
            total += price_image(width, height, model).tokens
    return total


# -- placeholders ----------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"\[image not shown: (?P<what>.*?); reason: (?P<reason>.*?)\. The image is kept in the store\.\]")


def placeholders_in(body: dict[str, Any]) -> list[re.Match[str]]:
    return [m for s in iter_strings(body) for m in PLACEHOLDER.finditer(s)]


# -- the store -------------------------------------------------------------------------------


def store_snapshot(store: Any) -> tuple[list[tuple[Any, ...]], dict[str, str]]:
    """Return the stored messages (role, content, seq) and the sha256 of every blob's bytes."""
    messages = [(m.seq, m.role, json.dumps(list(m.content), sort_keys=True)) for m in store.messages()]
    blobs = {sha: hashlib.sha256(store.blob(sha)).hexdigest() for sha in store.blob_hashes()}
    return messages, blobs
