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
from .compile import CompiledRequest, Shortfall, plan_compile, raw_history_tokens
from .errors import ImageError, InvalidArgument, OverBudget, found
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
        ImageError: an image the store cannot decode (names the file and the message).
        InvalidArgument: an argument of the wrong type.
        StoreError: the store refused the write (a full disk, a read-only file...).
    """
    if not isinstance(store, HistoryStore):
        raise InvalidArgument(f"store must be a history store (e.g. compaction.Store(path)); found {found(store)}")
    if not isinstance(path, (str, Path)):
        raise InvalidArgument(f"the transcript path must be a str or a Path; found {found(path)}")
    if format is not None and not isinstance(format, str):
        raise InvalidArgument(f"format must be a transcript format's name or None; found {found(format)}")
    if not isinstance(lenient, bool):
        raise InvalidArgument(f"lenient must be True or False; found {found(lenient)}")
    parsed = load_transcript(path, format=format, lenient=lenient)
    try:
        added = store.append(parsed.messages, chain_seed=parsed.format)
    except ImageError as err:
        raise ImageError(f"{path}: {err}") from err
    return parsed, added


_NO_STORE = object()


def _check_call(store: object, recipe: object, summarizer: object, tools: object) -> None:
    """Refuse arguments of the wrong type with one clear :class:`InvalidArgument` (``_NO_STORE``: none to check)."""
    if store is not _NO_STORE and not isinstance(store, HistoryStore):
        raise InvalidArgument(f"store must be a history store (e.g. compaction.Store(path)); found {found(store)}")
    if not isinstance(recipe, Recipe):
        raise InvalidArgument(f"recipe must be a compaction.Recipe (or load_recipe(path)); found {found(recipe)}")
    if summarizer is not None and not callable(getattr(summarizer, "summarize", None)):
        raise InvalidArgument(f"summarizer must have a summarize() method (or be None); found {found(summarizer)}")
    if isinstance(tools, (str, bytes, dict)) or not isinstance(tools, Sequence):
        raise InvalidArgument(f"tools must be a list of tool definitions (dicts); found {found(tools)}")


def _plural(count: int, what: str) -> str:
    return f"{count} {what}" if count == 1 else f"{count} {what}s"


def _still_over(short: Shortfall, ticks: Sequence[TickReport], failures: Sequence[dict[str, Any]]) -> OverBudget:
    """Return the :class:`OverBudget` for a request that still does not fit after compressing.

    The compile's own message ends "Nothing was changed", which is not true once summaries
    were added; this says what compression did (summaries added and kept, chunks that could
    not be summarized and why) before the advice.
    """
    what, _sep, _advice = short.message.partition(" Nothing was changed;")
    l1 = sum(t.l1_added for t in ticks)
    merged = sum(sum(t.merged.values()) for t in ticks)
    done = []
    if l1 or merged:
        made = "1 summary" if l1 + merged == 1 else f"{l1 + merged} summaries"
        kinds = f"{l1} level-1" + (f", {merged} merged" if merged else "")
        done.append(f"compression added {made} ({kinds}) and kept {'it' if l1 + merged == 1 else 'them'} in the store")
    chunks = sorted({(f["level"], f["start_seq"], f["end_seq"]) for f in failures})
    if chunks:
        reasons = list(dict.fromkeys(str(f["reason"]) for f in failures))
        because = reasons[-1] + (f"; and {len(reasons) - 1} other reasons" if len(reasons) > 1 else "")
        done.append(f"{_plural(len(chunks), 'chunk')} could not be summarized ({because})")
    if not done:
        done.append("compression found nothing more to summarize")
    advice = "raise the budget"
    if chunks:
        advice = (
            "make the summarizer work (its failures are listed by `compaction stats`) and run it again, "
            "or raise the budget"
        )
    sentence = "; ".join(done)
    message = f"{what} {sentence[0].upper()}{sentence[1:]}; {advice}"
    return OverBudget(message, stage=short.stage, budget=short.budget, needed=short.needed)


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
        OverBudget: no budget, or even the parts that cannot shrink exceed it; after
            compressing, the message says what was added and kept, and names the
            summarizer's failure when chunks could not be summarized.
        InvalidArgument: an argument of the wrong type.
        StoreError: the store refused a write, or its file was deleted or replaced meanwhile.
    """
    _check_call(store, recipe, summarizer, tools)
    budget = _require_budget(recipe)
    ticks: list[TickReport] = []
    plan = plan_compile(store, recipe, tools=tools)
    if plan.compiled is not None:
        return plan.compiled, ticks
    assert plan.shortfall is not None
    last = plan.shortfall
    failed_before = len(store.failures())
    messages = store.next_seq()
    owned = summarizer is None
    chosen = summarizer or summarizer_from_recipe(recipe)
    try:
        compactor = Compactor(store, recipe, chosen)
        for keep in (budget // 2, budget // 4, budget // 8, 0):
            report = compactor.tick(keep_tail_tokens=keep, close_tail=True, progress=progress)
            ticks.append(report)
            plan = plan_compile(store, recipe, tools=tools)
            if plan.compiled is not None:
                store.check_location()
                return plan.compiled, ticks
            assert plan.shortfall is not None
            short = plan.shortfall
            made = report.l1_added + sum(report.merged.values())
            grew, messages = store.next_seq() != messages, store.next_seq()
            if report.failures and not made:
                # The frontier stops at the chunk that failed: a smaller tail would only
                # send the same chunk again.
                last = short
                break
            if made and not grew and short.needed >= last.needed and short.stage == last.stage:
                # Progress guard: new summaries that do not shrink the request mean more of
                # the same cannot help; stop instead of summarizing on.  (Not when messages
                # were appended meanwhile: then the request grew for another reason.)
                err = _still_over(short, ticks, store.failures()[failed_before:])
                raise OverBudget(
                    f"compaction made no progress: {made} new summaries left the request at "
                    f"{short.needed} tokens (before: {last.needed}). {err}",
                    stage=short.stage,
                    budget=short.budget,
                    needed=short.needed,
                )
            last = short
        store.check_location()
        raise _still_over(last, ticks, store.failures()[failed_before:])
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
        InvalidArgument: an argument of the wrong type.
        StoreError: the store cannot be opened or written, or its file was deleted meanwhile.
    """
    started = time.perf_counter()
    _check_call(_NO_STORE, recipe, summarizer, tools)
    if not isinstance(transcript, (str, Path)):
        raise InvalidArgument(f"the transcript path must be a str or a Path; found {found(transcript)}")
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
        store.check_location()
        return RunResult(parsed, added, compiled, before, levels, ticks, time.perf_counter() - started)
    finally:
        store.close()
