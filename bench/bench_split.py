"""Benchmark: compacting one huge message (split into parts for the summarizer) by its size.

Issue 10 measured 149 / 240 / 596 / 1,999 MB peak for one message of 1 / 2 / 4 / 8 MB (the
splitter peeled one part per recursion level and kept every remainder alive).  This prints, per
size: the time of one ``Compactor.tick(close_tail=True)`` with ``Recipe()`` defaults and the
offline extractive summarizer, the peak of traced Python allocations (``tracemalloc``) and the
peak resident set size of a fresh process doing only that, each also as a multiple of the input.
Linear means the multiples stay flat as the size doubles.

Run ``python bench/bench_split.py`` for the table (each size in a fresh process), or
``pytest bench/bench_split.py --benchmark-only -q`` for the timings beside the other benchmarks.
``COMPACTION_BENCH_SPLIT_MB=1,2`` limits the sizes.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc

import pytest

from compaction import Compactor, Message, Recipe, Store
from compaction.tokens.counting import count_text

SIZES_MB = tuple(float(s) for s in os.environ.get("COMPACTION_BENCH_SPLIT_MB", "1,2,4,8").split(","))
LINE = "    result = compute_the_thing(argument_one, argument_two) + 12345  # explain\n"


def huge_store(megabytes: float) -> Store:
    """Return a ``:memory:`` store holding one user message of ``megabytes`` MB, a reply and a prompt."""
    text = LINE * int(megabytes * 1e6 / len(LINE))
    store = Store(":memory:")
    store.append(
        [
            Message("user", ({"type": "text", "text": text},)),
            Message("assistant", ({"type": "text", "text": "done"},)),
            Message("user", ({"type": "text", "text": "next"},)),
        ]
    )
    return store


def measure(megabytes: float) -> dict[str, float]:
    """Compact one message of ``megabytes`` MB twice: timed, then traced; return the figures."""
    count_text(LINE * 1000)  # load the encoding's tables first
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    store = huge_store(megabytes)
    started = time.perf_counter()
    report = Compactor(store, Recipe()).tick(close_tail=True)
    seconds = time.perf_counter() - started
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    store.close()
    store = huge_store(megabytes)
    tracemalloc.start()
    Compactor(store, Recipe()).tick(close_tail=True)
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    store.close()
    size = megabytes * 1e6
    return {
        "MB": megabytes,
        "seconds": seconds,
        "requests": report.requests,
        "traced_MB": traced / 1e6,
        "traced_x": traced / size,
        "rss_MB": rss_peak / 1e3,
        "rss_growth_MB": (rss_peak - rss_before) / 1e3,
    }


def table(rows: list[dict[str, float]]) -> str:
    lines = [f"{'size':>6} {'time':>8} {'requests':>8} {'traced peak':>16} {'RSS peak':>10} {'RSS growth':>11}"]
    for r in rows:
        lines.append(
            f"{r['MB']:>4.0f}MB {r['seconds']:>7.1f}s {r['requests']:>8.0f} "
            f"{r['traced_MB']:>8.0f} MB {r['traced_x']:>4.1f}x {r['rss_MB']:>7.0f} MB {r['rss_growth_MB']:>8.0f} MB"
        )
    return "\n".join(lines)


@pytest.mark.parametrize("megabytes", SIZES_MB, ids=lambda mb: f"{mb:g}MB")
def test_compact_one_huge_message(benchmark, megabytes: float) -> None:  # noqa: ANN001
    def fresh() -> tuple[tuple[Store], dict[str, object]]:
        return (huge_store(megabytes),), {}

    def run(store: Store) -> int:
        try:
            return Compactor(store, Recipe()).tick(close_tail=True).l1_added
        finally:
            store.close()

    assert benchmark.pedantic(run, setup=fresh, rounds=1) == 1


if __name__ == "__main__":
    if len(sys.argv) == 2:  # one size, in this fresh process
        print(json.dumps(measure(float(sys.argv[1]))))
        sys.exit(0)
    results = []
    for mb in SIZES_MB:
        out = subprocess.run([sys.executable, __file__, str(mb)], check=True, capture_output=True, text=True)
        results.append(json.loads(out.stdout))
    print("one message of N MB compacted with Recipe() (extractive summarizer)")
    print(table(results))
