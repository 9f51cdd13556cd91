"""Benchmark: what conversations and branches cost compile and facts, beside a one-conversation store.

Run ``pytest bench/bench_branches.py --benchmark-only -q -s`` (``-s`` shows the table).  Four stores are built once, all
holding the pi transcript (962 messages), compressed with the extractive summarizer:

* ``alone``: a store of that one conversation (the reference, measured in the same run);
* ``among``: the same conversation in a store that also holds 200 other conversations
  (copies of the first 40 messages of the transcript, each its own conversation);
* ``branch``: a branch of ``among``'s conversation forked at message 600 that holds the
  transcript's messages 600 to 961 as its own rows (so it shows the same 962 messages,
  reading 600 of them from its parent);
* ``edited``: ``alone`` with 10 of its messages edited (a revision each) and compressed again.

Each compiles at 40,000 tokens; a table printed when the module's tests end (before
pytest-benchmark's) gives the median of 15 compiles per store and its ratio to ``alone``.

**Importing branches.**  :func:`siblings_session` and :func:`nested_session` write a
generated Claude Code session: one prompt with ``n`` siblings (the user rewound to it ``n``
times), or ``n`` rewinds each inside the one before.  ``test_import_branches`` times
``compaction import --branches`` of 200 siblings beside the same file imported flat (the
reference, same run).  The sizes the attack pass reported (500, 1,000, 3,000 siblings; 300
and 1,100 nested rewinds) take seconds to minutes each, so they run from the command line,
each in a fresh process that reports its own wall time and peak RSS::

    python bench/bench_branches.py siblings 500 1000 3000 nested 300 1100

Measured on 2026-12-01 on the shared 2-core machine (other work running), wall seconds and
peak RSS of the importing process; "before" is commit d73ff92 run the same way (its code
first on ``PYTHONPATH``, ``--timeout 600``):

=================  ========  ==================  ==================  =======
session            branches  before: s, MiB      after: s, MiB       flat s
=================  ========  ==================  ==================  =======
500 siblings       499       21.9, 56.7          2.7, 56.9           0.3
1,000 siblings     999       50.0, 60.2          4.8, 60.4           0.4
3,000 siblings     2,999     248.0, 69.4         11.4, 70.8          0.5
300 nested         300       over 600            7.6, 58.8           0.3
1,100 nested       1,100     over 600            114.9, 101.6        0.6
=================  ========  ==================  ==================  =======

Siblings now grow linearly (the store's work per branch no longer grows with the store).
Nested rewinds still grow with the square of their depth: each path is parsed whole, so
the parse costs the sum of the paths' lengths (what the branches show, 1.2 million
messages at 1,100 deep), though the store appends only each branch's own messages and the
parsed paths share their equal messages in memory.  Before, 1,100 nested rewinds could not
finish at all: SQLite refuses a lineage condition past 1,000 terms (fixed: balanced).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from compaction import Compactor, Recipe, compile_request
from compaction.formats import load_transcript
from compaction.store import open_store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from claude_code_sessions import nested_rewinds, rewind_tree, write_session  # noqa: E402

PI = ROOT / "examples" / "pi__pi-mono__before-compaction.jsonl"
RECIPE = Recipe(budget_tokens=40000)
OTHERS = 200
FORK = 600
ROUNDS = 15

RESULTS: dict[str, float] = {}


def _median_ms(location: str, conversation: str) -> float:
    with open_store(location, conversation=conversation) as store:
        compile_request(store, RECIPE)  # warm: counts cached
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            compile_request(store, RECIPE)
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    messages = list(load_transcript(PI).messages)
    where = tmp_path_factory.mktemp("branches")
    alone, among = str(where / "alone.db"), str(where / "among.db")
    with open_store(alone, conversation="pi") as store:
        store.append(messages, chain_seed="pi")
        Compactor(store, RECIPE).tick(keep_tail_tokens=4000)
    for index in range(OTHERS):
        with open_store(among, conversation=f"other-{index:03d}") as store:
            store.append(messages[:40], chain_seed="pi")
    with open_store(among, conversation="pi") as store:
        store.append(messages, chain_seed="pi")
        Compactor(store, RECIPE).tick(keep_tail_tokens=4000)
        store.branch("pi-branch", FORK)
    with open_store(among, conversation="pi-branch") as branch:
        branch.append(messages, chain_seed="pi")  # the shared 600 are skipped, 362 stored as its own
        Compactor(branch, RECIPE).tick(keep_tail_tokens=4000)
    edited = str(where / "edited.db")
    with open_store(edited, conversation="pi") as store:
        store.append(messages, chain_seed="pi")
        for seq in range(100, 1000, 90):
            if seq < len(messages) and store.messages(seq, seq + 1)[0].role == "user":
                store.edit(seq, [{"type": "text", "text": f"edited message {seq}"}])
        Compactor(store, RECIPE).tick(keep_tail_tokens=4000)
    return {
        "alone": (alone, "pi"),
        "among": (among, "pi"),
        "branch": (among, "pi-branch"),
        "edited": (edited, "pi"),
    }


@pytest.mark.parametrize("which", ["alone", "among", "branch", "edited"])
def test_compile_latency(benchmark, stores: dict[str, tuple[str, str]], which: str) -> None:  # noqa: ANN001
    location, conversation = stores[which]
    with open_store(location, conversation=conversation) as store:
        compiled = benchmark(compile_request, store, RECIPE)
        assert compiled.total_messages == 962
    RESULTS[which] = _median_ms(location, conversation)


@pytest.fixture(scope="module", autouse=True)
def _table(request: pytest.FixtureRequest):
    yield
    if "alone" not in RESULTS:
        return
    reference = RESULTS["alone"]
    lines = [
        "",
        f"compile at {RECIPE.budget_tokens} tokens, median of {ROUNDS} (ms); ratio to a one-conversation store",
    ]
    for which, ms in RESULTS.items():
        lines.append(f"{which:>8s} {ms:8.2f} ms {ms / reference:6.2f}x")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        reporter.write_line(line) if reporter is not None else print(line)


# -- importing the branches of a generated session -------------------------------------------


def siblings_session(path: Path, n: int) -> Path:
    """Write a Claude Code session whose first answer has ``n`` prompts as children (``n - 1`` rewinds)."""
    return write_session(path, rewind_tree([-1] * n))


def nested_session(path: Path, n: int) -> Path:
    """Write a Claude Code session of ``n`` rewinds each forking inside the one before: the prompt
    ``x{i}`` is abandoned for ``y{i}``, and ``x{i+1}`` / ``y{i+1}`` continue ``x{i}``'s answer
    (the kept prompts' answers come last, newest first, as in tests/test_attack_session11.py)."""
    return write_session(path, nested_rewinds(n))


def _import_args(session: Path, store: Path, branches: bool) -> list[str]:
    return ["import", str(session), "--store", str(store), "--json"] + (["--branches"] if branches else [])


def _import(session: Path, store: Path, branches: bool) -> dict[str, Any]:
    from click.testing import CliRunner

    from compaction.cli import main

    done = CliRunner().invoke(main, _import_args(session, store, branches))
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_import_branches(benchmark, tmp_path: Path) -> None:  # noqa: ANN001
    session = siblings_session(tmp_path / "wide.jsonl", 200)
    runs = iter(range(10_000))

    def branched() -> dict[str, Any]:
        return _import(session, tmp_path / f"b{next(runs)}.db", True)

    report = benchmark.pedantic(branched, rounds=3, iterations=1)
    assert len(report["branches"]) == 199
    started = time.perf_counter()
    flat = _import(session, tmp_path / "flat.db", False)
    reference = time.perf_counter() - started
    assert flat["messages"] == 402
    line = (
        f"import --branches of 200 siblings: {benchmark.stats.stats.median:.2f} s (median of 3); "
        f"the same file flat: {reference:.2f} s"
    )
    print(line)


_MEASURE = """
import json, resource, sys, time
from click.testing import CliRunner
from compaction.cli import main
started = time.perf_counter()
done = CliRunner().invoke(main, sys.argv[1:])
elapsed = time.perf_counter() - started
assert done.exit_code == 0, done.output[-2000:]
report = json.loads(done.stdout)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"seconds": elapsed, "peak_kib": peak, "branches": len(report.get("branches", [])),
                  "messages": report["messages"]}))
"""


def measure(kind: str, n: int, branches: bool = True, timeout: float = 3600) -> dict[str, Any]:
    """Import a generated session in a fresh process; return its wall time (s), peak RSS (KiB) and counts."""
    with tempfile.TemporaryDirectory() as where:
        make = siblings_session if kind == "siblings" else nested_session
        session = make(Path(where) / f"{kind}{n}.jsonl", n)
        args = _import_args(session, Path(where) / "store.db", branches)
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def _cli(argv: list[str]) -> None:
    """``python bench/bench_branches.py [--timeout S] siblings 500 1000 nested 300``: one row per size.

    A run past ``S`` seconds (default 3600) is stopped and shown as ``>S``; one that fails
    shows the last line of its error.
    """
    kind, timeout = "siblings", 3600.0
    if argv[:1] == ["--timeout"]:
        timeout, argv = float(argv[1]), argv[2:]
    print(
        f"{'session':>18s} {'branches':>8s} {'--branches s':>12s} {'peak MiB':>9s} {'flat s':>7s} {'flat MiB':>9s}"
    )
    for word in argv:
        if word in ("siblings", "nested"):
            kind = word
            continue
        n = int(word)
        flat = measure(kind, n, False)
        try:
            branched = measure(kind, n, True, timeout)
        except subprocess.TimeoutExpired:
            print(f"{kind + ' ' + str(n):>18s} {'':8s} {'>' + str(int(timeout)):>12s}", flush=True)
            continue
        except RuntimeError as err:
            print(f"{kind + ' ' + str(n):>18s} failed: {str(err).strip().splitlines()[-1][:300]}", flush=True)
            continue
        print(
            f"{kind + ' ' + str(n):>18s} {branched['branches']:8d} {branched['seconds']:12.2f} "
            f"{branched['peak_kib'] / 1024:9.1f} {flat['seconds']:7.2f} {flat['peak_kib'] / 1024:9.1f}",
            flush=True,
        )


if __name__ == "__main__":
    _cli(sys.argv[1:])
