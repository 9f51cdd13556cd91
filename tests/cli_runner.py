"""The ``compaction`` command under click's test runner, its stdout and stderr apart (tests)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from compaction.cli import main


def runner() -> CliRunner:
    """A ``CliRunner`` keeping stderr apart from stdout (click < 8.2 needs ``mix_stderr=False``;
    8.2 and later always keep them apart and no longer take the argument)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()


def cli(*args: str | Path) -> Result:
    """Run ``compaction ARGS...`` (each argument made a ``str``) and return click's result."""
    return runner().invoke(main, [str(a) for a in args])
