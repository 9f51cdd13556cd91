"""Benchmark: the offline extractive summarizer's speed, in messages per second, on every shipped transcript.

Run ``pytest bench/bench_summarize.py --benchmark-only -q`` (under a minute).  For each
transcript in ``examples/`` one compaction tick (``Recipe()`` defaults, nothing kept raw)
records every request the summarizer gets -- the L1 requests of the chunks, split parts,
merges -- exactly as gated.  pytest-benchmark then times summarizing all of them again with
today's summarizer; the previous implementation (the module as it was at :data:`PREVIOUS`,
loaded from git into a temporary module in the same process) is timed the same way on the
requests of its own tick (the L1 requests are the same; its merges read its own records).  After the run a table prints, per transcript, messages per second (the
transcript's messages over the time to summarize every request made for it) of both, and the
total; the issue's floor is 500 messages per second.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compaction import Recipe, Store
from compaction.compactor import Compactor
from compaction.pipeline import import_transcript
from compaction.summarizers import ExtractiveSummarizer
from compaction.summarizers.base import SummaryResult
from compaction.types import SummaryKind
from compaction.wire import GatedRequest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file() and p.name != "README.md")
#: The commit whose extractive summarizer is the reference (the one before the sectioned rewrite).
PREVIOUS = "af566804fd7a405b02aad7c7f3fde1b97c064faf"
FLOOR = 500

RATES: dict[str, dict[str, float]] = {}  # transcript -> {"messages", "ours", "previous"}


def _previous_module() -> ModuleType | None:
    """Load the extractive summarizer of :data:`PREVIOUS` as a module of the package, or ``None``."""
    try:
        source = subprocess.run(
            ["git", "show", f"{PREVIOUS}:compaction/summarizers/extractive.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    # it read its headings from base.py, which now holds the new ones
    source = source.replace(
        "from .base import SUMMARY_HEADINGS, SummaryResult",
        "from .base import SummaryResult\nSUMMARY_HEADINGS = ('Asked', 'Done', 'Errors', 'Decisions', 'Open', 'Identifiers')",
    )
    name = "compaction.summarizers._previous_extractive"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "compaction.summarizers"
    sys.modules[name] = module
    exec(compile(source, f"{PREVIOUS[:8]}:extractive.py", "exec"), module.__dict__)  # noqa: S102
    return module


PREVIOUS_MODULE = _previous_module()


class _Recorder:
    """Summarize with the extractive summarizer and keep every request it is given."""

    name = "extractive"
    request_format = "openai"
    model = None
    max_output_tokens = None

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[tuple[GatedRequest, SummaryKind]] = []

    def summarize(self, request: GatedRequest, *, kind: SummaryKind) -> SummaryResult:
        self.requests.append((request, kind))
        return self.inner.summarize(request, kind=kind)

    def close(self) -> None:
        pass


def _requests(transcript: Path, summarizer: Any) -> tuple[int, list[tuple[GatedRequest, SummaryKind]]]:
    recorder = _Recorder(summarizer)
    with Store(":memory:") as store:
        parsed, _added = import_transcript(store, transcript, lenient=True)
        Compactor(store, Recipe(), recorder).tick(keep_tail_tokens=0, close_tail=True)  # type: ignore[arg-type]
    return len(parsed.messages), recorder.requests


def _summarize_all(summarizer: Any, requests: list[tuple[GatedRequest, SummaryKind]]) -> int:
    return sum(len(summarizer.summarize(r, kind=k).text) for r, k in requests)


class _Table:
    """A pytest plugin that prints messages per second after the run."""

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001
        if not RATES:
            return
        write = terminalreporter.write_line
        write("")
        write(f"offline summarizer speed, messages per second (floor {FLOOR}); previous = {PREVIOUS[:8]}")
        write(f"{'transcript':58} {'messages':>9} {'ours':>10} {'previous':>10}")
        total = {"messages": 0.0, "ours": 0.0, "previous": 0.0}
        for name, rate in sorted(RATES.items()):
            previous = (
                f"{rate['messages'] / rate['previous']:10,.0f}" if rate.get("previous") else f"{'n/a':>10}"
            )
            write(f"{name:58} {rate['messages']:9,.0f} {rate['messages'] / rate['ours']:10,.0f} {previous}")
            for key in total:
                total[key] += rate.get(key, 0.0)
        previous = f"{total['messages'] / total['previous']:10,.0f}" if total["previous"] else f"{'n/a':>10}"
        write(f"{'all':58} {total['messages']:9,.0f} {total['messages'] / total['ours']:10,.0f} {previous}")


@pytest.fixture(scope="module", autouse=True)
def _speed_table(request: pytest.FixtureRequest):
    plugin = _Table()
    if not request.config.pluginmanager.is_registered(plugin):
        request.config.pluginmanager.register(plugin, "bench-summarize-table")
    yield


@pytest.mark.parametrize("transcript", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_summarize(benchmark, transcript: Path) -> None:
    ours = ExtractiveSummarizer()
    messages, requests = _requests(transcript, ours)
    name = str(transcript.relative_to(ROOT / "examples"))
    benchmark.pedantic(_summarize_all, args=(ours, requests), rounds=3, iterations=1)
    rate = {"messages": float(messages), "ours": benchmark.stats.stats.min}
    if PREVIOUS_MODULE is not None:
        previous = PREVIOUS_MODULE.ExtractiveSummarizer()
        _messages, its_requests = _requests(transcript, previous)  # its merges read its own records
        best = float("inf")
        for _round in range(3):
            started = time.perf_counter()
            _summarize_all(previous, its_requests)
            best = min(best, time.perf_counter() - started)
        rate["previous"] = best
    RATES[name] = rate
    benchmark.extra_info.update(
        {
            "messages": messages,
            "requests": len(requests),
            "messages_per_second": messages / max(rate["ours"], 1e-9),
        }
    )
    if requests:
        assert messages / rate["ours"] >= FLOOR, (
            f"{name}: {messages / rate['ours']:.0f} messages/s, under {FLOOR}"
        )
