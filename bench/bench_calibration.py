"""Benchmark: the calibration fit compile reads on every turn, on a store of many usage records.

Each answered request adds a usage record, so a long-lived proxy store holds many; compile
fits the target model's correction on every call (``compaction.calibration.correction_for``),
which reads only the newest ``WINDOW`` (500) records through the ``(model, id)`` index.  The
reference in the same run is reading every record of the model (what a fit without the window
would read).  Stores: SQLite files of 10k and 100k records over 4 models.

Run ``pytest bench/bench_calibration.py --benchmark-only -q -s``: it prints, per store size,
the median fit time and the full read's, in ms.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import pytest

from compaction.calibration import correction_for
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
        windowed = _median_ms(lambda: correction_for(store, MODELS[0]))
        everything = _median_ms(lambda: store.usage_records(MODELS[0]))
        ROWS.append(
            f"{records:>8,} records: fit (newest 500) {windowed:7.2f} ms, reading every record of the model {everything:7.2f} ms"
        )
    finally:
        store.close()


def teardown_module() -> None:
    print()
    for row in ROWS:
        print(row)
