"""``compaction bench``: token counting throughput beside tiktoken, and compile latency (see :mod:`compaction.bench`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .formats._shown import printable
from .model_windows import MAX_BUDGET_TOKENS

__all__ = ["bench_command"]


def _shown(path: str | None) -> str:
    """Return ``path`` relative to the working directory when it is under it."""
    if path is None:
        return ""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def _check_methods(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from .bench import METHODS

    names = [m.strip() for m in value.split(",")]
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)} is not one of {', '.join(METHODS)}")
    return value


@click.command("bench")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--transcript", "transcripts", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A transcript to measure on (repeatable; same as FILE arguments).")
@click.option("--encoding", type=click.Choice(["o200k_base", "cl100k_base"]), default="o200k_base", show_default=True)
@click.option("--method", "methods", default="exact,fast,estimate", show_default=True, callback=_check_methods,
              help="Methods to run, comma-separated (tiktoken always runs, as the reference).")
@click.option("--budget", type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS), default=16000, show_default=True,
              help="Budget the compile latency is measured at (tokens).")
@click.option("--max-mb", type=click.FloatRange(min=0.001), default=8.0, show_default=True,
              help="Count at most this many MB of text (bounds the run).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write a PNG of throughput per method and corpus (needs matplotlib: compaction[plot]).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def bench_command(
    files: tuple[str, ...],
    transcripts: tuple[str, ...],
    encoding: str,
    methods: str,
    budget: int,
    max_mb: float,
    plot_path: str | None,
    as_json: bool,
) -> None:
    """Measure token counting throughput (tiktoken, exact, the fast path cold and warm, the estimator) and compile latency.

    Each method counts the same message texts of your transcripts (default: the shipped
    ones in examples/) in one process: MB/s, tokens/s, speed over tiktoken and the
    estimator's error against the exact total; then the time of one call on short strings
    (10 to 200 characters cut from the same texts, microseconds per call); then the largest
    transcript is compressed for --budget and its compile is timed (median of 5).
    """
    from .bench import plot_bench, run_bench
    from .cli import _errors

    with _errors():
        if plot_path:  # before the measurements, not after them
            from .replay_cli import require_matplotlib

            require_matplotlib()
        report = run_bench([*files, *transcripts], encoding=encoding, methods=methods,
                           max_bytes=int(max_mb * 1e6), budget=budget)
        if plot_path:
            plot_bench(report, plot_path)
    if as_json:
        click.echo(json.dumps(report.to_dict()))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report.texts:,} texts, {report.bytes / 1e6:.2f} MB, {len(report.files)} files ({encoding})")
    for column in ("method", "tokens", "MB/s", "tokens/s", "vs tiktoken", "error"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for m in report.methods:
        table.add_row(m.method, f"{m.tokens:,}", f"{m.mb_per_s:,.1f}", f"{m.tokens_per_s:,.0f}",
                      f"{m.speedup:.2f}x", f"{m.error:+.2%}")
    Console().print(table)
    if report.calls:
        calls = Table(title=f"one call per string: {report.calls[0].calls:,} strings of 10-200 characters "
                            f"({report.short_chars / report.calls[0].calls:.0f} on average)")
        for column in ("method", "tokens", "µs per call", "vs tiktoken"):
            calls.add_column(column, justify="left" if column == "method" else "right")
        for c in report.calls:
            calls.add_row(c.method, f"{c.tokens:,}", f"{c.us_per_call:.2f}", f"{c.speedup:.2f}x")
        Console().print(calls)
    if report.compile_ms is not None:
        click.echo(
            f"compile at {report.compile_budget:,} tokens: {report.compile_ms:.1f} ms (median of 5) on "
            f"{_shown(report.compile_file)}; compressing it first took {report.compress_s:.2f} s"
        )
    if plot_path:
        click.echo(f"wrote {printable(str(plot_path))}")
