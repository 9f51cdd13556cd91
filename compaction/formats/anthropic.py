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
from ._common import Context, Draft, Item, Malformed, convert_items, typed_parts
from ._sniff import Sample, TranscriptFormat
from .openai import NAME as OPENAI
from .openai import parse_chat

__all__ = ["FORMAT", "NAME", "content_blocks", "convert", "parse", "sniff"]

NAME = "anthropic"

#: Part types of Chat Completions content; any other non-text block type is Anthropic's.
_CHAT_COMPLETIONS_PARTS = frozenset(
    {"image_url", "input_audio", "file", "refusal", "input_text", "output_text"}
)


def content_blocks(content: Any) -> list[Block]:
    """Return Anthropic ``content`` (a string or a list of blocks) as a list of blocks."""
    return typed_parts(content, strings=False)


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


def _anthropic_messages(messages: list[Any], system: Any) -> bool:
    """Whether messages are Anthropic's: a ``system`` beside them, or the first message that
    tells the two apart holds an Anthropic block rather than a Chat Completions shape."""
    dicts = [m for m in messages if isinstance(m, dict)]
    if not any("role" in m for m in dicts):
        return False
    if system is not None:
        return True
    for message in dicts:
        if message.get("role") in ("tool", "function", "developer") or "tool_calls" in message:
            return False
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else None
                if isinstance(kind, str) and kind != "text":
                    return kind not in _CHAT_COMPLETIONS_PARTS
    return False


def sniff(sample: Sample) -> bool:
    """Claim chat messages in Anthropic's shapes.

    A top-level ``system`` beside the messages, or non-text blocks that Chat Completions does
    not have (``tool_use``, ``tool_result``, ``thinking``, an ``image`` with a ``source`` ...)
    before any Chat Completions shape (roles ``tool`` / ``function`` / ``developer``,
    ``tool_calls``, parts such as ``image_url``).  A top-level ``"format"`` of ``anthropic``
    or ``openai`` decides on its own.  Plain text messages are left to the OpenAI format.
    """
    chat = sample.chat
    if chat is None:
        return False
    if chat.declared in (NAME, OPENAI):
        return bool(chat.declared == NAME)
    return _anthropic_messages(chat.messages, chat.system)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=20,
    sniff=sniff,
    parse=parse,
    holds="an Anthropic message (an object with a 'role' and 'content' blocks)",
)
