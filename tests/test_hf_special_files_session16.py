"""An ``hf:`` encoding naming a device, a pipe or an oversized file is refused in one line.

Found by session 16's attack: ``encoding = "hf:/dev/zero"`` in a recipe read /dev/zero until
memory ran out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compaction.tokens import hf
from compaction.tokens.hf import TokenizerFileError, load_tokenizer


def test_a_character_device_is_refused_before_it_is_read() -> None:
    with pytest.raises(TokenizerFileError) as raised:
        load_tokenizer("hf:/dev/zero")
    assert str(raised.value) == (
        "encoding 'hf:/dev/zero': the tokenizer file /dev/zero is a character device, not a regular file; "
        "name a tokenizer.json file"
    )


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)
    with pytest.raises(TokenizerFileError, match="is a pipe \\(FIFO\\), not a regular file"):
        load_tokenizer(f"hf:{fifo}")


def test_a_file_over_the_bound_is_refused_not_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf, "MAX_TOKENIZER_BYTES", 1000)
    big = tmp_path / "tokenizer.json"
    big.write_text('{"model": "' + "x" * 2000 + '"}', "utf-8")
    with pytest.raises(TokenizerFileError) as raised:
        load_tokenizer(f"hf:{big}")
    assert f"the tokenizer file {big} is over 0 MB" in str(raised.value)


def test_the_cli_refuses_a_device_encoding_in_a_recipe_in_one_line(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role":"user","content":"hi"}\n{"role":"assistant","content":"yo"}\n', "utf-8")
    recipe = tmp_path / "r.toml"
    recipe.write_text('encoding = "hf:/dev/zero"\n', "utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "compaction",
            "run",
            str(transcript),
            "--budget",
            "100",
            "--recipe",
            str(recipe),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "/dev/zero is a character device, not a regular file" in lines[0], done.stderr
