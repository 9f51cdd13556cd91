"""Benchmark: the turn-by-turn replay on every shipped transcript at 32k and 128k budgets.

Run ``pytest bench/bench_replay.py --benchmark-only -q`` (about two minutes); after
pytest-benchmark's own table a summary prints, per budget and transcript:

* the share of request tokens in the cached prefix for each strategy (``events``,
  ``replan``, ``compact-at-limit``, ``masking``) and the prefix changes (compaction events);
* the cache-adjusted input cost at each default price (one model per provider), and the
  ratio of ``events`` to ``replan`` (cost and cached share);
* the issue 12 target on the sessions of 50 turns or more: ``events`` caches at least 0.90 of
  its request tokens at 32k, with no request over budget.

One round per case: a replay is deterministic apart from its timings, and the interesting
figures are the report's, not the wall time.  ``COMPACTION_BENCH_REPLAY=pi,aider`` limits the
transcripts to those whose file name contains one of the words.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compaction import InvalidTranscript, Recipe
from compaction.replay import ReplayReport, replay
from compaction.replay_prices import DEFAULT_PRICES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BUDGETS = (32_000, 128_000)
TARGET_SHARE = 0.90
TARGET_MIN_TURNS = 50
_ONLY = [w for w in os.environ.get("COMPACTION_BENCH_REPLAY", "").split(",") if w]
TRANSCRIPTS = sorted(
    p
    for p in EXAMPLES.rglob("*")
    if p.is_file() and p.name != "README.md" and (not _ONLY or any(w in p.name for w in _ONLY))
)

REPORTS: dict[tuple[int, str], ReplayReport] = {}


def _name(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


class _Summary:
    """A pytest plugin that prints the replay tables after the run."""

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001
        if not REPORTS:
            return
        write = terminalreporter.write_line
        for budget in BUDGETS:
            rows = sorted((name, report) for (b, name), report in REPORTS.items() if b == budget)
            if not rows:
                continue
            names = [s.name for s in rows[0][1].strategies]
            write("")
            write(f"replay at a budget of {budget:,} tokens: cached share / prefix changes per strategy")
            write(f"{'transcript':58s} {'turns':>5s} " + " ".join(f"{n:>17s}" for n in names))
            for name, report in rows:
                cells = " ".join(f"{s.cached_share:>10.3f} / {s.prefix_changes:<4d}" for s in report.strategies)
                write(f"{name[:58]:58s} {report.turns:>5d} {cells}")
            for price in DEFAULT_PRICES:
                write("")
                write(f"input cost at {price.model} prices (USD, with cache / without); events vs replan")
                write(f"{'transcript':58s} " + " ".join(f"{n:>17s}" for n in names) + f" {'ev/replan':>9s}")
                for name, report in rows:
                    costs = [s.cost(price) for s in report.strategies]
                    cells = " ".join(f"{c:>8.3f} /{u:>7.3f}" for c, u in costs)
                    write(f"{name[:58]:58s} {cells} {_ratio(report, price.model):>9s}")
            if budget == 32_000:
                write("")
                for name, report in rows:
                    if report.turns < TARGET_MIN_TURNS:
                        continue  # a short session's first, never cached, request weighs too much
                    events = report.strategy("events")
                    met = events.cached_share >= TARGET_SHARE and events.over_budget_turns == 0
                    write(
                        f"target (events cached share >= {TARGET_SHARE}, none over budget) {name}: "
                        f"{events.cached_share:.3f}, {events.over_budget_turns} over: {'ok' if met else 'MISSED'}"
                        + (f" ({events.note})" if events.note else "")
                    )


def _ratio(report: ReplayReport, model: str) -> str:
    price = next(p for p in report.prices if p.model == model)
    events, replan = report.strategy("events").cost(price)[0], report.strategy("replan").cost(price)[0]
    return f"x{events / replan:.2f}" if replan else "-"


@pytest.fixture(scope="module", autouse=True)
def _summary_table(request: pytest.FixtureRequest):
    plugin = _Summary()
    if not request.config.pluginmanager.has_plugin("bench-replay-summary"):
        request.config.pluginmanager.register(plugin, "bench-replay-summary")
    yield


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"{b // 1000}k")
@pytest.mark.parametrize("path", TRANSCRIPTS, ids=_name)
def test_replay(benchmark, path: Path, budget: int) -> None:
    recipe = Recipe(budget_tokens=budget)
    try:
        report = benchmark.pedantic(
            replay, args=(path, recipe), kwargs={"lenient": True}, rounds=1, iterations=1
        )
    except InvalidTranscript as err:  # a fixture with no assistant turn: nothing to replay, said so
        assert "turn" in str(err), err
        print(f"\n{_name(path)} at {budget:,}: not replayed ({err})")
        return
    for result in report.strategies:
        assert result.over_budget_turns == 0, (result.name, _name(path))
        assert 0.0 <= result.cached_share <= 1.0
    benchmark.extra_info.update(
        {s.name: {"cached_share": round(s.cached_share, 4), "prefix_changes": s.prefix_changes} for s in report.strategies}
    )
    REPORTS[(budget, _name(path))] = report
