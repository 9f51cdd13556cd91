"""Count a large corpus on a Dask cluster: the batch counter mapped over partitions of files.

``compaction count --engine dask`` splits its files into partitions of about
``partition_bytes`` (never splitting a file; at least one partition per worker when there
are enough files), and each Dask task reads its partition's files itself and counts them
with :func:`compaction.tokens.batch.count_batch`.  Counting is a pure function of the text,
so the per-file counts, and the total, are the same numbers as the local count's.  Workers
must see the files at the same paths (one machine, or a shared filesystem).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import CompactionError

__all__ = ["count_files_on_dask", "count_partition", "partitions", "read_text_file"]

#: Bytes of files per Dask task by default (16 MiB).
PARTITION_BYTES = 16 * 1024 * 1024


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
