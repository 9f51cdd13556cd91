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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .blocks import Block, canonical_json

__all__ = ["repair_tool_pairing", "turns_of"]

#: ``report(kind, reason, message_index)``: how a repair is reported.
Report = Callable[[str, str, int], None]


def turns_of(roles: list[str]) -> list[int]:
    """Return the turn number of each message: consecutive messages of one role share a turn."""
    turns: list[int] = []
    for index, role in enumerate(roles):
        same = index > 0 and roles[index - 1] == role
        turns.append(turns[-1] if same else (turns[-1] + 1 if turns else 0))
    return turns


def _pairs(messages: list[tuple[str, list[Block]]]) -> dict[tuple[int, int], tuple[int, int]]:
    """Return kept pairs: the (message, position) of each answered call -> its result's."""
    turn = turns_of([role for role, _blocks in messages])
    calls: dict[tuple[int, str], tuple[int, int]] = {}  # (turn, id) -> first call with that id
    for index, (role, blocks) in enumerate(messages):
        if role == "assistant":
            for position, block in enumerate(blocks):
                if block.get("type") == "tool_use":
                    calls.setdefault((turn[index], block["id"]), (index, position))
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for index, (role, blocks) in enumerate(messages):
        if role != "user":
            continue
        for position, block in enumerate(blocks):
            if block.get("type") == "tool_result":
                call = calls.get((turn[index] - 1, block["tool_use_id"]))
                if call is not None and call not in pairs:
                    pairs[call] = (index, position)
    return pairs


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
        New messages (the input is not modified).
    """
    pairs = _pairs(messages)
    results = {result: call for call, result in pairs.items()}
    taken = {block["id"] for _role, blocks in messages for block in blocks if block.get("type") == "tool_use"}
    used: set[str] = set()
    renamed: dict[tuple[int, int], str] = {}  # call or result position -> id sent
    for call in sorted(pairs):
        index, position = call
        tool_id = messages[index][1][position]["id"]
        new_id = tool_id
        suffix = 2
        while new_id in used or (new_id != tool_id and new_id in taken):  # never another call's id
            new_id = f"{tool_id}~{suffix}"
            suffix += 1
        used.add(new_id)
        if new_id != tool_id:
            renamed[call] = renamed[pairs[call]] = new_id
            report("renamed_tool_id", f"tool id {tool_id} repeats an earlier call's; sent as {new_id}", index)
    out: list[tuple[str, list[Block]]] = []
    for index, (role, blocks) in enumerate(messages):
        new_blocks: list[Block] = []
        for position, block in enumerate(blocks):
            kind = block.get("type")
            where = (index, position)
            if kind == "tool_use" and where not in pairs:
                report("orphan_tool_use", "its tool_result is not in the turn after it", index)
                new_blocks.append({"type": "text", "text": _call_text(block)})
            elif kind == "tool_result" and where not in results:
                report("orphan_tool_result", "its tool_use is not in the turn before it", index)
                new_blocks.extend(_result_blocks(block))
            elif where in renamed:
                key = "id" if kind == "tool_use" else "tool_use_id"
                new_blocks.append({**block, key: renamed[where]})
            else:
                new_blocks.append(block)
        out.append((role, new_blocks))
    return out
