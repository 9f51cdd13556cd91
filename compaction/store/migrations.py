"""The SQLite store's schema, as an ordered list of recorded migrations.

Each :class:`Migration` has a version (1, 2, ... with no gaps), a name and the statements that
take a store from the previous version to it.  Opening a store applies the pending ones in one
transaction and records each in ``schema_migrations (version, name, applied_at)``; the store's
version is the highest recorded one, also kept in ``meta.schema_version`` so that an older
release (which reads only ``meta``) refuses a newer file with its own clear message.

Versions:

1. The schema of the first release: ``meta``, ``messages``, ``blobs``, ``token_counts``,
   ``summaries``, ``failures`` and their indexes (exactly as that release created them).
   A file written by that release has ``meta.schema_version = 1`` and no
   ``schema_migrations`` table; it is recognized as version 1 and its record is written
   at the upgrade (``applied_at`` is the time of the upgrade, not of its creation).
2. ``compaction_events``: one row per compaction, with the history's tokens before and the
   request's tokens after, the budget and a JSON detail (for cache-aware compaction, which
   needs to know when the prefix last changed).
3. Image sites: each stored image fact also records where the image sits (an image block, a
   tool result, a data URI in text or in tool-call arguments; see
   :func:`compaction.images.image_locations`), so the compile planner decides an image in
   tool-call arguments as the wire gate does.  A data step: it reads each message's stored
   content (blob references are enough) and rewrites its ``images`` column.
4. Failure kinds: ``failures.kind`` says whether a failure counts toward quarantining its
   chunk (``"failed"``: the summarizer was reached and failed on this range) or not
   (``"outage"``: the summarizer could not be reached or used on that tick, which says
   nothing about the chunk).  Rows written before it are ``"failed"`` (each was a tick on
   which the chunk failed).

5. Image captions: ``captions`` holds at most one caption per image, keyed by the image's
   sha256 (the blob's key), beside its blob: the text, its provenance (model, prompt hash),
   its status (``ok``, or a failed attempt: ``failed`` / ``outage``), the attempts made and
   when.  A new table only: older rows are untouched.
6. Conversations and branches: ``conversations (id, name, parent_id, fork_seq,
   created_at)``, and every message, token count, summary, failure and compaction event is
   keyed by its conversation (see :mod:`.lineage`).  A store that holds anything is given one
   conversation, ``default`` (id 1), and every existing row is keyed to it: the rows' contents
   are copied unchanged (SQLite cannot change a table's primary key in place, so
   ``messages``, ``token_counts`` and ``summaries`` are rebuilt with the key in front; ids
   and seqs are kept) and ``failures`` and ``compaction_events`` gain the column.
7. Pins: ``pins (conversation_id, seq, created_at)``, the messages a conversation keeps
   verbatim in every compile (beside its system messages).  A new table only.
8. Edits: ``revisions (conversation_id, seq, revision, content, tool_uses, tool_results,
   images, created_at)`` holds each edit of a message as a new revision (the message row
   stays as it was; reads show the newest revision), and ``stale_summaries`` keeps the
   summaries an edit made stale, row for row with when and why, out of ``summaries`` (so the
   next compression makes them anew).  New tables only.

To change the schema, append a migration; never edit one that has shipped.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import StoreError
from ..images import image_locations

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STORE_NAMES",
    "Migration",
    "apply_pending",
    "database_state",
    "needs_migration",
    "stored_version",
]


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``statements`` take a store from ``version - 1`` to ``version``.

    Attributes:
        version: the schema version this step produces (1 for the first schema).
        name: what the step does, in a few words (recorded with it).
        statements: SQL statements run in order, inside the upgrade's transaction.
        data_step: run after the statements, inside the same transaction, for a change that
            SQL alone cannot make (rewriting rows with the package's own code).
    """

    version: int
    name: str
    statements: tuple[str, ...]
    data_step: Callable[[sqlite3.Connection], None] | None = None


def _record_image_locations(db: sqlite3.Connection) -> None:
    """Add ``location`` to every stored image fact, from the message's stored content."""
    rows = db.execute("SELECT seq, content, images FROM messages WHERE images != '[]'").fetchall()
    for seq, content, images in rows:
        facts = json.loads(images)
        locations = image_locations(json.loads(content))
        if len(locations) != len(facts):
            raise StoreError(
                f"message {seq}: {len(facts)} image facts stored but {len(locations)} images in its content"
            )
        updated = [{**fact, "location": location} for fact, location in zip(facts, locations, strict=True)]
        db.execute("UPDATE messages SET images = ? WHERE seq = ?", (json.dumps(updated), seq))


_BASELINE = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    source_id TEXT,
    meta TEXT NOT NULL DEFAULT '{}',
    import_key TEXT NOT NULL UNIQUE,
    tool_uses TEXT NOT NULL DEFAULT '[]',
    tool_results TEXT NOT NULL DEFAULT '[]',
    images TEXT NOT NULL DEFAULT '[]'
)""",
    """CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT PRIMARY KEY,
    media_type TEXT,
    byte_size INTEGER NOT NULL,
    width INTEGER,
    height INTEGER,
    data BLOB NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS token_counts (
    seq INTEGER NOT NULL,
    encoding TEXT NOT NULL,
    text_tokens INTEGER NOT NULL,
    PRIMARY KEY (seq, encoding)
) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS summaries (
    id INTEGER PRIMARY KEY,
    level INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    end_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    provenance TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    UNIQUE (level, start_seq, end_seq)
)""",
    "CREATE INDEX IF NOT EXISTS summaries_by_start ON summaries (start_seq, level)",
    "CREATE INDEX IF NOT EXISTS summaries_by_level_end ON summaries (level, end_seq)",
    "CREATE INDEX IF NOT EXISTS messages_pinned ON messages (seq) WHERE role = 'system'",
    """CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY,
    level INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    end_seq INTEGER NOT NULL,
    reason TEXT NOT NULL,
    created_at REAL NOT NULL
)""",
)

_EVENTS = (
    """CREATE TABLE IF NOT EXISTS compaction_events (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    tokens_before INTEGER NOT NULL,
    tokens_after INTEGER NOT NULL,
    budget INTEGER,
    detail TEXT NOT NULL DEFAULT '{}'
)""",
)

_FAILURE_KINDS = ("ALTER TABLE failures ADD COLUMN kind TEXT NOT NULL DEFAULT 'failed'",)

_CAPTIONS = (
    """CREATE TABLE IF NOT EXISTS captions (
    sha256 TEXT PRIMARY KEY,
    text TEXT,
    status TEXT NOT NULL DEFAULT 'ok',
    provenance TEXT NOT NULL DEFAULT '{}',
    attempts INTEGER NOT NULL DEFAULT 1,
    reason TEXT,
    created_at REAL NOT NULL
)""",
)

_CONVERSATIONS = (
    """CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    parent_id INTEGER REFERENCES conversations (id),
    fork_seq INTEGER,
    created_at REAL NOT NULL,
    CHECK ((parent_id IS NULL) = (fork_seq IS NULL))
)""",
    """CREATE TABLE messages_v6 (
    conversation_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    source_id TEXT,
    meta TEXT NOT NULL DEFAULT '{}',
    import_key TEXT NOT NULL,
    tool_uses TEXT NOT NULL DEFAULT '[]',
    tool_results TEXT NOT NULL DEFAULT '[]',
    images TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (conversation_id, seq),
    UNIQUE (conversation_id, import_key)
)""",
    "INSERT INTO messages_v6 (conversation_id, seq, role, content, source_id, meta, import_key, tool_uses,"
    " tool_results, images) SELECT 1, seq, role, content, source_id, meta, import_key, tool_uses, tool_results,"
    " images FROM messages",
    "DROP TABLE messages",
    "ALTER TABLE messages_v6 RENAME TO messages",
    "CREATE INDEX messages_pinned ON messages (conversation_id, seq) WHERE role = 'system'",
    """CREATE TABLE token_counts_v6 (
    conversation_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    encoding TEXT NOT NULL,
    text_tokens INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, seq, encoding)
) WITHOUT ROWID""",
    "INSERT INTO token_counts_v6 (conversation_id, seq, encoding, text_tokens)"
    " SELECT 1, seq, encoding, text_tokens FROM token_counts",
    "DROP TABLE token_counts",
    "ALTER TABLE token_counts_v6 RENAME TO token_counts",
    """CREATE TABLE summaries_v6 (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL,
    level INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    end_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    provenance TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    UNIQUE (conversation_id, level, start_seq, end_seq)
)""",
    "INSERT INTO summaries_v6 (id, conversation_id, level, start_seq, end_seq, text, provenance, created_at)"
    " SELECT id, 1, level, start_seq, end_seq, text, provenance, created_at FROM summaries",
    "DROP TABLE summaries",
    "ALTER TABLE summaries_v6 RENAME TO summaries",
    "CREATE INDEX summaries_by_start ON summaries (conversation_id, start_seq, level)",
    "CREATE INDEX summaries_by_level_end ON summaries (conversation_id, level, end_seq)",
    "ALTER TABLE failures ADD COLUMN conversation_id INTEGER NOT NULL DEFAULT 1",
    "ALTER TABLE compaction_events ADD COLUMN conversation_id INTEGER NOT NULL DEFAULT 1",
)


_PINS = (
    """CREATE TABLE IF NOT EXISTS pins (
    conversation_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID""",
)


_EDITS = (
    """CREATE TABLE IF NOT EXISTS revisions (
    conversation_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    content TEXT NOT NULL,
    tool_uses TEXT NOT NULL DEFAULT '[]',
    tool_results TEXT NOT NULL DEFAULT '[]',
    images TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, seq, revision)
)""",
    """CREATE TABLE IF NOT EXISTS stale_summaries (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL,
    level INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    end_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    provenance TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    stale_at REAL NOT NULL,
    reason TEXT NOT NULL
)""",
)


_USAGE = (
    """CREATE TABLE IF NOT EXISTS usage_records (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL,
    created_at REAL NOT NULL,
    model TEXT NOT NULL,
    request_format TEXT NOT NULL,
    compiled_tokens INTEGER NOT NULL,
    input_tokens INTEGER,
    cache_read_tokens INTEGER,
    cache_write_tokens INTEGER,
    output_tokens INTEGER,
    source TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS usage_records_by_model ON usage_records (model, id)",
)


def _default_conversation(db: sqlite3.Connection) -> None:
    """Give a store that holds anything its one conversation, ``default`` (id 1, the rows' key)."""
    held = db.execute(
        "SELECT EXISTS (SELECT 1 FROM messages) OR EXISTS (SELECT 1 FROM summaries)"
        " OR EXISTS (SELECT 1 FROM failures) OR EXISTS (SELECT 1 FROM compaction_events)"
    ).fetchone()[0]
    if held:
        db.execute(
            "INSERT INTO conversations (id, name, parent_id, fork_seq, created_at) VALUES (1, 'default', NULL, NULL, ?)",
            (time.time(),),
        )


#: Every migration, in order; the last one's version is :data:`SCHEMA_VERSION`.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "messages, blobs, token counts, summaries and failures", _BASELINE),
    Migration(2, "compaction events", _EVENTS),
    Migration(3, "image sites record their location", (), _record_image_locations),
    Migration(4, "failures record their kind (counted toward quarantine or an outage)", _FAILURE_KINDS),
    Migration(5, "image captions beside their blobs", _CAPTIONS),
    Migration(6, "conversations and branches: every row keyed by its conversation", _CONVERSATIONS, _default_conversation),
    Migration(7, "pins: messages a conversation keeps verbatim in every compile", _PINS),
    Migration(8, "edits: message revisions and the summaries they made stale", _EDITS),
    Migration(9, "usage records: our count of each request beside the provider's usage", _USAGE),
)

#: The schema version this code writes and reads.
SCHEMA_VERSION = MIGRATIONS[-1].version

_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations"
    " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
)


#: The tables every store has had since schema 1: a database without them is not a store.
_BASELINE_TABLES = frozenset({"meta", "messages", "blobs", "token_counts", "summaries", "failures"})

#: Every table name the store uses (a database holding one of them is no place to create a store).
STORE_NAMES = _BASELINE_TABLES | {"compaction_events", "schema_migrations", "captions", "conversations", "pins", "revisions", "stale_summaries"}


def database_state(db: sqlite3.Connection) -> tuple[str, list[str]]:
    """Say what the database on ``db`` holds, reading only.

    Returns:
        ``("store", names)`` for a compaction store: the schema-1 tables and a
        ``meta.schema_version`` (of any version), or only tables and indexes of the store's
        own names and columns, ``messages`` among them (a first schema a crash stopped
        midway, which opening completes); ``("empty", [])`` for a database with no tables, indexes, views or
        triggers (a 0-byte file is one); else ``("other", names)`` with what it holds.

    Raises:
        sqlite3.DatabaseError: the file is not an SQLite database.
    """
    rows = db.execute(
        "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()
    names = [str(name) for name, _kind in rows]
    if not names:
        return "empty", []
    if _BASELINE_TABLES <= _tables(db):
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError:  # a 'meta' table of another shape
            row = None
        if row is not None:
            return "store", names
    shapes = _store_shapes()
    if "messages" not in names:  # a lone 'meta (key, value)' is too common a shape to claim
        return "other", names
    for name, kind in rows:
        columns = _columns(db, str(name)) if kind == "table" else ()
        if (str(name), str(kind), columns) not in shapes:
            return "other", names
    return "store", names


def _columns(db: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(str(row[1]) for row in db.execute(f'PRAGMA table_info("{table}")'))


@functools.lru_cache(maxsize=1)
def _store_shapes() -> frozenset[tuple[str, str, tuple[str, ...]]]:
    """Return every ``(name, type, table columns)`` a store's object has had at some schema version."""
    db = sqlite3.connect(":memory:")
    shapes: set[tuple[str, str, tuple[str, ...]]] = set()
    try:
        for migration in MIGRATIONS:
            for statement in migration.statements:
                db.execute(statement)
            shapes |= {
                (str(name), str(kind), _columns(db, str(name)) if kind == "table" else ())
                for name, kind in db.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
            }
        return frozenset(shapes)
    finally:
        db.close()


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _recorded(db: sqlite3.Connection, tables: set[str]) -> set[int]:
    if "schema_migrations" not in tables:
        return set()
    return {int(row[0]) for row in db.execute("SELECT version FROM schema_migrations")}


def stored_version(db: sqlite3.Connection, path: str) -> int:
    """Return the schema version of the store on ``db`` (0 for an empty database).

    The version is the highest of ``meta.schema_version`` and the recorded migrations.

    Args:
        db: an open connection to the store.
        path: the store's name, for error messages.

    Returns:
        The version, at most :data:`SCHEMA_VERSION`.

    Raises:
        StoreError: the version is not a number, or is newer than this code.
        sqlite3.DatabaseError: the file is not an SQLite database.
    """
    tables = _tables(db)
    recorded = max(_recorded(db, tables), default=0)
    declared = 0
    if "meta" in tables:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None:
            if not str(row[0]).strip().isdigit():
                raise StoreError(
                    f"{path}: cannot open as a compaction store: its schema version {row[0]!r} is not a number"
                )
            declared = int(row[0])
    version = max(recorded, declared)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: store schema version {version} is newer than this compaction "
            f"({SCHEMA_VERSION}); upgrade compaction"
        )
    return version


def needs_migration(db: sqlite3.Connection, path: str) -> bool:
    """Return whether :func:`apply_pending` has anything to do (reads only; never writes).

    Raises:
        StoreError: as :func:`stored_version`.
    """
    version = stored_version(db, path)
    return version < SCHEMA_VERSION or _recorded(db, _tables(db)) != {m.version for m in MIGRATIONS}


def apply_pending(db: sqlite3.Connection, path: str) -> list[Migration]:
    """Bring the store on ``db`` to :data:`SCHEMA_VERSION`; call it inside a write transaction.

    Versions the file already has but never recorded (a file from before
    ``schema_migrations`` existed) are recorded without running; the later ones run in
    order and are recorded.  Run twice, the second call does nothing.

    Args:
        db: a connection holding the store's write lock (``BEGIN IMMEDIATE``), so two
            processes opening the same old file upgrade it once.
        path: the store's name, for error messages.

    Returns:
        The migrations that ran.

    Raises:
        StoreError: as :func:`stored_version`.
        sqlite3.DatabaseError: a statement failed (the caller rolls the transaction back).
    """
    version = stored_version(db, path)
    db.execute(_MIGRATIONS_TABLE)
    recorded = _recorded(db, {"schema_migrations"})
    now = time.time()
    ran: list[Migration] = []
    for migration in MIGRATIONS:
        if migration.version > version:
            for statement in migration.statements:
                db.execute(statement)
            if migration.data_step is not None:
                migration.data_step(db)
            ran.append(migration)
        elif migration.version in recorded:
            continue
        db.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, now),
        )
    db.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
    )
    return ran
