"""The main job in one call: import a transcript, compress, compile under a budget.

The CLI's ``compaction run`` is a thin shell over :func:`run_pipeline`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .calibration import Correction, calibrated_budget, correction_for
from .captions import CaptionReport, caption_live_images
from .compactor import Compactor, TickReport
from .compile import (
    CompiledRequest,
    check_compiled_prefill,
    check_prefill,
    raw_history_tokens,
    require_budget,
)
from .errors import ImageError, InvalidArgument, InvalidTranscript, OverBudget, RecipeError, found
from .events import compact_to, compile_in_events, low_water, still_over
from .formats import ParsedTranscript, load_transcript
from .recipe import Recipe
from .store import HistoryStore, open_store
from .summarizers.base import Summarizer
from .summarizers.factory import summarizer_from_recipe

__all__ = [
    "NothingReadable",
    "RunResult",
    "append_transcript",
    "budget_correction",
    "calibrated_over_budget",
    "caption_before_compile",
    "compress_and_compile",
    "import_transcript",
    "run_pipeline",
]

Progress = Callable[[int, int], None]


class NothingReadable(InvalidTranscript):
    """A lenient parse skipped every line or message of a transcript: nothing is left to compile.

    Attributes:
        skipped: the lines or messages skipped.
        problems: one ``"path:line: what is wrong"`` line per skipped item (and the notes beside
            them), as :attr:`~compaction.formats.ParsedTranscript.problems` holds them.
    """

    def __init__(self, path: str | Path, skipped: int, problems: Sequence[str]) -> None:
        plural = "s" if skipped != 1 else ""
        super().__init__(
            f"the file held no message that could be read ({skipped} line{plural} skipped)", path=str(path)
        )
        self.skipped = skipped
        self.problems = list(problems)

_log = logging.getLogger("compaction")
#: Caption notes already logged by this process (each is said once, not every turn).
_NOTED: set[str] = set()


def caption_before_compile(store: HistoryStore, recipe: Recipe, summarizer: Summarizer, *, limit: int = 4) -> CaptionReport:
    """Caption up to ``limit`` live images without a caption, when ``recipe.caption_images`` asks.

    A summarizer that cannot caption (the offline extractive one) makes no captions and
    logs one warning line on the ``compaction`` logger, once per process (without logging
    configured, Python prints it on stderr).  See :mod:`compaction.captions`.

    Returns:
        The :class:`~compaction.captions.CaptionReport`.

    Raises:
        StoreError: the store refused a write.
    """
    report = caption_live_images(store, recipe, summarizer, limit=limit)
    if report.note:
        _say_once(report.note)
    return report


def _say_once(note: str) -> None:
    """Log ``note`` as a warning on the ``compaction`` logger, once per process."""
    if note not in _NOTED:
        _NOTED.add(note)
        _log.warning("compaction: %s", note)


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
        calibration: the correction the budget was divided by (``None``: none applied).
        held: messages the store's conversation held before this run (``0``: a new one).
    """

    transcript: ParsedTranscript
    added: int
    compiled: CompiledRequest
    tokens_before: int
    summaries_per_level: dict[int, int]
    ticks: list[TickReport] = field(default_factory=list)
    seconds: float = 0.0
    calibration: Correction | None = None
    held: int = 0


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
    return parsed, append_transcript(store, path, parsed)


def append_transcript(store: HistoryStore, path: str | Path, parsed: ParsedTranscript) -> int:
    """Append the messages of ``parsed`` (read from ``path``) to ``store``; return how many were added.

    The second half of :func:`import_transcript`, for a caller that parsed the file already
    (``compaction import`` reads it first to find the conversation that holds it).

    Raises:
        ImageError: an image the store cannot decode (names the file and the message).
        StoreError: the store refused the write.
    """
    try:
        return store.append(parsed.messages, chain_seed=parsed.format)
    except ImageError as err:
        raise ImageError(f"{path}: {err}") from err


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


def budget_correction(store: HistoryStore, recipe: Recipe) -> Correction | None:
    """Return the calibration correction compile applies for ``recipe``'s target model (``None``: none).

    ``None`` when ``recipe.calibrate`` is off or the store has too few usage records of the
    model (see :mod:`compaction.calibration`).

    Raises:
        StoreError: the store could not be read.
    """
    return correction_for(store, recipe.target_model) if recipe.calibrate else None


def calibrated_over_budget(err: OverBudget, asked: int, correction: Correction) -> OverBudget:
    """Return ``err`` with a sentence saying its budget is ``asked`` divided by ``correction``.

    A user who asked for ``asked`` tokens would otherwise read a budget they never gave
    (``floor(asked / factor)``, :func:`~compaction.calibration.calibrated_budget`) with no
    word of where it came from.

    Args:
        err: the :class:`OverBudget` compile or compression raised at the calibrated budget.
        asked: the recipe's budget before calibration (tokens).
        correction: the correction the budget was divided by.

    Returns:
        An :class:`OverBudget` with the same stage, budget and needed tokens (the calibrated
        budget, in tokens), its message followed by the calibration sentence.
    """
    note = (
        f"The budget of {err.budget} tokens is the recipe's {asked} divided by {correction.model}'s calibration "
        f"correction {correction.factor:g} (the provider counted its requests {correction.factor:g} times what we "
        f"count, median of {correction.samples} usage records); calibrate = false compiles for {asked}."
    )
    return OverBudget(
        f"{str(err).rstrip('.')}. {note}", stage=err.stage, budget=err.budget, needed=err.needed
    )


def compress_and_compile(
    store: HistoryStore,
    recipe: Recipe,
    *,
    summarizer: Summarizer | None = None,
    progress: Progress | None = None,
    tools: Sequence[dict[str, Any]] = (),
    mode: Literal["events", "replan"] = "events",
) -> tuple[CompiledRequest, list[TickReport]]:
    """Compress ``store`` as much as the budget needs, then compile; the call before each model turn.

    ``mode="events"`` (the default) keeps the request's shape between compaction events:
    each call appends the new messages to the previous request (a prompt cache serves the
    rest), and when the request would exceed the budget one event summarizes what it needs
    and plans a request of ``low_water_ratio`` of the budget, recorded in the store (see
    :mod:`compaction.events`).  ``mode="replan"`` plans the largest live window that fits on
    every call.  Either way compression first leaves half the target raw, then a quarter, an
    eighth, then everything but the user's newest prompt or an unanswered call; summaries
    already made are reused, so a call on a store that fits does no summarizer work.
    With ``recipe.caption_images``, up to 4 live images without a caption are captioned
    first, newest first (:func:`caption_before_compile`).
    With ``recipe.calibrate`` (the default) and a correction fitted from the store's usage
    records of the target model (:func:`budget_correction`), the budget compiled for is
    ``floor(budget / correction)`` (``compiled.budget`` says it).

    Args:
        store: the history (summaries are added to it; messages are never edited).
        recipe: settings; ``recipe.budget_tokens`` is required.
        summarizer: default: the one the recipe names (the offline extractive summarizer).
        progress: called as ``progress(done, total)`` while chunks are summarized.
        tools: tool definitions offered to the model (counted against the budget).
        mode: ``"events"`` or ``"replan"`` (above).

    Returns:
        The compiled request and one :class:`TickReport` per compression round.

    Raises:
        OverBudget: no budget, or even the parts that cannot shrink exceed it; after
            compressing, the message says what was added and kept, and names the
            summarizer's failure when chunks could not be summarized; under a correction,
            its budget is the calibrated one and the message says so
            (:func:`calibrated_over_budget`).
        InvalidArgument: an argument of the wrong type.
        StoreError: the store refused a write, or its file was deleted or replaced meanwhile.
        AssistantPrefillRefused: the request ends on an assistant turn (the store's newest
            message is the assistant's, shown raw) that ``recipe.assistant_prefill`` refuses
            for the model; raised before any summarizer call when that message will ship raw
            (past every summary, within the budget), else on the compiled request
            (:mod:`compaction.prefill`).
    """
    _check_call(store, recipe, summarizer, tools)
    if store is None:
        raise InvalidArgument("store must be a history store (e.g. compaction.Store(path)); found None")
    if mode not in ("events", "replan"):
        raise InvalidArgument(f"mode must be 'events' or 'replan'; found {found(mode)}")
    budget = require_budget(recipe.budget_tokens)
    correction = budget_correction(store, recipe)
    effective = calibrated_budget(budget, correction, raise_budget=recipe.calibrate_raise_budget)
    asked = budget
    if effective != budget:  # the provider counts this model's requests differently: compile for what it counts
        recipe, budget = recipe.replace(budget_tokens=effective), effective
    # before any summarizer call (captions too): a refused request would waste them; a newest
    # message of more than half the compaction target may be summarized: the compiled request judges
    target = low_water(recipe, budget) if mode == "events" else budget
    check_prefill(store, recipe, raw_limit=target // 2)
    chosen: list[Summarizer] = []

    def make_summarizer() -> Summarizer:
        if not chosen:
            chosen.append(summarizer or summarizer_from_recipe(recipe))
        return chosen[0]

    try:
        if recipe.caption_images:  # captions first: this turn's placeholders and summaries show them
            try:
                captioner = make_summarizer()
            except RecipeError as err:  # said once; the turn goes on with plain placeholders
                _say_once(f"caption_images = true, but no summarizer could be built, so no captions are made: {err}")
            else:
                caption_before_compile(store, recipe, captioner)
        if mode == "events":
            compiled, ticks = compile_in_events(store, recipe, make_summarizer, progress=progress, tools=tools)
        else:
            plan, ticks, stalled = compact_to(
                store, recipe, budget, lambda: Compactor(store, recipe, make_summarizer()), progress=progress, tools=tools
            )
            if stalled is not None:
                raise stalled
            if plan.compiled is None:
                assert plan.shortfall is not None
                raise plan.shortfall.error() if not ticks else still_over(plan.shortfall, ticks, store)
            compiled = check_compiled_prefill(store, recipe, plan.compiled)
        store.check_location()
        return compiled, ticks
    except OverBudget as err:
        if correction is None or effective == asked:
            raise
        raise calibrated_over_budget(err, asked, correction) from err
    finally:
        if summarizer is None and chosen:
            chosen[0].close()


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
    mode: Literal["events", "replan"] = "replan",
    conversation: str | None = None,
) -> RunResult:
    """Import ``transcript``, then :func:`compress_and_compile` within ``recipe.budget_tokens``.

    One request is compiled, so the default ``mode`` is ``"replan"``: the largest live window
    the budget allows.  An agent that calls the engine turn after turn wants ``"events"``
    (:func:`compress_and_compile`'s default), which keeps the prompt-cache prefix.
    ``conversation`` names the conversation of the store to import into and compile (see
    :func:`~compaction.store.factory.open_store`; default: the store's only one).

    Raises:
        InvalidTranscript, UnknownFormat: the transcript could not be read.
        NothingReadable: ``lenient`` skipped every line of it (an :class:`InvalidTranscript`
            carrying what was skipped).
        OverBudget: no budget, or even the parts that cannot shrink exceed it.
        InvalidArgument: an argument of the wrong type.
        StoreError: the store cannot be opened or written, or its file was deleted meanwhile.
    """
    started = time.perf_counter()
    _check_call(_NO_STORE, recipe, summarizer, tools)
    if not isinstance(transcript, (str, Path)):
        raise InvalidArgument(f"the transcript path must be a str or a Path; found {found(transcript)}")
    require_budget(recipe.budget_tokens)
    store = open_store(store_path, encoding=recipe.encoding, conversation=conversation)
    try:
        held = store.next_seq()
        parsed, added = import_transcript(store, transcript, format=format, lenient=lenient)
        if not parsed.messages and parsed.skipped:
            raise NothingReadable(transcript, parsed.skipped, parsed.problems)
        correction = budget_correction(store, recipe)  # as compress_and_compile finds it, before its summarizer calls
        compiled, ticks = compress_and_compile(
            store, recipe, summarizer=summarizer, progress=progress, tools=tools, mode=mode
        )
        before = raw_history_tokens(store, recipe, tools=tools)
        levels: dict[int, int] = {}
        for summary in store.summaries():
            levels[summary.level] = levels.get(summary.level, 0) + 1
        store.check_location()
        applied = correction if compiled.budget != recipe.budget_tokens else None
        seconds = time.perf_counter() - started
        return RunResult(parsed, added, compiled, before, levels, ticks, seconds, applied, held)
    finally:
        store.close()
