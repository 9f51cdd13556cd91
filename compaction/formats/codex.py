"""Codex CLI rollout JSONL (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

One record a line: ``{"timestamp", "type", "payload"}``.  ``session_meta`` describes the
session, ``turn_context`` the model of the turns that follow, ``response_item`` the items of
the model conversation (Responses API items), ``event_msg`` a UI event stream that
duplicates them, ``compacted`` a summary Codex wrote when it compacted (kept as
``meta["codex_compaction"]`` of the next message; no message is dropped).

``event_msg`` records are read for one thing only: a ``user_message`` event whose text no
``response_item`` user message of the same turn carries (a rollout that recorded the ask as
an event alone, as Codex Desktop 0.128 rollouts do) becomes the user message it stands for
(``meta["codex_event"] = "user_message"``), its ``images`` (data URIs) and ``local_images``
(file paths, kept as image references) with it; an event that repeats a ``response_item``
user message, before or after it, adds nothing.  Any other record type is skipped and named
in the import's problems (one line per type, with its count).

``response_item`` payloads:

* ``message``: ``role`` user / assistant / developer / system with ``input_text`` /
  ``output_text`` / ``input_image`` parts; developer and system become role ``system``;
* ``reasoning``: ``summary`` parts become ``thinking`` blocks (no signature: ``""``),
  ``content`` reasoning text likewise, and ``encrypted_content`` an opaque
  ``{"type": "encrypted_reasoning", "provider": "openai", "encrypted_content": <encrypted>}``
  block: OpenAI's ciphertext, which neither Anthropic (it decrypts only its own
  ``redacted_thinking``) nor Chat Completions accepts, so both request formats drop it
  (``dropped_block_types``: neither counted nor sent, listed in the gated request);
* ``function_call`` (``arguments`` JSON text), ``custom_tool_call`` (free-form ``input``,
  kept as ``{"input": text}``) and ``local_shell_call`` (``action``) become ``tool_use``
  blocks with ``id`` = ``call_id``;
* ``function_call_output`` / ``custom_tool_call_output`` / ``local_shell_call_output``
  become ``tool_result`` blocks (``output`` a string or a list of content parts);
* any other item whose type ends in ``_call`` (a hosted tool such as ``web_search_call``) is
  kept verbatim as an opaque block of the model's turn, as the Responses reader keeps it
  (priced, shown by the loud default rule, counted among the import's unknown blocks); other
  item types (``ghost_snapshot`` ...) are skipped and named in the import's problems.

Consecutive model-side items (reasoning, assistant text, tool calls) form one assistant
message; consecutive outputs form one user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..blocks import Block
from ._common import (
    Context,
    Draft,
    Malformed,
    image_from_url,
    iter_jsonl,
    line_list,
    parse_arguments,
    text_blocks,
    tool_result,
    tool_use,
)
from ._sniff import Sample, TranscriptFormat
from .openai import content_parts

__all__ = ["FORMAT", "NAME", "call_block", "output_block", "parse", "reasoning_blocks", "sniff"]

NAME = "codex"

CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
_RECORDS = ("session_meta", "response_item", "turn_context", "event_msg", "compacted")


def _call_id(item: dict[str, Any]) -> str:
    call_id = item.get("call_id") or item.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise Malformed(f"a {item['type']} item needs a string 'call_id'")
    return call_id


def reasoning_blocks(item: dict[str, Any]) -> list[Block]:
    """Return a ``reasoning`` item as ``thinking`` blocks and an ``encrypted_reasoning`` block."""
    blocks: list[Block] = []
    for key in ("summary", "content"):
        parts = item.get(key) or []
        if not isinstance(parts, list):
            raise Malformed(f"reasoning '{key}' must be a list")
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and text:
                blocks.append({"type": "thinking", "thinking": text, "signature": ""})
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str) and encrypted:
        blocks.append({"type": "encrypted_reasoning", "provider": "openai", "encrypted_content": encrypted})
    return blocks


def call_block(item: dict[str, Any]) -> Block:
    """Return a ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` item as a ``tool_use`` block."""
    kind = item["type"]
    if kind == "function_call":
        name, tool_input = item.get("name"), parse_arguments(item.get("arguments"))
    elif kind == "custom_tool_call":
        raw = item.get("input")
        name, tool_input = item.get("name"), {"input": raw if isinstance(raw, str) else json.dumps(raw)}
    else:
        action = item.get("action")
        name, tool_input = "local_shell", action if isinstance(action, dict) else {}
    if not isinstance(name, str):
        raise Malformed(f"a {kind} item needs a string 'name'")
    return tool_use(_call_id(item), name, tool_input)


def output_block(item: dict[str, Any]) -> Block:
    """Return a ``*_call_output`` item as a ``tool_result`` block."""
    output = item.get("output")
    if isinstance(output, dict) and "content" in output:
        output = output["content"]
    if output is None or isinstance(output, str):
        content: str | list[Block] = output or ""
    elif isinstance(output, list):
        content = content_parts(output)
    else:
        content = json.dumps(output, ensure_ascii=False)
    return tool_result(_call_id(item), content)


def _user_text(blocks: list[Block]) -> str:
    """Return the text of a user message's blocks, stripped, for matching its event."""
    return "".join(b["text"] for b in blocks if b.get("type") == "text").strip()


def _event_user(payload: dict[str, Any]) -> Draft:
    """Return the user message a ``user_message`` event stands for."""
    message = payload.get("message")
    if not isinstance(message, str):
        raise Malformed("a user_message event needs a string 'message'")
    blocks: list[Block] = text_blocks(message)
    for key in ("images", "local_images"):
        images = payload.get(key) or []
        if not isinstance(images, list):
            raise Malformed(f"a user_message event's {key!r} must be a list")
        for image in images:
            path = image.get("path") if isinstance(image, dict) else image
            blocks.append(image_from_url(path))
    draft = Draft("user", blocks)
    draft.meta["codex_event"] = "user_message"
    return draft


class _Rollout:
    """Turn rollout records into drafts: model-side items joined into one assistant message,
    user asks recorded only as events restored, skipped kinds counted."""

    def __init__(self) -> None:
        self.drafts: list[Draft] = []
        self.model: str | None = None
        self.pending: dict[str, Any] = {}
        self.open: Draft | None = None
        self.turn_asks: list[str] = []  # texts of the user messages since the last model item
        self.waiting: list[tuple[str, Draft]] = []  # asks seen only as events so far
        self.skipped: dict[str, list[int]] = {}

    def skip(self, kind: str, line: int) -> None:
        self.skipped.setdefault(kind, []).append(line)

    def flush_events(self) -> None:
        if self.waiting:
            self.open = None  # an ask ends the model's turn
        for _, draft in self.waiting:
            self._add(draft)
            self.turn_asks.append(_user_text(draft.content))
        self.waiting = []

    def _add(self, draft: Draft) -> None:
        if self.pending:
            draft.meta.update(self.pending)
            self.pending = {}
        self.drafts.append(draft)

    def event(self, line: int, record: dict[str, Any], payload: dict[str, Any]) -> None:
        """Read an ``event_msg``: only a ``user_message`` no response item carries counts."""
        if payload.get("type") != "user_message":
            return
        draft = _event_user(payload)
        text = _user_text(draft.content)
        if text in self.turn_asks:
            self.turn_asks.remove(text)  # the response item came first: a duplicate
            return
        draft.line = line
        if isinstance(record.get("timestamp"), str):
            draft.meta["timestamp"] = record["timestamp"]
        self.waiting.append((text, draft))

    def item(self, line: int, record: dict[str, Any], payload: dict[str, Any]) -> None:
        """Read one ``response_item``."""
        item_type = payload["type"]
        role = payload.get("role")
        draft: Draft | None = None
        blocks: list[Block] | None = None
        if item_type == "message" and role == "assistant":
            blocks = content_parts(payload.get("content"))
        elif item_type == "message":
            if role not in ("user", "developer", "system"):
                raise Malformed(f"unknown message role {role!r}; expected user, assistant, developer, system")
            draft = Draft("user" if role == "user" else "system", content_parts(payload.get("content")))
        elif item_type == "reasoning":
            blocks = reasoning_blocks(payload)
        elif item_type in CALLS:
            blocks = [call_block(payload)]
        elif item_type in OUTPUTS:
            draft = Draft("user", [output_block(payload)])
        elif item_type.endswith("_call"):
            blocks = [payload]
        else:
            self.skip(f"response_item {item_type!r}", line)
            return
        if draft is not None and draft.role == "user" and item_type == "message":
            text = _user_text(draft.content)
            matched = next((i for i, (t, _) in enumerate(self.waiting) if t == text), None)
            if matched is not None:
                del self.waiting[matched]  # the event came first: the item is the ask
            self.flush_events()
            self.turn_asks.append(text)
        else:
            self.flush_events()
        if blocks is not None:
            self.turn_asks = []
            if self.open is None:
                self.open = draft = Draft("assistant", [])
                if self.model:
                    draft.meta["model"] = self.model
            self.open.content.extend(blocks)
        else:
            self.open = None
        if draft is None:
            return
        draft.line = line
        if isinstance(record.get("timestamp"), str):
            draft.meta["timestamp"] = record["timestamp"]
        if isinstance(payload.get("id"), str):
            draft.source_id = payload["id"]
        self._add(draft)


def parse(text: str | bytes | Iterable[bytes], ctx: Context) -> list[Draft]:
    """Parse a Codex rollout into drafts."""
    rollout = _Rollout()
    for line, record in iter_jsonl(text, ctx):
        kind = record.get("type")
        payload = record.get("payload")
        if kind == "turn_context" and isinstance(payload, dict):
            model = payload.get("model")
            rollout.model = model if isinstance(model, str) else rollout.model
            continue
        if kind == "compacted" and isinstance(payload, dict):
            rollout.pending["codex_compaction"] = payload.get("message")
            continue
        if kind == "session_meta":
            continue
        try:
            if kind == "event_msg":
                if isinstance(payload, dict):
                    rollout.event(line, record, payload)
                continue
            if kind != "response_item":
                rollout.skip(f"record {kind!r}", line)
                continue
            if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
                raise Malformed("a response_item needs a payload object with a string 'type'")
            rollout.item(line, record, payload)
        except Malformed as err:
            ctx.problem(str(err), line=line)
    rollout.flush_events()
    for what, lines in rollout.skipped.items():
        ctx.note(
            f"{len(lines)} {what} (no conversation item this reader knows) skipped: {line_list(lines)}",
            line=lines[0],
        )
    if rollout.pending and rollout.drafts:
        rollout.drafts[-1].meta.update(rollout.pending)
    return rollout.drafts


def sniff(sample: Sample) -> bool:
    """Claim JSONL whose first lines hold a Codex record: a ``payload`` with a ``type`` of
    ``session_meta``, ``response_item``, ``turn_context``, ``event_msg`` or ``compacted``."""
    return any(record.get("type") in _RECORDS and "payload" in record for record in sample.entries)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=80,
    sniff=sniff,
    parse=parse,
    holds="a Codex 'response_item' record (a 'payload' with a conversation item)",
    reads_bytes=True,
)
