"""Where a history may be cut: safe boundaries, tool rounds and chunks.

A *boundary* ``i`` lies between message ``i - 1`` and message ``i``.  It is *safe* when no
``tool_use`` before it has its ``tool_result`` after it, calls and results paired as the
wire gate pairs them (:mod:`compaction.pairing`: in the turn right after the call, the k-th
result of an id answering the k-th call, so a tool id reused by every round still leaves a
boundary between two closed rounds): chunk ends, the live-window start
and split points are only ever safe boundaries, so no request separates a call from its
result.  A ``tool_use`` that no result answers blocks only the boundary right after it (the
wire gate ships it as loud text), and a result that answers no call blocks nothing.

Chunks close at a token target and a minimum message count, at a safe boundary, never past
the open tail.  Closed chunks are stored as level-1 summaries, so boundaries are stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .pairing import ToolIds, tool_pairs
from .store import MessageFacts

__all__ = ["safe_boundaries", "Chunk", "close_chunks", "split_point"]


def _turns(facts: Sequence[MessageFacts]) -> list[int]:
    """Return each message's turn number as the request ships it: consecutive messages of one
    role share a turn, and a system message (shipped in the system text) takes no turn of its
    own (it gets the number of the turn before it, which pairing never reads for it)."""
    turns: list[int] = []
    turn, role = 0, None
    for fact in facts:
        if fact.role != "system":
            if role is not None and fact.role != role:
                turn += 1
            role = fact.role
        turns.append(turn)
    return turns


def safe_boundaries(facts: Sequence[MessageFacts]) -> list[bool]:
    """Return ``safe[i]`` for boundaries ``i = 0 .. len(facts)`` (relative to ``facts[0]``).

    Calls and results are paired as the wire gate's pairing repair pairs them
    (:func:`compaction.pairing.renamed_tool_ids` reads the same pairs): a result answers a
    call of the turn right before it with its id, the k-th result of an id the k-th call, so
    a tool id reused by every round pairs each round's call with its own result.  Boundary
    ``i`` is unsafe when a pair has its call before it and its result at or after it, or
    when it comes right after a call that no result answers (its result may still arrive);
    a result that answers no call does not block.  Boundary 0 and ``len(facts)`` are always
    safe.  Cost: O(messages + tool blocks), plus sorting the pairs.
    """
    n = len(facts)
    ids = [ToolIds(f.role, f.tool_uses, f.tool_results) for f in facts]
    pairs = tool_pairs(ids, _turns(facts))
    delta = [0] * (n + 2)
    for call, result in pairs.items():
        if result[0] > call[0]:
            delta[call[0] + 1] += 1
            delta[result[0] + 1] -= 1
    for index, fact in enumerate(facts):
        unanswered = sum(
            1 for ordinal in range(len(fact.tool_uses)) if (index, "tool_use", ordinal) not in pairs
        )
        if unanswered and index + 1 < n:
            # never right after an unanswered tool_use (its result may still arrive)
            delta[index + 1] += 1
            delta[index + 2] -= 1
    safe = [True] * (n + 1)
    open_rounds = 0
    for boundary in range(n + 1):
        open_rounds += delta[boundary]
        safe[boundary] = open_rounds == 0
    return safe


@dataclass(frozen=True)
class Chunk:
    """A range of messages ``[start_seq, end_seq)`` closed for a level-1 summary."""

    start_seq: int
    end_seq: int
    tokens: int


def close_chunks(
    facts: Sequence[MessageFacts],
    *,
    limit_seq: int,
    target_tokens: int,
    min_messages: int,
    message_tokens: Sequence[int] | None = None,
) -> list[Chunk]:
    """Close chunks over ``facts`` (which start at the summarized frontier) up to ``limit_seq``.

    Args:
        facts: messages from the frontier on, in order.
        limit_seq: no chunk ends after this seq (the open tail starts here).
        target_tokens: a chunk closes at the first safe boundary at or past this size (tokens).
        min_messages: and only once it holds at least this many messages.
        message_tokens: the size of each message (tokens); default ``text_tokens``.

    Returns:
        The closed chunks, contiguous from ``facts[0].seq``; the remainder stays open.
    """
    if not facts:
        return []
    sizes = list(message_tokens) if message_tokens is not None else [f.text_tokens for f in facts]
    safe = safe_boundaries(facts)
    base = facts[0].seq
    chunks: list[Chunk] = []
    start = 0
    running = 0
    for index in range(len(facts)):
        running += sizes[index]
        boundary = index + 1
        if base + boundary > limit_seq:
            break
        count = boundary - start
        if safe[boundary] and running >= target_tokens and count >= min_messages:
            chunks.append(Chunk(base + start, base + boundary, running))
            start = boundary
            running = 0
    return chunks


def split_point(facts: Sequence[MessageFacts], sizes: Sequence[int]) -> int | None:
    """Return the safe boundary nearest the token midpoint of ``facts`` (relative index), or None.

    ``None`` means the range is one indivisible tool round (or one message).
    """
    safe = safe_boundaries(facts)
    total = sum(sizes)
    best: int | None = None
    best_distance = 0.0
    running = 0
    for boundary in range(1, len(facts)):
        running += sizes[boundary - 1]
        if safe[boundary]:
            distance = abs(running - total / 2)
            if best is None or distance < best_distance:
                best, best_distance = boundary, distance
    return best
