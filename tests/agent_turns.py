"""What the turn-by-turn tests share: a history cut into the turns an agent appends, and a
request body without its cache markers (they move to the newest message every turn)."""

from __future__ import annotations

from typing import Any

from compaction import Message

__all__ = ["strip_markers", "turns_of"]


def strip_markers(value: Any) -> Any:
    """Return a request body (or part of one) without its ``cache_control`` markers."""
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value


def turns_of(messages: list[Message]) -> list[list[Message]]:
    """Split a history at each assistant message: what an agent appends before each call.

    A first turn of system messages only is no call (an Anthropic request needs a user or
    assistant message, and compile refuses such a store): it joins the next turn.
    """
    turns: list[list[Message]] = [[]]
    for message in messages:
        system_only = all(m.role == "system" for m in turns[-1])
        if message.role == "assistant" and turns[-1] and not (len(turns) == 1 and system_only):
            turns.append([])
        turns[-1].append(message)
    return turns
