"""``compaction replay``: the command, its table and its plot (a thin shell over :mod:`compaction.replay`).

The plot needs matplotlib, an optional dependency (``pip install 'compaction[plot]'``); it is
imported only when a plot is asked for, and drawn with the Agg canvas directly, so no
process-wide backend is set.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from .errors import CompactionError, InvalidTranscript
from .formats import FORMATS, ParsedTranscript, load_transcript
from .formats._shown import printable
from .model_windows import MAX_BUDGET_TOKENS
from .outputs import REQUEST_FORMATS
from .recipe import Recipe
from .replay import Progress, ReplayReport, replay
from .replay_strategies import STRATEGIES

__all__ = ["replay_command", "plot_replay", "print_replay_table", "MATPLOTLIB_MISSING"]

MATPLOTLIB_MISSING = (
    "install matplotlib to write --plot: pip install -e '.[plot]' in a clone of the repository,"
    " pip install 'compaction[plot]' otherwise"
)


def require_matplotlib() -> None:
    """Raise CompactionError (one line: how to install it) when matplotlib is not installed."""
    if importlib.util.find_spec("matplotlib") is None:
        raise CompactionError(MATPLOTLIB_MISSING)


def plot_replay(report: ReplayReport, path: str | Path) -> None:
    """Write a PNG of request tokens and cached tokens per turn, one line per strategy.

    Args:
        report: a :func:`~compaction.replay.replay` report.
        path: the PNG file to write.

    Raises:
        CompactionError: matplotlib is not installed.
        OSError: the file could not be written.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 7), layout="constrained")
    FigureCanvasAgg(figure)
    sent, cached = figure.subplots(2, 1, sharex=True)
    for result in report.strategies:
        turns = range(1, len(result.turns) + 1)
        sent.plot(turns, [t.tokens if t.fits else float("nan") for t in result.turns], label=result.name, lw=1.2)
        cached.plot(
            turns,
            [t.cached_tokens if t.fits else float("nan") for t in result.turns],
            label=f"{result.name} ({result.cached_share:.0%} cached)",
            lw=1.2,
        )
    sent.axhline(report.budget, color="grey", ls="--", lw=0.8, label=f"budget {report.budget:,}")
    sent.set_ylabel("request tokens")
    cached.set_ylabel("cached prefix tokens")
    cached.set_xlabel("turn")
    sent.legend(loc="upper left", fontsize="small")
    cached.legend(loc="upper left", fontsize="small")
    sent.set_title(f"{Path(report.source).name}: {report.turns} turns, budget {report.budget:,} ({report.request_format})")
    figure.savefig(path, format="png", dpi=110)


def print_replay_table(report: ReplayReport) -> None:
    """Print the report as a rich table, one row per strategy, with notes below."""
    from rich.console import Console
    from rich.table import Table

    title = (
        f"compaction replay: {printable(str(report.source))} ({report.format or 'messages'}, {report.messages:,} messages, "
        f"{report.turns} turns, budget {report.budget:,}, {report.request_format} {report.model})"
    )
    table = Table(title=title)
    table.add_column("strategy", no_wrap=True)
    for name in ("compaction events", "cached share", "largest request", "over budget", "p50 ms", "p99 ms"):
        table.add_column(name, justify="right")
    for price in report.prices:
        table.add_column(f"{price.model} $\ncached / uncached", justify="right", no_wrap=True)
    for result in report.strategies:
        row = [
            result.name,
            str(result.prefix_changes),
            f"{result.cached_share:.3f}",
            f"{result.largest_request:,}",
            str(result.over_budget_turns) if result.over_budget_turns else "none",
            f"{result.compile_ms(0.5):.1f}",
            f"{result.compile_ms(0.99):.1f}",
        ]
        for price in report.prices:
            cached, uncached = result.cost(price)
            row.append(f"{cached:.3f} / {uncached:.3f}")
        table.add_row(*row)
    console = Console() if sys.stdout.isatty() else Console(width=160)  # a pipe gets the whole table
    console.print(table)
    names = [r.name for r in report.strategies]
    if "events" in names and "replan" in names and report.prices:
        events, replan = report.strategy("events"), report.strategy("replan")
        price = report.prices[0]
        ratio = events.cost(price)[0] / (replan.cost(price)[0] or 1.0)
        console.print(
            f"events vs replan: cached share {events.cached_share:.3f} vs {replan.cached_share:.3f}; "
            f"{price.model} cost x{ratio:.2f}"
        )
    for result in report.strategies:
        if result.note:
            console.print(f"note ({result.name}): {result.note}")
    console.print(
        "costs: input tokens only, at list prices with prompt caching (compaction/replay_prices.py names "
        "the pages), counted in our encoding"
    )


def _model_name(context: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Check ``--model`` as run and compile do: an empty or blank name is a usage error naming the
    option (exit 2), not a recipe error blaming ``<replace>`` (:func:`compaction.cli._model_name`)."""
    from .cli import _model_name as check  # lazily: cli imports this module

    return check(context, param, value)


def _replay_parsed(
    transcript: str,
    parsed: ParsedTranscript,
    recipe: Recipe,
    strategies: Sequence[str],
    tools: Sequence[dict[str, Any]],
    max_turns: int | None,
    progress: Progress | None,
) -> ReplayReport:
    """Replay the messages of ``parsed`` (read from ``transcript``) and name the file in the report.

    Raises:
        InvalidTranscript: the messages hold no turn to replay (naming ``transcript``).
        OverBudget, RecipeError: as :func:`~compaction.replay.replay` raises them.
    """
    try:
        report = replay(
            parsed.messages,
            recipe,
            strategies=strategies,
            tools=tools,
            max_turns=max_turns,
            progress=progress,
        )
    except InvalidTranscript as err:
        if err.path is not None:
            raise
        raise InvalidTranscript(str(err), path=transcript) from err
    return dataclasses.replace(report, source=transcript, format=parsed.format)


@click.command("replay")
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False))
@click.option("--budget", type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS), help="Token budget of every request (or budget_tokens in the recipe).")
@click.option("--recipe", "recipe_path", type=click.Path(dir_okay=False), help="Recipe (TOML) with the settings.")
@click.option("--to", "output_format", type=click.Choice(list(REQUEST_FORMATS)), help="Request format (default openai).")
@click.option("--model", callback=_model_name, help="Model named in the requests (also selects image pricing).")
@click.option(
    "--strategy",
    "strategies",
    multiple=True,
    type=click.Choice(STRATEGIES),
    help="Replay only this strategy (repeat for several; default: all).",
)
@click.option("--max-turns", type=click.IntRange(min=1), help="Replay only the first N assistant turns.")
@click.option("--format", "input_format", type=click.Choice(FORMATS), help="Transcript format (default: detected).")
@click.option("--lenient", is_flag=True, help="Skip malformed lines or messages.")
@click.option(
    "--tools",
    "tools_path",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON array of tool definitions offered in every request (they count against the budget).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (per-turn figures included).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a PNG of tokens per turn (needs matplotlib).")
def replay_command(
    transcript: str,
    budget: int | None,
    recipe_path: str | None,
    output_format: str | None,
    model: str | None,
    strategies: tuple[str, ...],
    max_turns: int | None,
    input_format: str | None,
    lenient: bool,
    tools_path: str | None,
    as_json: bool,
    plot_path: str | None,
) -> None:
    """Replay TRANSCRIPT turn by turn as an agent calls the engine, and compare strategies.

    Before each assistant message the messages before it are appended and each strategy
    builds the request: events (compaction in events), replan (re-plan every call),
    compact-at-limit (summarize all but a short tail when full, as Claude Code and pi do) and
    masking (old tool outputs as placeholders, then drop the oldest).  Reports compaction
    events, the share of request tokens in the cached prefix, cache-adjusted input cost,
    the largest request and per-turn time.
    """
    from .cli import _echo_skipped, _errors, _load_tools, _progress, _recipe, _require_budget

    data: dict[str, Any]
    with _errors():
        recipe = _require_budget(_recipe(recipe_path, budget_tokens=budget, output_format=output_format, model=model))
        if plot_path:
            require_matplotlib()
            folder = Path(plot_path).resolve().parent
            if not folder.is_dir():
                raise CompactionError(f"{plot_path}: cannot write the plot there: the folder {folder} does not exist")
        tools = _load_tools(tools_path)
        # parsed here, once, so that what a lenient parse skipped can be listed as run lists it
        parsed = load_transcript(transcript, format=input_format, lenient=lenient)
        with _progress("replaying") as progress:
            report = _replay_parsed(
                transcript, parsed, recipe, strategies or STRATEGIES, tools, max_turns, progress
            )
        if plot_path:
            plot_replay(report, plot_path)
        data = report.to_dict()
    if plot_path:
        data["plot"] = plot_path
    if as_json:
        click.echo(json.dumps({**data, "skipped": parsed.skipped, "problems": parsed.problems}))
        return
    print_replay_table(report)
    _echo_skipped(parsed.skipped, parsed.problems, "replay")
    if all(not t.fits for result in report.strategies for t in result.turns):
        click.echo(f"warning: no request of any strategy fit the budget of {report.budget:,} tokens; raise --budget", err=True)
    if plot_path:
        click.echo(f"wrote {printable(str(plot_path))}")
