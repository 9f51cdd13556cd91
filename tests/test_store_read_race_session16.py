"""A read of a branch while other store objects append: its rows and its bound are one state.

``test_store_sqlite_claim``'s parent-and-branch test failed once (a worker on the branch
left ``StopIteration`` out of SQLite's ``_check_dense``; /tmp/s15deep/t1.log, during the
edits of 2cf065c).  A read took its rows in one statement and the range it checked them
against (``next_seq()``) in another, each seeing the store as it was when it started: an
append by another connection between the two made a read past the newest message expect
rows its own statement could not see ("message 52 is missing from the store").  Here the
appends are put between the statements of one read, deterministically: another object on
the same branch, the parent past the fork, a sibling branch.  A read returns the rows of
one state of the store, before or after the append, and never fails.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import BACKENDS, store_location
from test_store_postgres_processes import turns

from compaction import Message
from compaction.store.factory import open_store

#: The store calls each read makes, as (name, start, end).
READS = (
    ("messages", 40, 200),
    ("messages", 30, 60),
    ("messages", 0, None),
    ("facts", 40, 200),
    ("facts", 0, None),
    ("prompt_seqs", 40, 200),
)
#: The writers: which conversation appends between the reader's statements.
WRITERS = ("alt", "main", "sibling")
FORK = 40


class Interleaved:
    """A store's connection that runs ``before(n)`` ahead of its ``n``-th statement (1-based)."""

    def __init__(self, connection: Any, before: Callable[[int], None]) -> None:
        self._connection = connection
        self._before = before
        self.statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        self._before(self.statements)
        return self._connection.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def _batch(tag: str, count: int) -> list[Message]:
    return [m for turn in turns(tag, count) for m in turn]


@contextmanager
def _stores(location: str) -> Iterator[dict[str, Any]]:
    """Yield store objects on ``location``: main (80 messages), alt (forked at 40, 8 of its own), sibling."""
    with open_store(location, conversation="main") as main:
        main.append(_batch("P", 20))
        main.branch("alt", FORK)
        main.branch("sibling", FORK)
    opened = {name: open_store(location, conversation=name) for name in ("reader", *WRITERS)}
    opened["reader"].scope_to("alt", create=False)
    opened["alt"].append(_batch("B", 2))
    try:
        yield opened
    finally:
        for store in opened.values():
            store.close()


def _read_once(
    stores: dict[str, Any], read: tuple[str, int, int | None], writer: str, at: int, turns_added: int
) -> None:
    """Append ``turns_added`` turns with ``writer`` before statement ``at`` of the reader's ``read``; check it."""
    reader, name, start, end = stores["reader"], *read
    before_count = reader.next_seq()
    fired: list[int] = []

    def append(statement: int) -> None:
        if statement == at and not fired:
            fired.append(stores[writer].append(_batch(f"W{writer}{at}{before_count}", turns_added)))

    connection = reader._db
    reader._db = Interleaved(connection, append)
    try:
        got = getattr(reader, name)(start, end)
    finally:
        reader._db = connection
    after_count = reader.next_seq()
    assert fired, f"the read ran fewer than {at} statements"
    assert after_count == before_count + (fired[0] if writer == "alt" else 0)
    stop = 200 if end is None else end
    states = (before_count, after_count)  # the branch's length before and after the append
    if name == "prompt_seqs":
        assert got in [reader.prompt_seqs(start, min(stop, n)) for n in states], (read, writer, at, got)
        return
    seqs = [m.seq for m in got]
    assert seqs in [list(range(start, min(stop, n))) for n in states], (read, writer, at, seqs, states)
    fresh = reader.messages(start, start + len(seqs))
    if name == "messages":
        assert got == fresh  # the rows a read of that range gives now
    else:
        assert [(f.seq, f.role) for f in got] == [(m.seq, m.role) for m in fresh]
    for message in fresh:  # the branch's own past the fork, the parent's before it: nobody else's
        text = repr(message.content)
        tag = "[P:" if message.seq is not None and message.seq < FORK else ("[B:", "[Walt")
        assert any(t in text for t in ((tag,) if isinstance(tag, str) else tag)), (message.seq, text[:80])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("read", READS, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_an_append_between_any_two_statements_of_a_branch_read_leaves_it_one_state(
    backend: str, read: tuple[str, int, int | None], tmp_path: Path
) -> None:
    """Before the fix, on SQLite: an append to the branch between the rows and the bound of
    ``messages(40, 200)`` raised 'message 52 is missing from the store' (as did ``messages(30, 60)``,
    ``facts(40, 200)``; ``prompt_seqs`` has no check and passed)."""
    with store_location(backend, tmp_path) as location, _stores(location) as stores:
        probe = Interleaved(stores["reader"]._db, lambda _n: None)
        stores["reader"]._db, connection = probe, stores["reader"]._db
        getattr(stores["reader"], read[0])(read[1], read[2])
        stores["reader"]._db = connection
        for writer in WRITERS:
            for at in range(1, probe.statements + 1):
                _read_once(stores, read, writer, at, 1)


def test_a_branch_read_past_its_newest_message_with_an_append_after_its_rows_is_not_a_missing_message(
    tmp_path: Path,
) -> None:
    """The case the old code failed: the rows of [40, 200) read (8 of the branch's), then
    another object on the branch appends 4, then the range was checked against the newest
    message as it was then (52): 'message 48 is missing'.  Now the 8 rows of one state."""
    location = str(tmp_path / "s.sqlite")
    with _stores(location) as stores:
        reader = stores["reader"]
        connection = reader._db
        rows_read: list[int] = []

        def after_the_rows(statement: int) -> None:
            if rows_read and len(rows_read) == 1:
                rows_read.append(stores["alt"].append(_batch("late", 1)))

        def tracing(*args: Any, **kwargs: Any) -> Any:
            after_the_rows(0)
            out = connection.execute(*args, **kwargs)
            if "FROM messages m" in str(args[0]) and not rows_read:
                rows_read.append(0)
            return out

        reader._db = Interleaved(connection, lambda _n: None)
        reader._db.execute = tracing  # type: ignore[method-assign]
        try:
            got = reader.messages(40, 200)
        finally:
            reader._db = connection
        assert rows_read == [0, 4]  # the append ran after the row read, inside the read
        assert [m.seq for m in got] == list(range(40, 48))
        assert reader.next_seq() == 52
        assert [m.seq for m in reader.messages(40, 200)] == list(range(40, 52))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    read=st.sampled_from(READS),
    writer=st.sampled_from(WRITERS),
    at=st.integers(1, 6),
    turns_added=st.integers(1, 3),
    reads=st.integers(1, 3),
)
def test_reads_of_a_branch_see_one_state_whatever_appends_interleave(
    read: tuple[str, int, int | None], writer: str, at: int, turns_added: int, reads: int
) -> None:
    """Invariant (SQLite file): a branch's read returns the rows of one state of the store,
    dense from its start, none of another conversation's past the fork, and raises nothing,
    whichever conversation appends before whichever statement of the read."""
    with tempfile.TemporaryDirectory() as directory, _stores(str(Path(directory) / "s.sqlite")) as stores:
        for _ in range(reads):
            probe = Interleaved(stores["reader"]._db, lambda _n: None)
            stores["reader"]._db, connection = probe, stores["reader"]._db
            getattr(stores["reader"], read[0])(read[1], read[2])
            stores["reader"]._db = connection
            _read_once(stores, read, writer, min(at, probe.statements), turns_added)
