"""The SQLite store's compaction claim: an OS file lock per tree of branches, across processes.

* A process holding the claim of a conversation keeps a second process off it and off its
  branch (``wait=False`` yields False at once), not off another tree of the same store file;
  when the holder ends its block, or is SIGKILLed, the claim is free.
* Two processes, one compressing a conversation and one its branch, each tick under the
  claim: the summaries of each tile without gap or overlap and none is made twice (the
  PostgreSQL version is in ``test_store_postgres_processes.py``).
* Claims nest in one object, and a ``:memory:`` store holds nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_store_postgres_processes import RECIPE, _check_tiling, turns

from compaction import Compactor
from compaction.store import SQLiteStore
from compaction.store.factory import compaction_claim, open_store
from compaction.summarizers.base import SummaryKind, SummaryResult
from compaction.summarizers.extractive import ExtractiveSummarizer
from compaction.wire import GatedRequest

_RUN = "import sys; sys.path.insert(0, {tests!r}); import {module} as t; t.{function}(*sys.argv[1:])"


def _spawn(function: str, *args: str) -> subprocess.Popen[str]:
    code = _RUN.format(tests=str(Path(__file__).parent), module=Path(__file__).stem, function=function)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(path: Path, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert process.poll() is None, f"the holder died before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"the holder never reached {what}"
        time.sleep(0.01)


def holder(db: str, workdir: str, conversation: str) -> None:
    """Hold ``conversation``'s claim until ``release`` appears in ``workdir``, then exit."""
    work = Path(workdir)
    with open_store(db, create=False, conversation=conversation) as store, compaction_claim(store) as held:
        (work / "held").write_text(json.dumps(held))
        while not (work / "release").exists():
            time.sleep(0.01)


def _store_with_a_branch(db: Path) -> None:
    with open_store(db, conversation="main") as main:
        main.append([m for turn in turns("P", 20) for m in turn])  # 80 messages, shared up to 40
        main.branch("alt", 40)
    with open_store(db, conversation="other") as other:
        other.append([m for turn in turns("O", 3) for m in turn])


def _free(db: Path, conversation: str) -> bool:
    with (
        open_store(db, create=False, conversation=conversation) as store,
        compaction_claim(store, wait=False) as held,
    ):
        return held


def test_a_held_claim_keeps_others_off_its_tree_only_until_released(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    _store_with_a_branch(db)
    process = _spawn("holder", str(db), str(tmp_path), "main")
    try:
        _wait_for(tmp_path / "held", process, "the claim")
        assert json.loads((tmp_path / "held").read_text()) is True
        assert _free(db, "main") is False
        assert _free(db, "alt") is False  # the branch shares the tree's claim
        assert _free(db, "other") is True  # another tree of the same file
        (tmp_path / "release").touch()
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0 and err == "", err
        assert _free(db, "main") is True and _free(db, "alt") is True
    finally:
        (tmp_path / "release").touch()
        process.communicate(timeout=60)


def test_a_killed_holder_leaves_no_claim(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    _store_with_a_branch(db)
    process = _spawn("holder", str(db), str(tmp_path), "alt")
    _wait_for(tmp_path / "held", process, "the claim")
    assert _free(db, "main") is False
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    with open_store(db, create=False, conversation="main") as store, compaction_claim(store) as held:
        assert held is True  # wait=True returns at once: the kernel released the dead holder's lock


def test_claims_nest_in_one_object_and_exclude_another_object(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    _store_with_a_branch(db)
    with open_store(db, create=False, conversation="main") as store:
        with compaction_claim(store) as outer:
            with compaction_claim(store, wait=False) as inner:
                assert (outer, inner) == (True, True)
            assert _free(db, "alt") is False  # still held after the inner block
        assert _free(db, "alt") is True
    assert sorted(p.name for p in tmp_path.iterdir() if ".claim-" in p.name) == []  # removed on release
    with SQLiteStore(":memory:") as memory, compaction_claim(memory, wait=False) as held:
        assert held is True


class SlowSummarizer(ExtractiveSummarizer):
    """The offline summarizer, 20 ms a request: wide enough a window for two workers to race."""

    def summarize(self, request: GatedRequest, *, kind: SummaryKind) -> SummaryResult:
        time.sleep(0.02)
        return super().summarize(request, kind=kind)


def branch_worker(db: str, workdir: str, conversation: str, name: str) -> None:
    """Append ``name``'s history to ``conversation`` in batches, compressing under the claim after each."""
    work = Path(workdir)
    history = turns(name, 25)
    (work / f"ready-{name}").touch()
    while not (work / "go").exists():
        time.sleep(0.005)
    made = {"l1": 0, "merged": 0}
    index = 0
    with open_store(db, create=False, conversation=conversation) as store:
        while index <= len(history):
            store.append([m for turn in history[index : index + 2] for m in turn])
            index += 2
            with compaction_claim(store):
                report = Compactor(store, RECIPE, summarizer=SlowSummarizer()).tick()
            made["l1"] += report.l1_added
            made["merged"] += sum(report.merged.values())
    print(json.dumps(made))


def test_a_parent_and_its_branch_compressed_at_once_share_summaries_and_never_overlap(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    _store_with_a_branch(db)
    workers = {
        name: _spawn("branch_worker", str(db), str(tmp_path), conversation, name)
        for name, conversation in (("M", "main"), ("B", "alt"))
    }
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in workers):
        assert time.monotonic() < deadline, "the workers did not start"
        assert all(p.poll() is None for p in workers.values()), "a worker died at start"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    results = {name: process.communicate(timeout=240) for name, process in workers.items()}
    assert {name: p.returncode for name, p in workers.items()} == {"M": 0, "B": 0}, results
    made = {name: json.loads(out) for name, (out, _err) in results.items()}
    with (
        open_store(db, create=False, conversation="main") as main,
        open_store(db, create=False, conversation="alt") as alt,
    ):
        for store in (main, alt):
            _check_tiling(
                [(s.level, s.start_seq, s.end_seq) for s in store.summaries()], frontier_at_least=40
            )
        shared = {s.id for s in main.summaries()} & {s.id for s in alt.summaries()}
        assert shared and all(s.end_seq <= 40 for s in alt.summaries() if s.id in shared)
        stored = int(main._db.execute("SELECT COUNT(*) FROM summaries").fetchone()[0])
    total = sum(m["l1"] + m["merged"] for m in made.values())
    assert total == stored, f"a summary was made twice: {made}, {stored} stored"
    assert min(m["l1"] for m in made.values()) > 0, f"one worker did all the compression: {made}"
