"""The store as an interface: the protocol, an existing connection, a SQL tracer, compaction events."""

from __future__ import annotations

import inspect
import re
import sqlite3
import typing
from pathlib import Path

import pytest
from store_backends import every_backend_location, every_backend_store  # noqa: F401  (fixtures over every backend)

import compaction
from compaction import Message, Store, StoreError
from compaction.store import (
    CompactionEvent,
    HistoryStore,
    ImageFact,
    MessageFacts,
    SQLiteStore,
    StoredSummary,
)
from compaction.store.factory import open_store
from compaction.store.postgres import PostgresStore

PACKAGE = Path(compaction.__file__).parent
#: The modules that take a store; everything they call on it must be in the protocol.
USERS = ("compile.py", "compactor.py", "pipeline.py", "cli.py")
DUNDERS = ("__len__", "__enter__", "__exit__")


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


def protocol_members() -> set[str]:
    names = {
        n for n, v in vars(HistoryStore).items() if callable(v) and (not n.startswith("_") or n in DUNDERS)
    }
    return names | set(typing.get_type_hints(HistoryStore))


def test_public_names_still_import() -> None:
    from compaction.store import ImageFact as Image
    from compaction.store import MessageFacts as Facts
    from compaction.store import Store as PublicStore
    from compaction.store import StoredSummary as Summary

    assert PublicStore is SQLiteStore is compaction.Store
    assert (Image, Facts, Summary) == (ImageFact, MessageFacts, StoredSummary)


@pytest.mark.parametrize("backend", [SQLiteStore, PostgresStore], ids=["sqlite", "postgres"])
def test_each_backend_has_every_protocol_member_with_the_same_signature(backend: type) -> None:
    members = protocol_members()
    assert {
        "path",
        "encoding",
        "append",
        "facts",
        "summaries",
        "record_event",
        "events",
        "__len__",
    } <= members
    for name in sorted(members - set(typing.get_type_hints(HistoryStore))):  # the methods, not path, encoding...
        declared, implemented = getattr(HistoryStore, name), getattr(backend, name)
        want, got = inspect.signature(declared), inspect.signature(implemented)
        assert [(p.name, p.kind, p.default) for p in want.parameters.values()] == [
            (p.name, p.kind, p.default) for p in got.parameters.values()
        ], name
        if name == "__enter__":
            continue  # returns the store's own type
        want_hints, got_hints = typing.get_type_hints(declared), typing.get_type_hints(implemented)
        assert want_hints == got_hints, name


@pytest.mark.parametrize("where", ["memory", "file"])
def test_a_store_is_a_history_store(where: str, tmp_path: Path) -> None:
    with Store(":memory:" if where == "memory" else tmp_path / "s.sqlite") as store:
        assert isinstance(store, HistoryStore)
        assert store.path == (":memory:" if where == "memory" else str(tmp_path / "s.sqlite"))
    assert not isinstance(object(), HistoryStore)


def test_a_store_opened_by_its_location_is_a_history_store_named_by_it(location: str) -> None:
    with open_store(location) as store:
        assert isinstance(store, HistoryStore)
        assert store.path == location  # no password in the test URL; parse_store_url masks one
        assert isinstance(store, SQLiteStore if "://" not in location else PostgresStore)


def test_everything_the_package_calls_on_a_store_is_in_the_protocol() -> None:
    called: set[str] = set()
    for module in USERS:
        # (?<![.\w]): a call on a store object, not a module path such as ``from .store.factory``
        called |= set(re.findall(r"(?<![.\w])store\.([a-z_]+)\b", (PACKAGE / module).read_text(encoding="utf-8")))
    assert called, "no store calls found: has a module been renamed?"
    assert called <= protocol_members(), f"add to HistoryStore: {sorted(called - protocol_members())}"


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "implicit-transactions"])
def test_a_store_over_an_existing_connection_commits_and_leaves_it_open(
    autocommit: bool, tmp_path: Path
) -> None:
    path = tmp_path / "shared.sqlite"
    conn = sqlite3.connect(path, isolation_level=None) if autocommit else sqlite3.connect(path)
    try:
        with SQLiteStore(connection=conn) as store:
            assert store.path == str(path)
            assert store.append([text("user", "hello"), text("assistant", "hi")]) == 2
            store.add_summary(1, 0, 2, "Asked:\n- hello", {"summarizer": "test"})
            store.record_failure(1, 0, 1, "refused")
            assert [f.text_tokens > 0 for f in store.facts(encoding="cl100k_base")] == [True, True]
            assert not conn.in_transaction  # every write committed, none left open
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (2,)  # still open
        other = sqlite3.connect(path)
        try:  # committed: another connection sees it all
            assert other.execute("SELECT COUNT(*) FROM summaries").fetchone() == (1,)
            assert other.execute("SELECT COUNT(*) FROM token_counts").fetchone() == (4,)
        finally:
            other.close()
    finally:
        conn.close()


def test_a_store_on_a_connection_joins_the_callers_transaction(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "tx.sqlite", isolation_level=None)
    try:
        store = SQLiteStore(connection=conn)
        store.append([text("user", "kept")])
        conn.execute("BEGIN")
        assert store.append([text("assistant", "undone")]) == 1
        store.add_summary(1, 0, 2, "undone too", {})
        assert len(store) == 2 and conn.in_transaction  # the caller decides
        conn.execute("ROLLBACK")
        assert [m.text() for m in store.messages()] == ["kept"] and store.summaries() == []
        store.close()
    finally:
        conn.close()


def test_a_memory_connection_and_a_path_together_are_refused() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        with SQLiteStore(connection=conn) as store:
            assert store.path == ":memory:" and len(store) == 0
        with pytest.raises(TypeError, match="path or a connection"):
            SQLiteStore("x.sqlite", connection=conn)
    finally:
        conn.close()


def test_a_connection_to_something_that_is_not_a_store_is_a_store_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite at all" * 100)
    conn = sqlite3.connect(junk)
    try:
        with pytest.raises(StoreError, match="cannot open as a compaction store"):
            SQLiteStore(connection=conn)
        conn.execute("SELECT 1")  # not closed by the store
    finally:
        conn.close()


def test_the_tracer_sees_every_statement() -> None:
    seen: list[str] = []
    with Store(":memory:", tracer=seen.append) as store:
        assert any("CREATE TABLE IF NOT EXISTS schema_migrations" in s for s in seen)
        opened = len(seen)
        store.append([text("user", "hello")])
        wrote = seen[opened:]
        assert wrote[0] == "BEGIN IMMEDIATE" and wrote[-1] == "COMMIT"
        assert any(s.startswith("INSERT INTO messages") for s in wrote)
        assert any(s.startswith("INSERT OR REPLACE INTO token_counts") for s in wrote)
        store.summaries(level=1)
        assert seen[-1].startswith("SELECT id, level, start_seq") and seen[-1].endswith(
            "ORDER BY level, start_seq"
        )


def test_closing_removes_the_tracer_from_a_connection_it_was_given() -> None:
    conn = sqlite3.connect(":memory:")
    seen: list[str] = []
    try:
        SQLiteStore(connection=conn, tracer=seen.append).close()
        count = len(seen)
        conn.execute("SELECT 42")
        assert len(seen) == count > 0
    finally:
        conn.close()


def test_compaction_events_round_trip(store: Store) -> None:
    assert store.events() == []
    first = store.record_event(12_000, 3_500, 4_000, {"summaries_added": {"1": 3}})
    second = store.record_event(3_600, 3_600)
    events = store.events()
    assert [e.id for e in events] == [first, second] and first < second
    assert all(isinstance(e, CompactionEvent) for e in events)
    assert (events[0].tokens_before, events[0].tokens_after, events[0].budget) == (12_000, 3_500, 4_000)
    assert events[0].detail == {"summaries_added": {"1": 3}}
    assert (events[1].budget, events[1].detail) == (None, {})
    assert events[0].created_at <= events[1].created_at
    with pytest.raises(StoreError, match="0 or more"):
        store.record_event(-1, 10)
    assert len(store.events()) == 2


def test_compaction_events_survive_a_reopen(location: str) -> None:
    with open_store(location) as store:
        store.record_event(100, 50, 60)
        recorded = store.events()
    with open_store(location, create=False) as store:
        assert store.events() == recorded
