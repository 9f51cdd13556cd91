"""What a compiled request is made of: the data behind ``compaction inspect`` and ``compaction show``.

:func:`inspect_store` compiles the next request exactly as ``compaction compile`` does
(:func:`compaction.events.compile_current`: the recorded frame when it still fits, else a
fresh plan) and explains it:

- every stored message, and what became of it: ``pinned`` (in the system text), ``raw`` or
  ``masked`` (in the live window) or ``summarized`` (covered by a shown summary), with its
  stored token count and, for the live window, its price in the request;
- each shown summary (range, level, text, provenance) and the ask ledger;
- every placeholder the gate wrote (``request.replacements``) with its reason;
- the request's token composition: request framing, system text, tools, ask ledger, the
  summary message's framing, summaries by level, the masked and the raw window, images.  A
  message merged with the next one of its role into one turn (``RequestFormat.merge_saving``)
  is priced with the frame the merge saves taken off: its row and its part show what it adds.

The composition is priced by the compile planner (:class:`compaction.planning.WindowPlanner`,
the same walk that priced the request) part by part, so the parts add up to the gate's
count (``request.tokens``) exactly; when the gate repaired tool pairing (an orphaned tool
block sent as text) the difference is its own part, named so.  Any other difference raises
:class:`~compaction.errors.InvariantViolation`: the inspector never shows a figure that
does not add up.

Texts are kept as they are here (only cut to :data:`TEXT_LIMIT` characters with a marker):
escaping is the renderer's job (:mod:`compaction.inspect_html`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .blocks import Block, Message
from .compile import SUMMARY_INTRO, CompiledRequest
from .errors import CompactionError, InvalidArgument, InvariantViolation, found
from .events import compile_current
from .outputs import request_format
from .planning import WindowPlanner
from .prefill import prefill_refusal
from .recipe import Recipe
from .store import HistoryStore, StoredSummary
from .tokens.counting import count_text, message_overhead

__all__ = [
    "TEXT_LIMIT",
    "UnknownSummary",
    "Part",
    "MessageRow",
    "SummaryRow",
    "PlaceholderRow",
    "Inspection",
    "inspect_store",
    "inspect_compiled",
    "find_summary",
    "message_text",
    "truncate",
    "terminal_safe",
]

#: The most characters of one text (summary, ledger, message preview) the inspector keeps.
TEXT_LIMIT = 4000
#: The most characters of one live-window message's preview.
PREVIEW_LIMIT = 600


class UnknownSummary(LookupError, CompactionError):
    """No summary with the id asked for is in the store."""


def truncate(text: str, limit: int = TEXT_LIMIT) -> str:
    """Return ``text`` cut to ``limit`` characters, with a marker saying how many were left out.

    Raises:
        InvalidArgument: ``limit`` is below 1.
    """
    if limit < 1:
        raise InvalidArgument(f"limit must be at least 1 character; found {limit}")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated: {len(text) - limit:,} more characters]"


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """Return ``text`` with control characters (tab and newline aside) and lone surrogates shown as ``\\xNN``.

    A stored text can carry terminal escape sequences (``ESC[...``); printed as they are,
    they would recolour, move or retitle the user's terminal.
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text.replace("\r\n", "\n"))


def _block_text(block: Block) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "thinking":
        return f"[thinking] {block.get('thinking', '')}"
    if kind == "redacted_thinking":
        return "[redacted thinking]"
    if kind == "tool_use":
        arguments = json.dumps(block.get("input"), ensure_ascii=False, default=str)
        return f"[tool_use {block.get('name')} {block.get('id')}] {arguments}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            inner = "\n".join(_block_text(b) for b in content if isinstance(b, dict))
        else:
            inner = str(content or "")
        error = " error" if block.get("is_error") else ""
        return f"[tool_result{error} {block.get('tool_use_id')}] {inner}"
    if kind == "image":
        source = block.get("source") or {}
        return f"[image {source.get('media_type') or source.get('type', '')}]"
    return f"[{kind} block]"


def message_text(blocks: Sequence[Block]) -> str:
    """Return a plain-text rendering of a message's blocks (tool calls, results and images named)."""
    return "\n".join(_block_text(b) for b in blocks)


@dataclass(frozen=True)
class Part:
    """One part of a request's token composition.

    Attributes:
        name: what the part is (``"system"``, ``"summaries L1"``, ``"raw window"``...).
        tokens: its tokens in the request (tokens).
        level: the summary level for a summaries part, else ``None``.
    """

    name: str
    tokens: int
    level: int | None = None


@dataclass(frozen=True)
class MessageRow:
    """One stored message and what the request shows of it.

    Attributes:
        seq: its store position.
        role: its role.
        state: ``"pinned"`` (in the system text), ``"raw"``, ``"masked"`` (tool outputs as
            placeholders) or ``"summarized"``.
        stored_tokens: its text tokens as stored, images aside (tokens).
        shown_tokens: its price in the request (text as shown plus images as decided, less
            the frame saved when it ships merged with the next message of its role), for
            ``raw`` and ``masked`` messages; ``None`` otherwise (tokens).
        image_tokens: the part of ``shown_tokens`` its images (or their placeholders) cost.
        summary_id: the id of the shown summary that covers it (``summarized`` only).
        images: its image count as stored.
        preview: the start of its text as shown (live window only; empty otherwise).
    """

    seq: int
    role: str
    state: str
    stored_tokens: int
    shown_tokens: int | None = None
    image_tokens: int = 0
    summary_id: int | None = None
    images: int = 0
    preview: str = ""


@dataclass(frozen=True)
class SummaryRow:
    """One summary shown in the request.

    Attributes:
        id: the store's summary id (``compaction show ID``).
        level: 1 covers raw messages, 2 covers L1s, ...
        start_seq, end_seq: the messages it stands for, ``[start_seq, end_seq)``.
        tokens: what it adds to the request (its block and one join; tokens).
        covered_tokens: the stored text tokens of the messages it covers (tokens).
        text: its text (cut to :data:`TEXT_LIMIT` with a marker).
        chars: its full text's length (characters).
        provenance: how it was made (summarizer, model, prompt hash, time...).
    """

    id: int
    level: int
    start_seq: int
    end_seq: int
    tokens: int
    covered_tokens: int
    text: str
    chars: int
    provenance: dict[str, Any]


@dataclass(frozen=True)
class PlaceholderRow:
    """One block the gate replaced (an image, an orphaned tool block) and why.

    Attributes:
        kind: ``"image"`` or the repaired block's kind.
        reason: why it is not shown as it was.
        message_index: the request message it is in (0-based, system text aside).
        seq: the stored message it came from; ``None`` for the summary message.
        media_type, width, height, byte_size, short_hash: an image's facts (pixels, bytes).
    """

    kind: str
    reason: str
    message_index: int
    seq: int | None
    media_type: str | None = None
    width: int | None = None
    height: int | None = None
    byte_size: int | None = None
    short_hash: str | None = None


@dataclass(frozen=True)
class Inspection:
    """What one compiled request is made of (see the module docstring).

    Attributes:
        store: the store's path.
        format, model, encoding: the request format, the model named, the encoding counted in.
        budget: the token budget (tokens).
        tokens: the request's tokens as the gate counted them (tokens).
        live_start: the first seq of the live window.
        mask_before: live-window tool outputs before this seq may be masked.
        total_messages: messages in the store.
        composition: the parts of ``tokens``; their ``tokens`` add up to ``tokens`` exactly.
        summaries: the shown summaries, oldest first.
        stored_summaries: summaries in the store per level (``{level: count}``).
        ledger: the ask ledger's text (cut, with a marker), or ``None`` when there is none.
        ledger_tokens: what the ledger adds to the request (tokens).
        placeholders: every block the gate replaced.
        masked_outputs: masked tool outputs per seq (the placeholder texts shown instead).
        messages: every stored message, in order.
        images_shown: image parts in the request.
        ends_on_assistant_turn: the request's last message is the assistant's (the store's
            newest message other than a system one): a model reads it as a prefill.
        prefill_refused: why ``compaction compile`` refuses this request (it ends on an
            assistant turn its model or the recipe refuses, :mod:`compaction.prefill`), or
            ``None``; inspect shows the request all the same.
    """

    store: str
    format: str
    model: str
    encoding: str
    budget: int
    tokens: int
    live_start: int
    mask_before: int
    total_messages: int
    composition: tuple[Part, ...]
    summaries: tuple[SummaryRow, ...]
    stored_summaries: dict[int, int]
    ledger: str | None
    ledger_tokens: int
    placeholders: tuple[PlaceholderRow, ...]
    masked_outputs: dict[int, int] = field(default_factory=dict)
    messages: tuple[MessageRow, ...] = ()
    images_shown: int = 0
    ends_on_assistant_turn: bool = False
    prefill_refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the inspection as JSON-ready data (what ``compaction inspect --json`` prints)."""
        data = asdict(self)
        data["stored_summaries"] = {str(k): v for k, v in sorted(self.stored_summaries.items())}
        data["masked_outputs"] = {str(k): v for k, v in sorted(self.masked_outputs.items())}
        return data


def find_summary(store: HistoryStore, summary_id: int) -> StoredSummary:
    """Return the stored summary with id ``summary_id``.

    Raises:
        UnknownSummary: no summary has that id (the message names the ids there are).
    """
    summaries = store.summaries()
    for summary in summaries:
        if summary.id == summary_id:
            return summary
    if summaries:
        ids = sorted(s.id for s in summaries)
        there = f"ids {ids[0]}–{ids[-1]}" if len(ids) > 1 else f"id {ids[0]}"
        hint = f"the store holds {len(ids)} summaries ({there}; `compaction inspect --json` lists the shown ones)"
    else:
        hint = "the store holds no summaries (run `compaction compress` first)"
    raise UnknownSummary(f"no summary with id {summary_id} in {store.path}: {hint}")


def inspect_store(
    store: HistoryStore, recipe: Recipe, *, tools: Sequence[dict[str, Any]] = ()
) -> Inspection:
    """Compile the next request as ``compaction compile`` does and explain what it is made of.

    Args:
        store: the history (never changed).
        recipe: settings; ``budget_tokens`` is the budget (tokens).
        tools: tool definitions offered to the model (counted against the budget).

    Returns:
        The :class:`Inspection`.

    A request that ends on an assistant turn its model refuses (``compaction compile`` raises
    :class:`~compaction.errors.AssistantPrefillRefused` for it) is inspected all the same:
    :attr:`Inspection.prefill_refused` says why compile refuses it.

    Raises:
        InvalidArgument: ``store`` or ``recipe`` of the wrong type.
        OverBudget: nothing fits the budget without summarizing more, or no budget.
        InvalidMessage: the store is empty.
        InvariantViolation: the parts do not add up to the gate's count (an engine bug).
    """
    if not isinstance(recipe, Recipe):
        raise InvalidArgument(f"recipe must be a compaction.Recipe (or load_recipe(path)); found {found(recipe)}")
    compiled = compile_current(store, recipe.replace(assistant_prefill="allow"), tools=tools)
    return inspect_compiled(store, recipe, compiled, tools=tools)


def inspect_compiled(
    store: HistoryStore, recipe: Recipe, compiled: CompiledRequest, *, tools: Sequence[dict[str, Any]] = ()
) -> Inspection:
    """Explain ``compiled``, a request compiled from ``store`` with ``recipe`` and ``tools``.

    Raises:
        InvariantViolation: the parts do not add up to the gate's count (an engine bug, or a
            request compiled from another store or recipe).
    """
    from .tools import normalize_tools, tools_tokens

    request = compiled.request
    fmt = request_format(request.format)
    encoding = recipe.encoding
    n = compiled.total_messages
    cut = compiled.live_start
    planner = WindowPlanner(store, recipe, compiled.budget, fmt, request.model, mask_before=compiled.mask_before)
    planner.suffix(cut)
    cover = compiled.summaries

    # -- the fixed parts ---------------------------------------------------------------
    first_role = next((role for role, _blocks in request.messages if role != "system"), None)
    framing = fmt.framing_tokens(request.system, first_role, encoding)
    system_tokens = message_overhead(encoding) + count_text(request.system, encoding) if request.system else 0
    parts: list[Part] = [Part("request framing", framing - system_tokens), Part("system", system_tokens)]
    parts.append(Part("tools", tools_tokens(normalize_tools(tools), fmt.name, encoding)))
    ledger_text = planner.ledger(cut) if cover else None
    parts.append(Part("ask ledger", compiled.ledger_tokens))
    by_level: dict[int, int] = {}
    if cover:
        # a summary message merged with the user message after it ships one frame less
        merged = planner.merge_saving(cut, cover) - planner.merge_saving(cut)
        framing_tokens = message_overhead(encoding) + count_text(SUMMARY_INTRO, encoding) - merged
        parts.append(Part("summary framing", framing_tokens))
        for summary in cover:
            by_level[summary.level] = by_level.get(summary.level, 0) + planner.summary_cost(summary)
    parts += [Part(f"summaries L{level}", tokens, level) for level, tokens in sorted(by_level.items())]

    # -- the messages ------------------------------------------------------------------
    facts = {f.seq: f for f in store.facts(0, n, encoding=encoding)}
    masked = set(compiled.masked_seqs)
    pinned = set(store.pinned_seqs())
    covering: dict[int, int] = {}
    covered_tokens: dict[int, int] = {}
    for summary in cover:
        covered_tokens[summary.id] = 0
        for seq in range(summary.start_seq, summary.end_seq):
            covering[seq] = summary.id
            if seq in facts and seq not in pinned:
                covered_tokens[summary.id] += facts[seq].text_tokens
    live = {m.seq: m for m in store.messages(cut, n) if m.seq is not None}
    rows: list[MessageRow] = []
    window = {"raw": 0, "masked": 0}
    image_total = 0
    masked_outputs: dict[int, int] = {}
    for seq in range(n):
        fact = facts[seq]
        if seq in pinned and (seq < cut or fact.role == "system"):  # in the system text (a pin in the window is shown there)
            rows.append(MessageRow(seq, fact.role, "pinned", fact.text_tokens, images=len(fact.images)))
        elif seq < cut:
            rows.append(
                MessageRow(seq, fact.role, "summarized", fact.text_tokens, summary_id=covering.get(seq),
                           images=len(fact.images))
            )
        else:
            state = "masked" if seq in masked else "raw"
            # a message merged into one turn with the next framed one of its role ships one frame less
            merged = planner.merge_saving(seq) - planner.merge_saving(seq + 1)
            shown = planner.message_cost(seq) - merged  # renamed tool ids are the gate's repairs, below
            text = planner.text_tokens[seq] - merged
            window[state] += text
            image_total += shown - text
            blocks = planner.masked_blocks.get(seq, live[seq].content)
            if state == "masked":
                masked_outputs[seq] = _masked_count(live[seq], blocks)
            rows.append(
                MessageRow(seq, fact.role, state, fact.text_tokens, shown, shown - text, None, len(fact.images),
                           truncate(message_text(blocks), PREVIEW_LIMIT))
            )
    parts += [Part("masked window", window["masked"]), Part("raw window", window["raw"]), Part("images", image_total)]

    # -- the gate's repairs and the check ----------------------------------------------
    repairs = [r for r in request.replacements if r.kind != "image"]
    planned = sum(p.tokens for p in parts)
    if repairs:
        parts.append(Part("pairing repairs", request.tokens - planned))
    elif planned != request.tokens:
        raise InvariantViolation(
            f"inspect: the request's parts add up to {planned} tokens, the gate counted {request.tokens}"
        )
    index_seq: list[int | None] = [None] if cover else []
    index_seq += [seq for seq in range(cut, n) if facts[seq].role != "system"]  # as compile ships the window
    placeholders = tuple(
        PlaceholderRow(
            r.kind, r.reason, r.message_index,
            index_seq[r.message_index] if r.message_index < len(index_seq) else None,
            r.media_type, r.width, r.height, r.byte_size, r.short_hash,
        )
        for r in request.replacements
    )
    summaries = tuple(
        SummaryRow(
            s.id, s.level, s.start_seq, s.end_seq, planner.summary_cost(s), covered_tokens[s.id],
            truncate(s.text), len(s.text), dict(s.provenance),
        )
        for s in cover
    )
    stored: dict[int, int] = {}
    for summary in store.summaries():
        stored[summary.level] = stored.get(summary.level, 0) + 1
    last_role = next((role for role, _blocks in reversed(request.messages) if role != "system"), None)
    ends_on_assistant = last_role == "assistant"
    return Inspection(
        store=store.path,
        format=request.format,
        model=request.model,
        encoding=encoding,
        budget=compiled.budget,
        tokens=request.tokens,
        live_start=cut,
        mask_before=compiled.mask_before,
        total_messages=n,
        composition=tuple(parts),
        summaries=summaries,
        stored_summaries=stored,
        ledger=truncate(ledger_text) if ledger_text is not None else None,
        ledger_tokens=compiled.ledger_tokens,
        placeholders=placeholders,
        masked_outputs=masked_outputs,
        messages=tuple(rows),
        images_shown=request.images_shown,
        ends_on_assistant_turn=ends_on_assistant,
        prefill_refused=prefill_refusal(recipe, request.model) if ends_on_assistant else None,
    )


def _masked_count(message: Message, shown: Sequence[Block]) -> int:
    """Return how many of ``message``'s tool results are shown changed (masked)."""
    before = [b for b in message.content if b.get("type") == "tool_result"]
    after = [b for b in shown if b.get("type") == "tool_result"]
    return sum(1 for old, new in zip(before, after, strict=False) if old != new)
