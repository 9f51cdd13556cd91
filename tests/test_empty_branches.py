"""An empty branch (made at message 0) is a conversation with nothing to compile or compress, said plainly.

``compaction branch --at 0`` says the branch shares no message; compile and inspect of it say
it is an empty branch of its parent (not "import a transcript first", which is false for a
store that holds messages); ``fleet compress`` counts it as nothing to do, not a failure.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from compaction import Message
from compaction.blocks import text_block
from compaction.cli import main
from compaction.store import open_store


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with open_store(path, conversation="main") as store:
        store.append(
            [Message("user", (text_block("fix the parser"),)), Message("assistant", (text_block("done"),))]
        )
    return path


def _run(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


def test_branch_at_zero_says_it_shares_no_message(tmp_path: Path) -> None:
    store = _store(tmp_path)
    done = _run("branch", "--store", str(store), "--conversation", "main", "--at", "0", "--name", "fresh")
    assert done.exit_code == 0, done.output
    assert done.output == "fresh: a branch of 'main' sharing no message (it starts empty) (0 summaries)\n"
    one = _run("branch", "--store", str(store), "--conversation", "main", "--at", "1", "--name", "one")
    assert one.output == "one: a branch of 'main' sharing its messages 0 to 0 (0 summaries)\n"


def test_compile_and_inspect_of_an_empty_branch_say_what_it_is(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run("branch", "--store", str(store), "--conversation", "main", "--at", "0", "--name", "fresh")
    expected = (
        f"compaction: error: {store}: conversation 'fresh' holds no messages yet (a branch of 'main' made at "
        "message 0, sharing none): there is no history to compile; append to it first "
        "(compaction import TRANSCRIPT --conversation fresh)\n"
    )
    for command in (
        ["compile", "--store", str(store), "--conversation", "fresh", "--budget", "2000"],
        ["inspect", "--store", str(store), "--conversation", "fresh", "--budget", "2000", "--json"],
    ):
        done = _run(*command)
        assert done.exit_code == 1
        assert done.stderr == expected
    fine = _run("compile", "--store", str(store), "--conversation", "main", "--budget", "2000")
    assert fine.exit_code == 0, fine.output


def test_fleet_counts_an_empty_branch_as_nothing_to_do(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run("branch", "--store", str(store), "--conversation", "main", "--at", "0", "--name", "fresh")
    done = _run("fleet", "compress", "--store", str(store), "--engine", "local", "--workers", "1", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["conversations"], report["failed_conversations"], report["nothing_to_do"]) == (2, 0, 1)
    by_name = {r["conversation"]: r for r in report["results"]}
    assert len(by_name) == 2
    fresh = next(r for name, r in by_name.items() if name.endswith("fresh"))
    assert (fresh["nothing_to_do"], fresh["error"], fresh["summaries_made"]) == (True, None, 0)
    main_result = next(r for name, r in by_name.items() if name.endswith("main"))
    assert "nothing_to_do" not in main_result and main_result["error"] is None
    table = _run("fleet", "compress", "--store", str(store), "--engine", "local", "--workers", "1")
    assert table.exit_code == 0 and "2 (1 empty: nothing to do)" in table.output
