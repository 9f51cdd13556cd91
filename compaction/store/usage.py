"""Provider usage records: per request, what we counted and what the provider said it counted.

Each row pairs the tokens our counter gave a shipped request (``compiled_tokens``) with the
``usage`` the provider returned for it, so :mod:`compaction.calibration` can fit a per-model
correction for models whose tokenizer is not public.  Both backends keep them in
``usage_records`` (SQLite migration 9, PostgreSQL migration 6) and share the checks, the SQL
and the methods here: :class:`UsageRecords` is mixed into both store classes (it runs the same
SQL on both but for the driver's placeholder, ``_mark``).

``input_tokens`` is every prompt token the provider counted, cached ones included (OpenAI's
``prompt_tokens``; Anthropic's ``input_tokens + cache_read_input_tokens +
cache_creation_input_tokens``): see :func:`compaction.calibration.usage_counts`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument, StoreError, found
from .scope import ConversationScope

__all__ = [
    "UsageRecord",
    "UsageRecords",
    "check_newest",
    "check_usage",
    "insert_usage",
    "newest_usage",
    "select_usage",
]

#: Longest model / request-format / source name kept (characters).
_NAME_LIMIT = 200


@dataclass(frozen=True)
class UsageRecord:
    """One request's counts: ours and the provider's.

    Attributes:
        id: the row id; ids increase in the order records are made.
        conversation: the name of the conversation it was recorded under.
        created_at: when it was recorded (seconds since the epoch).
        model: the model the request named.
        request_format: the request format (``"openai"``, ``"anthropic"``, ...).
        compiled_tokens: the tokens our counter gave the shipped request (tokens).
        input_tokens: every prompt token the provider counted, cached ones included
            (tokens); ``None`` when the provider returned no usage.
        cache_read_tokens: of those, read from the provider's prompt cache (tokens), if given.
        cache_write_tokens: of those, written to the prompt cache (tokens), if given.
        output_tokens: the answer's tokens (tokens), if given.
        source: who recorded it (``"summarizer"``, ``"proxy"``, ``"client"``...).
    """

    id: int
    conversation: str
    created_at: float
    model: str
    request_format: str
    compiled_tokens: int
    input_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    source: str

    @property
    def ratio(self) -> float | None:
        """Return ``input_tokens / compiled_tokens`` (``None`` without a usage or a count)."""
        if self.input_tokens is None or self.compiled_tokens <= 0:
            return None
        return self.input_tokens / self.compiled_tokens


def check_usage(
    model: object,
    request_format: object,
    compiled_tokens: object,
    counts: dict[str, object],
    source: object,
) -> None:
    """Refuse a usage record's arguments of the wrong type or range with one clear line.

    Raises:
        InvalidArgument: a name that is not a non-empty string, a count that is not an integer.
        StoreError: a negative count.
    """
    for label, value in (("model", model), ("request_format", request_format), ("source", source)):
        if not isinstance(value, str) or not value or len(value) > _NAME_LIMIT:
            raise InvalidArgument(
                f"a usage record's {label} must be a non-empty string of up to {_NAME_LIMIT} characters; found {found(value)}"
            )
    every = {"compiled_tokens": compiled_tokens, **counts}
    for label, value in every.items():
        if value is None and label != "compiled_tokens":
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(
                f"a usage record's {label} must be an integer of tokens; found {found(value)}"
            )
        if value < 0:
            raise StoreError(f"a usage record's {label} must be 0 or more tokens; found {value}")


_COLUMNS = (
    "conversation_id, created_at, model, request_format, compiled_tokens, input_tokens,"
    " cache_read_tokens, cache_write_tokens, output_tokens, source"
)


def insert_usage(db: Any, mark: str, conversation_id: int, values: tuple[object, ...]) -> int:
    """Insert one row (``values``: model, format, compiled, input, read, write, output, source); return its id."""
    marks = ", ".join([mark] * 10)
    row = db.execute(
        f"INSERT INTO usage_records ({_COLUMNS}) VALUES ({marks}) RETURNING id",
        (conversation_id, time.time(), *values),
    ).fetchone()
    return int(row[0]) if row else 0


def select_usage(db: Any, mark: str, model: str | None, newest: int | None = None) -> list[UsageRecord]:
    """Return the store's usage records (of every conversation; of one ``model`` when given), oldest first.

    ``newest``: only the newest that many (read newest first through the ``(model, id)``
    index, so a fit reads a window, not every record ever made).
    """
    query = (
        "SELECT u.id, COALESCE(c.name, ''), u.created_at, u.model, u.request_format, u.compiled_tokens,"
        " u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens, u.source"
        " FROM usage_records u LEFT JOIN conversations c ON c.id = u.conversation_id"
    )
    args: tuple[object, ...] = ()
    if model is not None:
        query += f" WHERE u.model = {mark}"
        args = (model,)
    if newest is None:
        return [_record(row) for row in db.execute(query + " ORDER BY u.id", args).fetchall()]
    rows = db.execute(query + f" ORDER BY u.id DESC LIMIT {mark}", (*args, newest)).fetchall()
    return [_record(row) for row in reversed(rows)]


def newest_usage(db: Any, mark: str, model: str | None) -> int:
    """Return the id of the store's newest usage record (of ``model`` when given); 0 when there is none.

    One index probe (``usage_records_by_model`` on ``(model, id)``; the primary key without a
    model), so a caller can tell cheaply whether a record arrived since it last read.
    """
    if model is None:
        row = db.execute("SELECT id FROM usage_records ORDER BY id DESC LIMIT 1").fetchone()
    else:
        row = db.execute(
            f"SELECT id FROM usage_records WHERE model = {mark} ORDER BY id DESC LIMIT 1", (model,)
        ).fetchone()
    return int(row[0]) if row else 0


def check_newest(newest: object) -> None:
    """Refuse a ``newest`` that is neither ``None`` nor an integer of 1 or more."""
    if newest is not None and (isinstance(newest, bool) or not isinstance(newest, int) or newest < 1):
        raise InvalidArgument(
            f"newest must be a number of records (1 or more) or None; found {found(newest)}"
        )


def _record(row: tuple[Any, ...]) -> UsageRecord:
    """Build a :class:`UsageRecord` from one selected row."""
    counts = [None if value is None else int(value) for value in row[6:10]]
    return UsageRecord(
        int(row[0]),
        str(row[1]),
        float(row[2]),
        str(row[3]),
        str(row[4]),
        int(row[5]),
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        str(row[10]),
    )


class UsageRecords(ConversationScope):
    """The usage-record methods of a store: mixed into both backends (SQLite, PostgreSQL)."""

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
        """Record one request's count beside the usage its provider returned; return the record's id.

        Args:
            model: the model the request named.
            request_format: the request format it was rendered in (``"openai"``, ``"anthropic"``...).
            compiled_tokens: the tokens our counter gave the shipped request (tokens).
            input_tokens: every prompt token the provider counted, cached ones included
                (tokens); ``None`` when it returned no usage (the record then never enters a fit).
            cache_read_tokens: of those, read from the prompt cache (tokens), if given.
            cache_write_tokens: of those, written to the prompt cache (tokens), if given.
            output_tokens: the answer's tokens (tokens), if given.
            source: who recorded it (``"summarizer"``, ``"proxy"``, ``"client"``).

        Raises:
            InvalidArgument: a name that is not a non-empty string, a count that is not an integer.
            StoreError: a negative count, or the database refused the write.
        """
        counts: dict[str, object] = {
            "input_tokens": input_tokens,
            "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens,
            "output_tokens": output_tokens,
        }
        check_usage(model, request_format, compiled_tokens, counts, source)
        values = (model, request_format, compiled_tokens, *counts.values(), source)
        with self._reading("recording a request's usage"), self._write():
            return insert_usage(self._db, self._mark, self._own(), values)

    def usage_records(self, model: str | None = None, newest: int | None = None) -> list[UsageRecord]:
        """Return the store's usage records, of every conversation (of one ``model`` when given), oldest first.

        A fit is per model, not per conversation: each record names the conversation it was
        recorded under, for a caller that wants one.  ``newest``: only the newest that many.

        Raises:
            InvalidArgument: ``newest`` is not an integer of 1 or more.
            StoreError: the store could not be read.
        """
        check_newest(newest)
        with self._reading("reading usage records"):
            return select_usage(self._db, self._mark, model, newest)

    def newest_usage_id(self, model: str | None = None) -> int:
        """Return the id of the newest usage record, of every conversation (of ``model`` when given); 0: none.

        Ids increase in the order records are made, so a changed id means a record arrived
        (:func:`compaction.calibration.correction_for` keeps its fit until it does).

        Raises:
            InvalidArgument: a ``model`` that is neither ``None`` nor a string.
            StoreError: the store could not be read.
        """
        if model is not None and not isinstance(model, str):
            raise InvalidArgument(f"model must be a model name or None; found {found(model)}")
        with self._reading("reading the newest usage record"):
            return newest_usage(self._db, self._mark, model)
