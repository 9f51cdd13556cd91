"""``compaction eval``: how much of what a later turn needs survives in the compiled request.

Probes are read from the raw history (:mod:`compaction.eval_probes` defines them and how
they are matched): the human asks, the files the agent read or wrote, the errors (resolved
later or not), the decisions and plans it stated, and the identifiers that recur.  Recall of
a kind is the share of its probes whose content appears in a request's text (every string
of the JSON body: raw messages, summaries, placeholders).

The engine's request (:func:`compaction.pipeline.compress_and_compile` in ``replan`` mode,
the largest window the budget allows, on a fresh in-memory store holding the whole
transcript, the recipe's summarizer: the offline extractive one by default) is scored beside baselines built in the same run on the same budget
(:mod:`compaction.eval_baselines`): drop-oldest truncation, observation masking alone, and
the summary the transcript's own agent wrote, where there is one.

Example:
    >>> from compaction import Recipe
    >>> report = evaluate("examples/pi__pi-mono__before-compaction.jsonl", Recipe(budget_tokens=16000))  # doctest: +SKIP
    >>> report.recall("engine", "asks")  # doctest: +SKIP
    Recall(found=21, total=44)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from .compile import require_budget
from .errors import InvalidTranscript
from .eval_baselines import BASELINES, Baseline, masking, own_summary, shown_note, truncation
from .eval_probes import PROBE_KINDS, Probe, ProbeKind, RequestText, extract_probes, word_counts
from .formats import FORMATS
from .formats._shown import printable
from .model_windows import MAX_BUDGET_TOKENS
from .outputs import REQUEST_FORMATS
from .pipeline import compress_and_compile, import_transcript
from .recipe import Recipe, load_recipe
from .store import Store
from .summarizers.base import Summarizer

__all__ = ["Recall", "StrategyResult", "EvalReport", "STRATEGIES", "evaluate", "mean_recall", "eval_command"]

#: The requests scored, in table order: the engine, then the baselines.
STRATEGIES = ("engine", *BASELINES)


@dataclass(frozen=True)
class Recall:
    """Probes found in a request, of those extracted (one kind)."""

    found: int
    total: int

    @property
    def ratio(self) -> float | None:
        """Return ``found / total``, or ``None`` when there are no probes of the kind."""
        return self.found / self.total if self.total else None

    def __str__(self) -> str:
        return f"{self.found / self.total:.2f} ({self.found}/{self.total})" if self.total else "–"


@dataclass(frozen=True)
class StrategyResult:
    """One scored request.

    Attributes:
        name: one of :data:`STRATEGIES`.
        tokens: the request's tokens by the gate's count, or ``None`` when there is no request.
        recall: per probe kind; empty when there is no request.
        found: for each probe (in :attr:`EvalReport.probes` order), whether it was found.
        note: what the request holds, or why there is none.
    """

    name: str
    tokens: int | None
    recall: dict[ProbeKind, Recall]
    found: tuple[bool, ...]
    note: str = ""

    @property
    def available(self) -> bool:
        return self.tokens is not None


@dataclass(frozen=True)
class EvalReport:
    """What :func:`evaluate` measured on one transcript.

    Attributes:
        transcript: the transcript's path.
        format: its format.
        messages: messages in the transcript.
        budget: the token budget every request was built for (tokens).
        request_format: ``"openai"`` or ``"anthropic"``.
        probes: every probe, grouped by kind.
        strategies: the engine and the baselines, in :data:`STRATEGIES` order.
        engine_seconds: wall time of the engine's compress and compile.
        seconds: wall time of the whole evaluation.
        skipped: malformed lines or messages a lenient parse skipped.
        problems: one ``"path:line: what is wrong"`` line per skipped item and per note beside
            them (:attr:`compaction.formats.ParsedTranscript.problems`).
    """

    transcript: str
    format: str
    messages: int
    budget: int
    request_format: str
    probes: tuple[Probe, ...]
    strategies: tuple[StrategyResult, ...]
    engine_seconds: float
    seconds: float
    skipped: int = 0
    problems: tuple[str, ...] = ()

    def strategy(self, name: str) -> StrategyResult:
        return next(s for s in self.strategies if s.name == name)

    def recall(self, strategy: str, kind: ProbeKind) -> Recall | None:
        """Return the recall of ``kind`` in ``strategy``'s request, ``None`` when it has none."""
        result = self.strategy(strategy)
        return result.recall[kind] if result.available else None

    @property
    def errors_resolved(self) -> int:
        return sum(1 for p in self.probes if p.kind == "errors" and p.resolved)

    @property
    def errors_unresolved(self) -> int:
        return sum(1 for p in self.probes if p.kind == "errors" and not p.resolved)

    def to_dict(self, probes: bool = False) -> dict[str, Any]:
        """Return the report as JSON-ready data; ``probes`` adds each probe and where it was found."""
        data: dict[str, Any] = {
            "transcript": self.transcript,
            "format": self.format,
            "messages": self.messages,
            "budget": self.budget,
            "request_format": self.request_format,
            "probes": {kind: sum(1 for p in self.probes if p.kind == kind) for kind in PROBE_KINDS},
            "errors_resolved": self.errors_resolved,
            "errors_unresolved": self.errors_unresolved,
            "strategies": {
                s.name: {
                    "available": s.available,
                    "tokens": s.tokens,
                    "note": s.note,
                    "recall": {
                        kind: {"found": r.found, "total": r.total, "ratio": r.ratio}
                        for kind, r in s.recall.items()
                    },
                }
                for s in self.strategies
            },
            "engine_seconds": round(self.engine_seconds, 3),
            "seconds": round(self.seconds, 3),
            "skipped": self.skipped,
            "problems": list(self.problems),
        }
        if probes:
            data["probe_list"] = [
                {**p.to_dict(), "found": {s.name: s.found[i] for s in self.strategies if s.available}}
                for i, p in enumerate(self.probes)
            ]
        return data


def _score(
    name: str, body: dict[str, Any] | None, tokens: int | None, probes: Sequence[Probe], note: str
) -> StrategyResult:
    if body is None:
        return StrategyResult(name, None, {}, (), note)
    text = RequestText(body)
    found = tuple(p.found(text) for p in probes)
    recall = {
        kind: Recall(
            sum(1 for p, hit in zip(probes, found, strict=True) if p.kind == kind and hit),
            sum(1 for p in probes if p.kind == kind),
        )
        for kind in PROBE_KINDS
    }
    return StrategyResult(name, tokens, recall, found, note)


def evaluate(
    path: str | Path,
    recipe: Recipe,
    *,
    format: str | None = None,
    lenient: bool = False,
    summarizer: Summarizer | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """Score the engine's compiled request and the baselines by probe recall on one transcript.

    Args:
        path: the transcript (any format :func:`compaction.formats.load_transcript` reads).
        recipe: settings; ``recipe.budget_tokens`` is required and every request is built
            for it, in ``recipe.output_format``.
        format: the transcript format; default: detected from the content.
        lenient: skip malformed lines of the transcript instead of failing.
        summarizer: the engine's summarizer; default: the one the recipe names.
        progress: called as ``progress(done, total)`` while the engine summarizes chunks.

    Returns:
        The :class:`EvalReport`: the probes, and per request its tokens and recall per kind.

    Raises:
        OverBudget: no budget, or the engine cannot fit the budget.
        InvalidTranscript, UnknownFormat: the transcript could not be read.
    """
    started = time.perf_counter()
    budget = require_budget(recipe.budget_tokens)
    # what the request keeps is measured on a transcript as it ends, usually on the agent's
    # answer, whatever the model's prefill policy (compaction.prefill)
    recipe = recipe.replace(assistant_prefill="allow")
    store = Store(":memory:", encoding=recipe.encoding)
    try:
        parsed, _added = import_transcript(store, path, format=format, lenient=lenient)
        if not parsed.messages:
            raise InvalidTranscript(f"{path}: the transcript holds no messages to evaluate")
        engine_started = time.perf_counter()
        compiled, _ticks = compress_and_compile(store, recipe, summarizer=summarizer, progress=progress, mode="replan")
        engine_seconds = time.perf_counter() - engine_started
        # the live window's messages other than system ones: every system message is shown,
        # and the note counts them apart, as the header and the baselines count them
        window = sum(m.role != "system" for m in store.messages(compiled.live_start, compiled.total_messages))
    finally:
        store.close()
    messages = parsed.messages
    probes = tuple(extract_probes(messages, word_counts(messages)))
    shown = len(compiled.summaries)
    results = [
        _score(
            "engine",
            compiled.request.body(),
            compiled.tokens,
            probes,
            f"{shown} summaries, {shown_note(window, messages, of_all=False)}",
        )
    ]
    baselines: list[Baseline] = [
        truncation(messages, recipe, budget),
        masking(messages, recipe, budget),
        own_summary(messages, recipe, budget),
    ]
    for baseline in baselines:
        request = baseline.request
        results.append(
            _score(
                baseline.name,
                request.body() if request else None,
                request.tokens if request else None,
                probes,
                baseline.note,
            )
        )
    return EvalReport(
        transcript=str(path),
        format=parsed.format,
        messages=len(messages),
        budget=budget,
        request_format=compiled.request.format,
        probes=probes,
        strategies=tuple(results),
        engine_seconds=engine_seconds,
        seconds=time.perf_counter() - started,
        skipped=parsed.skipped,
        problems=tuple(parsed.problems),
    )


def mean_recall(reports: Sequence[EvalReport]) -> dict[str, dict[ProbeKind, tuple[float, int] | None]]:
    """Return per strategy and kind the mean recall over the reports that have probes of the kind.

    Returns:
        ``{strategy: {kind: (mean ratio, transcripts averaged) or None}}``; a transcript counts
        for a strategy only where it has a request (an absent own summary is left out).
    """
    means: dict[str, dict[ProbeKind, tuple[float, int] | None]] = {}
    for name in STRATEGIES:
        row: dict[ProbeKind, tuple[float, int] | None] = {}
        for kind in PROBE_KINDS:
            ratios = [
                r for report in reports if (rec := report.recall(name, kind)) and (r := rec.ratio) is not None
            ]
            row[kind] = (sum(ratios) / len(ratios), len(ratios)) if ratios else None
        means[name] = row
    return means


# -- the command --------------------------------------------------------------------------


def _table(report: EvalReport) -> Any:
    from rich.table import Table

    title = f"{printable(str(report.transcript))} ({report.format}, {report.messages:,} messages, budget {report.budget:,})"
    table = Table(title=title, title_justify="left")
    table.add_column("probes")
    for s in report.strategies:
        header = f"{s.name}\n{s.tokens:,} tokens" if s.tokens is not None else f"{s.name}\n–"
        table.add_column(header, justify="right")
    for kind in PROBE_KINDS:
        cells = [str(s.recall[kind]) if s.available else "n/a" for s in report.strategies]
        table.add_row(kind, *cells)
    notes = [f"errors: {report.errors_resolved} resolved later, {report.errors_unresolved} not"]
    notes += [f"{s.name}: {s.note}" for s in report.strategies if s.note]
    table.caption = "; ".join(notes)
    table.caption_justify = "left"
    return table


def _mean_table(reports: Sequence[EvalReport]) -> Any:
    from rich.table import Table

    table = Table(title=f"mean recall over {len(reports)} transcripts", title_justify="left")
    table.add_column("probes")
    for name in STRATEGIES:
        table.add_column(name, justify="right")
    means = mean_recall(reports)
    for kind in PROBE_KINDS:
        cells = []
        for name in STRATEGIES:
            mean = means[name][kind]
            cells.append(f"{mean[0]:.2f} ({mean[1]})" if mean else "n/a")
        table.add_row(kind, *cells)
    table.caption = "(n): transcripts with probes of the kind and a request of that kind"
    table.caption_justify = "left"
    return table


def print_tables(reports: Sequence[EvalReport], console: Any = None) -> None:
    """Print one table per report and, for several, the mean (rich)."""
    from rich.console import Console

    console = console or Console()
    for report in reports:
        console.print(_table(report))
    if len(reports) > 1:
        console.print(_mean_table(reports))


@click.command("eval")
@click.argument("transcripts", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--budget",
    type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS),
    help="Token budget of every request (required here or in the recipe).",
)
@click.option(
    "--to", "output_format", type=click.Choice(list(REQUEST_FORMATS)), help="Request format (default openai)."
)
@click.option(
    "--recipe", "recipe_path", type=click.Path(dir_okay=False), help="Recipe (TOML) with the settings."
)
@click.option("--format", "input_format", type=click.Choice(FORMATS), help="Transcript format (default: detected).")
@click.option("--lenient", is_flag=True, help="Skip malformed lines or messages of the transcripts.")
@click.option(
    "--probes", "with_probes", is_flag=True, help="With --json: list every probe and where it was found."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one report per transcript and the mean.")
def eval_command(
    transcripts: tuple[str, ...],
    budget: int | None,
    output_format: str | None,
    recipe_path: str | None,
    input_format: str | None,
    lenient: bool,
    with_probes: bool,
    as_json: bool,
) -> None:
    """Measure what the compiled request keeps: probe recall against baselines.

    Probes are read from each TRANSCRIPT's raw history: the human asks, the files the agent
    read or wrote, its errors, decisions and plans, and recurring identifiers.  Recall is the
    share of each kind found in the request; the engine is scored beside drop-oldest
    truncation, observation masking alone and the agent's own summary (where the transcript
    holds one), all built on the same budget.
    """
    import json

    from .cli import _echo_skipped, _errors, _progress, _require_budget

    reports: list[EvalReport] = []
    with _errors():
        recipe = load_recipe(recipe_path) if recipe_path else Recipe()
        changes = {k: v for k, v in {"budget_tokens": budget, "output_format": output_format}.items() if v}
        recipe = _require_budget(recipe.replace(**changes) if changes else recipe)
    with _errors(), _progress("evaluating") as progress:
        for path in transcripts:
            reports.append(evaluate(path, recipe, format=input_format, lenient=lenient, progress=progress))
    if as_json:
        means = mean_recall(reports)
        mean = {
            name: {kind: ({"ratio": m[0], "transcripts": m[1]} if m else None) for kind, m in row.items()}
            for name, row in means.items()
        }
        click.echo(json.dumps({"reports": [r.to_dict(with_probes) for r in reports], "mean": mean}))
        return
    print_tables(reports)
    for report in reports:
        _echo_skipped(report.skipped, list(report.problems), "eval")
