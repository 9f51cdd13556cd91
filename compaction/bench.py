"""Token counting throughput and compile latency on real transcripts: what ``compaction bench`` measures.

Every message of each transcript becomes one text (:func:`compaction.inspect.message_text`:
text, tool calls and results, thinking).  Each counting method counts the same texts in the
same process: ``tiktoken`` (its ``encode_ordinary`` on the offline encoding, the reference),
``fast`` (the exact fast path, first pass with a cold piece memo, then warm) and ``estimate``
(the one-pass estimator, with its error against the exact total).  Compile latency is the
time of :func:`compaction.compile.compile_request` on the largest transcript after it is
imported and compressed for the budget (median of a few runs).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import CompactionError, InvalidArgument

__all__ = ["MethodResult", "BenchReport", "shipped_transcripts", "transcript_texts", "run_bench"]

#: Where the repository keeps its shipped transcripts.
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


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
class BenchReport:
    """What :func:`run_bench` measured."""

    files: tuple[str, ...]
    texts: int
    bytes: int
    encoding: str
    methods: tuple[MethodResult, ...]
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


def run_bench(
    files: Sequence[str | Path] = (),
    *,
    encoding: str = "o200k_base",
    max_bytes: int = 8_000_000,
    budget: int = 16_000,
    compile_runs: int = 5,
) -> BenchReport:
    """Measure counting throughput of each method and compile latency.

    Args:
        files: transcripts (default: the shipped ones, :func:`shipped_transcripts`).
        encoding: ``o200k_base`` or ``cl100k_base``.
        max_bytes: stop adding texts past this many UTF-8 bytes (bytes), to bound the run.
        budget: the budget compile latency is measured at (tokens).
        compile_runs: compiles timed; the median is reported.

    Returns:
        The :class:`BenchReport`.

    Raises:
        CompactionError: no transcript given and none shipped.
        InvalidArgument: ``max_bytes``, ``budget`` or ``compile_runs`` below 1.
        InvalidTranscript, EncodingDataMissing, OSError: a file or the encoding cannot be read.
    """
    for name, value in (("max_bytes", max_bytes), ("budget", budget), ("compile_runs", compile_runs)):
        if value < 1:
            raise InvalidArgument(f"{name} must be at least 1; found {value}")
    paths = [Path(f) for f in files] or shipped_transcripts()
    if not paths:
        raise CompactionError("no transcripts to measure: pass FILE arguments (no shipped examples/ next to the package)")
    texts: list[str] = []
    size = 0
    per_file: dict[Path, int] = {}
    for path in paths:
        loaded = transcript_texts(path)
        per_file[path] = sum(len(t.encode("utf-8", "surrogatepass")) for t in loaded)
        for text in loaded:
            if size >= max_bytes:
                break
            texts.append(text)
            size += len(text.encode("utf-8", "surrogatepass"))
    from .tokens.batch import count_batch
    from .tokens.encodings import get_encoding

    reference = get_encoding(encoding)
    exact, tiktoken_s = _timed(lambda: sum(len(reference.encode_ordinary(t)) for t in texts))
    runs = [("tiktoken", exact, tiktoken_s)]
    for label, method in (("fast (cold memo)", "fast"), ("fast (warm memo)", "fast"), ("estimate", "estimate")):
        counts, seconds = _timed(lambda m=method: count_batch(texts, encoding, m))
        runs.append((label, int(counts.sum()), seconds))
    methods = tuple(
        MethodResult(
            label,
            tokens,
            seconds,
            size / 1e6 / seconds if seconds else 0.0,
            exact / seconds if seconds else 0.0,
            tiktoken_s / seconds if seconds else 0.0,
            (tokens - exact) / exact if exact else 0.0,
        )
        for label, tokens, seconds in runs
    )
    compile_file, compile_ms, compress_s = _compile_latency(max(per_file, key=lambda p: per_file[p]), budget, compile_runs, encoding)
    return BenchReport(
        tuple(str(p) for p in paths), len(texts), size, encoding, methods, compile_file, budget, compile_ms, compress_s
    )


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
