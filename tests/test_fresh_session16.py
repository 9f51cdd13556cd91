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


def _lines(path: Path, *texts: str) -> Path:
    roles = ("user", "assistant")
    path.write_text(
        "".join(f'{{"role":"{roles[i % 2]}","content":"{text}"}}\n' for i, text in enumerate(texts)), "utf-8"
    )
    return path


def test_run_into_a_store_of_another_transcript_warns_that_it_appends(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    first = _lines(tmp_path / "a.jsonl", "fix the parser", "done")
    other = _lines(tmp_path / "b.jsonl", "write a poem", "roses")
    grown = _lines(tmp_path / "a2.jsonl", "fix the parser", "done", "now the tests", "green")
    quiet = runner().invoke(main, ["run", str(first), "--budget", "1000", "--store", store])
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr
    mixed = runner().invoke(main, ["run", str(other), "--budget", "1000", "--store", store])
    assert mixed.exit_code == 0
    assert (
        f"warning: none of the 2 messages of {other} was in the store's conversation, which held 2 messages: "
        "they were appended after those, and the request compiles both; to keep another transcript apart "
        "give --conversation NAME (compaction import puts each transcript in its own)"
    ) in mixed.stderr.replace("\n", " ")
    # the same session grown: its first messages are there, so only the new ones are appended, quietly
    before = runner().invoke(main, ["run", str(first), "--budget", "1000", "--store", str(tmp_path / "t.db")])
    grew = runner().invoke(main, ["run", str(grown), "--budget", "1000", "--store", str(tmp_path / "t.db")])
    again = runner().invoke(main, ["run", str(grown), "--budget", "1000", "--store", str(tmp_path / "t.db")])
    assert before.exit_code == grew.exit_code == again.exit_code == 0
    assert "warning" not in before.stderr + grew.stderr + again.stderr
