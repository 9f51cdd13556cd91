"""Appending a batch, whatever database holds the rows: the import-key chain walk of ``append``.

:func:`append_batch` is the algorithm of :meth:`~compaction.store.sqlite.SQLiteStore.append`
(skip what a chain already holds, complete a snapshot's cut-off last message in place, add
nothing for an older snapshot of a grown message), written against :class:`MessageRows`: the
handful of row operations a backend supplies.  The backend calls it inside its write
transaction, so the whole batch commits or nothing does.  It runs no SQL itself;
:mod:`.sqlite` and :mod:`.postgres` both use it.
"""

from __future__ import annotations

from typing import Protocol

from ..blocks import Message
from ..errors import ImageError, InvalidMessage
from . import ingest

__all__ = ["MessageRows", "append_batch"]


class MessageRows(Protocol):
    """The row operations :func:`append_batch` needs, inside the caller's write transaction."""

    encoding: str

    def next_seq(self) -> int:
        """Return the seq the next message gets (the number of stored messages)."""
        ...

    def last_import_key(self) -> str | None:
        """Return the import key of the newest stored message (None for an empty store)."""
        ...

    def seq_of(self, import_key: str, after: int | None = None) -> int | None:
        """Return the seq of the message stored under ``import_key``, else None.

        ``after``: look only past that seq.  A chain's keys follow one another in seq order
        (a row keyed ``chain_key(X, m)`` lies after the row keyed ``X`` in every lineage
        showing both: rows are added at the end, and completing or re-keying one keeps its
        place), so a key chained from the row at seq ``s`` is looked for past ``s`` only: a
        backend reads the conversations holding those seqs, not the whole lineage.
        """
        ...

    def rekey(self, seq: int, import_key: str) -> None:
        """Give message ``seq`` the import key ``import_key``."""
        ...

    def covered(self, seq: int) -> bool:
        """Return whether a summary (of any level) covers message ``seq``."""
        ...

    def row_at(self, seq: int) -> tuple[Message, str] | None:
        """Return message ``seq`` (images rehydrated) and its import key, else None."""
        ...

    def insert(self, seq: int, import_key: str, row: ingest.PreparedMessage, message: Message) -> None:
        """Store ``row`` (the prepared form of ``message``) as message ``seq``, with its blobs and count."""
        ...

    def replace(self, seq: int, import_key: str, row: ingest.PreparedMessage, message: Message) -> None:
        """Replace message ``seq`` by ``row`` (its completed form); drop its counts in other encodings."""
        ...


def _which(message: Message, index: int, total: int) -> str:
    """Name message ``index`` of an append of ``total`` for an error message."""
    source = f", source id {message.source_id!r}" if message.source_id else ""
    return f"message {index} of the {total} appended ({message.role}{source})"


def append_batch(rows: MessageRows, batch: list[Message], chain_seed: str | None) -> int:
    """Append ``batch`` through ``rows``; return how many messages were added.

    Without ``chain_seed`` every message goes after the stored ones (the newest stored
    message's chain goes on); with it, the batch is a transcript synced from its start and
    only what its chain does not hold yet is added (see ``SQLiteStore.append``).

    Raises:
        ImageError: an image block holds invalid base64 (naming the message).
        InvalidMessage: a message's text has no UTF-8 form.
        StoreError: from ``rows``.  The caller rolls its transaction back on any error.
    """
    next_seq = rows.next_seq()
    at: int | None = None  # the seq of the row keyed `key` (None: a seed, or not known here)
    if chain_seed is None:
        last = rows.last_import_key()
        key = last or ingest.seed_key("")
        at = next_seq - 1 if last is not None else None  # the newest row's
    else:
        key = ingest.seed_key(chain_seed)
    stored_chain: str | None = None  # the stored chain's key where a completion made it differ
    known = True  # every message so far was stored already
    added = 0
    for index, message in enumerate(batch):
        try:
            previous, previous_stored, previous_at = key, stored_chain, at
            key, stored_chain, at = ingest.chain_key(previous, message), None, None
            seq = rows.seq_of(key, previous_at)  # chained from the row at previous_at: past it
            if seq is not None:
                at = seq
                continue
            if previous_stored is not None:
                old = ingest.chain_key(previous_stored, message)
                seq = rows.seq_of(old)
                if seq is not None:  # stored after a message this call completed: re-key it
                    rows.rekey(seq, key)
                    stored_chain, at = old, seq
                    continue
            if known:
                completed = _complete(rows, ((previous, previous_at), (previous_stored, None)), message, key, next_seq)
                if completed is not None:
                    stored_chain, appended = completed
                    next_seq += appended
                    added += appended
                    continue
                held = _held(rows, ((previous, previous_at), (previous_stored, None)), message)
                if held is not None:  # an older snapshot: the store has this message, grown
                    key, at = held
                    continue
            known = False
            rows.insert(next_seq, key, ingest.prepare(message, rows.encoding), message)
            at = next_seq
            next_seq += 1
            added += 1
        except ImageError as err:
            raise ImageError(f"{_which(message, index, len(batch))}: {err}") from err
        except UnicodeEncodeError as err:
            raise InvalidMessage(
                f"{_which(message, index, len(batch))}: its text is not valid Unicode "
                f"({err.reason} at character {err.start}); a lone surrogate cannot be stored"
            ) from err
    return added


def _complete(
    rows: MessageRows,
    chains: tuple[tuple[str, int | None], tuple[str | None, int | None]],
    message: Message,
    key: str,
    next_seq: int,
) -> tuple[str, int] | None:
    """Complete the stored prefix of ``message`` (a snapshot's last message), if there is one.

    ``chains``: the keys the message may follow, each with the seq of its row when known
    (the prefixes are looked for past it).

    Returns:
        ``None`` when no stored message of this chain is a prefix of ``message``; else the
        prefix's key and the messages appended (0: completed in place; 1: a summary covers
        the prefix, so the missing blocks were appended as a message of their own).
    """
    for chain, chain_at in chains:
        if chain is None:
            continue
        prefixes = ingest.prefix_keys(chain, message)
        for length in range(len(prefixes), 0, -1):  # the longest stored prefix
            old = prefixes[length - 1]
            seq = rows.seq_of(old, chain_at)
            if seq is None:
                continue
            if rows.covered(seq):
                rest = Message(message.role, message.content[length:], None, message.source_id, message.meta)
                rows.insert(next_seq, key, ingest.prepare(rest, rows.encoding), rest)
                return old, 1
            rows.replace(seq, key, ingest.prepare(message, rows.encoding), message)
            return old, 0
    return None


def _held(
    rows: MessageRows, chains: tuple[tuple[str, int | None], tuple[str | None, int | None]], message: Message
) -> tuple[str, int] | None:
    """Return the key and seq of the stored message that starts with all of ``message``'s blocks and
    follows the same chain (an older snapshot re-imported after the grown file), else None.

    ``chains``: as :func:`_complete`'s (a chain whose row's seq is known is not looked up)."""
    for chain, chain_at in chains:
        if chain is None:
            continue
        before = chain_at if chain_at is not None else rows.seq_of(chain)
        if before is None:
            continue
        found = rows.row_at(before + 1)
        if found is None:
            return None
        stored, stored_key = found
        grown = stored.role == message.role and len(stored.content) > len(message.content)
        if grown and stored.content[: len(message.content)] == message.content:
            if ingest.chain_key(chain, stored) == stored_key:
                return stored_key, before + 1
    return None
