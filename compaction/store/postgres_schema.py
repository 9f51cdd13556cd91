"""The PostgreSQL store's schema, as an ordered list of recorded migrations of its own.

A PostgreSQL store lives in one schema (a namespace of the database, named after the store;
see :mod:`.postgres`).  Like the SQLite schema (:mod:`.migrations`) it is versioned: each
:class:`PgMigration` takes the store from the previous version to its own, opening a store
applies the pending ones in one transaction (DDL is transactional in PostgreSQL, so an
upgrade commits whole or not at all) under an advisory lock, so several processes opening
one old store upgrade it once; each is recorded in ``schema_migrations (version, name,
applied_at)`` and the version is also kept in ``meta.schema_version``.

Versions:

1. Everything SQLite's schema 4 holds: ``meta``, ``messages``, ``blobs``, ``token_counts``,
   ``summaries``, ``failures`` (with ``kind``), ``compaction_events``.  Differences from
   SQLite, all for text PostgreSQL cannot hold: free text that may carry a NUL character or
   a lone surrogate (a message's ``source_id`` and ``kind``, a summary's ``text``, a
   failure's ``reason``, a blob's ``media_type``) is ``BYTEA`` holding UTF-8 with
   surrogates kept (``surrogatepass``); read it in ``psql`` with
   ``convert_from(text, 'UTF8')``.  JSON columns are ``TEXT`` holding the canonical JSON the
   SQLite store holds (byte-identical read back; ``jsonb`` would reorder keys and refuse
   ``\\u0000``).  ``messages.kind`` is ``meta["kind"]`` kept beside it, so reading facts
   parses no JSON in SQL.
2. Image captions (SQLite's migration 5): ``captions`` holds at most one caption per image,
   keyed by its sha256, with provenance, status (``ok``, ``failed``, ``outage``), attempts
   and the last failure's reason (``text`` and ``reason`` are ``BYTEA`` as above).
3. Conversations and branches (SQLite's migration 6): ``conversations (id, name, parent_id,
   fork_seq, created_at)``; messages, token counts, summaries, failures and compaction
   events gain ``conversation_id`` (added with a constant default, which PostgreSQL records
   without rewriting a row), and the keys that were per store become per conversation.  A
   store that holds anything gets one conversation, ``default`` (id 1), that its rows belong to.
4. Pins (SQLite's migration 7): ``pins (conversation_id, seq, created_at)``.
5. Edits (SQLite's migration 8): ``revisions`` (each edit of a message, its newest shown)
   and ``stale_summaries`` (the summaries an edit made stale, moved out of ``summaries``).
6. Usage records (SQLite's migration 9): ``usage_records``, our count of each request beside
   the usage the provider returned (see :mod:`.usage`).

To change the schema, append a migration; never edit one that has shipped.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BASELINE_TABLES", "PG_MIGRATIONS", "PG_SCHEMA_VERSION", "PgMigration"]


@dataclass(frozen=True)
class PgMigration:
    """One step of the PostgreSQL schema: ``statements`` take a store from ``version - 1`` to ``version``."""

    version: int
    name: str
    statements: tuple[str, ...]


_BASELINE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE messages (
    seq BIGINT PRIMARY KEY CHECK (seq >= 0),
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    source_id BYTEA,
    meta TEXT NOT NULL DEFAULT '{}',
    kind BYTEA,
    import_key TEXT NOT NULL UNIQUE,
    tool_uses TEXT NOT NULL DEFAULT '[]',
    tool_results TEXT NOT NULL DEFAULT '[]',
    images TEXT NOT NULL DEFAULT '[]'
)""",
    "CREATE INDEX messages_pinned ON messages (seq) WHERE role = 'system'",
    """CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY,
    media_type BYTEA,
    byte_size BIGINT NOT NULL,
    width INTEGER,
    height INTEGER,
    data BYTEA NOT NULL
)""",
    """CREATE TABLE token_counts (
    seq BIGINT NOT NULL,
    encoding TEXT NOT NULL,
    text_tokens BIGINT NOT NULL,
    PRIMARY KEY (seq, encoding)
)""",
    """CREATE TABLE summaries (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    level INTEGER NOT NULL,
    start_seq BIGINT NOT NULL,
    end_seq BIGINT NOT NULL,
    text BYTEA NOT NULL,
    provenance TEXT NOT NULL DEFAULT '{}',
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (level, start_seq, end_seq)
)""",
    "CREATE INDEX summaries_by_start ON summaries (start_seq, level)",
    "CREATE INDEX summaries_by_level_end ON summaries (level, end_seq)",
    """CREATE TABLE failures (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    level INTEGER NOT NULL,
    start_seq BIGINT NOT NULL,
    end_seq BIGINT NOT NULL,
    reason BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL DEFAULT 'failed' CHECK (kind IN ('failed', 'outage'))
)""",
    """CREATE TABLE compaction_events (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL,
    tokens_before BIGINT NOT NULL,
    tokens_after BIGINT NOT NULL,
    budget BIGINT,
    detail TEXT NOT NULL DEFAULT '{}'
)""",
)

_CAPTIONS = (
    """CREATE TABLE captions (
    sha256 TEXT PRIMARY KEY,
    text BYTEA,
    status TEXT NOT NULL DEFAULT 'ok' CHECK (status IN ('ok', 'failed', 'outage')),
    provenance TEXT NOT NULL DEFAULT '{}',
    attempts INTEGER NOT NULL DEFAULT 1,
    reason BYTEA,
    created_at DOUBLE PRECISION NOT NULL
)""",
)

_CONVERSATIONS = (
    """CREATE TABLE conversations (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    parent_id BIGINT REFERENCES conversations (id),
    fork_seq BIGINT,
    created_at DOUBLE PRECISION NOT NULL,
    CHECK ((parent_id IS NULL) = (fork_seq IS NULL))
)""",
    "INSERT INTO conversations (name, parent_id, fork_seq, created_at)"
    " SELECT 'default', NULL, NULL, extract(epoch FROM clock_timestamp())"
    " WHERE EXISTS (SELECT 1 FROM messages) OR EXISTS (SELECT 1 FROM summaries)"
    " OR EXISTS (SELECT 1 FROM failures) OR EXISTS (SELECT 1 FROM compaction_events)",
    "ALTER TABLE messages ADD COLUMN conversation_id BIGINT NOT NULL DEFAULT 1",
    "ALTER TABLE messages DROP CONSTRAINT messages_pkey, DROP CONSTRAINT messages_import_key_key,"
    " ADD PRIMARY KEY (conversation_id, seq), ADD UNIQUE (conversation_id, import_key)",
    "ALTER TABLE messages ALTER COLUMN conversation_id DROP DEFAULT",
    "DROP INDEX messages_pinned",
    "CREATE INDEX messages_pinned ON messages (conversation_id, seq) WHERE role = 'system'",
    "ALTER TABLE token_counts ADD COLUMN conversation_id BIGINT NOT NULL DEFAULT 1",
    "ALTER TABLE token_counts DROP CONSTRAINT token_counts_pkey, ADD PRIMARY KEY (conversation_id, seq, encoding)",
    "ALTER TABLE token_counts ALTER COLUMN conversation_id DROP DEFAULT",
    "ALTER TABLE summaries ADD COLUMN conversation_id BIGINT NOT NULL DEFAULT 1",
    "ALTER TABLE summaries DROP CONSTRAINT summaries_level_start_seq_end_seq_key,"
    " ADD UNIQUE (conversation_id, level, start_seq, end_seq)",
    "ALTER TABLE summaries ALTER COLUMN conversation_id DROP DEFAULT",
    "DROP INDEX summaries_by_start",
    "DROP INDEX summaries_by_level_end",
    "CREATE INDEX summaries_by_start ON summaries (conversation_id, start_seq, level)",
    "CREATE INDEX summaries_by_level_end ON summaries (conversation_id, level, end_seq)",
    "ALTER TABLE failures ADD COLUMN conversation_id BIGINT NOT NULL DEFAULT 1",
    "ALTER TABLE compaction_events ADD COLUMN conversation_id BIGINT NOT NULL DEFAULT 1",
)

_PINS = (
    """CREATE TABLE pins (
    conversation_id BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (conversation_id, seq)
)""",
)

_EDITS = (
    """CREATE TABLE revisions (
    conversation_id BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    revision INTEGER NOT NULL,
    content TEXT NOT NULL,
    tool_uses TEXT NOT NULL DEFAULT '[]',
    tool_results TEXT NOT NULL DEFAULT '[]',
    images TEXT NOT NULL DEFAULT '[]',
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (conversation_id, seq, revision)
)""",
    """CREATE TABLE stale_summaries (
    id BIGINT PRIMARY KEY,
    conversation_id BIGINT NOT NULL,
    level INTEGER NOT NULL,
    start_seq BIGINT NOT NULL,
    end_seq BIGINT NOT NULL,
    text BYTEA NOT NULL,
    provenance TEXT NOT NULL DEFAULT '{}',
    created_at DOUBLE PRECISION NOT NULL,
    stale_at DOUBLE PRECISION NOT NULL,
    reason TEXT NOT NULL
)""",
)

_USAGE = (
    """CREATE TABLE usage_records (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    model TEXT NOT NULL,
    request_format TEXT NOT NULL,
    compiled_tokens BIGINT NOT NULL,
    input_tokens BIGINT,
    cache_read_tokens BIGINT,
    cache_write_tokens BIGINT,
    output_tokens BIGINT,
    source TEXT NOT NULL
)""",
    "CREATE INDEX usage_records_by_model ON usage_records (model, id)",
)

#: Every migration, in order; the last one's version is :data:`PG_SCHEMA_VERSION`.
PG_MIGRATIONS: tuple[PgMigration, ...] = (
    PgMigration(1, "messages, blobs, token counts, summaries, failures with kinds, compaction events", _BASELINE),
    PgMigration(2, "image captions beside their blobs", _CAPTIONS),
    PgMigration(3, "conversations and branches: every row keyed by its conversation", _CONVERSATIONS),
    PgMigration(4, "pins: messages a conversation keeps verbatim in every compile", _PINS),
    PgMigration(5, "edits: message revisions and the summaries they made stale", _EDITS),
    PgMigration(6, "usage records: our count of each request beside the provider's usage", _USAGE),
)

#: The PostgreSQL schema version this code writes and reads.
PG_SCHEMA_VERSION = PG_MIGRATIONS[-1].version

#: The tables every PostgreSQL store has: a schema without them is not a store.
BASELINE_TABLES = frozenset(
    {"meta", "messages", "blobs", "token_counts", "summaries", "failures", "compaction_events", "schema_migrations"}
)

MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations"
    " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
)
