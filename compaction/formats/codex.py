"""Codex CLI rollout JSONL (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

One record a line: ``{"timestamp", "type", "payload"}``.  ``session_meta`` describes the
session, ``turn_context`` the model of the turns that follow, ``response_item`` the items of
the model conversation (Responses API items), ``event_msg`` a UI event stream that
duplicates them (ignored), ``compacted`` a summary Codex wrote when it compacted (kept as
``meta["codex_compaction"]`` of the next message; no message is dropped).  Any other record
type is ignored.

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
* other item types (``web_search_call``, ``ghost_snapshot`` ...) are ignored.

Consecutive model-side items (reasoning, assistant text, tool calls) form one assistant
message; consecutive outputs form one user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..blocks import Block
from ._common import Context, Draft, Malformed, iter_jsonl, parse_arguments, tool_result, tool_use
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


def parse(text: str | bytes | Iterable[bytes], ctx: Context) -> list[Draft]:
    """Parse a Codex rollout into drafts."""
    drafts: list[Draft] = []
    model: str | None = None
    pending: dict[str, Any] = {}
    open_assistant: Draft | None = None
    for line, record in iter_jsonl(text, ctx):
        kind = record.get("type")
        payload = record.get("payload")
        if kind == "turn_context" and isinstance(payload, dict):
            model = payload.get("model") if isinstance(payload.get("model"), str) else model
            continue
        if kind == "compacted" and isinstance(payload, dict):
            pending["codex_compaction"] = payload.get("message")
            continue
        if kind != "response_item":
            continue
        try:
            if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
                raise Malformed("a response_item needs a payload object with a string 'type'")
            item_type = payload["type"]
            role = payload.get("role")
            draft: Draft | None = None
            blocks: list[Block] | None = None
            if item_type == "message" and role == "assistant":
                blocks = content_parts(payload.get("content"))
            elif item_type == "message":
                if role not in ("user", "developer", "system"):
                    raise Malformed(
                        f"unknown message role {role!r}; expected user, assistant, developer, system"
                    )
                draft = Draft("user" if role == "user" else "system", content_parts(payload.get("content")))
            elif item_type == "reasoning":
                blocks = reasoning_blocks(payload)
            elif item_type in CALLS:
                blocks = [call_block(payload)]
            elif item_type in OUTPUTS:
                draft = Draft("user", [output_block(payload)])
            else:
                continue
        except Malformed as err:
            ctx.problem(str(err), line=line)
            continue
        if blocks is not None:
            if open_assistant is None:
                open_assistant = draft = Draft("assistant", [])
                if model:
                    draft.meta["model"] = model
            open_assistant.content.extend(blocks)
        else:
            open_assistant = None
        if draft is None:
            continue
        draft.line = line
        if isinstance(record.get("timestamp"), str):
            draft.meta["timestamp"] = record["timestamp"]
        if isinstance(payload.get("id"), str):
            draft.source_id = payload["id"]
        if pending:
            draft.meta.update(pending)
            pending = {}
        drafts.append(draft)
    return drafts


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
