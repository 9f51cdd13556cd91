"""Benchmark: cold start, the first exact count in a fresh process and ``import compaction``.

Each measurement runs in a new interpreter (``sys.executable``), several times, with the byte
code cached (as an installed package has it); the table shows the median.  Columns: ``import`` (ms of ``import compaction``), ``first count`` (ms of the first
``count_text`` after it), ``added MB`` (peak resident memory after the first count minus the
resident memory before it, from ``resource.getrusage`` and ``/proc/self/statm``), and the same
first count by tiktoken (``tiktoken.get_encoding``, its rank file read from tiktoken's cache
when present, else from ours) as the reference of the same run.

Run ``pytest bench/bench_count_cold.py --benchmark-only -q -s``, or ``python
bench/bench_count_cold.py`` to print the table alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

RUNS = 5

_OURS = """
import json, os, resource, sys, time
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20
t0 = time.perf_counter()
import compaction
t1 = time.perf_counter()
from compaction.tokens.counting import count_text
before = rss()
t2 = time.perf_counter()
n = count_text("hello world, the first count of this process")
t3 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import": (t1 - t0) * 1e3, "first": (t3 - t2) * 1e3, "added": peak - before,
                  "tokens": n, "httpx": "httpx" in sys.modules, "tiktoken": "tiktoken" in sys.modules}))
"""

_TIKTOKEN = """
import json, os, resource, time
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20
t0 = time.perf_counter()
from compaction.tokens.encodings import get_encoding
t1 = time.perf_counter()
before = rss()
t2 = time.perf_counter()
n = len(get_encoding("o200k_base").encode_ordinary("hello world, the first count of this process"))
t3 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import": (t1 - t0) * 1e3, "first": (t3 - t2) * 1e3, "added": peak - before,
                  "tokens": n, "httpx": False, "tiktoken": True}))
"""


#: Byte code is cached as an installed package has it (outside the working tree), so an import
#: does not compile the sources again; PYTHONDONTWRITEBYTECODE, if set, would measure that.
_PYCACHE = Path(tempfile.gettempdir()) / "compaction-bench-pycache"


def measure(code: str, runs: int = RUNS) -> dict[str, float]:
    """Return the median of each figure over ``runs`` fresh interpreters running ``code``.

    One more run before them writes the byte code cache.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "COMPACTION_NO_EXTENSIONS")
    }
    env["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)
    rows = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
            ).stdout
        )
        for _ in range(runs + 1)
    ][1:]
    out = {key: statistics.median(float(row[key]) for row in rows) for key in ("import", "first", "added")}
    out.update({key: rows[0][key] for key in ("tokens", "httpx", "tiktoken")})
    return out


def table() -> str:
    ours = measure(_OURS)
    reference = measure(_TIKTOKEN)
    assert ours["tokens"] == reference["tokens"]
    lines = [f"{'':28} {'import ms':>10} {'first count ms':>15} {'added MB':>9}"]
    lines.append(
        f"{'compaction count_text':28} {ours['import']:10.0f} {ours['first']:15.0f} {ours['added']:9.1f}"
        f"   (after import: httpx loaded {ours['httpx']}, tiktoken loaded {ours['tiktoken']})"
    )
    lines.append(
        f"{'tiktoken encode_ordinary':28} {'':10} {reference['first']:15.0f} {reference['added']:9.1f}"
    )
    return "\n".join(lines)


@pytest.mark.benchmark(min_rounds=1)
def test_cold_start(benchmark) -> None:  # type: ignore[no-untyped-def]
    text = benchmark.pedantic(table, rounds=1, iterations=1)
    print("\n" + text)


if __name__ == "__main__":
    print(table())
