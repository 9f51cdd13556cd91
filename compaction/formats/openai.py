"""OpenAI Chat Completions messages.

The file holds a JSON array of messages, an object ``{"messages": [...]}`` (a request body or a
saved conversation), or JSONL with one message per line (a line may also hold a whole
``{"messages": [...]}`` conversation).  Each message maps as follows:

* ``system`` and ``developer`` become role ``system``;
* ``content`` is a string or a list of parts: ``text`` (and the Responses API's
  ``input_text`` / ``output_text``, and ``refusal``) become text blocks, ``image_url`` (or
  ``input_image``) becomes an image block: a base64 ``data:`` URI keeps its media type, an
  http(s) URL becomes a ``url`` source; any other part type is kept verbatim;
* an assistant's ``reasoning_content`` / ``reasoning`` string becomes a ``thinking`` block,
  its ``tool_calls`` become ``tool_use`` blocks (``input`` is the decoded ``arguments``; text
  that is not a JSON object is kept as ``{"_raw_arguments": text}``);
* a ``tool`` message becomes a user message holding one ``tool_result``
  (``tool_use_id`` = ``tool_call_id``; SWE-agent's ``tool_call_ids`` list is accepted too);
  consecutive tool messages merge into one user message later (see ``_common.finish``);
* the legacy ``function_call`` / role ``function`` pair gets ids ``function_call_1``,
  ``function_call_2`` ... in order, a ``function`` message answering the oldest unanswered
  call of its name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..blocks import Block
from ._common import (
    Context,
    Draft,
    Item,
    Malformed,
    convert_items,
    first_line_is_object,
    image_from_url,
    iter_jsonl,
    load_json_document,
    parse_arguments,
    text_blocks,
    tool_result,
    tool_use,
    typed_parts,
)
from ._sniff import Sample, TranscriptFormat

__all__ = ["FORMAT", "NAME", "OpenAIConverter", "content_parts", "parse", "parse_chat", "sniff"]

NAME = "openai"

_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def content_parts(content: Any) -> list[Block]:
    """Convert OpenAI ``content`` (a string, ``None`` or a list of parts) to content blocks."""
    blocks: list[Block] = []
    for index, part in enumerate(typed_parts(content)):
        kind = part["type"]
        if kind in _TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise Malformed(f"content[{index}]: a {kind} part needs a string 'text'")
            blocks.extend(text_blocks(part["text"]))
        elif kind == "refusal":
            blocks.extend(text_blocks(part.get("refusal")))
        elif kind in ("image_url", "input_image"):
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            blocks.append(image_from_url(url))
        else:
            blocks.append(part)
    return blocks


class OpenAIConverter:
    """Convert Chat Completions messages one at a time (it keeps legacy function-call state)."""

    def __init__(self) -> None:
        self._legacy_count = 0
        self._legacy_waiting: list[tuple[str, str]] = []  # (name, id), oldest first
        self._missing_ids = 0

    def convert(self, message: Any) -> Draft:
        """Return the draft for one message.

        Raises:
            Malformed: the message is not an object, has an unknown role or a malformed part.
        """
        if not isinstance(message, dict):
            raise Malformed(f"a message must be an object, found {type(message).__name__}")
        role = message.get("role")
        if role in ("system", "developer"):
            return Draft("system", content_parts(message.get("content")))
        if role == "user":
            return Draft("user", content_parts(message.get("content")))
        if role == "assistant":
            return Draft("assistant", self._assistant(message))
        if role == "tool":
            return Draft("user", self._tool_results(message))
        if role == "function":
            name = message.get("name")
            call_id = self._answer_legacy(name if isinstance(name, str) else "")
            return Draft("user", [self._tool_result(call_id, message.get("content"))])
        raise Malformed(
            f"unknown role {role!r}; expected system, developer, user, assistant, tool or function"
        )

    def _assistant(self, message: dict[str, Any]) -> list[Block]:
        blocks: list[Block] = []
        for key in ("reasoning_content", "reasoning"):
            reasoning = message.get(key)
            if isinstance(reasoning, str) and reasoning:
                blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
                break
        blocks.extend(content_parts(message.get("content")))
        blocks.extend(text_blocks(message.get("refusal")))
        tool_calls = message.get("tool_calls") or []
        if not isinstance(tool_calls, list):
            raise Malformed("tool_calls must be a list")
        for index, call in enumerate(tool_calls):
            blocks.append(self._tool_use(call, index))
        legacy = message.get("function_call")
        if legacy:
            if not isinstance(legacy, dict) or not isinstance(legacy.get("name"), str):
                raise Malformed("function_call must be an object with a string 'name'")
            self._legacy_count += 1
            call_id = f"function_call_{self._legacy_count}"
            self._legacy_waiting.append((legacy["name"], call_id))
            blocks.append(tool_use(call_id, legacy["name"], parse_arguments(legacy.get("arguments"))))
        return blocks

    def _tool_use(self, call: Any, index: int) -> Block:
        if not isinstance(call, dict):
            raise Malformed(f"tool_calls[{index}] must be an object")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise Malformed(f"tool_calls[{index}] needs a function with a string 'name'")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            self._missing_ids += 1
            call_id = f"call_missing_{self._missing_ids}"
        return tool_use(call_id, function["name"], parse_arguments(function.get("arguments")))

    def _tool_results(self, message: dict[str, Any]) -> list[Block]:
        ids = message.get("tool_call_ids")
        if not ids:
            ids = [message.get("tool_call_id")]
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise Malformed("a tool message needs a string 'tool_call_id'")
        return [self._tool_result(call_id, message.get("content")) for call_id in ids]

    @staticmethod
    def _tool_result(call_id: str, content: Any) -> Block:
        if content is None or isinstance(content, str):
            body: str | list[Block] = content or ""
        else:
            body = content_parts(content)
        return tool_result(call_id, body)

    def _answer_legacy(self, name: str) -> str:
        for index, (waiting_name, call_id) in enumerate(self._legacy_waiting):
            if waiting_name == name:
                del self._legacy_waiting[index]
                return call_id
        if self._legacy_waiting:
            return self._legacy_waiting.pop(0)[1]
        self._legacy_count += 1
        return f"function_call_{self._legacy_count}"


def _message_list(document: Any, ctx: Context) -> tuple[list[Any], Any]:
    """Return ``(messages, system)`` from a JSON array or a ``{"messages": [...]}`` object."""
    if isinstance(document, list):
        return document, None
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        return document["messages"], document.get("system")
    if isinstance(document, dict) and "role" in document:  # a one-line JSONL file
        return [document], None
    raise ctx.error(
        "expected a JSON array of messages or an object with a 'messages' list; "
        f"found {type(document).__name__}"
    )


def _is_jsonl(text: str) -> bool:
    """Return whether ``text`` is JSONL: its first line is an object, or (a damaged first
    line) the whole text is no JSON document while a later line is a complete object."""
    if first_line_is_object(text):
        return text.strip().count("\n") > 0
    lines = [line for line in text.split("\n", 50)[:50] if line.strip()]
    if len(lines) < 2 or not lines[0].lstrip().startswith("{") or lines[0].strip() == "{":
        return False
    try:
        json.loads(text)
        return False
    except (ValueError, RecursionError):
        return any(first_line_is_object(line) for line in lines[1:])


def iter_messages(text: str, ctx: Context) -> tuple[list[Item], Any]:
    """Return ``([(message, line, where), ...], system)`` for a JSON or JSONL text.

    ``system`` is a top-level ``system`` value (Anthropic request bodies carry one), or ``None``.
    """
    items: list[Item] = []
    system = None
    if _is_jsonl(text):
        for line, value in iter_jsonl(text, ctx):
            if isinstance(value.get("messages"), list):
                system = system or value.get("system")
                items.extend((m, line, f"messages[{i}]") for i, m in enumerate(value["messages"]))
            else:
                items.append((value, line, None))
        return items, system
    messages, system = _message_list(load_json_document(text, ctx), ctx)
    return [(m, None, f"messages[{i}]") for i, m in enumerate(messages)], system


def parse_chat(
    text: str,
    ctx: Context,
    convert_all: Callable[[Sequence[Item], Context], list[Draft]],
    system_blocks: Callable[[Any], list[Block]],
) -> list[Draft]:
    """Parse chat messages (a JSON array, ``{"messages"}`` objects or JSONL) into drafts.

    The OpenAI and Anthropic formats share the containers and differ in the messages:
    ``convert_all`` converts them and ``system_blocks`` a top-level ``system`` value, which
    becomes the first draft.
    """
    items, system = iter_messages(text, ctx)
    drafts = convert_all(items, ctx)
    if system:
        try:
            drafts.insert(0, Draft("system", system_blocks(system), where="system"))
        except Malformed as err:
            ctx.problem(str(err), where="system")
    return drafts


def convert_all(items: Sequence[Item], ctx: Context) -> list[Draft]:
    """Convert Chat Completions messages, reporting malformed ones through ``ctx``."""
    drafts: list[Draft] = []
    for message, draft in convert_items(items, ctx, OpenAIConverter().convert):
        if isinstance(message.get("id"), str):
            draft.source_id = message["id"]
        drafts.append(draft)
    return drafts


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse an OpenAI Chat Completions transcript into drafts."""
    return parse_chat(text, ctx, convert_all, content_parts)


def sniff(sample: Sample) -> bool:
    """Claim any chat messages: objects with a ``role`` (JSONL, an array, ``{"messages"}``).

    The catch-all of the JSON formats, asked last: more specific formats, Anthropic's among
    them, have claimed theirs by then.  A top-level ``"format": "openai"`` claims the file
    whatever its messages.
    """
    chat = sample.chat
    return chat is not None and (chat.declared == NAME or chat.has_roles)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=10,
    sniff=sniff,
    parse=parse,
    holds="a chat message (an object with a 'role' and its 'content')",
)
