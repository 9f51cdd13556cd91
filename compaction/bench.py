"""Token counting throughput and compile latency on real transcripts: what ``compaction bench`` measures.

Every message of each transcript becomes one text (:func:`compaction.inspect.message_text`:
text, tool calls and results, thinking).  Each counting method counts the same texts in the
same process, one transcript (corpus) at a time: ``tiktoken`` (its ``encode_ordinary`` on the
offline encoding, the reference, always run) and the methods chosen of
:func:`compaction.tokens.batch.count_batch`: ``exact`` (tiktoken's batch encoder),
``fast`` (the exact fast path, first pass with a cold piece memo, then warm) and ``estimate``
(the one-pass estimator, with its error against the exact total).  Per-call time is measured
on short strings (10 to 200 characters cut from the same texts), one call per string, with
each method's single-text counter.  Compile latency is the time of
:func:`compaction.compile.compile_request` on the largest transcript after it is imported
and compressed for the budget (median of a few runs).  :func:`plot_bench` draws throughput
per method and corpus (matplotlib: ``pip install 'compaction[plot]'``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import CompactionError, InvalidArgument

__all__ = [
    "METHODS",
    "SHORT_LENGTHS",
    "MethodResult",
    "CorpusResult",
    "CallResult",
    "BenchReport",
    "shipped_transcripts",
    "transcript_texts",
    "short_strings",
    "run_bench",
    "plot_bench",
]

#: Where the repository keeps its shipped transcripts.
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: The counting methods ``--method`` chooses from (tiktoken, the reference, always runs).
METHODS = ("exact", "fast", "estimate")

#: The lengths (characters) the short strings of the per-call measurement are cut to.
SHORT_LENGTHS = (10, 20, 50, 100, 200)

PLOT_MISSING = "compaction bench --plot needs matplotlib: pip install 'compaction[plot]'"


@dataclass(frozen=True)
class MethodResult:
    """One counting method's run over the corpus.

    Attributes:
        method: ``tiktoken``, ``fast (cold memo)``, ``fast (warm memo)`` or ``estimate``.
        tokens: the corpus total it counted (tokens).
        seconds: wall time (seconds).
        mb_per_s: UTF-8 megabytes (10^6 bytes) per second.
        tokens_per_s: tokens per second (of the exact total).
        speedup: its throughput over tiktoken's (x).
        error: ``tokens`` against the exact total, as a fraction (0 for exact methods).
    """

    method: str
    tokens: int
    seconds: float
    mb_per_s: float
    tokens_per_s: float
    speedup: float
    error: float


@dataclass(frozen=True)
class CorpusResult:
    """One method's run over one transcript's texts.

    Attributes:
        file: the transcript.
        method: as in :class:`MethodResult`.
        bytes: UTF-8 bytes of its texts (bytes).
        tokens: the total it counted (tokens).
        seconds: wall time (seconds).
        mb_per_s: megabytes (10^6 bytes) per second.
    """

    file: str
    method: str
    bytes: int
    tokens: int
    seconds: float
    mb_per_s: float


@dataclass(frozen=True)
class CallResult:
    """One method counting short strings one call at a time.

    Attributes:
        method: ``tiktoken``, ``exact``, ``fast`` (warm memo) or ``estimate``.
        calls: strings counted, one call each.
        tokens: their total (tokens).
        us_per_call: mean wall time of one call (microseconds), best of the repeats.
        speedup: tiktoken's time per call over this one's (x).
    """

    method: str
    calls: int
    tokens: int
    us_per_call: float
    speedup: float


@dataclass(frozen=True)
class BenchReport:
    """What :func:`run_bench` measured."""

    files: tuple[str, ...]
    texts: int
    bytes: int
    encoding: str
    methods: tuple[MethodResult, ...]
    corpora: tuple[CorpusResult, ...]
    calls: tuple[CallResult, ...]
    short_chars: int
    compile_file: str | None
    compile_budget: int
    compile_ms: float | None
    compress_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (``compaction bench --json``)."""
        return asdict(self)


def shipped_transcripts() -> list[Path]:
    """Return the transcripts shipped in the repository's ``examples/`` (empty when installed without it)."""
    if not EXAMPLES.is_dir():
        return []
    return sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md")


def transcript_texts(path: str | Path) -> list[str]:
    """Return one text per message of the transcript at ``path`` (malformed lines skipped).

    Raises:
        InvalidTranscript: the file is not a transcript in a known format.
        OSError: it cannot be read.
    """
    from .formats import load_transcript
    from .inspect import message_text

    return [message_text(m.content) for m in load_transcript(path, lenient=True).messages]


def _timed(function: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def short_strings(texts: Sequence[str], limit: int = 2000) -> list[str]:
    """Return up to ``limit`` short strings cut from ``texts``, lengths cycling through :data:`SHORT_LENGTHS`.

    Each text gives its consecutive cuts (10, 20, 50, 100, 200 characters, then 10 again...)
    until it runs out, so the strings are real message text of every length in the cycle.
    """
    out: list[str] = []
    for text in texts:
        position = 0
        for turn in range(len(text)):
            length = SHORT_LENGTHS[turn % len(SHORT_LENGTHS)]
            if position + length > len(text) or len(out) >= limit:
                break
            out.append(text[position : position + length])
            position += length
        if len(out) >= limit:
            break
    return out


def _methods(methods: Sequence[str] | str) -> tuple[str, ...]:
    names = [m.strip() for m in methods.split(",")] if isinstance(methods, str) else [str(m) for m in methods]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise InvalidArgument(f"methods must be some of {', '.join(METHODS)}; found {', '.join(names) or 'none'}")
    return tuple(m for m in METHODS if m in names)


def _clear_memo(encoding: str) -> None:
    """Empty the fast path's shared piece memo of ``encoding`` (its "cold" run starts from nothing)."""
    import sys

    from .tokens.fast import count_tokens

    module = sys.modules.get(count_tokens.__module__)
    counter = getattr(module, "_counter", None)
    if counter is not None:
        counter(encoding).clear()


def _per_call(strings: list[str], encoding: str, methods: tuple[str, ...], repeats: int) -> tuple[CallResult, ...]:
    from .tokens.encodings import get_encoding
    from .tokens.estimate import estimate_tokens
    from .tokens.fast import count_tokens

    reference = get_encoding(encoding)
    counters: dict[str, Any] = {
        "tiktoken": lambda t: len(reference.encode_ordinary(t)),
        "exact": lambda t: len(reference.encode_ordinary(t)),
        "fast": lambda t: count_tokens(t, encoding),
        "estimate": lambda t: estimate_tokens(t, encoding),
    }
    rows: list[tuple[str, int, float]] = []
    for name in ("tiktoken", *methods):
        count = counters[name]
        best = float("inf")
        tokens = 0
        for _ in range(repeats):
            started = time.perf_counter()
            tokens = sum(count(t) for t in strings)
            best = min(best, time.perf_counter() - started)
        rows.append((name, tokens, best / len(strings) * 1e6 if strings else 0.0))
    reference_us = rows[0][2]
    return tuple(
        CallResult(name, len(strings), tokens, us, reference_us / us if us else 0.0) for name, tokens, us in rows
    )


def run_bench(
    files: Sequence[str | Path] = (),
    *,
    encoding: str = "o200k_base",
    methods: Sequence[str] | str = METHODS,
    max_bytes: int = 8_000_000,
    budget: int = 16_000,
    compile_runs: int = 5,
    short_calls: int = 2000,
    call_repeats: int = 3,
) -> BenchReport:
    """Measure counting throughput of each method, per-call time on short strings, and compile latency.

    Args:
        files: transcripts (default: the shipped ones, :func:`shipped_transcripts`).
        encoding: ``o200k_base`` or ``cl100k_base``.
        methods: which of :data:`METHODS` to run (a list, or a comma-separated string);
            tiktoken always runs, as the reference.
        max_bytes: stop adding texts past this many UTF-8 bytes (bytes), to bound the run.
        budget: the budget compile latency is measured at (tokens).
        compile_runs: compiles timed; the median is reported (0: no compile).
        short_calls: short strings counted one call each (:func:`short_strings`; 0: none).
        call_repeats: passes over the short strings; the fastest is reported.

    Returns:
        The :class:`BenchReport`.

    Raises:
        CompactionError: no transcript given and none shipped.
        InvalidArgument: an unknown method; ``max_bytes``, ``budget`` or ``call_repeats``
            below 1, ``compile_runs`` or ``short_calls`` below 0.
        InvalidTranscript, EncodingDataMissing, OSError: a file or the encoding cannot be read.
    """
    chosen = _methods(methods)
    for name, value, low in (
        ("max_bytes", max_bytes, 1), ("budget", budget, 1), ("compile_runs", compile_runs, 0),
        ("short_calls", short_calls, 0), ("call_repeats", call_repeats, 1),
    ):
        if value < low:
            raise InvalidArgument(f"{name} must be at least {low}; found {value}")
    paths = [Path(f) for f in files] or shipped_transcripts()
    if not paths:
        raise CompactionError("no transcripts to measure: pass FILE arguments (no shipped examples/ next to the package)")
    groups: list[tuple[Path, list[str], int]] = []
    size = 0
    per_file: dict[Path, int] = {}
    for path in paths:
        loaded = transcript_texts(path)
        per_file[path] = sum(len(t.encode("utf-8", "surrogatepass")) for t in loaded)
        kept: list[str] = []
        kept_bytes = 0
        for text in loaded:
            if size >= max_bytes:
                break
            kept.append(text)
            n = len(text.encode("utf-8", "surrogatepass"))
            size += n
            kept_bytes += n
        if kept:
            groups.append((path, kept, kept_bytes))
    from .tokens.batch import count_batch
    from .tokens.encodings import get_encoding

    reference = get_encoding(encoding)
    runs: list[tuple[str, Any]] = [("tiktoken", lambda texts: sum(len(reference.encode_ordinary(t)) for t in texts))]
    for method in chosen:
        batch = lambda texts, m=method: int(count_batch(texts, encoding, m).sum())  # noqa: E731
        if method == "fast":
            _clear_memo(encoding)
            runs += [("fast (cold memo)", batch), ("fast (warm memo)", batch)]
        else:
            runs.append((method, batch))
    corpora: list[CorpusResult] = []
    totals: list[tuple[str, int, float]] = []
    for label, count in runs:
        tokens_sum, seconds_sum = 0, 0.0
        for path, texts, nbytes in groups:
            tokens, seconds = _timed(lambda c=count, t=texts: c(t))
            corpora.append(CorpusResult(str(path), label, nbytes, tokens, seconds, nbytes / 1e6 / seconds if seconds else 0.0))
            tokens_sum += tokens
            seconds_sum += seconds
        totals.append((label, tokens_sum, seconds_sum))
    exact, tiktoken_s = totals[0][1], totals[0][2]
    results = tuple(
        MethodResult(
            label,
            tokens,
            seconds,
            size / 1e6 / seconds if seconds else 0.0,
            exact / seconds if seconds else 0.0,
            tiktoken_s / seconds if seconds else 0.0,
            (tokens - exact) / exact if exact else 0.0,
        )
        for label, tokens, seconds in totals
    )
    strings = short_strings([t for _p, texts, _n in groups for t in texts], short_calls) if short_calls else []
    calls = _per_call(strings, encoding, chosen, call_repeats) if strings else ()
    compile_file: str | None = None
    compile_ms: float | None = None
    compress_s: float | None = None
    if compile_runs:
        compile_file, compile_ms, compress_s = _compile_latency(
            max(per_file, key=lambda p: per_file[p]), budget, compile_runs, encoding
        )
    return BenchReport(
        tuple(str(p) for p in paths), sum(len(t) for _p, t, _n in groups), size, encoding, results, tuple(corpora),
        calls, sum(len(s) for s in strings), compile_file, budget, compile_ms, compress_s,
    )


def plot_bench(report: BenchReport, path: str | Path) -> Path:
    """Draw throughput (MB/s, log scale) per method and corpus as a PNG at ``path``.

    One group of bars per transcript and one for the whole run, one bar per method.

    Returns:
        The path written.

    Raises:
        CompactionError: matplotlib is not installed (``pip install 'compaction[plot]'``).
        OSError: the file cannot be written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CompactionError(PLOT_MISSING) from None
    labels = [m.method for m in report.methods]
    files = list(dict.fromkeys(c.file for c in report.corpora))
    names = [Path(f).name[:28] for f in files] + ["all"]
    rate = {(c.file, c.method): c.mb_per_s for c in report.corpora}
    width = 0.8 / max(1, len(labels))
    figure, axes = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2), 4.8))
    try:
        for i, label in enumerate(labels):
            values = [rate.get((f, label), 0.0) for f in files] + [report.methods[i].mb_per_s]
            axes.bar([x + (i - (len(labels) - 1) / 2) * width for x in range(len(names))], values, width, label=label)
        axes.set_yscale("log")
        axes.set_ylabel("MB/s (log scale)")
        axes.set_title(f"token counting throughput per method and corpus ({report.encoding})")
        axes.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(path, format="png", dpi=100)
    finally:
        plt.close(figure)
    return Path(path)


def _compile_latency(path: Path, budget: int, runs: int, encoding: str) -> tuple[str, float, float]:
    """Return the file, the median compile time (ms) and the compression time (s) at ``budget``."""
    from .compile import compile_request
    from .pipeline import compress_and_compile, import_transcript
    from .recipe import Recipe
    from .store import Store

    recipe = Recipe(budget_tokens=budget, encoding=encoding)
    with Store(":memory:") as store:
        import_transcript(store, path, lenient=True)
        _compiled, compress_s = _timed(lambda: compress_and_compile(store, recipe, mode="replan"))
        times = []
        for _ in range(runs):
            _request, seconds = _timed(lambda: compile_request(store, recipe))
            times.append(seconds)
    return str(path), statistics.median(times) * 1000, compress_s
