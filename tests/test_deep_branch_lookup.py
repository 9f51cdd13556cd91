"""A lookup by import key in a lineage sees exactly the rows :meth:`Lineage.rows` selects, at any depth.

``AppendRows.seq_of`` once asked for ``import_key = ? AND`` the lineage's ``OR`` of one seq
range per conversation, which SQLite planned in time quadratic in the depth (an append
looks up one or two keys per message, so a chain of branches 800 deep took minutes to
build).  It now selects ``conversation_id IN (...)`` (:meth:`Lineage.keyed`) and keeps the
rows :meth:`Lineage.sees`; here both are checked against :meth:`Lineage.rows` on generated
fork trees, and a 900-deep chain finds its keys.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import Message
from compaction.store import lineage as lineage_module
from compaction.store import open_store
from compaction.store.lineage import Lineage, lineage_of


@st.composite
def _trees(draw: st.DrawFn) -> tuple[Lineage, list[tuple[int, int]]]:
    """A tree of 1 to 10 conversations (each forks an earlier one anywhere) and rows kept with them."""
    n = draw(st.integers(1, 10))
    tree: dict[int, tuple[int | None, int | None]] = {0: (None, None)}
    for cid in range(1, n):
        tree[cid] = (draw(st.integers(0, cid - 1)), draw(st.integers(0, 12)))
    rows = draw(st.lists(st.tuples(st.integers(0, n), st.integers(0, 16)), unique=True, max_size=60))
    return lineage_of(draw(st.integers(0, n - 1)), tree), rows


@settings(max_examples=300, deadline=None)
@given(drawn=_trees())
def test_keyed_and_sees_select_what_rows_selects(drawn: tuple[Lineage, list[tuple[int, int]]]) -> None:
    lineage, rows = drawn
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE messages (conversation_id INTEGER, seq INTEGER, PRIMARY KEY (conversation_id, seq))"
    )
    db.executemany("INSERT INTO messages VALUES (?, ?)", rows)
    where, args = lineage.rows()
    shown = set(db.execute(f"SELECT conversation_id, seq FROM messages WHERE {where}", args).fetchall())
    keyed = db.execute(f"SELECT conversation_id, seq FROM messages WHERE {lineage.keyed()}").fetchall()
    assert {(c, s) for c, s in keyed if lineage.sees(c, s)} == shown
    assert {(c, s) for c, s in rows if lineage.sees(c, s)} == shown
    db.close()


@settings(max_examples=300, deadline=None)
@given(drawn=_trees(), start=st.integers(0, 18), length=st.integers(0, 6))
def test_a_ranged_rows_condition_selects_the_same_rows_in_its_range(
    drawn: tuple[Lineage, list[tuple[int, int]]], start: int, length: int
) -> None:
    lineage, rows = drawn
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE messages (conversation_id INTEGER, seq INTEGER, PRIMARY KEY (conversation_id, seq))"
    )
    db.executemany("INSERT INTO messages VALUES (?, ?)", rows)
    window = f"seq >= {start} AND seq < {start + length}"

    def selected(where: str) -> set[tuple[int, int]]:
        return set(
            db.execute(f"SELECT conversation_id, seq FROM messages WHERE {where} AND {window}").fetchall()
        )

    assert selected(lineage.rows(start=start, end=start + length)[0]) == selected(lineage.rows()[0])
    db.close()


def test_a_chain_900_deep_finds_each_message_by_its_key(tmp_path: Path) -> None:
    """Each branch appends one message; the deepest then re-appends the whole history: nothing is added."""
    location = str(tmp_path / "chain.db")
    history = [Message(role="user", content=[{"type": "text", "text": "root"}])]
    with open_store(location, conversation="c0", create=True) as store:
        assert store.append(history, chain_seed="t") == 1
        store.branch("c1", 1)
    for depth in range(1, 900):
        history.append(Message(role="assistant", content=[{"type": "text", "text": f"a{depth}"}]))
        with open_store(location, conversation=f"c{depth}") as store:
            assert store.append(history[-1:]) == 1  # goes on with the chain of the shared rows
            store.branch(f"c{depth + 1}", depth + 1)
    with open_store(location, conversation="c899") as store:
        assert store.append(history, chain_seed="t") == 0  # each of the 900 found in its own conversation
        assert [m.content[0]["text"] for m in store.messages()] == ["root"] + [f"a{d}" for d in range(1, 900)]
    with open_store(location, conversation="c450") as store:
        assert store.append(history, chain_seed="t") == 449  # the rows past its fork are c451's on: not seen


def test_a_branch_builds_its_conditions_once_however_often_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 60-deep branch read 20 times joins its lineage's conditions once each (rows, summaries)."""
    location = str(tmp_path / "chain.db")
    with open_store(location, conversation="c0", create=True) as store:
        store.append([Message(role="user", content=[{"type": "text", "text": "root"}])])
        store.branch("c1", 1)
    for depth in range(1, 60):
        with open_store(location, conversation=f"c{depth}") as store:
            store.append([Message(role="assistant", content=[{"type": "text", "text": f"a{depth}"}])])
            if depth == 30:
                store.add_summary(1, 0, 31, "the first 31 messages", {})
            store.branch(f"c{depth + 1}", depth + 1)
    built: list[list[str]] = []
    joined = lineage_module._joined

    def counting(parts: list[str], operator: str) -> str:
        built.append(parts)
        return joined(parts, operator)

    stored: list[tuple[str, ...]] = []

    class Remembered(dict):  # type: ignore[type-arg]  # a lineage's built conditions, counted as stored
        def __setitem__(self, key: tuple[str, ...], value: str) -> None:
            stored.append(key)
            super().__setitem__(key, value)

    with open_store(location, conversation="c59") as store:
        monkeypatch.setattr(lineage_module, "_joined", counting)
        store._refresh()
        store._lineage.__dict__["_conditions"] = Remembered(store._lineage.__dict__.get("_conditions", {}))
        for _ in range(20):
            assert len(store.messages()) == 60
            assert [(s.start_seq, s.end_seq) for s in store.summaries()] == [(0, 31)]
    # the rows: the condition of a term per conversation (PostgreSQL) or, on SQLite, the lineage
    # joined as a VALUES table (Lineage.rows_join, since session 15), built once either way
    rows_built = sum(1 for parts in built if len(parts) == 60)
    joins_built = sum(1 for key in stored if key[0] == "join")
    assert rows_built + joins_built == 1, (rows_built, joins_built)
    shadowing = [parts for parts in built if len(parts) == 2 and "NOT EXISTS" in parts[1]]
    assert len(shadowing) == 1  # the summaries condition: its own part and its ancestors'
