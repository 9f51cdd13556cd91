"""Converted agent trajectories: chat messages whose content blocks are ``tool_call`` /
``tool_output`` / ``tool_use`` blocks carrying ``_metadata``, with sub-agent roles.

Many published agent-evaluation sessions are written this way: a JSON document with a
``messages`` list (or a bare list, or JSONL with one message a line), each message a
``role`` and a ``content`` that is a string or a list of blocks.  Besides ``text`` (and the
other Anthropic and Chat Completions blocks) the content holds:

* ``tool_call`` (``id`` / ``tool_call_id`` / ``call_id``; ``name`` / ``tool_name`` /
  ``function.name``; ``input`` / ``arguments`` / ``args`` / ``parameters``, an object or its
  JSON text) -> a ``tool_use`` block;
* ``tool_use`` (Anthropic's shape, often beside a ``tool_call`` for the same call) -> kept;
* ``tool_output`` / ``tool_result`` (``tool_call_id`` / ``tool_use_id`` / ``id``; ``output``
  / ``content`` / ``text`` / ``result``; ``is_error``, ``error`` or ``status: "error"``) -> a
  ``tool_result`` block in a user message;
* ``_metadata`` on any block: the converter's bookkeeping, moved off the block (it would be
  priced and shipped) into the message's ``meta["block_metadata"]``, keyed by the tool id,
  so it stays in the store.

**Each tool call once.**  A call given twice (a ``tool_call`` and a ``tool_use`` with the
same id, anywhere in the transcript) is imported once, as the first one seen; likewise a
result given twice.  A call without an id gets ``<message index>-<block index>``.

**Results go to user turns.**  A ``tool_output`` inside an assistant message splits it: the
blocks before it stay an assistant message, the results become a user message, the blocks
after them a new assistant message, so every request format can carry them.

**Sub-agents are kept.**  A role such as ``assistant-subagent-<id>`` (also ``user-``,
``tool-``, ``system-``; ``sub-agent`` / ``subagent_`` spellings) is that role in a
sub-agent's conversation: the message is imported with the base role and
``meta["subagent"] = "<id>"``; never dropped, never refused.  When a sub-agent's messages
come while the main agent still waits for tool results (the sub-agent runs inside a
``Task`` call), they are imported right after the message holding those results, so no
tool call is separated from its result; the order is otherwise the file's.

Plain roles follow the Chat Completions rules (``developer`` -> system, a ``tool`` message
with ``tool_call_id`` -> a tool result, ``tool_calls`` -> ``tool_use`` blocks).  Unknown
block types are kept verbatim.
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
    iter_jsonl,
    load_json_document,
    parse_arguments,
    text_blocks,
    tool_result,
    tool_use,
    typed_parts,
)
from ._sniff import Sample, TranscriptFormat
from .openai import OpenAIConverter, _is_jsonl, content_parts

__all__ = ["FORMAT", "NAME", "parse", "sniff", "split_role"]

NAME = "trajectory"

_SUBAGENT_ROLE = re.compile(
    r"^(user|assistant|system|tool|developer)[-_](?:sub[-_]?agent|agent)[-_:]?(.*)$", re.IGNORECASE
)
_CALL_TYPES = frozenset({"tool_call", "tool_use"})
_RESULT_TYPES = frozenset({"tool_output", "tool_result"})
_CHAT_PARTS = frozenset({"image_url", "input_image", "input_text", "output_text", "refusal"})


def split_role(role: Any) -> tuple[str, str | None]:
    """Return ``(base role, sub-agent id or None)`` for a source role.

    Example:
        >>> split_role("assistant-subagent-a1"), split_role("user")
        (('assistant', 'a1'), ('user', None))
    """
    if not isinstance(role, str):
        raise Malformed(f"a message needs a string 'role', found {role!r}")
    match = _SUBAGENT_ROLE.match(role)
    if match is None:
        return role, None
    return match.group(1).lower(), match.group(2) or "subagent"


def _first(block: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = block.get(key)
        if value is not None:
            return value
    return None


def _call_of(block: dict[str, Any], fallback_id: str) -> Block:
    function: dict[str, Any] = block["function"] if isinstance(block.get("function"), dict) else {}
    call_id = _first(block, "id", "tool_call_id", "tool_use_id", "call_id")
    name = _first(block, "name", "tool_name", "tool") or function.get("name")
    if not isinstance(name, str) or not name:
        raise Malformed(f"a {block['type']} block needs a string 'name'")
    arguments = _first(block, "input", "arguments", "args", "parameters")
    if arguments is None:
        arguments = function.get("arguments")
    return tool_use(
        call_id if isinstance(call_id, str) and call_id else fallback_id, name, parse_arguments(arguments)
    )


def _output_content(value: Any) -> str | list[Block]:
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list) and all(isinstance(part, dict) and "type" in part for part in value):
        return _blocks(value, where="output")
    return json.dumps(value, ensure_ascii=False)


def _result_of(block: dict[str, Any]) -> Block:
    call_id = _first(block, "tool_call_id", "tool_use_id", "call_id", "id")
    if not isinstance(call_id, str) or not call_id:
        raise Malformed(f"a {block['type']} block needs the id of the call it answers ('tool_call_id')")
    content = _output_content(_first(block, "output", "content", "text", "result"))
    error = block.get("error")
    is_error = bool(block.get("is_error")) or bool(error) or block.get("status") == "error"
    if isinstance(error, str) and error and isinstance(content, str) and error not in content:
        content = f"{content}\nError: {error}" if content else f"Error: {error}"
    return tool_result(call_id, content, is_error)


def _blocks(content: Any, *, where: str = "content") -> list[Block]:
    """Convert a content list of any of the shapes the module docstring lists (no splitting)."""
    blocks: list[Block] = []
    for index, block in enumerate(typed_parts(content, where)):
        kind = block["type"]
        if kind in _CALL_TYPES:
            blocks.append({**_call_of(block, f"{where}-{index}"), "_source": block})
        elif kind in _RESULT_TYPES:
            blocks.append({**_result_of(block), "_source": block})
        elif kind in _CHAT_PARTS:
            blocks.extend(content_parts([block]))
        elif kind == "text":
            blocks.extend(text_blocks(block.get("text")))
        else:
            blocks.append({key: value for key, value in block.items() if key != "_metadata"})
    return blocks


class _Reader:
    """Turn messages into drafts, keeping each tool call and result once."""

    def __init__(self) -> None:
        self.chat = OpenAIConverter()
        self.calls: set[str] = set()
        self.results: set[str] = set()

    def read(self, message: Any, index: int) -> list[Draft]:
        if not isinstance(message, dict):
            raise Malformed(f"a message must be an object, found {type(message).__name__}")
        role, subagent = split_role(message.get("role"))
        if role == "developer":
            role = "system"
        if role == "tool" or (role == "assistant" and message.get("tool_calls")):
            drafts = [self.chat.convert({**message, "role": role})]
        elif role in ("user", "assistant", "system"):
            drafts = self._split(role, _blocks(message.get("content"), where="content"))
        else:
            raise Malformed(
                f"unknown role {message.get('role')!r}; expected user, assistant, system, developer or "
                "tool, optionally with a sub-agent suffix (assistant-subagent-<id>)"
            )
        kept = [draft for draft in (self._once(draft) for draft in drafts) if draft.content or draft.meta]
        for draft in kept:
            if subagent is not None:
                draft.meta["subagent"] = subagent
            if isinstance(message.get("id"), str):
                draft.source_id = message["id"]
            for key in ("timestamp", "model"):
                if isinstance(message.get(key), (str, int, float)):
                    draft.meta[key] = message[key]
        return kept

    @staticmethod
    def _split(role: str, blocks: list[Block]) -> list[Draft]:
        """Split an assistant message at its tool results; other roles stay whole."""
        if role != "assistant":
            return [Draft(role, blocks)]
        drafts: list[Draft] = []
        for block in blocks:
            wanted = "user" if block["type"] == "tool_result" else "assistant"
            if not drafts or drafts[-1].role != wanted:
                drafts.append(Draft(wanted, []))
            drafts[-1].content.append(block)
        return drafts or [Draft(role, [])]

    def _once(self, draft: Draft) -> Draft:
        """Drop repeated calls and results; move ``_metadata`` into the draft's meta."""
        content: list[Block] = []
        metadata: dict[str, Any] = {}
        for block in draft.content:
            source = block.pop("_source", None)
            kind = block["type"]
            if kind in ("tool_use", "tool_result"):
                key = block["id"] if kind == "tool_use" else block["tool_use_id"]
                seen = self.calls if kind == "tool_use" else self.results
                if key in seen:
                    continue
                seen.add(key)
                if isinstance(source, dict) and "_metadata" in source:
                    metadata[key] = source["_metadata"]
            content.append(block)
        draft.content = content
        if metadata:
            draft.meta["block_metadata"] = metadata
        return draft


def _items(text: str, ctx: Context) -> list[tuple[Any, int | None, str]]:
    if _is_jsonl(text):
        items: list[tuple[Any, int | None, str]] = []
        for line, value in iter_jsonl(text, ctx):
            messages = value.get("messages")
            if isinstance(messages, list):
                items.extend((m, line, f"messages[{i}]") for i, m in enumerate(messages))
            else:
                items.append((value, line, f"line {line}"))
        return items
    document = load_json_document(text, ctx)
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        document = document["messages"]
    if not isinstance(document, list):
        raise ctx.error(
            f"expected a 'messages' list or a JSON array of messages, found {type(document).__name__}"
        )
    return [(message, None, f"messages[{index}]") for index, message in enumerate(document)]


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse a converted trajectory into drafts (each tool call once, sub-agents kept)."""
    reader = _Reader()
    out: list[Draft] = []
    deferred: list[Draft] = []  # sub-agent drafts waiting for the main agent's tool results
    waiting: set[str] = set()  # calls of the main agent's latest assistant turn not yet answered
    for index, (message, line, where) in enumerate(_items(text, ctx)):
        try:
            drafts = reader.read(message, index)
        except Malformed as err:
            ctx.problem(str(err), line=line, where=where)
            continue
        for draft in drafts:
            draft.line, draft.where = line, where
            if "subagent" in draft.meta:
                (deferred if waiting else out).append(draft)
                continue
            out.append(draft)
            if draft.role == "assistant":
                waiting = {b["id"] for b in draft.content if b["type"] == "tool_use"}
            waiting -= {b["tool_use_id"] for b in draft.content if b["type"] == "tool_result"}
            if deferred and not waiting:
                out.extend(deferred)
                deferred = []
    out.extend(deferred)
    return out


def _is_trajectory_message(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    role = message.get("role")
    if isinstance(role, str) and _SUBAGENT_ROLE.match(role):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict)
        and (block.get("type") in ("tool_call", "tool_output") or "_metadata" in block)
        for block in content
    )


def sniff(sample: Sample) -> bool:
    """Claim chat messages with a ``tool_call`` / ``tool_output`` block, a block carrying
    ``_metadata``, or a sub-agent role (``assistant-subagent-<id>``)."""
    chat = sample.chat
    return chat is not None and any(_is_trajectory_message(m) for m in chat.messages[:200])


FORMAT = TranscriptFormat(
    name=NAME,
    priority=25,
    sniff=sniff,
    parse=parse,
    holds="a trajectory message (a 'role' with 'tool_call' / 'tool_output' / 'text' content blocks)",
)
