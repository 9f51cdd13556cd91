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
a fresh id (``<id>_2``).  Each change is reported; the store keeps the originals.

Each request format also has its own id grammar (:data:`TOOL_ID_GRAMMARS`): Anthropic takes
a ``tool_use`` id matching ``^[a-zA-Z0-9_-]+$``, OpenAI Chat a ``tool_calls[].id`` of at most
40 characters, OpenAI Responses a ``call_id`` of at most 64.  A pair whose stored id breaks
the target's grammar is sent under :func:`wire_tool_id` (its characters made valid, plus a
short hash of the stored id when that changed it, cut to the limit): the same stored id
maps to the same wire id on every request, so a prompt-cache prefix stays byte-stable, and a
valid id is sent unchanged.

Which pairs are renamed, and to what, is decided from the messages' roles and tool ids
alone (:func:`renamed_tool_ids`), so the compile planner prices the renames from a store's
cached facts exactly as the gate ships them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .blocks import Block, canonical_json

__all__ = [
    "TOOL_ID_GRAMMARS",
    "RENAME_SEPARATOR",
    "ToolIdGrammar",
    "ToolIds",
    "ToolSlot",
    "repair_tool_pairing",
    "renamed_tool_ids",
    "orphan_tool_slots",
    "with_stand_ins",
    "tool_ids_of",
    "tool_id_fits",
    "turns_of",
    "wire_tool_id",
    "with_sent_ids",
]

#: ``report(kind, reason, message_index)``: how a repair is reported.
Report = Callable[[str, str, int], None]

#: Where a tool block is in a request: ``(message index, block type, ordinal)``, the block type
#: ``"tool_use"`` or ``"tool_result"`` and the ordinal its place among the message's blocks of
#: that type (0 for the first).  Pairing reads nothing else of a block, so a store's cached
#: facts (``MessageFacts.tool_uses``, ``tool_results``) name the same slots as the blocks.
ToolSlot = tuple[int, str, int]


class ToolIdGrammar(NamedTuple):
    """What a request format accepts as a tool call's id (the same id its result answers)."""

    #: the characters an id may hold, as the inside of a regex character class
    #: (``"A-Za-z0-9_-"``), ``None``: any
    allowed: str | None
    #: the longest id, in characters (code points), ``None``: no limit
    max_length: int | None
    #: the shortest id, in characters
    min_length: int = 0

    def fits(self, tool_id: str) -> bool:
        """Return whether ``tool_id`` is an id of this grammar."""
        if len(tool_id) < self.min_length or (self.max_length is not None and len(tool_id) > self.max_length):
            return False
        return self.allowed is None or _pattern(f"[{self.allowed}]*").fullmatch(tool_id) is not None

    def cleaned(self, tool_id: str) -> str:
        """Return ``tool_id`` with each character outside :attr:`allowed` replaced by ``_``."""
        return tool_id if self.allowed is None else _pattern(f"[^{self.allowed}]").sub("_", tool_id)


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(source: str) -> re.Pattern[str]:
    pattern = _PATTERNS.get(source)
    if pattern is None:
        pattern = _PATTERNS[source] = re.compile(source)
    return pattern


#: Each request format's tool id grammar.
#:
#: - ``anthropic``: a ``tool_use`` id must match ``^[a-zA-Z0-9_-]+$``; the API answers a
#:   request that breaks it "messages.1.content.1.tool_use.id: String should match pattern
#:   '^[a-zA-Z0-9_-]+$'" (quoted in https://github.com/CommandCodeAI/command-code/issues/323).
#:   No length limit is documented.
#: - ``openai``: a ``tool_calls[].id`` of at most 40 characters: "Expected a string with
#:   maximum length 40, but got a string with length 41 instead" (quoted in
#:   https://github.com/microsoft/autogen/issues/6377).
#: - ``openai-responses``: a ``call_id`` of at most 64 characters: "Invalid
#:   'input[95].call_id': string too long. Expected a string with maximum length 64"
#:   (quoted in https://github.com/AnswerDotAI/fastllm/issues/45 and
#:   https://github.com/decolua/9router/issues/393).
TOOL_ID_GRAMMARS: dict[str, ToolIdGrammar] = {
    "anthropic": ToolIdGrammar("A-Za-z0-9_-", None, 1),
    "openai": ToolIdGrammar(None, 40),
    "openai-responses": ToolIdGrammar(None, 64),
}

#: What joins a reused id and its number in a fresh id (``<id>_2``): inside every format's
#: characters, so a renamed valid id stays valid.
RENAME_SEPARATOR = "_"

#: Hex digits of the stored id's SHA-256 a mapped wire id ends with (after ``_``).
_HASH_DIGITS = 8


def _grammar(format: str | None) -> ToolIdGrammar | None:
    return None if format is None else TOOL_ID_GRAMMARS.get(format)


def tool_id_fits(tool_id: str, format: str | None) -> bool:
    """Return whether ``tool_id`` is a valid tool id of request format ``format`` (``None``: any id fits)."""
    grammar = _grammar(format)
    return grammar is None or grammar.fits(tool_id)


def wire_tool_id(tool_id: str, format: str | None) -> str:
    """Return the id a first use of stored ``tool_id`` is sent under in ``format``: itself when valid.

    An invalid id has each character outside the format's set replaced by ``_``, is cut so
    that ``_`` and the first 8 hex digits of the SHA-256 of the stored id (UTF-8, a lone
    surrogate as its ``surrogatepass`` bytes) fit the length limit, and ends with them: a pure
    function of the stored id, so every request sends the same bytes.  ``format`` ``None``
    or unknown: ``tool_id`` unchanged.
    """
    grammar = _grammar(format)
    if grammar is None or grammar.fits(tool_id):
        return tool_id
    clean = grammar.cleaned(tool_id)
    digest = hashlib.sha256(tool_id.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_DIGITS]
    tail = f"_{digest}"
    if grammar.max_length is not None:
        clean = clean[: grammar.max_length - len(tail)]
    return clean + tail


def _numbered(base: str, suffix: int, grammar: ToolIdGrammar | None) -> str:
    """Return ``<base>_<suffix>``, ``base`` cut so the whole fits the grammar's length limit."""
    tail = f"{RENAME_SEPARATOR}{suffix}"
    if grammar is not None and grammar.max_length is not None:
        base = base[: grammar.max_length - len(tail)]
    return base + tail


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


def tool_pairs(messages: Sequence[ToolIds], turns: Sequence[int]) -> dict[ToolSlot, ToolSlot]:
    """Return the kept pairs, each answered call's slot -> its result's, in call order.

    ``messages`` are the tool ids of a request's messages (or of a store's stretch) and
    ``turns`` each one's turn number (:func:`turns_of`); a slot is ``(message index,
    "tool_use" | "tool_result", ordinal among that message's blocks of the type)``.  The rule
    the pairing repair, the planner and :func:`compaction.chunking.safe_boundaries` share.

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


def _renames(
    messages: Sequence[ToolIds], pairs: Mapping[ToolSlot, ToolSlot], format: str | None = None
) -> dict[ToolSlot, str]:
    """Return the slots of the pairs sent under another id (call and result) -> that id, in call order.

    A pair keeps its stored id when it is valid in ``format`` and no earlier pair used it;
    else its first choice is :func:`wire_tool_id` of it (when that differs from the stored
    id), then ``<wire id>_2``, ``_3``, ... (:func:`_numbered`): the first that no earlier pair
    sends and no call of the request has stored, so a changed id never meets an id sent
    unchanged.  Each wire id's search for a free suffix goes on from where its previous one
    stopped: every suffix it passed is used or another call's id, and stays so, so the ids
    are the ones a search from ``_2`` finds, and an id reused ``n`` times costs ``O(n)``.
    """
    grammar = _grammar(format)
    taken = {tool_id for message in messages for tool_id in message.tool_uses}
    used: set[str] = set()
    next_suffix: dict[str, int] = {}  # wire id -> the first suffix its next rename tries
    wire: dict[str, str] = {}  # stored id -> wire_tool_id of it
    renamed: dict[ToolSlot, str] = {}
    for call, result in pairs.items():  # oldest call first: the first pair keeps its id
        tool_id = messages[call[0]].tool_uses[call[2]]
        base = wire.get(tool_id)
        if base is None:
            base = wire[tool_id] = wire_tool_id(tool_id, format)
        new_id = base
        if new_id in used or (new_id != tool_id and new_id in taken):  # never another call's id
            suffix = next_suffix.get(base, 2)
            new_id = _numbered(base, suffix, grammar)
            while new_id in used or new_id in taken:
                suffix += 1
                new_id = _numbered(base, suffix, grammar)
            next_suffix[base] = suffix + 1
        used.add(new_id)
        if new_id != tool_id:
            renamed[call] = renamed[result] = new_id
    return renamed


def renamed_tool_ids(
    messages: Sequence[ToolIds], turns: Sequence[int] | None = None, format: str | None = None
) -> dict[ToolSlot, str]:
    """Return the tool blocks :func:`repair_tool_pairing` sends under another id, and that id.

    A pair (a call and the result that answers it in the next turn) whose stored id breaks
    ``format``'s grammar (:data:`TOOL_ID_GRAMMARS`) is sent under :func:`wire_tool_id` of it;
    a pair whose id an earlier pair of the request already sends is sent as ``<id>_2``
    (``_3``, ...: the first suffix no earlier pair used and no call of the request has, the
    id cut so the whole fits the length limit), in its call and in its result; the oldest
    pair of a valid id keeps it.  Every id sent fits ``format``'s grammar and is unique in
    the request.

    Args:
        messages: what pairing reads of the request's messages, in order.  Messages without
            tool blocks may be left out when ``turns`` is given.
        turns: each message's turn number (consecutive messages of one role share one, see
            :func:`turns_of`); default: computed from the roles of ``messages``, all of them.
        format: the request format name (``"openai"``, ``"anthropic"``,
            ``"openai-responses"``); ``None``: no id grammar, only reused ids renamed.

    Returns:
        ``{slot: id sent}`` for each changed call and result (slots index ``messages``), in
        call order; empty when every id is valid and none repeats (the usual case).
    """
    turns = turns_of([m.role for m in messages]) if turns is None else turns
    return _renames(messages, tool_pairs(messages, turns), format)


def orphan_tool_slots(messages: Sequence[ToolIds], turns: Sequence[int] | None = None) -> list[ToolSlot]:
    """Return the tool blocks :func:`repair_tool_pairing` ships as loud text stand-ins, in request order.

    A ``tool_use`` is an orphan when no ``tool_result`` of the turn right after it answers it
    (its call unanswered: an agent stopped mid-call, or a window that ends before the result),
    a ``tool_result`` when it answers no call of the turn right before it (its call outside
    the request, summarized away or never stored); calls and results are paired as
    :func:`renamed_tool_ids` pairs them (the k-th result of an id answers the k-th call).  A
    ``tool_use`` outside an assistant message and a ``tool_result`` outside a user message
    are orphans too.  Like :func:`renamed_tool_ids`, this reads roles and tool ids alone, so
    the compile planner prices the stand-ins from a store's cached facts.

    Args:
        messages: what pairing reads of the request's messages, in order.  Messages without
            tool blocks may be left out when ``turns`` is given.
        turns: each message's turn number (see :func:`turns_of`); default: computed from the
            roles of ``messages``, all of them.

    Returns:
        The orphan slots (indexing ``messages``), sorted; empty when every call is answered
        and every result answers a call (the usual case).
    """
    turns = turns_of([m.role for m in messages]) if turns is None else turns
    return _orphans(messages, tool_pairs(messages, turns))


def _orphans(messages: Sequence[ToolIds], pairs: Mapping[ToolSlot, ToolSlot]) -> list[ToolSlot]:
    """Return the slots of ``messages`` in no pair of ``pairs`` (calls and results), sorted."""
    answered = set(pairs.values())
    out: list[ToolSlot] = []
    for index, message in enumerate(messages):
        out.extend(
            (index, "tool_use", k)
            for k in range(len(message.tool_uses))
            if (index, "tool_use", k) not in pairs
        )
        out.extend(
            (index, "tool_result", k)
            for k in range(len(message.tool_results))
            if (index, "tool_result", k) not in answered
        )
    return sorted(out)


def with_stand_ins(blocks: Sequence[Block], orphans: set[tuple[str, int]]) -> list[Block]:
    """Return one message's ``blocks`` with its orphan tool blocks as the repair ships them (the input is not modified).

    An orphan ``tool_use`` becomes one text block (``[tool call NAME (id ID) with input
    JSON; no result was recorded for it]``), an orphan ``tool_result`` a text block
    (``[result of tool call ID, whose call is not in this request]`` and a line break before
    its text) followed by its images; other blocks are kept.

    Args:
        blocks: one message's blocks (ids as sent, see :func:`with_sent_ids`).
        orphans: ``{(block type, ordinal)}`` of this message's orphan slots
            (:func:`orphan_tool_slots`).
    """
    out: list[Block] = []
    ordinals = {"tool_use": 0, "tool_result": 0}
    for block in blocks:
        kind = block.get("type")
        if kind in ordinals:
            slot = (str(kind), ordinals[str(kind)])
            ordinals[str(kind)] += 1
            if slot in orphans:
                if kind == "tool_use":
                    out.append({"type": "text", "text": _call_text(block)})
                else:
                    out.extend(_result_blocks(block))
                continue
        out.append(block)
    return out


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
    text = (
        content
        if isinstance(content, str)
        else "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
    )
    out: list[Block] = [
        {
            "type": "text",
            "text": f"[result of tool call {block['tool_use_id']}, whose call is not in this request]\n{text}",
        }
    ]
    if isinstance(content, list):
        out.extend(b for b in content if b.get("type") == "image")
    return out


def repair_tool_pairing(
    messages: list[tuple[str, list[Block]]], report: Report, format: str | None = None
) -> list[tuple[str, list[Block]]]:
    """Return ``messages`` with every tool call answered in the next turn and every id unique and valid.

    Args:
        messages: ``(role, blocks)`` of one request, in order.
        report: called once per change: ``report(kind, reason, message_index)`` with kind
            ``"orphan_tool_use"``, ``"orphan_tool_result"`` or ``"renamed_tool_id"`` (a
            reused id, or one outside ``format``'s id grammar).
        format: the request format name whose tool id grammar the sent ids follow
            (:data:`TOOL_ID_GRAMMARS`); ``None``: only reused ids are renamed.

    Returns:
        New messages (the input is not modified).  The renamed ids are
        :func:`renamed_tool_ids`'s, the stand-ins :func:`orphan_tool_slots`'s
        (:func:`with_stand_ins`).
    """
    ids = tool_ids_of(messages)
    pairs = tool_pairs(ids, turns_of([m.role for m in ids]))
    renamed = _renames(ids, pairs, format)
    first_use: dict[str, ToolSlot] = {}
    for call in pairs:
        first_use.setdefault(ids[call[0]].tool_uses[call[2]], call)
    sent: dict[int, dict[tuple[str, int], str]] = {}  # message index -> its renamed slots
    for (index, kind, ordinal), new_id in renamed.items():
        sent.setdefault(index, {})[(kind, ordinal)] = new_id
        if kind == "tool_use":
            tool_id = ids[index].tool_uses[ordinal]
            why = (
                f"is outside the {format} tool id grammar"
                if first_use[tool_id] == (index, kind, ordinal)
                else "repeats an earlier call's"
            )
            report("renamed_tool_id", f"tool id {tool_id} {why}; sent as {new_id}", index)
    orphans: dict[int, set[tuple[str, int]]] = {}  # message index -> its orphan slots
    for index, kind, ordinal in _orphans(ids, pairs):
        orphans.setdefault(index, set()).add((kind, ordinal))
    out: list[tuple[str, list[Block]]] = []
    for index, (role, blocks) in enumerate(messages):
        new_blocks = with_sent_ids(blocks, sent[index]) if index in sent else list(blocks)
        if index in orphans:
            ordinals = {"tool_use": 0, "tool_result": 0}
            for block in blocks:  # reported in block order
                kind = str(block.get("type"))
                if kind in ordinals:
                    if (kind, ordinals[kind]) in orphans[index]:
                        if kind == "tool_use":
                            report("orphan_tool_use", "its tool_result is not in the turn after it", index)
                        else:
                            report("orphan_tool_result", "its tool_use is not in the turn before it", index)
                    ordinals[kind] += 1
            new_blocks = with_stand_ins(new_blocks, orphans[index])
        out.append((role, new_blocks))
    return out
