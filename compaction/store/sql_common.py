"""What the SQLite and PostgreSQL stores run alike: the reads and writes written once.

:class:`CommonQueries` is mixed into both store classes (as :class:`.usage.UsageRecords`
is).  Its methods run the same SQL on both backends; each backend supplies a small dialect
of hooks for what differs:

* ``_mark``: the driver's placeholder (``?`` or ``%s``, from :class:`.scope.ConversationScope`);
* :meth:`CommonQueries._text_in` / :meth:`CommonQueries._text_out`: free text as the column
  holds it (SQLite: text, or UTF-8 bytes for a lone surrogate, :func:`.ingest.sql_text`;
  PostgreSQL: ``BYTEA`` of UTF-8 with surrogates kept);
* :meth:`CommonQueries._contains`: the SQL of "``needle`` occurs in ``haystack``"
  (``instr`` or ``strpos``);
* :meth:`CommonQueries._snapshot`: a read that must see one state of the store (a
  ``REPEATABLE READ`` transaction on PostgreSQL, a deferred ``BEGIN`` on SQLite: each
  statement of their autocommit connections otherwise sees the store as it is when it
  starts, so a read's bound and its rows could see two states);
* :meth:`CommonQueries._limit`: a ``LIMIT`` argument (SQLite takes a negative one as "all",
  PostgreSQL takes ``NULL``);
* :meth:`CommonQueries._insert_ignoring` / :meth:`CommonQueries._insert_replacing`: an
  insert that keeps, or replaces, the row of the same key;
* :meth:`CommonQueries._executemany`; ``_BYTEWISE``: the collation ordering text by bytes;
  ``_MESSAGE_COLUMNS`` and :meth:`CommonQueries._message_values`: a message row's columns.

* :meth:`CommonQueries._append_write`, :meth:`CommonQueries._check_dense`,
  :meth:`CommonQueries._cache_counts`, ``_FALSE`` and ``_KIND_COLUMN``: an append's lock, a
  check that seqs are dense (SQLite), how counted tokens are cached, and two SQL fragments.

Here: messages (``append``, ``messages``, ``facts``, ``next_seq``, user turns, pins) and
image blobs; :mod:`.sql_summaries` holds summaries, failures, events and captions on the
same dialect.  Connections, transactions and locks (``_reading``, ``_write``), opening,
migrations, the compaction claim, ``__len__`` and ``add_summary`` stay in each backend: they
differ in more than words.  :class:`AppendRows` is the row side of :func:`.sync.append_batch`,
for both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from typing import Any, TypeVar

from ..blocks import Message, canonical_json
from ..errors import InvalidArgument, StoreError, found
from ..tokens.encodings import check_encoding
from . import ingest
from .lineage import CURRENT_REVISION
from .model import (
    MessageFacts,
    PromptTurn,
)
from .scope import ConversationScope
from .sync import append_batch

__all__ = [
    "AppendRows",
    "CommonQueries",
    "check_failure",
    "check_ints",
    "check_opening",
    "check_optional_ints",
    "check_sha256",
    "facts_keys",
    "json_object",
]



def check_ints(**values: object) -> None:
    """Raise :class:`InvalidArgument` for a value that is not an integer."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"{name} must be an integer; found {found(value)}")


def check_optional_ints(**values: object) -> None:
    """Raise :class:`InvalidArgument` for a value that is neither an integer nor ``None``."""
    check_ints(**{name: value for name, value in values.items() if value is not None})


def check_sha256(sha256: object) -> str:
    """Return ``sha256`` when it is a string of hex digits, else raise :class:`InvalidArgument`."""
    if not isinstance(sha256, str) or not sha256 or len(sha256) > 128 or any(c not in "0123456789abcdef" for c in sha256):
        raise InvalidArgument(f"an image's sha256 must be a string of lowercase hex digits; found {found(sha256)}")
    return sha256


def json_object(value: object, what: str) -> str:
    """Return ``value`` (a dict) as canonical JSON; ``what`` names it in the error (``"a summary's provenance"``).

    Raises:
        InvalidArgument: ``value`` is not a dict, or holds what JSON cannot (a set, NaN...).
    """
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a dict; found {found(value)}")
    try:
        return canonical_json(value)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(f"{what} must be a JSON object: {err}") from err


def check_failure(what: str, reason: object, kind: object, kinds: Sequence[str]) -> None:
    """Refuse a failure's ``reason`` that is not a string or a ``kind`` not among ``kinds``.

    ``what`` names the record in the error (``"failure"``, ``"caption failure"``).

    Raises:
        InvalidArgument: ``reason`` or ``kind`` is not a string.
        StoreError: ``kind`` is not one of ``kinds``.
    """
    if not isinstance(reason, str):
        raise InvalidArgument(f"a {what}'s reason must be a string; found {found(reason)}")
    if not isinstance(kind, str):
        raise InvalidArgument(f"a {what}'s kind must be a string; found {found(kind)}")
    if kind not in kinds:
        raise StoreError(f"a {what}'s kind must be one of {', '.join(map(repr, kinds))}; found {kind!r}")


def check_opening(encoding: object, create: object) -> None:
    """Refuse a store's ``encoding`` that is not a known encoding's name, or a ``create`` that is not a bool.

    Raises:
        InvalidArgument: an argument of the wrong type.
        EncodingDataMissing: an unknown encoding name, or an hf: tokenizer file that cannot be loaded.
    """
    if not isinstance(encoding, str):
        raise InvalidArgument(f"encoding must be an encoding's name; found {found(encoding)}")
    check_encoding(encoding)  # a tiktoken name, or hf:PATH of a readable tokenizer.json
    if not isinstance(create, bool):
        raise InvalidArgument(f"create must be True or False; found {found(create)}")


def facts_keys(
    store_encoding: str, start: object, end: object, encoding: object, dropped: object
) -> tuple[str, str, str]:
    """Check :meth:`CommonQueries.facts`' arguments; return ``(encoding, key, plain key)`` of its counts.

    Raises:
        InvalidArgument: an argument of the wrong type.
        EncodingDataMissing: an unknown encoding.
    """
    check_ints(start=start)
    check_optional_ints(end=end)
    if encoding is not None and not isinstance(encoding, str):
        raise InvalidArgument(f"encoding must be an encoding's name; found {found(encoding)}")
    if encoding is not None:
        check_encoding(encoding)
    if not isinstance(dropped, frozenset) or not all(isinstance(t, str) for t in dropped):
        raise InvalidArgument(f"dropped must be a frozenset of block type names; found {found(dropped)}")
    chosen = encoding or store_encoding
    return chosen, ingest.token_key(chosen, dropped), ingest.token_key(chosen)


_Store = TypeVar("_Store", bound="CommonQueries")


class CommonQueries(ConversationScope):
    """The store methods both backends run alike, over the backend's dialect hooks (see the module)."""

    #: ``ORDER BY`` collation that sorts text by its bytes.
    _BYTEWISE = ""
    #: SQL false (a condition of no terms).
    _FALSE = "FALSE"
    #: The expression of a message's ``meta["kind"]`` (alias ``m``).
    _KIND_COLUMN = "m.kind"
    #: Whether full reads of messages join the lineage as a table (:meth:`.Lineage.rows_join`)
    #: instead of its ``OR`` condition (SQLite: that condition's planning grows faster than
    #: the square of the depth; PostgreSQL plans it in linear time and keeps it).
    _JOINED_ROWS = False
    #: A message row's columns after ``conversation_id, seq`` (PostgreSQL adds ``kind`` after ``meta``).
    _MESSAGE_COLUMNS: tuple[str, ...] = (
        "role", "content", "source_id", "meta", "import_key", "tool_uses", "tool_results", "images",
    )

    # -- the dialect ----------------------------------------------------------------------------
    def _text_in(self, value: str | None) -> object:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _text_out(self, value: Any) -> str | None:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _contains(self, haystack: str, needle: str) -> str:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[Any]:
        """Return a context in which the reads see one state of the store (the backend's read transaction)."""
        return nullcontext()

    def _limit(self, limit: int) -> int | None:
        """Return ``limit`` as the backend's ``LIMIT`` takes it (negative: no limit)."""
        return limit

    def _insert_ignoring(self, into: str, key: str) -> str:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _insert_replacing(self, into: str, key: str, column: str) -> str:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _executemany(self, statement: str, rows: Sequence[tuple[object, ...]]) -> None:
        """Run ``statement`` once per row of arguments."""
        if rows:
            with closing(self._db.cursor()) as cur:
                cur.executemany(statement, rows)

    def _check_dense(self, seqs: list[int], start: int, end: int) -> None:
        """Raise :class:`StoreError` when a message is missing among ``seqs`` of ``[start, end)`` (no check here)."""

    def _cache_counts(self, rows: list[tuple[int, int, str, int]]) -> None:  # pragma: no cover - the backend's
        """Cache ``(conversation id, seq, key, text tokens)`` rows, quietly leaving them uncached when it cannot write."""
        raise NotImplementedError

    def _message_values(self, import_key: str, row: ingest.PreparedMessage, message: Message) -> tuple[object, ...]:
        """Return a message row's values of ``_MESSAGE_COLUMNS``, in their order.

        ``kind`` (PostgreSQL only) is ``meta["kind"]`` kept beside the meta when it is a string.
        """
        kind = message.meta.get("kind") if isinstance(message.meta, dict) else None
        every: dict[str, object] = {
            "role": row.role,
            "content": row.content,
            "source_id": self._text_in(row.source_id),
            "meta": row.meta,
            "kind": self._text_in(kind if isinstance(kind, str) else None),
            "import_key": import_key,
            "tool_uses": row.tool_uses,
            "tool_results": row.tool_results,
            "images": row.images,
        }
        return tuple(every[column] for column in self._MESSAGE_COLUMNS)

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:  # pragma: no cover - the backend's
        raise NotImplementedError

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # -- messages -------------------------------------------------------------------------------
    def _append_write(self) -> AbstractContextManager[None]:
        """Return the write an append runs in (PostgreSQL: holding the store's append lock)."""
        return self._write()

    def _append(self, batch: list[Message], chain_seed: str | None) -> int:
        """Append a checked batch inside the caller's write (:func:`.sync.append_batch`)."""
        return append_batch(AppendRows(self), batch, chain_seed)

    def append(self, messages: Iterable[Message], *, chain_seed: str | None = None) -> int:
        """Append messages; return how many were added.  All messages of one call commit together.

        Without ``chain_seed`` (an agent loop adding its new turns) every message is added
        after the stored ones, even one equal to an earlier message ("ok" twice is two
        messages).  With ``chain_seed`` (a transcript synced from its start, as
        ``compaction import`` does with the format's name) each message's identity is a hash
        chain over ``chain_seed`` and the fingerprints of the messages before it in this call
        (:func:`.ingest.import_keys`), so re-importing a transcript adds nothing and a
        transcript that grew adds its tail.

        A transcript read while it was being written may have ended inside a message its
        parser builds from several lines (the answers to parallel tool calls, one line each;
        an assistant response written a block a line).  When a message of the grown
        transcript starts with all the blocks of a stored message of the same chain, the
        stored one is completed in place (the answers it lacked are added to it), so the
        store ends as if the whole file had been imported once: no tool result twice, none
        lost.  If a summary already covers the stored one, the missing blocks are appended
        as a message of their own instead, so the summary stays true.  The other way round,
        an older snapshot imported after the grown file adds nothing: its last message is
        already held, grown, by the stored message that follows the same chain.  On
        PostgreSQL, appenders on several hosts queue on the store's advisory lock, so seqs
        stay dense.

        Raises:
            InvalidMessage: ``messages`` is not an iterable of :class:`Message`, or a message
                cannot be stored (text that is not valid Unicode); nothing of the call is stored.
            ImageError: an image block holds invalid base64 (the message names which one;
                nothing of the call is stored).
            InvalidArgument: ``chain_seed`` is not a string.
            StoreError: the database refused the write or could not be reached (the message
                says why: a full disk, a read-only file...), or an SQLite store's file was
                deleted or replaced meanwhile.
        """
        batch = ingest.checked_messages(messages)
        if chain_seed is not None and not isinstance(chain_seed, str):
            raise InvalidArgument(f"chain_seed must be a string; found {found(chain_seed)}")
        if not batch:
            return 0
        with self._reading("append"), self._append_write():
            self._own()  # created here, or picked up when another process created it meanwhile
            return self._append(batch, chain_seed)

    def _count_missing(self, missing: Sequence[tuple[int, int]], encoding: str, dropped: frozenset[str]) -> dict[int, int]:
        """Count the text tokens of the messages ``missing`` (``(seq, owner)``) names, by seq (tokens)."""
        counted: dict[int, int] = {}
        for seq, _owner in missing:
            for message in self.messages(seq, seq + 1):
                counted[seq] = ingest.count_text_tokens(message, encoding, dropped)
        return counted

    def next_seq(self) -> int:
        """Return the seq the next appended message will get (= the number of messages)."""
        with self._reading("reading the message count"):
            row = self._newest_row("seq")
        return 0 if row is None else int(row[0]) + 1

    def _bound(self, end: int | None) -> int:
        """Return the end of a read of ``[start, end)``: ``end`` capped at :meth:`next_seq` (inside the read's snapshot).

        Taken in the same snapshot as the rows it bounds (:meth:`_snapshot`), so the rows a
        read returns and the range its check expects are of one state of the store: a bound
        read at another moment than the rows made a read past the newest message expect
        rows another connection appended after the rows were read.
        """
        newest = self.next_seq()
        return newest if end is None else min(end, newest)

    def _newest_row(self, columns: str) -> tuple[Any, ...] | None:
        """Return ``columns`` of the newest message row this conversation shows, else ``None`` (inside a read).

        A lineage's segments hold descending seq ranges (itself from its fork on, its parent
        up to that fork, ...), so the newest row is in the first segment holding one: one
        indexed read of each segment until then (mostly one or two), not one query whose
        condition grows with the lineage's depth.
        """
        self._refresh()
        m = self._mark
        for seg in self._lineage.segments:
            if seg.end is not None and seg.end <= seg.start:
                continue
            cond, args = f"conversation_id = {m} AND seq >= {m}", [seg.conversation_id, seg.start]
            if seg.end is not None:
                cond += f" AND seq < {m}"
                args.append(seg.end)
            row = self._db.execute(f"SELECT {columns} FROM messages WHERE {cond} ORDER BY seq DESC LIMIT 1", args).fetchone()
            if row is not None:
                return tuple(row)
        return None

    def iter_messages(self, batch: int = 512) -> Iterator[Message]:
        """Yield every message in order, reading ``batch`` at a time."""
        check_ints(batch=batch)
        if batch < 1:
            raise InvalidArgument(f"batch must be 1 or more; found {batch}")
        start, end = 0, self.next_seq()
        while start < end:
            yield from self.messages(start, min(end, start + batch))
            start += batch

    def _blob_for_hydrate(self, sha256: str) -> bytes:
        row = self._db.execute(f"SELECT data FROM blobs WHERE sha256 = {self._mark}", (sha256,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: image blob {sha256} is missing")
        return bytes(row[0])

    def _shown_rows(self, start: int | None = None, end: int | None = None) -> tuple[str, str, list[int]]:
        """Return ``(join, condition, arguments)`` selecting the message rows ``m`` this conversation shows.

        On SQLite the lineage is joined as a table (:meth:`.Lineage.rows_join`, the condition
        ``1 = 1``), elsewhere it is :meth:`.Lineage.rows`'s condition (the join empty); both
        select the same rows.  With ``start`` and ``end``, the caller reads ``[start, end)``
        only, and only the conversations holding some of it are named.
        """
        self._refresh()
        if self._JOINED_ROWS:
            return self._lineage.rows_join("m.", start, end), "(1 = 1)", []
        where, args = self._lineage.rows("m.", self._mark, start, end)
        return "", where, args

    def _message_query(self, start: int, end: int) -> list[Any]:
        """Return the stored rows ``(seq, role, content, source_id, meta, import_key)`` of ``[start, end)``, in order."""
        m = self._mark
        join, where, args = self._shown_rows(start, end)  # only the conversations holding [start, end)
        return list(
            self._db.execute(
                "SELECT m.seq, m.role, COALESCE(r.content, m.content), m.source_id, m.meta, m.import_key FROM messages m"
                f" {join} {CURRENT_REVISION} WHERE {where} AND m.seq >= {m} AND m.seq < {m} ORDER BY m.seq",
                (*args, start, end),
            ).fetchall()
        )

    def _from_rows(self, rows: list[Any]) -> list[tuple[Message, str]]:
        """Rebuild :meth:`_message_query`'s rows as messages (images rehydrated), each with its import key."""
        return [
            (ingest.message_from_row(seq, role, content, self._text_out(source), meta, self._blob_for_hydrate), key)
            for seq, role, content, source, meta, key in rows
        ]

    def _message_rows(self, start: int, end: int) -> list[tuple[Message, str]]:
        """Return the messages in ``[start, end)`` with their import keys, in order (inside the caller's read)."""
        return self._from_rows(self._message_query(start, end))

    def messages(self, start: int = 0, end: int | None = None) -> list[Message]:
        """Return messages with ``start <= seq < end`` (images rehydrated), in order.

        Raises:
            InvalidArgument: ``start`` or ``end`` is not an integer.
            StoreError: the store could not be read, a row is damaged, or (SQLite) a message is missing.
        """
        check_ints(start=start)
        check_optional_ints(end=end)
        with self._reading("reading messages"), self._snapshot():
            end = self._bound(end)
            rows = self._message_query(start, end)
            self._check_dense([int(r[0]) for r in rows], start, end)
            return [message for message, _key in self._from_rows(rows)]

    def import_key(self, seq: int) -> str | None:
        """Return the import key of message ``seq`` (its place in a hash chain, see :meth:`append`), else ``None``.

        A transcript appended with ``chain_seed`` keys message ``k`` by the chain over the
        seed and the fingerprints of messages ``0..k`` (:func:`.ingest.import_keys`); a
        caller that knows that chain can tell from the key of the last shared message whether
        a branch's shared prefix is exactly its own (``compaction import --branches`` then
        appends only what follows it).  One indexed read of the row's owner, whatever the
        lineage's depth.

        Raises:
            InvalidArgument: ``seq`` is not an integer.
            StoreError: the store could not be read.
        """
        check_ints(seq=seq)
        with self._reading(f"reading the import key of message {seq}"):
            self._refresh()
            owner = self._lineage.owner(seq)
            if owner is None:
                return None
            m = self._mark
            row = self._db.execute(
                f"SELECT import_key FROM messages WHERE conversation_id = {m} AND seq = {m}", (owner, seq)
            ).fetchone()
        return None if row is None else str(row[0])

    def facts(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        encoding: str | None = None,
        dropped: frozenset[str] = frozenset(),
    ) -> list[MessageFacts]:
        """Return :class:`MessageFacts` for ``start <= seq < end``; counts missing tokens once.

        Args:
            start, end: the seq range (``end`` defaults to :meth:`next_seq`).
            encoding: the encoding of ``text_tokens`` (default: the store's).
            dropped: block types the counts leave out, as the request format they are for
                does not ship them (``RequestFormat.dropped_block_types``; OpenAI Chat drops
                ``thinking``); such counts are cached under their own key.

        Returns:
            One entry per message, in seq order.  Counts not cached yet are computed and
            cached (on a read-only or full store they are used uncached); a message that
            holds none of the dropped types takes its plain count.

        Raises:
            InvalidArgument: an argument of the wrong type.
            EncodingDataMissing: an unknown encoding.
            StoreError: the database could not be read, or (SQLite) a message is missing.
        """
        encoding, key, plain = facts_keys(self.encoding, start, end, encoding, dropped)
        m = self._mark
        # A message whose JSON names none of the dropped types counts the same either way.
        holds = " OR ".join(self._contains("COALESCE(r.content, m.content)", m) for _ in dropped) or self._FALSE
        with self._reading("reading message facts"):
            with self._snapshot():
                end = self._bound(end)
                join, where, args = self._shown_rows(start, end)
                rows = self._db.execute(
                    "SELECT m.seq, m.role, COALESCE(r.tool_uses, m.tool_uses), COALESCE(r.tool_results, m.tool_results),"
                    " COALESCE(r.images, m.images),"
                    f" COALESCE(t.text_tokens, CASE WHEN ({holds}) THEN NULL ELSE p.text_tokens END),"
                    f" {self._KIND_COLUMN}, m.conversation_id FROM messages m {join} {CURRENT_REVISION}"
                    " LEFT JOIN token_counts t ON t.conversation_id = m.conversation_id AND t.seq = m.seq"
                    f" AND t.encoding = {m}"
                    " LEFT JOIN token_counts p ON p.conversation_id = m.conversation_id AND p.seq = m.seq"
                    f" AND p.encoding = {m}"
                    f" WHERE {where} AND m.seq >= {m} AND m.seq < {m} ORDER BY m.seq",
                    (*(f'"{t}"' for t in sorted(dropped)), key, plain, *args, start, end),
                ).fetchall()
                self._check_dense([int(r[0]) for r in rows], start, end)
            missing = [(int(r[0]), int(r[7])) for r in rows if r[5] is None]
            counted = self._count_missing(missing, encoding, dropped)
            if missing:
                self._cache_counts([(owner, seq, key, counted[seq]) for seq, owner in missing])
        return [
            ingest.facts_from_row(
                seq, role, uses, results, images, counted[seq] if tokens is None else int(tokens), self._text_out(kind)
            )
            for seq, role, uses, results, images, tokens, kind, _owner in rows
        ]

    def pinned_seqs(self) -> list[int]:
        """Return the seqs of the pinned messages (system messages and :meth:`pin`'s), in order."""
        with self._reading("reading the pinned messages"):
            where, args = self._rows()
            pins, pin_args = self._pins()
            return [
                int(r[0])
                for r in self._db.execute(
                    f"SELECT seq FROM messages WHERE role = 'system' AND {where}"
                    f" UNION SELECT seq FROM pins WHERE {pins} ORDER BY 1",
                    (*args, *pin_args),
                )
            ]

    def prompt_seqs(self, start: int = 0, end: int | None = None) -> list[int]:
        """Return the seqs in ``[start, end)`` of user turns that hold a text block, in order.

        These are the turns a person may have written (the ask ledger reads only these);
        a user turn of tool results alone is not one.
        """
        return [int(row[0]) for row in self._prompt_rows(start, end, texts=False)]

    def prompt_texts(self, start: int = 0, end: int | None = None) -> list[PromptTurn]:
        """Return the turns :meth:`prompt_seqs` names, each with its text blocks and kind, in one read.

        The ask ledger's first scan of a long history reads these instead of whole messages
        (no block checks, no image blobs): one query, not one per turn.

        Raises:
            StoreError: a row is damaged.
        """
        return [
            ingest.prompt_from_row(int(seq), content, meta)
            for seq, content, meta in self._prompt_rows(start, end, texts=True)
        ]

    def _prompt_rows(self, start: int, end: int | None, *, texts: bool) -> list[Any]:
        """Return ``(seq, content, meta)`` (``texts``) or ``(seq,)`` of the user turns in ``[start, end)`` holding text."""
        check_ints(start=start)
        check_optional_ints(end=end)
        m = self._mark
        with self._reading("reading the user turns"), self._snapshot():
            end = self._bound(end)
            join, where, args = self._shown_rows(start, end)
            content = "COALESCE(r.content, m.content)"
            spaced = self._contains(content, "'\"type\": \"text\"'")
            tight = self._contains(content, "'\"type\":\"text\"'")
            return list(
                self._db.execute(
                    f"SELECT m.seq{f', {content}, m.meta' if texts else ''} FROM messages m {join} {CURRENT_REVISION}"
                    f" WHERE {where} AND m.role = 'user' AND m.seq >= {m} AND m.seq < {m}"
                    f" AND (COALESCE(r.tool_results, m.tool_results) = '[]' OR {spaced}"
                    f" OR {tight}) ORDER BY m.seq",
                    (*args, start, end),
                ).fetchall()
            )

    # -- image blobs ----------------------------------------------------------------------------
    def _store_blobs(self, row: ingest.PreparedMessage) -> None:
        """Store the image blobs of a prepared message (a blob stored already is kept)."""
        m = self._mark
        self._executemany(
            self._insert_ignoring(
                f"blobs (sha256, media_type, byte_size, width, height, data) VALUES ({m}, {m}, {m}, {m}, {m}, {m})",
                "sha256",
            ),
            [(b.sha256, self._text_in(b.media_type), b.byte_size, b.width, b.height, b.data) for b in row.blobs],
        )

    def blob(self, sha256: str) -> bytes:
        """Return the stored bytes of the image blob ``sha256``.

        Raises:
            StoreError: no such blob.
            InvalidArgument: ``sha256`` is not a string.
        """
        if not isinstance(sha256, str):
            raise InvalidArgument(f"a blob's sha256 must be a string of hex digits; found {found(sha256)}")
        with self._reading("reading an image blob"):
            row = self._db.execute(f"SELECT data FROM blobs WHERE sha256 = {self._mark}", (sha256,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no image blob {sha256}")
        return bytes(row[0])

    def blob_hashes(self) -> list[str]:
        """Return the sha256 of every stored blob, sorted (by bytes)."""
        with self._reading("reading image blobs"):
            return [str(r[0]) for r in self._db.execute(f"SELECT sha256 FROM blobs ORDER BY sha256{self._BYTEWISE}")]

    def image_count(self) -> int:
        """Return the number of distinct stored image blobs."""
        with self._reading("counting image blobs"):
            row = self._db.execute("SELECT COUNT(*) FROM blobs").fetchone()
        return int(row[0]) if row else 0



class AppendRows:
    """The row operations :func:`.sync.append_batch` needs, on a store inside its write transaction.

    The same for both backends; a backend's subclass may read through the store's own
    methods where it did before (see :class:`compaction.store.sqlite.SQLiteStore`).
    """

    def __init__(self, store: CommonQueries) -> None:
        self.store = store
        self.db = store._db
        self.encoding = store.encoding
        self._m = store._mark

    def next_seq(self) -> int:
        row = self.store._newest_row("seq")
        return 0 if row is None else int(row[0]) + 1

    def last_import_key(self) -> str | None:
        row = self.store._newest_row("import_key")
        return None if row is None else str(row[0])

    def seq_of(self, import_key: str, after: int | None = None) -> int | None:
        # the key's rows in the lineage's conversations (at most one each), filtered here: the
        # lineage's OR of ranges beside the key made SQLite plan each lookup in depth squared;
        # `after`: only the conversations holding seqs past it (see MessageRows.seq_of)
        self.store._refresh()
        lineage = self.store._lineage
        rows = self.db.execute(
            f"SELECT conversation_id, seq FROM messages WHERE import_key = {self._m} AND {lineage.keyed(after=after)}",
            (import_key,),
        ).fetchall()
        seen = [
            int(seq) for cid, seq in rows if lineage.sees(int(cid), int(seq)) and (after is None or int(seq) > after)
        ]
        return min(seen) if seen else None

    def rekey(self, seq: int, import_key: str) -> None:
        m = self._m
        self.db.execute(
            f"UPDATE messages SET import_key = {m} WHERE conversation_id = {m} AND seq = {m}",
            (import_key, self.store._lineage.owner(seq), seq),
        )

    def covered(self, seq: int) -> bool:
        if self.store._lineage.owner(seq) != self.store._lineage.own:
            return True  # a shared message of the parent: never completed in place from a branch
        m = self._m
        where, args = self.store._seen_summaries()
        row = self.db.execute(
            f"SELECT 1 FROM summaries WHERE {where} AND start_seq <= {m} AND {m} < end_seq LIMIT 1", (*args, seq, seq)
        ).fetchone()
        return row is not None

    def row_at(self, seq: int) -> tuple[Message, str] | None:
        rows = self.store._message_rows(seq, seq + 1)
        return rows[0] if rows else None

    def _count(self, own: int, seq: int, row: ingest.PreparedMessage) -> tuple[str, tuple[object, ...]]:
        m = self._m
        into = f"token_counts (conversation_id, seq, encoding, text_tokens) VALUES ({m}, {m}, {m}, {m})"
        return into, (own, seq, row.token_key, row.text_tokens)

    def insert(self, seq: int, import_key: str, row: ingest.PreparedMessage, message: Message) -> None:
        self.store._store_blobs(row)
        own = self.store._own()
        columns = self.store._MESSAGE_COLUMNS
        marks = ", ".join([self._m] * (len(columns) + 2))
        self.db.execute(
            f"INSERT INTO messages (conversation_id, seq, {', '.join(columns)}) VALUES ({marks})",
            (own, seq, *self.store._message_values(import_key, row, message)),
        )
        into, args = self._count(own, seq, row)
        self.db.execute(self.store._insert_replacing(into, "conversation_id, seq, encoding", "text_tokens"), args)

    def replace(self, seq: int, import_key: str, row: ingest.PreparedMessage, message: Message) -> None:
        """Replace message ``seq`` by its completed form (and drop its counts in other encodings)."""
        m = self._m
        self.store._store_blobs(row)
        own = self.store._own()
        sets = ", ".join(f"{column} = {m}" for column in self.store._MESSAGE_COLUMNS)
        self.db.execute(
            f"UPDATE messages SET {sets} WHERE conversation_id = {m} AND seq = {m}",
            (*self.store._message_values(import_key, row, message), own, seq),
        )
        self.db.execute(f"DELETE FROM token_counts WHERE conversation_id = {m} AND seq = {m}", (own, seq))
        into, args = self._count(own, seq, row)
        self.db.execute(f"INSERT INTO {into}", args)
