"""Cline and Roo Code task histories (``tasks/<id>/api_conversation_history.json``).

The file is a JSON array of Anthropic ``MessageParam`` objects extended with Cline's own
fields (``ClineStorageMessage`` in cline/cline ``src/shared/messages/content.ts``): ``ts``
(milliseconds), ``modelInfo`` (``modelId``, ``providerId``, ``mode``), ``metrics`` (tokens,
cost) and an ``id``; its blocks may carry ``call_id``, ``reasoning_details``, ``summary``
and, outside thinking blocks, a ``signature``.  The Anthropic parser reads the messages, but
it kept those fields inside the blocks, and the Anthropic Messages API refuses a block with a
field it does not define (Cline strips them itself before every request:
``cleanContentBlock``).  This format reads the messages as Anthropic ones, then:

* removes ``call_id``, ``reasoning_details``, ``summary`` and a non-thinking block's
  ``signature`` from every block (tool-result contents included); non-empty
  ``reasoning_details`` are kept in ``meta["cline_reasoning_details"]``;
* keeps ``ts`` as ``meta["timestamp"]`` (ISO 8601, UTC), ``modelInfo.modelId`` as
  ``meta["model"]`` (with ``provider`` and ``mode``), ``metrics`` as ``meta["cline_metrics"]``;
* keeps everything else as it is: the ``<task>`` and ``<environment_details>`` text blocks
  Cline adds to user turns stay verbatim (they are what the model saw), images stay images,
  an unsigned thinking block stays thinking (the Anthropic request format ships it as loud
  text, as Cline drops it), and old histories whose tool calls are XML inside text import
  as that text.

Detection: a JSON array of chat messages whose messages carry ``ts`` / ``modelInfo``, or
whose head holds Cline's ``<task>`` or ``<environment_details>`` wrapper in a text block;
without this format the file read as Anthropic (or, with text blocks only, as OpenAI).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ..blocks import Block
from ._common import Context, Draft, Item, convert_items
from ._sniff import Sample, TranscriptFormat
from .anthropic import content_blocks
from .anthropic import convert as convert_anthropic
from .openai import parse_chat

__all__ = ["FORMAT", "NAME", "clean_block", "convert", "parse", "sniff"]

NAME = "cline"

#: Cline's fields inside a block that the Anthropic Messages API does not define.
_CLINE_BLOCK_FIELDS = ("call_id", "reasoning_details", "summary")
#: A text block that opens with Cline's task or environment wrapper, as JSON text.
_WRAPPER = re.compile(r'"text"\s*:\s*"(?:\\n)?(?:<task>|<environment_details>)')


def clean_block(block: Block, details: list[Any]) -> Block:
    """Return ``block`` without Cline's fields (collecting non-empty ``reasoning_details``)."""
    extra = [key for key in _CLINE_BLOCK_FIELDS if key in block]
    signed = block.get("type") not in ("thinking",) and "signature" in block
    nested = block.get("type") == "tool_result" and isinstance(block.get("content"), list)
    if not extra and not signed and not nested:
        return block
    reasoning = block.get("reasoning_details")
    if isinstance(reasoning, list) and reasoning:
        details.extend(reasoning)
    cleaned = {
        k: v for k, v in block.items() if k not in _CLINE_BLOCK_FIELDS and not (signed and k == "signature")
    }
    if nested:
        cleaned["content"] = [clean_block(b, details) if isinstance(b, dict) else b for b in block["content"]]
    return cleaned


def convert(message: Any) -> Draft:
    """Return the draft for one Cline message: an Anthropic message, cleaned, with Cline's facts in meta.

    Raises:
        Malformed: what :func:`compaction.formats.anthropic.convert` refuses.
    """
    draft = convert_anthropic(message)
    details: list[Any] = []
    draft.content = [clean_block(block, details) for block in draft.content]
    if details:
        draft.meta["cline_reasoning_details"] = details
    ts = message.get("ts")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool) and 0 < ts < 1e14:
        draft.meta["timestamp"] = (
            datetime.fromtimestamp(ts / 1000, tz=timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
    info = message.get("modelInfo")
    if isinstance(info, dict):
        if isinstance(info.get("modelId"), str):
            draft.meta["model"] = info["modelId"]
        for key, name in (("providerId", "provider"), ("mode", "mode")):
            if isinstance(info.get(key), str):
                draft.meta[name] = info[key]
    if isinstance(message.get("metrics"), dict):
        draft.meta["cline_metrics"] = message["metrics"]
    return draft


def convert_all(items: Sequence[Item], ctx: Context) -> list[Draft]:
    """Convert Cline messages, reporting malformed ones through ``ctx``."""
    return [draft for _, draft in convert_items(items, ctx, convert)]


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse a Cline / Roo Code ``api_conversation_history.json`` into drafts."""
    return parse_chat(text, ctx, convert_all, content_blocks)


def sniff(sample: Sample) -> bool:
    """Claim a JSON array of chat messages from Cline or Roo Code: messages with ``ts`` or
    ``modelInfo``, or a head with a ``<task>`` / ``<environment_details>`` text block."""
    if not sample.text.startswith("[") or '"role"' not in sample.head:
        return False
    if _WRAPPER.search(sample.head):
        return True
    document = sample.document
    return isinstance(document, list) and any(
        isinstance(m, dict) and "role" in m and ("modelInfo" in m or isinstance(m.get("ts"), (int, float)))
        for m in document[:50]
    )


FORMAT = TranscriptFormat(
    name=NAME,
    priority=27,
    sniff=sniff,
    parse=parse,
    holds="a Cline message (an Anthropic message with 'role', 'content' blocks and Cline's 'ts' / 'modelInfo')",
)
