"""Transcripts with malformed lines, and what ``--lenient`` must say of them (tests)."""

from __future__ import annotations

import json
from pathlib import Path


def jsonl_with_bad_lines(path: Path, total: int, bad: set[int]) -> Path:
    """Write ``total`` alternating chat lines (user first), those numbered in ``bad`` (1-based) cut short."""
    lines = []
    for number in range(1, total + 1):
        role = "user" if number % 2 else "assistant"
        line = json.dumps({"role": role, "content": f"message {number} about the login form"})
        lines.append(line[:-12] if number in bad else line)
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def assert_listed(stderr: str, path: Path, bad: set[int], command: str) -> None:
    """Check ``stderr`` names the skipped lines ``bad`` of ``path`` as ``COMMAND --lenient`` must:
    a count, the first five ``path:line``, then how many more and where to see them all."""
    said = [line for line in stderr.strip().splitlines() if line.startswith(("skipped ", "  "))]
    plural = "s" if len(bad) != 1 else ""
    assert said[0] == f"skipped {len(bad)} malformed line{plural}:"
    listed = sorted(bad)[:5]
    assert [line.split(": invalid JSON: ")[0] for line in said[1 : 1 + len(listed)]] == [
        f"  {path}:{n}" for n in listed
    ]
    more = [line for line in said if "more (" in line]
    if len(bad) > 5:
        assert more == [
            f"  ... and {len(bad) - 5} more ({command} --json or compaction import --lenient lists them all)"
        ]
    else:
        assert more == [] and len(said) == 1 + len(bad)
