"""The offline extractive summarizer: a deterministic state record, no model needed.

For a chunk of raw messages (``kind`` ``"l1"``, or ``"split"``: one part of a tool round
too large to send whole) it writes, under the headings of
:data:`~compaction.summarizers.base.SUMMARY_HEADINGS`: the goal; the user's asks, by message
and first words; what was done, with outcomes; each file and what happened to it; the real
errors, each ``[open]`` or ``[resolved]``; the decisions the agent stated; the open
threads (the last todo or plan state, an unanswered question, failing tests); and the names
it mentions most (functions, constants, tickets, URLs…), most frequent first.  What counts
as each is :mod:`._extract`'s (which shares its detectors with ``compaction eval``:
:mod:`compaction.evidence`).  For ``"merge"`` and ``"stitch"`` it reads the records it is
given back and combines them section by section, the newest status winning (:mod:`._record`).
Every record is held to its token bound, the least important lines dropped first and
counted, so records do not grow as levels rise.  With a focus (recipe ``summary_focus``),
lines that name its words are kept first.  Same input, same output, byte for byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..blocks import Block
from ..errors import SummarizerError
from ..tokens.counting import count_text
from ..types import RequestFormatName, SummaryKind
from ..wire import GatedRequest
from ._extract import extract, message_range, unflatten
from ._focus import focus_text
from ._record import Record, focus_words, merge_records, parse_record, render
from .base import SummaryResult

__all__ = ["ExtractiveSummarizer", "MIN_SUMMARY_TOKENS", "DEFAULT_SUMMARY_TOKENS"]

#: The smallest bound a record is held to, however little it covers (tokens).
MIN_SUMMARY_TOKENS = 32


#: Tokens a stitch's bound adds to its error entries' for the rest of its frame: the goal,
#: headings and left-out lines.
STITCH_FRAME = 48

#: The summary bound when a request carries no output cap (tokens).
DEFAULT_SUMMARY_TOKENS = 400


class ExtractiveSummarizer:
    """Summarize offline by extraction; deterministic; the default summarizer.

    It reads the gated request's blocks (not its payload), so it accepts a request in any
    format; it asks for OpenAI Chat bodies, the recipe's target model and the recipe's
    ``summary_max_tokens`` (``request_format = "openai"``, ``model = None``,
    ``max_output_tokens = None``), and holds nothing to close.

    Args:
        encoding: the encoding the summary's token bound is measured in.
        focus: what summaries should keep first (the recipe's ``summary_focus``): when lines
            must go, those naming its words go last.

    Raises:
        RecipeError: a focus over :data:`~._focus.MAX_FOCUS_CHARS` characters.

    Example:
        >>> ExtractiveSummarizer().summarize(gated, kind="l1").text  # doctest: +SKIP
        'Goal:\\n- ...'
    """

    name = "extractive"
    request_format: RequestFormatName = "openai"
    model: str | None = None
    max_output_tokens: int | None = None

    def __init__(self, encoding: str = "o200k_base", focus: str | None = None) -> None:
        self.encoding = encoding
        self.focus = focus_text(focus)
        self._focus_words = focus_words(self.focus)

    def close(self) -> None:
        """Do nothing: the extractive summarizer holds no resource."""

    def summarize(self, request: GatedRequest, *, kind: SummaryKind) -> SummaryResult:
        """Return the state record of ``request`` (see the module docstring).

        Args:
            request: the gated request; its ``max_output_tokens`` bounds the record (tokens;
                :data:`DEFAULT_SUMMARY_TOKENS` when it carries none).
            kind: ``"l1"``, ``"merge"``, ``"split"`` or ``"stitch"``.

        Returns:
            The record and its provenance (``summarizer``, ``request_sha256`` prefix, ``kind``).

        Raises:
            SummarizerError: an unknown kind, or the request holds nothing to summarize.
        """
        max_tokens = request.max_output_tokens or DEFAULT_SUMMARY_TOKENS
        messages = list(request.messages)
        if kind == "l1":
            record = self._record(messages)
        elif kind == "split":
            record = self._record_part(messages)
        elif kind in ("merge", "stitch"):
            record = self._merge(messages)
        else:
            raise SummarizerError(
                f"unknown summary kind {kind!r}; expected 'l1', 'split', 'merge' or 'stitch'"
            )
        text = render(record, self._bound(request, kind, max_tokens, record), self.encoding, self._focus_words)
        if not text.strip():
            raise SummarizerError(f"the {kind} request held nothing to summarize")
        digest = hashlib.sha256(request.payload).hexdigest()[:16]
        return SummaryResult(text, {"summarizer": self.name, "request_sha256": digest, "kind": kind})

    def _bound(self, request: GatedRequest, kind: str, max_tokens: int, record: Record) -> int:
        """Return the summary's token bound: ``max_tokens``, and well below what it covers.

        A record as long as its source saves nothing: an L1 or split record gets at most a
        quarter of the material's tokens, a merge or stitch half of its records' (never below
        :data:`MIN_SUMMARY_TOKENS`).  A stitch joins the records of the parts of one stretch
        too large for one request, so it stands for that stretch's raw material, as an L1
        does: it gets at least the tokens its error entries take (and :data:`STITCH_FRAME`
        for the goal, headings and left-out lines).  Halving three part records of 100
        tokens left a bound of 90 and dropped the one error of a 9,000-token pip output.
        """
        material = request.tokens - (count_text(request.system, self.encoding) if request.system else 0)
        share = material // 4 if kind in ("l1", "split") else material // 2
        if kind == "stitch" and record.errors:
            errors = count_text("\n".join(f"- {error.line()}" for error in record.errors), self.encoding)
            share = max(share, errors + STITCH_FRAME)
        return min(max_tokens, max(MIN_SUMMARY_TOKENS, share))

    # -- level 1 ---------------------------------------------------------------------------
    @staticmethod
    def _record(messages: Sequence[tuple[str, Sequence[Block]]]) -> Record:
        """Record an L1 request's messages; the last one is the instruction naming their range."""
        body = messages[:-1] if len(messages) > 1 else messages
        instruction = "\n".join(b.get("text", "") for b in messages[-1][1] if b.get("type") == "text")
        span = message_range(instruction) if len(messages) > 1 else None
        # system messages in the range are not sent; they are pinned, so they come first
        first = span[0] + max(0, span[1] - span[0] + 1 - len(body)) if span else 0
        record = extract(body, first)
        if not record.has_facts():
            # only an assistant statement (a chunk split down to one message) still gets a
            # record, or the whole chunk would stay raw as a summarizer failure
            texts = [b.get("text", "") for _r, blocks in body for b in blocks if b.get("type") == "text"]
            said = " ".join(" ".join(t.split()) for t in texts if isinstance(t, str) and t.strip())
            if said:
                record.add_done(f"said: {said[:240]}")
        return record

    @staticmethod
    def _record_part(messages: Sequence[tuple[str, Sequence[Block]]]) -> Record:
        """Record one part of an oversized round, its calls and results rebuilt from the flat text."""
        blocks = [b for _role, bs in messages[:1] for b in bs]
        if not blocks:
            return Record()
        header = blocks[0].get("text", "") if blocks[0].get("type") == "text" else ""
        span = message_range(header)
        record = extract(unflatten(blocks[1:]), span[0] if span else 0, one_message=True)
        if not record.has_facts():
            part = header.split(" of the history", 1)[0]
            lines = sum(b.get("text", "").count("\n") + 1 for b in blocks[1:] if b.get("type") == "text")
            record.add_done(f"{part}: {lines} lines of output, no call, error or file in it")
        return record

    # -- merge -----------------------------------------------------------------------------
    @staticmethod
    def _merge(messages: Sequence[tuple[str, Sequence[Block]]]) -> Record:
        records = [
            parse_record(block["text"])
            for role, blocks in messages
            if role == "user"
            for block in blocks
            if block.get("type") == "text" and not block["text"].startswith("Merge the")
        ]
        return merge_records(records)
