"""Schema migrations: a store written by the first release opens, upgrades in place and loses nothing.

``tests/data/store_v1.sqlite`` was written by the release at commit 023d65e (schema version 1:
``meta.schema_version = 1``, no ``schema_migrations`` table), before the store became a package:

    compaction import tests/data/cases/image-in-mixed-tool-round.json --store s.sqlite
    compaction import tests/data/cases/screenshot-pricing.json --store s.sqlite
    compaction import tests/data/cases/url-image-text-only.json --store s.sqlite
    compaction import examples/claude-code/claude-code-log__representative_messages.jsonl --store s.sqlite
    compaction compress --store s.sqlite --recipe r.toml --keep-tail-tokens 300
        # r.toml: chunk_target_tokens = 300, chunk_min_messages = 2, merge_fanout = 2
    compaction stats --store s.sqlite --recipe cl.toml     # cl.toml: encoding = "cl100k_base"
    Store("s.sqlite").record_failure(1, 28, 31, "summarizer refused: ...")   # (v1 API)

then ``PRAGMA wal_checkpoint(TRUNCATE)``, ``PRAGMA journal_mode = DELETE`` and ``VACUUM``, so
the one file holds everything.  It has 33 messages (two base64 PNG blobs, a URL image),
token counts in o200k_base and cl100k_base, 10 summaries on levels 1-3 and one failure.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from compaction import Message, Recipe, Store, StoreError, compile_request
from compaction.pipeline import import_transcript
from compaction.store import SCHEMA_VERSION, SQLiteStore
from compaction.store.ingest import count_text_tokens
from compaction.store.migrations import MIGRATIONS

TESTS = Path(__file__).parent
V1_FIXTURE = TESTS / "data" / "store_v1.sqlite"
V1_SOURCES = [
    TESTS / "data" / "cases" / "image-in-mixed-tool-round.json",
    TESTS / "data" / "cases" / "screenshot-pricing.json",
    TESTS / "data" / "cases" / "url-image-text-only.json",
    TESTS.parent / "examples" / "claude-code" / "claude-code-log__representative_messages.jsonl",
]
V1_TABLES = ("meta", "messages", "blobs", "token_counts", "summaries", "failures")
ORDER = {"meta": "key", "messages": "seq", "token_counts": "seq, encoding", "blobs": "sha256"}


def _v1_columns(table: str) -> list[str]:
    """The columns ``table`` has in the first release's file (later migrations add more, e.g. conversation_id)."""
    db = sqlite3.connect(f"{V1_FIXTURE.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return [str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")]
    finally:
        db.close()


def _without_locations(images: str) -> str:
    """A messages.images value without the ``location`` migration 3 adds to each fact."""
    return json.dumps([{k: v for k, v in fact.items() if k != "location"} for fact in json.loads(images)])


def _rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the first release's tables, read with plain sqlite3.

    Image facts are compared without their ``location`` (added by migration 3, checked in
    :func:`test_the_upgrade_records_where_each_image_sits`) and failures without their
    ``kind`` (added by migration 4, checked in
    :func:`test_the_upgrade_counts_old_failures_toward_quarantine`); everything else must be equal.
    """
    db = sqlite3.connect(path)
    try:
        rows = {
            table: db.execute(
                f"SELECT {', '.join(_v1_columns(table))} FROM {table} ORDER BY {ORDER.get(table, 'rowid')}"
            ).fetchall()
            for table in V1_TABLES
        }
    finally:
        db.close()
    rows["messages"] = [(*row[:8], _without_locations(row[8]), *row[9:]) for row in rows["messages"]]
    rows["failures"] = [row[:6] for row in rows["failures"]]
    return rows


def test_the_upgrade_counts_old_failures_toward_quarantine(v1_store: Path) -> None:
    """Migration 4: a failure the first release recorded is of kind 'failed' (a tick the chunk failed)."""
    with Store(v1_store) as store:
        assert [f["kind"] for f in store.failures()] == ["failed"]
    assert _query(v1_store, "SELECT level, start_seq, end_seq, kind FROM failures") == [(1, 28, 31, "failed")]


def test_the_upgrade_records_where_each_image_sits(v1_store: Path) -> None:
    """Migration 3: every stored image fact gains the location a fresh walk of its message gives."""
    from compaction.images import find_image_sites

    with Store(v1_store) as store:
        facts = store.facts()
        messages = store.messages()
        with_images = [f for f in facts if f.images]
        assert len(with_images) >= 2
        for fact, message in zip(facts, messages, strict=True):
            assert list(fact.images) == find_image_sites(message.content), fact.seq


def _query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _dump(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


def _schema(path: Path | str) -> set[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        return {
            (name, sql)
            for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
        }
    finally:
        db.close()


def _images(messages: list[Message]) -> list[dict[str, Any]]:
    """The base64 image blocks of ``messages``, top-level and inside tool results."""
    found: list[dict[str, Any]] = []

    def walk(blocks: Any) -> None:
        for block in blocks:
            if block.get("type") == "image" and block["source"]["type"] == "base64":
                found.append(block)
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                walk(block["content"])

    for message in messages:
        walk(message.content)
    return found


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    """A copy of the first release's store file, not opened by the current code yet."""
    copy = tmp_path / "store_v1.sqlite"
    shutil.copyfile(V1_FIXTURE, copy)
    return copy


def test_the_fixture_is_a_first_release_store(v1_store: Path) -> None:
    tables = {name for (name,) in _query(v1_store, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == set(V1_TABLES)
    assert _query(v1_store, "SELECT value FROM meta WHERE key = 'schema_version'") == [("1",)]
    assert _query(v1_store, "PRAGMA journal_mode") == [("delete",)]  # self-contained: no WAL beside it
    counts = {table: len(rows) for table, rows in _rows(v1_store).items()}
    assert counts == {
        "meta": 1,
        "messages": 33,
        "blobs": 2,
        "token_counts": 66,
        "summaries": 10,
        "failures": 1,
    }


def test_opening_a_first_release_store_upgrades_it_in_place_without_loss(v1_store: Path) -> None:
    before = _rows(v1_store)
    started = time.time()
    with Store(v1_store, create=False) as store:
        assert len(store) == 33
    recorded = _query(v1_store, "SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
    assert [(v, name) for v, name, _ in recorded] == [(m.version, m.name) for m in MIGRATIONS]
    assert all(started <= at <= time.time() for _, _, at in recorded)
    after = _rows(v1_store)
    assert after["meta"] == [("schema_version", str(SCHEMA_VERSION))]  # what the first release checks
    for table in V1_TABLES[1:]:
        assert after[table] == before[table], table
    assert _query(v1_store, "SELECT COUNT(*) FROM compaction_events") == [(0,)]
    assert _query(v1_store, "PRAGMA integrity_check") == [("ok",)]


def test_an_upgraded_store_has_the_schema_of_a_new_one(v1_store: Path, tmp_path: Path) -> None:
    Store(v1_store).close()
    fresh = tmp_path / "fresh.sqlite"
    Store(fresh).close()
    assert _schema(v1_store) == _schema(fresh)


def test_an_upgraded_store_reads_back_everything_it_held(v1_store: Path) -> None:
    raw = _rows(v1_store)
    with Store(v1_store) as store:
        messages = store.messages()
        assert [m.seq for m in messages] == list(range(33))
        assert [m.role for m in messages] == [row[1] for row in raw["messages"]]
        blobs = {row[0]: bytes(row[5]) for row in raw["blobs"]}
        assert store.blob_hashes() == sorted(blobs) and store.image_count() == 2
        for sha, data in blobs.items():
            assert store.blob(sha) == data and hashlib.sha256(data).hexdigest() == sha
        shown = [hashlib.sha256(base64.b64decode(b["source"]["data"])).hexdigest() for b in _images(messages)]
        assert sorted(shown) == sorted(blobs)  # rehydrated from the blobs, byte for byte
        summaries = [(s.id, s.level, s.start_seq, s.end_seq, s.text) for s in store.summaries()]
        assert sorted(summaries) == sorted(row[:5] for row in raw["summaries"])
        assert {s.level for s in store.summaries()} == {1, 2, 3} and store.summary_frontier(1) == 27
        assert store.failures() == [
            {"level": 1, "start_seq": 28, "end_seq": 31, "reason": raw["failures"][0][4], "kind": "failed"}
        ]
        for encoding in ("o200k_base", "cl100k_base"):  # cached counts equal a direct count
            assert [f.text_tokens for f in store.facts(encoding=encoding)] == [
                count_text_tokens(m, encoding) for m in messages
            ]
        urls = [image for fact in store.facts() for image in fact.images if image.source == "url"]
        assert len(urls) == 1 and urls[0].url and urls[0].sha256 is None


def test_reimporting_the_transcripts_into_an_upgraded_store_adds_nothing(v1_store: Path) -> None:
    with Store(v1_store) as store:
        for source in V1_SOURCES:
            _parsed, added = import_transcript(store, source)
            assert added == 0, source.name
        assert len(store) == 33


@pytest.mark.parametrize("budget", [1200, 2500, 100_000])
def test_an_upgraded_store_compiles_as_a_fresh_import_with_the_same_summaries(
    v1_store: Path, budget: int
) -> None:
    recipe = Recipe(budget_tokens=budget)
    with Store(v1_store) as upgraded, Store(":memory:") as fresh:
        for source in V1_SOURCES:
            import_transcript(fresh, source)
        assert [(m.role, m.content, m.source_id, m.meta) for m in fresh.messages()] == [
            (m.role, m.content, m.source_id, m.meta) for m in upgraded.messages()
        ]
        for summary in sorted(upgraded.summaries(), key=lambda s: s.id):
            assert (
                fresh.add_summary(
                    summary.level, summary.start_seq, summary.end_seq, summary.text, summary.provenance
                )
                == summary.id
            )
        for failure in upgraded.failures():
            fresh.record_failure(**failure)
        compiled, again = compile_request(upgraded, recipe), compile_request(fresh, recipe)
        assert compiled.request.payload == again.request.payload
        assert (compiled.live_start, compiled.raw_seqs) == (again.live_start, again.raw_seqs)
        assert [s.id for s in compiled.summaries] == [s.id for s in again.summaries]
        if budget < 100_000:  # a budget that makes compile use the summaries carried over
            assert compiled.summaries


def test_opening_twice_changes_nothing_the_second_time(v1_store: Path, tmp_path: Path) -> None:
    Store(v1_store).close()
    once = _dump(v1_store)
    Store(v1_store).close()
    assert _dump(v1_store) == once
    fresh = tmp_path / "fresh.sqlite"
    Store(fresh).close()
    fresh_once = _dump(fresh)
    with Store(fresh):
        pass
    assert _dump(fresh) == fresh_once
    assert _query(fresh, "SELECT version FROM schema_migrations ORDER BY version") == [
        (m.version,) for m in MIGRATIONS
    ]


def test_a_new_store_records_every_migration(store: Store) -> None:
    rows = store._db.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    assert rows == [(m.version, m.name) for m in MIGRATIONS]
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert store._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )


@pytest.mark.parametrize("where", ["migrations", "meta"])
def test_a_store_from_a_newer_release_is_refused_and_left_alone(v1_store: Path, where: str) -> None:
    Store(v1_store).close()
    newer = SCHEMA_VERSION + 1
    db = sqlite3.connect(v1_store)
    if where == "migrations":  # a newer release records its migration (and may leave meta behind)
        db.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', 0)", (newer,))
    else:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(newer),))
    db.commit()
    db.close()
    content = v1_store.read_bytes()
    message = (
        f"store schema version {newer} is newer than this compaction ({SCHEMA_VERSION}); upgrade compaction"
    )
    with pytest.raises(StoreError, match=rf"store_v1\.sqlite: {message.replace('(', '.').replace(')', '.')}"):
        Store(v1_store)
    assert v1_store.read_bytes() == content


def test_a_first_release_store_that_cannot_be_written_says_it_needs_an_upgrade(v1_store: Path) -> None:
    before = _dump(v1_store)
    read_only = sqlite3.connect(f"file:{v1_store}?mode=ro", uri=True)
    try:
        with pytest.raises(
            StoreError, match=f"needs upgrading from schema 1 to {SCHEMA_VERSION}.*write access"
        ):
            SQLiteStore(connection=read_only)
        assert not read_only.in_transaction  # rolled back, connection still usable
        assert read_only.execute("SELECT COUNT(*) FROM messages").fetchone() == (33,)
    finally:
        read_only.close()
    assert _dump(v1_store) == before


def test_a_half_created_first_schema_is_completed(tmp_path: Path) -> None:
    """The first release created its tables one statement at a time: a crash could stop it midway."""
    path = tmp_path / "half.sqlite"
    db = sqlite3.connect(path)
    for statement in MIGRATIONS[0].statements[:2]:  # meta and messages, no version row yet
        db.execute(statement)
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.append([]) == 0 and store.summaries() == [] and store.events() == []
    assert _schema(path) == _schema_of_new(tmp_path)


def _schema_of_new(tmp_path: Path) -> set[tuple[str, str]]:
    fresh = tmp_path / "new.sqlite"
    Store(fresh).close()
    return _schema(fresh)


def test_concurrent_openers_upgrade_an_old_store_once(v1_store: Path) -> None:
    before = _rows(v1_store)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            barrier.wait()
            with Store(v1_store) as store:
                assert len(store) == 33
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert _query(v1_store, "SELECT version FROM schema_migrations ORDER BY version") == [
        (m.version,) for m in MIGRATIONS
    ]
    assert {t: rows for t, rows in _rows(v1_store).items() if t != "meta"} == {
        t: rows for t, rows in before.items() if t != "meta"
    }
