"""``compaction eval``'s header and its notes count the same messages: system ones included.

A fresh user found the header of an SWE-agent transcript saying 28 messages and the
truncation baseline "the newest 16 of 27 messages": the baselines counted the messages other
than system ones (which ride as the system text), the header every message.  Each note now
counts against the header's total and names the system messages it shows apart
(``eval_baselines.shown_note``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import EXAMPLES

from compaction import Recipe
from compaction.cli import main
from compaction.eval import evaluate

SWE = EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"
NEWEST = re.compile(r"the newest (\d+)(?: of (\d+))? messages(?: and the (\d+) system messages?)?")


def _session(path: Path, rounds: int, systems: int) -> Path:
    """Write an OpenAI Chat session: ``systems`` system messages, then ``rounds`` asks and answers."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a careful porting agent, rule {i}."} for i in range(systems)
    ]
    for i in range(rounds):
        words = " ".join(f"w{i}x{j}" for j in range(60))
        messages.append({"role": "user", "content": f"Port widget {i} to the new backend: {words}"})
        messages.append({"role": "assistant", "content": f"Ported widget {i}: {words}"})
    path.write_text(json.dumps(messages), encoding="utf-8")
    return path


@pytest.mark.parametrize("systems", [0, 1, 2])
@pytest.mark.parametrize("budget", [100_000, 1_500])
def test_every_note_counts_the_messages_the_header_counts(tmp_path: Path, systems: int, budget: int) -> None:
    report = evaluate(
        _session(tmp_path / "s.json", 12, systems), Recipe(budget_tokens=budget), format="openai"
    )
    assert report.messages == 24 + systems
    for name in ("engine", "truncation", "masking"):
        strategy = report.strategy(name)
        match = NEWEST.search(strategy.note)
        assert match, (name, strategy.note)
        newest, whole, shown_systems = match.groups()
        assert int(shown_systems or 0) == systems, strategy.note
        if whole is not None:
            assert int(whole) == report.messages, strategy.note
        if budget == 100_000:  # everything fits: every message is shown, counted as the header counts
            assert int(newest) + systems == report.messages, strategy.note


def test_the_swe_agent_notes_count_its_system_prompt() -> None:
    # 28 messages, one of them the system prompt: truncation said "the newest 16 of 27
    # messages" under a header of 28
    report = evaluate(SWE, Recipe(budget_tokens=4_000))
    assert report.messages == 28
    assert report.strategy("truncation").note == "the newest 16 of 28 messages and the 1 system message"
    assert report.strategy("masking").note.startswith(
        "the newest 27 of 28 messages and the 1 system message, "
    )


def test_the_cli_table_prints_the_same_counts() -> None:
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(main, ["eval", str(SWE), "--budget", "4000"], terminal_width=400)
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "28 messages" in out
    assert "truncation: the newest 16 of 28 messages and the 1 system message" in out
