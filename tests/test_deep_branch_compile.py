"""A branch hundreds of conversations deep compiles, and its summaries are the ones the rule shows.

Each nested rewind of ``import --branches`` forks the one before, so sessions of many nested
rewinds give lineages hundreds deep.  ``Lineage.summaries(shadowed=True)`` once added one
``NOT EXISTS`` probe per nearer conversation for every ancestor (quadratic in depth): a branch
400 deep failed on SQLite with ``too many references to "summaries": max 65535`` and 1,500 deep
with ``too many SQL variables``.  The condition now holds one probe over a ``VALUES`` table of
the lineage; here it is checked against a plain Python model of the rule over generated fork
chains (:mod:`compaction.store.lineage` states the rule), and at depth 1,500.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import BACKENDS, admin_connection, branch_chain

from compaction import Message, Recipe, compile_request
from compaction.store import open_store
from compaction.store.lineage import Lineage, lineage_of

#: (id, conversation id, level, start seq, end seq) of one stored summary.
Row = tuple[int, int, int, int, int]


def _text(role: str, text: str) -> Message:
    return Message(role=role, content=[{"type": "text", "text": text}])


def test_a_branch_400_deep_compiles(tmp_path: Path) -> None:
    """Each 50th conversation summarizes what it shows past the frontier, so the deepest shows 8 summaries."""
    location = str(tmp_path / "deep.db")
    name = branch_chain(location, 400)
    with open_store(location, conversation=name) as store:
        store.append([_text("user", "last")])
        request = compile_request(store, Recipe(budget_tokens=200_000))
        assert len(store.messages()) == 402
        assert [m.content[0]["text"] for m in store.messages()][-2:] == ["a400", "last"]
        assert [(s.start_seq, s.end_seq) for s in store.summaries(1)] == [(0, 51)] + [
            (n, n + 50) for n in range(51, 401, 50)
        ]
        assert store.summary_frontier(1) == 401
        assert request.tokens > 0


def _model(lineage: Lineage, rows: list[Row], shadowed: bool) -> set[int]:
    """The summaries ``lineage`` shows, by the rule of :meth:`Lineage.summaries`, in plain Python.

    A summary kept with the segment at depth ``d`` (0: the conversation itself) is a candidate
    when it ends by the seq where the lineage leaves that conversation (any, at depth 0); it is
    shown when, with ``shadowed``, no candidate of a lower depth has the same or a lower level
    and overlaps it.
    """
    depth_of = {seg.conversation_id: d for d, seg in enumerate(lineage.segments)}

    def candidate(row: Row) -> bool:
        _id, cid, _level, _start, end = row
        if cid not in depth_of:
            return False
        stop = lineage.segments[depth_of[cid]].end
        return stop is None or end <= stop

    candidates = [row for row in rows if candidate(row)]
    shown = set()
    for row in candidates:
        ident, cid, level, start, end = row
        hidden = shadowed and any(
            depth_of[o_cid] < depth_of[cid] and o_level <= level and o_start < end and o_end > start
            for _o, o_cid, o_level, o_start, o_end in candidates
        )
        if not hidden:
            shown.add(ident)
    return shown


_TABLE = (
    "CREATE {temp} TABLE summaries (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL,"
    " level INTEGER NOT NULL, start_seq BIGINT NOT NULL, end_seq BIGINT NOT NULL)"
)


def _shown(backend: str, lineage: Lineage, rows: list[Row], shadowed: bool) -> set[int]:
    """The ids ``Lineage.summaries`` selects from ``rows`` on ``backend`` (``sqlite`` or ``postgres``).

    PostgreSQL: a temporary ``summaries`` table (it hides any other of that name) in one
    transaction of the shared test connection, rolled back after.
    """
    if backend == "sqlite":
        db = sqlite3.connect(":memory:")
        db.execute(_TABLE.format(temp=""))
        db.execute("CREATE INDEX summaries_by_conversation ON summaries (conversation_id, level, end_seq)")
        db.executemany("INSERT INTO summaries VALUES (?, ?, ?, ?, ?)", rows)
        where, args = lineage.summaries(shadowed=shadowed)
        found = {int(r[0]) for r in db.execute(f"SELECT id FROM summaries WHERE {where}", args)}
        db.close()
        return found
    connection = admin_connection()
    with connection.transaction(force_rollback=True):
        connection.execute(_TABLE.format(temp="TEMPORARY") + " ON COMMIT DROP")
        with connection.cursor() as cursor:
            cursor.executemany("INSERT INTO summaries VALUES (%s, %s, %s, %s, %s)", rows)
        where, args = lineage.summaries(mark="%s", shadowed=shadowed)
        return {
            int(r[0]) for r in connection.execute(f"SELECT id FROM summaries WHERE {where}", args).fetchall()
        }


@st.composite
def _chains(draw: st.DrawFn) -> tuple[Lineage, list[Row]]:
    """A chain of 1 to 8 conversations, each forking the one before, and summaries kept with them.

    The forks are anywhere (a branch may fork below its parent's own rows) or, half the time,
    in increasing order.

    Conversation ``n`` (not in the chain) keeps some too: the lineage must never show them.
    """
    n = draw(st.integers(1, 8))
    forks = draw(st.lists(st.integers(0, 12), min_size=n - 1, max_size=n - 1))
    if draw(st.booleans()):
        forks.sort()  # each forks past its parent's fork: every ancestor keeps some rows seen
    tree: dict[int, tuple[int | None, int | None]] = {0: (None, None)}
    for cid in range(1, n):
        tree[cid] = (cid - 1, forks[cid - 1])
    tree[n] = (0, draw(st.integers(0, 12)))  # a sibling branch off the root
    spans = st.tuples(st.integers(0, n), st.integers(1, 3), st.integers(0, 14), st.integers(1, 6))
    drawn = draw(st.lists(spans, max_size=14))
    rows = [(i + 1, cid, level, start, start + length) for i, (cid, level, start, length) in enumerate(drawn)]
    return lineage_of(n - 1, tree), rows


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chain=_chains(), shadowed=st.booleans())
def test_the_summaries_a_fork_chain_shows_are_the_models(
    backend: str, chain: tuple[Lineage, list[Row]], shadowed: bool
) -> None:
    lineage, rows = chain
    assert _shown(backend, lineage, rows, shadowed) == _model(lineage, rows, shadowed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lineage_1500_deep_shows_the_models_summaries(backend: str) -> None:
    depth = 1500
    tree: dict[int, tuple[int | None, int | None]] = {0: (None, None)}
    for cid in range(1, depth):
        tree[cid] = (cid - 1, 2 * cid)  # conversation c holds seqs [2c, 2c + 2) of the deepest
    lineage = lineage_of(depth - 1, tree)
    rows: list[Row] = []
    for cid in range(0, depth, 3):  # each third conversation summarizes its own two messages
        rows.append((len(rows) + 1, cid, 1, 2 * cid, 2 * cid + 2))
    rows.append((len(rows) + 1, 1400, 1, 0, 2802))  # a near summary of nearly everything: hides those before
    rows.append((len(rows) + 1, 1400, 2, 0, 2802))
    rows.append((len(rows) + 1, 3, 2, 0, 8))  # a merge behind it, hidden by its level-1 cover
    shown = _shown(backend, lineage, rows, True)
    assert shown == _model(lineage, rows, True)
    assert len(shown) == 2 + len(range(1401, depth, 3))  # the near pair and those after it
