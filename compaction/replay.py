"""Replay a transcript turn by turn as an agent calls the engine, and measure what a prompt cache serves.

An agent calls the engine before each model turn: it appends what is new, asks for the
request, sends it.  :func:`replay` does exactly that with a recorded transcript: for each
assistant message in order it appends to a fresh in-memory store the messages not yet
appended before it, asks a strategy (see :mod:`compaction.replay_strategies`) for the
request and records it; the assistant message itself is appended before the next turn.
Every strategy replays the same turns under the same budget in the same run.

**The cached prefix** of each request (the part a provider's prompt cache can serve because
the previous request began the same way) is measured message by message on the gated request;
:mod:`compaction.replay_prefix` defines it precisely and says how providers match prefixes.
A **prefix change** is a request whose common prefix does not cover all of the previous
request's messages: a compaction event, or a re-plan that moved the window.

Example:
    >>> report = replay("session.jsonl", Recipe(budget_tokens=32000))  # doctest: +SKIP
    >>> report.strategy("events").cached_share  # doctest: +SKIP
    0.95
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .blocks import Message
from .compile import require_budget
from .errors import InvalidArgument, InvalidTranscript, OverBudget, RecipeError
from .formats import load_transcript
from .outputs import request_format
from .recipe import Recipe
from .replay_prefix import PrefixMeter
from .replay_prices import DEFAULT_PRICES, CachePrice
from .replay_strategies import STRATEGIES, make_strategy
from .store import Store
from .summarizers.base import Summarizer
from .summarizers.factory import summarizer_from_recipe
from .wire import GatedRequest

__all__ = ["replay", "ReplayReport", "StrategyResult", "TurnRecord", "STRATEGIES"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TurnRecord:
    """One turn of one strategy.

    Attributes:
        messages: messages in the store when the request was made.
        tokens: the request's tokens (0 when it did not fit).
        cached_tokens: tokens of its prefix shared with the previous request (see the module).
        prefix_kept: the previous request's messages all open this one (False on the first turn).
        compacted: the strategy compacted on this turn (summarized, re-framed, masked or dropped).
        needed: when no request fit, the tokens the smallest one needed; else ``None``.
        seconds: wall time of the strategy's call, compaction included (seconds).
    """

    messages: int
    tokens: int
    cached_tokens: int
    prefix_kept: bool
    compacted: bool
    needed: int | None
    seconds: float

    @property
    def fits(self) -> bool:
        return self.needed is None


def _percentile(values: Sequence[float], q: float) -> float:
    """Return the nearest-rank ``q`` quantile of ``values`` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@dataclass(frozen=True)
class StrategyResult:
    """What one strategy did over the replay.

    Attributes:
        name: the strategy (one of :data:`STRATEGIES`).
        turns: one :class:`TurnRecord` per turn.
        budget: the token budget (tokens).
        store_events: compaction events the store recorded.
        summarizer_requests: requests sent to the summarizer.
        note: anything a reader must know (a fallback), or ``""``.
    """

    name: str
    turns: tuple[TurnRecord, ...]
    budget: int
    store_events: int
    summarizer_requests: int
    note: str = ""

    @property
    def request_tokens(self) -> int:
        """Return the tokens of all requests sent (tokens)."""
        return sum(t.tokens for t in self.turns)

    @property
    def cached_tokens(self) -> int:
        return sum(t.cached_tokens for t in self.turns)

    @property
    def cached_share(self) -> float:
        """Return the share of all request tokens that were in a cached prefix (0..1)."""
        total = self.request_tokens
        return self.cached_tokens / total if total else 0.0

    @property
    def prefix_changes(self) -> int:
        """Return how many requests changed the prefix (compaction events and re-plans)."""
        sent = [t for t in self.turns if t.fits]
        return sum(1 for t in sent[1:] if not t.prefix_kept)

    @property
    def compactions(self) -> int:
        """Return the turns on which the strategy compacted."""
        return sum(1 for t in self.turns if t.compacted)

    @property
    def largest_request(self) -> int:
        return max((t.tokens for t in self.turns), default=0)

    @property
    def over_budget_turns(self) -> int:
        """Return the turns for which no request fit the budget."""
        return sum(1 for t in self.turns if not t.fits or t.tokens > self.budget)

    def compile_ms(self, q: float) -> float:
        """Return the ``q`` quantile of the per-turn call time (milliseconds)."""
        return _percentile([t.seconds * 1000 for t in self.turns], q)

    def cost(self, price: CachePrice) -> tuple[float, float]:
        """Return (cache-adjusted, uncached) input cost of all requests at ``price`` (USD)."""
        cached = sum(price.turn_cost(t.tokens, t.cached_tokens).usd for t in self.turns if t.fits)
        return cached, sum(price.uncached_cost(t.tokens) for t in self.turns)

    def to_dict(self, prices: Sequence[CachePrice] = DEFAULT_PRICES) -> dict[str, Any]:
        costs = {}
        for price in prices:
            cached, uncached = self.cost(price)
            costs[price.model] = {"usd": round(cached, 6), "usd_without_cache": round(uncached, 6)}
        return {
            "turns": len(self.turns),
            "prefix_changes": self.prefix_changes,
            "compactions": self.compactions,
            "store_events": self.store_events,
            "request_tokens": self.request_tokens,
            "cached_tokens": self.cached_tokens,
            "cached_share": round(self.cached_share, 4),
            "largest_request": self.largest_request,
            "over_budget_turns": self.over_budget_turns,
            "compile_ms_p50": round(self.compile_ms(0.5), 3),
            "compile_ms_p99": round(self.compile_ms(0.99), 3),
            "summarizer_requests": self.summarizer_requests,
            "cost": costs,
            "note": self.note,
            "per_turn": {
                "messages": [t.messages for t in self.turns],
                "tokens": [t.tokens for t in self.turns],
                "cached_tokens": [t.cached_tokens for t in self.turns],
                "needed": [t.needed for t in self.turns],
            },
        }


@dataclass(frozen=True)
class ReplayReport:
    """The result of :func:`replay`: one :class:`StrategyResult` per strategy, same turns and budget.

    Attributes:
        source: the transcript path, or ``"<messages>"``.
        format: the transcript format, or ``None`` for messages given directly.
        messages: messages in the transcript.
        budget: the token budget (tokens).
        request_format: the request format the requests were rendered in.
        model: the model they name.
        strategies: results in the order asked.
        prices: the prices costs are reported at.
    """

    source: str
    format: str | None
    messages: int
    budget: int
    request_format: str
    model: str
    strategies: tuple[StrategyResult, ...]
    prices: tuple[CachePrice, ...] = DEFAULT_PRICES

    @property
    def turns(self) -> int:
        return len(self.strategies[0].turns) if self.strategies else 0

    def strategy(self, name: str) -> StrategyResult:
        """Return the result of strategy ``name`` (KeyError if it was not replayed)."""
        for result in self.strategies:
            if result.name == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (``compaction replay --json``)."""
        return {
            "transcript": self.source,
            "format": self.format,
            "messages": self.messages,
            "turns": self.turns,
            "budget": self.budget,
            "request_format": self.request_format,
            "model": self.model,
            "strategies": {s.name: s.to_dict(self.prices) for s in self.strategies},
            "prices": {
                p.model: {
                    "provider": p.provider,
                    "input_usd_per_mtok": p.input_usd,
                    "cache_read_usd_per_mtok": p.cache_read_usd,
                    "cache_write_usd_per_mtok": p.cache_write_usd,
                    "min_cached_tokens": p.min_cached_tokens,
                    "step_tokens": p.step_tokens,
                    "source": p.source,
                }
                for p in self.prices
            },
        }


def _messages_of(
    source: str | Path | Sequence[Message], format: str | None, lenient: bool
) -> tuple[str, str | None, list[Message]]:
    if isinstance(source, (str, Path)):
        parsed = load_transcript(source, format=format, lenient=lenient)
        return str(source), parsed.format, list(parsed.messages)
    messages = list(source)
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise InvalidArgument(
                f"replay() takes a transcript path or a sequence of Message; item {index} is "
                f"{type(message).__name__}"
            )
    return "<messages>", None, messages


def _strategy_names(strategies: Sequence[str]) -> list[str]:
    names = list(dict.fromkeys(strategies))
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown or not names:
        found = ", ".join(repr(n) for n in unknown) or "none"
        raise RecipeError(f"replay strategies: expected some of {', '.join(STRATEGIES)}; found {found}")
    return names


def replay(
    source: str | Path | Sequence[Message],
    recipe: Recipe,
    *,
    strategies: Sequence[str] = STRATEGIES,
    summarizer: Summarizer | None = None,
    tools: Sequence[dict[str, Any]] = (),
    format: str | None = None,
    lenient: bool = False,
    max_turns: int | None = None,
    prices: Sequence[CachePrice] = DEFAULT_PRICES,
    progress: Progress | None = None,
) -> ReplayReport:
    """Replay a transcript turn by turn with each strategy and report tokens, cache share, cost, time.

    Args:
        source: a transcript file (any format :func:`~compaction.formats.load_transcript`
            reads) or the messages themselves.
        recipe: settings; ``recipe.budget_tokens`` is required.  The request format and
            model are the recipe's.
        strategies: which of :data:`STRATEGIES` to compare (default: all, in that order).
        summarizer: default: the one the recipe names (offline extractive by default),
            shared by the strategies and closed at the end.
        tools: tool definitions offered in every request (they count against the budget).
        format, lenient: passed to :func:`~compaction.formats.load_transcript`.
        max_turns: replay only the first N turns.
        prices: the models whose cache prices the report costs requests at.
        progress: called as ``progress(done, total)`` in turns over all strategies.

    Returns:
        A :class:`ReplayReport`.  A turn is an assistant message with at least one message
        before it; each strategy has one :class:`TurnRecord` per turn.

    Raises:
        OverBudget: no budget (stage ``"settings"``).
        InvalidTranscript, UnknownFormat: the transcript could not be read, or it has no turn.
        RecipeError: an unknown strategy, or ``max_turns`` < 1.
    """
    budget = require_budget(recipe.budget_tokens)
    # a turn's history ends on the assistant's message when the agent wrote two in a row (its
    # text, then its calls): the replay measures every turn whatever the model's prefill policy
    # (compaction.prefill), as the agent sent that turn as one
    recipe = recipe.replace(assistant_prefill="allow")
    if max_turns is not None and max_turns < 1:
        raise RecipeError(f"max_turns must be >= 1; found {max_turns}")
    names = _strategy_names(strategies)
    name, transcript_format, messages = _messages_of(source, format, lenient)
    turn_at = [i for i, m in enumerate(messages) if m.role == "assistant" and i > 0][:max_turns]
    if not turn_at:
        raise InvalidTranscript(
            "no assistant message with a message before it: nothing to replay",
            path=name if transcript_format else None,
        )
    owned = summarizer is None
    chosen = summarizer or summarizer_from_recipe(recipe)
    results: list[StrategyResult] = []
    grand_total = len(turn_at) * len(names)
    try:
        for number, strategy_name in enumerate(names):
            offset = number * len(turn_at)

            def turn_done(k: int, offset: int = offset) -> None:
                if progress:
                    progress(offset + k, grand_total)

            results.append(_replay_one(strategy_name, messages, turn_at, recipe, chosen, tools, turn_done))
    finally:
        if owned:
            chosen.close()
    fmt = request_format(recipe.output_format)
    return ReplayReport(
        name,
        transcript_format,
        len(messages),
        budget,
        fmt.name,
        recipe.model or fmt.default_model,
        tuple(results),
        tuple(prices),
    )


def _replay_one(
    name: str,
    messages: Sequence[Message],
    turn_at: Sequence[int],
    recipe: Recipe,
    summarizer: Summarizer,
    tools: Sequence[dict[str, Any]],
    turn_done: Callable[[int], None],
) -> StrategyResult:
    """Replay all turns with one strategy on a fresh in-memory store."""
    assert recipe.budget_tokens is not None
    with Store(":memory:", encoding=recipe.encoding) as store:
        strategy = make_strategy(name, recipe, summarizer, tools)
        meter = PrefixMeter(recipe.encoding)
        appended = 0
        records: list[TurnRecord] = []
        for number, index in enumerate(turn_at):
            if index > appended:
                # One seed per batch: the store's import keys chain within one append only.
                store.append(messages[appended:index], chain_seed=f"replay@{appended}")
                appended = index
            compactions = strategy.compactions
            started = time.perf_counter()
            try:
                request: GatedRequest | None = strategy.request(store)
                needed = None
            except OverBudget as err:
                request, needed = None, err.needed
            seconds = time.perf_counter() - started
            compacted = strategy.compactions > compactions
            if request is None:
                records.append(TurnRecord(appended, 0, 0, False, compacted, needed, seconds))
            else:
                cached, kept = meter.measure(request)
                records.append(TurnRecord(appended, request.tokens, cached, kept, compacted, None, seconds))
            turn_done(number + 1)
        events = len(store.events())
    return StrategyResult(
        name, tuple(records), recipe.budget_tokens, events, strategy.summarizer_requests, strategy.note
    )
