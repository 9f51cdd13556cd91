"""Open a store by where it lives: a file path (SQLite) or a ``postgresql://`` URL (PostgreSQL).

:func:`open_store` is what ``--store`` goes through: a path opens the embedded SQLite store
(the default), a URL the shared PostgreSQL one (see :mod:`.postgres` for the URL and how one
database holds many stores).  :func:`compaction_claim` makes one worker the only one
compressing a store while it holds the claim, on backends that can say so.

Example:
    >>> with open_store(":memory:") as store:
    ...     len(store)
    0
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import InvalidArgument, found
from ..tokens.encodings import DEFAULT_ENCODING
from .base import HistoryStore
from .postgres import PostgresStore, is_postgres_url
from .sqlite import SQLiteStore

__all__ = ["compaction_claim", "is_store_url", "open_store"]


def is_store_url(location: object) -> bool:
    """Return whether ``location`` names a server store (a ``postgresql://`` URL), not a file."""
    return is_postgres_url(location)


def open_store(
    location: str | Path, *, create: bool = True, encoding: str = DEFAULT_ENCODING
) -> SQLiteStore | PostgresStore:
    """Open the store at ``location``: a ``postgresql://`` URL, else an SQLite file path.

    Args:
        location: ``postgresql://[user[:password]@]host[:port]/database?store=NAME`` (one
            store per ``NAME``, the schema it lives in; default ``compaction``), or a file
            path or ``":memory:"`` for SQLite.
        create: create the store if there is none (see ``SQLiteStore`` and ``PostgresStore``).
        encoding: the default encoding whose token counts are cached at append.

    Returns:
        An open store (a :class:`~compaction.store.base.HistoryStore`); close it, or use it
        as a context manager.

    Raises:
        StoreError: as the backend's constructor (no store there, not a store, server unreachable...).
        InvalidArgument: ``location`` is neither a string nor a path.
    """
    if is_postgres_url(location):
        return PostgresStore(str(location), create=create, encoding=encoding)
    if not isinstance(location, (str, os.PathLike)):
        raise InvalidArgument(f"a store is a file path or a postgresql:// URL; found {found(location)}")
    return SQLiteStore(location, create=create, encoding=encoding)


@contextlib.contextmanager
def compaction_claim(store: HistoryStore, wait: bool = True) -> Iterator[bool]:
    """Hold ``store``'s compaction claim for the block, where its backend has one.

    Two workers compressing one PostgreSQL store with this around each ``Compactor.tick``
    never summarize the same chunk twice: the second waits (or, with ``wait=False``, is
    told ``False`` and should skip the tick).  A store without claims (SQLite: one machine,
    its writes serialized by the file lock) yields ``True`` and holds nothing.

    Yields:
        Whether this worker holds the claim.

    Raises:
        StoreError: the claim could not be asked for (the server is unreachable).
    """
    claim = getattr(store, "compaction_claim", None)
    if claim is None:
        yield True
        return
    with claim(wait) as held:
        yield held
