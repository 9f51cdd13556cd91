"""``compaction bench``: every method counts the same corpus, exact methods agree with tiktoken, errors are one line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from compaction.bench import run_bench, transcript_texts
from compaction.cli import main
from compaction.tokens.encodings import get_encoding

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SMALL = EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"


def test_methods_count_the_same_corpus_and_exact_ones_equal_tiktoken() -> None:
    report = run_bench([SMALL], budget=4000, compile_runs=2)
    texts = transcript_texts(SMALL)
    exact = sum(len(get_encoding("o200k_base").encode_ordinary(t)) for t in texts)
    assert report.texts == len(texts) and report.bytes == sum(len(t.encode("utf-8")) for t in texts)
    by_name = {m.method: m for m in report.methods}
    assert list(by_name) == ["tiktoken", "fast (cold memo)", "fast (warm memo)", "estimate"]
    for name in ("tiktoken", "fast (cold memo)", "fast (warm memo)"):
        assert by_name[name].tokens == exact and by_name[name].error == 0
    assert abs(by_name["estimate"].error) < 0.10
    assert by_name["tiktoken"].speedup == 1.0
    for m in report.methods:
        assert m.seconds > 0 and abs(m.mb_per_s - report.bytes / 1e6 / m.seconds) < 1e-6
    assert report.compile_file == str(SMALL) and report.compile_ms is not None and report.compile_ms > 0


def test_bench_command_prints_a_table_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["bench", "--transcript", str(SMALL), "--budget", "4000", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [m["method"] for m in data["methods"]] == ["tiktoken", "fast (cold memo)", "fast (warm memo)", "estimate"]
    result = runner.invoke(main, ["bench", str(SMALL), "--budget", "4000"])
    assert result.exit_code == 0
    assert "vs tiktoken" in result.output and "compile at 4,000 tokens: " in result.output
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes, not a transcript\n", "utf-8")
    result = runner.invoke(main, ["bench", str(notes)])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and result.output.startswith("compaction: error: ")
    result = runner.invoke(main, ["bench", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "does not exist" in result.output
