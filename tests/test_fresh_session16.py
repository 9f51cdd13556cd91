"""Three of session 16's fresh-user findings, each one clear line.

* ``--encoding o200k`` blamed ``<replace>`` and the recipe key ``encoding``; it is a usage
  error naming the option, with the nearest encoding.
* A store in a directory that does not exist said only SQLite's "unable to open database file".
* ``python3 -m compaction`` with a Python that lacks the dependencies (the venv not activated)
  printed a traceback ending in ``ModuleNotFoundError``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli_runner import runner

from compaction.cli import main

ROOT = Path(__file__).resolve().parent.parent
PI = ROOT / "examples" / "pi__pi-mono__before-compaction.jsonl"


def _transcript(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text('{"role":"user","content":"hi"}\n{"role":"assistant","content":"yo"}\n', "utf-8")
    return path


def test_an_unknown_encoding_option_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    for command in ("run", "compile"):
        args = [command, str(_transcript(tmp_path)), "--budget", "100", "--encoding", "o200k"]
        if command == "compile":
            args = [command, "--store", str(tmp_path / "none.db"), "--budget", "100", "--encoding", "o200k"]
        result = runner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert (
            "Invalid value for '--encoding': unknown encoding 'o200k': expected o200k_base or cl100k_base, "
            "or hf:/path/to/tokenizer.json; did you mean 'o200k_base'?"
        ) in result.stderr
        assert "<replace>" not in result.stderr


def test_known_and_hf_encodings_pass_the_option_check(tmp_path: Path) -> None:
    result = runner().invoke(
        main, ["run", str(_transcript(tmp_path)), "--budget", "100", "--encoding", "cl100k_base"]
    )
    assert result.exit_code == 0, result.output
    missing = tmp_path / "no-such" / "tokenizer.json"
    result = runner().invoke(
        main, ["run", str(_transcript(tmp_path)), "--budget", "100", "--encoding", f"hf:{missing}"]
    )
    assert result.exit_code == 1 and f"cannot read the tokenizer file {missing}" in result.stderr


def test_a_store_in_a_missing_directory_says_so(tmp_path: Path) -> None:
    store = tmp_path / "missing" / "s.db"
    result = runner().invoke(main, ["import", str(_transcript(tmp_path)), "--store", str(store)])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"compaction: error: {store}: cannot open as a compaction store: its directory {store.parent} does not "
        "exist (unable to open database file); create it first, or name a store in one that does"
    ]


def test_python_m_compaction_without_its_dependencies_says_what_to_do() -> None:
    # -S: no site-packages, so click and the rest are missing, as with a Python the package
    # was not installed into; the repository root on the path gives the package itself
    done = subprocess.run(
        [sys.executable, "-S", "-m", "compaction", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("compaction: error: the package ") and "it needs is not installed for" in line
    assert line.endswith(
        "run it with the Python it was installed into (source .venv/bin/activate), or install it here: pip install -e ."
    )
