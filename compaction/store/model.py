"""The values a history store hands out, whatever backend holds them.

:class:`MessageFacts` (what compile and chunking need of a message, without its content),
:class:`StoredSummary` (a summary row), :class:`CompactionEvent` (one recorded compaction) and
the image sites of :mod:`compaction.images` (``ImageFact`` is their old name, kept as an
alias), and :class:`Caption` (what the store keeps of an image's caption, by blob sha256).  They are plain frozen dataclasses: a backend builds them from its rows, and nothing
in them depends on SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..images import ImageSite

#: The old name of :class:`~compaction.images.ImageSite`, what the store records of an image.
ImageFact = ImageSite

__all__ = [
    "CAPTION_STATUSES",
    "FAILURE_KINDS",
    "Caption",
    "CompactionEvent",
    "ConversationInfo",
    "ImageFact",
    "MessageFacts",
    "PromptTurn",
    "StoredSummary",
    "SummarySpan",
]

#: The kinds of a recorded summarizer failure: ``"failed"`` (the summarizer was reached and
#: failed on the range; counts toward quarantining a chunk) and ``"outage"`` (it could not be
#: reached or used on that tick; says nothing about the chunk, never counts).
FAILURE_KINDS = ("failed", "outage")

#: The states of an image's caption row: ``"ok"`` (a caption was made), ``"failed"`` (the
#: captioner was reached and could not caption this image: never retried on its own) and
#: ``"outage"`` (the captioner could not be reached or used: retried after a pause).
CAPTION_STATUSES = ("ok", "failed", "outage")

#: ``meta["kind"]`` values of user-role messages that are output, not something the user wrote.
_OUTPUT_KINDS = frozenset({"bash_execution", "tool_output", "command_output", "observation"})


@dataclass(frozen=True)
class PromptTurn:
    """What the ask ledger reads of a user turn that holds text (see ``HistoryStore.prompt_texts``).

    Attributes:
        seq: store position.
        texts: the turn's top-level text blocks' texts, in order (tool results and images left out).
        kind: ``meta["kind"]`` when the source marks the turn as something else than a plain
            turn (command output, a branch summary...), else ``None``.
    """

    seq: int
    texts: tuple[str, ...]
    kind: str | None = None


@dataclass(frozen=True)
class MessageFacts:
    """The facts compile and chunking need about a message, without its content.

    Attributes:
        seq: store position.
        role: message role.
        text_tokens: non-image tokens with framing, in the encoding asked for (tokens).
        tool_uses: ids of its ``tool_use`` blocks.
        tool_results: ``tool_use_id`` of its ``tool_result`` blocks.
        images: its images, in document order (nested ones included).
        kind: the source's kind of message when it is not a plain turn (``meta["kind"]``,
            e.g. ``"bash_execution"`` for command output a user ran).
    """

    seq: int
    role: str
    text_tokens: int
    tool_uses: tuple[str, ...]
    tool_results: tuple[str, ...]
    images: tuple[ImageSite, ...] = field(default=())
    kind: str | None = None

    @property
    def is_prompt(self) -> bool:
        """True for a user turn written by the user (not tool or command output)."""
        return self.role == "user" and not self.tool_results and self.kind not in _OUTPUT_KINDS


@dataclass(frozen=True)
class StoredSummary:
    """A summary row: ``text`` stands for messages ``[start_seq, end_seq)`` at ``level``."""

    id: int
    level: int
    start_seq: int
    end_seq: int
    text: str
    provenance: dict[str, Any]


class SummarySpan(NamedTuple):
    """Where a summary is, without its text: ``[start_seq, end_seq)`` at ``level``, by ``id``."""

    id: int
    level: int
    start_seq: int
    end_seq: int


@dataclass(frozen=True)
class CompactionEvent:
    """One recorded compaction: the request size before and after it, against a budget.

    Attributes:
        id: the event's id, increasing in the order events were recorded.
        created_at: when it was recorded (seconds since the epoch).
        tokens_before: tokens of the history before compaction (tokens).
        tokens_after: tokens of the compiled request after it (tokens).
        budget: the token budget it compacted for, ``None`` when there was none (tokens).
        detail: anything else worth keeping (JSON object), e.g. summaries added per level.
    """

    id: int
    created_at: float
    tokens_before: int
    tokens_after: int
    budget: int | None
    detail: dict[str, Any]


@dataclass(frozen=True)
class Caption:
    """What the store keeps of one image's caption, keyed by the image's sha256.

    Attributes:
        sha256: the image's content hash (hex; the blob's key, or a data URI's decoded bytes').
        text: the caption (one paragraph), or ``None`` when none was made (``status`` says why).
        status: one of :data:`CAPTION_STATUSES`.
        provenance: where the caption came from: summarizer, model, ``prompt_sha256``,
            ``request_sha256``, usage (empty for a failure).
        attempts: captioning attempts made so far (1 for a caption made at the first try).
        reason: why the last attempt failed (``None`` for a caption).
        created_at: when the caption was made, or when the last attempt failed (seconds
            since the epoch).
    """

    sha256: str
    text: str | None
    status: str
    provenance: dict[str, Any]
    attempts: int
    reason: str | None
    created_at: float

    @property
    def made(self) -> bool:
        """True when the row holds a caption (``status == "ok"``)."""
        return self.status == "ok" and bool(self.text)


@dataclass(frozen=True)
class ConversationInfo:
    """One conversation of a store, with its counts (see :mod:`compaction.store.lineage`).

    Attributes:
        name: the conversation's unique name.
        id: its id in the store.
        parent: the name of the conversation it branches from, ``None`` for a root.
        fork_seq: the seq it forked at (it shares the parent's ``[0, fork_seq)``), ``None``
            for a root.
        messages: the messages it shows, shared ones included (its ``len(store)``).
        own_messages: the message rows stored with it (``messages - fork_seq`` for a branch).
        summaries: the summaries it shows, shared ones included.
        created_at: when it was created (seconds since the epoch).
    """

    name: str
    id: int
    parent: str | None
    fork_seq: int | None
    messages: int
    own_messages: int
    summaries: int
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """Return the info as a JSON object (the keys are the attributes)."""
        return {
            "name": self.name,
            "id": self.id,
            "parent": self.parent,
            "fork_seq": self.fork_seq,
            "messages": self.messages,
            "own_messages": self.own_messages,
            "summaries": self.summaries,
            "created_at": self.created_at,
        }
