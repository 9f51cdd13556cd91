"""Peak memory of parsing a large transcript, against its file size (issue #14, item 7).

Run ``python bench/bench_parse_memory.py`` (``--mb 100`` for the parse size, ``--import-mb 20``
for the import size).  For each JSONL format a transcript of about ``--mb`` MB is made in a
temporary directory by repeating a shipped sample with fresh ids: ``pi`` (the pi transcript
in ``examples/``, its message lines repeated under one session header) and ``claude-code``
(``examples/claude-code/claude-code-log__representative_messages.jsonl``, its ``uuid`` /
``parentUuid`` chain renamed per copy and linked copy to copy).  Then, each in a fresh
subprocess, it measures the peak resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``,
KiB on Linux) minus the baseline: the resident set (``/proc/self/statm``) after importing
``compaction.formats`` and ``compaction.cli`` and, for the steps that count tokens, one
exact count (the encoder's ranks loaded: a fixed cost of the counter's cold start, issue
#14 item 3, not a cost per byte of the file).  A transient peak of that warm-up stays in
the high-water mark, so small files over-state, never under-state, the ratio:

* ``parse``: :func:`compaction.formats.load_transcript` of the file;
* ``import``: :func:`compaction.pipeline.import_transcript` of a smaller file into a fresh SQLite
  store (parsing, token counting and the writes);
* ``cli``: ``compaction import FILE --store DB --format FMT --json`` of that file, run in
  the process (the baseline is taken after importing ``compaction.cli``).

It prints one row per format and step: file MB, peak MB over the baseline, and their ratio
(target: under 2).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PI = ROOT / "examples" / "pi__pi-mono__before-compaction.jsonl"
CLAUDE = ROOT / "examples" / "claude-code" / "claude-code-log__representative_messages.jsonl"

_CHILD = r"""
import contextlib, io, json, resource, sys
import compaction.formats as formats
from compaction import Store
from compaction.pipeline import import_transcript
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
from compaction.cli import main
from compaction.tokens.counting import count_text
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
step, path, fmt, store = sys.argv[1:5]
if step != "parse":  # the encoder's ranks: a fixed cost of counting (its cold start), not of the file
    count_text("warm", "o200k_base")
base = resident()
if step == "parse":
    parsed = formats.load_transcript(path, format=fmt)
    count = len(parsed.messages)
elif step == "import":
    with Store(store) as opened:
        count = import_transcript(opened, path, format=fmt)[1]
else:  # the CLI: compaction import FILE --store DB --format FMT
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["import", path, "--store", store, "--format", fmt, "--json"], standalone_mode=False)
    count = json.loads(out.getvalue())["added"]
print(json.dumps({"baseline": base, "peak": rss(), "messages": count}))
"""


def make_pi(target: int, out: Path) -> Path:
    """Write a pi transcript of about ``target`` bytes: one header, the message lines repeated."""
    lines = PI.read_text("utf-8").splitlines()
    header, body = lines[0], lines[1:]
    unit = sum(len(line) + 1 for line in body)
    with out.open("w", encoding="utf-8") as f:
        f.write(header + "\n")
        for _ in range(max(1, target // unit)):
            f.write("\n".join(body) + "\n")
    return out


def make_claude_code(target: int, out: Path) -> Path:
    """Write a Claude Code transcript of about ``target`` bytes: the sample repeated, ids renamed per copy."""
    rows = [json.loads(line) for line in CLAUDE.read_text("utf-8").splitlines() if line.strip()]
    unit = sum(len(json.dumps(r)) + 1 for r in rows)
    last = None
    with out.open("w", encoding="utf-8") as f:
        for copy in range(max(1, target // unit)):
            for row in rows:
                row = dict(row)
                if row.get("uuid"):
                    row["uuid"] = f"{row['uuid']}-{copy}"
                if row.get("parentUuid"):
                    row["parentUuid"] = f"{row['parentUuid']}-{copy}"
                elif "parentUuid" in row and last is not None:
                    row["parentUuid"] = last
                last = row.get("uuid", last)
                f.write(json.dumps(row) + "\n")
    return out


def measure(step: str, path: Path, fmt: str, store: Path) -> dict[str, float]:
    """Run one step in a fresh interpreter; return its baseline, peak (bytes) and messages."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, step, str(path), fmt, str(store)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{step} of {path.name} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="size of the parsed transcripts (MB)")
    parser.add_argument("--import-mb", type=float, default=20.0, help="size of the imported transcripts (MB)")
    args = parser.parse_args(argv)
    makers = {"pi": make_pi, "claude-code": make_claude_code}
    print(f"{'format':<12s} {'step':<7s} {'file MB':>8s} {'messages':>9s} {'peak MB':>8s} {'peak/file':>10s}")
    with tempfile.TemporaryDirectory(prefix="compaction-parse-mem-") as tmp:
        for fmt, make in makers.items():
            for step, mb in (("parse", args.mb), ("import", args.import_mb), ("cli", args.import_mb)):
                path = make(int(mb * 1e6), Path(tmp) / f"{fmt}-{step}.jsonl")
                size = path.stat().st_size
                row = measure(step, path, fmt, Path(tmp) / f"{fmt}-{step}.db")
                peak = row["peak"] - row["baseline"]
                print(
                    f"{fmt:<12s} {step:<7s} {size / 1e6:8.1f} {int(row['messages']):>9d} "
                    f"{peak / 1e6:8.1f} {peak / size:10.2f}",
                    flush=True,
                )
                path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
