"""Benchmark: probe recall (``compaction eval``) on every shipped transcript at 16,000 tokens.

Run ``pytest bench/bench_eval.py --benchmark-only -q`` (a minute or so).  pytest-benchmark times
the engine's compress and compile of each transcript in ``examples/`` on a fresh in-memory
store (the offline extractive summarizer, ``Recipe()`` defaults); after its table, the recall
table of each transcript prints, the engine beside the references computed in the same run on
the same budget (drop-oldest truncation, observation masking alone, the agent's own summary),
and the mean over the transcripts: what ``compaction eval examples/... --budget 16000`` prints.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from compaction import Recipe, Store
from compaction.eval import EvalReport, evaluate, print_tables
from compaction.pipeline import compress_and_compile, import_transcript

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file() and p.name != "README.md")
BUDGET = 16_000

REPORTS: dict[str, EvalReport] = {}


class _Summary:
    """A pytest plugin that prints the recall tables after the run."""

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001
        if not REPORTS:
            return
        from rich.console import Console

        out = io.StringIO()
        print_tables([REPORTS[name] for name in sorted(REPORTS)], Console(file=out, width=110))
        terminalreporter.write_line("")
        terminalreporter.write_line(f"probe recall at a budget of {BUDGET:,} tokens (compaction eval)")
        for line in out.getvalue().splitlines():
            terminalreporter.write_line(line)


@pytest.fixture(scope="module", autouse=True)
def _summary_table(request: pytest.FixtureRequest):
    plugin = _Summary()
    if not request.config.pluginmanager.is_registered(plugin):
        request.config.pluginmanager.register(plugin, "bench-eval-summary")
    yield


@pytest.mark.parametrize("transcript", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_eval(benchmark, transcript: Path) -> None:
    recipe = Recipe(budget_tokens=BUDGET)
    shown = Path(os.path.relpath(transcript))  # the tables name it as the command line would
    report = evaluate(shown, recipe, lenient=True)
    REPORTS[str(shown)] = report

    def fresh() -> tuple[tuple[Store], dict]:
        store = Store(":memory:", encoding=recipe.encoding)
        import_transcript(store, transcript, lenient=True)
        return (store,), {}

    def engine(store: Store) -> int:
        try:
            return compress_and_compile(store, recipe, mode="replan")[0].tokens
        finally:
            store.close()

    tokens = benchmark.pedantic(engine, setup=fresh, rounds=3)
    assert tokens <= BUDGET
    engine_recall = report.strategy("engine").recall
    benchmark.extra_info.update(
        {kind: recall.ratio for kind, recall in engine_recall.items() if recall.ratio is not None}
    )
