"""Every command of the ``compaction`` CLI has a row in the README's command table.

A fresh user found ``serve-stats`` missing from it; the house style says every command
appears in the README.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from compaction.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"


def _leaf_names(group: click.Group, prefix: str = "") -> set[str]:
    names: set[str] = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            names |= _leaf_names(command, f"{prefix}{name} ")
        else:
            names.add(f"{prefix}{name}")
    return names


def _table_commands(text: str) -> set[str]:
    """Return the commands named by the first cell of each row of the README's command table."""
    section = text.split("## Command line", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `compaction ")]
    names = set()
    for row in rows:
        words = re.match(r"\| `compaction ((?:[a-z][a-z-]* ?)+)", row)
        assert words, row
        names.add(" ".join(words.group(1).split()))
    return names


def test_every_command_has_a_row_in_the_readme_table() -> None:
    text = README.read_text(encoding="utf-8")
    table = _table_commands(text)
    assert "serve-stats" in table
    assert _leaf_names(main) <= table, sorted(_leaf_names(main) - table)
