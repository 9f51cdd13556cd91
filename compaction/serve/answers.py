"""The upstream's answer as a message, and its reported usage, from a JSON body or an SSE stream.

OpenAI Chat: a body's ``choices[0].message``; a stream's ``choices[0].delta`` pieces (content
appended, tool calls assembled by ``index``, arguments concatenated), complete at
``data: [DONE]`` or a ``finish_reason``; usage from ``usage`` (a stream carries it when the
client asked for ``stream_options.include_usage``).

Anthropic Messages: a body's ``content``; a stream's ``content_block_start`` /
``content_block_delta`` (``text_delta``, ``input_json_delta``, ``thinking_delta``,
``signature_delta``) / ``content_block_stop`` events, complete at ``message_stop``; usage from
``message_start`` and ``message_delta``.

OpenAI Responses: a body's ``output`` items (read by the Responses parser,
:func:`compaction.loop.from_responses`); a stream's ``response.completed`` event, which carries
the whole response (its output items and usage); other events pass by unread.

Nothing here trusts the upstream: a malformed event is skipped, an answer that does not
assemble is ``None`` (then nothing is recorded), and the SSE buffer is bounded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..blocks import Block, Message
from ..formats import parse_messages
from ..loop import from_responses

__all__ = ["Usage", "answer_from_body", "usage_from_body", "SSEAssembler", "MAX_EVENT_BYTES"]

#: The largest single SSE event kept for assembly (bytes); a larger one is skipped.
MAX_EVENT_BYTES = 8 * 1024 * 1024


@dataclass
class Usage:
    """Tokens the provider reported for one request (``None``: not reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        """Return the counts as a dict (for the ledger and logs)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _merge_usage(usage: Usage, api: str, raw: Any) -> None:
    if not isinstance(raw, dict):
        return
    names: tuple[tuple[str, str], ...]
    if api == "responses":
        details = raw.get("input_tokens_details")
        raw = {**raw, "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None}
        names = (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                 ("cached_tokens", "cache_read_tokens"))
    elif api == "openai":
        details = raw.get("prompt_tokens_details")
        raw = {**raw, "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None}
        names = (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens"),
                 ("cached_tokens", "cache_read_tokens"))
    else:
        names = (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                 ("cache_read_input_tokens", "cache_read_tokens"),
                 ("cache_creation_input_tokens", "cache_write_tokens"))
    for key, attr in names:
        value = _int(raw.get(key))
        if value is not None:
            setattr(usage, attr, value)


def usage_from_body(api: str, body: Any) -> Usage:
    """Return the usage a non-streamed answer reports (empty when it reports none)."""
    usage = Usage()
    if isinstance(body, dict):
        _merge_usage(usage, api, body.get("usage"))
    return usage


def _openai_message(message: Any) -> Message | None:
    if not isinstance(message, dict):
        return None
    message = {k: v for k, v in message.items() if v is not None}
    message["role"] = "assistant"
    message.setdefault("content", "")
    try:
        parsed = parse_messages([message], "openai")
    except ValueError:
        return None
    if len(parsed) != 1 or not parsed[0].content:
        return None
    return parsed[0]


def _anthropic_message(content: Any) -> Message | None:
    if not isinstance(content, list) or not content:
        return None
    if not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content):
        return None
    try:
        return Message("assistant", tuple(content))
    except ValueError:
        return None


def _responses_message(output: Any) -> Message | None:
    """The model's turn of a Responses ``output`` list, read by the Responses parser, as one message."""
    if not isinstance(output, list) or not output:
        return None
    try:
        messages = from_responses(output)
    except ValueError:
        return None
    blocks = [b for m in messages if m.role == "assistant" for b in m.content]
    if not blocks or any(m.role != "assistant" for m in messages):
        return None
    return Message("assistant", tuple(blocks), None, None, dict(messages[0].meta))


def answer_from_body(api: str, body: Any) -> Message | None:
    """Return the assistant message of a non-streamed answer, or ``None`` when it has none.

    ``api``: ``"openai"`` (Chat ``choices[0].message``), ``"anthropic"`` (``content``) or
    ``"responses"`` (the ``output`` items of a response whose ``status`` is ``completed``).
    """
    if not isinstance(body, dict):
        return None
    if api == "responses":
        if body.get("status", "completed") != "completed":
            return None
        return _responses_message(body.get("output"))
    if api == "openai":
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        return _openai_message(choices[0].get("message"))
    return _anthropic_message(body.get("content"))


@dataclass
class _ToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class SSEAssembler:
    """Feed it the stream's bytes as they pass; read :meth:`answer` and :attr:`usage` at the end.

    Args:
        api: ``"openai"`` or ``"anthropic"``.
    """

    def __init__(self, api: str) -> None:
        self.api = api
        self.usage = Usage()
        self.complete = False
        #: the stream's last event arrived (OpenAI ``[DONE]``, Anthropic ``message_stop``): the
        #: answer can be stored before that event reaches the client.
        self.ended = False
        self.events = 0
        self._buffer = bytearray()
        self._skipping = False
        # OpenAI
        self._text: list[str] = []
        self._calls: dict[int, _ToolCall] = {}
        self._finished = False
        # OpenAI Responses
        self._response: dict[str, Any] | None = None
        # Anthropic
        self._blocks: dict[int, Block] = {}
        self._partial: dict[int, list[str]] = {}

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream (any split; events may span chunks)."""
        self._buffer += chunk.replace(b"\r\n", b"\n")
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                if len(self._buffer) > MAX_EVENT_BYTES:  # an event too large to assemble
                    self._buffer.clear()
                    self._skipping = True
                return
            event = bytes(self._buffer[:end])
            del self._buffer[: end + 2]
            if self._skipping:  # the tail of the oversized event
                self._skipping = False
                continue
            self._event(event)

    def _event(self, raw: bytes) -> None:
        data = [line[5:].lstrip() for line in raw.split(b"\n") if line.startswith(b"data:")]
        if not data:
            return
        payload = b"\n".join(data)
        self.events += 1
        if payload.strip() == b"[DONE]":
            self.complete = self.complete or self._finished
            self.ended = True
            return
        try:
            value = json.loads(payload)
        except ValueError:
            return
        if isinstance(value, dict):
            if self.api == "openai":
                self._openai(value)
            elif self.api == "responses":
                self._responses(value)
            else:
                self._anthropic(value)

    # -- OpenAI -----------------------------------------------------------------------------
    def _openai(self, chunk: dict[str, Any]) -> None:
        _merge_usage(self.usage, "openai", chunk.get("usage"))
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if not isinstance(call, dict):
                    continue
                index = call.get("index", 0)
                slot = self._calls.setdefault(index if isinstance(index, int) else 0, _ToolCall())
                if isinstance(call.get("id"), str):
                    slot.id = call["id"]
                function = call.get("function")
                if isinstance(function, dict):
                    if isinstance(function.get("name"), str):
                        slot.name += function["name"]
                    if isinstance(function.get("arguments"), str):
                        slot.arguments.append(function["arguments"])
        if choice.get("finish_reason"):
            self._finished = True
            self.complete = True

    # -- OpenAI Responses -------------------------------------------------------------------
    def _responses(self, event: dict[str, Any]) -> None:
        """``response.completed`` carries the whole response (output items and usage)."""
        kind = event.get("type")
        if kind in ("response.completed", "response.incomplete", "response.failed", "error"):
            self.ended = True
            response = event.get("response")
            if isinstance(response, dict):
                _merge_usage(self.usage, "responses", response.get("usage"))
                if kind == "response.completed":
                    self._response = response
                    self.complete = True

    # -- Anthropic --------------------------------------------------------------------------
    def _anthropic(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            _merge_usage(self.usage, "anthropic", event["message"].get("usage"))
        elif kind == "message_delta":
            _merge_usage(self.usage, "anthropic", event.get("usage"))
        elif kind == "message_stop":
            self.complete = True
            self.ended = True
        index = event.get("index")
        if not isinstance(index, int):
            return
        if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self._blocks[index] = dict(event["content_block"])
            self._partial[index] = []
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict) and index in self._blocks:
            block, delta = self._blocks[index], event["delta"]
            what = delta.get("type")
            if what == "text_delta" and isinstance(delta.get("text"), str):
                block["text"] = str(block.get("text", "")) + delta["text"]
            elif what == "thinking_delta" and isinstance(delta.get("thinking"), str):
                block["thinking"] = str(block.get("thinking", "")) + delta["thinking"]
            elif what == "signature_delta" and isinstance(delta.get("signature"), str):
                block["signature"] = str(block.get("signature", "")) + delta["signature"]
            elif what == "input_json_delta" and isinstance(delta.get("partial_json"), str):
                self._partial[index].append(delta["partial_json"])

    # -- the answer -------------------------------------------------------------------------
    def answer(self) -> Message | None:
        """Return the assembled assistant message, or ``None`` (incomplete, empty or malformed)."""
        if not self.complete:
            return None
        if self.api == "responses":
            return answer_from_body("responses", self._response)
        if self.api == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
            calls = [self._calls[i] for i in sorted(self._calls)]
            if calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "".join(c.arguments)}}
                    for c in calls
                ]
            return _openai_message(message)
        blocks = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if block.get("type") == "tool_use" and self._partial.get(index):
                try:
                    block["input"] = json.loads("".join(self._partial[index]))
                except ValueError:
                    return None
            blocks.append(block)
        return _anthropic_message(blocks)
