"""Session 16: the README's command table names every option of every command.

A fresh user found run's and compile's ``--encoding`` and replay's ``--strategy``,
``--max-turns``, ``--model`` and ``--tools`` missing from the table: each row now names every
option its command takes, and this test fails when a command gains one the row does not name.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from compaction.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"


def leaf_commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Return every command of ``group`` that is no group, by its full name (``fleet compress``)."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= leaf_commands(command, f"{prefix}{name} ")
        else:
            found[f"{prefix}{name}"] = command
    return found


def table_rows(text: str) -> dict[str, str]:
    """Return the first cell of each row of the README's command table, by the command it names."""
    section = text.split("## Command line", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `compaction "):
            continue
        cell = re.match(r"\| (.*?[^\\]) \| ", line)  # up to the first "|" not escaped as "\|"
        words = re.match(r"\| `compaction ((?:[a-z][a-z-]* ?)+)", line)
        assert cell and words, line
        rows[" ".join(words.group(1).split())] = cell.group(1)
    return rows


def long_options(command: click.Command) -> list[str]:
    """Return the ``--long`` names of ``command``'s options, ``--help`` aside (every command has it)."""
    names = []
    for param in command.params:
        if isinstance(param, click.Option):
            names += [o for o in [*param.opts, *param.secondary_opts] if o.startswith("--") and o != "--help"]
    return names


def test_every_option_of_every_command_is_named_in_its_readme_row() -> None:
    rows = table_rows(README.read_text(encoding="utf-8"))
    commands = leaf_commands(main)
    assert set(commands) <= set(rows), sorted(set(commands) - set(rows))
    missing = {
        name: [o for o in long_options(command) if not re.search(rf"{re.escape(o)}(?![a-z-])", rows[name])]
        for name, command in sorted(commands.items())
    }
    assert {name: options for name, options in missing.items() if options} == {}


def test_the_check_sees_an_option_the_row_leaves_out() -> None:
    """The check itself: a row without ``--encoding`` is caught, ``--encoding-x`` does not stand for it."""
    command = click.Command(
        "run", params=[click.Option(["--encoding"]), click.Option(["--lenient"], is_flag=True)]
    )
    row = "`compaction run TRANSCRIPT [--encoding-x E] [--lenient]`"
    assert [o for o in long_options(command) if not re.search(rf"{re.escape(o)}(?![a-z-])", row)] == [
        "--encoding"
    ]
