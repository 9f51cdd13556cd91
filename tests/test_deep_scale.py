"""A lineage read in one walk up the table: what keeps opening a deep branch cheap.

Opening a conversation reads its lineage with one recursive query that works out each
segment's seqs (:data:`compaction.store.lineage.LINEAGE_WALK`), and each row becomes a
:class:`~compaction.store.lineage.Segment` as it comes
(:func:`~compaction.store.lineage.lineage_from_walk`), instead of a dictionary of the
ancestors walked in Python (:func:`~compaction.store.lineage.lineage_of`).  These tests hold
the walk to :func:`lineage_of` over the whole ``conversations`` table, on both backends.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import BACKENDS, store_location

from compaction.errors import InvalidArgument, StoreError
from compaction.store import open_store
from compaction.store.lineage import Segment, lineage_from_walk, lineage_of

Tree = dict[int, tuple[int | None, int | None]]


@st.composite
def forests(draw: st.DrawFn) -> Tree:
    """Conversations 0..n-1 of a store: 0 a root, each later one a root or a branch of an earlier one
    forked anywhere (below, at or past its parent's own fork, so some segments are empty)."""
    count = draw(st.integers(1, 30))
    tree: Tree = {0: (None, None)}
    for cid in range(1, count):
        if draw(st.integers(0, 4)) > 0:
            tree[cid] = (draw(st.integers(max(0, cid - 6), cid - 1)), draw(st.integers(0, 40)))
        else:
            tree[cid] = (None, None)
    return tree


def _insert(store: Any, tree: Tree, base: int) -> None:
    """Store ``tree``'s conversations as rows of ``conversations``, ids offset by ``base``."""
    m = store._mark
    with store._write():
        for cid, (parent, fork) in sorted(tree.items()):
            store._db.execute(
                f"INSERT INTO conversations (id, name, parent_id, fork_seq, created_at) VALUES ({m}, {m}, {m}, {m}, {m})",
                (base + cid, f"t{base + cid}", None if parent is None else base + parent, fork, time.time()),
            )


def _shifted(tree: Tree, base: int) -> Tree:
    return {base + c: (None if p is None else base + p, f) for c, (p, f) in tree.items()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lineage_walked_up_the_table_is_the_one_made_from_the_whole_tree(backend: str, tmp_path: Path) -> None:
    with store_location(backend, tmp_path) as location, open_store(location, conversation="seed") as store:
        bases = itertools.count(1000, 1000)  # each example's conversations apart from the others'

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(forests())
        def check(tree: Tree) -> None:
            base = next(bases)
            _insert(store, tree, base)
            whole = _shifted(tree, base)
            for cid in whole:
                store.__dict__.pop("_lineages", None)  # read from the table, not kept from before
                walked = store._lineage_of(cid)
                assert walked == lineage_of(cid, whole)
                # the same rows as the old query's tree gives, segment for segment
                assert all(isinstance(seg, Segment) for seg in walked.segments)

        check()


@pytest.mark.parametrize("backend", BACKENDS)
def test_opening_a_branch_1200_deep_shows_its_whole_lineage(backend: str, tmp_path: Path) -> None:
    # forks alternate between a conversation's own start and past it, so half the segments
    # are empty: the walk keeps them, as lineage_of does (the rows are conversations only)
    tree: Tree = {0: (None, None)}
    for cid in range(1, 1201):
        tree[cid] = (cid - 1, cid if cid % 2 else cid - 1)
    with store_location(backend, tmp_path) as location:
        with open_store(location, conversation="seed") as store:
            _insert(store, tree, 10)
        with open_store(location, create=False, conversation="t1210") as deepest:
            expected = lineage_of(1210, _shifted(tree, 10))
            assert list(deepest.lineage()) == [(s.conversation_id, s.start, s.end) for s in expected.segments]
            assert len(expected.segments) == 1201
            assert deepest._lineage.segments[-1] == Segment(10, 0, 1)  # the root's, ending at the first fork


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_table_whose_parents_form_a_cycle_is_named_not_walked_forever(backend: str, tmp_path: Path) -> None:
    with store_location(backend, tmp_path) as location:
        with open_store(location, conversation="seed") as store:
            _insert(store, {0: (None, None), 1: (0, 3), 2: (1, 5)}, 10)
            m = store._mark
            with store._write():  # damage it: 10's parent is now 11, whose parent is 10
                store._db.execute(f"UPDATE conversations SET parent_id = {m}, fork_seq = 1 WHERE id = {m}", (11, 10))
            store.__dict__.pop("_lineages", None)
            with pytest.raises(InvalidArgument, match="conversation 12: its parents form a cycle"):
                store._lineage_of(12)
        with pytest.raises((StoreError, InvalidArgument), match="cycle"):
            open_store(location, create=False, conversation="t12").close()


def test_a_walk_that_ends_below_a_root_or_holds_nothing_is_refused() -> None:
    assert lineage_from_walk(5, [(5, 4, 7, None), (4, None, 0, 7)]).segments == (
        Segment(5, 7, None),
        Segment(4, 0, 7),
    )
    with pytest.raises(InvalidArgument, match="conversation 5: its parents form a cycle or name a missing one"):
        lineage_from_walk(5, [(5, 4, 7, None)])  # 4 is not in the table
    with pytest.raises(InvalidArgument, match="conversation 5"):
        lineage_from_walk(5, [])  # no conversation 5


@st.composite
def tables(draw: st.DrawFn) -> tuple[Tree, list[tuple[int, int]]]:
    """A forest of conversations and message rows ``(conversation, seq)``: each holds rows from its
    fork (0 for a root) on, some past where its branches leave it."""
    tree = draw(forests())
    rows = []
    for cid, (_parent, fork) in tree.items():
        first = 0 if fork is None else fork
        rows += [(cid, seq) for seq in range(first, first + draw(st.integers(0, 12)))]
    return tree, rows


@settings(max_examples=150, deadline=None)
@given(tables(), st.integers(-2, 60), st.integers(0, 60), st.booleans())
def test_a_lineage_joined_as_a_table_selects_the_rows_its_condition_selects(
    table: tuple[Tree, list[tuple[int, int]]], start: int, length: int, ranged: bool
) -> None:
    import sqlite3

    tree, rows = table
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE messages (conversation_id INTEGER, seq INTEGER, PRIMARY KEY (conversation_id, seq))")
    db.executemany("INSERT INTO messages VALUES (?, ?)", rows)
    end = start + length
    for cid in tree:
        lineage = lineage_of(cid, tree)
        bounds = (start, end) if ranged else (None, None)
        where, args = lineage.rows("m.", "?", *bounds)
        old = db.execute(
            f"SELECT m.conversation_id, m.seq FROM messages m WHERE {where} AND m.seq >= ? AND m.seq < ? ORDER BY m.seq",
            (*args, start, end),
        ).fetchall()
        new = db.execute(
            f"SELECT m.conversation_id, m.seq FROM messages m {lineage.rows_join('m.', *bounds)}"
            " WHERE m.seq >= ? AND m.seq < ? ORDER BY m.seq",
            (start, end),
        ).fetchall()
        assert new == old
        # each seq in range once at most, from the conversation the lineage says holds it
        assert all(lineage.owner(seq) == owner for owner, seq in new)
