"""Benchmarks: tiktoken ``encode_ordinary`` vs the exact fast counter (compiled, pure Python) and
the estimator, on the corpora of ``bench/conftest.py``.

Run ``pytest bench/bench_count.py --benchmark-only -q``; the last test prints a table of
MB/s (UTF-8 bytes per second), tokens/s, the ratio to tiktoken in the same run and the number of
mismatches against tiktoken (exact counters: must be 0; the estimator: the texts it got wrong).
Throughput is taken from the fastest round (the machine is shared; means are noisy).
``long`` is one 2M-character text per corpus; ``messages`` are its message-sized pieces
(200-4000 characters), counted one call each, with a warm memo (the first round warms it, as a
long-running agent's history does) and as many rounds as fit in ``MESSAGES_BUDGET_S``; ``cold``
is the same with a fresh memo for every round (first-time text: what importing a new history
costs), ``COLD_ROUNDS`` rounds for every exact counter.  Peers are measured in the same run through their fastest per-text counting call:
fastokens ``len(Tokenizer.encode_ordinary(text))`` (measured against ``encode_batch_flat`` on the
whole batch: no faster on four corpora of six, and it counts a batch, not a text), with a fresh
``Tokenizer`` for every ``cold`` round (it keeps a word cache, as the memo does; building one
takes seconds and is not timed), and toktok-rs ``batch_count([text], threads=1)`` and quicktok
``len(encode(text))``, which keep no cache across calls that we know of, so their ``cold`` rounds
are the same calls.  Our counter's tables are the process's, not the counter's: the rank table
(built by the first count) and the backtracking tables of long misses (built once 1 MB of them
has been counted in the process, about 0.1 s) are built before the rounds timed here, as
fastokens builds its tables in its untimed constructor.  ``test_zz_summary`` prints, per corpus, first-time and warm ratios to
tiktoken side by side with the mismatches.  On a shared machine add
``--benchmark-timer=time.process_time`` (CPU time: other jobs' load stretches wall time, and a
counter's worker threads are counted) and ``-k "messages or zz_summary"`` for that table alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import tempfile
import time
from collections.abc import Callable

import pytest
from conftest import CORPORA

from compaction.tokens.encodings import get_encoding

ENCODING = "o200k_base"
#: Peer exact counters measured in the same run where installed (`pip install -e '.[bench]'`):
#: fastokens, toktok-rs (module ``toktok``) and quicktok-v1 (module ``quicktok``).
PEERS = tuple(
    name for name in ("fastokens", "toktok", "quicktok") if importlib.util.find_spec(name) is not None
)
IMPLEMENTATIONS = ("tiktoken", "c", "py", "estimate", *PEERS)
#: The exact counters of the first-time (``cold``) rounds.
COLD_IMPLEMENTATIONS = ("c", "py", *PEERS)
RESULTS: dict[tuple[str, str, str], dict[str, float]] = {}
_RANK_PATH: list[str] = []


def _fastokens_tokenizer():  # noqa: ANN202
    """A new fastokens tokenizer of ``ENCODING`` (its own, empty word cache)."""
    import fastokens

    from compaction.tokens.encodings import rank_file

    if not _RANK_PATH:
        with tempfile.NamedTemporaryFile(suffix=".tiktoken", delete=False) as handle:
            handle.write(rank_file(ENCODING))
        _RANK_PATH.append(handle.name)
    return fastokens.Tokenizer.from_tiktoken(_RANK_PATH[0], encoding=ENCODING)


@pytest.fixture(scope="module", autouse=True)
def _process_tables() -> None:
    """Build the compiled counter's process-wide tables before any round is timed: the rank
    table and the backtracking tables of long misses (which a process builds by itself once it
    has counted 1 MB of them), as fastokens builds its tables in its untimed constructor."""
    from compaction.tokens import _count_c

    _count_c._backtrack_splits(ENCODING)


def _counter(implementation: str) -> Callable[[str], int]:
    """The per-text counting call of ``implementation``, on a new counter where it has one."""
    if implementation == "tiktoken":
        encode = get_encoding(ENCODING).encode_ordinary
        return lambda text: len(encode(text))
    if implementation == "fastokens":
        tokenizer = _fastokens_tokenizer()
        tokenizer.encode_ordinary("warm-up: its first call builds its tables")
        return lambda text: len(tokenizer.encode_ordinary(text))
    if implementation == "toktok":
        import toktok

        return lambda text: int(toktok.batch_count([text], ENCODING, threads=1)[0])
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
#: Rounds of every exact counter in the first-time (``cold``) test, the same for each: a fastokens
#: round needs a new tokenizer (about a second to build, untimed), so this stays small; 9, not
#: 5, since on a machine whose other jobs share the core a counter's five rounds can all be slowed
#: (json's best of 5 moved from 3.9 to 6.5 ms between two runs of one build).
COLD_ROUNDS = 9


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


@pytest.mark.parametrize("implementation", COLD_IMPLEMENTATIONS)
@pytest.mark.parametrize("corpus", CORPORA)
def test_messages_cold(benchmark, corpora, corpus: str, implementation: str) -> None:
    """First-time text: every round counts the messages with a new counter (built untimed)."""
    messages = corpora[corpus]["messages"][:300]

    def fresh() -> tuple[tuple[Callable[[str], int]], dict[str, object]]:
        return (_counter(implementation),), {}

    def count_all(count: Callable[[str], int]) -> int:
        return sum(count(text) for text in messages)

    # The same number of rounds for every exact counter (the fastest round is reported: a
    # counter given more rounds would get more chances at a quiet moment of a shared machine)
    rounds = 2 if implementation == "py" else COLD_ROUNDS
    benchmark.pedantic(count_all, setup=fresh, rounds=rounds, iterations=1)
    if implementation in ("c", "py"):
        module = importlib.import_module(f"compaction.tokens._count_{implementation}")
        count = module.PieceCounter(ENCODING, memo_size=0).count
    else:
        count = _counter(implementation)
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
    lines += _first_time_table()
    with capsys.disabled():
        print("\n".join(lines))


def _first_time_table() -> list[str]:
    """Per corpus: each exact counter's first-time and warm ratio to tiktoken, mismatches."""
    lines = [
        "",
        "messages, x tiktoken encode_ordinary in this run: first-time (new counter every round) "
        "and warm (mismatches: first-time counter, warm counter)",
        f"{'corpus':8s} {'impl':10s} {'first-time':>10s} {'warm':>8s} {'mismatch':>9s}",
    ]
    for corpus in CORPORA:
        reference = RESULTS.get((corpus, "messages", "tiktoken"), {}).get("mb_per_s")
        if not reference:
            continue
        for implementation in COLD_IMPLEMENTATIONS:
            cold = RESULTS.get((corpus, "cold", implementation))
            warm = RESULTS.get((corpus, "messages", implementation))
            if cold is None and warm is None:
                continue
            first = cold["mb_per_s"] / reference if cold else float("nan")
            again = warm["mb_per_s"] / reference if warm else float("nan")
            wrong = [int(v["mismatches"]) for v in (cold, warm) if v is not None]
            lines.append(
                f"{corpus:8s} {implementation:10s} {first:10.2f} {again:8.2f} {'/'.join(map(str, wrong)):>9s}"
            )
    return lines
