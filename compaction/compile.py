"""Compile a store into a request that fits a token budget.

The request is: the pinned system messages, raw; then the older history as summaries; then
the live window, raw.  A pinned message that is not a system message joins the system text
while it lies before the live window, and is shown in its place in the window once the window
reaches it (once either way, counted once in the budget).  ``compile_request`` picks, in this order of preference:

1. the largest live window (the earliest cut point ``c``) such that the coarsest cover of
   ``[0, c)`` by summaries, plus the raw window ``[c, n)``, plus the pinned messages, fits;
2. then, from newest to oldest, the finest summaries that still fit (a summary is replaced
   by its children while the request stays within the budget).

Cut points are level-1 chunk boundaries, which are safe boundaries: no tool round is split.
Images are priced after the policy: a replaced image costs its placeholder's tokens, decided
newest first exactly as the wire gate will decide them.  The gate then checks the result
(coverage, pairing, caps, budget); when its exact count differs from the plan, the next
smaller window is tried.  When even the smallest rendering does not fit, :class:`OverBudget`
names the part that cannot shrink and its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .blocks import Block
from .errors import InvalidArgument, InvalidMessage, InvariantViolation, OverBudget, found
from .images import apply_decisions, find_image_sites
from .outputs import RequestFormat, request_format
from .planning import (
    SUMMARY_INTRO,
    WindowPlanner,
    keep_boundary,
    live_image_settings,
    refine_cover,
    stored_messages,
    summary_block,
)
from .policy import Decision
from .prefill import check_assistant_prefill, check_shipped_prefill, final_turn
from .recipe import Recipe
from .store import HistoryStore, StoredSummary
from .tokens.counting import count_text, message_overhead
from .tools import normalize_tools, tools_tokens
from .types import RequestFormatName, Stage
from .wire import GatedRequest, OutboundRequest, gate

__all__ = [
    "CompiledRequest",
    "CompilePlan",
    "Shortfall",
    "compile_request",
    "plan_compile",
    "live_image_settings",
    "raw_history_tokens",
    "SUMMARY_INTRO",
    "default_model",
    "resolve_target",
    "require_budget",
    "check_prefill",
    "check_compiled_prefill",
    "compile_frame",
    "extend_frame",
]


def default_model(format: RequestFormatName | str) -> str:
    """Return the model a request names when none is given (the request format's default)."""
    return request_format(format).default_model


@dataclass(frozen=True)
class CompiledRequest:
    """The result of :func:`compile_request`.

    Attributes:
        request: the gated request (``request.payload`` is the JSON body to send).
        budget: the token budget (tokens).
        live_start: the first seq of the raw live window.
        summaries: the summaries shown, oldest first.
        raw_seqs: the seqs shown raw, each once: the pinned messages before the live window (in
            the system text), then the live window (a pinned message in it is shown there).
        total_messages: messages in the store.
        planned_tokens: the planner's price of the request (tokens); equal to
            ``request.tokens`` (the gate's count) unless the gate repaired an orphaned tool block.
        mask_before: tool outputs of live-window messages before this seq are eligible for
            masking (``live_start`` or less: none are).
        masked_seqs: the live-window messages shown with one or more tool outputs masked.
        ledger_tokens: the tokens of the ask ledger block (0: no ledger).
    """

    request: GatedRequest
    budget: int
    live_start: int
    summaries: tuple[StoredSummary, ...]
    raw_seqs: tuple[int, ...]
    total_messages: int
    planned_tokens: int = 0
    mask_before: int = 0
    masked_seqs: tuple[int, ...] = ()
    ledger_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.request.tokens


#: Why an image in a pinned system message is not shown: both APIs take system text only.
SYSTEM_IMAGE = "in a system message, which carries text only"


def _pinned_text(blocks: Sequence[Block]) -> str:
    """Return a system message's text, each image in it (block or data URI) as its placeholder."""
    sites = find_image_sites(blocks)
    shown = apply_decisions(blocks, sites, [Decision(False, SYSTEM_IMAGE)] * len(sites)) if sites else blocks
    return "\n".join(b["text"] for b in shown if b.get("type") == "text")


#: The pinned messages of a store: ``(seq, role, text)`` of each, in order.
Pins = list[tuple[int, str, str]]


def _pins(store: HistoryStore) -> Pins:
    out = []
    for seq in store.pinned_seqs():
        message = store.messages(seq, seq + 1)[0]
        out.append((seq, message.role, _pinned_text(message.content)))
    return out


def _system_for(pins: Pins, cut: int | None) -> str | None:
    """The system text of a request whose live window starts at ``cut``: the system messages and
    the pinned messages before ``cut`` (a pinned message in the window is shown there, raw, once)."""
    texts = [text for seq, role, text in pins if cut is None or role == "system" or seq < cut]
    return "\n\n".join(texts) if texts else None


def _system_text(store: HistoryStore, cut: int | None = None) -> tuple[str | None, list[int]]:
    """Return the system text (for a live window from ``cut``; ``None``: every pin) and the pinned seqs."""
    pins = _pins(store)
    return _system_for(pins, cut), [seq for seq, _role, _text in pins]


@dataclass(frozen=True)
class Shortfall:
    """Why a compile does not fit: the part that cannot shrink, and by how much.

    Attributes:
        stage: the part (``"live window"``, ``"unsummarized tail"``, ``"summaries"``, ``"request"``).
        budget: the token budget (tokens).
        needed: the fewest tokens the request needs at this stage (tokens).
        message: what does not fit and what to do, for a person.
    """

    stage: Stage
    budget: int
    needed: int
    message: str

    @property
    def short_by(self) -> int:
        """Return how many tokens over the budget the smallest rendering is."""
        return self.needed - self.budget

    def error(self) -> OverBudget:
        """Return the :class:`OverBudget` that reports this shortfall."""
        return OverBudget(self.message, stage=self.stage, budget=self.budget, needed=self.needed)


@dataclass(frozen=True)
class CompilePlan:
    """The outcome of :func:`plan_compile`: a compiled request, or the shortfall."""

    compiled: CompiledRequest | None
    shortfall: Shortfall | None

    @property
    def fits(self) -> bool:
        return self.compiled is not None


def resolve_target(
    recipe: Recipe, format: RequestFormatName | str | None = None, model: str | None = None
) -> tuple[RequestFormat, str]:
    """Return the request format and model a compile targets: the call's, else the recipe's,
    else the format's default model.

    Raises:
        RecipeError: an unknown format name.
    """
    fmt = request_format(format or recipe.output_format)
    return fmt, model or recipe.model or fmt.default_model


def _check_arguments(
    store: object, recipe: object, budget: object, format: object, model: object, tools: object
) -> None:
    """Refuse arguments of the wrong type with one clear :class:`InvalidArgument`."""
    if not isinstance(store, HistoryStore):
        raise InvalidArgument(f"store must be a history store (e.g. compaction.Store(path)); found {found(store)}")
    if not isinstance(recipe, Recipe):
        raise InvalidArgument(f"recipe must be a compaction.Recipe (or load_recipe(path)); found {found(recipe)}")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)):
        raise InvalidArgument(f"budget must be an integer number of tokens; found {found(budget)}")
    for name, value in (("format", format), ("model", model)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a string or None; found {found(value)}")
    if isinstance(tools, (str, bytes, dict)) or not isinstance(tools, Sequence):
        raise InvalidArgument(f"tools must be a list of tool definitions (dicts); found {found(tools)}")


def require_budget(budget: int | None) -> int:
    """Return ``budget``, or raise :class:`OverBudget` (stage ``"settings"``) when it is missing or <= 0."""
    if budget is None or budget <= 0:
        wanted = "a token budget is required" if budget is None else f"the token budget must be > 0; found {budget}"
        raise OverBudget(
            f"{wanted} (--budget N, or budget_tokens in the recipe)",
            stage="settings",
            budget=budget or 0,
            needed=0,
        )
    return budget


def compile_request(
    store: HistoryStore,
    recipe: Recipe,
    *,
    budget: int | None = None,
    format: RequestFormatName | None = None,
    model: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> CompiledRequest:
    """Compile ``store`` into a request of at most ``budget`` tokens.

    Args:
        store: the history.
        recipe: settings (encoding, image policy and caps, output format, model, budget).
        budget: the token budget; default ``recipe.budget_tokens``.
        format: ``"openai"`` or ``"anthropic"``; default ``recipe.output_format``.
        model: the model named in the request (also selects image pricing); default the
            recipe's, else the format's default (``gpt-4o``, ``claude-sonnet-4-5``).
        tools: tool definitions offered to the model, in either provider's shape; they are
            rendered into the request and their tokens count against the budget.

    Returns:
        The :class:`CompiledRequest`.

    Raises:
        InvalidArgument: an argument of the wrong type (``budget="100"``, ``store=None``...).
        RecipeError: an unknown request format.
        InvalidMessage: the store is empty, or holds system messages only and the format is
            Anthropic's (its Messages API refuses a request without a user message).
        AssistantPrefillRefused: the request ends on an assistant turn (the store's newest
            message is the assistant's, shown raw) and ``recipe.assistant_prefill`` refuses it
            for the model (:mod:`compaction.prefill`: Claude 4.6 and later refuse a prefill);
            checked before planning when the newest message will ship raw, and on the
            compiled request.
        OverBudget: even the pinned messages, the tool definitions, the unsummarized tail and
            the coarsest summaries exceed the budget; ``stage``, ``budget`` and ``needed``
            say which part and how many tokens it needs alone.
        InvariantViolation: coverage, pairing or a cap would break (an engine bug).
    """
    check_prefill(store, recipe, budget=budget, format=format, model=model)
    plan = plan_compile(store, recipe, budget=budget, format=format, model=model, tools=tools)
    if plan.compiled is None:
        assert plan.shortfall is not None
        raise plan.shortfall.error()
    return check_compiled_prefill(store, recipe, plan.compiled)


def check_prefill(
    store: HistoryStore,
    recipe: Recipe,
    *,
    budget: int | None = None,
    format: RequestFormatName | str | None = None,
    model: str | None = None,
    raw_limit: int | None = None,
) -> None:
    """Raise before any work when a request of ``store`` may not end on the assistant turn it would end on.

    The arguments are checked first (:class:`InvalidArgument`), then the store's final turn
    against ``recipe.assistant_prefill`` for the model the request names
    (:func:`compaction.prefill.check_assistant_prefill`), when that turn will be shown raw:
    a newest message the level-1 summaries already cover is never in the live window (every
    cut point is at or before their frontier, :meth:`WindowPlanner.cut_candidates`), and one
    whose own planned tokens exceed ``budget`` never fits raw, so either is summarized and the
    request ends on the summaries' user turn; those are left to the check after planning
    (:func:`compaction.prefill.check_shipped_prefill`), which callers that compile run too.
    :func:`plan_compile` does not check: planning a request (``compaction compress
    --budget``) is not sending one.

    Args:
        budget: the request's budget (tokens); default ``recipe.budget_tokens``.
        raw_limit: the largest newest message (planned tokens) taken to ship raw; default the
            budget.  A caller that compacts first passes less: compaction keeps the newest
            message raw in every round but its last (``keep_tail_tokens=0``), which runs when
            that message and the summaries before it exceed the target, so the pipeline takes
            half its target (the first round's keep).  Without a positive limit the newest
            message is taken to ship raw.

    Raises:
        InvalidArgument: an argument of the wrong type.
        AssistantPrefillRefused: the request would end on an assistant turn its model refuses.
    """
    _check_arguments(store, recipe, budget, format, model, ())
    fmt, resolved = resolve_target(recipe, format, model)
    limit = raw_limit if raw_limit is not None else recipe.budget_tokens if budget is None else budget

    def shown_raw(seq: int) -> bool:
        if limit is None or limit <= 0:
            return True
        planner = WindowPlanner(store, recipe, limit, fmt, resolved)
        return seq >= planner.frontier and planner.message_cost(seq) <= limit

    check_assistant_prefill(store, recipe, resolved, shown_raw=shown_raw)


def check_compiled_prefill(store: HistoryStore, recipe: Recipe, compiled: CompiledRequest) -> CompiledRequest:
    """Return ``compiled`` unless it ends on an assistant turn ``recipe`` refuses for its model.

    The check after planning, and the authority (:func:`check_prefill` decides before any
    work only when the newest message will ship raw): it reads the request as gated, so the
    refusal matches the shipped body (:func:`compaction.prefill.check_shipped_prefill`).

    Raises:
        AssistantPrefillRefused: the request's last turn is the assistant's and the recipe's
            ``assistant_prefill`` refuses it for ``compiled.request.model``.
    """
    check_shipped_prefill(store, recipe, compiled.request.model, compiled.request.messages)
    return compiled


def _planner(
    store: HistoryStore,
    recipe: Recipe,
    budget: int | None,
    format: str | None,
    model: str | None,
    tools: object,
    mask_before: int = 0,
) -> WindowPlanner:
    """Check the arguments of a compile and return its planner (budget, format and model resolved)."""
    _check_arguments(store, recipe, budget, format, model, tools)
    fmt, resolved = resolve_target(recipe, format, model)
    budget = require_budget(recipe.budget_tokens if budget is None else budget)
    plan = WindowPlanner(store, recipe, budget, fmt, resolved, mask_before=mask_before)
    if plan.n == 0:
        raise InvalidMessage(_nothing_to_compile(store))
    if fmt.name == "anthropic" and final_turn(store) is None:
        # system messages ride in the system text, and the Messages API refuses `messages: []`
        # ("at least one message"; OpenAI Chat takes a system message alone)
        raise InvalidMessage(
            f"{store.path}: the store holds system messages only ({plan.n}), and an {fmt.title} request "
            "needs at least one user message: there is no conversation to compile; append the user's "
            "message first"
        )
    return plan


def _nothing_to_compile(store: HistoryStore) -> str:
    """Say why an empty conversation has no request: a branch made at message 0, or an empty store."""
    name = getattr(store, "conversation", None)
    listing = getattr(store, "conversations", None)
    info = next((c for c in listing() if c.name == name), None) if callable(listing) else None
    if info is not None and info.parent is not None:
        return (
            f"{store.path}: conversation {name!r} holds no messages yet (a branch of {info.parent!r} made at message "
            f"{info.fork_seq}, sharing none): there is no history to compile; append to it first "
            f"(compaction import TRANSCRIPT --conversation {name})"
        )
    return f"{store.path}: the store holds no messages; import a transcript first"


def plan_compile(
    store: HistoryStore, recipe: Recipe, *, budget: int | None = None, format: RequestFormatName | None = None,
    model: str | None = None, tools: Sequence[dict[str, Any]] = (),
) -> CompilePlan:
    """Compile like :func:`compile_request`, but return a shortfall instead of raising it.

    Returns:
        A :class:`CompilePlan`: the compiled request when it fits, else the
        :class:`Shortfall` (stage, budget, tokens needed) the pipeline acts on.

    Raises:
        InvalidArgument: an argument of the wrong type (a store that is not a store, a
            budget that is not an integer, ...).
        OverBudget: no budget, or a budget <= 0 (stage ``"settings"``).
        InvalidMessage: the store is empty, or holds system messages only and the format is
            Anthropic's (its Messages API refuses a request without a user message).
        InvariantViolation: coverage, pairing or a cap would break (an engine bug).
    """
    plan = _planner(store, recipe, budget, format, model, tools)
    budget = plan.budget
    fmt = plan.format
    pins = _pins(store)
    offered = normalize_tools(tools)
    tool_tokens = tools_tokens(offered, fmt.name, plan.encoding)
    candidates = _candidates(plan, pins, tool_tokens)
    attempts = [(plan, c) for c in sorted((c for c in candidates if c[2] <= budget), key=lambda c: c[0])]
    smallest = (plan, candidates[0])
    boundary = _mask_boundary(store, recipe, plan)
    if boundary > 0:
        masked = _sibling(plan, boundary)
        masked_candidates = _candidates(masked, pins, tool_tokens)
        masked_fitting = sorted((c for c in masked_candidates if c[2] <= budget), key=lambda c: c[0])
        best_raw = attempts[0][1][0] if attempts else None
        if masked_fitting and (best_raw is None or masked_fitting[0][0] < best_raw):
            # The masked tier reaches further back than the raw one: mask as little as fits.
            cut = masked_fitting[0][0]
            least = _least_masking(plan, masked, cut, pins, tool_tokens)
            attempts = [least, *((masked, c) for c in masked_fitting), *attempts]
        if not masked_fitting:
            if masked_candidates[0][2] < smallest[1][2]:  # name the smaller of the two renderings
                smallest = (masked, masked_candidates[0])
    if not attempts:
        shortest_plan, (cut, cover, total) = smallest
        return CompilePlan(None, _shortfall(shortest_plan, pins, tool_tokens, cut, cover, total))
    # Largest live window first; on an exact-count miss at the gate, try the next.
    last_error: OverBudget | None = None
    for planner, (cut, cover, total) in attempts:
        cover, total = refine_cover(planner, cover, total, budget)
        try:
            return CompilePlan(_emit(store, planner, pins, cover, cut, budget, offered, total), None)
        except OverBudget as err:
            last_error = err
    assert last_error is not None
    return CompilePlan(None, Shortfall("request", budget, last_error.needed, str(last_error)))


Candidate = tuple[int, list[StoredSummary], int]


def _candidates(plan: WindowPlanner, pins: Pins, tool_tokens: int) -> list[Candidate]:
    """Return ``(cut, coarsest cover, tokens)`` for each live-window start, newest first.

    The scan stops at the first window whose raw messages alone exceed the budget (older
    ones only grow); the first candidate is always returned, so a shortfall can be named.
    """
    candidates: list[Candidate] = []
    for cut in plan.cut_candidates():
        system = _system_for(pins, cut)
        fixed = plan.format.framing_tokens(system, plan.first_role(cut, ()), plan.encoding) + tool_tokens
        if fixed + plan.suffix(cut) - plan.merge_saving(cut) > plan.budget and candidates:
            break
        cover = plan.cover(cut)
        framing = plan.format.framing_tokens(system, plan.first_role(cut, cover), plan.encoding)
        summaries = plan.summary_message_cost(cover) - plan.merge_saving(cut, cover)
        candidates.append((cut, cover, framing + tool_tokens + plan.suffix(cut) + summaries))
    return candidates


def _mask_boundary(store: HistoryStore, recipe: Recipe, plan: WindowPlanner) -> int:
    """Return the seq before which tool outputs may be masked (0: masking is off or nothing is old enough)."""
    if not recipe.observation_masking:
        return 0
    return keep_boundary(store, recipe.mask_keep_rounds, plan.encoding)


def _sibling(plan: WindowPlanner, mask_before: int) -> WindowPlanner:
    """Return a planner like ``plan`` that prices messages before ``mask_before`` masked (sharing its reads)."""
    return WindowPlanner(
        plan.store, plan.recipe, plan.budget, plan.format, plan.model, mask_before=mask_before, view=plan.view
    )


def _least_masking(
    plan: WindowPlanner, masked: WindowPlanner, cut: int, pins: Pins, tool_tokens: int
) -> tuple[WindowPlanner, Candidate]:
    """Return the planner and candidate at ``cut`` that masks the fewest messages and still fits.

    Masking from ``cut`` up to the masked planner's boundary fits; the boundary moves down,
    tool round by tool round, while the request stays within the budget (a binary search:
    masking fewer messages never makes a request smaller).
    """
    cover = masked.cover(cut)
    framing = plan.format.framing_tokens(_system_for(pins, cut), plan.first_role(cut, cover), plan.encoding)
    fixed = framing + tool_tokens + masked.summary_message_cost(cover) - masked.merge_saving(cut, cover)
    rounds = [
        f.seq
        for f in plan.store.facts(cut, masked.mask_before, encoding=plan.encoding)
        if f.role == "assistant" and f.tool_uses and f.seq > cut
    ]
    best: tuple[WindowPlanner, Candidate] = (masked, (cut, cover, fixed + masked.suffix(cut)))
    low, high = 0, len(rounds)  # rounds[high] would be the boundary itself
    while low < high:
        mid = (low + high) // 2
        trial = _sibling(plan, rounds[mid])
        total = fixed + trial.suffix(cut)
        if total <= plan.budget:
            best = (trial, (cut, cover, total))
            high = mid
        else:
            low = mid + 1
    return best


def _shortfall(
    plan: WindowPlanner,
    pins: Pins,
    tool_tokens: int,
    cut: int,
    cover: Sequence[StoredSummary],
    total: int,
) -> Shortfall:
    """Describe the smallest rendering that does not fit: each part that cannot shrink, and its size."""
    system = _system_for(pins, cut)
    budget = plan.budget
    tail = plan.suffix(cut) - plan.merge_saving(cut)
    newest = plan.n - 1
    parts = []
    if cut <= newest:
        what = "the newest message" if cut == newest else f"the {plan.n - cut} newest messages ({cut}–{newest})"
        parts.append(f"{what}, shown raw, {tail}")
    if system:
        others = any(role != "system" and seq < cut for seq, role, _text in pins)  # pinned user/assistant text
        what = "the pinned system messages"
        if others:
            what = "the system messages and the messages pinned before the live window"
        parts.append(f"{what} {message_overhead(plan.encoding) + count_text(system, plan.encoding)}")
    if tool_tokens:
        parts.append(f"the tool definitions {tool_tokens}")
    if cover:
        parts.append(f"the coarsest summaries of the older history {plan.summary_message_cost(cover)}")
    advice = "raise the budget"
    if cut < newest:
        advice += (
            f", or compress for this budget first (`compaction compress --budget {budget}`;"
            " compress_and_compile() in Python)"
        )
    stage: Stage = "live window" if cut == newest else ("summaries" if cut > newest else "unsummarized tail")
    message = (
        f"the request cannot fit the budget of {budget} tokens: it needs {total} tokens at least "
        f"({'; '.join(parts)}; the rest is request framing). Nothing was changed; {advice}"
    )
    return Shortfall(stage, budget, total, message)


def _emit(
    store: HistoryStore,
    plan: WindowPlanner,
    pins: Pins,
    cover: list[StoredSummary],
    cut: int,
    budget: int,
    tools: tuple[dict[str, Any], ...],
    planned: int,
) -> CompiledRequest:
    """Build the request ``plan`` priced (summaries, ledger, masked and raw window), gate it.

    Raises:
        OverBudget: the gate's exact count is over ``budget``.
        InvariantViolation: coverage, pairing, a cap or the grammar would break.
    """
    system = _system_for(pins, cut)
    pinned = [seq for seq, _role, _text in pins]
    messages: list[tuple[str, tuple[Block, ...]]] = []
    hints: list[int | None] = []
    ledger = plan.ledger(cut) if cover else None
    if cover:
        blocks = [{"type": "text", "text": SUMMARY_INTRO}] + [summary_block(s) for s in cover]
        if ledger is not None:
            blocks.insert(0, {"type": "text", "text": ledger})
        messages.append(("user", tuple(blocks)))
        hints.append(plan.summary_message_cost(cover))
    masked: list[int] = []
    for message in stored_messages(store, cut, plan.n):
        if message.role == "system":
            continue
        seq = message.seq
        content = message.content
        if seq is not None and seq in plan.masked_blocks:
            content = plan.masked_blocks[seq]
            masked.append(seq)
        messages.append((message.role, content))
        hints.append(plan.text_tokens.get(seq) if seq is not None else None)
    _check_coverage(plan, pinned, cover, cut)
    # Stable prefix boundaries for prompt caches: the end of the summary stack (fixed between
    # compaction events) and the newest message (the next turn's request starts with it all).
    points = tuple(sorted({0, len(messages) - 1} if cover else {len(messages) - 1})) if messages else ()
    request = OutboundRequest("live", system, tuple(messages), tuple(hints), tools, points)
    gated = gate(
        request,
        plan.settings,
        format=plan.format,
        model=plan.model,
        encoding=plan.encoding,
        budget=budget,
        cache_key=plan.recipe.prompt_cache_key,
        cache_breakpoints=plan.recipe.cache_breakpoints,
    )
    raw_seqs = tuple(seq for seq in pinned if seq < cut) + tuple(range(cut, plan.n))  # each seq once
    return CompiledRequest(
        gated,
        budget,
        cut,
        tuple(cover),
        raw_seqs,
        plan.n,
        planned,
        mask_before=max(plan.mask_before, cut),
        masked_seqs=tuple(masked),
        ledger_tokens=plan.ledger_cost(cut) if cover else 0,
    )


def _check_coverage(plan: WindowPlanner, pinned: list[int], cover: Sequence[StoredSummary], cut: int) -> None:
    """Every message is pinned, raw in the live window, or covered by exactly one shown summary."""
    position = 0
    for summary in cover:
        if summary.start_seq != position:
            raise InvariantViolation(f"coverage: summaries leave a gap or overlap at seq {position}")
        position = summary.end_seq
    if position != cut:
        raise InvariantViolation(f"coverage: summaries end at seq {position}, the live window starts at {cut}")
    if not 0 <= cut <= plan.n:
        raise InvariantViolation(f"coverage: live window start {cut} outside [0, {plan.n}]")


def raw_history_tokens(
    store: HistoryStore,
    recipe: Recipe,
    *,
    format: RequestFormatName | None = None,
    model: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> int:
    """Return the tokens of the whole history sent raw (no summaries), priced as compile prices it.

    Images are decided by the live policy and caps, as in a compile; tool definitions and the
    format's framing count as in a compile, and so does what merging consecutive messages of
    one role saves (:meth:`WindowPlanner.merge_saving`).  Budget-free: this is the "before" figure of
    ``compaction run`` and ``compaction stats`` (tokens).  A history that fits its budget
    compiles to exactly this many tokens.
    """
    fmt, model = resolve_target(recipe, format, model)
    plan = WindowPlanner(store, recipe, 0, fmt, model)
    if plan.n == 0:
        return 0
    system, _pinned = _system_text(store, 0)
    framing = fmt.framing_tokens(system, plan.first_role(0, ()), plan.encoding)
    tools_cost = tools_tokens(normalize_tools(tools), fmt.name, plan.encoding)
    return framing + tools_cost + plan.suffix(0) - plan.merge_saving(0)


def extend_frame(
    store: HistoryStore,
    recipe: Recipe,
    cut: int,
    cover_ranges: Sequence[tuple[int, int, int]],
    *,
    budget: int,
    tools: Sequence[dict[str, Any]] = (),
) -> CompilePlan:
    """Plan a frame that keeps a frame's summary stack and appends summaries after it.

    The summaries of the old frame stay first, byte for byte; the stretch from its cut to a
    later chunk boundary is covered by the coarsest summaries there are, and the new live
    window starts at that boundary, its older tool outputs masked as little as fits
    (when ``Recipe.observation_masking`` is on).  The largest live window that fits
    ``budget`` wins.  A compaction event tries this first, so the prompt cache keeps
    serving the old stack.

    Returns:
        The plan (a compiled request, or the shortfall of the smallest extension).
    """
    last: CompilePlan | None = None
    fmt, model = resolve_target(recipe)
    plan = WindowPlanner(store, recipe, budget, fmt, model)
    boundary = _mask_boundary(store, recipe, plan)
    later = sorted(c for c in plan.cut_candidates() if c >= cut)
    for candidate in later:
        try:
            extra = plan.cover(candidate, start=cut)
        except InvariantViolation:
            continue  # no summaries there yet
        ranges = [*cover_ranges, *((s.level, s.start_seq, s.end_seq) for s in extra)]
        last = compile_frame(store, recipe, candidate, ranges, budget=budget, tools=tools)
        if last.fits:
            return last
        if boundary > candidate:
            masked = compile_frame(store, recipe, candidate, ranges, budget=budget, tools=tools, mask_before=boundary)
            if masked.fits:
                return _least_masked_frame(store, recipe, candidate, ranges, budget, tools, boundary, masked)
    if last is None:
        return CompilePlan(None, Shortfall("summaries", budget, budget + 1, "no summaries after the frame's cut"))
    return last


def _least_masked_frame(
    store: HistoryStore,
    recipe: Recipe,
    cut: int,
    ranges: Sequence[tuple[int, int, int]],
    budget: int,
    tools: Sequence[dict[str, Any]],
    boundary: int,
    fits: CompilePlan,
) -> CompilePlan:
    """Return the frame at ``cut`` that masks the fewest tool rounds and still fits (``fits`` masks up to ``boundary``)."""
    rounds = [
        f.seq
        for f in store.facts(cut, boundary, encoding=recipe.encoding)
        if f.role == "assistant" and f.tool_uses and f.seq > cut
    ]
    best = fits
    low, high = 0, len(rounds)
    while low < high:
        mid = (low + high) // 2
        trial = compile_frame(store, recipe, cut, ranges, budget=budget, tools=tools, mask_before=rounds[mid])
        if trial.fits:
            best, high = trial, mid
        else:
            low = mid + 1
    return best


def compile_frame(
    store: HistoryStore,
    recipe: Recipe,
    cut: int,
    cover_ranges: Sequence[tuple[int, int, int]],
    *,
    budget: int | None = None,
    format: RequestFormatName | None = None,
    model: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
    mask_before: int = 0,
) -> CompilePlan:
    """Compile with a fixed frame: the given summaries, then every message from ``cut`` shown.

    Between two compaction events the frame does not change, so each request is the previous
    one with the new messages appended (a prompt cache serves the prefix); see
    :mod:`compaction.events`.

    Args:
        cut: the first seq of the live window.
        cover_ranges: ``(level, start_seq, end_seq)`` of the summaries shown, oldest first;
            they must cover ``[0, cut)`` exactly.
        budget, format, model, tools: as in :func:`compile_request`.
        mask_before: tool outputs of messages before this seq are shown masked
            (:mod:`compaction.masking`); 0 masks none.

    Returns:
        A :class:`CompilePlan`: the request when the frame still fits ``budget``, else the
        shortfall (stage ``"request"``).

    Raises:
        OverBudget: no budget, or a budget <= 0 (stage ``"settings"``).
        InvariantViolation: a summary of the frame is missing from the store, or the frame
            does not cover ``[0, cut)`` (the store was not the one the frame was made on).
    """
    plan = _planner(store, recipe, budget, format, model, tools, mask_before=mask_before)
    budget = plan.budget
    fmt = plan.format
    cover: list[StoredSummary] = []
    for level, start, end in cover_ranges:
        found = [s for s in store.summaries_within(level, start, end) if (s.start_seq, s.end_seq) == (start, end)]
        if not found:
            raise InvariantViolation(f"frame: no level-{level} summary of [{start}, {end}) in the store")
        cover.append(found[0])
    if not 0 <= cut <= plan.n:
        raise InvariantViolation(f"frame: live window start {cut} outside [0, {plan.n}]")
    pins = _pins(store)
    system = _system_for(pins, cut)
    offered = normalize_tools(tools)
    total = (
        fmt.framing_tokens(system, plan.first_role(cut, cover), plan.encoding)
        + tools_tokens(offered, fmt.name, plan.encoding)
        + plan.suffix(cut)
        + plan.summary_message_cost(cover)
        - plan.merge_saving(cut, cover)
    )
    if total > budget:
        message = f"the frame's request needs {total} tokens, over the budget of {budget}"
        return CompilePlan(None, Shortfall("request", budget, total, message))
    try:
        return CompilePlan(_emit(store, plan, pins, cover, cut, budget, offered, total), None)
    except OverBudget as err:
        return CompilePlan(None, Shortfall("request", budget, err.needed, str(err)))
