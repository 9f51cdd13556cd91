"""LangChain / LangGraph message dumps.

The file holds a JSON array of messages, an object ``{"messages": [...]}`` (a LangGraph
``MessagesState``), or JSONL with one message a line.  A message comes in any of the three
shapes langchain-core writes:

* ``messages_to_dict`` (chat-message histories in files, Redis, SQL): ``{"type": "human",
  "data": {...fields}}``;
* ``dumpd`` / ``dumps`` (LangGraph checkpoints, LangServe): ``{"lc": 1, "type":
  "constructor", "id": [..., "HumanMessage"], "kwargs": {...fields}}``;
* ``model_dump`` (a message's own fields): ``{"type": "human", "content": ...,
  "additional_kwargs": {}, "response_metadata": {}}``.

The message ``type`` maps as follows (``*MessageChunk`` classes like their messages):

* ``human`` -> ``user``; ``system`` -> ``system``; ``chat`` by its ``role``;
* ``ai`` -> ``assistant``: ``tool_calls`` (``name``, ``args``, ``id``) become ``tool_use``
  blocks; when there are none, OpenAI-shaped ``additional_kwargs.tool_calls`` (older
  langchain) are read instead; ``additional_kwargs.reasoning_content`` becomes a ``thinking``
  block; ``invalid_tool_calls`` (calls whose arguments did not parse, never run) are kept in
  ``meta["langchain_invalid_tool_calls"]``; ``response_metadata.model_name`` (or ``model``)
  is the model;
* ``tool`` -> a user message holding a ``tool_result`` for ``tool_call_id`` (``is_error``
  when ``status`` is ``"error"``).

``content`` is a string or a list of parts: text, OpenAI parts (``image_url``), Anthropic
blocks (``image`` with a ``source``, ``tool_use``, ``thinking``) and langchain's standard
blocks (``image`` with ``base64`` / ``url`` / ``source_type``, ``reasoning``, ``tool_call``);
an image given only by a provider ``file_id`` (``source_type: "id"``) becomes an image
reference (kept, shown as a loud placeholder), as does one whose URL is a file path.
A ``tool_use`` / ``tool_call`` part that repeats one of the message's ``tool_calls`` (the same
id) is dropped, so each call is imported once; any other part type is kept verbatim.  The
message ``id`` is the source id.  ``function`` messages (deprecated) and ``remove`` markers
are malformed and refused with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..blocks import Block, image_reference_block
from ._common import (
    Context,
    Draft,
    Item,
    Malformed,
    convert_items,
    image_from_url,
    parse_arguments,
    text_blocks,
    tool_result,
    tool_use,
    typed_parts,
)
from ._sniff import Sample, TranscriptFormat
from .openai import OpenAIConverter, content_parts, iter_messages

__all__ = ["FORMAT", "NAME", "convert", "convert_all", "parse", "sniff"]

NAME = "langchain"

#: langchain-core's message class names (``dumpd`` ids) and the ``type`` they serialize.
_CLASSES = {
    "HumanMessage": "human",
    "AIMessage": "ai",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "ChatMessage": "chat",
    "FunctionMessage": "function",
    "RemoveMessage": "remove",
}
_TYPES = frozenset(_CLASSES.values())
#: Fields every ``model_dump()`` of a langchain message has beside ``content`` (one is enough).
_DUMP_KEYS = frozenset({"additional_kwargs", "response_metadata", "tool_call_id"})
_CHAT_ROLES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
}


def _fields(message: Any) -> tuple[str, dict[str, Any]]:
    """Return ``(type, fields)`` of a message in any of the three shapes."""
    if not isinstance(message, dict):
        raise Malformed(f"a message must be an object, found {type(message).__name__}")
    if message.get("lc") == 1 and message.get("type") == "constructor":
        ids = message.get("id")
        name = ids[-1] if isinstance(ids, list) and ids and isinstance(ids[-1], str) else None
        kind = _CLASSES.get(name.removesuffix("Chunk") if name else "")
        fields = message.get("kwargs")
        if kind is None or not isinstance(fields, dict):
            raise Malformed(f"a serialized langchain object of class {name!r} is not a chat message")
        return kind, fields
    kind = message.get("type")
    if isinstance(kind, str) and kind.endswith("MessageChunk"):
        kind = _CLASSES.get(kind.removesuffix("Chunk"), kind)
    data = message.get("data")
    fields = data if isinstance(data, dict) else message
    if not isinstance(kind, str) or kind not in _TYPES:  # a list or object is no type (nor hashable)
        raise Malformed(f"unknown message type {kind!r}; expected human, ai, system, tool or chat")
    return str(kind), fields


def _image(part: dict[str, Any]) -> Block:
    """Return an image part (Anthropic's ``source`` or langchain's standard block) as an image block."""
    if isinstance(part.get("source"), dict):
        return part
    mime = part.get("mime_type") or "image/png"
    data = part.get("base64") if part.get("base64") is not None else None
    if data is None and part.get("source_type") == "base64":
        data = part.get("data")
    if isinstance(data, str) and data:
        return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
    url = part.get("url") if part.get("url") is not None else part.get("data")
    if isinstance(url, str) and url:
        return image_from_url(url)
    file_id = part.get("file_id") or (part.get("id") if part.get("source_type") == "id" else None)
    if isinstance(file_id, str) and file_id:  # a provider file id: the bytes are not in the dump
        return image_reference_block(file_id, mime if part.get("mime_type") else None)
    raise Malformed("an image part needs a 'source', 'base64' data, a 'url' or a 'file_id'")


def _content(content: Any, call_ids: set[str]) -> list[Block]:
    """Convert ``content``, dropping tool-call parts that repeat one of ``call_ids``."""
    blocks: list[Block] = []
    for index, part in enumerate(typed_parts(content)):
        kind = part["type"]
        try:
            if kind == "text":
                blocks.extend(text_blocks(part.get("text")))
            elif kind == "image":
                blocks.append(_image(part))
            elif kind in ("tool_use", "tool_call"):
                call_id = part.get("id")
                if call_id is not None and not isinstance(call_id, str):  # an object is no id (nor hashable)
                    raise Malformed(f"a {kind} part's 'id' must be a string; found {type(call_id).__name__}")
                if call_id not in call_ids:
                    arguments = part.get("input") if kind == "tool_use" else part.get("args")
                    blocks.append(
                        tool_use(str(call_id or ""), str(part.get("name") or ""), parse_arguments(arguments))
                    )
            elif kind == "thinking":
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": str(part.get("thinking") or ""),
                        "signature": str(part.get("signature") or ""),
                    }
                )
            elif kind == "reasoning":
                text = part.get("reasoning")
                if not isinstance(text, str):
                    summary: list[Any] = part["summary"] if isinstance(part.get("summary"), list) else []
                    text = "\n\n".join(
                        s["text"] for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str)
                    )
                if text:
                    blocks.append({"type": "thinking", "thinking": text, "signature": ""})
            elif kind in ("image_url", "input_image", "input_text", "output_text", "refusal"):
                blocks.extend(content_parts([part]))
            else:
                blocks.append(part)
        except Malformed as err:
            raise Malformed(f"content[{index}]: {err}") from None
    return blocks


def _tool_calls(fields: dict[str, Any]) -> list[Block]:
    calls = fields.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise Malformed("tool_calls must be a list")
        blocks = []
        for index, call in enumerate(calls):
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise Malformed(f"tool_calls[{index}] needs a string 'name'")
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                raise Malformed(f"tool_calls[{index}] needs a string 'id' (the tool message answers it)")
            blocks.append(tool_use(call_id, call["name"], parse_arguments(call.get("args"))))
        return blocks
    extra = fields.get("additional_kwargs")
    legacy = extra.get("tool_calls") if isinstance(extra, dict) else None
    if legacy:
        message = {"role": "assistant", "content": None, "tool_calls": legacy}
        return OpenAIConverter().convert(message).content
    return []


def convert(message: Any) -> Draft | None:
    """Return the draft for one LangChain message.

    Raises:
        Malformed: not a message object, an unknown or unsupported type, a tool message
            without ``tool_call_id``, a call without ``name`` / ``id``, or malformed content.
    """
    kind, fields = _fields(message)
    if kind in ("function", "remove"):
        raise Malformed(
            f"a {kind!r} message is not imported (FunctionMessage is deprecated and names no call "
            "id; RemoveMessage deletes another message): convert it to a tool message"
        )
    draft: Draft
    if kind == "ai":
        calls = _tool_calls(fields)
        blocks: list[Block] = []
        extra = fields.get("additional_kwargs")
        reasoning = extra.get("reasoning_content") if isinstance(extra, dict) else None
        if isinstance(reasoning, str) and reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        ids = {b["id"] for b in calls}
        draft = Draft("assistant", blocks + _content(fields.get("content"), ids) + calls)
        metadata = fields.get("response_metadata")
        if isinstance(metadata, dict):
            model = metadata.get("model_name") or metadata.get("model")
            if isinstance(model, str) and model:
                draft.meta["model"] = model
        invalid = fields.get("invalid_tool_calls")
        if isinstance(invalid, list) and invalid:
            draft.meta["langchain_invalid_tool_calls"] = invalid
    elif kind == "tool":
        call_id = fields.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise Malformed("a tool message needs a string 'tool_call_id'")
        content = fields.get("content")
        body: str | list[Block] = content if isinstance(content, str) else _content(content, set())
        draft = Draft("user", [tool_result(call_id, body, fields.get("status") == "error")])
    elif kind == "chat":
        role = _CHAT_ROLES.get(str(fields.get("role")))
        if role is None:
            raise Malformed(
                f"a chat message has role {fields.get('role')!r}; expected user, assistant or system"
            )
        draft = Draft(role, _content(fields.get("content"), set()))
    else:
        draft = Draft("user" if kind == "human" else "system", _content(fields.get("content"), set()))
    if isinstance(fields.get("id"), str):
        draft.source_id = fields["id"]
    if isinstance(fields.get("name"), str) and kind != "tool":
        draft.meta["name"] = fields["name"]
    return draft


def convert_all(items: Sequence[Item], ctx: Context) -> list[Draft]:
    """Convert LangChain messages, reporting malformed ones through ``ctx``."""
    return [draft for _, draft in convert_items(items, ctx, convert)]


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse a LangChain / LangGraph message dump into drafts."""
    items, _ = iter_messages(text, ctx)
    return convert_all(items, ctx)


def _is_langchain(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if value.get("lc") == 1 and value.get("type") == "constructor":
        ids = value.get("id")
        return isinstance(ids, list) and "messages" in ids
    if "role" in value:
        return False
    kind = value.get("type")
    if not isinstance(kind, str):
        return False
    if kind.endswith("MessageChunk"):
        kind = _CLASSES.get(kind.removesuffix("Chunk"), kind)
    if kind not in ("human", "ai", "system", "tool", "chat"):
        return False
    data = value.get("data")
    if isinstance(data, dict):
        return "content" in data
    # model_dump(): langchain always writes these beside the content
    return "content" in value and bool(_DUMP_KEYS & value.keys())


def sniff(sample: Sample) -> bool:
    """Claim LangChain messages: ``{"type": "human" | "ai" | "tool" | "system", "data": {...}}``,
    the same fields flat with a ``content`` and no ``role``, or ``dumpd``'s ``{"lc": 1, "type":
    "constructor"}`` message objects (JSONL, a JSON array or a ``{"messages": [...]}`` state)."""
    if any(_is_langchain(entry) for entry in sample.entries):
        return True
    document = sample.document
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        document = document["messages"]
    return isinstance(document, list) and any(_is_langchain(item) for item in document[:50])


FORMAT = TranscriptFormat(
    name=NAME,
    priority=33,
    sniff=sniff,
    parse=parse,
    holds="a LangChain message (a 'type' of human, ai, tool or system with its 'content')",
)
