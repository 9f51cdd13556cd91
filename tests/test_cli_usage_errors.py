"""Usage errors exit 2 with one clear line, as the README says; a library error exits 1.

A fresh user found ``compaction run FILE`` without ``--budget`` exiting 1: the missing budget
was found by the library (``compile.require_budget``, an ``OverBudget``) after the transcript
had been imported.  Each command that compiles a request now checks for a budget before any
work (``cli._require_budget``) and stops with click's usage error.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from conftest import CASES

from compaction.cli import main

TINY = CASES / "tool-pair-at-window-edge.json"

#: Commands that compile a request: a token budget is required, from --budget or the recipe.
BUDGET_REQUIRED = {"run", "compile", "inspect", "eval", "replay"}
#: Commands whose --budget is optional (without it they do something else, documented in --help).
BUDGET_OPTIONAL = {"compress", "serve", "bench", "fleet compress"}
#: Commands that do their work with no option given (a benchmark, a fuzz run).
RUN_WITHOUT_OPTIONS = {"bench", "fuzz"}


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()


def _leaf_commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Return every command under ``group`` by its full name (``"fleet compress"``)."""
    out: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        full = f"{prefix}{name}"
        if isinstance(command, click.Group):
            out.update(_leaf_commands(command, f"{full} "))
        else:
            out[full] = command
    return out


def _error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "s.db"
    result = _runner().invoke(main, ["import", str(TINY), "--store", str(store)])
    assert result.exit_code == 0, result.stderr
    return store


def _without_budget(command: str, tmp_path: Path) -> list[str]:
    """Return the arguments that run ``command`` fully but for its budget."""
    if command in ("run", "eval", "replay"):
        return [command, str(TINY)] + (["--store", str(tmp_path / "new.db")] if command == "run" else [])
    if command == "compile":
        return [command, "--store", str(_store(tmp_path))]
    return [command, "--store", str(_store(tmp_path)), "--json"]  # inspect


def test_every_command_with_a_budget_option_is_classified() -> None:
    # a new command with --budget must say whether it needs one (and get the check below)
    with_budget = {
        name
        for name, command in _leaf_commands(main).items()
        if any("--budget" in getattr(p, "opts", []) for p in command.params)
    }
    assert with_budget == BUDGET_REQUIRED | BUDGET_OPTIONAL


@pytest.mark.parametrize("command", sorted(BUDGET_REQUIRED))
def test_a_missing_budget_is_a_usage_error(command: str, tmp_path: Path) -> None:
    result = _runner().invoke(main, _without_budget(command, tmp_path), prog_name="compaction")
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert _error_lines(result) == [
        "Error: a token budget is required: give --budget N, or budget_tokens in the --recipe file"
    ]
    assert f"compaction {command} " in result.stderr  # click's usage line names the command
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "new.db").exists()  # checked before any work: run created no store


@pytest.mark.parametrize("command", sorted(BUDGET_REQUIRED))
def test_a_budget_in_the_recipe_is_enough(command: str, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("budget_tokens = 4000\n", encoding="utf-8")
    args = [*_without_budget(command, tmp_path), "--recipe", str(recipe)]
    if command == "eval":
        args.append("--json")
    result = _runner().invoke(main, args)
    assert result.exit_code == 0, result.stderr


def test_a_library_error_still_exits_1(tmp_path: Path) -> None:
    result = _runner().invoke(main, ["compile", "--store", str(_store(tmp_path)), "--budget", "5"])
    assert result.exit_code == 1, result.stderr
    assert result.stderr.startswith("compaction: error: ") and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", sorted(set(_leaf_commands(main)) - RUN_WITHOUT_OPTIONS))
def test_every_command_given_nothing_is_a_usage_error_of_one_line(command: str) -> None:
    # each needs an argument or an option (a store, a transcript, an upstream): click's usage
    # error (exit 2) or one of ours (click.UsageError), never a library error or a traceback
    result = _runner().invoke(main, command.split())
    assert result.exit_code == 2, (command, result.exit_code, result.stderr)
    assert len(_error_lines(result)) == 1, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["compress", "fleet compress"])
def test_keep_tail_tokens_beside_a_budget_is_a_usage_error(command: str, tmp_path: Path) -> None:
    # --keep-tail-tokens applies only without --budget: given with it, it was silently ignored
    store = _store(tmp_path)
    args = [*command.split(), "--store", str(store), "--budget", "4000", "--keep-tail-tokens", "300"]
    result = _runner().invoke(main, args)
    assert result.exit_code == 2, result.stderr
    assert _error_lines(result) == [
        "Error: --keep-tail-tokens applies only without --budget (with --budget, compress summarizes what "
        "a request of that many tokens needs); give one of them"
    ]
    for alone in (["--budget", "4000"], ["--keep-tail-tokens", "300"]):  # either one alone is taken
        taken = _runner().invoke(main, [*command.split(), "--store", str(store), *alone, "--json"])
        assert taken.exit_code == 0, taken.stderr
