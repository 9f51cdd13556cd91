"""Anthropic Messages.

The same containers as the OpenAI format: a JSON array of messages, an object
``{"system": ..., "messages": [...]}`` (a request body), or JSONL with one message per line.
A top-level ``system`` (a string or a list of text blocks) becomes a system message first.
Content blocks are already the internal vocabulary, so they are kept as they are (unknown
types verbatim); a string ``content`` becomes one text block.  A ``system`` role inside the
list (some dumps carry one) is accepted as a system message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..blocks import Block
from ._common import Context, Draft, Item, Malformed, convert_items, text_blocks
from .openai import parse_chat

__all__ = ["NAME", "content_blocks", "convert", "parse"]

NAME = "anthropic"


def content_blocks(content: Any) -> list[Block]:
    """Return Anthropic ``content`` (a string or a list of blocks) as a list of blocks."""
    if content is None or isinstance(content, str):
        return text_blocks(content)
    if not isinstance(content, list):
        raise Malformed(f"content must be a string or a list of blocks, found {type(content).__name__}")
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            found = type(block).__name__
            raise Malformed(f"content[{index}] must be a block object with a string 'type', found {found}")
    return list(content)


def convert(message: Any) -> Draft:
    """Return the draft for one Anthropic message.

    Raises:
        Malformed: not an object, an unknown role, or content that is not blocks.
    """
    if not isinstance(message, dict):
        raise Malformed(f"a message must be an object, found {type(message).__name__}")
    role = message.get("role")
    if role not in ("user", "assistant", "system"):
        raise Malformed(f"unknown role {role!r}; expected user, assistant or system")
    if "content" not in message:
        raise Malformed(f"the {role} message has no 'content'")
    draft = Draft(role, content_blocks(message["content"]))
    if isinstance(message.get("id"), str):
        draft.source_id = message["id"]
    if isinstance(message.get("model"), str):
        draft.meta["model"] = message["model"]
    return draft


def convert_all(items: Sequence[Item], ctx: Context) -> list[Draft]:
    """Convert Anthropic messages, reporting malformed ones through ``ctx``."""
    return [draft for _, draft in convert_items(items, ctx, convert)]


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse an Anthropic Messages transcript into drafts."""
    return parse_chat(text, ctx, convert_all, content_blocks)
