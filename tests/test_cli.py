"""The command line: a thin shell whose errors are one clear line on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import runner
from conftest import CASES, EXAMPLES
from strategies import check_tool_pairing, payload_json

from compaction import __version__
from compaction.cli import main
from compaction.recipe import Recipe

PI = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"
TINY = CASES / "tool-pair-at-window-edge.json"


def test_run_writes_the_request_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "request.json"
    result = runner().invoke(main, ["run", str(PI), "--budget", "16000", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    body = payload_json(out.read_bytes())
    assert body["model"] == "gpt-4o" and body["messages"]
    check_tool_pairing(body, "openai")
    table = result.stdout
    for row in ("compaction run", "tokens before", "tokens after", "budget 16,000", "live window", "L1 summaries", "openai ->"):
        assert row in table, row


def test_run_json_report(tmp_path: Path) -> None:
    out = tmp_path / "request.json"
    result = runner().invoke(main, ["run", str(PI), "--budget", "16000", "--to", "anthropic", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == "pi" and report["request_format"] == "anthropic"
    assert report["budget"] == 16000 and report["tokens_after"] <= 16000 < report["tokens_before"]
    assert report["messages"] > 900 and report["skipped"] == 0
    assert report["out"] == str(out) and report["summaries"]["1"] > 0
    assert set(report) >= {"summaries_shown", "live_window_messages", "images_shown", "images_replaced", "seconds"}
    body = payload_json(out.read_bytes())
    assert body["model"] == "claude-sonnet-4-5"
    check_tool_pairing(body, "anthropic")


def test_run_vision_false_and_max_live_images(tmp_path: Path) -> None:
    tars = EXAMPLES / "agent-tars__browser__event-stream-with-many-images.json"
    result = runner().invoke(main, ["run", str(tars), "--budget", "100000", "--vision", "false", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["images_shown"] == 0 and report["images_replaced"] == 7
    result = runner().invoke(main, ["run", str(tars), "--budget", "100000", "--max-live-images", "2", "--json"])
    assert json.loads(result.stdout)["images_shown"] == 2


def test_import_twice_adds_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    first = runner().invoke(main, ["import", str(PI), "--store", str(store), "--json"])
    assert first.exit_code == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["added"] == report["messages"] > 0 and report["format"] == "pi"
    second = runner().invoke(main, ["import", str(PI), "--store", str(store), "--json"])
    again = json.loads(second.stdout)
    assert again["added"] == 0 and again["store_messages"] == report["store_messages"]


def test_compile_over_budget_is_one_line_naming_the_budget(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    assert runner().invoke(main, ["import", str(TINY), "--store", str(store), "--format", "anthropic"]).exit_code == 0
    result = runner().invoke(main, ["compile", "--store", str(store), "--budget", "20"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("compaction: error:") and "budget of 20 tokens" in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_compile_writes_the_request(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    out = tmp_path / "r.json"
    runner().invoke(main, ["import", str(TINY), "--store", str(store), "--format", "anthropic"])
    result = runner().invoke(main, ["compile", "--store", str(store), "--budget", "4000", "--to", "anthropic", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    body = payload_json(out.read_bytes())
    assert body["messages"][0]["role"] == "user"
    check_tool_pairing(body, "anthropic")
    assert "tokens of 4,000" in result.stderr


def test_unknown_recipe_key_fails_naming_the_key(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("budget_tokens = 4000\nvison = false\n", "utf-8")
    result = runner().invoke(main, ["run", str(TINY), "--recipe", str(recipe), "--format", "anthropic"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "'vison'" in line and "unknown" in line and "vision" in line and str(recipe) in line


def test_stats_and_count(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    runner().invoke(main, ["import", str(TINY), "--store", str(store), "--format", "anthropic"])
    stats = runner().invoke(main, ["stats", "--store", str(store), "--json"])
    assert stats.exit_code == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert data["messages"] == 5 and data["raw_tokens"] > 0 and data["image_blobs"] == 0
    note = tmp_path / "note.txt"
    note.write_text("hello world", "utf-8")
    counted = runner().invoke(main, ["count", str(note), "--json"])
    assert json.loads(counted.stdout)["files"][0]["tokens"] == 2


@pytest.mark.parametrize("flag", ["--version"])
def test_python_m_compaction_version(flag: str) -> None:
    done = subprocess.run([sys.executable, "-m", "compaction", flag], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert __version__ in done.stdout and "fast path c, estimator c" in done.stdout


def test_stats_counts_each_chunk_left_raw_once(tmp_path: Path) -> None:
    """Three failed attempts on one chunk, and one on a chunk summarized later: one chunk left raw."""
    from compaction import Message, Store

    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append([Message("user", ({"type": "text", "text": f"message {i}"},)) for i in range(8)])
        for _ in range(3):
            store.record_failure(1, 0, 4, "connection refused")
        store.record_failure(1, 4, 8, "timed out")
        store.add_summary(1, 4, 8, "Done:\n- later summarized", {"summarizer": "test"})
    result = runner().invoke(main, ["stats", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 (4 failed attempts)" in result.output


def test_a_tools_file_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    """Before: a RecursionError traceback from json.loads in the CLI."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 1000 + "]" * 1000, encoding="utf-8")
    transcript = EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"
    result = runner().invoke(main, ["run", str(transcript), "--budget", "8000", "--tools", str(deep)])
    assert result.exit_code == 1
    assert "deep.json: tool definitions nest too deeply" in result.output
    assert "Traceback" not in result.output


def test_compile_after_compress_keeps_the_events_frame(tmp_path: Path) -> None:
    """`compress --budget` then `compile --budget` ship the request compress reported."""
    lines = (EXAMPLES / "pi__pi-mono__before-compaction.jsonl").read_text("utf-8").splitlines(keepends=True)
    part = tmp_path / "part.jsonl"
    part.write_text("".join(lines[:400]), "utf-8")
    store = tmp_path / "s.db"
    assert runner().invoke(main, ["import", str(part), "--store", str(store)]).exit_code == 0
    compressed = runner().invoke(main, ["compress", "--store", str(store), "--budget", "16000", "--json"])
    assert compressed.exit_code == 0, compressed.output
    out = tmp_path / "request.json"
    compiled = runner().invoke(main, ["compile", "--store", str(store), "--budget", "16000", "--out", str(out)])
    assert compiled.exit_code == 0, compiled.output
    tokens = int(compiled.output.split("wrote ")[1].split(": ")[1].split(" tokens")[0].replace(",", ""))
    assert f'"tokens": {tokens}' in compressed.output or str(tokens) in compressed.output
    # the event's low-water request (the recipe's default low-water mark), not a re-planned one
    assert tokens <= int(16000 * Recipe().low_water_ratio)


def test_run_reports_unknown_blocks_shipped_and_warns_past_one_percent() -> None:
    """A block type no request format knows ships as its JSON in text: its share is said, loudly past 1%."""
    sample = Path(__file__).parent / "data" / "formats" / "openai-responses__agent-input-items.json"
    result = runner().invoke(main, ["run", str(sample), "--budget", "8000", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    shipped = report["unknown_blocks_shipped"]
    assert list(shipped) == ["web_search_call"] and shipped["web_search_call"]["count"] == 1
    tokens = shipped["web_search_call"]["tokens"]
    assert 0 < tokens < report["tokens_after"]
    assert tokens / report["tokens_after"] > 0.01
    assert "warning: blocks of types the OpenAI Chat Completions request format does not take ship as loud JSON text" in result.stderr
    clean = runner().invoke(main, ["run", str(EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"),
                                   "--budget", "8000", "--json"])
    assert clean.exit_code == 0 and json.loads(clean.stdout)["unknown_blocks_shipped"] == {}
    assert "warning" not in clean.stderr
