"""Benchmark: probe recall turn by turn, compaction in events against re-planning every turn.

Issue 12 asks that compaction in events (a stable prefix between compaction events) keeps
as much of what a later turn needs as re-planning the window on every call.  Here each
shipped transcript is replayed as an agent calls the engine (before each assistant message:
append what is new, ``compress_and_compile``) in both modes side by side; on every
``COMPACTION_BENCH_RECALL_EVERY``-th turn (default 10) the probes of ``compaction eval``
(:mod:`compaction.eval_probes`) are extracted from the history so far and looked up in each
mode's request.  The summary prints, per transcript and over all, the share of probes of
each kind found (asks, files, errors, decisions, identifiers) for ``events`` and
``replan``, and flags a kind where ``events`` is below ``replan`` by more than 0.02.

Run ``pytest bench/bench_recall_turns.py --benchmark-only -q -s`` (a few minutes).
``COMPACTION_BENCH_RECALL=pi`` limits the transcripts to names containing a word;
``COMPACTION_BENCH_RECALL_BUDGET`` sets the budget (default 32,000 tokens).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from compaction import InvalidTranscript, Recipe, Store, load_transcript
from compaction.eval_probes import PROBE_KINDS, RequestText, extract_probes
from compaction.pipeline import compress_and_compile

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BUDGET = int(os.environ.get("COMPACTION_BENCH_RECALL_BUDGET", "32000"))
EVERY = int(os.environ.get("COMPACTION_BENCH_RECALL_EVERY", "10"))
MODES = ("events", "replan")
TOLERANCE = 0.02
_ONLY = [w for w in os.environ.get("COMPACTION_BENCH_RECALL", "").split(",") if w]
TRANSCRIPTS = sorted(
    p
    for p in EXAMPLES.rglob("*")
    if p.is_file() and p.name != "README.md" and (not _ONLY or any(w in p.name for w in _ONLY))
)

#: transcript -> mode -> kind -> (found, total), summed over the sampled turns
RESULTS: dict[str, dict[str, dict[str, tuple[int, int]]]] = {}


def replay_recall(path: Path, budget: int, every: int) -> dict[str, dict[str, tuple[int, int]]]:
    """Replay ``path`` in both modes; return found/total probes per mode and kind over sampled turns."""
    messages = load_transcript(path, lenient=True).messages
    recipe = Recipe(budget_tokens=budget)
    stores = {mode: Store(":memory:") for mode in MODES}
    found = {mode: Counter[str]() for mode in MODES}
    totals: Counter[str] = Counter()
    appended = turns = 0
    try:
        for index, message in enumerate(messages):
            if message.role != "assistant" or index == 0:
                continue
            new, appended = messages[appended:index], index
            turns += 1
            bodies = {}
            for mode, store in stores.items():
                store.append(new)
                bodies[mode] = compress_and_compile(store, recipe, mode=mode)[0].request.body()  # type: ignore[arg-type]
            if turns % every:
                continue
            probes = extract_probes(messages[:index])
            for mode, body in bodies.items():
                text = RequestText(body)
                for probe in probes:
                    found[mode][probe.kind] += probe.found(text)
            totals.update(probe.kind for probe in probes)
    finally:
        for store in stores.values():
            store.close()
    return {mode: {kind: (found[mode][kind], totals[kind]) for kind in PROBE_KINDS} for mode in MODES}


def _share(cell: tuple[int, int]) -> str:
    found, total = cell
    return f"{found / total:.3f}" if total else "    -"


class _Summary:
    """A pytest plugin that prints the recall table after the run."""

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001
        if not RESULTS:
            return
        write = terminalreporter.write_line
        write("")
        write(f"probe recall over every {EVERY}th turn at a budget of {BUDGET:,} tokens: events / replan")
        write(f"{'transcript':48s} " + " ".join(f"{k:>15s}" for k in PROBE_KINDS))
        pooled = {mode: {kind: [0, 0] for kind in PROBE_KINDS} for mode in MODES}
        for name, result in sorted(RESULTS.items()):
            cells = " ".join(f"{_share(result['events'][k])} / {_share(result['replan'][k])}" for k in PROBE_KINDS)
            write(f"{name[:48]:48s} {cells}")
            for mode in MODES:
                for kind in PROBE_KINDS:
                    pooled[mode][kind][0] += result[mode][kind][0]
                    pooled[mode][kind][1] += result[mode][kind][1]
        cells = " ".join(
            f"{_share(tuple(pooled['events'][k]))} / {_share(tuple(pooled['replan'][k]))}" for k in PROBE_KINDS  # type: ignore[arg-type]
        )
        write(f"{'all (pooled)':48s} {cells}")
        for kind in PROBE_KINDS:
            (ef, et), (rf, rt) = pooled["events"][kind], pooled["replan"][kind]
            if et and rt and ef / et < rf / rt - TOLERANCE:
                write(f"events below replan on {kind}: {ef / et:.3f} vs {rf / rt:.3f}")


@pytest.fixture(scope="module", autouse=True)
def _summary_table(request: pytest.FixtureRequest):
    if not request.config.pluginmanager.has_plugin("bench-recall-summary"):
        request.config.pluginmanager.register(_Summary(), "bench-recall-summary")
    yield


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_recall_over_turns(benchmark, path: Path) -> None:
    try:
        result = benchmark.pedantic(replay_recall, args=(path, BUDGET, EVERY), rounds=1, iterations=1)
    except InvalidTranscript as err:
        print(f"\n{path.name}: not replayed ({err})")
        return
    for mode in MODES:
        for kind in PROBE_KINDS:
            found, total = result[mode][kind]
            assert 0 <= found <= total
    RESULTS[str(path.relative_to(EXAMPLES))] = result
