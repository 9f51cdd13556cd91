"""Gemini CLI ``--output-format stream-json`` (JSONL, one event a line).

The events (``JsonStreamEventType`` in google-gemini/gemini-cli,
``packages/core/src/output/types.ts``; every event has ``type`` and ``timestamp``):

* ``init``: ``session_id``, ``model`` -> the model of the messages that follow (meta);
* ``message``: ``role`` ``user`` or ``assistant``, ``content`` a string; assistant text comes
  as chunks with ``delta: true``: consecutive chunks are joined into one text block, and the
  tool calls the model makes right after belong to the same assistant message;
* ``tool_use``: ``tool_name``, ``tool_id``, ``parameters`` -> a ``tool_use`` block;
* ``tool_result``: ``tool_id``, ``status`` (``success`` / ``error``), ``output``, ``error``
  (``type``, ``message``) -> a user message holding a ``tool_result`` (``is_error`` when the
  status is ``error``; the error's message is kept in the result's text);
* ``error`` (non-fatal warnings and system errors) and ``result`` (the final status and
  statistics) make no message: they are kept in the ``meta`` of the message before them
  (``gemini_errors``, ``gemini_result``), so nothing the stream said is lost.

A line with another ``type`` is skipped, and the report names it (one note per type: how
many, and their lines).  A ``message`` without string ``content``, a
``tool_use`` without ``tool_name`` / ``tool_id`` or a ``tool_result`` without ``tool_id`` is
malformed.

The same format name reads Gemini CLI's chat recordings (``chats/session-*.json``, one JSON
document): see :mod:`compaction.formats._gemini_chat`.
"""

from __future__ import annotations

from typing import Any

from ..blocks import Block
from ._common import (
    Context,
    Draft,
    Malformed,
    first_line_is_object,
    iter_jsonl,
    line_list,
    load_json_document,
    parse_arguments,
    tool_result,
    tool_use,
)
from ._gemini_chat import is_chat_recording, parse_recording
from ._sniff import Sample, TranscriptFormat

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "gemini-cli"


def _string(event: dict[str, Any], key: str) -> str:
    value = event.get(key)
    if not isinstance(value, str) or not value:
        raise Malformed(f"a {event['type']} event needs a string {key!r}")
    return value


def _result(event: dict[str, Any]) -> Block:
    output = event.get("output")
    text = output if isinstance(output, str) else ""
    error = event.get("error")
    failed = event.get("status") == "error" or bool(error)
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type")
        note = (
            f"Error ({kind}): {error['message']}" if isinstance(kind, str) else f"Error: {error['message']}"
        )
        text = f"{text}\n{note}" if text else note
    return tool_result(_string(event, "tool_id"), text, failed)


class _Stream:
    """Turn events into drafts, joining assistant chunks and the calls that follow them."""

    def __init__(self) -> None:
        self.drafts: list[Draft] = []
        self.model: str | None = None
        self.open: Draft | None = None  # the assistant message chunks and calls still join
        self.early: dict[str, Any] = {}  # notes from before the first message
        self.unknown: dict[str, list[int]] = {}  # an event type this reader does not know -> its lines

    def _assistant(self, line: int, timestamp: Any) -> Draft:
        if self.open is None:
            self.open = Draft("assistant", [], line=line)
            if self.model:
                self.open.meta["model"] = self.model
            if isinstance(timestamp, str):
                self.open.meta["timestamp"] = timestamp
            self.drafts.append(self.open)
        return self.open

    def _note(self, key: str, value: Any) -> None:
        """Keep an event that makes no message in the meta of the message before it (of the
        first message, for an event before any)."""
        target = self.drafts[-1].meta if self.drafts else self.early
        target.setdefault(key, []).append(value)

    def read(self, line: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        timestamp = event.get("timestamp")
        if kind == "init":
            model = event.get("model")
            self.model = model if isinstance(model, str) else self.model
        elif kind == "message":
            content = event.get("content")
            if not isinstance(content, str):
                raise Malformed("a message event needs a string 'content'")
            role = event.get("role")
            if role == "assistant":
                draft = self._assistant(line, timestamp)
                last = draft.content[-1] if draft.content else None
                if last is not None and last["type"] == "text" and event.get("delta"):
                    draft.content[-1] = {"type": "text", "text": last["text"] + content}
                elif content:
                    draft.content.append({"type": "text", "text": content})
            elif role == "user":
                self.open = None
                draft = Draft("user", [{"type": "text", "text": content}] if content else [], line=line)
                if isinstance(timestamp, str):
                    draft.meta["timestamp"] = timestamp
                self.drafts.append(draft)
            else:
                raise Malformed(f"a message event needs role 'user' or 'assistant', found {role!r}")
        elif kind == "tool_use":
            block = tool_use(
                _string(event, "tool_id"),
                _string(event, "tool_name"),
                parse_arguments(event.get("parameters")),
            )
            self._assistant(line, timestamp).content.append(block)
        elif kind == "tool_result":
            block = _result(event)
            self.open = None
            draft = Draft("user", [block], line=line)
            if isinstance(timestamp, str):
                draft.meta["timestamp"] = timestamp
            self.drafts.append(draft)
        elif kind == "error":
            self._note("gemini_errors", {k: event[k] for k in ("severity", "message") if k in event})
        elif kind == "result":
            self.open = None
            self._note("gemini_result", {k: event[k] for k in ("status", "error", "stats") if k in event})
        else:
            self.unknown.setdefault(str(kind), []).append(line)


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse a Gemini CLI stream-json transcript (JSONL) or chat recording (a JSON document
    with ``sessionId``, ``projectHash`` and ``messages``) into drafts."""
    if "\n" not in text.strip() and first_line_is_object(text):  # one line: a compact recording?
        document = load_json_document(text, ctx)
        if is_chat_recording(document):
            return parse_recording(document, ctx)
    elif not first_line_is_object(text):
        document = load_json_document(text, ctx)
        if not is_chat_recording(document):
            raise ctx.error(
                "expected Gemini CLI stream-json events (JSONL) or a chat recording (an object "
                "with 'sessionId', 'projectHash' and a 'messages' list of user / gemini records)"
            )
        return parse_recording(document, ctx)
    stream = _Stream()
    for line, event in iter_jsonl(text, ctx):
        try:
            stream.read(line, event)
        except Malformed as err:
            ctx.problem(str(err), line=line)
    if stream.drafts and stream.early:
        stream.drafts[0].meta.update(stream.early)
    for kind, lines in stream.unknown.items():
        ctx.note(
            f"{len(lines)} event(s) of type {kind!r} (not one this reader knows) skipped: {line_list(lines)}",
            line=lines[0],
        )
    return stream.drafts


def _is_gemini_event(record: dict[str, Any]) -> bool:
    kind = record.get("type")
    if kind == "init":
        return "session_id" in record and "model" in record
    if kind == "tool_use":
        return "tool_name" in record and "tool_id" in record
    if kind == "tool_result":
        return "tool_id" in record and ("status" in record or "output" in record)
    if kind == "message":
        return (
            record.get("role") in ("user", "assistant")
            and isinstance(record.get("content"), str)
            and ("delta" in record or "timestamp" in record)
            and not ({"id", "status"} & record.keys())  # an OpenAI Responses message item
        )
    return False


def sniff(sample: Sample) -> bool:
    """Claim JSONL whose first lines hold a Gemini CLI stream-json event: ``init`` with
    ``session_id`` and ``model``, ``tool_use`` with ``tool_name`` and ``tool_id``,
    ``tool_result`` with ``tool_id``, or a ``message`` with a string ``content``; or a
    chat recording document (:func:`~compaction.formats._gemini_chat.is_chat_recording`)."""
    if any(_is_gemini_event(record) for record in sample.entries):
        return True
    return is_chat_recording(sample.document)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=45,
    sniff=sniff,
    parse=parse,
    holds=(
        "a Gemini CLI stream-json 'message', 'tool_use' or 'tool_result' event, or a chat "
        "recording's 'messages' of user / gemini records"
    ),
)
