"""Baselines for ``compaction eval``: requests built without the engine, on the same budget.

Each baseline is a valid request: it goes through the wire gate
(:func:`compaction.wire.gate`) with the compile's image settings, request format and model,
and fits the budget by the gate's own count.  The system messages ride as the system text,
as in a compile.  A message larger than half the budget would leave a baseline with nothing
(pi's transcript ends with a 27,000-token ``find`` output), so, as agent harnesses cap tool
output, each long string in it is cut to its head with a loud "[… N characters cut]" marker
until the message fits half the budget; the baselines are built from the cut messages.

``truncation``
    Drop-oldest: the newest messages that fit, raw.  The window starts only where no tool
    call before it is answered after it, so a call and its result are kept or dropped
    together.
``masking``
    Observation masking alone (as in JetBrains' "The Complexity Trap", arXiv 2508.21433):
    every tool result older than the newest :data:`KEEP_ROUNDS` tool rounds is replaced by
    a short placeholder naming the tool and the output's size; calls and the assistant's
    text stay raw.  Then drop-oldest until it fits.
``own-summary``
    The newest summary the transcript's own agent wrote (a pi ``compaction`` entry, a Codex
    ``compacted`` record, a Claude Code compact summary: a user turn opening "This session
    is being continued from a previous conversation"), then the newest messages after it
    that fit.  Messages from before the summary are not shown: the summary stands for them.
    ``None`` when the transcript holds no such summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .blocks import Block, Message
from .compile import live_image_settings, resolve_target
from .errors import OverBudget
from .images import ImageDecider, decide_and_price, find_image_sites
from .recipe import Recipe
from .tokens.counting import blocks_text_tokens
from .wire import GatedRequest, OutboundRequest, gate

__all__ = [
    "Baseline",
    "KEEP_ROUNDS",
    "BASELINES",
    "truncation",
    "masking",
    "own_summary",
    "agent_summary",
    "shown_note",
]

#: Tool rounds whose results the masking baseline keeps raw (the newest ones).
KEEP_ROUNDS = 3
BASELINES = ("truncation", "masking", "own-summary")
COMPACT_SUMMARY = "This session is being continued from a previous conversation"

Turn = tuple[str, tuple[Block, ...]]


@dataclass(frozen=True)
class Baseline:
    """One baseline's request, or why there is none.

    Attributes:
        name: ``"truncation"``, ``"masking"`` or ``"own-summary"``.
        request: the gated request, or ``None`` (no summary in the transcript, or nothing fits).
        note: what it holds, or why it is absent, for a person.
    """

    name: str
    request: GatedRequest | None
    note: str


def _system(messages: Sequence[Message]) -> str | None:
    texts = [
        "\n".join(b["text"] for b in m.content if b.get("type") == "text")
        for m in messages
        if m.role == "system"
    ]
    return "\n\n".join(t for t in texts if t) or None


def shown_note(shown: int, messages: Sequence[Message], *, of_all: bool = True) -> str:
    """Return how many of the transcript's messages a baseline shows, counted as the eval's header counts.

    The header counts every message of the transcript, system ones included (``EvalReport.messages``);
    a request shows every system message (a baseline as its system text, the engine raw) and
    the newest ``shown`` others, so the note names both.  ``of_all``: name the whole (``"the newest 5 of 12 messages"``), else only the
    newest (``"the newest 5 messages"``, after an agent's own summary).
    """
    system = sum(1 for m in messages if m.role == "system")
    whole = f" of {len(messages):,}" if of_all else ""
    note = f"the newest {shown:,}{whole} messages"
    if system:
        note += f" and the {system:,} system message{'s' if system != 1 else ''}"
    return note


def _safe_cuts(window: Sequence[Turn]) -> list[int]:
    """Return the window starts that separate no tool call from its result, ascending."""
    answered = {
        b.get("tool_use_id") for _r, blocks in window for b in blocks if b.get("type") == "tool_result"
    }
    pending: set[Any] = set()
    cuts: list[int] = []
    for index, (_role, blocks) in enumerate(window):
        if not pending:
            cuts.append(index)
        for block in blocks:
            if block.get("type") == "tool_use" and block.get("id") in answered:
                pending.add(block.get("id"))
            elif block.get("type") == "tool_result":
                pending.discard(block.get("tool_use_id"))
    cuts.append(len(window))
    return cuts


def _fit_newest(
    head: Sequence[Turn], window: Sequence[Turn], system: str | None, recipe: Recipe, budget: int
) -> tuple[GatedRequest, int] | None:
    """Gate ``head`` plus the longest suffix of ``window`` that fits; return it and the cut."""
    fmt, model = resolve_target(recipe)
    settings = live_image_settings(recipe)
    encoding = recipe.encoding
    head_text = [fmt.text_tokens(blocks, encoding) for _role, blocks in head]
    cuts = _safe_cuts(window)
    cut_set = set(cuts)
    suffix = {len(window): 0}
    text: dict[int, int] = {}
    decider = ImageDecider(settings)
    total = 0
    for index in range(len(window) - 1, -1, -1):  # newest first, as the gate decides images
        role, blocks = window[index]
        text[index] = fmt.text_tokens(blocks, encoding)
        _decisions, images = decide_and_price(
            find_image_sites(blocks), decider, total, role=role, model=model, encoding=encoding, format=fmt
        )
        total += text[index] + images
        if index in cut_set:
            suffix[index] = total
        if total + sum(head_text) > budget:
            break
    for cut in cuts:
        if cut not in suffix:
            continue
        turns = list(head) + list(window[cut:])
        if not turns:
            return None
        first_role = turns[0][0]
        if fmt.framing_tokens(system, first_role, encoding) + sum(head_text) + suffix[cut] > budget:
            continue
        hints = tuple(head_text) + tuple(text[i] for i in range(cut, len(window)))
        request = OutboundRequest("live", system, tuple(turns), hints)
        try:
            return gate(request, settings, format=fmt, model=model, encoding=encoding, budget=budget), cut
        except OverBudget:
            continue
    return None


def _cut(text: str, keep: float) -> str:
    if len(text) < 400:
        return text
    head = int(len(text) * keep)
    return f"{text[:head]}\n[… {len(text) - head:,} characters cut]"


def _cut_block(block: Block, keep: float) -> Block:
    if block.get("type") == "text":
        return {**block, "text": _cut(block["text"], keep)}
    if block.get("type") == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return {**block, "content": _cut(content, keep)}
        if isinstance(content, list):
            return {
                **block,
                "content": [_cut_block(part, keep) if isinstance(part, dict) else part for part in content],
            }
    return block


def clip_message(blocks: tuple[Block, ...], limit: int, encoding: str) -> tuple[Block, ...]:
    """Return ``blocks`` with long texts cut to their heads until they count at most ``limit`` tokens.

    Gives up (returns the last try) after a few rounds when what is left is not text.
    """
    tokens = blocks_text_tokens(blocks, encoding)
    clipped = blocks
    for _round in range(6):
        if tokens <= limit:
            return clipped
        keep = max(0.0, limit / tokens * 0.9) if _round < 5 else 0.0
        clipped = tuple(_cut_block(block, keep) for block in clipped)
        tokens = blocks_text_tokens(clipped, encoding)
    return clipped


def _turns(messages: Sequence[Message], recipe: Recipe, budget: int, start: int = 0) -> list[Turn]:
    limit = budget // 2
    return [
        (m.role, clip_message(tuple(m.content), limit, recipe.encoding))
        for m in messages[start:]
        if m.role != "system"
    ]


def truncation(messages: Sequence[Message], recipe: Recipe, budget: int) -> Baseline:
    """Return the drop-oldest baseline: the newest messages that fit, tool rounds whole."""
    window = _turns(messages, recipe, budget)
    fitted = _fit_newest((), window, _system(messages), recipe, budget)
    if fitted is None:
        return Baseline("truncation", None, "not even the newest tool round fits the budget")
    request, cut = fitted
    return Baseline("truncation", request, shown_note(len(window) - cut, messages))


def _result_size(content: Any) -> tuple[int, int]:
    if isinstance(content, str):
        return len(content), 0
    chars = images = 0
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "image":
            images += 1
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            chars += len(part["text"])
    return chars, images


def mask_tool_results(window: Sequence[Turn], keep_rounds: int = KEEP_ROUNDS) -> list[Turn]:
    """Replace the results of all but the newest ``keep_rounds`` tool rounds by placeholders."""
    rounds = [
        i for i, (role, blocks) in enumerate(window) if any(b.get("type") == "tool_use" for b in blocks)
    ]
    kept = {
        b.get("id")
        for i in rounds[len(rounds) - keep_rounds :]
        for b in window[i][1]
        if b.get("type") == "tool_use"
    }
    names = {
        b.get("id"): b.get("name", "tool")
        for _r, blocks in window
        for b in blocks
        if b.get("type") == "tool_use"
    }
    masked: list[Turn] = []
    for role, blocks in window:
        new: list[Block] = []
        for block in blocks:
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in kept:
                chars, images = _result_size(block.get("content"))
                size = f"{chars:,} characters" + (f" and {images} images" if images else "")
                name = names.get(block.get("tool_use_id"), "tool")
                block = {**block, "content": f"[tool output masked: {name}, {size}]"}
            new.append(block)
        masked.append((role, tuple(new)))
    return masked


def masking(
    messages: Sequence[Message], recipe: Recipe, budget: int, keep_rounds: int = KEEP_ROUNDS
) -> Baseline:
    """Return the observation-masking baseline: old tool results masked, then drop-oldest."""
    window = mask_tool_results(_turns(messages, recipe, budget), keep_rounds)
    fitted = _fit_newest((), window, _system(messages), recipe, budget)
    if fitted is None:
        return Baseline("masking", None, "not even the newest tool round fits the budget")
    request, cut = fitted
    return Baseline(
        "masking",
        request,
        f"{shown_note(len(window) - cut, messages)}, results of the newest {keep_rounds} tool rounds raw",
    )


def agent_summary(messages: Sequence[Message]) -> tuple[str, int, str] | None:
    """Return the newest summary the transcript's own agent wrote: (text, first message after it, source).

    Looks for pi ``compaction`` entries (``meta["pi_compaction"]``), Codex ``compacted``
    records (``meta["codex_compaction"]``) and Claude Code compact summaries
    (``meta["claude_code_compaction"]``, or a user turn opening "This session is being
    continued from a previous conversation").
    """
    found: tuple[str, int, str] | None = None
    for index, message in enumerate(messages):
        pi = message.meta.get("pi_compaction")
        if isinstance(pi, dict) and isinstance(pi.get("summary"), str):
            found = (pi["summary"], index, "pi compaction entry")
        codex = message.meta.get("codex_compaction")
        if isinstance(codex, str) and codex.strip():
            found = (codex, index, "Codex compacted record")
        claude = message.meta.get("claude_code_compaction")
        if isinstance(claude, dict) and isinstance(claude.get("summary"), str) and claude["summary"].strip():
            # kept on the message after it, or on the summary's own message (kind compaction_summary)
            after = index + 1 if message.meta.get("kind") == "compaction_summary" else index
            found = (claude["summary"], after, "Claude Code compact summary")
            continue
        if message.role == "user":
            text = "\n".join(b["text"] for b in message.content if b.get("type") == "text").lstrip()
            if text.startswith(COMPACT_SUMMARY):
                found = (text, index + 1, "Claude Code compact summary")
    return found


def own_summary(messages: Sequence[Message], recipe: Recipe, budget: int) -> Baseline:
    """Return the agent's own summary plus the newest messages after it that fit."""
    source = agent_summary(messages)
    if source is None:
        return Baseline("own-summary", None, "the transcript holds no summary written by its agent")
    summary, start, what = source
    head: list[Turn] = [
        ("user", ({"type": "text", "text": f"[Summary of the earlier conversation ({what})]\n{summary}"},))
    ]
    window = _turns(messages, recipe, budget, start)
    fitted = _fit_newest(head, window, _system(messages), recipe, budget)
    if fitted is None:
        return Baseline("own-summary", None, f"the {what} alone does not fit the budget")
    request, cut = fitted
    return Baseline(
        "own-summary",
        request,
        f"the {what} (before message {start}) and {shown_note(len(window) - cut, messages, of_all=False)}",
    )
