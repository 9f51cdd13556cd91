"""``compaction bench``: every method counts the same corpus, exact methods agree with tiktoken, errors are one line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from compaction.bench import SHORT_LENGTHS, plot_bench, run_bench, short_strings, transcript_texts
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
    assert list(by_name) == ["tiktoken", "exact", "fast (cold memo)", "fast (warm memo)", "estimate"]
    for name in ("tiktoken", "exact", "fast (cold memo)", "fast (warm memo)"):
        assert by_name[name].tokens == exact and by_name[name].error == 0
    assert abs(by_name["estimate"].error) < 0.10
    assert by_name["tiktoken"].speedup == 1.0
    for m in report.methods:
        assert m.seconds > 0 and abs(m.mb_per_s - report.bytes / 1e6 / m.seconds) < 1e-6
    assert report.compile_file == str(SMALL) and report.compile_ms is not None and report.compile_ms > 0
    # one corpus here: its rows are the method totals
    assert [(c.file, c.method, c.tokens, c.bytes) for c in report.corpora] == [
        (str(SMALL), m.method, m.tokens, report.bytes) for m in report.methods
    ]
    # per call on short strings: exact methods agree with tiktoken string by string summed
    strings = short_strings(texts, 2000)
    assert report.short_chars == sum(map(len, strings))
    calls = {c.method: c for c in report.calls}
    assert list(calls) == ["tiktoken", "exact", "fast", "estimate"]
    short_exact = sum(len(get_encoding("o200k_base").encode_ordinary(t)) for t in strings)
    assert calls["tiktoken"].tokens == calls["exact"].tokens == calls["fast"].tokens == short_exact
    assert abs(calls["estimate"].tokens - short_exact) < 0.10 * short_exact
    assert all(c.calls == len(strings) and c.us_per_call > 0 for c in report.calls)
    assert calls["tiktoken"].speedup == 1.0


def test_short_strings_are_cuts_of_the_texts_10_to_200_characters() -> None:
    texts = ["a" * 25 + "b" * 400, "short", "x" * 35]
    strings = short_strings(texts, 100)
    assert [len(s) for s in strings] == [10, 20, 50, 100, 200, 10, 20, 10, 20]
    assert "".join(strings[:7]) == texts[0][:410] and strings[7:] == ["x" * 10, "x" * 20]
    assert short_strings(texts, 3) == strings[:3]
    assert {len(s) for s in short_strings(transcript_texts(SMALL), 500)} == set(SHORT_LENGTHS)


def test_method_chooses_the_rows_and_plot_writes_a_png(tmp_path: Path) -> None:
    report = run_bench([SMALL], methods="estimate,exact", compile_runs=0, short_calls=200)
    assert [m.method for m in report.methods] == ["tiktoken", "exact", "estimate"]
    assert [c.method for c in report.calls] == ["tiktoken", "exact", "estimate"]
    assert {c.method for c in report.corpora} == {"tiktoken", "exact", "estimate"}
    assert report.compile_ms is None
    png = plot_bench(report, tmp_path / "direct.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    runner = CliRunner()
    plot = tmp_path / "bench.png"
    result = runner.invoke(
        main, ["bench", str(SMALL), "--method", "fast", "--budget", "4000", "--plot", str(plot), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [m["method"] for m in data["methods"]] == ["tiktoken", "fast (cold memo)", "fast (warm memo)"]
    assert [c["method"] for c in data["calls"]] == ["tiktoken", "fast"]
    head = plot.read_bytes()
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 1000
    result = runner.invoke(main, ["bench", str(SMALL), "--method", "fast,slow"])
    assert result.exit_code == 2 and "slow is not one of exact, fast, estimate" in result.output


def test_bench_command_prints_a_table_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["bench", "--transcript", str(SMALL), "--budget", "4000", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [m["method"] for m in data["methods"]] == [
        "tiktoken", "exact", "fast (cold memo)", "fast (warm memo)", "estimate"
    ]
    result = runner.invoke(main, ["bench", str(SMALL), "--budget", "4000"])
    assert result.exit_code == 0
    assert "vs tiktoken" in result.output and "compile at 4,000 tokens: " in result.output
    assert "µs per call" in result.output
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes, not a transcript\n", "utf-8")
    result = runner.invoke(main, ["bench", str(notes)])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and result.output.startswith("compaction: error: ")
    result = runner.invoke(main, ["bench", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "does not exist" in result.output
