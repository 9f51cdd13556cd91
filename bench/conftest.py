"""Shared fixtures of the benchmarks: the corpora of scripts/fit_estimator.py, and a summary table."""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPORA = ("agent", "prose", "code", "json", "cjk", "base64")
LONG_TEXT_CHARS = 2_000_000

RESULTS: dict[tuple[str, str, str], dict[str, float]] = {}


def _fit_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("fit_estimator")
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="session")
def corpora() -> dict[str, dict[str, object]]:
    """Per corpus: ``messages`` (the held-out pieces, 200-4000 chars) and ``long`` (one text of them)."""
    fit = _fit_module()
    built = fit.build_corpora()
    out: dict[str, dict[str, object]] = {}
    for name in CORPORA:
        messages = built[name][1]
        joined = "\n".join(messages)
        rng = random.Random(1)
        while len(joined) < LONG_TEXT_CHARS:
            joined += "\n" + "\n".join(rng.sample(messages, len(messages)))
        out[name] = {"messages": messages, "long": joined[:LONG_TEXT_CHARS]}
    return out


def record(corpus: str, shape: str, implementation: str, **values: float) -> None:
    RESULTS[(corpus, shape, implementation)] = values


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if not RESULTS:
        return
    write = terminalreporter.write_line
    write("")
    write("token counting throughput (MB/s of UTF-8, tokens/s), ratio to tiktoken encode_ordinary, estimator error")
    write(f"{'corpus':8s} {'shape':9s} {'impl':9s} {'MB/s':>10s} {'Mtok/s':>8s} {'x tiktoken':>11s} {'MAPE %':>8s}"
          f" {'us/call':>8s}")
    for (corpus, shape, implementation), values in sorted(RESULTS.items()):
        reference = RESULTS.get((corpus, shape, "tiktoken"), {}).get("mb_per_s")
        ratio = values["mb_per_s"] / reference if reference else float("nan")
        error = values.get("mape", float("nan"))
        speed = values["mb_per_s"]
        tokens = values.get("tokens_per_s", float("nan")) / 1e6
        per_call = values.get("us_per_call", float("nan"))
        write(f"{corpus:8s} {shape:9s} {implementation:9s} {speed:10.1f} {tokens:8.2f} {ratio:11.2f} {error:8.2f}"
              f" {per_call:8.3f}")
