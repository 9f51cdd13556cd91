"""The main job in one call: import a transcript, compress, compile under a budget.

The CLI's ``compaction run`` is a thin shell over :func:`run_pipeline`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .compactor import Compactor, TickReport
from .compile import CompiledRequest, plan_compile, raw_history_tokens
from .errors import OverBudget
from .formats import ParsedTranscript, load_transcript
from .recipe import Recipe
from .store import HistoryStore, Store
from .summarizers.base import Summarizer
from .summarizers.factory import summarizer_from_recipe

__all__ = ["RunResult", "run_pipeline", "import_transcript", "compress_and_compile"]

Progress = Callable[[int, int], None]


@dataclass
class RunResult:
    """What :func:`run_pipeline` did and produced.

    Attributes:
        transcript: the parsed transcript (format, skipped lines).
        added: messages added to the store by this run.
        compiled: the compiled request.
        tokens_before: the whole history rendered raw (tokens), images priced under the policy.
        summaries_per_level: level -> summaries in the store.
        ticks: one report per compression round.
        seconds: wall time of the run.
    """

    transcript: ParsedTranscript
    added: int
    compiled: CompiledRequest
    tokens_before: int
    summaries_per_level: dict[int, int]
    ticks: list[TickReport] = field(default_factory=list)
    seconds: float = 0.0


def import_transcript(
    store: HistoryStore, path: str | Path, *, format: str | None = None, lenient: bool = False
) -> tuple[ParsedTranscript, int]:
    """Parse ``path`` and append its messages to ``store``; return (parsed, messages added).

    Re-importing the same transcript adds nothing (see :meth:`Store.append`).

    Raises:
        InvalidTranscript: a malformed line or message (unless ``lenient``).
        UnknownFormat: the format could not be detected and was not given.
    """
    parsed = load_transcript(path, format=format, lenient=lenient)
    added = store.append(parsed.messages, chain_seed=parsed.format)
    return parsed, added


def _require_budget(recipe: Recipe) -> int:
    if recipe.budget_tokens is None:
        raise OverBudget(
            "a token budget is required (--budget N, or budget_tokens in the recipe)",
            stage="settings",
            budget=0,
            needed=0,
        )
    return recipe.budget_tokens


def compress_and_compile(
    store: HistoryStore,
    recipe: Recipe,
    *,
    summarizer: Summarizer | None = None,
    progress: Progress | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> tuple[CompiledRequest, list[TickReport]]:
    """Compress ``store`` as much as the budget needs, then compile; the call before each model turn.

    Compression first leaves the newest half of the budget raw (closing everything older
    into chunks, the last one possibly below the chunk target); while the request does not
    fit, it summarizes more of the tail (a quarter, an eighth, then everything but the
    user's newest prompt or an unanswered call).  Summaries already made are reused, so a
    call on a store that fits does no summarizer work.

    Args:
        store: the history (summaries are added to it; messages are never edited).
        recipe: settings; ``recipe.budget_tokens`` is required.
        summarizer: default: the one the recipe names (the offline extractive summarizer).
        progress: called as ``progress(done, total)`` while chunks are summarized.
        tools: tool definitions offered to the model (counted against the budget).

    Returns:
        The compiled request and one :class:`TickReport` per compression round.

    Raises:
        OverBudget: no budget, or even the parts that cannot shrink exceed it.
    """
    budget = _require_budget(recipe)
    ticks: list[TickReport] = []
    plan = plan_compile(store, recipe, tools=tools)
    if plan.compiled is not None:
        return plan.compiled, ticks
    assert plan.shortfall is not None
    last = plan.shortfall
    owned = summarizer is None
    chosen = summarizer or summarizer_from_recipe(recipe)
    try:
        compactor = Compactor(store, recipe, chosen)
        for keep in (budget // 2, budget // 4, budget // 8, 0):
            report = compactor.tick(keep_tail_tokens=keep, close_tail=True, progress=progress)
            ticks.append(report)
            plan = plan_compile(store, recipe, tools=tools)
            if plan.compiled is not None:
                return plan.compiled, ticks
            assert plan.shortfall is not None
            short = plan.shortfall
            made = report.l1_added + sum(report.merged.values())
            if made and short.needed >= last.needed and short.stage == last.stage:
                # Progress guard: new summaries that do not shrink the request mean more of
                # the same cannot help; stop instead of summarizing on.
                raise OverBudget(
                    f"compaction made no progress: {made} new summaries left the request at "
                    f"{short.needed} tokens (before: {last.needed}). {short.message}",
                    stage=short.stage,
                    budget=short.budget,
                    needed=short.needed,
                )
            last = short
        raise last.error()
    finally:
        if owned:
            chosen.close()


def run_pipeline(
    transcript: str | Path,
    recipe: Recipe,
    *,
    store_path: str | Path = ":memory:",
    format: str | None = None,
    lenient: bool = False,
    summarizer: Summarizer | None = None,
    progress: Progress | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> RunResult:
    """Import ``transcript``, then :func:`compress_and_compile` within ``recipe.budget_tokens``.

    Raises:
        InvalidTranscript, UnknownFormat: the transcript could not be read.
        OverBudget: no budget, or even the parts that cannot shrink exceed it.
    """
    started = time.perf_counter()
    _require_budget(recipe)
    store = Store(store_path, encoding=recipe.encoding)
    try:
        parsed, added = import_transcript(store, transcript, format=format, lenient=lenient)
        compiled, ticks = compress_and_compile(
            store, recipe, summarizer=summarizer, progress=progress, tools=tools
        )
        before = raw_history_tokens(store, recipe, tools=tools)
        levels: dict[int, int] = {}
        for summary in store.summaries():
            levels[summary.level] = levels.get(summary.level, 0) + 1
        return RunResult(parsed, added, compiled, before, levels, ticks, time.perf_counter() - started)
    finally:
        store.close()
