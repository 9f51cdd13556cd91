"""Benchmark: fleet compaction of 200 conversations on 1 and 2 workers, the local engine and Dask.

The fleet is 200 SQLite stores in the proxy's layout (``DIR/conversations/<id>.sqlite``),
copies of the shipped transcripts of ``examples/`` taken in turn (every format: pi, aider,
OpenHands, SWE-agent, Agent TARS, Claude Code, Codex), imported once and cached under the
temporary directory (``compaction-bench-fleet-<key>``, keyed on the transcripts' bytes and the
store's schema) by a process of its own, so the sequential reference starts as cold as a
fresh worker (no token counts memoized by the import).  Each configuration compresses a fresh copy of it with the default recipe
and the offline extractive summarizer, as ``compaction fleet compress --store DIR`` does:

* ``local 1``: one task after another in this process -- the sequential reference;
* ``local 2``: a pool of 2 spawned worker processes;
* ``dask 1`` and ``dask 2``: a ``LocalCluster`` of 1 or 2 single-threaded worker processes.

Throughput is conversations per second over the whole run, engine start-up included (the
Dask cluster's start is part of what a user waits for), beside the sequential reference of
the same run; each configuration must store exactly the reference's summary count.
``task s`` is the tasks' own time summed (each measured inside its worker) and ``overlap``
that over the run's wall time: how many tasks ran at once on average (1.0 sequentially; up
to the worker count when the machine has a free core per worker).

Run ``pytest bench/bench_fleet.py --benchmark-only -q -s`` (about two minutes on 2 cores);
the table prints after pytest-benchmark's own.  ``COMPACTION_BENCH_FLEET_SIZE`` changes the
number of conversations (default 200).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compaction import Recipe
from compaction.fleet import FleetReport, FleetSettings, fleet_targets, run_fleet
from compaction.pipeline import import_transcript
from compaction.store import SCHEMA_VERSION, open_store

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SIZE = int(os.environ.get("COMPACTION_BENCH_FLEET_SIZE", "200"))
CONFIGS = [("local", 1), ("local", 2), ("dask", 1), ("dask", 2)]
RESULTS: dict[tuple[str, int], FleetReport] = {}


def _transcripts() -> list[Path]:
    files = [p for p in sorted(EXAMPLES.rglob("*")) if p.is_file() and p.name != "README.md"]
    assert len(files) >= 10, f"expected the shipped transcripts in {EXAMPLES}"
    return files


def _cache_key(files: list[Path]) -> str:
    digest = hashlib.sha256(f"{SIZE} {SCHEMA_VERSION}".encode())
    for path in files:
        digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def fleet_source() -> Path:
    """The 200 stores, imported once per cache key (a later run reuses them)."""
    files = _transcripts()
    cache = Path(tempfile.gettempdir()) / f"compaction-bench-fleet-{_cache_key(files)}"
    done = cache / "complete"
    if not done.exists():
        shutil.rmtree(cache, ignore_errors=True)
        (cache / "conversations").mkdir(parents=True)
        # In a process of its own, so this one starts the timed runs as cold as a fresh worker.
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pool.apply(_import_fleet, (str(cache), [str(f) for f in files], SIZE))
        done.write_text("ok\n")
    return cache


def _import_fleet(cache: str, files: list[str], size: int) -> None:
    """Import ``size`` stores into ``cache/conversations``, the shipped transcripts in turn."""
    for index in range(size):
        with open_store(Path(cache) / "conversations" / f"c{index:04d}.sqlite") as store:
            import_transcript(store, files[index % len(files)], lenient=True)


@pytest.fixture
def fleet_copy(fleet_source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(fleet_source, tmp_path / "fleet"))


class _Summary:
    """A pytest plugin that prints the fleet table after the run."""

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001
        reference = RESULTS.get(("local", 1))
        if not RESULTS or reference is None:
            return
        write = terminalreporter.write_line
        write("")
        write(
            f"fleet compress of {reference.conversations} conversations (copies of examples/), default recipe, "
            f"extractive summarizer, {os.cpu_count()} CPUs; conversations/s over the whole run, start-up included"
        )
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        write(
            f"load average at the end (1, 5, 15 min): {load} -- a loaded machine gives a second worker no core"
        )
        write(
            f"{'engine':8s} {'workers':>7s} {'seconds':>8s} {'conv/s':>8s} {'x sequential':>12s} "
            f"{'summaries':>10s} {'task s':>8s} {'overlap':>8s}"
        )
        base = reference.conversations / reference.seconds
        for (engine, workers), report in sorted(RESULTS.items()):
            rate = report.conversations / report.seconds
            busy = sum(r.seconds for r in report.results)  # the tasks' own wall time, summed
            write(
                f"{engine:8s} {workers:>7d} {report.seconds:>8.2f} {rate:>8.1f} {rate / base:>12.2f} "
                f"{report.summaries_made:>10,d} {busy:>8.1f} {busy / report.seconds:>8.2f}"
            )


@pytest.fixture(scope="module", autouse=True)
def _summary_table(request: pytest.FixtureRequest) -> Iterator[None]:
    if not request.config.pluginmanager.has_plugin("bench-fleet-summary"):
        request.config.pluginmanager.register(_Summary(), "bench-fleet-summary")
    yield


@pytest.mark.parametrize("engine,workers", CONFIGS, ids=[f"{e}-{w}" for e, w in CONFIGS])
def test_fleet_throughput(benchmark: Any, fleet_copy: Path, engine: str, workers: int) -> None:
    targets = fleet_targets(fleet_copy)
    assert len(targets) == SIZE
    settings = FleetSettings(Recipe())
    report = benchmark.pedantic(
        run_fleet,
        args=(targets, settings),
        kwargs={"engine": engine, "workers": workers},
        rounds=1,
        iterations=1,
    )
    assert report.failed_conversations == []
    RESULTS[(engine, workers)] = report
    reference = RESULTS.get(("local", 1))
    if reference is not None:  # the parametrization runs the reference first
        assert report.summaries_made == reference.summaries_made
    benchmark.extra_info.update(
        conversations_per_second=report.conversations / report.seconds, summaries=report.summaries_made
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "--benchmark-only", "-q", "-s"]))
