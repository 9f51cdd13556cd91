"""The batch counting API and `compaction count`: fast equals exact, estimate is close."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from compaction.cli import main
from compaction.errors import CompactionError, EncodingDataMissing
from compaction.tokens.batch import count_batch
from compaction.tokens.encodings import get_encoding

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _pieces() -> list[str]:
    text = (EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj").read_text(encoding="utf-8")
    return [text[i : i + 1500] for i in range(0, 60000, 1500)] + ["", "héllo wörld", "日本語のテキスト", "1234567"]


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_fast_equals_exact_equals_tiktoken(encoding: str) -> None:
    texts = _pieces()
    exact = count_batch(texts, encoding, "exact")
    fast = count_batch(texts, encoding, "fast")
    reference = [len(get_encoding(encoding).encode_ordinary(t)) for t in texts]
    assert exact.dtype == np.int64 and exact.shape == (len(texts),)
    assert exact.tolist() == reference
    assert fast.tolist() == reference


def test_estimate_is_close_on_agent_text() -> None:
    texts = _pieces()[:40]
    exact = count_batch(texts, method="exact").astype(float)
    estimate = count_batch(texts, method="estimate").astype(float)
    error = np.abs(estimate - exact) / exact
    assert float(error.mean()) < 0.10  # per piece; the estimator's fitted error is about 5% on agent text
    assert abs(estimate.sum() - exact.sum()) / exact.sum() < 0.05


def test_bad_method_and_encoding_are_typed_errors() -> None:
    with pytest.raises(CompactionError, match="method must be one of exact, fast, estimate"):
        count_batch(["x"], method="guess")
    with pytest.raises(EncodingDataMissing, match="unknown encoding 'p50k_base'"):
        count_batch(["x"], "p50k_base", "fast")
    assert count_batch([], method="exact").tolist() == []


def test_count_cli_methods_agree(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("The quick brown fox.\n" * 50, encoding="utf-8")
    b = tmp_path / "b.txt"
    b.write_text(json.dumps({"k": list(range(100))}), encoding="utf-8")
    runner = CliRunner()
    results = {}
    for method in ("exact", "fast", "estimate"):
        out = runner.invoke(main, ["count", str(a), str(b), "--method", method, "--json"])
        assert out.exit_code == 0, out.output
        results[method] = json.loads(out.stdout)
    expected = [len(get_encoding().encode_ordinary(p.read_text())) for p in (a, b)]
    assert [f["tokens"] for f in results["exact"]["files"]] == expected
    assert results["fast"]["files"] == results["exact"]["files"]
    assert results["exact"]["total"] == sum(expected)
    assert abs(results["estimate"]["total"] - sum(expected)) / sum(expected) < 0.15
