"""Render gated internal messages into OpenAI Chat or Anthropic Messages request bodies.

Rendering is a pure, deterministic function of its input: it never adds or drops an image
(the wire gate decided those), so the image parts it emits are exactly the ones the gate
kept.  What a format cannot carry becomes a loud text stand-in, never nothing:

* OpenAI Chat: consecutive assistant messages merge into one turn; ``tool_result`` blocks
  become ``role: "tool"`` messages right after the assistant turn; images inside a tool result follow in a user message (tool messages carry
  text only); thinking blocks are not carried (reported by the gate); other unknown block
  types become a text stand-in naming their type.
* Anthropic Messages: blocks pass through verbatim; consecutive messages of one role merge;
  ``tool_result`` blocks come first in their user message; the first message is a user turn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .blocks import Block, canonical_json

__all__ = ["render_openai", "render_anthropic", "unknown_block_text", "FORMATS"]

FORMATS = ("openai", "anthropic")

Wire = tuple[str, Sequence[Block]]


def unknown_block_text(block: Block) -> str:
    """Return the loud text stand-in for a block a format cannot carry."""
    return (
        f"[content block of type {block.get('type')!r} not supported by this format: {canonical_json(block)}]"
    )


def _image_part(block: Block) -> dict[str, Any]:
    source = block["source"]
    if source["type"] == "url":
        url = source["url"]
    else:
        url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result_text(content: Any) -> tuple[str, list[Block]]:
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


def render_openai(system: str | None, messages: Sequence[Wire], model: str) -> dict[str, Any]:
    """Return an OpenAI Chat Completions request body ``{"model", "messages"}``."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    # Consecutive assistant messages are one turn: their tool messages must follow them directly.
    merged: list[tuple[str, list[Block]]] = []
    for role, blocks in messages:
        if role == "assistant" and merged and merged[-1][0] == "assistant":
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, list(blocks)))
    for role, blocks in merged:
        if role == "system":
            out.append({"role": "system", "content": "\n\n".join(b.get("text", "") for b in blocks)})
            continue
        if role == "assistant":
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
                            "function": {
                                "name": block["name"],
                                "arguments": canonical_json(block.get("input", {})),
                            },
                        }
                    )
                elif kind in ("thinking", "redacted_thinking"):
                    continue
                else:
                    texts.append(unknown_block_text(block))
            message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
            continue
        parts: list[dict[str, Any]] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_result":
                text, images = _tool_result_text(block.get("content", ""))
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
    return {"model": model, "messages": out}


def render_anthropic(
    system: str | None, messages: Sequence[Wire], model: str, max_tokens: int = 4096
) -> dict[str, Any]:
    """Return an Anthropic Messages request body ``{"model", "max_tokens", "system", "messages"}``."""
    out: list[dict[str, Any]] = []
    system_texts = [system] if system else []
    for role, blocks in messages:
        if role == "system":
            system_texts.extend(b.get("text", "") for b in blocks)
            continue
        content = [json.loads(canonical_json(b)) for b in blocks]
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    for message in out:
        if message["role"] == "user":
            results = [b for b in message["content"] if b.get("type") == "tool_result"]
            others = [b for b in message["content"] if b.get("type") != "tool_result"]
            message["content"] = results + others
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "[the conversation continues]"}]})
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if system_texts:
        body["system"] = "\n\n".join(system_texts)
    body["messages"] = out
    return body
