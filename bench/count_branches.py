"""Instructions and mispredicted branches of the compiled counter on first-time text, per corpus.

Wall time on a shared machine moves by tens of percent between runs of one build (another job on
the same core slows every round), so changes to ``_speedups/_count_c.pyx`` are also judged by
what valgrind counts, which does not depend on the load: the instructions executed inside
``PieceCounter._count`` and the conditional branches valgrind's branch simulator mispredicts
(a model of a predictor, not this processor's, but its counts move with the real ones: a
mispredicted branch costs some 15-20 cycles, and most of the counter's time on first-time text
went to them).  The text is what ``bench_count.py``'s first-time test counts: the first 300
messages of the corpus, counted one call each by a new counter, after the process's tables
(rank table, backtracking tables) are built.

Usage (valgrind must be installed; the corpora are ``bench/conftest.py``'s)::

    python bench/count_branches.py [--cache] agent prose code json cjk base64

prints one line per corpus: ``corpus  pieces  instructions  mispredicts  per piece``.  To compare
two builds, run it with each build's checkout first on ``PYTHONPATH``.

``--cache`` adds valgrind's cache simulator, with a 32 KB first level and the last level set to
1 MB (this machine's per-core second level: a random read of an 8 MB table costs it about 50 ns
where one in 256 KB costs 6, so a read that misses 1 MB is what waits for memory), and prints
the data reads that miss each.  On json (session 15, 99e800c) 192 k reads miss 32 KB and 39.9 k
miss 1 MB, against 231 k mispredicted branches; of the 1 MB misses in its 1-byte messages four
in five were the rank table's slots (the whole-piece lookup of short pieces, and the merges').
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTION = "__pyx_f_10compaction_6tokens_8_count_c_12PieceCounter__count"
MESSAGES = 300


def _messages(corpus: str) -> list[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_estimator

    return fit_estimator.build_corpora()[corpus][1][:MESSAGES]


def _child(path: str) -> None:
    """Count the pickled messages with a new counter, the tables built first (run under valgrind)."""
    from compaction.tokens import _count_c

    with open(path, "rb") as handle:
        messages = pickle.load(handle)
    _count_c._backtrack_splits("o200k_base")
    count = _count_c.PieceCounter("o200k_base").count
    for text in messages:
        count(text)


CACHE_OPTIONS = ["--cache-sim=yes", "--D1=32768,8,64", "--LL=1048576,16,64"]


def measure(corpus: str, cache: bool = False) -> tuple[int, int, int, int, int]:
    """Return (pieces, instructions, mispredicted conditional branches, D1 and 1 MB data misses).

    The misses are 0 unless ``cache`` (valgrind's cache simulator, ``CACHE_OPTIONS``).
    """
    from compaction.tokens import _count_c

    messages = _messages(corpus)
    counter = _count_c.PieceCounter("o200k_base")
    pieces = sum(len(counter.pieces(text)) for text in messages)
    with tempfile.TemporaryDirectory() as directory:
        data = os.path.join(directory, "messages.pickle")
        with open(data, "wb") as handle:
            pickle.dump(messages, handle)
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--branch-sim=yes",
                *(CACHE_OPTIONS if cache else []),
                f"--toggle-collect={FUNCTION}",
                f"--callgrind-out-file={os.path.join(directory, 'callgrind.out')}",
                sys.executable,
                __file__,
                "--child",
                data,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    instructions = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    mispredicts = re.search(r"Mispredicts:\s+([\d,]+)", done.stderr)
    if instructions is None or mispredicts is None:
        raise RuntimeError(f"no figures in valgrind's output:\n{done.stderr[-2000:]}")
    first = re.search(r"D1\s+misses:\s+([\d,]+)", done.stderr)
    last = re.search(r"LLd misses:\s+([\d,]+)", done.stderr)
    return (
        pieces,
        int(instructions.group(1).replace(",", "")),
        int(mispredicts.group(1).replace(",", "")),
        int(first.group(1).replace(",", "")) if first else 0,
        int(last.group(1).replace(",", "")) if last else 0,
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1])
        return
    cache = "--cache" in argv
    corpora = [a for a in argv if a != "--cache"] or ["agent", "prose", "code", "json", "cjk", "base64"]
    misses = f" {'D1 misses':>10s} {'1MB misses':>10s}" if cache else ""
    print(f"{'corpus':8s} {'pieces':>8s} {'instructions':>13s} {'mispredicts':>12s}{misses}  per piece")
    for corpus in corpora:
        pieces, instructions, mispredicts, first, last = measure(corpus, cache)
        misses = f" {first:10,d} {last:10,d}" if cache else ""
        print(
            f"{corpus:8s} {pieces:8,d} {instructions:13,d} {mispredicts:12,d}{misses}  "
            f"{instructions / pieces:.0f} instructions, {mispredicts / pieces:.2f} mispredicts"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
