"""The strategies a replay compares: how the request for the next turn is built from the store.

Each strategy is asked, before each assistant turn, for the gated request an agent would
send; it may compact the store (summaries are added, messages never change) and raises
:class:`~compaction.errors.OverBudget` when it cannot fit the budget.

* ``events``: :func:`~compaction.pipeline.compress_and_compile` with ``mode="events"``: the
  request only grows at its end between compaction events; an event compacts down to the
  recipe's low-water mark.
* ``replan``: the same call with ``mode="replan"``: the window is planned afresh every call.
* ``compact-at-limit``: how Claude Code and pi behave.  Messages are appended raw until the
  next request would exceed the budget; then everything but a short tail (a tenth of the
  budget, then nothing if that is not enough) is summarized into the summary stack
  (:meth:`~compaction.compactor.Compactor.tick`), and appending starts again.  The frame
  (the summaries shown and where the raw window starts) is held fixed between compactions.
* ``masking``: observation masking only.  Tool results older than the newest three tool
  rounds become a short loud placeholder naming the tool and the output's size; no
  summaries.  When the request is still over budget, the oldest messages are dropped (at a
  boundary that keeps tool rounds whole, behind a loud marker), and stay dropped.

Every request passes the wire gate (:func:`~compaction.wire.gate`), so each is a valid
request of the recipe's format, and each is checked against the budget there.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol

from .blocks import Block, Message
from .compactor import Compactor, l1_frontier
from .compile import _system_text, live_image_settings, resolve_target
from .errors import InvariantViolation, OverBudget
from .images import find_image_sites
from .pipeline import compress_and_compile
from .planning import SUMMARY_INTRO, summary_block
from .recipe import Recipe
from .splitting import tool_output_text
from .store import HistoryStore, StoredSummary
from .summarizers.base import Summarizer
from .tokens.counting import count_text
from .tools import normalize_tools
from .wire import GatedRequest, OutboundRequest, gate

__all__ = ["STRATEGIES", "ReplayStrategy", "make_strategy", "pipeline_accepts_mode"]

#: The strategies :func:`compaction.replay.replay` knows, in report order.
STRATEGIES = ("events", "replan", "compact-at-limit", "masking")

#: Tool rounds whose results the masking baseline keeps raw (the newest K).
MASK_KEEP_ROUNDS = 3
#: The raw tail compact-at-limit keeps after a compaction, as a share of the budget.
TAIL_SHARE = 0.1


class ReplayStrategy(Protocol):
    """Builds the request of each turn.

    Attributes:
        name: one of :data:`STRATEGIES`.
        note: anything a reader of the report must know, or ``""``.
        summarizer_requests: requests sent to the summarizer so far.
        compactions: calls so far that compacted: summarized, re-framed, masked or dropped
            messages (for ``events`` and ``replan``: a call that ran compression rounds or
            recorded a compaction event).
    """

    name: str
    note: str
    summarizer_requests: int
    compactions: int

    def request(self, store: HistoryStore) -> GatedRequest:
        """Return the gated request for the next turn (OverBudget if none fits)."""
        ...


def pipeline_accepts_mode() -> bool:
    """Return whether :func:`compress_and_compile` takes ``mode`` (compaction in events)."""
    return "mode" in inspect.signature(compress_and_compile).parameters


class _Pipeline:
    """``events`` and ``replan``: the library's own call before each model turn."""

    def __init__(self, name: str, recipe: Recipe, summarizer: Summarizer, tools: Sequence[dict[str, Any]]) -> None:
        self.name = name
        self.recipe = recipe
        self.summarizer = summarizer
        self.tools = tools
        self.summarizer_requests = 0
        self.compactions = 0
        self.kwargs: dict[str, Any] = {}
        self.note = ""
        if pipeline_accepts_mode():
            self.kwargs["mode"] = name
        elif name == "events":
            self.note = "compress_and_compile() takes no mode yet: events ran as replan"

    def request(self, store: HistoryStore) -> GatedRequest:
        events = len(store.events())
        compiled, ticks = compress_and_compile(
            store, self.recipe, summarizer=self.summarizer, tools=self.tools, **self.kwargs
        )
        self.summarizer_requests += sum(t.requests for t in ticks)
        if ticks or len(store.events()) > events:
            self.compactions += 1
        return compiled.request


class _Gated:
    """What the two baselines share: the recipe's target and gating a list of messages."""

    def __init__(self, recipe: Recipe, tools: Sequence[dict[str, Any]]) -> None:
        self.recipe = recipe
        assert recipe.budget_tokens is not None
        self.budget = recipe.budget_tokens
        self.format, self.model = resolve_target(recipe)
        self.settings = live_image_settings(recipe)
        self.tools = normalize_tools(tools)
        self.summarizer_requests = 0
        self.compactions = 0
        self.note = ""

    def _gate(
        self,
        store: HistoryStore,
        messages: list[tuple[str, tuple[Block, ...]]],
        hints: list[int | None],
        cut: int,
    ) -> GatedRequest:
        """Gate ``messages`` (the stored ones from seq ``cut`` on, raw or masked, after any summary
        or marker): the system text holds the pinned messages before ``cut`` only, as compile's
        does, since a pinned message from ``cut`` on is among ``messages`` (shown once, not twice)."""
        system, _pinned = _system_text(store, cut)
        request = OutboundRequest("live", system, tuple(messages), tuple(hints), self.tools)
        return gate(
            request,
            self.settings,
            format=self.format,
            model=self.model,
            encoding=self.recipe.encoding,
            budget=self.budget,
        )


class _CompactAtLimit(_Gated):
    """Append raw until over budget, then summarize all but a short tail, and append again."""

    name = "compact-at-limit"

    def __init__(self, recipe: Recipe, summarizer: Summarizer, tools: Sequence[dict[str, Any]]) -> None:
        super().__init__(recipe, tools)
        self.summarizer = summarizer
        self.tail = max(1, int(self.budget * TAIL_SHARE))
        self.cut = 0
        self.cover: list[StoredSummary] = []

    def request(self, store: HistoryStore) -> GatedRequest:
        try:
            return self._build(store)
        except OverBudget as err:
            last = err
        compactor = Compactor(store, self.recipe, self.summarizer)
        self.compactions += 1
        for keep in (self.tail, 0):
            self.summarizer_requests += compactor.tick(keep_tail_tokens=keep, close_tail=True).requests
            self._reframe(store)
            try:
                return self._build(store)
            except OverBudget as err:
                last = err
        raise last

    def _reframe(self, store: HistoryStore) -> None:
        """Show the coarsest summaries of everything summarized, raw from there on."""
        self.cut = l1_frontier(store.summaries(level=1))
        cover: list[StoredSummary] = []
        position = 0
        while position < self.cut:
            best = store.coarsest_summary_at(position, self.cut)
            if best is None:
                raise InvariantViolation(f"coverage: no summary starts at seq {position} below {self.cut}")
            cover.append(best)
            position = best.end_seq
        self.cover = cover

    def _build(self, store: HistoryStore) -> GatedRequest:
        n = store.next_seq()
        messages: list[tuple[str, tuple[Block, ...]]] = []
        hints: list[int | None] = []
        if self.cover:
            intro: Block = {"type": "text", "text": SUMMARY_INTRO}
            messages.append(("user", (intro, *(summary_block(s) for s in self.cover))))
            hints.append(None)
        facts = store.facts(self.cut, n, encoding=self.recipe.encoding, dropped=self.format.dropped_block_types)
        for fact, message in zip(facts, store.messages(self.cut, n), strict=True):
            if message.role != "system":
                messages.append((message.role, message.content))
                hints.append(fact.text_tokens)
        return self._gate(store, messages, hints, self.cut)


class _Masking(_Gated):
    """Observation masking: old tool outputs as placeholders, then drop the oldest messages."""

    name = "masking"

    def __init__(self, recipe: Recipe, tools: Sequence[dict[str, Any]], keep_rounds: int = MASK_KEEP_ROUNDS) -> None:
        super().__init__(recipe, tools)
        self.keep_rounds = keep_rounds
        self.seen = 0
        # Non-system messages in order: (message, text tokens, image tokens as shown raw).
        self.messages: list[tuple[Message, int, int]] = []
        self.tool_names: dict[str, str] = {}
        self.rounds: list[tuple[str, ...]] = []  # tool_use ids of each tool round, oldest first
        self.masked: dict[int, tuple[tuple[Block, ...], int]] = {}  # index -> (blocks, text tokens)
        self.drop = 0  # messages dropped from the front (never shown again)

    def _read_new(self, store: HistoryStore) -> None:
        n = store.next_seq()
        facts = store.facts(self.seen, n, encoding=self.recipe.encoding, dropped=self.format.dropped_block_types)
        for fact, message in zip(facts, store.messages(self.seen, n), strict=True):
            if message.role == "system":
                continue
            images = sum(self.format.image_tokens(i.width, i.height, self.model) for i in fact.images)
            self.messages.append((message, fact.text_tokens, images))
            uses = [b for b in message.content if b.get("type") == "tool_use"]
            if message.role == "assistant" and uses:
                self.rounds.append(tuple(str(b.get("id")) for b in uses))
                self.tool_names.update((str(b.get("id")), str(b.get("name"))) for b in uses)
        self.seen = n

    def _placeholder(self, block: Block) -> Block:
        tool_id = str(block.get("tool_use_id"))
        text = tool_output_text(block)
        images = len(find_image_sites([block]))
        size = f"{len(text):,} characters, {count_text(text, self.recipe.encoding):,} tokens"
        if images:
            size += f", {images} image{'s' if images > 1 else ''}"
        note = (
            f"[tool output masked: the result of {self.tool_names.get(tool_id, 'an unknown tool')} "
            f"({size}) is older than the {self.keep_rounds} newest tool rounds and is not shown]"
        )
        masked = {k: v for k, v in block.items() if k != "content"}
        masked["content"] = note
        return masked

    def _mask(self, index: int, old: frozenset[str]) -> tuple[tuple[Block, ...], int, int]:
        """Return message ``index`` as shown: blocks, text tokens, image tokens."""
        message, text_tokens, image_tokens = self.messages[index]
        if index in self.masked:
            blocks, tokens = self.masked[index]
            return blocks, tokens, 0
        results = [b for b in message.content if b.get("type") == "tool_result"]
        if not results or not any(str(b.get("tool_use_id")) in old for b in results):
            return message.content, text_tokens, image_tokens
        blocks = tuple(
            self._placeholder(b)
            if b.get("type") == "tool_result" and str(b.get("tool_use_id")) in old
            else b
            for b in message.content
        )
        tokens = self.format.text_tokens(blocks, self.recipe.encoding)
        if not find_image_sites(blocks):
            self.masked[index] = (blocks, tokens)  # masking is final: the round only gets older
            return blocks, tokens, 0
        return blocks, tokens, image_tokens

    def _can_start(self, index: int) -> bool:
        """A shown window may start at an assistant message or at a user turn that answers no call."""
        message = self.messages[index][0]
        return message.role == "assistant" or not any(b.get("type") == "tool_result" for b in message.content)

    def request(self, store: HistoryStore) -> GatedRequest:
        self._read_new(store)
        old = frozenset(i for ids in self.rounds[: max(0, len(self.rounds) - self.keep_rounds)] for i in ids)
        masked, dropped = len(self.masked), self.drop
        # Dropped messages stay dropped; only the rest is masked (and counts as a compaction).
        hidden: tuple[tuple[Block, ...], int, int] = ((), 0, 0)
        shown = [self._mask(i, old) if i >= self.drop else hidden for i in range(len(self.messages))]
        try:
            return self._fit(store, shown)
        finally:
            if len(self.masked) > masked or self.drop > dropped:
                self.compactions += 1

    def _fit(self, store: HistoryStore, shown: list[tuple[tuple[Block, ...], int, int]]) -> GatedRequest:
        """Gate the shown messages, dropping the oldest while over budget."""
        while True:
            messages: list[tuple[str, tuple[Block, ...]]] = []
            hints: list[int | None] = []
            if self.drop:
                marker = (
                    f"[{self.drop} older messages were dropped to fit the budget of {self.budget:,} tokens; "
                    "they are not shown]"
                )
                messages.append(("user", ({"type": "text", "text": marker},)))
                hints.append(None)
            for index in range(self.drop, len(self.messages)):
                messages.append((self.messages[index][0].role, shown[index][0]))
                hints.append(shown[index][1])
            shown_from = self.messages[self.drop][0].seq if self.drop < len(self.messages) else None
            cut = store.next_seq() if shown_from is None else shown_from
            try:
                return self._gate(store, messages, hints, cut)
            except OverBudget as err:
                excess = err.needed - self.budget + 64  # 64: room for the marker
                start = self.drop
                while start < len(self.messages) - 1 and (excess > 0 or not self._can_start(start)):
                    excess -= shown[start][1] + shown[start][2]
                    start += 1
                if start == self.drop:
                    raise
                self.drop = start


def make_strategy(
    name: str, recipe: Recipe, summarizer: Summarizer, tools: Sequence[dict[str, Any]] = ()
) -> ReplayStrategy:
    """Return a fresh strategy ``name`` (one of :data:`STRATEGIES`) for one replay."""
    if name in ("events", "replan"):
        return _Pipeline(name, recipe, summarizer, tools)
    if name == "compact-at-limit":
        return _CompactAtLimit(recipe, summarizer, tools)
    if name == "masking":
        return _Masking(recipe, tools)
    raise KeyError(name)
