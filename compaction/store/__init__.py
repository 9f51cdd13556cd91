"""The history store: an interface (:class:`HistoryStore`) and its SQLite backend (:class:`Store`).

Modules:

* :mod:`.base`: the :class:`HistoryStore` protocol, everything compile, the compactor, the
  pipeline and the CLI use of a store.
* :mod:`.model`: the values a store hands out
  (:class:`MessageFacts`, :class:`StoredSummary`, :class:`CompactionEvent`, :class:`Caption`; images as :class:`~compaction.images.ImageSite`).
* :mod:`.ingest`: a message's stored form (import keys, blob references, token counts),
  independent of any database.
* :mod:`.sqlite`: :class:`SQLiteStore`, the embedded backend (``Store`` is its public name).
* :mod:`.migrations`: the SQLite schema as recorded migrations (:data:`SCHEMA_VERSION`).

A server backend (PostgreSQL) is a new module implementing :class:`HistoryStore` on top of
:mod:`.ingest`; nothing that takes a store changes.

Example:
    >>> from compaction.store import Store
    >>> with Store(":memory:") as store:
    ...     len(store)
    0
"""

from __future__ import annotations

from .base import CaptionStore, HistoryStore
from .migrations import MIGRATIONS, SCHEMA_VERSION
from .model import (
    CAPTION_STATUSES,
    FAILURE_KINDS,
    Caption,
    CompactionEvent,
    ImageFact,
    MessageFacts,
    StoredSummary,
)
from .sqlite import SQLiteStore, Store, describe_sqlite_error

__all__ = [
    "CAPTION_STATUSES",
    "FAILURE_KINDS",
    "Caption",
    "CaptionStore",
    "SCHEMA_VERSION",
    "CompactionEvent",
    "HistoryStore",
    "ImageFact",
    "MessageFacts",
    "SQLiteStore",
    "Store",
    "StoredSummary",
    "describe_sqlite_error",
]

#: The SQLite schema's statements, in order (``bench/make_store.py`` keys its cache on them).
_SCHEMA = ";\n".join(statement for migration in MIGRATIONS for statement in migration.statements)
