"""``compaction fuzz``: it passes on the engine, finds a planted defect, and saves a case that reproduces it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import compaction.wire
from compaction import Recipe, load_recipe
from compaction.cli import main
from compaction.formats import load_transcript
from compaction.fuzz import INVARIANTS, InvariantBroken, recipe_toml, replay_case, run_fuzz
from compaction.images import ImageSite, find_image_sites


def _skip_nested_images(blocks: Sequence[dict[str, Any]]) -> list[ImageSite]:
    """A planted defect: a gate whose image walk misses images nested in tool results."""
    return [site for block in blocks if block.get("type") != "tool_result" for site in find_image_sites([block])]


def test_fuzz_passes_on_the_engine_and_checks_every_invariant() -> None:
    report = run_fuzz(None, examples=60, seed=7)
    assert report.failure is None
    assert report.cases == 60
    assert set(report.checked) == set(INVARIANTS)
    assert report.checked["budget"] == report.checked["store untouched"] == 60
    assert 0 < report.over_budget < 60
    assert report.checked["determinism"] == 60 - report.over_budget


def test_fuzz_finds_a_gate_that_skips_nested_images_and_saves_a_reproducer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction.wire, "find_image_sites", _skip_nested_images)
    report = run_fuzz(Recipe(budget_tokens=6000), examples=200, seed=1, out=tmp_path)
    failure = report.failure
    assert failure is not None and failure.saved is not None
    assert failure.invariant in ("engine error", "crash", "wire caps", "placeholders only")
    # shrunk: a minimal history, with an image inside a tool result
    assert len(failure.case.messages) <= 4
    nested = [
        b for m in failure.case.messages for b in m.content
        if b.get("type") == "tool_result" and "image" in json.dumps(b.get("content"))
    ]
    assert nested
    saved = failure.saved
    assert sorted(p.name for p in saved.iterdir()) == ["case.json", "recipe.toml", "transcript.json"]
    assert load_recipe(saved / "recipe.toml") == failure.case.recipe
    # the saved case reproduces the defect, and holds once the defect is gone
    with pytest.raises(InvariantBroken) as caught:
        replay_case(saved)
    assert caught.value.invariant == failure.invariant
    monkeypatch.undo()
    assert "coverage" in replay_case(saved).checked


def test_fuzz_command_reports_counts_and_exits_1_on_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["fuzz", "--examples", "30", "--seed", "2", "--json", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["cases"] == 30 and data["failure"] is None and list(data["checked"]) == list(INVARIANTS)
    recipe = tmp_path / "mine.toml"
    recipe.write_text("budget_tokens = 4000\nvision = false\n", "utf-8")
    result = runner.invoke(main, ["fuzz", "--examples", "20", "--recipe", str(recipe)])
    assert result.exit_code == 0
    assert result.output.startswith("20 cases run (seed 0) in ")
    assert "placeholders only" in result.output and result.output.rstrip().endswith("no invariant broken")
    monkeypatch.setattr(compaction.wire, "find_image_sites", _skip_nested_images)
    roomy = tmp_path / "roomy.toml"
    roomy.write_text("budget_tokens = 6000\n", "utf-8")
    result = runner.invoke(
        main, ["fuzz", "--examples", "200", "--seed", "1", "--recipe", str(roomy), "--out", str(tmp_path / "found")]
    )
    assert result.exit_code == 1
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("compaction: fuzz: ") and "minimal case written to" in line
    saved = line.rsplit("minimal case written to ", 1)[1]
    result = runner.invoke(main, ["fuzz", "--replay", saved])
    assert result.exit_code == 1 and "still fails" in result.output
    monkeypatch.undo()
    result = runner.invoke(main, ["fuzz", "--replay", saved])
    assert result.exit_code == 0 and "every invariant held" in result.output


def test_recipe_toml_round_trips(tmp_path: Path) -> None:
    recipe = Recipe(budget_tokens=1234, vision=False, never_mask=("Read", 'we"ird'), summary_focus="the 'plan'")
    path = tmp_path / "r.toml"
    path.write_text(recipe_toml(recipe), "utf-8")
    assert load_recipe(path).to_dict() == recipe.to_dict()


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["fuzz", "--examples", "0"])
    assert result.exit_code == 2 and "Invalid value for '--examples'" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text("budget_tokenz = 5\n", "utf-8")
    result = runner.invoke(main, ["fuzz", "--recipe", str(bad)])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "budget_tokenz" in result.output


SMALL = Path(__file__).resolve().parent.parent / "examples" / "swe-agent__marshmallow-1867__function-calling.traj"


def test_fuzz_seconds_on_a_shipped_transcript_holds(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["fuzz", "--seconds", "2", "--transcript", str(SMALL), "--json", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["source"] == "transcripts" and data["failure"] is None and data["cases"] > 0
    assert data["checked"]["budget"] == data["checked"]["store untouched"] == data["cases"]
    assert data["checked"]["determinism"] == data["cases"] - data["over_budget"]
    assert list(tmp_path.iterdir()) == []


def test_fuzz_transcript_mutations_find_the_planted_defect_and_save_a_reproducer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction.wire, "find_image_sites", _skip_nested_images)
    runner = CliRunner()
    result = runner.invoke(
        main, ["fuzz", "--seconds", "3", "--seed", "1", "--transcript", str(SMALL), "--out", str(tmp_path)]
    )
    assert result.exit_code == 1, result.output
    assert "cases run (mutations of 1 transcript, seed 1)" in result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("compaction: fuzz: ") and "minimal case written to" in line
    saved = Path(line.rsplit("minimal case written to ", 1)[1])
    assert sorted(p.name for p in saved.iterdir()) == ["case.json", "recipe.toml", "transcript.json"]
    meta = json.loads((saved / "case.json").read_text("utf-8"))
    assert meta["origin"][0] == str(SMALL) and meta["origin"][1].startswith("messages ")
    assert any("nested image" in step for step in meta["origin"][2:])
    transcript = json.loads((saved / "transcript.json").read_text("utf-8"))
    nested = [
        b for m in transcript["messages"] for b in m["content"]
        if b.get("type") == "tool_result" and "image" in json.dumps(b.get("content"))
    ]
    assert nested and len(transcript["messages"]) <= 41
    # the transcript's system prompt is kept in front of the window
    system = load_transcript(SMALL, lenient=True).messages[0]
    assert system.role == "system" and transcript["messages"][0]["content"] == list(system.content)
    with pytest.raises(InvariantBroken) as caught:
        replay_case(saved)
    assert caught.value.invariant == meta["invariant"]
    monkeypatch.undo()
    assert "budget" in replay_case(saved).checked
