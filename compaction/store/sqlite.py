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
* ``captions``: at most one caption per image, keyed by its sha256 (beside its blob), with
  provenance, or the failed attempts to make one.
* ``meta`` and ``schema_migrations``: the schema version and the migrations applied.

Compaction never edits ``messages``: summaries are added beside them.  Each write is one
transaction (``BEGIN IMMEDIATE``, so concurrent writers queue instead of failing), and a
crash loses nothing committed.  What a message looks like stored is decided in
:mod:`.ingest`; this module only runs SQL.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..blocks import Message
from ..errors import InvalidArgument, StoreError, found
from ..tokens.encodings import DEFAULT_ENCODING
from . import ingest, migrations, usage
from .lineage import ANY_CONVERSATION, check_conversation_name
from .sql_common import AppendRows, check_opening, json_object
from .sql_summaries import SummaryQueries
from .sync import append_batch

try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - not POSIX: the claim holds nothing
    _fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .base import CaptionStore, HistoryStore

__all__ = ["SQLiteStore", "Store"]

#: Below this many bytes free on the store's file system, an I/O error is reported as a full disk.
_NEARLY_FULL = 1 << 20


def _connection_path(db: sqlite3.Connection) -> str:
    for _seq, name, file in db.execute("PRAGMA database_list"):
        if name == "main":
            return str(file) if file else ":memory:"
    return ":memory:"  # pragma: no cover - SQLite always lists "main"


def _free_bytes(path: str) -> int | None:
    """Return the bytes free to this user on the file system holding ``path`` (None if unknown)."""
    if path == ":memory:":
        return None
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(path)) or ".")
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return None
    return stat.f_bavail * stat.f_frsize


def describe_sqlite_error(err: sqlite3.Error, path: str) -> str:
    """Return what ``err`` means for the store at ``path``, for a person: the cause first.

    A full disk is named as such (SQLite says "database or disk is full", or only
    "disk I/O error" when the disk filled under its journal); a read-only file, a lock held
    too long, a damaged file and a closed store each get their own words.  SQLite's own
    text follows in parentheses.
    """
    text = str(err) or type(err).__name__
    name = str(getattr(err, "sqlite_errorname", "") or "")
    free = _free_bytes(path)
    if name == "SQLITE_FULL" or "database or disk is full" in text:
        reason = f"the disk is full ({text})"
        if free is not None and free >= _NEARLY_FULL:
            reason += (
                f"; the file system reports {free // _NEARLY_FULL:,} MiB free, so the store may have"
                " reached its page limit (PRAGMA max_page_count)"
            )
        return reason + "; free some space and run it again"
    if name.startswith("SQLITE_IOERR") or "disk I/O error" in text:
        if free is not None and free < _NEARLY_FULL:
            return f"the disk is full ({text}; {free:,} bytes free); free some space and run it again"
        return f"a disk I/O error ({text})"
    if name.startswith("SQLITE_READONLY") or "readonly database" in text:
        return (
            f"the store is read-only ({text}); give this user write access to the file and its "
            "directory (SQLite writes a -wal and a -shm file beside it)"
        )
    if name.startswith("SQLITE_BUSY") or "database is locked" in text:
        return f"another process kept the store locked for longer than 30 s ({text}); try again"
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a database" in text:
        return f"the file is damaged or is not an SQLite database ({text})"
    if isinstance(err, sqlite3.ProgrammingError) and "closed" in text:
        return f"the store was closed ({text})"
    if name == "SQLITE_CANTOPEN" or "unable to open database file" in text:
        directory = os.path.dirname(os.path.abspath(path)) if path != ":memory:" else ""
        if directory and not os.path.isdir(directory):
            return f"its directory {directory} does not exist ({text}); create it first, or name a store in one that does"
        if directory and not os.access(directory, os.W_OK | os.X_OK):
            return f"this user cannot write in its directory {directory} ({text})"
    return text



class SQLiteStore(usage.UsageRecords, SummaryQueries):
    """An append-only SQLite store of messages, image blobs, token counts and summaries.

    Args:
        path: a file path or ``":memory:"`` (the default); not with ``connection``.
        connection: an open connection to use instead of opening ``path``.  The store sets
            no PRAGMAs on it and never closes it; its writes join a transaction the caller
            has open (as a savepoint) and otherwise commit on their own.  The database may
            hold the caller's own tables beside the store's (none of the same names).
        encoding: the default encoding whose token counts are cached at append.
        create: create a store if there is none: a missing file, an empty (0-byte) file or
            an SQLite database with nothing in it.  ``False``: any of these is an error, so a
            mistyped path is not silently a new, empty store.  Ignored with ``connection``.
        tracer: called with the text of every SQL statement run on the connection
            (``sqlite3.Connection.set_trace_callback``), e.g. ``print`` or ``list.append``.
        conversation: the conversation this store object reads and writes (see
            :mod:`.lineage`); ``None``: the store's only conversation, or ``"default"`` when
            it holds none yet.  A named conversation that does not exist is created at the
            first write when ``create`` is true.

    One store file holds many conversations; a store object is scoped to one of them, so
    everything that takes a :class:`~compaction.store.base.HistoryStore` works per
    conversation (and per branch: :meth:`branch`).  Image blobs and captions are shared by
    all conversations (content-addressed).

    A file that is not a compaction store is refused untouched, byte for byte: a file that
    is not SQLite, or an SQLite database holding other tables (another application's).

    Raises:
        StoreError: the file is not a compaction store (or is empty and ``create`` is
            false), its schema is newer than this code, or an upgrade it needs cannot be
            written; the message says why (a full disk, a read-only file, ...).
        InvalidArgument: a path, encoding, flag or tracer of the wrong type, or both
            ``path`` and ``connection``.
        EncodingDataMissing: an unknown encoding name, or an hf: tokenizer file that cannot be loaded.

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
        conversation: str | None = None,
    ) -> None:
        if path is not None and connection is not None:
            raise InvalidArgument("SQLiteStore takes a path or a connection, not both")
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise InvalidArgument(f"a store path must be a str or a path; found {found(path)}")
        if connection is not None and not isinstance(connection, sqlite3.Connection):
            raise InvalidArgument(f"connection must be an sqlite3.Connection; found {found(connection)}")
        check_opening(encoding, create)
        if tracer is not None and not callable(tracer):
            raise InvalidArgument(f"tracer must be callable (e.g. print); found {found(tracer)}")
        if conversation is not None and conversation != ANY_CONVERSATION:
            check_conversation_name(conversation)
        self.encoding = encoding
        self._owns_connection = connection is None
        self._traced = tracer is not None
        self._file_id: tuple[int, int] | None = None
        self.path = ":memory:" if path is None else os.fspath(path)
        if isinstance(self.path, bytes):
            raise InvalidArgument(f"a store path must be text, not bytes; found {found(path)}")
        on_disk = connection is None and self.path != ":memory:"
        if on_disk:
            self._check_file(create)
        try:
            if connection is None:
                self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            else:
                self._db = connection
            if tracer is not None:
                self._db.set_trace_callback(tracer)
            if connection is None:
                self._db.execute("PRAGMA busy_timeout = 30000")
                if on_disk:
                    self._file_id = self._identity()
                    self._check_contents(self._db, create)
                    self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
            else:
                self.path = _connection_path(connection)
                self._check_contents(connection, True, beside=True)
            self._migrate()
            self._bind(conversation, create)
        except sqlite3.Error as err:
            self._release()
            raise StoreError(
                f"{self.path}: cannot open as a compaction store: {describe_sqlite_error(err, self.path)}"
            ) from err
        except BaseException:
            self._release()
            raise

    def _check_file(self, create: bool) -> None:
        """Refuse a path that is no store before anything opens it (nothing is written)."""
        target = Path(self.path)
        exists = target.exists()
        if exists and not target.is_file():
            raise StoreError(f"{self.path}: not a file; --store names an SQLite file")
        if not create and not exists:
            raise StoreError(
                f"{self.path}: no store there; create one with `compaction import TRANSCRIPT --store {self.path}`"
            )
        if not exists or target.stat().st_size == 0:
            if not create and exists:
                raise StoreError(
                    f"{self.path}: the file is empty, not a compaction store; create one with "
                    f"`compaction import TRANSCRIPT --store {self.path}`"
                )
            return
        # Look before opening for writing: a read-only connection changes nothing in the
        # file of another application (no journal mode, no checkpoint, no table).
        try:
            probe = sqlite3.connect(target.resolve().as_uri() + "?mode=ro", uri=True, timeout=30.0)
        except sqlite3.Error:
            return  # the read-write connection looks again, and says why it cannot
        try:
            self._check_contents(probe, create)
        except sqlite3.Error:
            return  # likewise (e.g. a WAL file this user cannot map read-only)
        finally:
            probe.close()

    def _check_contents(self, db: sqlite3.Connection, create: bool, *, beside: bool = False) -> None:
        """Refuse a database that holds something other than a compaction store (see ``create``)."""
        state, names = migrations.database_state(db)
        if state == "store":
            return
        if state == "empty":
            if not create:
                raise StoreError(
                    f"{self.path}: an empty database, not a compaction store; create one with "
                    f"`compaction import TRANSCRIPT --store {self.path}`"
                )
            return
        clashing = sorted(set(names) & migrations.STORE_NAMES)
        if beside and not clashing:
            return  # the caller's own tables, beside which the store's will live
        shown = ", ".join(sorted(names)[:8]) + (", ..." if len(names) > 8 else "")
        raise StoreError(
            f"{self.path}: not a compaction store: the database holds other tables ({shown}); "
            "it was left untouched. Name a new file (or a store made by `compaction import`)"
        )

    def _identity(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_dev, stat.st_ino

    def check_location(self) -> None:
        """Raise :class:`StoreError` if the store's file was deleted, moved or replaced since it was opened.

        SQLite keeps writing to a file that was deleted while open (and to a file moved away),
        so such writes are lost to ``path`` without any error; commands check this before
        reporting success, and every write checks it after committing.  Does nothing for a
        store in memory or over a connection it was given.

        Raises:
            StoreError: ``path`` no longer names the file this store opened.
        """
        if self._file_id is None:
            return
        now = self._identity()
        if now == self._file_id:
            return
        if now is None:
            raise StoreError(
                f"{self.path}: the store file was deleted while this command ran; what it wrote went "
                "with it, so nothing was kept. Run the command again on a store that stays in place"
            )
        raise StoreError(
            f"{self.path}: the store file was replaced while this command ran (moved away or "
            f"overwritten); what it wrote went to the old file, so nothing was kept in {self.path}. "
            "Run the command again"
        )

    def _migrate(self) -> None:
        if not migrations.needs_migration(self._db, self.path):
            return
        before = migrations.stored_version(self._db, self.path)
        try:
            with self._write():
                migrations.apply_pending(self._db, self.path)
        except sqlite3.Error as err:
            if before == 0:
                raise
            hint = "; open it once with write access to upgrade it" if "readonly" in str(err) else ""
            raise StoreError(
                f"{self.path}: the store needs upgrading from schema {before} to "
                f"{migrations.SCHEMA_VERSION} and the upgrade failed: {describe_sqlite_error(err, self.path)}{hint}"
            ) from err

    def _failed(self, doing: str, err: sqlite3.Error) -> StoreError:
        return StoreError(f"{self.path}: {doing} failed: {describe_sqlite_error(err, self.path)}")

    @contextmanager
    def _reading(self, doing: str) -> Iterator[None]:
        """Translate an SQLite error inside the block into a :class:`StoreError` saying what failed."""
        try:
            yield
        except sqlite3.Error as err:
            try:
                self.check_location()  # a file replaced under SQLite reads as damaged: say what happened
            except StoreError as moved:
                raise moved from err
            raise self._failed(doing, err) from err

    def _quietly(self, statement: str) -> None:
        """Run a rollback statement whose own failure must not hide the error being handled."""
        try:
            self._db.execute(statement)
        except sqlite3.Error:
            pass  # e.g. SQLite already rolled back after a full disk: nothing left to undo

    @contextmanager
    def _write(self) -> Iterator[None]:
        """Run the block as one write: its own ``BEGIN IMMEDIATE`` transaction, or a savepoint
        inside a transaction the connection's owner has open.

        If the block or the commit fails, the write is rolled back and the *original* error
        propagates (a failing rollback, e.g. after SQLite rolled back on its own, is ignored).
        After a commit, the file is checked to still be where it was opened.
        """
        db = self._db
        if db.in_transaction:
            db.execute("SAVEPOINT compaction_store")
            try:
                yield
                db.execute("RELEASE compaction_store")
            except BaseException:
                if db.in_transaction:
                    self._quietly("ROLLBACK TO compaction_store")
                    self._quietly("RELEASE compaction_store")
                raise
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite may have rolled back already (e.g. a full disk)
                self._quietly("ROLLBACK")
            raise
        self.check_location()

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

    # -- the dialect of the shared queries (see :mod:`.sql_common`) ----------------------------

    def _text_in(self, value: str | None) -> object:
        return ingest.sql_text(value)

    def _text_out(self, value: Any) -> str | None:
        return ingest.text_from_sql(value)

    def _contains(self, haystack: str, needle: str) -> str:
        return f"instr({haystack}, {needle}) > 0"

    def _insert_ignoring(self, into: str, key: str) -> str:
        return f"INSERT OR IGNORE INTO {into}"

    def _insert_replacing(self, into: str, key: str, column: str) -> str:
        return f"INSERT OR REPLACE INTO {into}"

    _FALSE = "0"
    _KIND_COLUMN = "json_extract(m.meta, '$.kind')"
    _JOINED_ROWS = True

    def _cache_counts(self, rows: list[tuple[int, int, str, int]]) -> None:
        try:
            with self._write():
                self._db.executemany(
                    "INSERT OR REPLACE INTO token_counts (conversation_id, seq, encoding, text_tokens) VALUES (?, ?, ?, ?)",
                    rows,
                )
        except sqlite3.Error:  # a read-only or full store: the counts are a cache, use them uncached
            pass

    # -- messages --------------------------------------------------------------------------
    def __len__(self) -> int:
        with self._reading("counting messages"):
            where, args = self._rows()
            return int(self._db.execute(f"SELECT COUNT(*) FROM messages WHERE {where}", args).fetchone()[0])

    def _append(self, batch: list[Message], chain_seed: str | None) -> int:
        return append_batch(_SQLiteRows(self), batch, chain_seed)

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Run the block's reads in one read transaction, so they all see one state of the store.

        Outside a transaction each statement of an autocommit connection reads the store as
        it is when the statement starts, so a read's bound (:meth:`next_seq`) and its rows
        taken by two statements could see two states: an append committed by another
        connection in between (to this conversation) made a read with an ``end`` past the
        newest message expect rows its own statement could not see, and report a message
        "missing" that was only newer (``tests/test_store_read_race_session16.py``).  A
        deferred ``BEGIN`` takes WAL's snapshot at the first read and keeps it until the
        ``COMMIT``; inside a transaction already open (a write's, or the caller's on a
        connection it gave) the block reads in that one.  Nothing is written in the block.
        """
        db = self._db
        if db.in_transaction:
            yield
            return
        db.execute("BEGIN")
        try:
            yield
        except BaseException:
            if db.in_transaction:
                self._quietly("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _check_dense(self, seqs: list[int], start: int, end: int) -> None:
        """Raise StoreError unless ``seqs`` are exactly the seqs of ``[start, end)`` (seqs are dense by contract).

        ``end`` is the read's bound, at most :meth:`next_seq` as read in the same snapshot as
        the rows (:meth:`_snapshot`), so any difference is in the file itself, not a write
        of another connection meanwhile.
        """
        expected = max(0, end - max(start, 0))
        if len(seqs) == expected:
            return
        present = set(seqs)
        hole = next((seq for seq in range(max(start, 0), end) if seq not in present), None)
        if hole is None:  # more rows than the range holds: a seq stored twice
            raise StoreError(
                f"{self.path}: {len(seqs)} message rows were read for the {expected} seqs of "
                f"[{max(start, 0)}, {end}) in one snapshot of the store: "
                "a message is stored twice, so the store was edited outside compaction; restore it from a copy"
            )
        raise StoreError(
            f"{self.path}: message {hole} is missing from the store (messages are numbered without gaps); "
            "the store was edited outside compaction: restore it from a copy, or import the transcript into a new store"
        )

    # -- summaries -------------------------------------------------------------------------
    def add_summary(
        self, level: int, start_seq: int, end_seq: int, text: str, provenance: dict[str, Any]
    ) -> int:
        """Store a summary of ``[start_seq, end_seq)`` at ``level``; return its id.

        Adding a summary of a range and level that has one returns the existing one's id
        (the first summary stays).

        Raises:
            StoreError: empty text, a bad range, or a write failure (the message says why).
            InvalidArgument: an argument of the wrong type (provenance must be a dict).
        """
        ingest.check_summary(level, start_seq, end_seq, text)
        recorded = json_object(provenance, "a summary's provenance")
        with self._reading(f"storing a level-{level} summary of [{start_seq}, {end_seq})"), self._write():
            home = self._summary_home(level, start_seq, end_seq)
            cur = self._db.execute(  # a new id above the stale ones too: an id names one summary for good
                "INSERT OR IGNORE INTO summaries (id, conversation_id, level, start_seq, end_seq, text, provenance,"
                " created_at) VALUES (MAX(COALESCE((SELECT MAX(id) FROM summaries), 0),"
                " COALESCE((SELECT MAX(id) FROM stale_summaries), 0)) + 1, ?, ?, ?, ?, ?, ?, ?)",
                (home, level, start_seq, end_seq, ingest.sql_text(text), recorded, time.time()),
            )
            if cur.rowcount == 0:
                row = self._db.execute(
                    "SELECT id FROM summaries WHERE conversation_id = ? AND level = ? AND start_seq = ? AND end_seq = ?",
                    (home, level, start_seq, end_seq),
                ).fetchone()
                return int(row[0])
            return int(cur.lastrowid or 0)

    # -- the compaction claim --------------------------------------------------------------
    @contextmanager
    def compaction_claim(self, wait: bool = True) -> Iterator[bool]:
        """Hold the conversation's compaction claim for the block: no other process compresses its tree meanwhile.

        The claim covers the conversation's whole tree of branches (they share summaries of
        their shared messages), so two processes compressing a conversation and its branch
        never make the same or overlapping summaries; other trees of the store are compressed
        in parallel.  It is an exclusive ``flock`` on a sibling lock file per tree,
        ``<store>.claim-<root conversation id>``, so it is released at the end of the block,
        or by the kernel when the process dies.  The holder removes the lock file before it
        releases the lock, so none stays beside the store; a process that was waiting on the
        removed file then holds the lock of a file no longer there, sees that (the path names
        another file, or none) and locks the path anew, so two holders never hold the same
        name (the unlink-while-locked protocol; a process killed while holding leaves its
        empty file, which the next holder removes).  As on PostgreSQL, it is held per store
        object: two objects in one process exclude each other too.

        Args:
            wait: wait for a holder to finish (True), or yield False at once.

        Yields:
            Whether this store object holds the claim (always True when ``wait``).  Claims
            nest.  A ``:memory:`` store (one connection, nobody else) holds nothing and
            yields True; so does a platform without ``fcntl``.

        Raises:
            StoreError: the lock file cannot be created or locked (a read-only directory...).
        """
        held = getattr(self, "_claims", 0)
        if held:
            self._claims = held + 1
            try:
                yield True
            finally:
                self._claims -= 1
            return
        lock_path = self._claim_path()
        if lock_path is None or _fcntl is None:
            yield True
            return
        while True:
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise StoreError(
                    f"{self.path}: cannot create the compaction claim's lock file {lock_path}: {err}"
                ) from err
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | (0 if wait else _fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                yield False
                return
            except OSError as err:
                os.close(fd)
                raise StoreError(f"{self.path}: cannot lock the compaction claim {lock_path}: {err}") from err
            if _still_named(fd, lock_path):
                break
            os.close(fd)  # the holder we waited for removed this file: lock the one the path names now
        self._claims = 1
        try:
            yield True
        finally:
            self._claims = 0
            try:
                os.unlink(lock_path)  # while still locked: a waiter on it sees it gone and locks anew
            except OSError:
                pass  # removed already (by hand), or a read-only directory: the lock is released all the same
            os.close(fd)  # releases the lock

    def _claim_path(self) -> str | None:
        """Return the lock file of this conversation's tree (``None``: a store with no file)."""
        if self.path in ("", ":memory:") or not os.path.isfile(self.path):
            return None
        with self._reading("finding the conversation's tree"):
            self._refresh()
        segments = self._lineage.segments
        if segments:  # the root of the tree: a branch and its parent share it
            tree = str(segments[-1].conversation_id)
        else:  # not created yet: named by its conversation (any text, so hashed into the file name)
            tree = "new-" + hashlib.sha256(self.conversation.encode()).hexdigest()[:16]
        return f"{self.path}.claim-{tree}"


def _still_named(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a claim's lock file not removed meanwhile)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


#: The store's public name: the SQLite backend.
Store = SQLiteStore

if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> HistoryStore:
        return store  # mypy checks SQLiteStore against the protocol here

    def _keeps_captions(store: SQLiteStore) -> CaptionStore:
        return store  # and against the caption protocol


class _SQLiteRows(AppendRows):
    """:class:`.sql_common.AppendRows` on an SQLite store inside its write transaction, reading the
    message count and a stored message through the store's own methods (their error words)."""

    store: SQLiteStore

    def next_seq(self) -> int:
        return self.store.next_seq()

    def row_at(self, seq: int) -> tuple[Message, str] | None:
        self.store._refresh()
        owner = self.store._lineage.owner(seq)  # the one row it can be: an indexed read, whatever the depth
        row = self.db.execute(
            "SELECT import_key FROM messages WHERE conversation_id = ? AND seq = ?", (owner, seq)
        ).fetchone()
        if owner is None or row is None:
            return None
        (stored,) = self.store.messages(seq, seq + 1)
        return stored, str(row[0])
