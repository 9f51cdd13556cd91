"""The SQLite backend: the embedded default store, in WAL mode, one transaction per write.

Tables (see :mod:`.migrations` for the schema and its versions):

* ``messages``: one row per message, ``seq`` 0-based and dense.  Content blocks are kept as
  JSON; an inline base64 image is replaced by a reference ``{"type": "blob", "sha256": ...}``
  and its bytes live once in ``blobs``.  ``import_key`` is a hash chain over the messages of
  the transcript they came from, so importing the same transcript twice adds nothing and
  importing a grown transcript adds only its new tail.
* ``blobs``: content-addressed image bytes with media type, byte size and pixel size (read
  from the image header).
* ``token_counts``: cached non-image token counts per (message, encoding), so compiling never
  re-tokenizes history.
* ``summaries``: text standing for a contiguous range ``[start_seq, end_seq)`` of messages at a
  level (1 covers raw messages, 2 covers level-1 summaries, ...), with provenance.
* ``failures``: chunks that could not be summarized and stay raw.
* ``compaction_events``: one row per recorded compaction (tokens before and after, budget).
* ``meta`` and ``schema_migrations``: the schema version and the migrations applied.

Compaction never edits ``messages``: summaries are added beside them.  Each write is one
transaction (``BEGIN IMMEDIATE``, so concurrent writers queue instead of failing), and a
crash loses nothing committed.  What a message looks like stored is decided in
:mod:`.ingest`; this module only runs SQL.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..blocks import Message, canonical_json
from ..errors import StoreError
from ..tokens.encodings import DEFAULT_ENCODING
from . import ingest, migrations
from .model import CompactionEvent, MessageFacts, StoredSummary

if TYPE_CHECKING:
    from .base import HistoryStore

__all__ = ["SQLiteStore", "Store"]

_SUMMARY_COLUMNS = "id, level, start_seq, end_seq, text, provenance"


def _connection_path(db: sqlite3.Connection) -> str:
    for _seq, name, file in db.execute("PRAGMA database_list"):
        if name == "main":
            return str(file) if file else ":memory:"
    return ":memory:"  # pragma: no cover - SQLite always lists "main"


class SQLiteStore:
    """An append-only SQLite store of messages, image blobs, token counts and summaries.

    Args:
        path: a file path or ``":memory:"`` (the default); not with ``connection``.
        connection: an open connection to use instead of opening ``path``.  The store sets
            no PRAGMAs on it and never closes it; its writes join a transaction the caller
            has open (as a savepoint) and otherwise commit on their own.
        encoding: the default encoding whose token counts are cached at append.
        create: create the file if it does not exist (``False``: a missing file is an error,
            so a mistyped path is not silently a new, empty store).  Ignored with ``connection``.
        tracer: called with the text of every SQL statement run on the connection
            (``sqlite3.Connection.set_trace_callback``), e.g. ``print`` or ``list.append``.

    Raises:
        StoreError: the file is not a compaction store, its schema is newer than this code,
            or an upgrade it needs cannot be written.
        TypeError: both ``path`` and ``connection`` were given.

    Example:
        >>> store = Store(":memory:")
        >>> store.append([Message("user", ({"type": "text", "text": "hi"},))])
        1
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        connection: sqlite3.Connection | None = None,
        encoding: str = DEFAULT_ENCODING,
        create: bool = True,
        tracer: Callable[[str], object] | None = None,
    ) -> None:
        if path is not None and connection is not None:
            raise TypeError("SQLiteStore takes a path or a connection, not both")
        self.encoding = encoding
        self._owns_connection = connection is None
        self._traced = tracer is not None
        self.path = ":memory:" if path is None else str(path)
        if connection is None and not create and self.path != ":memory:" and not Path(self.path).is_file():
            raise StoreError(
                f"{self.path}: no store there; create one with `compaction import TRANSCRIPT --store {self.path}`"
            )
        try:
            if connection is None:
                self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            else:
                self._db = connection
            if tracer is not None:
                self._db.set_trace_callback(tracer)
            if connection is None:
                self._db.execute("PRAGMA busy_timeout = 30000")
                if self.path != ":memory:":
                    self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
            else:
                self.path = _connection_path(connection)
            self._migrate()
        except sqlite3.DatabaseError as err:
            self._release()
            raise StoreError(f"{self.path}: cannot open as a compaction store: {err}") from err
        except BaseException:
            self._release()
            raise

    def _migrate(self) -> None:
        if not migrations.needs_migration(self._db, self.path):
            return
        before = migrations.stored_version(self._db, self.path)
        try:
            with self._write():
                migrations.apply_pending(self._db, self.path)
        except sqlite3.OperationalError as err:
            if before == 0:
                raise
            hint = "; open it once with write access to upgrade it" if "readonly" in str(err) else ""
            raise StoreError(
                f"{self.path}: the store needs upgrading from schema {before} to "
                f"{migrations.SCHEMA_VERSION} and the upgrade failed: {err}{hint}"
            ) from err

    @contextmanager
    def _write(self) -> Iterator[None]:
        """Run the block as one write: its own ``BEGIN IMMEDIATE`` transaction, or a savepoint
        inside a transaction the connection's owner has open."""
        db = self._db
        if db.in_transaction:
            db.execute("SAVEPOINT compaction_store")
            try:
                yield
            except BaseException:
                db.execute("ROLLBACK TO compaction_store")
                db.execute("RELEASE compaction_store")
                raise
            db.execute("RELEASE compaction_store")
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if db.in_transaction:  # SQLite may have rolled back already (e.g. a full disk)
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # -- lifecycle -------------------------------------------------------------------------
    def _release(self) -> None:
        db = getattr(self, "_db", None)
        if db is None:
            return
        if self._owns_connection:
            db.close()
        elif self._traced:
            db.set_trace_callback(None)

    def close(self) -> None:
        """Close the database connection (a connection it was given stays open, untraced)."""
        self._release()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # -- messages --------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])

    def append(self, messages: Iterable[Message], *, chain_seed: str = "") -> int:
        """Append messages not already stored; return how many were added.

        Each message's identity is a hash chain over ``chain_seed`` and the fingerprints of
        the messages before it in this call (:func:`.ingest.import_keys`), so re-importing a
        transcript adds nothing and a transcript that grew adds its tail.  All messages of
        one call commit together.

        Raises:
            ImageError: an image block holds invalid base64 (nothing of the call is stored).
            StoreError: the database refused the write.
        """
        rows = ingest.import_keys(messages, chain_seed)
        if not rows:
            return 0
        added = 0
        try:
            with self._write():
                next_seq = self.next_seq()
                for import_key, message in rows:
                    exists = self._db.execute(
                        "SELECT 1 FROM messages WHERE import_key = ?", (import_key,)
                    ).fetchone()
                    if exists:
                        continue
                    self._insert(next_seq, import_key, ingest.prepare(message, self.encoding))
                    next_seq += 1
                    added += 1
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: append failed: {err}") from err
        return added

    def _insert(self, seq: int, import_key: str, row: ingest.PreparedMessage) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO blobs (sha256, media_type, byte_size, width, height, data)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(b.sha256, b.media_type, b.byte_size, b.width, b.height, b.data) for b in row.blobs],
        )
        self._db.execute(
            "INSERT INTO messages (seq, role, content, source_id, meta, import_key, tool_uses, tool_results, images)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                seq,
                row.role,
                row.content,
                row.source_id,
                row.meta,
                import_key,
                row.tool_uses,
                row.tool_results,
                row.images,
            ),
        )
        self._db.execute(
            "INSERT OR REPLACE INTO token_counts (seq, encoding, text_tokens) VALUES (?, ?, ?)",
            (seq, row.token_key, row.text_tokens),
        )

    def _blob_for_hydrate(self, sha256: str) -> bytes:
        row = self._db.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: image blob {sha256} is missing")
        return bytes(row[0])

    def messages(self, start: int = 0, end: int | None = None) -> list[Message]:
        """Return messages with ``start <= seq < end`` (images rehydrated), in order."""
        end = self.next_seq() if end is None else end
        rows = self._db.execute(
            "SELECT seq, role, content, source_id, meta FROM messages WHERE seq >= ? AND seq < ? ORDER BY seq",
            (start, end),
        ).fetchall()
        return [
            ingest.message_from_row(seq, role, content, source_id, meta, self._blob_for_hydrate)
            for seq, role, content, source_id, meta in rows
        ]

    def iter_messages(self, batch: int = 512) -> Iterator[Message]:
        """Yield every message in order, reading ``batch`` at a time."""
        start, end = 0, self.next_seq()
        while start < end:
            yield from self.messages(start, min(end, start + batch))
            start += batch

    def next_seq(self) -> int:
        """Return the seq the next appended message will get (= the number of messages)."""
        return int(self._db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM messages").fetchone()[0])

    def facts(
        self, start: int = 0, end: int | None = None, *, encoding: str | None = None
    ) -> list[MessageFacts]:
        """Return :class:`MessageFacts` for ``start <= seq < end``; counts missing tokens once.

        Args:
            start, end: the seq range (``end`` defaults to :meth:`next_seq`).
            encoding: the encoding of ``text_tokens`` (default: the store's).

        Returns:
            One entry per message, in seq order.  Counts not cached yet are computed and
            cached (on a read-only store they are used uncached).
        """
        encoding = encoding or self.encoding
        key = ingest.token_key(encoding)
        end = self.next_seq() if end is None else end
        rows = self._db.execute(
            "SELECT m.seq, m.role, m.tool_uses, m.tool_results, m.images, t.text_tokens,"
            " json_extract(m.meta, '$.kind') FROM messages m"
            " LEFT JOIN token_counts t ON t.seq = m.seq AND t.encoding = ?"
            " WHERE m.seq >= ? AND m.seq < ? ORDER BY m.seq",
            (key, start, end),
        ).fetchall()
        missing = [r[0] for r in rows if r[5] is None]
        counted: dict[int, int] = {}
        if missing:
            for seq in missing:
                for message in self.messages(seq, seq + 1):
                    counted[seq] = ingest.count_text_tokens(message, encoding)
            try:
                with self._write():
                    self._db.executemany(
                        "INSERT OR REPLACE INTO token_counts (seq, encoding, text_tokens) VALUES (?, ?, ?)",
                        [(seq, key, tokens) for seq, tokens in counted.items()],
                    )
            except sqlite3.OperationalError:  # a read-only store: the counts are a cache, use them uncached
                pass
        return [
            ingest.facts_from_row(
                seq, role, uses, results, images, counted[seq] if tokens is None else tokens, kind
            )
            for seq, role, uses, results, images, tokens, kind in rows
        ]

    def pinned_seqs(self) -> list[int]:
        """Return the seqs of the system messages (pinned: always shown raw), in order."""
        return [
            int(r[0]) for r in self._db.execute("SELECT seq FROM messages WHERE role = 'system' ORDER BY seq")
        ]

    # -- image blobs -------------------------------------------------------------------------
    def blob(self, sha256: str) -> bytes:
        """Return the stored bytes of the image blob ``sha256``.

        Raises:
            StoreError: no such blob.
        """
        row = self._db.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no image blob {sha256}")
        return bytes(row[0])

    def blob_hashes(self) -> list[str]:
        """Return the sha256 of every stored blob, sorted."""
        return [r[0] for r in self._db.execute("SELECT sha256 FROM blobs ORDER BY sha256")]

    def image_count(self) -> int:
        """Return the number of distinct stored image blobs."""
        return int(self._db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0])

    # -- summaries -------------------------------------------------------------------------
    def add_summary(
        self, level: int, start_seq: int, end_seq: int, text: str, provenance: dict[str, Any]
    ) -> int:
        """Store a summary of ``[start_seq, end_seq)`` at ``level``; return its id.

        Adding a summary of a range and level that has one returns the existing one's id
        (the first summary stays).

        Raises:
            StoreError: empty text, a bad range, or a write failure.
        """
        ingest.check_summary(level, start_seq, end_seq, text)
        try:
            with self._write():
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO summaries (level, start_seq, end_seq, text, provenance, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (level, start_seq, end_seq, text, canonical_json(provenance), time.time()),
                )
                if cur.rowcount == 0:
                    row = self._db.execute(
                        "SELECT id FROM summaries WHERE level = ? AND start_seq = ? AND end_seq = ?",
                        (level, start_seq, end_seq),
                    ).fetchone()
                    return int(row[0])
                return int(cur.lastrowid or 0)
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: storing a summary failed: {err}") from err

    def summaries(self, level: int | None = None) -> list[StoredSummary]:
        """Return summaries (of one level, or all) ordered by level then start."""
        query = f"SELECT {_SUMMARY_COLUMNS} FROM summaries"
        args: tuple[Any, ...] = ()
        if level is not None:
            query += " WHERE level = ?"
            args = (level,)
        query += " ORDER BY level, start_seq"
        return [ingest.summary_from_row(*row) for row in self._db.execute(query, args).fetchall()]

    def summary_frontier(self, level: int = 1) -> int:
        """Return the end of the newest summary of ``level`` (0 if none).

        Level-1 summaries are added contiguously from seq 0 (the compactor only closes
        chunks at the frontier), so for level 1 this is where unsummarized history starts.
        """
        row = self._db.execute("SELECT MAX(end_seq) FROM summaries WHERE level = ?", (level,)).fetchone()
        return int(row[0] or 0)

    def coarsest_summary_at(self, start_seq: int, max_end_seq: int) -> StoredSummary | None:
        """Return the highest-level summary starting at ``start_seq`` and ending by ``max_end_seq``."""
        row = self._db.execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM summaries"
            " WHERE start_seq = ? AND end_seq <= ? ORDER BY level DESC, end_seq DESC LIMIT 1",
            (start_seq, max_end_seq),
        ).fetchone()
        return None if row is None else ingest.summary_from_row(*row)

    def summaries_within(self, level: int, start_seq: int, end_seq: int) -> list[StoredSummary]:
        """Return the summaries of ``level`` inside ``[start_seq, end_seq)``, by start."""
        rows = self._db.execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM summaries"
            " WHERE level = ? AND start_seq >= ? AND start_seq < ? AND end_seq <= ? ORDER BY start_seq",
            (level, start_seq, end_seq, end_seq),
        ).fetchall()
        return [ingest.summary_from_row(*row) for row in rows]

    def level_starts_before(self, level: int, before_seq: int, limit: int = 64) -> list[int]:
        """Return up to ``limit`` start seqs of ``level`` summaries below ``before_seq``, newest first."""
        rows = self._db.execute(
            "SELECT start_seq FROM summaries WHERE level = ? AND start_seq < ? ORDER BY start_seq DESC LIMIT ?",
            (level, before_seq, limit),
        )
        return [int(r[0]) for r in rows]

    # -- failures and events -------------------------------------------------------------------
    def record_failure(self, level: int, start_seq: int, end_seq: int, reason: str) -> None:
        """Record that ``[start_seq, end_seq)`` could not be summarized at ``level`` (it stays raw).

        Raises:
            StoreError: the database refused the write.
        """
        try:
            with self._write():
                self._db.execute(
                    "INSERT INTO failures (level, start_seq, end_seq, reason, created_at) VALUES (?, ?, ?, ?, ?)",
                    (level, start_seq, end_seq, reason, time.time()),
                )
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: recording a summarizer failure failed: {err}") from err

    def failures(self) -> list[dict[str, Any]]:
        """Return the recorded summarizer failures, oldest first."""
        rows = self._db.execute(
            "SELECT level, start_seq, end_seq, reason FROM failures ORDER BY id"
        ).fetchall()
        return [{"level": lv, "start_seq": s, "end_seq": e, "reason": r} for lv, s, e, r in rows]

    def record_event(
        self,
        tokens_before: int,
        tokens_after: int,
        budget: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> int:
        """Record one compaction; return its id.

        Args:
            tokens_before: tokens of the history before compacting (tokens).
            tokens_after: tokens of the compiled request after it (tokens).
            budget: the budget compacted for, ``None`` when there was none (tokens).
            detail: a JSON object of anything else (summaries added, model, format...).

        Returns:
            The event's id; ids increase in the order events are recorded.

        Raises:
            StoreError: a negative token figure, or the database refused the write.
        """
        if tokens_before < 0 or tokens_after < 0 or (budget is not None and budget < 0):
            raise StoreError(
                f"a compaction event needs token figures of 0 or more; found before={tokens_before}, "
                f"after={tokens_after}, budget={budget}"
            )
        try:
            with self._write():
                cur = self._db.execute(
                    "INSERT INTO compaction_events (created_at, tokens_before, tokens_after, budget, detail)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (time.time(), tokens_before, tokens_after, budget, canonical_json(detail or {})),
                )
                return int(cur.lastrowid or 0)
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: recording a compaction event failed: {err}") from err

    def events(self) -> list[CompactionEvent]:
        """Return the recorded compaction events, oldest first."""
        rows = self._db.execute(
            "SELECT id, created_at, tokens_before, tokens_after, budget, detail FROM compaction_events ORDER BY id"
        ).fetchall()
        return [
            CompactionEvent(i, at, before, after, budget, json.loads(detail))
            for i, at, before, after, budget, detail in rows
        ]


#: The store's public name: the SQLite backend.
Store = SQLiteStore

if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> HistoryStore:
        return store  # mypy checks SQLiteStore against the protocol here
