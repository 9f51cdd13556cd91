"""OpenAI Responses API request bodies (https://platform.openai.com/docs/api-reference/responses).

The body is ``{"model", "instructions", "input": [items], ["max_output_tokens"], ["tools"]}``.
Gated messages (the internal block form) become input items; what the shape cannot carry
becomes a loud text stand-in, never nothing:

* the system text is ``instructions``; a system message later in the history is a
  ``message`` item of role ``system``;
* consecutive messages of one role merge into one turn, as for Chat Completions;
* an assistant turn is one ``message`` item (role ``assistant``, one ``output_text`` part: its
  texts joined in block order, a text written after a call included) and then one
  ``function_call`` item per ``tool_use`` block (``call_id`` = the block's id, ``arguments`` the
  input as a JSON string), so the outputs of its calls follow them directly;
* a user turn's ``tool_result`` blocks become ``function_call_output`` items (``output`` the
  result's text) first, then one ``message`` item of role ``user`` with its other parts
  (``input_text``, ``input_image``); a result's images follow in that message after a note
  naming the call (an output item carries text);
* thinking and redacted thinking blocks, and the ``encrypted_reasoning`` of a ``reasoning``
  item, are not carried (``dropped_block_types``, as for Chat Completions: a ``reasoning``
  item is only accepted back by the model and store that made it); other unknown block types
  become a text stand-in naming their type.

The input side of this shape is :mod:`compaction.formats.openai_responses` (the same item
types read back); :meth:`OpenAIResponses.grammar_problems` checks what the API refuses: a
``function_call`` with no ``function_call_output`` after it, an output with no call before
it, a call id used twice, an image outside a user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ..blocks import Block, canonical_json, unknown_block_text
from ..types import RequestFormatName
from .base import RequestFormat, WireMessage, count_body_images, merge_turns
from .openai_chat import image_url, tool_result_parts

__all__ = ["OpenAIResponses", "chat_view"]


def _image_part(block: Block) -> dict[str, Any]:
    return {"type": "input_image", "image_url": image_url(block), "detail": "auto"}


def _message(role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": parts}


class OpenAIResponses(RequestFormat):
    """The OpenAI Responses shape (``{"model", "instructions", "input", ["max_output_tokens"], ["tools"]}``)."""

    name: ClassVar[RequestFormatName] = "openai-responses"
    title: ClassVar[str] = "OpenAI Responses"
    default_model: ClassVar[str] = "gpt-4o"
    image_types: ClassVar[frozenset[str]] = frozenset({"input_image", "image_url", "image"})
    dropped_block_types: ClassVar[frozenset[str]] = frozenset({"thinking", "redacted_thinking", "encrypted_reasoning"})

    output_cap_field: ClassVar[str] = "max_output_tokens"

    def render_conversation(self, system: str | None, messages: Sequence[WireMessage]) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for role, blocks in merge_turns(messages, self.dropped_block_types):
            if role == "system":
                text = "\n\n".join(b.get("text", "") for b in blocks)
                items.append(_message("system", [{"type": "input_text", "text": text}]))
            elif role == "assistant":
                items.extend(self._assistant_items(blocks))
            else:
                items.extend(self._user_items(blocks))
        body: dict[str, Any] = {}
        if system:
            body["instructions"] = system
        body["input"] = items
        return body

    def _assistant_items(self, blocks: Sequence[Block]) -> list[dict[str, Any]]:
        """Return one assistant turn as items: one ``message`` of its texts, then its calls.

        The texts (and loud stand-ins) are joined in block order into one ``message`` item, which
        comes before the turn's ``function_call`` items, so each call's output can follow the
        calls directly: a ``message`` between a call and its output breaks the grammar
        (:meth:`grammar_problems`), which a text written after a call (``[text, tool_use,
        text]``) did when its texts were split at the calls.  One frame and a join a text is
        what :func:`~compaction.tokens.counting.blocks_text_tokens` counts.
        """
        calls: list[dict[str, Any]] = []
        texts: list[str] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                texts.append(block["text"])
            elif kind == "tool_use":
                calls.append({
                    "type": "function_call",
                    "call_id": block["id"],
                    "name": block["name"],
                    "arguments": canonical_json(block.get("input", {})),
                })
            elif kind in self.dropped_block_types:
                continue
            else:
                texts.append(unknown_block_text(block))
        message = [_message("assistant", [{"type": "output_text", "text": "\n\n".join(texts)}])] if texts else []
        return message + calls

    def _user_items(self, blocks: Sequence[Block]) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        for block in blocks:
            kind = block.get("type")
            if kind in self.dropped_block_types:
                continue
            if kind == "tool_result":
                text, images = tool_result_parts(block.get("content", ""))
                if block.get("is_error"):
                    text = f"[tool error] {text}"
                outputs.append({"type": "function_call_output", "call_id": block["tool_use_id"], "output": text})
                if images:
                    parts.append({"type": "input_text", "text": f"[images returned by tool call {block['tool_use_id']}]"})
                    parts.extend(_image_part(i) for i in images)
            elif kind == "text":
                parts.append({"type": "input_text", "text": block["text"]})
            elif kind == "image":
                parts.append(_image_part(block))
            else:
                parts.append({"type": "input_text", "text": unknown_block_text(block)})
        return outputs + ([_message("user", parts)] if parts else [])

    def add_cache_hints(self, body: dict[str, Any], *, key: str | None, mark_prefix: bool) -> None:
        # As Chat Completions: automatic prefix caching, routed by a key
        # (https://platform.openai.com/docs/guides/prompt-caching).
        if key is not None:
            body["prompt_cache_key"] = key

    def render_tools(self, tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["parameters"]}
            for t in tools
        ]

    def count_images(self, body: dict[str, Any]) -> int:
        """Return the image inputs of a rendered body (``input`` items and ``instructions``)."""
        return count_body_images(body.get("input", []), self.image_types) + count_body_images(
            body.get("instructions", ""), self.image_types
        )

    def grammar_problems(self, body: dict[str, Any]) -> list[str]:
        problems: list[str] = []
        items = body.get("input", [])
        if not isinstance(items, list):
            return [f"input must be a list of items; found {type(items).__name__}"]
        pending: list[str] = []  # calls of the current model turn not yet answered
        seen: set[str] = set()
        for index, item in enumerate(items):
            kind = item.get("type", "message")
            if kind == "function_call":
                call = item.get("call_id")
                if call in seen:
                    problems.append(f"input {index}: call id {call!r} is used twice")
                seen.add(call)
                pending.append(call)
                continue
            if kind == "function_call_output":
                call = item.get("call_id")
                if call in pending:
                    pending.remove(call)
                else:
                    problems.append(f"input {index}: function_call_output {call!r} answers no open function_call")
                if not isinstance(item.get("output"), str):
                    problems.append(f"input {index}: a function_call_output's output must be text")
                continue
            if pending:
                problems.append(f"input {index}: a {item.get('role')} message comes before the outputs of calls {pending}")
                pending = []
            content = item.get("content")
            if (
                item.get("role") != "user"
                and isinstance(content, list)
                and any(isinstance(p, dict) and p.get("type") in self.image_types for p in content)
            ):
                problems.append(f"input {index}: an image in a {item.get('role')} message")
        if pending:
            problems.append(f"the input ends before the outputs of calls {pending}")
        return problems


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """Return a Responses body's conversation as Chat Completions ``messages`` (for checks).

    ``instructions`` becomes a system message, each ``function_call`` a ``tool_calls`` entry
    of an assistant message (consecutive calls and texts of the model share one), each
    ``function_call_output`` a ``tool`` message, each ``message`` item a message whose
    content is its parts' text (``input_image`` parts as ``image_url`` parts).
    """
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    for item in body.get("input", []):
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            content = item.get("content")
            parts = content if isinstance(content, list) else [{"type": "input_text", "text": str(content)}]
            converted: list[dict[str, Any]] = [
                {"type": "image_url", "image_url": {"url": p.get("image_url")}}
                if p.get("type") == "input_image"
                else {"type": "text", "text": p.get("text", "")}
                for p in parts
            ]
            role = item.get("role", "user")
            if role == "assistant" and messages and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
                messages[-1]["content"] = f"{messages[-1]['content'] or ''}\n\n" + "\n\n".join(p["text"] for p in converted)
            elif role == "assistant":
                messages.append({"role": "assistant", "content": "\n\n".join(p["text"] for p in converted)})
            else:
                messages.append({"role": role, "content": converted})
    return {"messages": messages}
