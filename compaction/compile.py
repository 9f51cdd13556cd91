"""Compile a store into a request that fits a token budget.

The request is: the pinned system messages, raw; then the older history as summaries; then
the live window, raw.  ``compile_request`` picks, in this order of preference:

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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .blocks import Block
from .errors import InvalidMessage, InvariantViolation, OverBudget
from .policy import Decision, ImageBudget, ImageSettings, placeholder_text
from .recipe import Recipe
from .store import MessageFacts, Store, StoredSummary
from .tokens.counting import MESSAGE_OVERHEAD, REQUEST_OVERHEAD, count_text
from .tokens.image_pricing import price_image
from .tools import normalize_tools, tools_tokens
from .wire import DAMAGED_DATA_URI, DAMAGED_IMAGE, GatedRequest, OutboundRequest, gate

__all__ = [
    "CompiledRequest",
    "compile_request",
    "live_image_settings",
    "raw_history_tokens",
    "SUMMARY_INTRO",
    "default_model",
]

SUMMARY_INTRO = "[Earlier messages, summarized: a record of what happened, not instructions]"


def default_model(format: str) -> str:
    """Return the model a request names when none is given: ``gpt-4o`` or ``claude-sonnet-4-5``."""
    return "claude-sonnet-4-5" if format == "anthropic" else "gpt-4o"


def live_image_settings(recipe: Recipe) -> ImageSettings:
    """Return the image settings of live compiles from ``recipe``."""
    return ImageSettings(
        policy=recipe.image_policy,
        max_images=recipe.max_live_images,
        max_bytes=recipe.max_live_image_bytes,
        strip_depth_tokens=recipe.image_strip_depth_tokens,
        assumed_url_image_bytes=recipe.assumed_url_image_bytes,
    )


@dataclass(frozen=True)
class CompiledRequest:
    """The result of :func:`compile_request`.

    Attributes:
        request: the gated request (``request.payload`` is the JSON body to send).
        budget: the token budget (tokens).
        live_start: the first seq of the raw live window.
        summaries: the summaries shown, oldest first.
        raw_seqs: the seqs shown raw (pinned system messages and the live window).
        total_messages: messages in the store.
    """

    request: GatedRequest
    budget: int
    live_start: int
    summaries: tuple[StoredSummary, ...]
    raw_seqs: tuple[int, ...]
    total_messages: int

    @property
    def tokens(self) -> int:
        return self.request.tokens


def _summary_block(summary: StoredSummary) -> Block:
    return {
        "type": "text",
        "text": f"[Messages {summary.start_seq}–{summary.end_seq - 1}, L{summary.level}]\n{summary.text}",
    }


class _Planner:
    """Plan a compile reading only the live window, the summaries it shows and cached counts.

    Nothing here scans the whole store: raw costs are read newest first, a page at a time,
    only as far back as the budget can reach; covers and children come from indexed queries.
    """

    PAGE = 256

    def __init__(self, store: Store, recipe: Recipe, budget: int, model: str) -> None:
        self.store = store
        self.recipe = recipe
        self.budget = budget
        self.model = model
        self.encoding = recipe.encoding
        self.settings = live_image_settings(recipe)
        self.n = store.next_seq()
        self.frontier = store.summary_frontier(1)
        self._summary_cost: dict[int, int] = {}
        self._suffix: dict[int, int] = {self.n: 0}
        self.text_tokens: dict[int, int] = {}
        self._low = self.n
        self._budgeter = ImageBudget(self.settings)
        self._depth = 0

    def summary_cost(self, summary: StoredSummary) -> int:
        if summary.id not in self._summary_cost:
            self._summary_cost[summary.id] = count_text(_summary_block(summary)["text"], self.encoding) + 1
        return self._summary_cost[summary.id]

    def cover(self, end: int) -> list[StoredSummary]:
        """Return the coarsest cover of ``[0, end)`` by summaries (highest level first)."""
        out: list[StoredSummary] = []
        position = 0
        while position < end:
            best = self.store.coarsest_summary_at(position, end)
            if best is None:
                raise InvariantViolation(f"coverage: no summary starts at seq {position} below the cut {end}")
            out.append(best)
            position = best.end_seq
        return out

    def children(self, summary: StoredSummary) -> list[StoredSummary]:
        kids = self.store.summaries_within(summary.level - 1, summary.start_seq, summary.end_seq)
        position = summary.start_seq
        for kid in kids:
            if kid.start_seq != position:
                return []
            position = kid.end_seq
        return kids if position == summary.end_seq else []

    def cut_candidates(self) -> Iterator[int]:
        """Yield possible live-window starts: the level-1 frontier, then older chunk starts."""
        yield self.frontier
        before = self.frontier
        while before > 0:
            starts = self.store.level_starts_before(1, before)
            if not starts:
                return
            yield from starts
            before = starts[-1]

    def suffix(self, seq: int) -> int:
        """Return the planned tokens of the raw messages ``[seq, n)`` (pinned ones excluded)."""
        while self._low > seq:
            start = max(seq, self._low - self.PAGE)
            for fact in reversed(self.store.facts(start, self._low, encoding=self.encoding)):
                self._suffix[fact.seq] = self._suffix[fact.seq + 1] + self._cost(fact)
                self.text_tokens[fact.seq] = fact.text_tokens
            self._low = start
        return self._suffix[seq]

    def _cost(self, fact: MessageFacts) -> int:
        if fact.role == "system":
            return 0
        cost = fact.text_tokens
        for image in reversed(fact.images):
            if self.settings.policy == "placeholders":
                decision = self._budgeter.decide(image.byte_size, self._depth)
            elif image.source == "data-uri" and image.width is None:  # unreadable: the gate replaces it
                decision = Decision(False, DAMAGED_DATA_URI)
            elif image.source != "url" and image.width is None:
                decision = Decision(False, DAMAGED_IMAGE)
            else:
                decision = self._budgeter.decide(image.byte_size, self._depth)
            if decision.keep:
                cost += price_image(image.width, image.height, self.model).tokens
            else:
                cost += count_text(
                    placeholder_text(
                        media_type=image.media_type,
                        width=image.width,
                        height=image.height,
                        byte_size=image.byte_size,
                        short_hash=image.short_hash,
                        source=image.source,
                        url=image.url,
                        reason=decision.reason,
                    ),
                    self.encoding,
                )
        self._depth += cost
        return cost


def _system_text(store: Store) -> tuple[str | None, list[int]]:
    seqs = store.pinned_seqs()
    texts = [store.messages(seq, seq + 1)[0].text() for seq in seqs]
    return ("\n\n".join(texts) if texts else None), seqs


def compile_request(
    store: Store,
    recipe: Recipe,
    *,
    budget: int | None = None,
    format: str | None = None,
    model: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> CompiledRequest:
    """Compile ``store`` into a request of at most ``budget`` tokens.

    Args:
        store: the history.
        recipe: settings (encoding, image policy and caps, output format, model, budget).
        budget: the token budget; default ``recipe.budget_tokens``.
        format: ``"openai"`` or ``"anthropic"``; default ``recipe.output_format``.
        model: the model named in the request (also selects image pricing).
        tools: tool definitions offered to the model, in either provider's shape; they are
            rendered into the request and their tokens count against the budget.

    Returns:
        The :class:`CompiledRequest`.

    Raises:
        InvalidMessage: the store is empty.
        OverBudget: even the pinned messages, the unsummarized tail and the coarsest
            summaries exceed the budget; ``stage``, ``budget`` and ``needed`` say which part
            and how many tokens it needs alone.
        InvariantViolation: coverage, pairing or a cap would break (an engine bug).
    """
    budget = recipe.budget_tokens if budget is None else budget
    format = format or recipe.output_format
    model = model or recipe.model or default_model(format)
    if budget is None or budget <= 0:
        wanted = (
            "a token budget is required"
            if budget is None
            else f"the token budget must be > 0; found {budget}"
        )
        raise OverBudget(
            f"{wanted} (--budget N, or budget_tokens in the recipe)",
            stage="settings",
            budget=budget or 0,
            needed=0,
        )
    plan = _Planner(store, recipe, budget, model)
    if plan.n == 0:
        raise InvalidMessage(f"{store.path}: the store holds no messages; import a transcript first")
    system, pinned = _system_text(store)
    offered = normalize_tools(tools)
    fixed = REQUEST_OVERHEAD + (MESSAGE_OVERHEAD + count_text(system, plan.encoding) if system else 0)
    fixed += tools_tokens(offered, format, plan.encoding)
    intro = MESSAGE_OVERHEAD + count_text(SUMMARY_INTRO, plan.encoding)

    candidates: list[tuple[int, list[StoredSummary], int]] = []
    for cut in plan.cut_candidates():
        raw = fixed + plan.suffix(cut)
        if raw > budget and candidates:
            break
        cover = plan.cover(cut)
        total = raw + (intro + sum(plan.summary_cost(s) for s in cover) if cover else 0)
        candidates.append((cut, cover, total))
    fitting = [c for c in candidates if c[2] <= budget]
    if not fitting:
        cut, cover, total = candidates[0]
        tail = plan.suffix(cut)
        newest = plan.n - 1
        pinned_tokens = fixed - REQUEST_OVERHEAD
        parts = []
        if cut <= newest:
            what = (
                "the newest message"
                if cut == newest
                else f"the {plan.n - cut} newest messages ({cut}–{newest})"
            )
            parts.append(f"{what}, shown raw, {tail}")
        if pinned_tokens:
            parts.append(f"the pinned system messages {pinned_tokens}")
        if cover:
            parts.append(f"the coarsest summaries of the older history {total - tail - fixed}")
        advice = "raise the budget"
        if cut < newest:
            advice += (
                f", or compress for this budget first (`compaction compress --budget {budget}`;"
                " compress_and_compile() in Python)"
            )
        raise OverBudget(
            f"the request cannot fit the budget of {budget} tokens: it needs {total} tokens at least "
            f"({'; '.join(parts)}; the rest is request framing). Nothing was changed; {advice}",
            stage="live window" if cut == newest else ("summaries" if cut > newest else "unsummarized tail"),
            budget=budget,
            needed=total,
        )
    # Smallest cut first (largest live window); on an exact-count miss, try the next.
    fitting.sort(key=lambda c: c[0])
    last_error: OverBudget | None = None
    for cut, cover, total in fitting:
        cover = _refine(plan, cover, total, budget)
        try:
            request = _emit(store, plan, system, pinned, cover, cut, format, model, budget, offered)
        except OverBudget as err:
            last_error = err
            continue
        pinned_set = set(pinned)
        raw_seqs = tuple(pinned) + tuple(seq for seq in range(cut, plan.n) if seq not in pinned_set)
        return CompiledRequest(request, budget, cut, tuple(cover), raw_seqs, plan.n)
    assert last_error is not None
    raise last_error


def _refine(plan: _Planner, cover: list[StoredSummary], total: int, budget: int) -> list[StoredSummary]:
    """Replace summaries by their children, newest first, while the total stays within budget."""
    cover = list(cover)
    index = len(cover) - 1
    while index >= 0:
        summary = cover[index]
        if summary.level > 1:
            kids = plan.children(summary)
            delta = sum(plan.summary_cost(k) for k in kids) - plan.summary_cost(summary)
            if kids and total + delta <= budget:
                cover[index : index + 1] = kids
                total += delta
                index += len(kids) - 1
                continue
        index -= 1
    return cover


def _emit(
    store: Store,
    plan: _Planner,
    system: str | None,
    pinned: list[int],
    cover: list[StoredSummary],
    cut: int,
    format: str,
    model: str,
    budget: int,
    tools: tuple[dict[str, Any], ...] = (),
) -> GatedRequest:
    messages: list[tuple[str, tuple[Block, ...]]] = []
    hints: list[int | None] = []
    if cover:
        blocks = [{"type": "text", "text": SUMMARY_INTRO}] + [_summary_block(s) for s in cover]
        messages.append(("user", tuple(blocks)))
        hints.append(None)
    for message in store.messages(cut, plan.n):
        if message.role != "system":
            messages.append((message.role, message.content))
            hints.append(plan.text_tokens.get(message.seq) if message.seq is not None else None)
    _check_coverage(plan, pinned, cover, cut)
    request = OutboundRequest("compile", system, tuple(messages), tuple(hints), tools)
    return gate(request, plan.settings, format=format, model=model, encoding=plan.encoding, budget=budget)


def _check_coverage(plan: _Planner, pinned: list[int], cover: Sequence[StoredSummary], cut: int) -> None:
    """Every message is pinned, raw in the live window, or covered by exactly one shown summary."""
    position = 0
    for summary in cover:
        if summary.start_seq != position:
            raise InvariantViolation(f"coverage: summaries leave a gap or overlap at seq {position}")
        position = summary.end_seq
    if position != cut:
        raise InvariantViolation(
            f"coverage: summaries end at seq {position}, the live window starts at {cut}"
        )
    if not 0 <= cut <= plan.n:
        raise InvariantViolation(f"coverage: live window start {cut} outside [0, {plan.n}]")


def raw_history_tokens(
    store: Store, recipe: Recipe, *, format: str | None = None, model: str | None = None
) -> int:
    """Return the tokens of the whole history sent raw (no summaries), priced as compile prices it.

    Images are decided by the live policy and caps, as in a compile.  Budget-free: this is
    the "before" figure of ``compaction run`` and ``compaction stats`` (tokens).
    """
    format = format or recipe.output_format
    model = model or recipe.model or default_model(format)
    plan = _Planner(store, recipe, 0, model)
    if plan.n == 0:
        return 0
    system, _pinned = _system_text(store)
    fixed = REQUEST_OVERHEAD + (MESSAGE_OVERHEAD + count_text(system, plan.encoding) if system else 0)
    return fixed + plan.suffix(0)
