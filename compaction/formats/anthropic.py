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
from ._common import Context, Draft, Malformed, text_blocks
from .openai import iter_messages

__all__ = ["NAME", "parse", "convert", "content_blocks"]

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


def convert_all(items: Sequence[tuple[Any, int | None, str | None]], ctx: Context) -> list[Draft]:
    """Convert Anthropic messages, reporting malformed ones through ``ctx``."""
    drafts: list[Draft] = []
    for message, line, where in items:
        try:
            draft = convert(message)
        except Malformed as err:
            ctx.problem(str(err), line=line, where=where)
            continue
        draft.line, draft.where = line, where
        drafts.append(draft)
    return drafts


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse an Anthropic Messages transcript into drafts."""
    items, system = iter_messages(text, ctx)
    drafts = convert_all(items, ctx)
    if system:
        try:
            drafts.insert(0, Draft("system", content_blocks(system), where="system"))
        except Malformed as err:
            ctx.problem(str(err), where="system")
    return drafts
