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

* :mod:`.postgres`: :class:`PostgresStore`, the shared backend (several processes and hosts;
  one store per schema of a database, named by ``postgresql://host/db?store=NAME``), with
  its own recorded migrations (:mod:`.postgres_schema`) and the append walk of :mod:`.sync`.
* :mod:`.factory`: :func:`open_store` (a path or a ``postgresql://`` URL, what ``--store``
  takes, and the conversation to scope it to), :func:`list_conversations` and
  :func:`compaction_claim` (one worker compresses a store at a time).
* :mod:`.lineage` and :mod:`.scope`: many conversations and branches in one store; a store
  object reads and writes one of them (a branch shares its parent's prefix, no row copied).

Example:
    >>> from compaction.store import Store
    >>> with Store(":memory:") as store:
    ...     len(store)
    0
"""

from __future__ import annotations

from .base import CaptionStore, HistoryStore
from .factory import compaction_claim, list_conversations, open_store
from .lineage import DEFAULT_CONVERSATION
from .migrations import MIGRATIONS, SCHEMA_VERSION
from .model import (
    CAPTION_STATUSES,
    FAILURE_KINDS,
    Caption,
    CompactionEvent,
    ConversationInfo,
    ImageFact,
    MessageFacts,
    PromptTurn,
    StoredSummary,
    SummarySpan,
)
from .postgres import PostgresStore
from .sqlite import SQLiteStore, Store, describe_sqlite_error
from .usage import UsageRecord

__all__ = [
    "CAPTION_STATUSES",
    "FAILURE_KINDS",
    "Caption",
    "CaptionStore",
    "SCHEMA_VERSION",
    "CompactionEvent",
    "ConversationInfo",
    "DEFAULT_CONVERSATION",
    "HistoryStore",
    "ImageFact",
    "MessageFacts",
    "PromptTurn",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "compaction_claim",
    "list_conversations",
    "open_store",
    "StoredSummary",
    "SummarySpan",
    "UsageRecord",
    "describe_sqlite_error",
]

#: The SQLite schema's statements, in order (``bench/make_store.py`` keys its cache on them).
_SCHEMA = ";\n".join(statement for migration in MIGRATIONS for statement in migration.statements)
