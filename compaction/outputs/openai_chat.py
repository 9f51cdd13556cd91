"""OpenAI Chat Completions request bodies (https://platform.openai.com/docs/api-reference/chat).

Rendering is a pure, deterministic function of its input; what the shape cannot carry
becomes a loud text stand-in, never nothing:

* consecutive messages of one role merge into one turn, so an assistant turn's ``tool``
  messages follow it directly and nothing comes between them; ``tool_use`` blocks become
  ``tool_calls`` (arguments as a JSON string);
* ``tool_result`` blocks become ``role: "tool"`` messages right after the assistant turn;
  a tool message carries text only, so the images of a result follow in a user message
  after a note naming the call;
* thinking and redacted thinking blocks are not carried (``dropped_block_types``: the
  Chat shape has no field for them, and a model of another provider cannot read them), so
  :meth:`~compaction.outputs.base.RequestFormat.text_tokens` does not count them; other
  unknown block types become a text stand-in naming their type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ..blocks import Block, canonical_json, unknown_block_text
from ..types import RequestFormatName
from .base import RequestFormat, WireMessage, merge_turns

__all__ = ["OpenAIChat", "image_url", "tool_result_parts"]


def image_url(block: Block) -> str:
    """Return the URL an image block is sent as: its own URL, or a ``data:`` URI of its base64 bytes."""
    source = block["source"]
    if source["type"] == "url":
        return str(source["url"])
    return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"


def _image_part(block: Block) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": image_url(block)}}


def tool_result_parts(content: Any) -> tuple[str, list[Block]]:
    """Return a tool result's text (parts joined by newlines) and its image blocks."""
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    images: list[Block] = []
    for inner in content:
        kind = inner.get("type")
        if kind == "text":
            texts.append(inner["text"])
        elif kind == "image":
            images.append(inner)
        else:
            texts.append(unknown_block_text(inner))
    return "\n".join(texts), images


def _assistant_message(blocks: Sequence[Block]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": canonical_json(block.get("input", {}))},
                }
            )
        elif kind in OpenAIChat.dropped_block_types:
            continue
        else:
            texts.append(unknown_block_text(block))
    message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


class OpenAIChat(RequestFormat):
    """The OpenAI Chat Completions shape (``{"model", "messages", ["max_tokens"], ["tools"]}``)."""

    name: ClassVar[RequestFormatName] = "openai"
    title: ClassVar[str] = "OpenAI Chat Completions"
    default_model: ClassVar[str] = "gpt-4o"
    image_types: ClassVar[frozenset[str]] = frozenset({"image_url", "input_image", "image"})
    dropped_block_types: ClassVar[frozenset[str]] = frozenset({"thinking", "redacted_thinking", "encrypted_reasoning"})

    def render_conversation(self, system: str | None, messages: Sequence[WireMessage]) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        if system:
            out.append({"role": "system", "content": system})
        for role, blocks in merge_turns(messages, self.dropped_block_types):
            if role == "system":
                out.append({"role": "system", "content": "\n\n".join(b.get("text", "") for b in blocks)})
            elif role == "assistant":
                out.append(_assistant_message(blocks))
            else:
                out.extend(self._user_messages(blocks))
        return {"messages": out}

    @staticmethod
    def _user_messages(blocks: Sequence[Block]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        for block in blocks:
            kind = block.get("type")
            if kind in OpenAIChat.dropped_block_types:
                continue  # not carried, not counted (see dropped_block_types)
            if kind == "tool_result":
                text, images = tool_result_parts(block.get("content", ""))
                if block.get("is_error"):
                    text = f"[tool error] {text}"
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
                if images:
                    parts.append(
                        {"type": "text", "text": f"[images returned by tool call {block['tool_use_id']}]"}
                    )
                    parts.extend(_image_part(i) for i in images)
            elif kind == "text":
                parts.append({"type": "text", "text": block["text"]})
            elif kind == "image":
                parts.append(_image_part(block))
            else:
                parts.append({"type": "text", "text": unknown_block_text(block)})
        if parts:
            if all(p["type"] == "text" for p in parts):
                out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)})
            else:
                out.append({"role": "user", "content": parts})
        return out

    def add_cache_hints(self, body: dict[str, Any], *, key: str | None, mark_prefix: bool) -> None:
        # OpenAI caches prefixes of 1,024 tokens and more by itself; a key routes requests
        # that share a prefix to the same cache (https://platform.openai.com/docs/guides/prompt-caching).
        if key is not None:
            body["prompt_cache_key"] = key

    def render_tools(self, tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["parameters"],
                },
            }
            for t in tools
        ]

    def grammar_problems(self, body: dict[str, Any]) -> list[str]:
        problems: list[str] = []
        pending: list[str] = []  # calls of the last assistant message not yet answered
        seen: set[str] = set()
        for index, message in enumerate(body.get("messages", [])):
            role = message.get("role")
            content = message.get("content")
            if role == "tool":
                call = message.get("tool_call_id")
                if call in pending:
                    pending.remove(call)
                else:
                    problems.append(
                        f"message {index}: tool message {call!r} answers no call of the assistant message before it"
                    )
                if not isinstance(content, str):
                    problems.append(f"message {index}: a tool message's content must be text")
                continue
            if pending:
                problems.append(
                    f"message {index}: a {role} message comes before the results of calls {pending}"
                )
                pending = []
            if (
                role != "user"
                and isinstance(content, list)
                and any(isinstance(p, dict) and p.get("type") in self.image_types for p in content)
            ):
                problems.append(f"message {index}: an image in a {role} message")
            if role == "assistant":
                if content in (None, "", []) and not message.get("tool_calls"):
                    problems.append(f"message {index}: an assistant message with neither content nor tool calls")
                for call in message.get("tool_calls") or []:
                    if call["id"] in seen:
                        problems.append(f"message {index}: tool call id {call['id']!r} is used twice")
                    seen.add(call["id"])
                    pending.append(call["id"])
        if pending:
            problems.append(f"the request ends before the results of calls {pending}")
        return problems
