"""Where a fleet's conversations live: one :class:`FleetTarget` per conversation to compress.

:func:`fleet_targets` is the one place a fleet location is read.  A location names one or
many stores, and each store holds one or many conversations (branches included), listed
with :func:`compaction.store.list_conversations`:

* a directory of SQLite stores: the proxy's ``--store-dir`` layout
  (``DIR/conversations/<id>.sqlite``, see :mod:`compaction.serve.conversations`), or a plain
  directory of ``*.sqlite`` stores (``DIR/<id>.sqlite``); the conversation id is the file's
  stem;
* one SQLite store file: a fleet of one;
* a PostgreSQL database, ``postgresql://host/DATABASE``: every schema in it that is a
  compaction store (:mod:`compaction.store.postgres`: one store per schema); the id is the
  schema's name.  A URL with ``?store=NAME`` is a fleet of that one store.

A store holding one conversation (or none yet) is one target named after the store; a
store holding several gives one target per conversation, named ``STORE/CONVERSATION`` (or
just ``CONVERSATION`` when the location is that one store), in the store's creation order
(a parent before its branches).

A target carries where its store is and which conversation, never an open connection, so
a worker on another host opens the store itself.  ``lock`` names the store: two tasks never
write one store at once (one SQLite writer per file; and branches share their prefix's
summaries, so the conversations of one store run one after another, in the fleet's order,
which keeps every run's summaries the same as a sequential run's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import CompactionError, StoreError
from ..store import list_conversations
from ..store.postgres import is_postgres_url, parse_store_url

__all__ = ["FleetLocationError", "FleetTarget", "fleet_targets", "select_targets"]


class FleetLocationError(ValueError, CompactionError):
    """A fleet location holds no stores, does not exist, or names conversations it lacks."""


@dataclass(frozen=True)
class FleetTarget:
    """One conversation a fleet task compresses.

    Attributes:
        name: the conversation's id, unique in the fleet (a file stem or a schema name).
        location: what :func:`compaction.store.open_store` opens (a file path or a store URL,
            password included: the worker connects with it; never printed, see ``shown``).
        shown: ``location`` fit for messages (a URL's password replaced by ``***``).
        conversation: the conversation inside a store that holds many, or ``None`` for a
            store of one conversation.
        lock: the store, which only one task at a time writes (an SQLite file's resolved
            path, a PostgreSQL store's URL without password); ``None``: no such limit.
    """

    name: str
    location: str = field(repr=False)
    shown: str
    conversation: str | None = None
    lock: str | None = None


def fleet_targets(location: str | os.PathLike[str]) -> list[FleetTarget]:
    """Return the conversations stored at ``location``, one target each, in the fleet's order.

    Args:
        location: a directory of SQLite stores (``DIR/conversations/*.sqlite`` or
            ``DIR/*.sqlite``), one SQLite store file, or a ``postgresql://`` URL (every
            store schema of its database, or the one ``?store=NAME`` names).

    Returns:
        The targets: stores sorted by name, each store's conversations in creation order
        (the order a sequential run takes).

    Raises:
        FleetLocationError: the path does not exist, or the directory or database holds no
            store, or a named PostgreSQL store does not exist.
        StoreError: the PostgreSQL server cannot be reached or refuses the user, or the
            one store named cannot be read.  (A damaged store among many is a target of
            its own, whose task reports the error.)

    Example:
        >>> [t.name for t in fleet_targets("runs/")]  # doctest: +SKIP
        ['alice', 'bob']
    """
    if is_postgres_url(location):
        return _postgres_targets(str(location))
    if not isinstance(location, (str, os.PathLike)):
        raise FleetLocationError(
            f"a fleet location is a directory, a store file or a postgresql:// URL; found {location!r}"
        )
    path = Path(location)
    if path.is_file():
        return _store_targets(path.stem, str(path), str(path), str(path.resolve()), alone=True)
    if not path.exists():
        raise FleetLocationError(f"{path}: no such directory or store file")
    if not path.is_dir():
        raise FleetLocationError(f"{path}: not a directory or a store file")
    proxy = path / "conversations"
    files = sorted(proxy.glob("*.sqlite")) if proxy.is_dir() else []
    if not files:
        files = sorted(path.glob("*.sqlite"))
    if not files:
        raise FleetLocationError(
            f"{path}: no stores there; expected {path / 'conversations'}/<id>.sqlite (a compaction serve "
            f"--store-dir) or {path}/<id>.sqlite"
        )
    return [target for file in files for target in _sqlite_targets(file)]


def select_targets(targets: list[FleetTarget], conversations: str | None) -> list[FleetTarget]:
    """Return the targets ``conversations`` names: ``"all"`` (or ``None``), or ``ID,ID,...``.

    Raises:
        FleetLocationError: an id that is not among ``targets`` (all of them named), or an
            empty list.
    """
    if conversations is None or conversations.strip() == "all":
        return list(targets)
    wanted = [part.strip() for part in conversations.split(",") if part.strip()]
    if not wanted:
        raise FleetLocationError("--conversations is empty; give 'all' or a comma-separated list of ids")
    names = {t.name for t in targets}
    missing = [name for name in wanted if name not in names]
    if missing:
        known = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        raise FleetLocationError(
            f"no conversation {', '.join(repr(m) for m in missing)} in this fleet ({len(names)} conversations: {known})"
        )
    chosen = set(wanted)
    return [t for t in targets if t.name in chosen]  # the fleet's order, whatever order they were named in


def _store_targets(store: str, location: str, shown: str, lock: str, *, alone: bool) -> list[FleetTarget]:
    """Return one target per conversation of the store at ``location`` (see the module docstring).

    Raises:
        StoreError: the store cannot be read (only when ``alone``: among many, a damaged
            store is one target whose task reports the error).
    """
    try:
        conversations = [c.name for c in list_conversations(location)]
    except StoreError:
        if alone:
            raise
        conversations = []
    if alone and len(conversations) > 1:
        names = conversations
    elif len(conversations) > 1:
        names = [f"{store}/{c}" for c in conversations]
    else:
        return [FleetTarget(store, location, shown, conversations[0] if conversations else None, lock)]
    return [FleetTarget(n, location, shown, c, lock) for n, c in zip(names, conversations, strict=True)]


def _sqlite_targets(path: Path) -> list[FleetTarget]:
    return _store_targets(path.stem, str(path), str(path), str(path.resolve()), alone=False)


def _with_store(url: str, name: str) -> str:
    """Return ``url`` naming the store (schema) ``name`` (``?store=name``, other parameters kept)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "store"]
    query.append(("store", name))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def _postgres_targets(url: str) -> list[FleetTarget]:
    """List the store schemas of the database ``url`` names (or the one store it names)."""
    conninfo, _default, shown = parse_store_url(url)
    named = [v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True) if k == "store"]
    try:
        import psycopg
    except ImportError as err:  # pragma: no cover - the postgres extra is missing
        raise StoreError(
            f"{shown}: PostgreSQL stores need psycopg: pip install 'compaction[postgres]'"
        ) from err
    from ..store.postgres import describe_pg_error
    from ..store.postgres_schema import BASELINE_TABLES

    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as db:
            rows = db.execute(
                "SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid "
                "WHERE c.relkind IN ('r', 'p') AND c.relname = ANY(%s) "
                "GROUP BY n.nspname HAVING COUNT(DISTINCT c.relname) = %s ORDER BY n.nspname",
                (sorted(BASELINE_TABLES), len(BASELINE_TABLES)),
            ).fetchall()
    except psycopg.Error as err:
        raise StoreError(f"{shown}: listing the stores failed: {describe_pg_error(err)}") from err
    schemas = [str(row[0]) for row in rows]
    if named:
        if named[-1] not in schemas:
            raise FleetLocationError(f"{shown}: no compaction store named {named[-1]!r} in this database")
        schemas = [named[-1]]
    if not schemas:
        raise FleetLocationError(
            f"{shown}: no compaction stores in this database (a store is a schema; see ?store=NAME)"
        )
    base = urlunsplit(urlsplit(shown)._replace(query=""))
    targets = []
    for schema in schemas:
        where = f"{base}?store={schema}"
        targets += _store_targets(schema, _with_store(url, schema), where, where, alone=bool(named))
    return targets
