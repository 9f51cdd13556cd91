"""Count a large corpus on a Dask cluster: the batch counter mapped over partitions.

``compaction count --engine dask`` splits its files into partitions of about
``partition_bytes`` (never splitting a file; at least one partition per worker when there
are enough files), and each Dask task reads its partition's files itself and counts them
with :func:`compaction.tokens.batch.count_batch`.  Counting is a pure function of the text,
so the per-file counts, and the total, are the same numbers as the local count's.  Workers
must see the files at the same paths (one machine, or a shared filesystem).

``compaction count --store S`` counts a store's messages instead: one text per message (its
blocks rendered as :func:`compaction.inspect.message_text` does, the texts ``compaction
bench`` counts), in partitions of ``partition_messages`` seqs, each task opening the store
itself and reading its range.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import CompactionError

__all__ = [
    "StoreCount",
    "count_files_on_dask",
    "count_partition",
    "count_store_messages",
    "count_store_range",
    "partitions",
    "read_text_file",
]

#: Bytes of files per Dask task by default (16 MiB).
PARTITION_BYTES = 16 * 1024 * 1024
#: Messages per Dask task when counting a store (seqs).
PARTITION_MESSAGES = 4096


@dataclass(frozen=True)
class StoreCount:
    """The tokens of a store's message texts.

    Attributes:
        messages: the messages counted.
        characters: their texts' characters.
        tokens: their texts' tokens (tokens).
    """

    messages: int
    characters: int
    tokens: int


def read_text_file(name: str) -> str:
    """Return the text of the UTF-8 file ``name``.

    Raises:
        CompactionError: the file is not UTF-8 (the message names the byte and its offset).
        OSError: the file cannot be read.
    """
    with open(name, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CompactionError(
            f"{name}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); count takes text files"
        ) from None


def partitions(sizes: Sequence[int], partition_bytes: int, at_least: int = 1) -> list[range]:
    """Split items of ``sizes`` (bytes) into contiguous runs of about ``partition_bytes`` each.

    Args:
        sizes: each item's size in bytes, in order.
        partition_bytes: the bytes a run should hold (an item larger than that is a run alone).
        at_least: make at least this many runs when there are that many items (so every
            worker gets one), by lowering the bytes per run.

    Returns:
        Index ranges, in order, covering ``range(len(sizes))`` exactly once.

    Example:
        >>> partitions([5, 5, 5, 20, 1], 10)
        [range(0, 2), range(2, 3), range(3, 4), range(4, 5)]
    """
    if not sizes:
        return []
    total = sum(sizes)
    target = max(1, min(partition_bytes, total // max(1, min(at_least, len(sizes)))))
    runs: list[range] = []
    start, held = 0, 0
    for index, size in enumerate(sizes):
        if index > start and held + size > target:
            runs.append(range(start, index))
            start, held = index, 0
        held += size
    runs.append(range(start, len(sizes)))
    return runs


def count_partition(names: Sequence[str], encoding: str, method: str) -> list[tuple[int, int]]:
    """Read and count the files ``names``; return ``(characters, tokens)`` per file, in order.

    Raises:
        CompactionError: a file is not UTF-8, or the encoding or method is unknown.
        OSError: a file cannot be read.
    """
    from ..tokens.batch import count_batch

    texts = [read_text_file(name) for name in names]
    counts = count_batch(texts, encoding, method)
    return [(len(text), int(tokens)) for text, tokens in zip(texts, counts, strict=True)]


def count_files_on_dask(
    names: Sequence[str],
    encoding: str,
    method: str,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    partition_bytes: int = PARTITION_BYTES,
    processes: bool = True,
) -> list[tuple[int, int]]:
    """Count the files ``names`` on a Dask cluster; return ``(characters, tokens)`` per file, in order.

    Args:
        names: UTF-8 text files, readable by every worker at these paths.
        encoding: as :func:`~compaction.tokens.batch.count_batch`.
        method: ``"exact"``, ``"fast"`` or ``"estimate"``.
        workers: a ``LocalCluster``'s workers (default 2); ignored with ``scheduler``.
        scheduler: the address of an existing Dask scheduler.
        partition_bytes: bytes of files per task (see :func:`partitions`).
        processes: ``LocalCluster`` workers in processes (True) or threads.

    Returns:
        One ``(characters, tokens)`` per file, the numbers :func:`count_partition` gives
        for the same files in one process.

    Raises:
        CompactionError: a file is not UTF-8, or the encoding or method is unknown (raised
            in a worker, re-raised here).
        OSError: a file cannot be read.
        FleetEngineError: dask is not installed, or the scheduler cannot be reached.
    """
    from .engines import _dask_executor

    sizes = [os.path.getsize(name) for name in names]
    with _dask_executor(workers, scheduler, retries=1, processes=processes) as (executor, count):
        runs = partitions(sizes, partition_bytes, at_least=max(1, count))
        futures = [
            executor.submit(count_partition, [names[i] for i in run], encoding, method) for run in runs
        ]
        return [pair for future in futures for pair in future.result()]


def count_store_range(
    location: str, conversation: str | None, start: int, end: int, encoding: str, method: str
) -> StoreCount:
    """Open the store at ``location`` and count the texts of its messages ``start <= seq < end``.

    Raises:
        StoreError: no store there (nothing is created), or it cannot be read.
        CompactionError: the encoding or method is unknown.
    """
    from ..inspect import message_text
    from ..store import open_store
    from ..tokens.batch import count_batch

    with open_store(location, create=False, conversation=conversation) as store:
        texts = [message_text(message.content) for message in store.messages(start, end)]
    counts = count_batch(texts, encoding, method)
    return StoreCount(len(texts), sum(len(t) for t in texts), int(counts.sum()))


def count_store_messages(
    location: str,
    encoding: str,
    method: str,
    *,
    conversation: str | None = None,
    engine: str = "local",
    workers: int | None = None,
    scheduler: str | None = None,
    partition_messages: int = PARTITION_MESSAGES,
    processes: bool = True,
) -> StoreCount:
    """Count the texts of every message of a store's conversation, here or on a Dask cluster.

    Args:
        location: a store (a file path or a ``postgresql://`` URL) every worker can open.
        encoding: as :func:`~compaction.tokens.batch.count_batch`.
        method: ``"exact"``, ``"fast"`` or ``"estimate"``.
        conversation: the conversation (default: the store's only one).
        engine: ``"local"`` (one pass in this process) or ``"dask"`` (one task per
            ``partition_messages`` seqs).
        workers, scheduler, processes: the Dask cluster, as :func:`count_files_on_dask`.
        partition_messages: seqs per Dask task.

    Returns:
        A :class:`StoreCount`; the same numbers on either engine.

    Raises:
        StoreError: no store at ``location``, several conversations and none named, or a
            read failed.
        InvalidArgument: an unknown engine.
        FleetEngineError: dask is not installed, or the scheduler cannot be reached.
    """
    from ..errors import InvalidArgument, found
    from ..store import open_store

    if engine not in ("local", "dask"):
        raise InvalidArgument(f"engine must be one of local, dask; found {found(engine)}")
    with open_store(location, create=False, conversation=conversation) as store:
        total = len(store)
        conversation = getattr(store, "conversation", conversation)
    if engine == "local":
        return count_store_range(location, conversation, 0, total, encoding, method)
    from .engines import _dask_executor

    step = max(1, partition_messages)
    with _dask_executor(workers, scheduler, retries=1, processes=processes) as (executor, _count):
        futures = [
            executor.submit(
                count_store_range, location, conversation, start, min(start + step, total), encoding, method
            )
            for start in range(0, total, step)
        ]
        parts = [future.result() for future in futures]
    return StoreCount(
        sum(p.messages for p in parts), sum(p.characters for p in parts), sum(p.tokens for p in parts)
    )
