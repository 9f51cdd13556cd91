"""Open a store by where it lives: a file path (SQLite) or a ``postgresql://`` URL (PostgreSQL).

:func:`open_store` is what ``--store`` goes through: a path opens the embedded SQLite store
(the default), a URL the shared PostgreSQL one (see :mod:`.postgres` for the URL and how one
database holds many stores).  :func:`compaction_claim` makes one worker the only one
compressing a conversation's tree of branches while it holds the claim.

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

from ..blocks import Message
from ..errors import InvalidArgument, StoreError, found
from ..tokens.encodings import DEFAULT_ENCODING
from .base import HistoryStore
from .lineage import ANY_CONVERSATION as _ANY
from .model import ConversationInfo
from .postgres import PostgresStore, is_postgres_url
from .sqlite import SQLiteStore

__all__ = ["compaction_claim", "conversation_holding", "is_store_url", "list_conversations", "open_store"]


def is_store_url(location: object) -> bool:
    """Return whether ``location`` names a server store (a ``postgresql://`` URL), not a file."""
    return is_postgres_url(location)


def open_store(
    location: str | Path,
    *,
    create: bool = True,
    encoding: str = DEFAULT_ENCODING,
    conversation: str | None = None,
) -> SQLiteStore | PostgresStore:
    """Open the store at ``location``: a ``postgresql://`` URL, else an SQLite file path.

    Args:
        location: ``postgresql://[user[:password]@]host[:port]/database?store=NAME`` (one
            store per ``NAME``, the schema it lives in; default ``compaction``), or a file
            path or ``":memory:"`` for SQLite.
        create: create the store if there is none (see ``SQLiteStore`` and ``PostgresStore``).
        encoding: the default encoding whose token counts are cached at append.
        conversation: the conversation (or branch) the store object reads and writes; the
            default is the store's only conversation, or ``"default"`` while it holds none.
            A name not in the store is created at its first write when ``create`` is true.

    Returns:
        An open store (a :class:`~compaction.store.base.HistoryStore`); close it, or use it
        as a context manager.

    Raises:
        StoreError: as the backend's constructor (no store there, not a store, server
            unreachable...); no ``conversation`` given and the store holds several (the
            message names them); a ``conversation`` not in the store and ``create`` false.
        InvalidArgument: ``location`` is neither a string nor a path; a bad conversation name.
    """
    if is_postgres_url(location):
        return PostgresStore(str(location), create=create, encoding=encoding, conversation=conversation)
    if not isinstance(location, (str, os.PathLike)):
        raise InvalidArgument(f"a store is a file path or a postgresql:// URL; found {found(location)}")
    return SQLiteStore(location, create=create, encoding=encoding, conversation=conversation)


def list_conversations(location: str | Path) -> list[ConversationInfo]:
    """Return the conversations of the store at ``location``, with their counts, in creation order.

    Args:
        location: as :func:`open_store` (the store must exist; nothing is created).

    Returns:
        One :class:`~compaction.store.model.ConversationInfo` per conversation (branches
        included): name, parent and fork seq, the messages and summaries it shows.  An empty
        store holds none.

    Raises:
        StoreError: no store at ``location``, or it cannot be read.
        InvalidArgument: ``location`` is neither a string nor a path.

    Example:
        >>> list_conversations(":memory:")
        []
    """
    with _open_any(location) as store:
        return store.conversations()


def conversation_holding(location: str | Path, first: Message, chain_seed: str) -> str | None:
    """Return the conversation of the store at ``location`` whose message 0 is ``first`` imported with ``chain_seed``.

    ``compaction import`` without ``--conversation`` appends to it, so importing a transcript
    again adds nothing (whatever conversation it went to the first time).

    Returns:
        Its name, or ``None`` when no conversation holds it or there is no store at ``location`` yet.

    Raises:
        InvalidArgument: ``location`` is neither a string nor a path.
    """
    try:
        store = _open_any(location)
    except StoreError:
        return None  # no store there yet (opening it for the import says what is wrong, if anything)
    with store:
        return store.holding(first, chain_seed)


def _open_any(location: str | Path) -> SQLiteStore | PostgresStore:
    """Open the store at ``location`` without choosing a conversation (for listing)."""
    create = str(location) == ":memory:"
    if is_postgres_url(location):
        return PostgresStore(str(location), create=create, conversation=_ANY)
    if not isinstance(location, (str, os.PathLike)):
        raise InvalidArgument(f"a store is a file path or a postgresql:// URL; found {found(location)}")
    return SQLiteStore(location, create=create, conversation=_ANY)


@contextlib.contextmanager
def compaction_claim(store: HistoryStore, wait: bool = True) -> Iterator[bool]:
    """Hold ``store``'s compaction claim for the block, where its backend has one.

    Two workers compressing one store (PostgreSQL, or an SQLite file) with this around each
    ``Compactor.tick`` never summarize the same chunk twice: the second waits (or, with
    ``wait=False``, is told ``False`` and should skip the tick).  The claim covers a
    conversation's tree of branches.  A store without claims (SQLite ``:memory:``, a
    backend without ``compaction_claim``) yields ``True`` and holds nothing.

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
