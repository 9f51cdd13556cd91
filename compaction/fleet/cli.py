"""``compaction fleet compress``: compress every conversation of a fleet, on this machine or a Dask cluster."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..model_windows import MAX_BUDGET_TOKENS

__all__ = ["fleet_command"]


@click.group("fleet")
def fleet_command() -> None:
    """Work on many conversations at once (a directory of stores or a PostgreSQL database)."""


@fleet_command.command("compress")
@click.option(
    "--store",
    "location",
    required=True,
    help="A directory of SQLite stores (DIR/conversations/<id>.sqlite, as compaction serve --store-dir, "
    "or DIR/<id>.sqlite), one store file, or a PostgreSQL database postgresql://host/DATABASE (every store in it).",
)
@click.option(
    "--conversations",
    default="all",
    show_default=True,
    help="Which conversations: all, or a comma-separated list of ids (file stems or store names).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "dask"]),
    default="local",
    show_default=True,
    help="local: a process pool on this machine (sequential with --workers 1); dask: a dask.distributed cluster.",
)
@click.option(
    "--scheduler",
    help="With --engine dask: the address of a running Dask scheduler (tcp://host:8786) instead of a LocalCluster.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Worker processes (default: 1 for local, 2 for a Dask LocalCluster).",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS),
    help="Compress each conversation as much as a request of N tokens needs (as compaction compress --budget).",
)
@click.option(
    "--keep-tail-tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Without --budget: leave this many of each conversation's newest tokens unsummarized.",
)
@click.option(
    "--recipe", "recipe_path", type=click.Path(dir_okay=False), help="Recipe (TOML) with the settings."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print a JSON report (totals and one entry per conversation)."
)
def fleet_compress_command(
    location: str,
    conversations: str,
    engine: str,
    scheduler: str | None,
    workers: int | None,
    budget: int | None,
    keep_tail_tokens: int,
    recipe_path: str | None,
    as_json: bool,
) -> None:
    """Compress every conversation of a fleet, one task per conversation.

    Idempotent: a conversation already compressed gets nothing new, so a run that was cut
    short (a worker died, the machine went down) is finished by running it again.  The
    stored summaries are the same, byte for byte, whichever engine and worker count ran.
    """
    from ..cli import _errors, _progress, _recipe, _refuse_both
    from .engines import run_fleet
    from .targets import fleet_targets, select_targets
    from .task import FleetSettings

    if scheduler is not None and engine != "dask":
        raise click.UsageError("--scheduler needs --engine dask")
    _refuse_both(budget, "keep_tail_tokens")
    with _errors():
        recipe = _recipe(recipe_path, budget_tokens=budget)
        targets = select_targets(fleet_targets(location), conversations)
        settings = FleetSettings(recipe, use_budget=budget is not None, keep_tail_tokens=keep_tail_tokens)
        with _progress("compressing conversations") as progress:
            report = run_fleet(
                targets, settings, engine=engine, workers=workers, scheduler=scheduler, progress=progress
            )
    if as_json:
        click.echo(json.dumps(report.to_json()))
    else:
        _print_report(report, location)
    if report.failed_conversations:
        for result in report.failed_conversations:
            click.echo(f"compaction: {result.name}: {result.error}", err=True)
        sys.exit(1)


def _print_report(report: Any, location: str) -> None:
    """Print the fleet's totals as a table."""
    from ..cli import _print_table

    failed = len(report.failed_conversations)
    notes = [f"{failed} failed"] if failed else []
    if report.nothing_to_do:
        notes.append(f"{report.nothing_to_do} empty: nothing to do")
    rows = [
        ("engine", f"{report.engine}, {report.workers} worker{'s' if report.workers != 1 else ''}"),
        ("conversations", f"{report.conversations:,}" + (f" ({', '.join(notes)})" if notes else "")),
        ("summaries made", f"{report.summaries_made:,}"),
        ("failures (chunks left raw)", f"{report.failures:,}"),
        ("seconds", f"{report.seconds:.2f}"),
        (
            "conversations per second",
            f"{report.conversations / report.seconds:.1f}" if report.seconds else "-",
        ),
    ]
    _print_table(f"fleet compress: {_shown_location(location)}", rows)


def _shown_location(location: str) -> str:
    """Return ``location`` with a URL's password hidden."""
    from ..store.postgres import is_postgres_url, parse_store_url

    if not is_postgres_url(location):
        return location
    try:
        return parse_store_url(location)[2]
    except Exception:  # an unparsable URL was reported already; show nothing of it
        return "a PostgreSQL database"
