"""The history store as an interface: what compile, the compactor, the pipeline and the CLI use.

:class:`HistoryStore` is a :class:`typing.Protocol`: a backend conforms by having these
methods, not by inheriting.  :class:`~compaction.store.sqlite.SQLiteStore` is the embedded
backend; a server backend (PostgreSQL) is a new module with a class of the same shape, and
nothing that takes a ``HistoryStore`` changes.

What every backend promises:

* Messages are append-only and numbered densely from 0 (``seq``); :meth:`append` adds a
  batch in one transaction and skips messages whose import key (see
  :func:`~compaction.store.ingest.import_keys`) is already stored; a stored message that
  a grown transcript's message starts with (a snapshot cut inside a message its parser
  builds from several lines) is completed, not stored twice.
* Inline base64 images are stored once by sha256 and read back byte-exact.
* Summaries are unique per ``(level, start_seq, end_seq)``; adding one again returns the
  first one's id.
* An image has at most one caption, keyed by its sha256; the first caption made stays
  (:class:`CaptionStore`: a separate protocol, so a backend without captions is still a
  history store; recipe ``caption_images`` then makes and shows none).
* A write either commits whole or leaves nothing; a crash loses nothing committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..blocks import Message
from .model import Caption, CompactionEvent, MessageFacts, PromptTurn, StoredSummary, SummarySpan
from .usage import UsageRecord

__all__ = ["HistoryStore", "CaptionStore"]

_S = TypeVar("_S", bound="HistoryStore")


@runtime_checkable
class HistoryStore(Protocol):
    """An append-only history: messages, image blobs, cached token counts, summaries, events.

    Attributes:
        path: where the store lives (a file path, ``":memory:"`` or a URL), for messages.
        encoding: the default encoding whose token counts are cached at append.
        conversation: the name of the conversation (or branch) this object reads and writes;
            a store holds many (see :mod:`compaction.store.lineage`), everything here is of one.

    ``isinstance(obj, HistoryStore)`` checks only that the members exist; the signatures
    are checked by mypy and by ``tests/test_store_interface.py``.
    """

    path: str
    encoding: str
    conversation: str

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Release the store's connection (one it was handed stays open)."""
        ...

    def __enter__(self: _S) -> _S: ...

    def __exit__(self, *exc: object) -> None: ...

    def check_location(self) -> None:
        """Raise StoreError if the store was deleted or replaced since it was opened (then nothing written since was kept)."""
        ...

    # -- messages ------------------------------------------------------------------------
    def __len__(self) -> int:
        """Return the number of stored messages."""
        ...

    def append(self, messages: Iterable[Message], *, chain_seed: str | None = None) -> int:
        """Append messages in one transaction; return how many were added.

        Without ``chain_seed`` every message is added after the stored ones; with it, a
        transcript synced from its start adds only what is not stored yet.
        """
        ...

    def next_seq(self) -> int:
        """Return the seq the next appended message will get (= the number of messages)."""
        ...

    def messages(self, start: int = 0, end: int | None = None) -> list[Message]:
        """Return messages with ``start <= seq < end`` (images rehydrated), in order."""
        ...

    def iter_messages(self, batch: int = 512) -> Iterator[Message]:
        """Yield every message in order, reading ``batch`` at a time."""
        ...

    def facts(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        encoding: str | None = None,
        dropped: frozenset[str] = frozenset(),
    ) -> list[MessageFacts]:
        """Return :class:`MessageFacts` for ``start <= seq < end``, counting missing tokens once.

        ``dropped``: block types left out of the counts (a request format's
        ``dropped_block_types``), cached under their own key.
        """
        ...

    def pinned_seqs(self) -> list[int]:
        """Return the seqs of the pinned messages (system messages and pinned ones), in order; compile
        shows their text verbatim in the system text of every request."""
        ...

    def prompt_seqs(self, start: int = 0, end: int | None = None) -> list[int]:
        """Return the seqs in ``[start, end)`` of user turns that hold a text block, in order."""
        ...

    def prompt_texts(self, start: int = 0, end: int | None = None) -> list[PromptTurn]:
        """Return the turns :meth:`prompt_seqs` names with their text blocks and kind, in one read."""
        ...

    # -- image blobs ---------------------------------------------------------------------
    def blob(self, sha256: str) -> bytes:
        """Return the bytes of image blob ``sha256`` (StoreError if there is none)."""
        ...

    def blob_hashes(self) -> list[str]:
        """Return the sha256 of every stored blob, sorted."""
        ...

    def image_count(self) -> int:
        """Return the number of distinct stored image blobs."""
        ...

    # -- summaries -----------------------------------------------------------------------
    def add_summary(
        self, level: int, start_seq: int, end_seq: int, text: str, provenance: dict[str, Any]
    ) -> int:
        """Store a summary of ``[start_seq, end_seq)`` at ``level``; return its id."""
        ...

    def summaries(self, level: int | None = None) -> list[StoredSummary]:
        """Return summaries (of one level, or all) ordered by level then start."""
        ...

    def summary_frontier(self, level: int = 1) -> int:
        """Return the end of the newest summary of ``level`` (0 if none)."""
        ...

    def coarsest_summary_at(self, start_seq: int, max_end_seq: int) -> StoredSummary | None:
        """Return the highest-level summary starting at ``start_seq`` and ending by ``max_end_seq``."""
        ...

    def summaries_within(self, level: int, start_seq: int, end_seq: int) -> list[StoredSummary]:
        """Return the summaries of ``level`` inside ``[start_seq, end_seq)``, by start."""
        ...

    def level_starts_before(self, level: int, before_seq: int, limit: int = 64) -> list[int]:
        """Return up to ``limit`` start seqs of ``level`` summaries below ``before_seq``, newest first."""
        ...

    def summary_spans(self, level: int, from_seq: int = 0) -> list[SummarySpan]:
        """Return the ids and ranges (no texts) of the ``level`` summaries starting at or after
        ``from_seq``, ordered by start (then end)."""
        ...

    # -- failures and events -------------------------------------------------------------
    def record_failure(
        self, level: int, start_seq: int, end_seq: int, reason: str, *, kind: str = "failed"
    ) -> None:
        """Record that ``[start_seq, end_seq)`` could not be summarized at ``level``.

        ``kind`` is one of :data:`~compaction.store.model.FAILURE_KINDS`: ``"failed"``
        counts toward quarantining the chunk, ``"outage"`` does not.
        """
        ...

    def failures(self) -> list[dict[str, Any]]:
        """Return the recorded summarizer failures (``level``, ``start_seq``, ``end_seq``,
        ``reason``, ``kind``), oldest first."""
        ...

    def record_event(
        self,
        tokens_before: int,
        tokens_after: int,
        budget: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> int:
        """Record one compaction (request tokens before and after, against ``budget``); return its id."""
        ...

    def events(self) -> list[CompactionEvent]:
        """Return the recorded compaction events, oldest first."""
        ...

    def ancestor_events(self) -> list[tuple[int, int, CompactionEvent]]:
        """Return the compaction events of the conversations this branch forks from (none for a root).

        Returns:
            ``(conversation id, stop, event)`` per event: nearest ancestor first, each
            ancestor's events oldest first; ``stop`` is the seq where this branch's lineage
            leaves that conversation (it shares the messages below it).
        """
        ...

    # -- provider usage (calibration) ------------------------------------------------------
    def record_usage(
        self,
        model: str,
        request_format: str,
        compiled_tokens: int,
        *,
        input_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        output_tokens: int | None = None,
        source: str = "client",
    ) -> int:
        """Record a request's count (``compiled_tokens``) beside the provider's usage; return its id.

        ``input_tokens`` is every prompt token the provider counted, cached ones included
        (see :func:`compaction.calibration.usage_counts`); ``None``: no usage was returned.
        """
        ...

    def usage_records(self, model: str | None = None, newest: int | None = None) -> list[UsageRecord]:
        """Return the store's usage records (every conversation; one ``model`` when given; only the
        ``newest`` that many when given), oldest first."""
        ...


@runtime_checkable
class CaptionStore(Protocol):
    """A store that keeps image captions beside its blobs (:mod:`compaction.captions`).

    ``isinstance(store, CaptionStore)`` says whether a history store can keep captions.
    """

    # -- image captions --------------------------------------------------------------------
    def caption(self, sha256: str) -> Caption | None:
        """Return the caption row of the image ``sha256`` (made or failed), or ``None``."""
        ...

    def captions(self, sha256s: Iterable[str]) -> dict[str, Caption]:
        """Return the caption rows of the images ``sha256s`` that have one, by sha256."""
        ...

    def add_caption(self, sha256: str, text: str, provenance: dict[str, Any]) -> bool:
        """Store the caption of image ``sha256``; return False when one was made already (it stays)."""
        ...

    def record_caption_failure(self, sha256: str, reason: str, *, kind: str = "failed") -> None:
        """Record a failed captioning attempt of image ``sha256`` (``kind``: ``"failed"`` or ``"outage"``)."""
        ...
