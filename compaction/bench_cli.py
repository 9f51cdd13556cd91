"""``compaction bench``: token counting throughput beside tiktoken, and compile latency (see :mod:`compaction.bench`)."""

from __future__ import annotations

import json

import click

__all__ = ["bench_command"]


@click.command("bench")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--transcript", "transcripts", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A transcript to measure on (repeatable; same as FILE arguments).")
@click.option("--encoding", type=click.Choice(["o200k_base", "cl100k_base"]), default="o200k_base", show_default=True)
@click.option("--budget", type=click.IntRange(min=1), default=16000, show_default=True,
              help="Budget the compile latency is measured at (tokens).")
@click.option("--max-mb", type=click.FloatRange(min=0.001), default=8.0, show_default=True,
              help="Count at most this many MB of text (bounds the run).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def bench_command(
    files: tuple[str, ...], transcripts: tuple[str, ...], encoding: str, budget: int, max_mb: float, as_json: bool
) -> None:
    """Measure token counting throughput (tiktoken, the exact fast path cold and warm, the estimator) and compile latency.

    Each method counts the same message texts of your transcripts (default: the shipped
    ones in examples/) in one process: MB/s, tokens/s, speed over tiktoken and the
    estimator's error against the exact total; then the largest transcript is compressed
    for --budget and its compile is timed (median of 5).
    """
    from .bench import run_bench
    from .cli import _errors

    with _errors():
        report = run_bench([*files, *transcripts], encoding=encoding, max_bytes=int(max_mb * 1e6), budget=budget)
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
    if report.compile_ms is not None:
        click.echo(
            f"compile at {report.compile_budget:,} tokens: {report.compile_ms:.1f} ms (median of 5) on "
            f"{report.compile_file}; compressing it first took {report.compress_s:.2f} s"
        )
