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
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from compaction import Compactor, Recipe, compile_request
from compaction.formats import load_transcript
from compaction.store import open_store

ROOT = Path(__file__).resolve().parent.parent
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
    return {"alone": (alone, "pi"), "among": (among, "pi"), "branch": (among, "pi-branch"), "edited": (edited, "pi")}


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
    lines = ["", f"compile at {RECIPE.budget_tokens} tokens, median of {ROUNDS} (ms); ratio to a one-conversation store"]
    for which, ms in RESULTS.items():
        lines.append(f"{which:>8s} {ms:8.2f} ms {ms / reference:6.2f}x")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        reporter.write_line(line) if reporter is not None else print(line)
