"""Benchmarks: tiktoken ``encode_ordinary`` vs the compiled and the pure-Python estimator.

Throughput is taken from the fastest round (the machine is shared; means are noisy).
Run ``pytest bench/bench_estimate.py --benchmark-only -q``; after pytest-benchmark's own table a
summary prints MB/s (UTF-8 bytes per second), tokens/s (tiktoken's count of the same text per
second), the ratio to tiktoken in the same run and the estimator's mean absolute % error on the
same texts.  ``long`` is one 2M-character text per
corpus; ``messages`` are its message-sized pieces (200-4000 characters) counted one call each.

``test_script`` adds one row per script and encoding (``cyrillic o200k`` ...): the estimator's mean
absolute % error against tiktoken on the held-out pieces of that script's corpus
(``tests/data/estimator/scripts-held-out.json.gz``, Django's message catalogues, written by
``scripts/fit_estimator.py``), with its speed and tiktoken's on the same pieces.
"""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path

import pytest
from conftest import CORPORA, record

from compaction.tokens.encodings import get_encoding

IMPLEMENTATIONS = ("tiktoken", "c", "py")
ENCODING = "o200k_base"


def _counter(implementation: str):
    if implementation == "tiktoken":
        encode = get_encoding(ENCODING).encode_ordinary
        return lambda text: len(encode(text))
    module = importlib.import_module(f"compaction.tokens._estimate_{implementation}")
    return lambda text: module.estimate_tokens(text, ENCODING)


def _mape(count, texts: list[str]) -> float:
    encode = get_encoding(ENCODING).encode_ordinary
    errors = []
    for text in texts:
        expected = len(encode(text))
        if expected:
            errors.append(abs(count(text) - expected) / expected)
    return 100.0 * sum(errors) / len(errors)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("corpus", CORPORA)
def test_long_text(benchmark, corpora, corpus: str, implementation: str) -> None:
    text = corpora[corpus]["long"]
    count = _counter(implementation)
    if implementation == "py":
        benchmark.pedantic(count, args=(text,), rounds=2, iterations=1)
    else:
        benchmark(count, text)
    mb = len(text.encode("utf-8")) / 1e6
    expected = len(get_encoding(ENCODING).encode_ordinary(text))
    values = {"mb_per_s": mb / benchmark.stats.stats.min, "tokens_per_s": expected / benchmark.stats.stats.min}
    if implementation != "tiktoken":
        values["mape"] = 100.0 * abs(count(text) - expected) / expected
    benchmark.extra_info.update(values)
    record(corpus, "long", implementation, **values)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("corpus", CORPORA)
def test_messages(benchmark, corpora, corpus: str, implementation: str) -> None:
    messages = corpora[corpus]["messages"][:300]
    count = _counter(implementation)

    def count_all() -> int:
        return sum(count(text) for text in messages)

    if implementation == "py":
        benchmark.pedantic(count_all, rounds=2, iterations=1)
    else:
        benchmark(count_all)
    mb = sum(len(text.encode("utf-8")) for text in messages) / 1e6
    tokens = sum(len(get_encoding(ENCODING).encode_ordinary(text)) for text in messages)
    values = {"mb_per_s": mb / benchmark.stats.stats.min, "tokens_per_s": tokens / benchmark.stats.stats.min}
    if implementation != "tiktoken":
        values["mape"] = _mape(count, messages)
    benchmark.extra_info.update(values)
    record(corpus, "messages", implementation, **values)


SHORT_TEXT = "Sure - I'll rerun the tests in tests/test_estimate.py now."


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_short_string(benchmark, implementation: str) -> None:
    """Per-call cost on one short string (a chat turn): the fixed overhead of a call."""
    count = _counter(implementation)
    benchmark(count, SHORT_TEXT)
    seconds = benchmark.stats.stats.min
    tokens = len(get_encoding(ENCODING).encode_ordinary(SHORT_TEXT))
    values = {"mb_per_s": len(SHORT_TEXT.encode("utf-8")) / 1e6 / seconds, "tokens_per_s": tokens / seconds,
              "us_per_call": seconds * 1e6}
    benchmark.extra_info.update(values)
    record("short", "one call", implementation, **values)


HELD_OUT_SCRIPTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "estimator" / "scripts-held-out.json.gz"
SCRIPT_PIECES: dict[str, list[str]] = json.loads(gzip.decompress(HELD_OUT_SCRIPTS.read_bytes()))["pieces"]


@pytest.mark.parametrize("implementation", ["tiktoken", "c"])
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("script", sorted(SCRIPT_PIECES))
def test_script(benchmark, script: str, encoding: str, implementation: str) -> None:
    """Error and speed of the estimator on one script's held-out pieces, per encoding."""
    pieces = SCRIPT_PIECES[script]
    encode = get_encoding(encoding).encode_ordinary
    if implementation == "tiktoken":
        count = lambda text: len(encode(text))  # noqa: E731
    else:
        module = importlib.import_module("compaction.tokens._estimate_c")
        count = lambda text: module.estimate_tokens(text, encoding)  # noqa: E731

    def count_all() -> int:
        return sum(count(text) for text in pieces)

    benchmark(count_all)
    mb = sum(len(text.encode("utf-8")) for text in pieces) / 1e6
    tokens = sum(len(encode(text)) for text in pieces)
    values = {"mb_per_s": mb / benchmark.stats.stats.min, "tokens_per_s": tokens / benchmark.stats.stats.min}
    if implementation != "tiktoken":
        errors = [abs(count(t) - len(encode(t))) / len(encode(t)) for t in pieces]
        values["mape"] = 100.0 * sum(errors) / len(errors)
    benchmark.extra_info.update(values)
    record(script, encoding.split("_")[0], implementation, **values)
