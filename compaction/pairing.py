"""Tool pairing as both providers require it, repaired on the request, never in the store.

OpenAI Chat and Anthropic Messages both want each tool call answered in the very next turn:
consecutive messages of one role form a turn (the renderers merge them), an assistant
turn's ``tool_use`` blocks must be answered by ``tool_result`` blocks in the user turn right
after it, once each, and a result must answer a call of the turn right before it.  Tool ids
must also be unique within a request (Anthropic refuses a repeated ``tool_use`` id; OpenAI
matches ``tool`` messages to calls by id).

:func:`repair_tool_pairing` makes a request's messages satisfy that, whatever the store
holds (histories cut at a window edge, tools called again with a reused id through the
API, results without their call): a call without its result and a result without its call
become loud text stand-ins, and a pair whose id an earlier pair already used is sent under
a fresh id (``<id>~2``).  Each change is reported; the store keeps the originals.

Which pairs are renamed, and to what, is decided from the messages' roles and tool ids
alone (:func:`renamed_tool_ids`), so the compile planner prices the renames from a store's
cached facts exactly as the gate ships them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .blocks import Block, canonical_json

__all__ = [
    "ToolIds",
    "ToolSlot",
    "repair_tool_pairing",
    "renamed_tool_ids",
    "tool_ids_of",
    "turns_of",
    "with_sent_ids",
]

#: ``report(kind, reason, message_index)``: how a repair is reported.
Report = Callable[[str, str, int], None]

#: Where a tool block is in a request: ``(message index, block type, ordinal)``, the block type
#: ``"tool_use"`` or ``"tool_result"`` and the ordinal its place among the message's blocks of
#: that type (0 for the first).  Pairing reads nothing else of a block, so a store's cached
#: facts (``MessageFacts.tool_uses``, ``tool_results``) name the same slots as the blocks.
ToolSlot = tuple[int, str, int]


class ToolIds(NamedTuple):
    """What pairing reads of one message: its role and its tool ids in block order."""

    role: str
    #: the ``id`` of each ``tool_use`` block, in order
    tool_uses: Sequence[str]
    #: the ``tool_use_id`` of each ``tool_result`` block, in order
    tool_results: Sequence[str]


def turns_of(roles: list[str]) -> list[int]:
    """Return the turn number of each message: consecutive messages of one role share a turn."""
    turns: list[int] = []
    for index, role in enumerate(roles):
        same = index > 0 and roles[index - 1] == role
        turns.append(turns[-1] if same else (turns[-1] + 1 if turns else 0))
    return turns


def tool_ids_of(messages: Sequence[tuple[str, Sequence[Block]]]) -> list[ToolIds]:
    """Return the :class:`ToolIds` of each ``(role, blocks)`` message, in order."""
    out: list[ToolIds] = []
    for role, blocks in messages:
        uses: list[str] = []
        results: list[str] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_use":
                uses.append(block["id"])
            elif kind == "tool_result":
                results.append(block["tool_use_id"])
        out.append(ToolIds(role, uses, results))
    return out


def _pairs(messages: Sequence[ToolIds], turns: Sequence[int]) -> dict[ToolSlot, ToolSlot]:
    """Return the kept pairs, each answered call's slot -> its result's, in call order.

    A result answers the first call of the turn before with its id that no earlier result
    answered, so a turn that calls one id twice (parallel calls whose ids a provider left
    empty or reused) pairs its calls with their results in order; the later pair is then
    sent under a fresh id (:func:`_renames`).
    """
    calls: dict[tuple[int, str], list[ToolSlot]] = {}  # (turn, id) -> the calls with that id, in order
    for index, message in enumerate(messages):
        if message.role == "assistant":
            for ordinal, tool_id in enumerate(message.tool_uses):
                calls.setdefault((turns[index], tool_id), []).append((index, "tool_use", ordinal))
    answered: dict[tuple[int, str], int] = {}  # (turn, id) -> how many of its calls a result answered
    pairs: dict[ToolSlot, ToolSlot] = {}
    for index, message in enumerate(messages):
        if message.role != "user":
            continue
        for ordinal, tool_id in enumerate(message.tool_results):
            key = (turns[index] - 1, tool_id)
            waiting = calls.get(key, [])
            taken = answered.get(key, 0)
            if taken < len(waiting):
                pairs[waiting[taken]] = (index, "tool_result", ordinal)
                answered[key] = taken + 1
    return dict(sorted(pairs.items()))


def _renames(messages: Sequence[ToolIds], pairs: Mapping[ToolSlot, ToolSlot]) -> dict[ToolSlot, str]:
    """Return the slots of the pairs sent under a fresh id (call and result) -> that id, in call order.

    Each id's search for a free suffix goes on from where its previous one stopped: every
    suffix it passed is used or another call's id, and stays so, so the ids are the ones a
    search from ``~2`` finds, and an id reused ``n`` times costs ``O(n)``, not ``O(n**2)``.
    """
    taken = {tool_id for message in messages for tool_id in message.tool_uses}
    used: set[str] = set()
    next_suffix: dict[str, int] = {}  # id -> the first suffix its next rename tries
    renamed: dict[ToolSlot, str] = {}
    for call, result in pairs.items():  # oldest call first: the first pair keeps its id
        tool_id = messages[call[0]].tool_uses[call[2]]
        new_id = tool_id
        suffix = next_suffix.get(tool_id, 2)
        while new_id in used or (new_id != tool_id and new_id in taken):  # never another call's id
            new_id = f"{tool_id}~{suffix}"
            suffix += 1
        if new_id != tool_id:
            next_suffix[tool_id] = suffix
        used.add(new_id)
        if new_id != tool_id:
            renamed[call] = renamed[result] = new_id
    return renamed


def renamed_tool_ids(messages: Sequence[ToolIds], turns: Sequence[int] | None = None) -> dict[ToolSlot, str]:
    """Return the tool blocks :func:`repair_tool_pairing` sends under a fresh id, and that id.

    A pair (a call and the result that answers it in the next turn) whose call id an earlier
    pair of the request already used is sent as ``<id>~2`` (``~3``, ...: the first suffix no
    earlier pair used and no call of the request has), in its call and in its result; the
    oldest pair keeps its id.

    Args:
        messages: what pairing reads of the request's messages, in order.  Messages without
            tool blocks may be left out when ``turns`` is given.
        turns: each message's turn number (consecutive messages of one role share one, see
            :func:`turns_of`); default: computed from the roles of ``messages``, all of them.

    Returns:
        ``{slot: id sent}`` for each renamed call and result (slots index ``messages``), in
        call order; empty when no pair repeats an id (the usual case).
    """
    turns = turns_of([m.role for m in messages]) if turns is None else turns
    return _renames(messages, _pairs(messages, turns))


def with_sent_ids(blocks: Sequence[Block], sent: Mapping[tuple[str, int], str]) -> list[Block]:
    """Return ``blocks`` with the tool ids of :func:`renamed_tool_ids` applied (the input is not modified).

    Args:
        blocks: one message's blocks.
        sent: ``{(block type, ordinal): id sent}`` of this message's renamed slots.
    """
    out: list[Block] = []
    ordinals = {"tool_use": 0, "tool_result": 0}
    for block in blocks:
        kind = block.get("type")
        if kind in ordinals:
            new_id = sent.get((kind, ordinals[kind]))
            ordinals[kind] += 1
            if new_id is not None:
                block = {**block, ("id" if kind == "tool_use" else "tool_use_id"): new_id}
        out.append(block)
    return out


def _call_text(block: Block) -> str:
    return (
        f"[tool call {block['name']} (id {block['id']}) with input "
        f"{canonical_json(block.get('input', {}))}; no result was recorded for it]"
    )


def _result_blocks(block: Block) -> list[Block]:
    content: Any = block.get("content", "")
    text = content if isinstance(content, str) else "\n".join(
        b.get("text", "") for b in content if b.get("type") == "text"
    )
    out: list[Block] = [
        {"type": "text", "text": f"[result of tool call {block['tool_use_id']}, whose call is not in this request]\n{text}"}
    ]
    if isinstance(content, list):
        out.extend(b for b in content if b.get("type") == "image")
    return out


def repair_tool_pairing(messages: list[tuple[str, list[Block]]], report: Report) -> list[tuple[str, list[Block]]]:
    """Return ``messages`` with every tool call answered in the next turn and every id unique.

    Args:
        messages: ``(role, blocks)`` of one request, in order.
        report: called once per change: ``report(kind, reason, message_index)`` with kind
            ``"orphan_tool_use"``, ``"orphan_tool_result"`` or ``"renamed_tool_id"``.

    Returns:
        New messages (the input is not modified).  The renamed ids are
        :func:`renamed_tool_ids`'s.
    """
    ids = tool_ids_of(messages)
    pairs = _pairs(ids, turns_of([m.role for m in ids]))
    answered = set(pairs.values())
    renamed = _renames(ids, pairs)
    sent: dict[int, dict[tuple[str, int], str]] = {}  # message index -> its renamed slots
    for (index, kind, ordinal), new_id in renamed.items():
        sent.setdefault(index, {})[(kind, ordinal)] = new_id
        if kind == "tool_use":
            tool_id = ids[index].tool_uses[ordinal]
            report("renamed_tool_id", f"tool id {tool_id} repeats an earlier call's; sent as {new_id}", index)
    out: list[tuple[str, list[Block]]] = []
    for index, (role, blocks) in enumerate(messages):
        if not ids[index].tool_uses and not ids[index].tool_results:
            out.append((role, list(blocks)))
            continue
        new_blocks: list[Block] = []
        ordinals = {"tool_use": 0, "tool_result": 0}
        for block in with_sent_ids(blocks, sent[index]) if index in sent else blocks:
            block_type = str(block.get("type"))
            if block_type in ordinals:
                slot = (index, block_type, ordinals[block_type])
                ordinals[block_type] += 1
                if block_type == "tool_use" and slot not in pairs:
                    report("orphan_tool_use", "its tool_result is not in the turn after it", index)
                    new_blocks.append({"type": "text", "text": _call_text(block)})
                    continue
                if block_type == "tool_result" and slot not in answered:
                    report("orphan_tool_result", "its tool_use is not in the turn before it", index)
                    new_blocks.extend(_result_blocks(block))
                    continue
            new_blocks.append(block)
        out.append((role, new_blocks))
    return out
