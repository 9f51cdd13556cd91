"""An ``--out`` path that cannot be written fails in one line naming it, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from compaction.cli import main


def _transcript(tmp_path: Path) -> Path:
    path = tmp_path / "chat.json"
    path.write_text(
        json.dumps([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    )
    return path


def test_run_out_to_a_missing_directory_fails_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "request.json"
    result = CliRunner().invoke(
        main, ["run", str(_transcript(tmp_path)), "--budget", "4000", "--out", str(out)]
    )
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert lines[-1] == f"compaction: error: cannot write --out {out}: No such file or directory"
    assert "Traceback" not in result.output


def test_compile_out_to_a_missing_directory_fails_in_one_line(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    runner = CliRunner()
    imported = runner.invoke(main, ["import", str(_transcript(tmp_path)), "--store", str(store)])
    assert imported.exit_code == 0, imported.output
    out = tmp_path / "missing" / "request.json"
    result = runner.invoke(main, ["compile", "--store", str(store), "--budget", "4000", "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"compaction: error: cannot write --out {out}: No such file or directory"
    )
    assert not out.exists()
