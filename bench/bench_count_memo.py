"""Benchmark: counting a large text twice in one process, the memo's second pass.

A memo that is cleared when full starts the second pass of a text with more distinct pieces
than it holds empty; a memo of two generations keeps the pieces in use.  Texts: the files of
``examples/`` joined (6 MB; 124k distinct pieces of at most ``MAX_MEMO_PIECE`` characters) and a
prefix of them holding about 70k distinct pieces (just over the 65,536 of the old memo).

Run ``pytest bench/bench_count_memo.py --benchmark-only -q -s``: it prints, per text and
implementation, the first and second pass in ms, their ratio, and tiktoken's time in the same
run (``x tiktoken`` is tiktoken's time over ours), for the compiled counter.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import pytest

from compaction.tokens.encodings import get_encoding

ROOT = Path(__file__).resolve().parent.parent
ENCODING = "o200k_base"
ROWS: list[str] = []


def _texts() -> dict[str, str]:
    whole = "".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((ROOT / "examples").rglob("*"))
        if p.is_file()
    )
    counter = importlib.import_module("compaction.tokens._count_c").PieceCounter(ENCODING, memo_size=0)
    seen: set[str] = set()
    end = 0
    for piece in counter.pieces(whole):
        end += len(piece)
        if len(piece) <= 4096:
            seen.add(piece)
        if len(seen) >= 70_000:
            break
    return {"examples, 70k distinct pieces": whole[:end], "examples, 124k distinct pieces": whole}


def two_passes(implementation: str, text: str, memo_size: int | None = None) -> tuple[float, float, int]:
    """Return (first pass s, second pass s, count) with a fresh counter of ``implementation``."""
    module = importlib.import_module(f"compaction.tokens._count_{implementation}")
    counter = module.PieceCounter(ENCODING) if memo_size is None else module.PieceCounter(ENCODING, memo_size)
    start = time.perf_counter()
    first = counter.count(text)
    middle = time.perf_counter()
    second = counter.count(text)
    end = time.perf_counter()
    assert first == second
    return middle - start, end - middle, first


TEXTS = ("examples, 70k distinct pieces", "examples, 124k distinct pieces")
_CACHE: dict[str, str] = {}


@pytest.mark.parametrize("name", TEXTS)
def test_memo_second_pass(benchmark, name: str) -> None:  # type: ignore[no-untyped-def]
    if not _CACHE:
        _CACHE.update(_texts())
    text = _CACHE[name]
    encode = get_encoding(ENCODING).encode_ordinary
    start = time.perf_counter()
    expected = len(encode(text))
    reference = time.perf_counter() - start
    first, second, count = benchmark.pedantic(two_passes, args=("c", text), rounds=1, iterations=1)
    assert count == expected
    ROWS.append(
        f"{name:32} first {first * 1e3:6.0f} ms ({reference / first:5.1f}x tiktoken)"
        f"  second {second * 1e3:6.0f} ms ({reference / second:5.1f}x tiktoken)  tiktoken {reference * 1e3:5.0f} ms"
    )


def test_print_table(benchmark) -> None:  # type: ignore[no-untyped-def]
    benchmark(lambda: None)
    print("\n" + "\n".join(ROWS))
