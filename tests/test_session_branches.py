"""pi session trees import as branches (``compaction import --branches``), sharing what they share.

A session whose user went back twice: the active path is imported as the conversation, each
other leaf's path as a branch of the conversation (or of the earlier branch) it shares the
longest prefix with, forked where they part.  No shared message is stored twice; importing
again adds nothing; every branch compiles.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from compaction import Recipe, compile_request
from compaction.branch_import import session_leaves
from compaction.cli import main
from compaction.store import list_conversations, open_store


def entry(name: str, parent: str | None, role: str, text: str) -> str:
    message = {"role": role, "content": [{"type": "text", "text": text}]}
    return json.dumps({"type": "message", "id": name, "parentId": parent, "timestamp": name, "message": message})


def session(tmp_path: Path) -> Path:
    lines = [
        json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/w"}),
        entry("e0", None, "user", "fix the parser"),
        entry("e1", "e0", "assistant", "I rewrote it"),
        entry("b1", "e0", "assistant", "I patched one line"),  # the user went back to e0
        entry("b2", "b1", "user", "now add a test"),
        entry("c1", "b1", "user", "explain the patch"),  # and back again, to b1
        entry("e2", "e1", "user", "run the tests"),
        entry("e3", "e2", "assistant", "all pass"),  # the last entry: the active path ends here
    ]
    path = tmp_path / "tree.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_leaves_of_a_tree_are_found_but_the_active_one(tmp_path: Path) -> None:
    text = session(tmp_path).read_text()
    assert session_leaves(text) == [[0, 1, 3, 4], [0, 1, 3, 5]]  # line indexes: session line, root, ..., leaf
    assert session_leaves("\n".join(json.dumps({"role": "user", "content": "x"}) for _ in range(3))) == []


def test_import_with_branches_shares_the_prefixes_and_again_adds_nothing(tmp_path: Path) -> None:
    path = session(tmp_path)
    store = tmp_path / "s.db"
    runner = CliRunner()
    done = runner.invoke(main, ["import", str(path), "--store", str(store), "--branches", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert (report["conversation"], report["added"]) == ("tree", 4)
    assert report["branches"] == [
        {"name": "tree@b2", "parent": "tree", "fork_seq": 1, "messages": 3, "added": 2, "kind": "branch", "note": ""},
        {"name": "tree@c1", "parent": "tree@b2", "fork_seq": 2, "messages": 3, "added": 1, "kind": "branch", "note": ""},
    ]
    listed = {c.name: (c.parent, c.fork_seq, c.messages, c.own_messages) for c in list_conversations(str(store))}
    assert listed == {"tree": (None, None, 4, 4), "tree@b2": ("tree", 1, 3, 2), "tree@c1": ("tree@b2", 2, 3, 1)}
    with open_store(str(store), conversation="tree@c1") as branch:
        assert [m.text() for m in branch.messages()] == ["fix the parser", "I patched one line", "explain the patch"]
        assert int(branch._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]) == 7  # 4 + 2 + 1: none twice
    for name in listed:
        with open_store(str(store), conversation=name) as opened:
            assert compile_request(opened, Recipe(budget_tokens=4000)).total_messages == listed[name][2]
    again = runner.invoke(main, ["import", str(path), "--store", str(store), "--branches", "--json"])
    assert again.exit_code == 0, again.output
    assert [b["added"] for b in json.loads(again.output)["branches"]] == [0, 0]
    assert json.loads(again.output)["added"] == 0
    text = runner.invoke(main, ["import", str(path), "--store", str(store), "--branches"])
    assert "branch tree@c1: from 'tree@b2' at message 2, 3 messages, 0 added" in text.output
