"""What compression records beside the messages, read and written once for both backends.

:class:`SummaryQueries` holds the methods of summaries (their reads; ``add_summary`` stays in
each backend, whose ids and locks differ), summarizer failures, compaction events and image
captions.  It runs the same SQL on SQLite and PostgreSQL over the dialect of
:class:`.sql_common.CommonQueries` (placeholder, free text in and out).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from ..blocks import canonical_json
from ..errors import InvalidArgument, StoreError, found
from . import ingest
from .model import CAPTION_STATUSES, FAILURE_KINDS, Caption, CompactionEvent, StoredSummary, SummarySpan
from .sql_common import (
    CommonQueries,
    check_failure,
    check_ints,
    check_optional_ints,
    check_sha256,
    json_object,
)

__all__ = ["SummaryQueries"]

_SUMMARY_COLUMNS = "id, level, start_seq, end_seq, text, provenance"
_CAPTION_COLUMNS = "sha256, text, status, provenance, attempts, reason, created_at"
#: Hashes looked up per statement by :meth:`SummaryQueries.captions` (below SQLite's variable limit).
_CAPTION_BATCH = 500


class SummaryQueries(CommonQueries):
    """Summaries, summarizer failures, compaction events and image captions: mixed into both backends."""

    # -- image captions -------------------------------------------------------------------------
    def _caption_from_row(
        self, sha256: str, text: Any, status: str, provenance: str, attempts: int, reason: Any, created_at: float
    ) -> Caption:
        return Caption(
            str(sha256), self._text_out(text), str(status), json.loads(provenance), int(attempts),
            self._text_out(reason), float(created_at),
        )

    def caption(self, sha256: str) -> Caption | None:
        """Return the caption row of the image ``sha256`` (made, or its failed attempts), or ``None``.

        Raises:
            InvalidArgument: ``sha256`` is not a string of hex digits.
        """
        check_sha256(sha256)
        with self._reading("reading an image caption"):
            row = self._db.execute(
                f"SELECT {_CAPTION_COLUMNS} FROM captions WHERE sha256 = {self._mark}", (sha256,)
            ).fetchone()
        return None if row is None else self._caption_from_row(*row)

    def captions(self, sha256s: Iterable[str]) -> dict[str, Caption]:
        """Return the caption rows of the images ``sha256s`` that have one, by sha256.

        Raises:
            InvalidArgument: a hash that is not a string of hex digits.
        """
        wanted = sorted({check_sha256(sha) for sha in sha256s})
        out: dict[str, Caption] = {}
        with self._reading("reading image captions"):
            for start in range(0, len(wanted), _CAPTION_BATCH):
                batch = wanted[start : start + _CAPTION_BATCH]
                marks = ", ".join(self._mark for _ in batch)
                for row in self._db.execute(
                    f"SELECT {_CAPTION_COLUMNS} FROM captions WHERE sha256 IN ({marks})", batch
                ).fetchall():
                    caption = self._caption_from_row(*row)
                    out[caption.sha256] = caption
        return out

    def add_caption(self, sha256: str, text: str, provenance: dict[str, Any]) -> bool:
        """Store the caption of the image ``sha256``, replacing failed attempts to make one.

        A caption is made once: when the image has one already, nothing changes (also when
        two workers add one at once: the first stays).

        Args:
            sha256: the image's content hash (hex).
            text: the caption; not empty (the captioner bounds and cleans it first).
            provenance: a JSON object (summarizer, model, ``prompt_sha256``, ...).

        Returns:
            True when stored; False when the image had a caption (the first one stays).

        Raises:
            StoreError: an empty caption, or the database refused the write.
            InvalidArgument: an argument of the wrong type.
        """
        check_sha256(sha256)
        if not isinstance(text, str):
            raise InvalidArgument(f"a caption must be a string; found {found(text)}")
        if not text.strip():
            raise StoreError(f"image {sha256[:12]}: a caption must not be empty")
        recorded = json_object(provenance, "a caption's provenance")
        m = self._mark
        with self._reading(f"storing the caption of image {sha256[:12]}"), self._write():
            row = self._db.execute(
                "INSERT INTO captions AS c (sha256, text, status, provenance, attempts, reason, created_at)"
                f" VALUES ({m}, {m}, 'ok', {m}, 1, NULL, {m})"
                " ON CONFLICT (sha256) DO UPDATE SET text = EXCLUDED.text, status = 'ok',"
                " provenance = EXCLUDED.provenance, attempts = c.attempts + 1, reason = NULL,"
                " created_at = EXCLUDED.created_at WHERE c.status != 'ok' RETURNING 1",
                (sha256, self._text_in(text), recorded, time.time()),
            ).fetchone()
        return row is not None

    def record_caption_failure(self, sha256: str, reason: str, *, kind: str = "failed") -> None:
        """Record a failed attempt to caption the image ``sha256`` (a made caption is kept).

        Args:
            kind: ``"failed"`` (the captioner was reached and could not caption this image)
                or ``"outage"`` (it could not be reached or used; says nothing of the image).

        Raises:
            StoreError: an unknown kind, or the database refused the write.
            InvalidArgument: an argument of the wrong type.
        """
        check_sha256(sha256)
        check_failure("caption failure", reason, kind, CAPTION_STATUSES[1:])
        m = self._mark
        with self._reading(f"recording a failed caption of image {sha256[:12]} ({reason})"), self._write():
            self._db.execute(
                "INSERT INTO captions AS c (sha256, text, status, provenance, attempts, reason, created_at)"
                f" VALUES ({m}, NULL, {m}, '{{}}', 1, {m}, {m})"
                " ON CONFLICT (sha256) DO UPDATE SET status = EXCLUDED.status, attempts = c.attempts + 1,"
                " reason = EXCLUDED.reason, created_at = EXCLUDED.created_at WHERE c.status != 'ok'",
                (sha256, kind, self._text_in(reason), time.time()),
            )

    # -- summaries ------------------------------------------------------------------------------
    def _summaries(self, where: str, args: tuple[Any, ...], order: str) -> list[StoredSummary]:
        """Return the summaries this conversation shows that also meet ``where`` (``AND ...``), in ``order``."""
        seen, seen_args = self._seen_summaries()
        rows = self._db.execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE {seen} {where} ORDER BY {order}", (*seen_args, *args)
        ).fetchall()
        return [ingest.summary_from_row(i, lv, s, e, self._text_out(t) or "", p) for i, lv, s, e, t, p in rows]

    def summaries(self, level: int | None = None) -> list[StoredSummary]:
        """Return summaries (of one level, or all) ordered by level then start."""
        check_optional_ints(level=level)
        with self._reading("reading summaries"):
            if level is None:
                return self._summaries("", (), "level, start_seq")
            return self._summaries(f"AND level = {self._mark}", (level,), "level, start_seq")

    def summary_frontier(self, level: int = 1) -> int:
        """Return the end of the newest summary of ``level`` (0 if none).

        Level-1 summaries are added contiguously from seq 0 (the compactor only closes
        chunks at the frontier), so for level 1 this is where unsummarized history starts.
        """
        check_ints(level=level)
        with self._reading("reading summaries"):
            if len(self._lineage.segments) > 1 and not self._holds_summaries(self._lineage):
                return 0  # a branch whose lineage keeps no summary (compile asks this first)
            where, args = self._seen_summaries()
            row = self._db.execute(
                f"SELECT MAX(end_seq) FROM summaries WHERE {where} AND level = {self._mark}", (*args, level)
            ).fetchone()
        return int(row[0] or 0) if row else 0

    def coarsest_summary_at(self, start_seq: int, max_end_seq: int) -> StoredSummary | None:
        """Return the highest-level summary starting at ``start_seq`` and ending by ``max_end_seq``."""
        check_ints(start_seq=start_seq, max_end_seq=max_end_seq)
        m = self._mark
        with self._reading("reading summaries"):
            found_ = self._summaries(
                f"AND start_seq = {m} AND end_seq <= {m}", (start_seq, max_end_seq), "level DESC, end_seq DESC LIMIT 1"
            )
        return found_[0] if found_ else None

    def summaries_within(self, level: int, start_seq: int, end_seq: int) -> list[StoredSummary]:
        """Return the summaries of ``level`` inside ``[start_seq, end_seq)``, by start."""
        check_ints(level=level, start_seq=start_seq, end_seq=end_seq)
        m = self._mark
        with self._reading("reading summaries"):
            return self._summaries(
                f"AND level = {m} AND start_seq >= {m} AND start_seq < {m} AND end_seq <= {m}",
                (level, start_seq, end_seq, end_seq),
                "start_seq",
            )

    def level_starts_before(self, level: int, before_seq: int, limit: int = 64) -> list[int]:
        """Return up to ``limit`` start seqs of ``level`` summaries below ``before_seq``, newest first (negative: all)."""
        check_ints(level=level, before_seq=before_seq, limit=limit)
        m = self._mark
        with self._reading("reading summaries"):
            where, args = self._seen_summaries()
            rows = self._db.execute(
                f"SELECT start_seq FROM summaries WHERE {where} AND level = {m} AND start_seq < {m}"
                f" ORDER BY start_seq DESC LIMIT {m}",
                (*args, level, before_seq, self._limit(limit)),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def summary_spans(self, level: int, from_seq: int = 0) -> list[SummarySpan]:
        """Return the ids and ranges of the ``level`` summaries starting at or after ``from_seq``, by start.

        No texts or provenance are read: the compactor walks chains of ranges with this
        and reads the texts of only the summaries it merges.  One index range scan.

        Raises:
            InvalidArgument: ``level`` or ``from_seq`` is not a whole number.
            StoreError: the store could not be read.
        """
        check_ints(level=level, from_seq=from_seq)
        m = self._mark
        with self._reading("reading summary ranges"):
            where, args = self._seen_summaries()
            rows = self._db.execute(
                f"SELECT id, start_seq, end_seq FROM summaries WHERE {where} AND level = {m} AND start_seq >= {m}"
                " ORDER BY start_seq, end_seq",
                (*args, level, from_seq),
            ).fetchall()
        return [SummarySpan(int(i), level, int(s), int(e)) for i, s, e in rows]

    # -- failures and events --------------------------------------------------------------------
    def record_failure(
        self, level: int, start_seq: int, end_seq: int, reason: str, *, kind: str = "failed"
    ) -> None:
        """Record that ``[start_seq, end_seq)`` could not be summarized at ``level`` (it stays raw).

        Args:
            kind: ``"failed"`` (the summarizer was reached and failed on this range: the
                failure counts toward quarantining the chunk) or ``"outage"`` (the summarizer
                could not be reached or used; it does not count).

        Raises:
            StoreError: the database refused the write (the message carries ``reason`` too,
                so the summarizer's failure is not lost behind the store's), or an unknown kind.
            InvalidArgument: an argument of the wrong type.
        """
        check_ints(level=level, start_seq=start_seq, end_seq=end_seq)
        check_failure("failure", reason, kind, FAILURE_KINDS)
        m = self._mark
        doing = f"recording that level {level} [{start_seq}, {end_seq}) could not be summarized ({reason})"
        with self._reading(doing), self._write():
            own = self._own()
            self._db.execute(
                "INSERT INTO failures (conversation_id, level, start_seq, end_seq, reason, created_at, kind)"
                f" VALUES ({m}, {m}, {m}, {m}, {m}, {m}, {m})",
                (own, level, start_seq, end_seq, self._text_in(reason), time.time(), kind),
            )

    def failures(self) -> list[dict[str, Any]]:
        """Return the recorded summarizer failures, oldest first.

        Each is a dict of ``level``, ``start_seq``, ``end_seq``, ``reason`` and ``kind``
        (the keyword arguments of :meth:`record_failure`).
        """
        with self._reading("reading summarizer failures"):
            where, args = self._seen_failures()
            rows = self._db.execute(
                f"SELECT level, start_seq, end_seq, reason, kind FROM failures WHERE {where} ORDER BY id", args
            ).fetchall()
        return [
            {"level": int(lv), "start_seq": int(s), "end_seq": int(e), "reason": self._text_out(r), "kind": str(k)}
            for lv, s, e, r, k in rows
        ]

    def record_event(
        self,
        tokens_before: int,
        tokens_after: int,
        budget: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> int:
        """Record one compaction; return its id.

        Args:
            tokens_before: tokens of the history before compacting (tokens).
            tokens_after: tokens of the compiled request after it (tokens).
            budget: the budget compacted for, ``None`` when there was none (tokens).
            detail: a JSON object of anything else (summaries added, model, format...).

        Returns:
            The event's id; ids increase in the order events are recorded.

        Raises:
            StoreError: a negative token figure, or the database refused the write.
            InvalidArgument: a figure that is not an integer, or a detail that is not a JSON object.
        """
        check_ints(tokens_before=tokens_before, tokens_after=tokens_after)
        check_optional_ints(budget=budget)
        if detail is not None and not isinstance(detail, dict):
            raise InvalidArgument(f"an event's detail must be a dict; found {found(detail)}")
        if tokens_before < 0 or tokens_after < 0 or (budget is not None and budget < 0):
            raise StoreError(
                f"a compaction event needs token figures of 0 or more; found before={tokens_before}, "
                f"after={tokens_after}, budget={budget}"
            )
        try:
            recorded = canonical_json(detail or {})
        except (TypeError, ValueError) as err:
            raise InvalidArgument(f"an event's detail must be a JSON object: {err}") from err
        m = self._mark
        with self._reading("recording a compaction event"), self._write():
            row = self._db.execute(
                "INSERT INTO compaction_events (conversation_id, created_at, tokens_before, tokens_after, budget, detail)"
                f" VALUES ({m}, {m}, {m}, {m}, {m}, {m}) RETURNING id",
                (self._own(), time.time(), tokens_before, tokens_after, budget, recorded),
            ).fetchone()
        return int(row[0]) if row else 0

    def events(self) -> list[CompactionEvent]:
        """Return the recorded compaction events, oldest first."""
        with self._reading("reading compaction events"):
            rows = self._db.execute(
                "SELECT id, created_at, tokens_before, tokens_after, budget, detail FROM compaction_events"
                f" WHERE conversation_id = {self._mark} ORDER BY id",
                (self._lineage.own,),
            ).fetchall()
        return [
            CompactionEvent(int(i), float(at), int(b), int(a), None if bud is None else int(bud), json.loads(d))
            for i, at, b, a, bud, d in rows
        ]

    def ancestor_events(self) -> list[tuple[int, int, CompactionEvent]]:
        """Return the compaction events of the conversations this branch forks from (none for a root).

        Returns:
            ``(conversation id, stop, event)`` per event: nearest ancestor first, each
            ancestor's events oldest first; ``stop`` is the seq where this branch's lineage
            leaves that conversation (it shares the messages below it).  See
            :func:`compaction.events.inherited_frame`.
        """
        with self._reading("reading the compaction events of the conversations this branch forks from"):
            self._refresh()
            stops = dict(self._lineage.ancestors())
            if not stops:
                return []
            rows = self._db.execute(
                "SELECT conversation_id, id, created_at, tokens_before, tokens_after, budget, detail"
                f" FROM compaction_events WHERE {self._lineage.ancestral_events()} ORDER BY id"
            ).fetchall()
        order = {cid: depth for depth, cid in enumerate(stops)}
        found_events = [
            (
                int(c),
                stops[int(c)],
                CompactionEvent(int(i), float(at), int(b), int(a), None if bud is None else int(bud), json.loads(d)),
            )
            for c, i, at, b, a, bud, d in rows
        ]
        return sorted(found_events, key=lambda row: order[row[0]])  # stable: each ancestor's events stay oldest first
