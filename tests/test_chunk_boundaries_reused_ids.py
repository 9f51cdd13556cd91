"""Safe chunk boundaries pair calls and results as the wire gate does, whatever ids repeat.

``chunking.safe_boundaries`` used to treat a tool id as one round from its first call to its
last result, so an id reused by every round (a provider that numbers calls per turn, or
leaves ids empty) left no boundary at all.  It now reads the pairing repair's pairs
(``compaction.pairing``): a result answers a call of the turn right before it, the k-th
result of an id the k-th call.  These tests generate histories of tool rounds (calls split
over one or two assistant messages, results in any order, some calls never answered, system
messages and plain texts between) and check, with ids reused and with every call's id its
own, that no safe boundary splits a call from its result and that both leave the same
boundaries.  Every round has a result, so a user turn ends it: two rounds in one assistant
turn are one turn to the gate, which answers the older call first whatever round the result
came from.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import Block
from compaction.chunking import close_chunks, safe_boundaries
from compaction.pairing import repair_tool_pairing
from compaction.store import MessageFacts

#: One generated round: ``(calls per assistant message, answered calls in result order,
#: extras)``: the calls are numbered within the round, ``extras`` names what comes between
#: the round and the next ("system" between the calls and the results, "text" after them).
Round = tuple[list[int], list[int], frozenset[str]]


@st.composite
def rounds(draw: st.DrawFn) -> list[Round]:
    out: list[Round] = []
    for _ in range(draw(st.integers(1, 8))):
        calls = draw(st.integers(1, 3))
        split = draw(st.integers(0, calls - 1))  # calls [0, split) in a first assistant message
        answered = draw(st.permutations(list(range(calls))))
        answered = answered[: draw(st.integers(1, calls))]  # a user turn ends every round
        extras = draw(st.sets(st.sampled_from(["system", "text"])))
        out.append(([split, calls - split], list(answered), frozenset(extras)))
    return out


def _history(plan: list[Round], id_of: Any) -> tuple[list[tuple[str, list[Block]]], list[tuple[int, int]]]:
    """Return the messages of ``plan`` and each answered call's ``(call message, result message)``.

    ``id_of(round, call)`` names each call's id.
    """
    messages: list[tuple[str, list[Block]]] = [("user", [{"type": "text", "text": "go"}])]
    pairs: list[tuple[int, int]] = []
    for number, (sizes, answered, extras) in enumerate(plan):
        where: dict[int, int] = {}
        call = 0
        for size in sizes:
            if size:
                blocks = []
                for _ in range(size):
                    blocks.append(
                        {"type": "tool_use", "id": id_of(number, call), "name": "f", "input": {"n": call}}
                    )
                    where[call] = len(messages)
                    call += 1
                messages.append(("assistant", blocks))
        if "system" in extras:
            messages.append(("system", [{"type": "text", "text": "a system note"}]))
        results = [
            {"type": "tool_result", "tool_use_id": id_of(number, call), "content": f"out {number}.{call}"}
            for call in answered
        ]
        if results:
            pairs += [(where[call], len(messages)) for call in answered]
            messages.append(("user", results))
        if "text" in extras:
            messages.append(("assistant", [{"type": "text", "text": f"round {number} done"}]))
    return messages, pairs


def _facts(messages: list[tuple[str, list[Block]]]) -> list[MessageFacts]:
    return [
        MessageFacts(
            seq,
            role,
            10,
            tuple(b["id"] for b in blocks if b["type"] == "tool_use"),
            tuple(b["tool_use_id"] for b in blocks if b["type"] == "tool_result"),
        )
        for seq, (role, blocks) in enumerate(messages)
    ]


def _orphans(messages: list[tuple[str, list[Block]]]) -> int:
    """Return how many calls and results the gate's pairing repair ships as orphan stand-ins."""
    shown = [(role, blocks) for role, blocks in messages if role != "system"]  # in the system text
    found: list[str] = []
    repair_tool_pairing(shown, lambda kind, _reason, _index: found.append(kind))
    return sum(1 for kind in found if kind.startswith("orphan"))


@settings(max_examples=300, deadline=None)
@given(plan=rounds(), reused=st.sampled_from([["x"], [""], ["a", "b"]]))
def test_no_safe_boundary_splits_a_call_from_its_result(plan: list[Round], reused: list[str]) -> None:
    messages, pairs = _history(plan, lambda number, call: reused[(number + call) % len(reused)])
    safe = safe_boundaries(_facts(messages))
    assert safe[0] and safe[-1]
    for call, result in pairs:
        assert not any(safe[call + 1 : result + 1]), (call, result, safe)
    # cutting at a safe boundary makes no orphan the whole history does not have
    whole = _orphans(messages)
    for boundary in range(1, len(messages)):
        if safe[boundary]:
            assert _orphans(messages[:boundary]) + _orphans(messages[boundary:]) == whole, boundary


@settings(max_examples=300, deadline=None)
@given(plan=rounds(), reused=st.sampled_from([["x"], [""], ["a", "b"]]))
def test_reused_ids_leave_the_boundaries_distinct_ids_leave(plan: list[Round], reused: list[str]) -> None:
    same, _pairs = _history(plan, lambda number, call: reused[(number + call) % len(reused)])
    distinct, _pairs = _history(plan, lambda number, call: f"call_{number}_{call}")
    assert safe_boundaries(_facts(same)) == safe_boundaries(_facts(distinct))


def test_three_hundred_rounds_under_one_id_close_in_many_chunks() -> None:
    # one id for every round: each boundary between two rounds is safe, as with distinct ids
    messages, _pairs = _history([([1, 0], [0], frozenset())] * 300, lambda _number, _call: "x")
    facts = _facts(messages)
    safe = safe_boundaries(facts)
    assert [b for b in range(len(messages) + 1) if safe[b]] == [0, 1, *range(3, 602, 2)]
    chunks = close_chunks(facts, limit_seq=len(facts), target_tokens=100, min_messages=2)
    assert [(c.start_seq, c.end_seq) for c in chunks[:2]] == [(0, 11), (11, 21)]
    assert len(chunks) == 60
