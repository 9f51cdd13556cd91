"""One fleet task: compress one conversation, as ``compaction compress`` does, in a worker.

:func:`compress_conversation` runs wherever the engine puts it (this process, a process
pool, a Dask worker on another host): it opens the target's store itself, takes the store's
compaction claim, compresses, and closes.  It is idempotent -- summaries are unique per
``(level, start_seq, end_seq)`` and a tick starts at the stored frontier -- so a task run
again after a worker died mid-way adds only what the dead one had not committed, and a
task run on a compressed store adds nothing.  Everything it needs is in its arguments
(plain, picklable values); it returns a :class:`ConversationResult` and does not raise for
a store that cannot be opened or compressed (that is the result's ``error``).

One exception to "a rerun adds nothing", the same as for ``compaction compress``: a chunk
the summarizer failed on is tried again by the next run, and after ``quarantine_after``
failing runs it gets an offline stand-in summary (see :mod:`compaction.compactor`).  A
fleet whose report shows no failures is complete: running it again stores nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import CompactionError
from ..recipe import Recipe
from .targets import FleetTarget

if TYPE_CHECKING:
    from ..store import HistoryStore

__all__ = ["ConversationResult", "FleetSettings", "compress_conversation"]


@dataclass(frozen=True)
class FleetSettings:
    """What every task of a fleet compresses with.

    Attributes:
        recipe: the settings (summarizer, chunk target, fan-out...); ``recipe.budget_tokens``
            set means "compress as much as a request of that many tokens needs" (as
            ``compaction compress --budget``).
        use_budget: compress to ``recipe.budget_tokens`` (True) or summarize every closed
            chunk and merge upward (False, as ``compaction compress`` without ``--budget``).
        keep_tail_tokens: without the budget, leave this many of the newest tokens raw.
    """

    recipe: Recipe
    use_budget: bool = False
    keep_tail_tokens: int = 0


@dataclass(frozen=True)
class ConversationResult:
    """What one task did to one conversation.

    Attributes:
        name: the conversation's id (:attr:`FleetTarget.name`).
        summaries_made: summaries this task stored (rows added, every level).
        failures: chunks left raw because the summarizer failed on them (see
            :class:`~compaction.compactor.TickReport`).
        seconds: the task's wall time in this worker (seconds).
        error: why the conversation could not be compressed at all (store missing or
            damaged, over budget...), or ``None``.
        request_tokens: with a budget, the tokens of the request that now fits.
        nothing_to_do: the conversation holds no message (an empty branch, made at message 0
            and not appended to yet): nothing was compressed, and it is not a failure.
    """

    name: str
    summaries_made: int
    failures: int
    seconds: float
    error: str | None = None
    request_tokens: int | None = None
    nothing_to_do: bool = False


def compress_conversation(target: FleetTarget, settings: FleetSettings) -> ConversationResult:
    """Compress the conversation ``target`` names; return what was done.

    Args:
        target: where the conversation's store lives (opened here, closed before return).
        settings: the recipe and mode every task of the fleet uses.

    Returns:
        A :class:`ConversationResult`; a library error (no store there, a damaged store,
        over budget) is its ``error``, so one bad conversation does not stop a fleet.

    Raises:
        Nothing from the library; an unexpected exception (a bug) propagates, so the
        engine can retry it and report it.
    """
    from ..compactor import Compactor
    from ..pipeline import caption_before_compile, compress_and_compile
    from ..store import compaction_claim, open_store
    from ..summarizers.factory import summarizer_from_recipe

    started = time.perf_counter()
    recipe = settings.recipe
    made = failures = 0
    tokens: int | None = None
    try:
        with open_store(
            target.location, create=False, encoding=recipe.encoding, conversation=target.conversation
        ) as store:
            if len(store) == 0:  # an empty branch: no history to compress or compile
                return ConversationResult(target.name, 0, 0, time.perf_counter() - started, nothing_to_do=True)
            with compaction_claim(store):
                before = len(store.summaries())
                try:
                    if settings.use_budget:
                        # compressing to fit a budget is not sending the request: a conversation
                        # that ends on the assistant's turn is compressed whatever its model's
                        # prefill policy (compaction.prefill)
                        compiled, reports = compress_and_compile(
                            store, recipe.replace(assistant_prefill="allow")
                        )
                        tokens = compiled.tokens
                    else:
                        summarizer = summarizer_from_recipe(recipe)
                        try:
                            if recipe.caption_images:
                                caption_before_compile(store, recipe, summarizer, limit=32)
                            reports = [
                                Compactor(store, recipe, summarizer).tick(
                                    keep_tail_tokens=settings.keep_tail_tokens
                                )
                            ]
                        finally:
                            summarizer.close()
                    failures = sum(report.failures for report in reports)
                finally:  # what was stored counts, even when the task then failed (over budget)
                    made = _summaries_since(store, before)
            store.check_location()
    except (CompactionError, OSError) as err:
        return ConversationResult(target.name, made, failures, time.perf_counter() - started, error=str(err))
    return ConversationResult(
        target.name, made, failures, time.perf_counter() - started, request_tokens=tokens
    )


def _summaries_since(store: HistoryStore, before: int) -> int:
    """Return how many summaries ``store`` holds past ``before`` (0 when it cannot be read any more)."""
    try:
        return len(store.summaries()) - before
    except CompactionError:
        return 0
