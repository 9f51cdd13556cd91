"""Benchmarks: tiktoken ``encode_ordinary`` vs the exact fast counter (compiled, pure Python) and
the estimator, on the corpora of ``bench/conftest.py``.

Run ``pytest bench/bench_count.py --benchmark-only -q``; the last test prints a table of
MB/s (UTF-8 bytes per second), tokens/s, the ratio to tiktoken in the same run and the number of
mismatches against tiktoken (exact counters: must be 0; the estimator: the texts it got wrong).
Throughput is taken from the fastest round (the machine is shared; means are noisy).
``long`` is one 2M-character text per corpus; ``messages`` are its message-sized pieces
(200-4000 characters), counted one call each, with a warm memo (the first round warms it, as a
long-running agent's history does) and as many rounds as fit in ``MESSAGES_BUDGET_S``; ``cold``
is the same with a fresh memo for every round.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Callable

import pytest
from conftest import CORPORA

from compaction.tokens.encodings import get_encoding

ENCODING = "o200k_base"
#: Peer exact counters measured in the same run where installed (`pip install -e '.[bench]'`):
#: toktok-rs (module ``toktok``) and quicktok-v1 (module ``quicktok``).
PEERS = tuple(name for name in ("toktok", "quicktok") if importlib.util.find_spec(name) is not None)
IMPLEMENTATIONS = ("tiktoken", "c", "py", "estimate", *PEERS)
RESULTS: dict[tuple[str, str, str], dict[str, float]] = {}


def _counter(implementation: str, fresh: bool = False) -> Callable[[str], int]:
    if implementation == "tiktoken":
        encode = get_encoding(ENCODING).encode_ordinary
        return lambda text: len(encode(text))
    if implementation == "toktok":
        import toktok

        return lambda text: int(toktok.batch_count([text], ENCODING)[0])
    if implementation == "quicktok":
        import quicktok

        peer = quicktok.get_encoding(ENCODING)
        return lambda text: len(peer.encode(text))
    if implementation == "estimate":
        from compaction.tokens.estimate import estimate_tokens

        return lambda text: estimate_tokens(text, ENCODING)
    module = importlib.import_module(f"compaction.tokens._count_{implementation}")
    return module.PieceCounter(ENCODING).count


#: Wall time each implementation's rounds of a messages test get: the fastest round is the
#: throughput, so a fast counter needs more than ten rounds to have one undisturbed on a busy
#: machine (the same budget for every implementation; at least ten rounds, at most 300).
MESSAGES_BUDGET_S = 1.0


def _rounds(run: Callable[[], object]) -> int:
    """Warm up with one round (the memo), then give ``run`` ``MESSAGES_BUDGET_S`` of rounds."""
    run()
    start = time.perf_counter()
    run()
    return max(10, min(300, int(MESSAGES_BUDGET_S / max(time.perf_counter() - start, 1e-9))))


def _record(
    corpus: str,
    shape: str,
    implementation: str,
    texts: list[str],
    seconds: float,
    count: Callable[[str], int],
) -> dict[str, float]:
    encode = get_encoding(ENCODING).encode_ordinary
    expected = [len(encode(t)) for t in texts]
    got = [count(t) for t in texts]
    values = {
        "mb_per_s": sum(len(t.encode("utf-8")) for t in texts) / 1e6 / seconds,
        "tokens_per_s": sum(expected) / seconds,
        "mismatches": float(sum(g != e for g, e in zip(got, expected, strict=True))),
    }
    RESULTS[(corpus, shape, implementation)] = values
    return values


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("corpus", CORPORA)
def test_long_text(benchmark, corpora, corpus: str, implementation: str) -> None:
    text = corpora[corpus]["long"]
    count = _counter(implementation)
    rounds = 2 if implementation == "py" else 5
    benchmark.pedantic(count, args=(text,), rounds=rounds, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(
        _record(corpus, "long", implementation, [text], benchmark.stats.stats.min, count)
    )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("corpus", CORPORA)
def test_messages(benchmark, corpora, corpus: str, implementation: str) -> None:
    messages = corpora[corpus]["messages"][:300]
    count = _counter(implementation)

    def count_all() -> int:
        return sum(count(text) for text in messages)

    if implementation == "py":
        benchmark.pedantic(count_all, rounds=2, iterations=1, warmup_rounds=1)
    else:
        benchmark.pedantic(count_all, rounds=_rounds(count_all), iterations=1)
    benchmark.extra_info.update(
        _record(corpus, "messages", implementation, messages, benchmark.stats.stats.min, count)
    )


@pytest.mark.parametrize("implementation", ["c", "py"])
@pytest.mark.parametrize("corpus", CORPORA)
def test_messages_cold(benchmark, corpora, corpus: str, implementation: str) -> None:
    messages = corpora[corpus]["messages"][:300]
    module = importlib.import_module(f"compaction.tokens._count_{implementation}")

    def count_all() -> int:
        count = module.PieceCounter(ENCODING).count
        return sum(count(text) for text in messages)

    benchmark.pedantic(count_all, rounds=2 if implementation == "py" else 5, iterations=1)
    count = module.PieceCounter(ENCODING, memo_size=0).count
    benchmark.extra_info.update(
        _record(corpus, "cold", implementation, messages, benchmark.stats.stats.min, count)
    )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_short_string(benchmark, implementation: str) -> None:
    text = "Hello, world!"
    count = _counter(implementation)
    benchmark(count, text)
    values = _record("short", "call", implementation, [text], benchmark.stats.stats.min, count)
    values["us_per_call"] = benchmark.stats.stats.min * 1e6
    benchmark.extra_info.update(values)


def test_zz_summary(benchmark, capsys: pytest.CaptureFixture[str]) -> None:
    """Print the table (the last test of the file; it uses ``benchmark`` so that
    ``--benchmark-only`` runs it)."""
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    if not RESULTS:
        pytest.skip("no benchmark ran")
    lines = [
        "",
        f"exact token counting, {ENCODING}: throughput, ratio to tiktoken encode_ordinary, mismatches "
        f"({time.strftime('%Y-%m-%d %H:%M')})",
        f"{'corpus':8s} {'shape':9s} {'impl':9s} {'MB/s':>9s} {'Mtok/s':>8s} {'x tiktoken':>10s} "
        f"{'us/call':>8s} {'mismatch':>8s}",
    ]
    for (corpus, shape, implementation), values in sorted(RESULTS.items()):
        shape_ref = "messages" if shape == "cold" else shape
        reference = RESULTS.get((corpus, shape_ref, "tiktoken"), {}).get("mb_per_s")
        ratio = values["mb_per_s"] / reference if reference else float("nan")
        per_call = values.get("us_per_call", float("nan"))
        lines.append(
            f"{corpus:8s} {shape:9s} {implementation:9s} {values['mb_per_s']:9.1f} "
            f"{values['tokens_per_s'] / 1e6:8.2f} {ratio:10.2f} {per_call:8.3f} {int(values['mismatches']):8d}"
        )
    with capsys.disabled():
        print("\n".join(lines))
