"""The hierarchy: close chunks into level-1 summaries and merge summaries upward.

:meth:`Compactor.tick` (``compaction compress``) does one round of work:

1. Close chunks from the summarized frontier up to the open tail (see
   :mod:`compaction.chunking`) and summarize each into a level-1 summary.  A chunk whose
   request would not fit the summarizer's own context window is split at a safe boundary
   (tool rounds are indivisible) and its halves are stitched; a single round too large is
   cut into parts of text, each summarized, then stitched.  No summarizer request exceeds
   ``summarizer_context_tokens``.
2. When ``merge_fanout`` contiguous summaries of one level exist past the next level's
   frontier, merge them into one summary of the next level; levels are unbounded.

Every prompt passes the wire gate once, with the compression image settings and the
summarizer's own request format, model and output cap, and the gated bytes are what the
summarizer sends; under ``image_policy = "placeholders"`` no summarizer sees an image.  A
request over ``summarizer_context_tokens - `` the output cap is never sent: an L1 shrinks
its largest tool outputs, then splits; a merge or stitch of too many records combines them
in halves, then cuts the longest records in the middle.  The store's messages are never
edited; summaries are added beside them.

When the summarizer fails (DESIGN.md, "When the summarizer fails"):

* **Which failures count.**  Each failure is recorded once per tick with a kind
  (:meth:`Compactor.failure_kind`).  ``"failed"``, counted toward quarantine: the summarizer
  was reached and failed on this range -- it refused the request even after the chunk was
  split (:class:`~compaction.errors.SummarizerRefused`: too long, unsupported content, an
  empty, truncated or over-long answer), or gave an invalid answer or a non-transient error
  (a plain :class:`~compaction.errors.SummarizerError`: not JSON, oversized, HTTP 400 for a
  bad parameter), or its retries ran out (:class:`~compaction.errors.SummarizerUnavailable`)
  after it answered another request of the same tick.  ``"outage"``, never counted: the
  retries ran out and nothing was answered on this tick (connection refused, every attempt
  timed out, 429 or 5xx throughout), or the summarizer is misconfigured (HTTP 401, 403, 404,
  a redirect, a missing or unusable key, a closed summarizer, a request gated for another
  summarizer).  Those say nothing about the chunk; quarantining chunk after chunk for them
  would replace the history with offline summaries while the real fault is elsewhere.
* **A chunk that fails** stops the tick (the frontier stops; later chunks wait), as a
  chunk's summary must exist before the next chunk's can be used.  On the tick on which a
  chunk has failed (kind ``"failed"``) for the ``quarantine_after``-th time it is
  **quarantined**: a stand-in level-1 summary written by the offline
  :class:`~compaction.summarizers.ExtractiveSummarizer` takes its place, opening with a loud
  ``[Quarantined: ...]`` line, and the tick goes on to the later chunks.  The chunk is never
  sent again, so no further failure rows pile up for it.
* **A merge that fails** (refused or invalid even after :meth:`Compactor._combine` tried
  halves) is retried as merges of fewer children (the split fallback): its first half, then
  its second, each a summary of the next level, by the same rule down to two children, left
  to right.  Merging stops at the first child no merge took: the children from there on stay
  shown at their level (coverage holds), the unmerged stretch is recorded once, and they
  head the next tick's group, so every level stays contiguous.  A group that fails whole on
  ``quarantine_after`` ticks gets an offline stand-in merge, so the levels above can grow.
  An outage is not split; it stops the merges of the tick.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .asks import ask_text
from .blocks import Block, Message
from .calibration import record_request_usage
from .captions import with_captions
from .chunking import Chunk, close_chunks, safe_boundaries, split_point
from .errors import (
    CompactionError,
    InvalidArgument,
    RecipeError,
    SummarizerError,
    SummarizerRefused,
    SummarizerUnavailable,
    found,
)
from .imageinfo import info_from_block
from .images import DAMAGED_DATA_URI, find_image_sites, placeholder_for
from .outputs import request_format
from .policy import ImageSettings, image_settings
from .recipe import Recipe
from .splitting import (
    flatten,
    lift_data_uris,
    split_texts,
    tool_output_text,
    truncate_text,
    truncate_tool_result,
)
from .store import HistoryStore, MessageFacts, StoredSummary, SummarySpan
from .summarizers._record import range_label
from .summarizers.base import Summarizer, SummaryResult, l1_system_prompt, merge_system_prompt
from .summarizers.extractive import ExtractiveSummarizer
from .tokens.counting import BLOCK_SEPARATOR, DATA_URI_FRAMING, count_text, strip_data_uris
from .types import SummaryKind
from .wire import GatedRequest, OutboundRequest, gate

__all__ = [
    "QUARANTINE_MARK",
    "Compactor",
    "QuarantinedChunk",
    "TickReport",
    "compression_image_settings",
    "l1_frontier",
    "quarantined_chunks",
    "summarized_frontier",
]

Progress = Callable[[int, int], None]


@dataclass
class TickReport:
    """What one :meth:`Compactor.tick` did.

    Attributes:
        l1_added: level-1 summaries created (quarantine stand-ins included).
        merged: level -> summaries created at that level (2 and up; stand-in merges included).
        failures: chunks that could not be summarized and stay raw, and stretches of
            summaries a failed merge left unmerged (a chunk quarantined on this tick is not
            one: it has its stand-in).
        quarantined: chunks and merge groups quarantined on this tick (given an offline
            stand-in summary after failing on ``quarantine_after`` ticks).
        requests: summarizer requests sent (after the gate).
        gated: requests that passed the gate (each sent request once, plus candidates
            that were measured and shrunk or split instead of sent).
        max_request_tokens: the largest summarizer request (tokens).
    """

    l1_added: int = 0
    merged: dict[int, int] = field(default_factory=dict)
    failures: int = 0
    quarantined: int = 0
    requests: int = 0
    gated: int = 0
    max_request_tokens: int = 0


#: As long as any reason the gate gives for replacing an image in a summarizer request.
_LONGEST_CAP_REASON = f"{DAMAGED_DATA_URI}; over the image byte cap (999999999999 bytes)"


#: A part number at least as long as any split's (a part's header is measured with it).
_MOST_PARTS = 999_999

#: The fewest tokens a summarizer request must leave beside its instructions (tokens).
_LEAST_ROOM = 128

#: How a quarantine stand-in summary's text begins.
QUARANTINE_MARK = "[Quarantined: "

#: Failure texts of a misconfigured summarizer (see ``compaction.summarizers._http``): a
#: rejected key, a wrong URL or path, a redirect, a key variable gone or unusable, a closed
#: summarizer, a request gated for another summarizer.  They say nothing about the chunk.
_CONFIGURATION_RE = re.compile(
    r": HTTP (?:401|403|404|30\d)\b|\(api_key_env\) is no longer set|^environment variable \S+ holds "
    r"|is closed; build a new one|; gate it with "
)
#: The longest failure reason a stand-in summary's first line quotes (characters).
_REASON_CHARS = 200


@dataclass(frozen=True)
class QuarantinedChunk:
    """A range whose summarizer requests failed on ``quarantine_after`` ticks.

    Attributes:
        level: 1 for a chunk of raw messages, 2 and up for a merge group.
        start_seq: first message covered.
        end_seq: one past the last message covered.
        failures: ticks on which the summarizer failed on it (counted failures).
        last_reason: the last failure's reason, on one line.
        failed_summarizer: the summarizer that failed (its name, and model when it has one).
        summary_id: the id of its stand-in summary.
    """

    level: int
    start_seq: int
    end_seq: int
    failures: int
    last_reason: str
    failed_summarizer: str
    summary_id: int


def quarantined_chunks(store: HistoryStore) -> list[QuarantinedChunk]:
    """Return the quarantined ranges of ``store`` (those with a stand-in summary), by level then start."""
    return [
        QuarantinedChunk(
            s.level,
            s.start_seq,
            s.end_seq,
            int(s.provenance.get("failures", 0)),
            str(s.provenance.get("last_reason", "")),
            str(s.provenance.get("failed_summarizer", "")),
            s.id,
        )
        for s in store.summaries()
        if s.provenance.get("quarantined") is True
    ]


def _one_line(text: str, limit: int = _REASON_CHARS) -> str:
    """Return ``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class _MergeFailed(Exception):
    """Internal: a merge group was merged in part only (``merged`` children from the front)."""

    def __init__(self, merged: int, error: SummarizerError) -> None:
        super().__init__(str(error))
        self.merged = merged
        self.error = error


def compression_image_settings(recipe: Recipe) -> ImageSettings:
    """Return the image settings of compression prompts (L1, merge, split) from ``recipe``."""
    return image_settings(recipe, "compression")


def l1_frontier(l1: Sequence[StoredSummary]) -> int:
    """Return the end of the contiguous chain of level-1 summaries from seq 0 (0 if none)."""
    frontier = 0
    for summary in sorted(l1, key=lambda s: s.start_seq):
        if summary.start_seq != frontier:
            break
        frontier = summary.end_seq
    return frontier


def summarized_frontier(store: HistoryStore) -> int:
    """Return where unsummarized history starts: the end of the level-1 chain from seq 0.

    Equal to ``l1_frontier(store.summaries(level=1))`` on any store the compactor built, but
    reads only ranges, and few of them: every merge covers a contiguous chain of the level
    below (down to level 1), so the chain from 0 is followed along the coarsest level first,
    then each finer level continues from where the coarser one ended.  The rows read are
    each level's tail past the level above it (fewer than ``merge_fanout`` per level once
    merges are made), not every summary.  Returns 0 when there are no summaries.

    Raises:
        StoreError: the store could not be read.
    """
    top = 1
    while store.summary_frontier(top + 1) > 0:
        top += 1
    position = 0
    for level in range(top, 0, -1):
        for span in store.summary_spans(level, position):
            if span.start_seq != position:
                break  # a gap at this level: the finer levels go on from here
            position = span.end_seq
    return position


class Compactor:
    """Build and extend the summary hierarchy of a store.

    Args:
        store: the store (only summaries and failures are written to it).
        recipe: the settings (chunk target, fan-out, summary bound, image policy, ...).
        summarizer: defaults to :class:`~compaction.summarizers.ExtractiveSummarizer`.

    Example:
        >>> Compactor(store, Recipe()).tick(keep_tail_tokens=2000)  # doctest: +SKIP
    """

    def __init__(self, store: HistoryStore, recipe: Recipe, summarizer: Summarizer | None = None) -> None:
        if not isinstance(store, HistoryStore):
            raise InvalidArgument(f"store must be a history store (e.g. compaction.Store(path)); found {found(store)}")
        if not isinstance(recipe, Recipe):
            raise InvalidArgument(f"recipe must be a compaction.Recipe (or load_recipe(path)); found {found(recipe)}")
        if summarizer is not None and not callable(getattr(summarizer, "summarize", None)):
            raise InvalidArgument(f"summarizer must have a summarize() method (or be None); found {found(summarizer)}")
        self.store = store
        self.recipe = recipe
        self.encoding = recipe.encoding
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer(recipe.encoding)
        self.images = with_captions(compression_image_settings(recipe), store, recipe)
        # The summarizer declares the shape, model and output cap of what it sends.
        self.format = request_format(getattr(self.summarizer, "request_format", "openai"))
        self.model = getattr(self.summarizer, "model", None) or recipe.target_model
        self.max_output_tokens = getattr(self.summarizer, "max_output_tokens", None) or recipe.summary_max_tokens
        self.request_limit = recipe.summarizer_context_tokens - self.max_output_tokens
        if self.request_limit < 256:
            raise CompactionError(
                f"summarizer_context_tokens ({recipe.summarizer_context_tokens}) leaves no room for a request "
                f"beside the summary's output cap ({self.max_output_tokens} tokens); raise it"
            )
        instructions = max(
            count_text(prompt(recipe.summary_max_tokens, recipe.summary_focus), recipe.encoding)
            for prompt in (l1_system_prompt, merge_system_prompt)
        )
        if self.request_limit - instructions < _LEAST_ROOM:
            raise RecipeError(
                f"summarizer_context_tokens ({recipe.summarizer_context_tokens}) leaves {self.request_limit - instructions}"
                f" tokens for a request's content beside the summary's output cap ({self.max_output_tokens}) and the"
                f" summarizer's instructions ({instructions}, summary_focus included); at least {_LEAST_ROOM} are"
                " needed: raise it or shorten summary_focus"
            )
        self._report = TickReport()
        self._answered = 0  # summarizer requests answered with a summary on this tick

    # -- public ---------------------------------------------------------------------------
    def tick(
        self, *, keep_tail_tokens: int = 0, close_tail: bool = False, progress: Progress | None = None
    ) -> TickReport:
        """Summarize closed chunks and merge upward; return what was done.

        Args:
            keep_tail_tokens: leave at least this many of the newest tokens unsummarized
                (they will be shown raw).  The user's newest prompt and an unanswered call
                are never summarized.
            close_tail: also close the remainder before the open tail as one chunk, even
                below the chunk target (used when the budget needs everything summarized).
            progress: called as ``progress(done, total)`` in messages while chunks are summarized.

        A chunk the summarizer fails on stops the tick, unless this is the
        ``recipe.quarantine_after``-th tick it failed on: then it is quarantined (see the
        module docstring) and the later chunks are summarized.  Summarizer failures are
        recorded in the store (once per range per tick) and counted in the report; they are
        not raised.

        Raises:
            InvalidArgument: ``keep_tail_tokens`` is not a whole number >= 0, ``close_tail``
                not a bool, or ``progress`` not callable.
            StoreError: the store could not be read or written.
        """
        if isinstance(keep_tail_tokens, bool) or not isinstance(keep_tail_tokens, int) or keep_tail_tokens < 0:
            raise InvalidArgument(f"keep_tail_tokens must be a whole number of tokens >= 0; found {found(keep_tail_tokens)}")
        if not isinstance(close_tail, bool):
            raise InvalidArgument(f"close_tail must be True or False; found {found(close_tail)}")
        if progress is not None and not callable(progress):
            raise InvalidArgument(f"progress must be callable or None; found {found(progress)}")
        self._report = TickReport()
        self._answered = 0
        self._summarize_chunks(keep_tail_tokens, close_tail, progress)
        self._merge_levels()
        return self._report

    def merge_tail(self, level: int) -> TickReport:
        """Merge the summaries of ``level`` past the next level's frontier into one, however few.

        A tick merges only whole groups of ``recipe.merge_fanout``; the few summaries left
        past the level above (at most ``merge_fanout - 1`` once a tick has run) are each shown
        with their own framing.  When a request cannot fit otherwise, those (two or more) are
        merged into one summary of ``level + 1``, by the same merge (and split fallback) a
        tick uses.  The level above stays a contiguous chain, so later ticks go on from it.

        Args:
            level: the level whose tail to merge (1 and up).

        Returns:
            What was done (``merged[level + 1]`` is 1 when the tail was merged whole or in
            part, and nothing when fewer than two summaries were there to merge).

        Raises:
            InvalidArgument: ``level`` is not a whole number >= 1.
            StoreError: the store could not be read or written.
        """
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise InvalidArgument(f"level must be a whole number >= 1; found {found(level)}")
        self._report = TickReport()
        self._answered = 0
        position = self.store.summary_frontier(level + 1)
        chain: list[SummarySpan] = []
        for span in self.store.summary_spans(level, position):
            if span.start_seq == position:
                chain.append(span)
                position = span.end_seq
        if len(chain) >= 2:
            self._merge_group(level, self._children(level, chain))
        return self._report

    # -- level 1 --------------------------------------------------------------------------
    def _holds_ask(self, fact: MessageFacts) -> bool:
        """Whether the message ``fact`` describes is a user turn holding what a person typed."""
        if fact.role != "user" or not self.store.prompt_seqs(fact.seq, fact.seq + 1):
            return False
        return ask_text(self.store.messages(fact.seq, fact.seq + 1)[0]) is not None

    def _sizes(self, facts: Sequence[MessageFacts]) -> list[int]:
        sizes = []
        for fact in facts:
            if fact.role == "system":
                sizes.append(0)
                continue
            images = sum(self.format.image_tokens(i.width, i.height, self.model) for i in fact.images)
            sizes.append(fact.text_tokens + images)
        return sizes

    def _summarize_chunks(self, keep_tail_tokens: int, close_tail: bool, progress: Progress | None) -> None:
        store = self.store
        n = store.next_seq()
        if n < 2:
            return
        frontier = summarized_frontier(store)
        facts = store.facts(frontier, n, encoding=self.encoding)
        if not facts:
            return
        sizes = self._sizes(facts)
        safe = safe_boundaries(facts)
        # The open tail: the newest message when it is the user's prompt (also one that
        # answers calls and then asks, as Anthropic-shaped agents write it) or an unanswered
        # call, anything after the last safe boundary, and keep_tail_tokens of the newest.
        limit = len(facts)
        if facts[-1].is_prompt or facts[-1].tool_uses or self._holds_ask(facts[-1]):
            limit -= 1
        tail = sum(sizes[limit:])
        while limit > 0 and (not safe[limit] or tail < keep_tail_tokens):
            limit -= 1
            tail += sizes[limit]
        chunks = close_chunks(
            facts,
            limit_seq=frontier + limit,
            target_tokens=self.recipe.chunk_target_tokens,
            min_messages=self.recipe.chunk_min_messages,
            message_tokens=sizes,
        )
        closed = chunks[-1].end_seq if chunks else frontier
        if close_tail and closed < frontier + limit:
            rest = sizes[closed - frontier : limit]
            chunks.append(Chunk(closed, frontier + limit, sum(rest)))
        done = 0
        total = sum(c.end_seq - c.start_seq for c in chunks)
        for chunk in chunks:
            chunk_facts = facts[chunk.start_seq - frontier : chunk.end_seq - frontier]
            chunk_sizes = sizes[chunk.start_seq - frontier : chunk.end_seq - frontier]
            try:
                result = self._summarize_range(chunk.start_seq, chunk.end_seq, chunk_facts, chunk_sizes)
            except SummarizerError as err:
                failed = self._failed(1, chunk.start_seq, chunk.end_seq, err)
                if failed < self.recipe.quarantine_after:
                    self._report.failures += 1
                    break  # the frontier stops here; later chunks wait for this one
                messages = store.messages(chunk.start_seq, chunk.end_seq)
                request = self._l1_request(messages, chunk.start_seq, chunk.end_seq)
                result = self._stand_in(request, "l1", failed, str(err))
                self._report.quarantined += 1
            store.add_summary(1, chunk.start_seq, chunk.end_seq, result.text, result.provenance)
            self._report.l1_added += 1
            done += chunk.end_seq - chunk.start_seq
            if progress:
                progress(done, total)

    def _gate(self, request: OutboundRequest) -> GatedRequest:
        """Gate a summarizer request once: the summarizer's format, model and output cap set."""
        self._report.gated += 1
        return gate(request, self.images, format=self.format, model=self.model,
                    encoding=self.encoding, max_output_tokens=self.max_output_tokens)

    def _fits(self, gated: GatedRequest) -> bool:
        return gated.tokens <= self.request_limit

    def _send(self, gated: GatedRequest, kind: SummaryKind) -> SummaryResult:
        """Send a gated request that fits; return the summary."""
        if not self._fits(gated):
            raise CompactionError(
                f"internal: a {kind} request of {gated.tokens} tokens passed planning "
                f"(the limit is {self.request_limit})"
            )
        self._report.requests += 1
        self._report.max_request_tokens = max(self._report.max_request_tokens, gated.tokens)
        result = self.summarizer.summarize(gated, kind=kind)
        # a provider's usage beside our count of the request: the samples calibration fits
        usage = result.provenance.get("usage")
        record_request_usage(self.store, gated.format, gated.model, gated.tokens, usage, source="summarizer")
        if not result.text.strip():
            raise SummarizerError(f"the summarizer returned an empty {kind} summary")
        self._answered += 1
        return result

    # -- failures and quarantine ----------------------------------------------------------
    def failure_kind(self, err: SummarizerError) -> str:
        """Return whether ``err`` counts toward quarantining the range it happened on.

        Returns:
            ``"failed"`` (counts) for a refusal, an invalid answer or a non-transient error,
            and for retries that ran out after the summarizer answered another request of
            this tick; ``"outage"`` (does not count) for retries that ran out with nothing
            answered on this tick and for a misconfigured summarizer (see the module
            docstring).
        """
        if isinstance(err, SummarizerRefused):
            return "failed"
        if isinstance(err, SummarizerUnavailable):
            return "failed" if self._answered else "outage"
        return "outage" if _CONFIGURATION_RE.search(str(err)) else "failed"

    def _failed(self, level: int, start: int, end: int, err: SummarizerError) -> int:
        """Record the failure of ``[start, end)`` at ``level`` once; return the ticks it failed on.

        Returns:
            The number of recorded failures of kind ``"failed"`` of exactly this range,
            this one included (0 when this one is an outage and none came before).
        """
        kind = self.failure_kind(err)
        self.store.record_failure(level, start, end, str(err), kind=kind)
        if kind != "failed":
            return 0
        return sum(
            1
            for f in self.store.failures()
            if f["kind"] == "failed" and (f["level"], f["start_seq"], f["end_seq"]) == (level, start, end)
        )

    def _stand_in(self, request: OutboundRequest, kind: SummaryKind, failures: int, reason: str) -> SummaryResult:
        """Return the offline stand-in summary of a quarantined range, loudly marked.

        Why a summary and not the raw stretch: the compiled request is raw messages only in
        its live window, after every summary; a raw stretch between two summaries would
        break that shape (and move the stable prefix the prompt cache serves), and a chunk
        is as large as ``chunk_target_tokens`` or larger, where a stand-in is bounded by
        ``summary_max_tokens`` like any summary.  The offline summarizer is deterministic,
        needs no network and cannot fail the way the summarizer did, so coverage holds and
        later chunks and merges proceed.  Its first line says what happened.

        Args:
            request: the L1 request of the chunk, or the merge request of the group.
            kind: ``"l1"`` or ``"merge"``.
            failures: ticks on which the summarizer failed on it.
            reason: the last failure's text (already scrubbed of any key by the summarizer).
        """
        failed_by = getattr(self.summarizer, "name", None) or type(self.summarizer).__name__
        model = getattr(self.summarizer, "model", None)
        if model:
            failed_by = f"{failed_by} ({model})"
        last = _one_line(reason)
        what = "chunk" if kind == "l1" else "merge"
        line = (
            f"{QUARANTINE_MARK}the summarizer failed on this {what} on {failures} ticks (last: {last}); "
            "this is an offline summary]"
        )
        gated = self._gate(request)
        provenance: dict[str, object] = {"summarizer": ExtractiveSummarizer.name, "kind": kind}
        try:
            offline = ExtractiveSummarizer(self.encoding).summarize(gated, kind=kind)
            body, provenance = offline.text, {**offline.provenance, **provenance}
        except SummarizerError as err:
            body = f"(the offline summarizer could not summarize it either: {_one_line(str(err))})"
        provenance.update(quarantined=True, failures=failures, last_reason=last, failed_summarizer=failed_by)
        return SummaryResult(f"{line}\n{body}", provenance)

    def _shrink_tool_outputs(
        self, messages: Sequence[Message], start: int, end: int, gated: GatedRequest
    ) -> GatedRequest | None:
        """Middle-truncate the largest tool outputs, with a loud marker, until the L1 request fits.

        The first step of shrinking a request over the summarizer's window (the next is
        splitting the chunk).  No output is cut below an eighth of the request limit; returns
        ``None`` when that is not enough.  The store keeps every output whole.
        """
        floor = max(64, self.request_limit // 8)
        for _attempt in range(3):
            over = gated.tokens - self.request_limit
            if over <= 0:
                return gated
            sizes = sorted(
                (
                    (count_text(tool_output_text(b), self.encoding), m, i)
                    for m, message in enumerate(messages)
                    for i, b in enumerate(message.content)
                    if b.get("type") == "tool_result"
                ),
                reverse=True,
            )
            targets: dict[tuple[int, int], int] = {}
            for size, m, i in sizes:
                if over <= 0 or size <= floor:
                    break
                keep = max(floor, size - over - over // 10 - 16)
                targets[(m, i)] = keep
                over -= size - keep
            if over > 0 or not targets:
                return None
            shrunk = []
            for m, message in enumerate(messages):
                blocks = tuple(
                    truncate_tool_result(b, targets[(m, i)], self.encoding) if (m, i) in targets else b
                    for i, b in enumerate(message.content)
                )
                shrunk.append(Message(message.role, blocks, message.seq, message.source_id))
            messages = shrunk
            gated = self._gate(self._l1_request(messages, start, end))
        return gated if self._fits(gated) else None

    def _l1_request(self, messages: Sequence[Message], start: int, end: int) -> OutboundRequest:
        body = tuple((m.role, m.content) for m in messages if m.role != "system")
        ask = (
            {
                "type": "text",
                "text": f"Write the state record of the conversation above (messages {start}–{end - 1}).",
            },
        )
        return OutboundRequest("l1", l1_system_prompt(self.recipe.summary_max_tokens, self.recipe.summary_focus), body + (("user", ask),))

    def _summarize_range(
        self, start: int, end: int, facts: Sequence[MessageFacts], sizes: Sequence[int]
    ) -> SummaryResult:
        messages = self.store.messages(start, end)
        if all(m.role == "system" for m in messages):
            return SummaryResult("Done:\n- (only pinned system messages, shown raw)", {"summarizer": "none"})
        gated: GatedRequest | None = self._gate(self._l1_request(messages, start, end))
        if gated is not None and not self._fits(gated):
            gated = self._shrink_tool_outputs(messages, start, end, gated)
        if gated is not None:
            try:
                return self._send(gated, "l1")
            except SummarizerRefused:
                pass  # the request itself was refused (too long, unsupported content): split it
        point = split_point(facts, sizes)
        if point is not None:
            left = self._summarize_range(start, start + point, facts[:point], sizes[:point])
            right = self._summarize_range(start + point, end, facts[point:], sizes[point:])
            return self._stitch([left, right], start, end)
        return self._summarize_parts(messages, start, end)

    def _summarize_parts(self, messages: Sequence[Message], start: int, end: int) -> SummaryResult:
        """Summarize one indivisible round too large for one request, as parts of flat text."""
        pieces: list[Block] = []
        for message in messages:
            if message.role == "system":
                continue
            pieces.extend(flatten(message))
        # What a part's request holds besides the part (instructions, focus, header, ask,
        # framing), measured by the gate with the longest header: a part gets the rest.
        fixed = self._gate(self._part_request(_MOST_PARTS, _MOST_PARTS, start, end, ())).tokens
        part_limit = min(max(128, (self.request_limit - 300) // 2), self.request_limit - fixed)
        parts: list[list[Block]] = []
        current: list[Block] = []
        used = 0
        for piece in split_texts(lift_data_uris(pieces), part_limit - BLOCK_SEPARATOR, self.encoding):
            if piece["type"] == "text":
                cost = self._part_text_cost(piece["text"])
            else:
                piece, cost = self._part_image(piece, part_limit - BLOCK_SEPARATOR)
            cost += BLOCK_SEPARATOR  # its join to the block before it in the part's message
            if current and used + cost > part_limit:
                parts.append(current)
                current, used = [], 0
            current.append(piece)
            used += cost
        if current:
            parts.append(current)
        results = []
        for index, part in enumerate(parts):
            request = self._part_request(index + 1, len(parts), start, end, part)
            results.append(self._send(self._gate(request), "split"))
        return self._stitch(results, start, end)

    def _part_request(self, number: int, total: int, start: int, end: int, part: Sequence[Block]) -> OutboundRequest:
        """Return the request of part ``number`` of ``total`` of messages ``[start, end)``."""
        header = {
            "type": "text",
            "text": (
                f"Part {number} of {total} of {range_label(start, end - 1).lower()} of the history "
                "(one tool round too large to send whole):"
            ),
        }
        ask = {"type": "text", "text": "Write the state record of this part."}
        return OutboundRequest(
            "split",
            l1_system_prompt(self.recipe.summary_max_tokens, self.recipe.summary_focus),
            (("user", (header, *part)), ("user", (ask,))),
        )

    def _part_text_cost(self, text: str) -> int:
        """Return the tokens the gate counts for a text piece of a split part, at most.

        A ``data:`` URI :func:`~compaction.splitting.lift_data_uris` left in the text (no
        image could be read from it) does not ship: the gate counts the text without it, a
        join (:data:`~compaction.tokens.counting.DATA_URI_FRAMING`) and the placeholder it
        writes instead, which is priced here with the longest reason the gate gives.  The
        URI's own text, often much shorter than its placeholder, is not what is sent.
        """
        if ";base64," not in text:
            return count_text(text, self.encoding)
        sites = find_image_sites([{"type": "text", "text": text}])
        captions = self.images.captions
        placeholders = sum(
            count_text(
                placeholder_for(
                    site, _LONGEST_CAP_REASON, captions.get(site.sha256) if captions and site.sha256 else None
                ),
                self.encoding,
            )
            for site in sites
        )
        return count_text(strip_data_uris(text), self.encoding) + DATA_URI_FRAMING * len(sites) + placeholders

    def _part_image(self, block: Block, part_limit: int) -> tuple[Block, int]:
        """Return an image piece of a split part and its cost, or its placeholder when the image
        alone is larger than a part (it could never fit the summarizer's window)."""
        info = info_from_block(block)
        # The gate may still replace it (the compression caps, a damaged image): plan room for
        # the image and for a placeholder, so the part fits whichever ships.
        caption = self.images.captions.get(info.sha256) if self.images.captions and info.sha256 else None
        fallback = count_text(placeholder_for(info, _LONGEST_CAP_REASON, caption), self.encoding)
        cost = self.format.image_tokens(info.width, info.height, self.model) + fallback
        if cost <= part_limit:
            return block, cost
        reason = f"it costs {cost - fallback} tokens, more than a part of a summarizer request allows ({part_limit})"
        text = placeholder_for(info, reason, caption)
        return {"type": "text", "text": text}, count_text(text, self.encoding)

    def _stitch(self, results: Sequence[SummaryResult], start: int, end: int) -> SummaryResult:
        if len(results) == 1:
            return results[0]
        result = self._combine([r.text for r in results], [f"part {i + 1}" for i in range(len(results))], "stitch")
        return SummaryResult(result.text, {**result.provenance, "parts": len(results)})

    # -- merges ---------------------------------------------------------------------------
    def _merge_request(self, texts: Sequence[str], labels: Sequence[str], kind: SummaryKind) -> OutboundRequest:
        blocks: list[Block] = [
            {"type": "text", "text": f"Merge these {len(texts)} consecutive records into one."}
        ]
        blocks.extend(
            {"type": "text", "text": f"[Record of {label}]\n{text}"}
            for label, text in zip(labels, texts, strict=True)
        )
        return OutboundRequest(
            kind, merge_system_prompt(self.recipe.summary_max_tokens, self.recipe.summary_focus), (("user", tuple(blocks)),)
        )

    def _combine(self, texts: Sequence[str], labels: Sequence[str], kind: SummaryKind) -> SummaryResult:
        """Combine consecutive records into one, in one request when it fits the summarizer's window.

        Too many records for one request (or a request the summarizer refuses) are combined
        in halves, then the two halves; one or two records too long even alone are cut in the
        middle, loudly, to their share of the window.  Every request sent fits.

        Raises:
            SummarizerError: the summarizer failed (the caller records it).
        """
        gated = self._gate(self._merge_request(texts, labels, kind))
        if self._fits(gated):
            try:
                return self._send(gated, kind)
            except SummarizerRefused:
                if len(texts) < 3:
                    raise
        if len(texts) > 2:
            half = len(texts) // 2
            parts = [(texts[:half], labels[:half]), (texts[half:], labels[half:])]
            combined = [self._combine(t, lbl, kind) for t, lbl in parts]
            names = [lbl[0] if len(lbl) == 1 else f"{lbl[0]} to {lbl[-1]}" for _t, lbl in parts]
            return self._combine([c.text for c in combined], names, kind)
        return self._send(self._cut_records(texts, labels, kind, gated), kind)

    def _cut_records(
        self, texts: Sequence[str], labels: Sequence[str], kind: SummaryKind, gated: GatedRequest
    ) -> GatedRequest:
        """Cut the longest of one or two records in the middle until their request fits.

        Each cut aims the record at its size minus what the request is over (and a tenth
        more), the cut's own marker included: a marker longer than what a small cut removes
        must not make the record grow.  A record that no cut shortens any more is left as it
        is and the other one is cut; what still does not fit is refused by :meth:`_send`.
        """
        cut = list(texts)
        stuck: set[int] = set()
        for _attempt in range(8):
            over = gated.tokens - self.request_limit
            if over <= 0:
                break
            sizes = [count_text(t, self.encoding) for t in cut]
            open_ = [i for i in range(len(cut)) if i not in stuck]
            if not open_:
                break
            longest = max(open_, key=sizes.__getitem__)
            target = max(16, sizes[longest] - over - over // 10 - 1)
            shorter = self._cut_to(cut[longest], target)
            if count_text(shorter, self.encoding) >= sizes[longest]:
                stuck.add(longest)  # even the shortest cut is no shorter: try the other record
                continue
            cut[longest] = shorter
            gated = self._gate(self._merge_request(cut, labels, kind))
        return gated

    def _cut_to(self, text: str, target: int) -> str:
        """Return ``text`` cut in the middle (loud marker included) to at most about ``target`` tokens."""
        keep = target
        shorter = truncate_text(text, max(1, keep), self.encoding, what="this record")
        for _ in range(3):  # the marker's tokens come on top of what is kept: keep that much less
            excess = count_text(shorter, self.encoding) - target
            if excess <= 0 or keep <= 1:
                break
            keep = max(1, keep - excess)
            shorter = truncate_text(text, keep, self.encoding, what="this record")
        return shorter

    def _merge_levels(self) -> None:
        """Merge ``merge_fanout`` contiguous summaries of each level into one of the next level.

        Per level only the frontier of the level above (the end of its newest summary) and
        the ranges of this level's summaries from there on are read; texts are read for the
        groups merged only.  A group that cannot be merged whole is merged as a prefix of
        smaller merges (:meth:`_merge_group`); merging stops for this tick at the first child
        no merge took, so every level stays contiguous and the children left are retried
        next tick.
        """
        fanout = self.recipe.merge_fanout
        level = 1
        while True:
            frontier = self.store.summary_frontier(level + 1)
            chain: list[SummarySpan] = []
            position = frontier
            for span in self.store.summary_spans(level, frontier):
                if span.start_seq == position:
                    chain.append(span)
                    position = span.end_seq
            groups = [chain[i : i + fanout] for i in range(0, len(chain) - fanout + 1, fanout)]
            if not groups and frontier == 0:
                break  # nothing at the next level and nothing to put there: no level above either
            for spans in groups:
                if not self._merge_group(level, self._children(level, spans)):
                    return  # the rest waits for the next tick
            level += 1

    def _children(self, level: int, spans: Sequence[SummarySpan]) -> list[StoredSummary]:
        """Return the summaries (texts included) of the merge group ``spans`` of ``level``."""
        rows = {s.id: s for s in self.store.summaries_within(level, spans[0].start_seq, spans[-1].end_seq)}
        return [rows[span.id] for span in spans]

    def _merge_group(self, level: int, group: Sequence[StoredSummary]) -> bool:
        """Merge ``group`` into summaries of ``level + 1``; return whether all of it was merged.

        The split fallback: when the whole group cannot be merged (refused or invalid even
        after :meth:`_combine`'s own halving), its first half and then its second are merged
        as separate summaries, each by the same rule, left to right, stopping at the first
        part that fails (a part of one child cannot be merged).  Children left unmerged stay
        shown at their level (coverage holds), are recorded once as one failure, and head
        the next tick's group.  A group that failed whole on ``quarantine_after`` ticks gets
        an offline stand-in merge (:meth:`_stand_in`).  After an outage nothing is split.
        """
        start, end = group[0].start_seq, group[-1].end_seq
        try:
            merged = self._merge_prefix(level, group)
        except _MergeFailed as failed:
            merged, err = failed.merged, failed.error
        else:
            return True
        if merged == 0:
            count = self._failed(level + 1, start, end, err)
            if count >= self.recipe.quarantine_after:
                request = self._merge_request(
                    [s.text for s in group], [f"messages {s.start_seq}–{s.end_seq - 1}" for s in group], "merge"
                )
                self._add_merge(level, group, self._stand_in(request, "merge", count, str(err)))
                self._report.quarantined += 1
                return True
        else:
            rest = group[merged].start_seq
            self.store.record_failure(level + 1, rest, end, str(err), kind=self.failure_kind(err))
        self._report.failures += 1
        return False

    def _merge_prefix(self, level: int, group: Sequence[StoredSummary]) -> int:
        """Merge ``group`` whole, else its halves left to right; return ``len(group)``.

        Raises:
            _MergeFailed: not every child was merged; it says how many were, from the
                front, and the last error.
        """
        try:
            self._add_merge(level, group, self._combine_group(group))
            return len(group)
        except SummarizerError as err:
            if len(group) < 3 or self.failure_kind(err) == "outage":
                raise _MergeFailed(0, err) from err
            error = err
        half = (len(group) + 1) // 2
        merged = self._merge_prefix(level, group[:half])  # a first half that fails raises as it is
        if len(group) - half < 2:
            raise _MergeFailed(merged, error)  # one child left: it heads the next group
        try:
            return merged + self._merge_prefix(level, group[half:])
        except _MergeFailed as failed:
            raise _MergeFailed(merged + failed.merged, failed.error) from failed.error

    def _combine_group(self, group: Sequence[StoredSummary]) -> SummaryResult:
        labels = [f"messages {s.start_seq}–{s.end_seq - 1}" for s in group]
        return self._combine([s.text for s in group], labels, "merge")

    def _add_merge(self, level: int, group: Sequence[StoredSummary], result: SummaryResult) -> None:
        provenance = {**result.provenance, "children": [s.id for s in group]}
        self.store.add_summary(level + 1, group[0].start_seq, group[-1].end_seq, result.text, provenance)
        self._report.merged[level + 1] = self._report.merged.get(level + 1, 0) + 1
