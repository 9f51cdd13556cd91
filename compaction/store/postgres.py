"""The PostgreSQL backend: a store shared by several processes on several hosts.

A store is named by a URL, ``postgresql://[user[:password]@]host[:port]/database?store=NAME``
(``postgres://`` works too; any other query parameter is passed to libpq, e.g.
``sslmode=require``).  ``NAME`` (lowercase letters, digits and ``_``, at most 63; default
``compaction``) is the PostgreSQL schema the store's tables live in, so one database holds
many stores, each of many conversations (see :mod:`.lineage`).  Dropping the schema (``DROP SCHEMA NAME CASCADE``)
deletes the store.

The tables are those of the SQLite store (see :mod:`.postgres_schema` for the differences
and the schema's own recorded migrations); what a message looks like stored is decided in
:mod:`.ingest` and the import-key walk of :meth:`PostgresStore.append` is :mod:`.sync`, so
both backends store the same thing and this module only runs SQL.

Concurrency and crashes:

* Every write is one transaction: a batch of messages, a summary, a failure, an event
  commits whole or leaves nothing (a killed client's open transaction is rolled back by the
  server).
* Appends take an exclusive transaction-level advisory lock of the store, so seqs stay dense
  from 0 and a transcript synced by two processes at once is stored once.  Summary inserts
  and token-count cache writes take it shared (they wait for an append in progress, never
  for each other).  Summaries are unique per ``(level, start_seq, end_seq)``: two workers
  adding the same one store it once and both get its id.
* :meth:`PostgresStore.compaction_claim` is a session-level advisory lock: a worker that
  holds it is the only one compressing the conversation (and the branches of its tree), so
  a chunk is not summarized twice
  (:func:`compaction.store.factory.compaction_claim` takes it for any store).  It is released
  when the worker's connection ends, so a worker that dies leaves no claim behind.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import InvalidArgument, StoreError, found
from ..tokens.encodings import DEFAULT_ENCODING
from . import ingest, usage
from .lineage import ANY_CONVERSATION, check_conversation_name
from .postgres_schema import BASELINE_TABLES, MIGRATIONS_TABLE, PG_MIGRATIONS, PG_SCHEMA_VERSION
from .sql_common import check_opening, json_object
from .sql_summaries import SummaryQueries

if TYPE_CHECKING:
    import psycopg

    from .base import HistoryStore

__all__ = ["DEFAULT_STORE_NAME", "PostgresStore", "is_postgres_url", "parse_store_url"]

#: The store (schema) a URL without ``?store=`` names.
DEFAULT_STORE_NAME = "compaction"

_SCHEMES = ("postgresql", "postgres")
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: SQLSTATE codes worth naming to a person (the server's own text follows).
_SQLSTATE_CAUSES = {
    "53100": "the database server's disk is full; free some space and run it again",
    "53200": "the database server ran out of memory",
    "53300": "the database server has too many connections; close some or raise max_connections",
    "25006": "the database is read-only (a standby or default_transaction_read_only)",
    "42501": "this database user lacks the privilege (it needs to create a schema and tables the first time)",
    "57P01": "the database server was shut down while this command ran",
    "57P03": "the database server is starting up or shutting down; try again",
    "28P01": "the password was refused",
    "28000": "the server refused this user",
    "3D000": "the database does not exist; create it (createdb NAME)",
}


def is_postgres_url(location: object) -> bool:
    """Return whether ``location`` is a ``postgresql://`` (or ``postgres://``) store URL."""
    return isinstance(location, str) and location.split("://", 1)[0].lower() in _SCHEMES and "://" in location


def parse_store_url(url: str) -> tuple[str, str, str]:
    """Split a store URL into what libpq connects to, the store's name and a printable form.

    Args:
        url: ``postgresql://user:password@host:port/database?store=NAME&sslmode=...``.

    Returns:
        ``(conninfo, name, shown)``: the URL without ``store`` (for libpq), the store (schema)
        name, and the URL with any password replaced by ``***`` (for messages).

    Raises:
        StoreError: not a PostgreSQL URL, no database named, or a store name that is not
            lowercase letters, digits and ``_`` (at most 63, not starting with a digit).

    Example:
        >>> parse_store_url("postgresql://me:pw@db:5432/agents?store=alice")[1:]
        ('alice', 'postgresql://me:***@db:5432/agents?store=alice')
    """
    if not is_postgres_url(url):
        raise StoreError(f"{url!r}: not a PostgreSQL store URL; expected postgresql://host/database?store=NAME")
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    names = [value for key, value in query if key == "store"]
    rest = [(key, value) for key, value in query if key != "store"]
    name = names[-1] if names else DEFAULT_STORE_NAME
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    shown = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    if not parts.path.strip("/"):
        raise StoreError(f"{shown}: name a database in the URL (postgresql://host/DATABASE?store=NAME)")
    if not _NAME.fullmatch(name):
        raise StoreError(
            f"{shown}: the store name {name!r} must be lowercase letters, digits and '_' (at most 63, "
            "not starting with a digit); it names the PostgreSQL schema the store lives in"
        )
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), ""))
    return conninfo, name, shown


def describe_pg_error(err: BaseException) -> str:
    """Return what a psycopg error means for a person: the cause first, the server's text after."""
    text = " ".join(str(err).split()) or type(err).__name__
    state = getattr(err, "sqlstate", None)
    if state in _SQLSTATE_CAUSES:
        return f"{_SQLSTATE_CAUSES[state]} ({text})"
    if state and state.startswith("08") or "connection" in text.lower() and "refused" in text.lower():
        return f"cannot reach the database server ({text})"
    if "closed" in text and "connection" in text:
        return f"the store was closed ({text})"
    return text


def _bytes(value: str | None) -> bytes | None:
    """Return text as UTF-8 bytes with lone surrogates kept (for a BYTEA column)."""
    return None if value is None else value.encode("utf-8", "surrogatepass")


def _text(value: bytes | memoryview | None) -> str | None:
    """Return the text :func:`_bytes` stored."""
    return None if value is None else bytes(value).decode("utf-8", "surrogatepass")


def _lock_key(name: str, purpose: str) -> int:
    """Return a 64-bit advisory lock key for ``purpose`` on store ``name`` (signed, as PostgreSQL takes it)."""
    digest = hashlib.sha256(f"compaction:{name}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresStore(usage.UsageRecords, SummaryQueries):
    """An append-only PostgreSQL store of messages, image blobs, token counts and summaries.

    Args:
        url: ``postgresql://host/database?store=NAME`` (see the module docstring).
        encoding: the default encoding whose token counts are cached at append.
        create: create the store (its schema and tables) if there is none.  ``False``: a
            missing or empty schema is an error, so a mistyped name is not a new, empty store.
        connect_timeout: seconds to wait for the server before failing.
        conversation: the conversation this object reads and writes, as
            :class:`~compaction.store.sqlite.SQLiteStore`'s.

    A schema that holds other tables (another application's) is refused untouched.

    Raises:
        StoreError: the server cannot be reached or refuses the user, the schema is not a
            compaction store (or is missing and ``create`` is false), its schema version is
            newer than this code, or a write failed; the message says why.
        InvalidArgument: an argument of the wrong type.
        EncodingDataMissing: an unknown encoding name, or an hf: tokenizer file that cannot be loaded.

    Example:
        >>> store = PostgresStore("postgresql://localhost/agents?store=alice")  # doctest: +SKIP
        >>> store.append([Message("user", ({"type": "text", "text": "hi"},))])  # doctest: +SKIP
        1
    """

    _mark = "%s"

    def __init__(
        self,
        url: str,
        *,
        encoding: str = DEFAULT_ENCODING,
        create: bool = True,
        connect_timeout: int = 30,
        conversation: str | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise InvalidArgument(f"a PostgreSQL store URL must be a str; found {found(url)}")
        check_opening(encoding, create)
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, int) or connect_timeout < 1:
            raise InvalidArgument(f"connect_timeout must be a whole number of seconds >= 1; found {found(connect_timeout)}")
        if conversation is not None and conversation != ANY_CONVERSATION:
            check_conversation_name(conversation)
        conninfo, self.name, self.path = parse_store_url(url)
        self.encoding = encoding
        self._store_id: str | None = None
        self._claims = 0
        try:
            import psycopg
        except ImportError as err:
            raise StoreError(
                f"{self.path}: a PostgreSQL store needs psycopg 3; install it with "
                "pip install 'compaction[postgres]'"
            ) from err
        self._pg = psycopg
        try:
            self._db: psycopg.Connection[Any] = psycopg.connect(
                conninfo, autocommit=True, connect_timeout=connect_timeout, application_name="compaction"
            )
        except psycopg.Error as err:
            raise StoreError(f"{self.path}: cannot open the store: {describe_pg_error(err)}") from err
        try:
            self._open(create)
            self._bind(conversation, create)
        except psycopg.Error as err:
            self._db.close()
            raise StoreError(f"{self.path}: cannot open as a compaction store: {describe_pg_error(err)}") from err
        except BaseException:
            self._db.close()
            raise

    # -- opening and the schema ----------------------------------------------------------
    def _state(self) -> tuple[str, set[str]]:
        """Return what the store's schema holds: ``missing``, ``empty``, ``store`` or ``other`` (and its tables)."""
        row = self._db.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", (self.name,)).fetchone()
        if row is None:
            return "missing", set()
        tables = {
            str(r[0])
            for r in self._db.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = %s AND relkind IN ('r', 'v', 'm', 'p', 'f')",
                (row[0],),
            )
        }
        if not tables:
            return "empty", tables
        if BASELINE_TABLES <= tables:
            return "store", tables
        return "other", tables

    def _version(self) -> int:
        recorded = self._db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        declared = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(recorded[0]) if recorded else 0
        if declared is not None:
            if not str(declared[0]).strip().isdigit():
                raise StoreError(f"{self.path}: cannot open as a compaction store: its schema version {declared[0]!r} is not a number")
            version = max(version, int(declared[0]))
        if version > PG_SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: store schema version {version} is newer than this compaction "
                f"({PG_SCHEMA_VERSION}); upgrade compaction"
            )
        return version

    def _open(self, create: bool) -> None:
        from psycopg import sql

        self._db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.name)))
        state, tables = self._state()
        if state == "store" and self._version() == PG_SCHEMA_VERSION:
            self._store_id = self._read_store_id()
            return
        if state in ("missing", "empty") and not create:
            what = "no store" if state == "missing" else "an empty schema, not a compaction store"
            raise StoreError(
                f"{self.path}: {what} there; create one with `compaction import TRANSCRIPT --store {self.path}`"
            )
        with self._db.transaction():
            # One opener at a time creates or upgrades a store (the others wait, then find it done).
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(self.name, "schema"),))
            state, tables = self._state()
            if state == "other":
                shown = ", ".join(sorted(tables)[:8]) + (", ..." if len(tables) > 8 else "")
                raise StoreError(
                    f"{self.path}: not a compaction store: the schema {self.name!r} holds other tables "
                    f"({shown}); it was left untouched. Name a new store (?store=NAME)"
                )
            if state == "missing":
                self._db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.name)))
            version = self._version() if state == "store" else 0
            self._db.execute(MIGRATIONS_TABLE)
            now = time.time()
            for migration in PG_MIGRATIONS:
                if migration.version <= version:
                    continue
                for statement in migration.statements:
                    self._db.execute(statement)
                self._db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, now),
                )
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (str(PG_SCHEMA_VERSION),),
            )
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('store_id', %s) ON CONFLICT (key) DO NOTHING",
                (uuid.uuid4().hex,),
            )
        self._store_id = self._read_store_id()

    def _read_store_id(self) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        return None if row is None else str(row[0])

    def schema_migrations(self) -> list[tuple[int, str]]:
        """Return the recorded migrations of this store's schema, ``(version, name)`` in order."""
        with self._reading("reading the schema's migrations"):
            return [(int(v), str(n)) for v, n in self._db.execute("SELECT version, name FROM schema_migrations ORDER BY version")]

    def check_location(self) -> None:
        """Raise :class:`StoreError` if the store's schema was dropped or replaced since it was opened.

        Raises:
            StoreError: the schema is gone, or holds another store (recreated meanwhile),
                or the server cannot be reached.
        """
        try:
            with self._db.transaction():
                state, _tables = self._state()
                now = self._read_store_id() if state == "store" else None
        except self._pg.Error as err:
            raise StoreError(f"{self.path}: checking the store failed: {describe_pg_error(err)}") from err
        if state != "store":
            raise StoreError(
                f"{self.path}: the store was deleted while this command ran (its schema {self.name!r} is gone); "
                "what it wrote went with it. Run the command again"
            )
        if now != self._store_id:
            raise StoreError(
                f"{self.path}: the store was replaced while this command ran (dropped and made anew); "
                "what it wrote went to the old one. Run the command again"
            )

    # -- transactions and errors -----------------------------------------------------------
    @contextmanager
    def _reading(self, doing: str) -> Iterator[None]:
        """Translate a psycopg error inside the block into a :class:`StoreError` saying what failed."""
        try:
            yield
        except self._pg.Error as err:
            raise StoreError(f"{self.path}: {doing} failed: {describe_pg_error(err)}") from err

    @contextmanager
    def _write(self, lock: str | None = None) -> Iterator[None]:
        """Run the block as one transaction, holding the store's write lock (``exclusive`` or ``shared``)."""
        with self._db.transaction():
            if lock == "exclusive":
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(self.name, "write"),))
            elif lock == "shared":
                self._db.execute("SELECT pg_advisory_xact_lock_shared(%s)", (_lock_key(self.name, "write"),))
            yield

    @contextmanager
    def compaction_claim(self, wait: bool = True) -> Iterator[bool]:
        """Hold the conversation's compaction claim for the block: no other worker compresses it meanwhile.

        The claim covers the conversation's whole tree of branches (they share summaries of
        their shared messages), so two workers never make the same or overlapping summaries;
        conversations of other trees in the same store are compressed in parallel.

        Args:
            wait: wait for a worker holding the claim to finish (True), or yield False at once.

        Yields:
            Whether this worker holds the claim (always True when ``wait``).  Claims nest.

        The claim is a session-level advisory lock: it is released at the end of the block,
        or by the server when this connection ends (a worker that dies holds nothing).

        Raises:
            StoreError: the server could not be asked.
        """
        self._refresh()
        tree = self._lineage.segments[-1].conversation_id if self._lineage.segments else self.conversation
        key = _lock_key(self.name, f"compaction:{tree}")  # one per tree of branches: others compress in parallel
        if self._claims:
            self._claims += 1
            try:
                yield True
            finally:
                self._claims -= 1
            return
        with self._reading("claiming the store's compaction"):
            if wait:
                self._db.execute("SELECT pg_advisory_lock(%s)", (key,))
                held = True
            else:
                row = self._db.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                held = bool(row and row[0])
        if not held:
            yield False
            return
        self._claims = 1
        try:
            yield True
        finally:
            self._claims = 0
            if not self._db.closed:
                try:
                    self._db.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except self._pg.Error:
                    pass  # the connection is gone, and the claim with it

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (a claim it held is released)."""
        db = getattr(self, "_db", None)
        if db is not None and not db.closed:
            db.close()

    # -- the dialect of the shared queries (see :mod:`.sql_common`) ----------------------------
    _BYTEWISE = ' COLLATE "C"'
    _MESSAGE_COLUMNS = (
        "role", "content", "source_id", "meta", "kind", "import_key", "tool_uses", "tool_results", "images",
    )

    def _text_in(self, value: str | None) -> object:
        return _bytes(value)

    def _text_out(self, value: Any) -> str | None:
        return _text(value)

    def _contains(self, haystack: str, needle: str) -> str:
        return f"strpos({haystack}, {needle}) > 0"

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Run the block's reads in one ``REPEATABLE READ`` transaction: one snapshot for all of them.

        A plain transaction is ``READ COMMITTED``, where each statement takes a snapshot of
        its own, so a read's bound (:meth:`next_seq`) and its rows could see two states of
        the store, as on SQLite (see its ``_snapshot``).  Inside a transaction already open
        (a write's) the block reads in that one, as a savepoint.
        """
        idle = self._db.info.transaction_status == self._pg.pq.TransactionStatus.IDLE
        with self._db.transaction():
            if idle:  # the first statement of the transaction: its isolation can still be set
                self._db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield

    def _limit(self, limit: int) -> int | None:
        return None if limit < 0 else limit  # LIMIT NULL: all, as SQLite's LIMIT -1

    def _insert_ignoring(self, into: str, key: str) -> str:
        return f"INSERT INTO {into} ON CONFLICT ({key}) DO NOTHING"

    def _insert_replacing(self, into: str, key: str, column: str) -> str:
        return f"INSERT INTO {into} ON CONFLICT ({key}) DO UPDATE SET {column} = EXCLUDED.{column}"

    def _cache_counts(self, rows: list[tuple[int, int, str, int]]) -> None:
        ordered = sorted(rows, key=lambda r: (r[1], r[0]))  # by seq, as the rows were read
        try:
            with self._write("shared"), self._db.cursor() as cur:  # shared: waits for an append in progress
                cur.executemany(
                    "INSERT INTO token_counts (conversation_id, seq, encoding, text_tokens)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (conversation_id, seq, encoding) DO NOTHING",
                    ordered,
                )
        except self._pg.Error:  # a read-only or full database: the counts are a cache
            pass

    # -- messages --------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.next_seq()

    def _append_write(self) -> AbstractContextManager[None]:
        """Appenders on several hosts queue on the store's exclusive advisory lock, so seqs stay dense."""
        return self._write("exclusive")

    # -- summaries -------------------------------------------------------------------------
    def add_summary(
        self, level: int, start_seq: int, end_seq: int, text: str, provenance: dict[str, Any]
    ) -> int:
        """Store a summary of ``[start_seq, end_seq)`` at ``level``; return its id.

        Adding a summary of a range and level that has one returns the existing one's id
        (the first summary stays), also when two workers add it at once.

        Raises:
            StoreError: empty text, a bad range, or a write failure (the message says why).
            InvalidArgument: an argument of the wrong type (provenance must be a dict).
        """
        ingest.check_summary(level, start_seq, end_seq, text)
        recorded = json_object(provenance, "a summary's provenance")
        with self._reading(f"storing a level-{level} summary of [{start_seq}, {end_seq})"), self._write("shared"):
            home = self._summary_home(level, start_seq, end_seq)
            row = self._db.execute(
                "INSERT INTO summaries (conversation_id, level, start_seq, end_seq, text, provenance, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (conversation_id, level, start_seq, end_seq) DO NOTHING RETURNING id",
                (home, level, start_seq, end_seq, _bytes(text), recorded, time.time()),
            ).fetchone()
            if row is None:
                row = self._db.execute(
                    "SELECT id FROM summaries WHERE conversation_id = %s AND level = %s AND start_seq = %s AND end_seq = %s",
                    (home, level, start_seq, end_seq),
                ).fetchone()
            return int(row[0]) if row else 0


if TYPE_CHECKING:

    def _conforms(store: PostgresStore) -> HistoryStore:
        return store  # mypy checks PostgresStore against the protocol here
