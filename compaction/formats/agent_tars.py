"""Agent TARS event stream (a JSON array of events; also accepted as JSONL, one event a line).

Each event has ``id``, ``type`` and ``timestamp`` (epoch milliseconds).  The events that make
the model conversation:

* ``user_message``: ``content`` a string or OpenAI-style parts (``text``, ``image_url`` with
  base64 ``data:`` URIs -> image blocks);
* ``environment_input``: input the environment gave the model (same content shapes) -> a user
  message;
* ``assistant_thinking_message``: final reasoning text -> a ``thinking`` block (no signature)
  at the start of the next assistant message;
* ``assistant_message``: ``content`` text plus ``toolCalls`` (Chat Completions tool calls)
  -> text and ``tool_use`` blocks;
* ``tool_call``: the execution record of a call the assistant message already announced: a
  duplicate, ignored; a ``tool_call`` no assistant message announced becomes its own
  assistant ``tool_use``;
* ``tool_result``: ``toolCallId``, ``content`` (a string, parts, or any JSON value, kept as
  JSON text), ``error`` -> a user message holding a ``tool_result`` (``is_error`` if ``error``).

Streaming deltas (``*_streaming_*``), ``system`` log lines, run and plan markers and any other
type are ignored.  Agent TARS reuses one tool-call id across turns (the example uses one id
for all six calls); ``_common.uniquify_tool_ids`` renames the later uses and their results
consistently (``<id>_2`` ...).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..blocks import Block
from ._common import (
    Context,
    Draft,
    Malformed,
    convert_items,
    first_line_is_object,
    iter_jsonl,
    load_json_document,
    text_blocks,
    tool_result,
    tool_use,
)
from ._sniff import Sample, TranscriptFormat
from .openai import OpenAIConverter, content_parts

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "agent-tars"

#: Event types that only Agent TARS streams have (a chat message has a ``role`` instead).
_EVENTS = (
    "user_message",
    "assistant_message",
    "tool_call",
    "tool_result",
    "environment_input",
    "assistant_thinking_message",
    "assistant_streaming_message",
    "agent_run_start",
)
_FIRST_TYPE = re.compile(r'"type"\s*:\s*"([a-z_]+)"')
_ROLE_KEY = re.compile(r'"role"\s*:')


def _result_content(content: Any) -> str | list[Block]:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and "type" in p for p in content):
        return content_parts(content)
    return json.dumps(content, ensure_ascii=False)


def _events(text: str, ctx: Context) -> list[tuple[Any, int | None, str | None]]:
    if first_line_is_object(text) and text.strip().count("\n") > 0:
        return [(event, line, None) for line, event in iter_jsonl(text, ctx)]
    document = load_json_document(text, ctx)
    if isinstance(document, dict) and isinstance(document.get("events"), list):
        document = document["events"]
    if not isinstance(document, list):
        raise Malformed(f"expected a JSON array of events, found {type(document).__name__}")
    return [(event, None, f"events[{index}]") for index, event in enumerate(document)]


def _tool_result(event: dict[str, Any]) -> Block:
    call_id = event.get("toolCallId")
    if not isinstance(call_id, str):
        raise Malformed("a tool_result event needs a string 'toolCallId'")
    content = _result_content(event.get("content"))
    error = event.get("error")
    if error and isinstance(content, list):
        content = content + text_blocks(f"Error: {error}")
    elif error:
        content = f"{content}\nError: {error}" if content else f"Error: {error}"
    return tool_result(call_id, content, bool(error))


class _EventReader:
    """Turn events into drafts one at a time, keeping what spans events (thinking, calls)."""

    def __init__(self) -> None:
        self._converter = OpenAIConverter()
        self._announced: dict[str, int] = {}  # tool-call id -> announced calls not yet seen as tool_call
        self._thinking: list[Block] = []

    def read(self, event: Any) -> Draft | None:
        """Return the draft of one event, or ``None`` for an event that makes no message.

        Raises:
            Malformed: the event is not an object with a string ``type``, or is malformed.
        """
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise Malformed("an event must be an object with a string 'type'")
        kind = event["type"]
        if kind in ("user_message", "environment_input"):
            draft = Draft("user", content_parts(event.get("content")))
            if kind == "environment_input":
                draft.meta["kind"] = "environment_input"
            return draft
        if kind == "assistant_thinking_message":
            self._thinking.extend(
                {"type": "thinking", "thinking": b["text"], "signature": ""}
                for b in text_blocks(event.get("content"))
            )
            return None
        if kind == "assistant_message":
            return self._assistant(event)
        if kind == "tool_call":
            return self._tool_call(event)
        if kind == "tool_result":
            return Draft("user", [_tool_result(event)])
        return None

    def _assistant(self, event: dict[str, Any]) -> Draft:
        message = {"role": "assistant", "content": event.get("content"), "tool_calls": event.get("toolCalls")}
        draft = self._converter.convert(message)
        draft.content[:0] = self._thinking
        self._thinking = []
        for block in draft.content:
            if block["type"] == "tool_use":
                self._announced[block["id"]] = self._announced.get(block["id"], 0) + 1
        return draft

    def _tool_call(self, event: dict[str, Any]) -> Draft | None:
        call_id = event.get("toolCallId")
        if not isinstance(call_id, str) or not isinstance(event.get("name"), str):
            raise Malformed("a tool_call event needs string 'toolCallId' and 'name'")
        if self._announced.get(call_id, 0) > 0:
            self._announced[call_id] -= 1
            return None
        arguments = event.get("arguments")
        return Draft(
            "assistant", [tool_use(call_id, event["name"], arguments if isinstance(arguments, dict) else {})]
        )


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse an Agent TARS event stream into drafts."""
    try:
        events = _events(text, ctx)
    except Malformed as err:
        ctx.problem(str(err))
        return []
    drafts: list[Draft] = []
    for event, draft in convert_items(events, ctx, _EventReader().read):
        if isinstance(event.get("id"), str):
            draft.source_id = event["id"]
        if event.get("timestamp") is not None:
            draft.meta["timestamp"] = event["timestamp"]
        drafts.append(draft)
    return drafts


#: Keys of other streams' events of the same type names (Gemini CLI's ``tool_result`` carries
#: ``tool_id``, Agent TARS's ``toolCallId``), which no Agent TARS event has.
_FOREIGN_KEYS = frozenset({"role", "tool_id", "tool_name", "session_id"})


def _is_event(value: dict[str, Any]) -> bool:
    return value.get("type") in _EVENTS and not (_FOREIGN_KEYS & value.keys())


def _head_is_events(text: str) -> bool:
    """Whether a JSON array's first ``"type"`` (in its first 4 KiB) is an event type, with no
    ``"role"`` before it."""
    start = text[:4096]
    match = _FIRST_TYPE.search(start) if start.startswith("[") else None
    return match is not None and match.group(1) in _EVENTS and not _ROLE_KEY.search(start[: match.start()])


def sniff(sample: Sample) -> bool:
    """Claim Agent TARS events (a ``type`` such as ``user_message`` or ``tool_call`` and no
    ``role``): JSONL lines, the head of a JSON array, or an array (or ``events`` list)."""
    if any(_is_event(entry) for entry in sample.entries) or _head_is_events(sample.text):
        return True
    items = sample.items
    return items is not None and any(_is_event(item) for item in items)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=40,
    sniff=sniff,
    parse=parse,
    holds="an Agent TARS conversation event (user_message, assistant_message, tool_result ...)",
)
