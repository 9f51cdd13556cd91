"""The SQLite compaction claim leaves no lock file beside the store, and still admits one holder at a time.

The holder removes ``<store>.claim-N`` before it releases the lock; a process that was waiting
on the removed file sees that and locks the path anew.  Three processes take the claim of one
conversation over and over, each doing a read-modify-write of a counter file inside it (with
a marker created exclusively on entry): no two are ever inside at once, no increment is
lost, and no claim file is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from compaction import Message
from compaction.blocks import text_block
from compaction.store import open_store
from compaction.store.factory import compaction_claim

_RUN = "import sys; sys.path.insert(0, {tests!r}); import {module} as t; t.{function}(*sys.argv[1:])"


def contender(db: str, workdir: str, rounds: str) -> None:
    """Take the claim ``rounds`` times; inside it, check no one else is, and add 1 to the counter."""
    work = Path(workdir)
    with open_store(db, create=False, conversation="main") as store:
        for _ in range(int(rounds)):
            with compaction_claim(store):
                marker = os.open(
                    work / "inside", os.O_CREAT | os.O_EXCL | os.O_WRONLY
                )  # fails if another is inside
                count = int((work / "counter").read_text())
                time.sleep(0.002)
                (work / "counter").write_text(str(count + 1))
                os.close(marker)
                os.unlink(work / "inside")


def _claim_files(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if ".claim-" in p.name)


def test_a_released_claim_leaves_no_lock_file(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with open_store(db, conversation="main") as store:
        store.append([Message("user", (text_block("hello"),))])
        with compaction_claim(store) as held:
            assert held is True and _claim_files(db) == ["s.db.claim-1"]
            with compaction_claim(store):  # nested: the same claim
                pass
            assert _claim_files(db) == ["s.db.claim-1"]
        assert _claim_files(db) == []
        (tmp_path / "s.db.claim-1").write_text("")  # left by a holder that was killed
        with compaction_claim(store):
            pass
        assert _claim_files(db) == []


def test_processes_taking_turns_never_overlap_and_leave_no_lock_file(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with open_store(db, conversation="main") as store:
        store.append([Message("user", (text_block("hello"),))])
    (tmp_path / "counter").write_text("0")
    code = _RUN.format(tests=str(Path(__file__).parent), module=Path(__file__).stem, function="contender")
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(db), str(tmp_path), "40"], stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    for process in processes:
        _out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    assert (tmp_path / "counter").read_text() == "120"
    assert _claim_files(db) == []
