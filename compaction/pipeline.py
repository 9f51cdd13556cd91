"""The main job in one call: import a transcript, compress, compile under a budget.

The CLI's ``compaction run`` is a thin shell over :func:`run_pipeline`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .compactor import Compactor, TickReport
from .compile import CompiledRequest, compile_request, raw_history_tokens
from .errors import OverBudget
from .formats import ParsedTranscript, load_transcript
from .recipe import Recipe
from .store import Store
from .summarizers.base import Summarizer
from .summarizers.factory import summarizer_from_recipe

__all__ = ["RunResult", "run_pipeline", "import_transcript"]

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


def import_transcript(store: Store, path: str | Path, *, format: str | None = None, lenient: bool = False) -> tuple[ParsedTranscript, int]:
    """Parse ``path`` and append its messages to ``store``; return (parsed, messages added).

    Re-importing the same transcript adds nothing (see :meth:`Store.append`).

    Raises:
        InvalidTranscript: a malformed line or message (unless ``lenient``).
        UnknownFormat: the format could not be detected and was not given.
    """
    parsed = load_transcript(path, format=format, lenient=lenient)
    added = store.append(parsed.messages, chain_seed=parsed.format)
    return parsed, added


def run_pipeline(
    transcript: str | Path,
    recipe: Recipe,
    *,
    store_path: str | Path = ":memory:",
    format: str | None = None,
    lenient: bool = False,
    summarizer: Summarizer | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Import ``transcript``, compress it and compile a request within ``recipe.budget_tokens``.

    Compression first leaves the newest half of the budget raw; if the request still does
    not fit, it summarizes more of the tail (a quarter, an eighth, then all but the newest
    message) before giving up.

    Raises:
        InvalidTranscript, UnknownFormat: the transcript could not be read.
        OverBudget: even the newest message with the coarsest summaries does not fit.
    """
    started = time.perf_counter()
    if recipe.budget_tokens is None:
        raise OverBudget("a token budget is required (--budget N)", stage="settings", budget=0, needed=0)
    budget = recipe.budget_tokens
    store = Store(store_path, encoding=recipe.encoding)
    try:
        parsed, added = import_transcript(store, transcript, format=format, lenient=lenient)
        compactor = Compactor(store, recipe, summarizer or summarizer_from_recipe(recipe))
        ticks: list[TickReport] = []
        last_error: OverBudget | None = None
        compiled: CompiledRequest | None = None
        for keep in (budget // 2, budget // 4, budget // 8, 0):
            ticks.append(compactor.tick(keep_tail_tokens=keep, close_tail=keep == 0, progress=progress))
            try:
                compiled = compile_request(store, recipe)
                break
            except OverBudget as err:
                last_error = err
        if compiled is None:
            assert last_error is not None
            raise last_error
        before = raw_history_tokens(store, recipe)
        levels: dict[int, int] = {}
        for summary in store.summaries():
            levels[summary.level] = levels.get(summary.level, 0) + 1
        return RunResult(parsed, added, compiled, before, levels, ticks, time.perf_counter() - started)
    finally:
        store.close()
