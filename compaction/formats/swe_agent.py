"""SWE-agent trajectory (``*.traj``).

A JSON object with ``trajectory`` (one step per model call: ``action``, ``observation``,
``thought``, ``response``, ``state``, ``messages``), ``history`` (the conversation as OpenAI
Chat Completions messages), ``info`` (exit status, submission, model stats) and
``replay_config`` / ``environment``.  The messages come from ``history``; they carry extra keys
(``agent``, ``message_type``, ``thought``, ``action``, ``is_demo``) and may give ``content`` as
a list of ``{"type": "text"}`` parts.  Tool calls are Chat Completions ``tool_calls``; tool
messages answer with ``tool_call_ids`` (a list) or ``tool_call_id``.  SWE-agent reuses call
ids across steps (replays do); ``_common.uniquify_tool_ids`` makes them unique consistently.

``meta`` keeps ``message_type`` and ``agent``, and ``is_demo`` when set.  When a trajectory
has no ``history`` (very old files), the ``messages`` of its last step are used.
"""

from __future__ import annotations

import re
from typing import Any

from ._common import Context, Draft, Malformed, load_json_document
from ._sniff import Sample, TranscriptFormat
from .openai import convert_all

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "swe-agent"

_OPENING = re.compile(r'\{\s*"(trajectory|history)"\s*:')


def _history(document: Any) -> list[Any]:
    if not isinstance(document, dict):
        raise Malformed(f"expected a JSON object with 'history', found {type(document).__name__}")
    history = document.get("history")
    if isinstance(history, list):
        return history
    trajectory = document.get("trajectory")
    if isinstance(trajectory, list) and trajectory and isinstance(trajectory[-1], dict):
        messages = trajectory[-1].get("messages")
        if isinstance(messages, list):
            return messages
    raise Malformed("a SWE-agent trajectory needs a 'history' list of messages")


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse a SWE-agent trajectory into drafts."""
    try:
        history = _history(load_json_document(text, ctx))
    except Malformed as err:
        ctx.problem(str(err))
        return []
    items = [(message, None, f"history[{index}]") for index, message in enumerate(history)]
    by_where = {where: message for message, _, where in items}
    drafts = convert_all(items, ctx)
    for draft in drafts:
        message = by_where.get(draft.where or "", {})
        for key in ("message_type", "agent"):
            if isinstance(message.get(key), str):
                draft.meta[key] = message[key]
        if message.get("is_demo"):
            draft.meta["is_demo"] = True
    return drafts


def sniff(sample: Sample) -> bool:
    """Claim a trajectory: an object with ``trajectory`` and ``history`` (or ``info``), told
    from a head that opens with ``{"trajectory":`` or ``{"history":`` and names
    ``"trajectory"``, or from the document."""
    if _OPENING.match(sample.text[:4096]) and '"trajectory"' in sample.text:
        return True
    document = sample.document
    return (
        isinstance(document, dict)
        and "trajectory" in document
        and ("history" in document or "info" in document)
    )


FORMAT = TranscriptFormat(
    name=NAME,
    priority=60,
    sniff=sniff,
    parse=parse,
    holds="a SWE-agent trajectory 'history' message",
)
