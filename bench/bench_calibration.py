"""Benchmark: the calibration fit compile asks for on every turn, on a store of many usage records.

Each answered request adds a usage record, so a long-lived proxy store holds many; compile
asks for the target model's correction on every call (``compaction.calibration.correction_for``).
It keeps the fit per store object and model until a new record of the model arrives (one index
probe for the newest record id), so a turn without one reads no records: that is the benchmark.
In the same run: a fit that reads the newest ``WINDOW`` (500) records (what every turn paid
before the fit was kept, and what a turn after a new record pays), and reading every record of
the model.  Stores: SQLite files of 10k and 100k records over 4 models.

Run ``pytest bench/bench_calibration.py --benchmark-only -q -s``: it prints, per store size,
the median per-turn time (kept fit), the refit's and the full read's, in ms.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import pytest

from compaction.calibration import WINDOW, correction_for, fit_correction
from compaction.store import SQLiteStore

MODELS = ("claude-sonnet-4-5", "claude-opus-4-1", "gemini-2.5-pro", "gpt-4o")
ROWS: list[str] = []


def _store(path: Path, records: int) -> SQLiteStore:
    store = SQLiteStore(path)
    rng = random.Random(records)
    store._db.execute("BEGIN")
    for i in range(records):
        compiled = rng.randint(500, 60_000)
        store._db.execute(
            "INSERT INTO usage_records (conversation_id, created_at, model, request_format, compiled_tokens,"
            " input_tokens, source) VALUES (1, ?, ?, 'anthropic', ?, ?, 'proxy')",
            (float(i), MODELS[i % len(MODELS)], compiled, int(compiled * rng.uniform(1.1, 1.3))),
        )
    store._db.execute("COMMIT")
    return store


def _refit(store: SQLiteStore, model: str) -> object:
    """Fit from the newest WINDOW records, as every turn did before the fit was kept."""
    records = [r for r in store.usage_records(model, WINDOW) if r.ratio is not None]
    return fit_correction([r.ratio for r in records if r.ratio is not None], model=model, newest_id=records[-1].id)


def _median_ms(call: object, repeat: int = 15) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@pytest.mark.parametrize("records", [10_000, 100_000])
def test_fit_on_a_store_of_many_records(
    benchmark: pytest.FixtureRequest, tmp_path: Path, records: int
) -> None:
    store = _store(tmp_path / "s.sqlite", records)
    try:
        fit = benchmark(correction_for, store, MODELS[0])
        assert fit is not None and fit.samples == 500 and 1.1 <= fit.factor <= 1.3
        assert _refit(store, MODELS[0]) == fit
        kept = min(_median_ms(lambda: correction_for(store, MODELS[0]), 200) for _ in range(3))
        refit = min(_median_ms(lambda: _refit(store, MODELS[0])) for _ in range(3))
        everything = _median_ms(lambda: store.usage_records(MODELS[0]))
        ROWS.append(
            f"{records:>8,} records: per turn (kept fit) {kept:6.3f} ms, refit (newest 500) {refit:6.2f} ms"
            f" ({refit / kept:5.0f}x), reading every record of the model {everything:7.2f} ms"
        )
    finally:
        store.close()


def teardown_module() -> None:
    print()
    for row in ROWS:
        print(row)
