"""Build stores of N messages for the scale benchmark, quickly and from real data.

How a store of N messages is made:

1. **Base.** The real pi transcript (``examples/pi__pi-mono__before-compaction.jsonl``, 962
   messages) is imported once with the real importer (:func:`compaction.import_transcript`,
   token counting included) and compressed with the real :class:`~compaction.Compactor`
   under ``Recipe()`` defaults (offline extractive summarizer).  Its level-1 frontier ``P``
   (959) is the replication unit: ``[0, P)`` is covered by level-1 summaries and ends at a
   safe boundary.
2. **Copies, in SQL.** ``[0, P)`` is copied ``N // P`` times with ``INSERT ... SELECT``:
   messages with ``seq`` shifted by ``copy * P`` and a new ``import_key``
   (``<key>:<copy>``), their cached ``token_counts`` rows, and the base's level-1 summaries
   with shifted ranges.  Message content is copied byte for byte (tool ids repeat across
   copies; only the live window is ever rendered raw, and it holds one copy's ids once),
   so cached counts stay exact.  The remainder is a partial copy ``[0, R)`` with ``R`` the
   largest level-1 boundary that fits.
3. **Live tail.** One base level-1 chunk of 2,000-6,000 tokens is appended raw (no
   summary), so a compile has a live window to show and the budget of 16,000 fits.
4. **Higher levels.** Levels 2 and up are built the way :meth:`Compactor._merge_levels`
   builds them: the contiguous chain of level-``L`` summaries is grouped in
   ``merge_fanout`` (6) from seq 0, full groups only, each group becoming one level-``L+1``
   summary whose provenance lists its children.  The merge *text* is synthetic: the texts
   of the base's real merges of that level (the highest level the base has, above it),
   cycled, so lengths and content are realistic.  Running the real merges at 1M messages
   would take minutes of extractive summarizing and would not change what compile reads.

The result differs from a real store of that history only in the merge texts.  Stores are
cached under ``$COMPACTION_BENCH_STORES`` (default ``<tmp>/compaction-bench-stores``), keyed
by N, this builder's version and the store schema, so reruns are fast; a 1M store takes
about 2.5 GB.  Run ``python bench/make_store.py 10000 100000 1000000`` to build ahead.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from compaction import Compactor, Recipe, Store
from compaction import store as store_module
from compaction.pipeline import import_transcript

ROOT = Path(__file__).resolve().parent.parent
BASE_TRANSCRIPT = ROOT / "examples" / "pi__pi-mono__before-compaction.jsonl"
BUILDER_VERSION = 2
TAIL_TOKENS = (2000, 6000)


def cache_dir() -> Path:
    """Return the directory built stores are cached in (created if missing)."""
    default = Path(tempfile.gettempdir()) / "compaction-bench-stores"
    path = Path(os.environ.get("COMPACTION_BENCH_STORES", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cache_key() -> str:
    digest = hashlib.sha256()
    digest.update(f"v{BUILDER_VERSION}".encode())
    digest.update(store_module._SCHEMA.encode())
    digest.update(str(BASE_TRANSCRIPT.stat().st_size).encode())
    return digest.hexdigest()[:10]


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)


@dataclass(frozen=True)
class BuiltStore:
    """A built store: its file, message count, summaries per level and build time (s, 0 if cached)."""

    path: Path
    messages: int
    levels: dict[int, int]
    build_seconds: float


def base_store() -> Path:
    """Return the base store: the pi transcript imported and compressed (``Recipe()``), cached."""
    path = cache_dir() / f"base-{_cache_key()}.db"
    if path.exists():
        return path
    building = path.with_name(f"{path.name}.building-{os.getpid()}")
    _remove(building)
    with Store(building) as store:
        import_transcript(store, BASE_TRANSCRIPT)
        Compactor(store, Recipe()).tick()
    _to_single_file(building)
    os.replace(building, path)
    return path


def _to_single_file(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = DELETE")
    db.close()


def _l1_ranges(db: sqlite3.Connection, schema: str) -> list[tuple[int, int]]:
    rows = db.execute(f"SELECT start_seq, end_seq FROM {schema}.summaries WHERE level = 1 ORDER BY start_seq")
    return [(int(s), int(e)) for s, e in rows]


def _copy_range(db: sqlite3.Connection, lo: int, hi: int, offset: int, tag: str, *, summaries: bool) -> None:
    """Copy base messages ``[lo, hi)`` (and their counts, and level-1 summaries) to ``offset``."""
    shift = offset - lo
    args = {"lo": lo, "hi": hi, "shift": shift, "tag": tag}
    db.execute(
        "INSERT INTO main.messages"
        " (conversation_id, seq, role, content, source_id, meta, import_key, tool_uses, tool_results, images)"
        " SELECT conversation_id, seq + :shift, role, content, source_id, meta, import_key || ':' || :tag,"
        " tool_uses, tool_results, images"
        " FROM base.messages WHERE seq >= :lo AND seq < :hi ORDER BY seq",
        args,
    )
    db.execute(
        "INSERT INTO main.token_counts (conversation_id, seq, encoding, text_tokens)"
        " SELECT conversation_id, seq + :shift, encoding,"
        " text_tokens FROM base.token_counts WHERE seq >= :lo AND seq < :hi",
        args,
    )
    if summaries:
        db.execute(
            "INSERT INTO main.summaries (conversation_id, level, start_seq, end_seq, text, provenance, created_at)"
            " SELECT conversation_id, 1, start_seq + :shift, end_seq + :shift, text, provenance, created_at"
            " FROM base.summaries WHERE level = 1 AND start_seq >= :lo AND end_seq <= :hi ORDER BY start_seq",
            args,
        )


def _build_levels(db: sqlite3.Connection, fanout: int) -> None:
    """Merge the contiguous chain of each level in groups of ``fanout``, as the Compactor does."""
    base_texts: dict[int, list[str]] = {}
    rows = db.execute("SELECT level, text FROM base.summaries WHERE level > 1 ORDER BY level, start_seq")
    for level, text in rows:
        base_texts.setdefault(int(level), []).append(text)
    top = max(base_texts, default=1)
    if top < 2:
        raise RuntimeError("the base store has no merges to take merge texts from")
    level = 1
    while True:
        rows = db.execute(
            "SELECT id, start_seq, end_seq, conversation_id FROM main.summaries WHERE level = ? ORDER BY start_seq",
            (level,),
        ).fetchall()
        chain = []
        position = 0
        for row in rows:
            if row[1] == position:
                chain.append(row)
                position = row[2]
        groups = [chain[i : i + fanout] for i in range(0, len(chain) - fanout + 1, fanout)]
        if not groups:
            return
        texts = itertools.cycle(base_texts[min(level + 1, top)])
        now = time.time()
        db.executemany(
            "INSERT INTO main.summaries (conversation_id, level, start_seq, end_seq, text, provenance, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    group[0][3],
                    level + 1,
                    group[0][1],
                    group[-1][2],
                    next(texts),
                    json.dumps(
                        {"children": [g[0] for g in group], "kind": "merge", "summarizer": "bench-synthetic"},
                        separators=(",", ":"),
                        sort_keys=True,
                    ),
                    now,
                )
                for group in groups
            ],
        )
        level += 1


def build_store(n: int, *, rebuild: bool = False) -> BuiltStore:
    """Return a store of about ``n`` messages (exact to within one chunk), building it if not cached.

    Raises:
        RuntimeError: the base store is too small for ``n`` or has no merges.
    """
    path = cache_dir() / f"store-{n}-{_cache_key()}.db"
    started = time.perf_counter()
    built_now = False
    if rebuild:
        _remove(path)
    if not path.exists():
        _build(n, path)
        built_now = True
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        count = int(db.execute("SELECT MAX(seq) + 1 FROM messages").fetchone()[0])
        rows = db.execute("SELECT level, COUNT(*) FROM summaries GROUP BY level")
        levels = {int(lv): int(c) for lv, c in rows}
    finally:
        db.close()
    return BuiltStore(path, count, levels, time.perf_counter() - started if built_now else 0.0)


def _build(n: int, path: Path) -> None:
    base = base_store()
    building = path.with_name(f"{path.name}.building-{os.getpid()}")
    _remove(building)
    Store(building).close()  # the schema, exactly as the library creates it
    db = sqlite3.connect(building, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -1000000")
        db.execute("ATTACH DATABASE ? AS base", (f"file:{base}?mode=ro",))
        ranges = _l1_ranges(db, "base")
        unit = ranges[-1][1]  # the base's level-1 frontier P
        counts = dict(db.execute("SELECT seq, text_tokens FROM base.token_counts"))
        sized = [(r, sum(counts[seq] for seq in range(*r))) for r in ranges]
        tail = next((r for r, tokens in reversed(sized) if TAIL_TOKENS[0] <= tokens <= TAIL_TOKENS[1]), None)
        if tail is None:
            raise RuntimeError(f"no base chunk of {TAIL_TOKENS[0]}-{TAIL_TOKENS[1]} tokens for the live tail")
        body = n - (tail[1] - tail[0])
        copies, rest = divmod(body, unit)
        if copies < 1:
            raise RuntimeError(f"{n} messages is less than one copy of the base ({unit} messages)")
        partial = max((end for _, end in ranges if end <= rest), default=0)
        db.execute("BEGIN")
        db.execute("INSERT OR IGNORE INTO main.conversations SELECT * FROM base.conversations")
        db.execute("INSERT OR IGNORE INTO main.blobs SELECT * FROM base.blobs")
        offset = 0
        for copy in range(copies):
            _copy_range(db, 0, unit, offset, str(copy), summaries=True)
            offset += unit
        if partial:
            _copy_range(db, 0, partial, offset, str(copies), summaries=True)
            offset += partial
        _copy_range(db, tail[0], tail[1], offset, "tail", summaries=False)
        _build_levels(db, Recipe().merge_fanout)
        db.execute("COMMIT")
        db.execute("DETACH DATABASE base")
        db.execute("PRAGMA journal_mode = DELETE")
    finally:
        db.close()
    Store(building).close()  # opens as the library does (WAL), proving the store is valid
    _to_single_file(building)
    os.replace(building, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="+", type=int, help="message counts to build (e.g. 10000 1000000)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    print(f"cache: {cache_dir()} (free {shutil.disk_usage(cache_dir()).free / 1e9:.1f} GB)")
    for n in args.sizes:
        built = build_store(n, rebuild=args.rebuild)
        size = built.path.stat().st_size / 1e6
        print(f"{n:>9d}: {built.messages} messages, levels {built.levels}, {size:.0f} MB, "
              f"built in {built.build_seconds:.1f} s -> {built.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
