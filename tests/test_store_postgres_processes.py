"""Several processes on one PostgreSQL store: concurrent appends and compression, and kills.

* Two worker processes each append their own generated history (distinct chain seeds, many
  small appends, reopening the store as separate imports would) and compress the store
  between appends, each tick under :func:`~compaction.store.factory.compaction_claim`.
  Afterwards every message of each source is stored once, in order, with dense seqs; the
  level-1 summaries tile ``[0, frontier)`` without gap or overlap; and the summaries the
  workers report having made add up to the summaries stored: none was made twice.
* A writer appending and compressing is SIGKILLed at seeded random moments; after each kill
  the store opens, holds a whole number of batches equal to the source's start, and every
  summary is whole; a rerun completes it, equal to an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from store_backends import drop_postgres_store, new_postgres_url

from compaction import Compactor, Recipe
from compaction.blocks import Message, canonical_json
from compaction.store.factory import compaction_claim, open_store

TURNS = 60  # 4 messages a turn: 240 messages per appender
RECIPE = Recipe(chunk_target_tokens=300, merge_fanout=3)
WORDS = "alpha beta gamma delta parser store index chunk summary budget window token tool result".split()


def turns(name: str, count: int) -> list[list[Message]]:
    """Return ``count`` whole turns of a generated history; every message names ``name``."""
    rng = random.Random(name)
    out = []
    for turn in range(count):
        tag = f"[{name}:{turn}]"
        words = " ".join(rng.choices(WORDS, k=rng.randint(10, 40)))
        call = f"call_{name}_{turn}"
        out.append([
            Message("user", ({"type": "text", "text": f"{tag} please {words}"},)),
            Message("assistant", (
                {"type": "text", "text": f"{tag} on it"},
                {"type": "tool_use", "id": call, "name": "bash", "input": {"cmd": rng.choice(WORDS)}},
            )),
            Message("user", ({"type": "tool_result", "tool_use_id": call, "content": f"{tag} {words} {words}"},)),
            Message("assistant", ({"type": "text", "text": f"{tag} done"},)),
        ])
    return out


def worker(url: str, workdir: str, name: str) -> None:
    """Append ``name``'s history in batches of 1-3 turns, compressing under the claim after each."""
    work = Path(workdir)
    history = turns(name, TURNS)
    rng = random.Random(f"batches-{name}")
    (work / f"ready-{name}").touch()
    while not (work / "go").exists():
        time.sleep(0.005)
    made = {"l1": 0, "merged": 0, "appends": 0}
    index = 0
    store = open_store(url, create=False)
    while index < len(history):
        size = rng.randint(1, 3)
        store.append([m for turn in history[index : index + size] for m in turn], chain_seed=f"{name}-{index}")
        index += size
        made["appends"] += 1
        with compaction_claim(store):
            report = Compactor(store, RECIPE).tick()
        made["l1"] += report.l1_added
        made["merged"] += sum(report.merged.values())
        if made["appends"] % 5 == 0:
            store.close()
            store = open_store(url, create=False)
    with compaction_claim(store):
        report = Compactor(store, RECIPE).tick()
    made["l1"] += report.l1_added
    made["merged"] += sum(report.merged.values())
    store.close()
    print(json.dumps(made))


_RUN = "import sys; sys.path.insert(0, {tests!r}); import {module} as t; t.{function}(*sys.argv[1:])"


def _spawn(function: str, *args: str) -> subprocess.Popen[str]:
    code = _RUN.format(tests=str(Path(__file__).parent), module=Path(__file__).stem, function=function)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _check_tiling(summaries: list[tuple[int, int, int]], frontier_at_least: int = 1) -> None:
    """Each level's summaries tile a prefix of the history: no gap, no overlap, none twice."""
    levels = sorted({level for level, _s, _e in summaries})
    assert levels == list(range(1, len(levels) + 1)), f"levels are not contiguous from 1: {levels}"
    for level in levels:
        position = 0
        for _level, start, end in sorted(s for s in summaries if s[0] == level):
            assert start == position, f"level {level} leaves a gap or overlaps at {position} (next starts {start})"
            position = end
        if level == 1:
            assert position >= frontier_at_least, "the level-1 summaries stop short"


def test_two_processes_appending_and_compressing_lose_nothing_and_make_no_summary_twice(tmp_path: Path) -> None:
    url = new_postgres_url()
    try:
        open_store(url).close()
        workers = {name: _spawn("worker", url, str(tmp_path), name) for name in ("A", "B")}
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{n}").exists() for n in workers):
            assert time.monotonic() < deadline, "the workers did not start"
            assert all(p.poll() is None for p in workers.values()), "a worker died at start"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        results = {name: process.communicate(timeout=240) for name, process in workers.items()}
        for name, (_out, err) in results.items():
            assert err == "", f"{name} wrote to stderr:\n{err}"
        assert {name: p.returncode for name, p in workers.items()} == {"A": 0, "B": 0}
        made = {name: json.loads(out) for name, (out, _err) in results.items()}

        with open_store(url, create=False) as store:
            messages = store.messages()
            summaries = store.summaries()
        assert [m.seq for m in messages] == list(range(len(messages))), "seqs are not dense"
        stored: dict[str, list[tuple[str, object]]] = {"A": [], "B": []}
        for message in messages:
            blob = canonical_json(list(message.content))
            owner = "A" if "[A:" in blob else "B"
            assert ("[B:" in blob) != (owner == "A"), f"a message of neither or both sources: {blob[:80]}"
            stored[owner].append((message.role, json.loads(blob)))
        for name in ("A", "B"):
            sent = [(m.role, json.loads(canonical_json(list(m.content)))) for turn in turns(name, TURNS) for m in turn]
            assert stored[name] == sent, f"{name}: messages lost, duplicated or out of order"
        ranges = [(s.level, s.start_seq, s.end_seq) for s in summaries]
        assert len(set(ranges)) == len(ranges)
        _check_tiling(ranges, frontier_at_least=len(messages) // 2)
        l1 = sum(1 for s in summaries if s.level == 1)
        assert made["A"]["l1"] + made["B"]["l1"] == l1, f"level-1 summaries made twice: {made}, {l1} stored"
        merged = len(summaries) - l1
        assert made["A"]["merged"] + made["B"]["merged"] == merged, f"merges made twice: {made}, {merged} stored"
        assert min(made["A"]["l1"], made["B"]["l1"]) > 0, f"one worker did all the compression: {made}"
    finally:
        drop_postgres_store(url)


def branch_worker(url: str, workdir: str, conversation: str, name: str) -> None:
    """Append ``name``'s history to ``conversation`` in batches, compressing under the claim after each."""
    work = Path(workdir)
    history = turns(name, 25)
    rng = random.Random(f"batches-{name}")
    (work / f"ready-{name}").touch()
    while not (work / "go").exists():
        time.sleep(0.005)
    made = {"l1": 0, "merged": 0}
    index = 0
    with open_store(url, create=False, conversation=conversation) as store:
        while index <= len(history):
            size = rng.randint(1, 3)
            store.append([m for turn in history[index : index + size] for m in turn])
            index += size
            with compaction_claim(store):
                report = Compactor(store, RECIPE).tick()
            made["l1"] += report.l1_added
            made["merged"] += sum(report.merged.values())
    print(json.dumps(made))


def test_a_parent_and_its_branch_compressed_at_once_share_summaries_and_never_overlap(tmp_path: Path) -> None:
    """Two processes, one compressing a conversation and one its branch, take turns on the tree's claim."""
    url = new_postgres_url()
    try:
        with open_store(url, conversation="main") as main:
            main.append([m for turn in turns("P", 20) for m in turn])  # 80 messages, shared up to 40
            main.branch("alt", 40)
        workers = {
            name: _spawn("branch_worker", url, str(tmp_path), conversation, name)
            for name, conversation in (("M", "main"), ("B", "alt"))
        }
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{n}").exists() for n in workers):
            assert time.monotonic() < deadline, "the workers did not start"
            assert all(p.poll() is None for p in workers.values()), "a worker died at start"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        results = {name: process.communicate(timeout=240) for name, process in workers.items()}
        for name, (_out, err) in results.items():
            assert err == "", f"{name} wrote to stderr:\n{err}"
        made = {name: json.loads(out) for name, (out, _err) in results.items()}
        with open_store(url, create=False, conversation="main") as main, open_store(
            url, create=False, conversation="alt"
        ) as alt:
            for store in (main, alt):
                _check_tiling([(s.level, s.start_seq, s.end_seq) for s in store.summaries()], frontier_at_least=40)
            shared = {s.id for s in main.summaries()} & {s.id for s in alt.summaries()}
            assert shared and all(s.end_seq <= 40 for s in alt.summaries() if s.id in shared)
            stored = int(main._db.execute("SELECT COUNT(*) FROM summaries").fetchone()[0])
        total = sum(m["l1"] + m["merged"] for m in made.values())
        assert total == stored, f"a summary was made twice: {made}, {stored} stored"
        assert min(m["l1"] for m in made.values()) > 0, f"one worker did all the compression: {made}"
    finally:
        drop_postgres_store(url)


# -- a killed writer ---------------------------------------------------------------------------
BATCH = 20
KILL_SOURCE = [m for turn in turns("K", 45) for m in turn]  # 180 messages, 9 batches


def kill_worker(url: str, log: str) -> None:
    """Append the source in batches (one transaction each), compressing after each; log each commit."""
    with open_store(url, create=False) as store, open(log, "a") as out:
        compactor = Compactor(store, RECIPE)
        for start in range(0, len(KILL_SOURCE), BATCH):
            store.append(KILL_SOURCE[: start + BATCH], chain_seed="kill")
            out.write(f"appended {start + BATCH}\n")
            out.flush()
            with compaction_claim(store):
                compactor.tick()
        with compaction_claim(store):
            compactor.tick(close_tail=True)
        out.write("done\n")
        out.flush()


def _committed(log: Path) -> int:
    lines = log.read_text().split() if log.exists() else []
    counts = [int(x) for x in lines if x.isdigit()]
    return max(counts, default=0)


def _check_after_kill(url: str, log: Path) -> int:
    with open_store(url, create=False) as store:
        messages = store.messages()
        summaries = store.summaries()
        assert store.failures() == []
    n = len(messages)
    assert [m.seq for m in messages] == list(range(n)), "seqs are not dense"
    assert n % BATCH == 0 or n == len(KILL_SOURCE), f"{n} messages: an append was kept in part"
    assert n >= _committed(log), f"{n} messages stored but {_committed(log)} were committed"
    assert [(m.role, m.content) for m in messages] == [(m.role, m.content) for m in KILL_SOURCE[:n]]
    for summary in summaries:
        assert summary.text.strip() and 0 <= summary.start_seq < summary.end_seq <= n
        assert isinstance(summary.provenance, dict)
    _check_tiling([(s.level, s.start_seq, s.end_seq) for s in summaries], frontier_at_least=0)
    return n


def test_a_killed_writer_leaves_a_store_that_opens_with_everything_committed(tmp_path: Path) -> None:
    reference, url = new_postgres_url(), new_postgres_url()
    try:
        open_store(reference).close()
        started = time.monotonic()
        kill_worker(reference, str(tmp_path / "reference.log"))
        took = time.monotonic() - started
        with open_store(reference, create=False) as store:
            expected = ([(m.role, m.content) for m in store.messages()],
                        [(s.level, s.start_seq, s.end_seq, s.text) for s in store.summaries()])
        open_store(url).close()
        log = tmp_path / "kill.log"
        rng = random.Random(20240607)
        kills = 0
        for _ in range(6):
            process = _spawn("kill_worker", url, str(log))
            time.sleep(rng.uniform(0.3, 0.3 + took))
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                kills += 1
            process.communicate(timeout=60)
            _check_after_kill(url, log)
        assert kills >= 3, f"only {kills} of 6 runs were killed mid-work (an uninterrupted run takes {took:.1f} s)"
        kill_worker(url, str(log))  # the rerun completes the store
        assert _check_after_kill(url, log) == len(KILL_SOURCE)
        with open_store(url, create=False) as store:
            got = ([(m.role, m.content) for m in store.messages()],
                   [(s.level, s.start_seq, s.end_seq, s.text) for s in store.summaries()])
        assert got[0] == expected[0]
        assert got[1] == expected[1], "the killed-and-rerun store's summaries differ from an uninterrupted run's"
    finally:
        drop_postgres_store(reference)
        drop_postgres_store(url)


# -- two agents compacting in events ------------------------------------------------------------
EVENTS_RECIPE = Recipe(budget_tokens=2500, chunk_target_tokens=300, merge_fanout=3)


def events_worker(url: str, workdir: str, name: str) -> None:
    """Append ``name``'s history a turn at a time, calling compress_and_compile after each (the agent loop)."""
    from compaction.pipeline import compress_and_compile

    work = Path(workdir)
    (work / f"ready-{name}").touch()
    while not (work / "go").exists():
        time.sleep(0.005)
    made = {"l1": 0, "merged": 0, "over": 0}
    with open_store(url, create=False) as store:
        for index, turn in enumerate(turns(name, 40)):
            store.append(turn, chain_seed=f"{name}-{index}")
            compiled, ticks = compress_and_compile(store, EVENTS_RECIPE)
            made["over"] += compiled.tokens > 2500
            made["l1"] += sum(t.l1_added for t in ticks)
            made["merged"] += sum(sum(t.merged.values()) for t in ticks)
    print(json.dumps(made))


def test_two_agents_compacting_one_store_in_events_make_no_summary_twice(tmp_path: Path) -> None:
    """compress_and_compile takes the store's claim for an event: a worker that waited appends to the other's."""
    url = new_postgres_url()
    try:
        open_store(url).close()
        workers = {name: _spawn("events_worker", url, str(tmp_path), name) for name in ("A", "B")}
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{n}").exists() for n in workers):
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        results = {name: process.communicate(timeout=240) for name, process in workers.items()}
        assert {name: p.returncode for name, p in workers.items()} == {"A": 0, "B": 0}, results
        made = {name: json.loads(out) for name, (out, _err) in results.items()}
        with open_store(url, create=False) as store:
            summaries = store.summaries()
            assert len(store) == 2 * 40 * 4
        l1 = sum(1 for s in summaries if s.level == 1)
        assert l1 > 0 and made["A"]["l1"] + made["B"]["l1"] == l1, f"level-1 summaries made twice: {made}, {l1}"
        assert made["A"]["merged"] + made["B"]["merged"] == len(summaries) - l1
        assert made["A"]["over"] == made["B"]["over"] == 0
    finally:
        drop_postgres_store(url)
