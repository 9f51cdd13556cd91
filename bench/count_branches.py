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

    python bench/count_branches.py agent prose code json cjk base64

prints one line per corpus: ``corpus  pieces  instructions  mispredicts  per piece``.  To compare
two builds, run it with each build's checkout first on ``PYTHONPATH``.
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


def measure(corpus: str) -> tuple[int, int, int]:
    """Return (pieces, instructions, mispredicted conditional branches) of first-time ``corpus``."""
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
    return pieces, int(instructions.group(1).replace(",", "")), int(mispredicts.group(1).replace(",", ""))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1])
        return
    print(f"{'corpus':8s} {'pieces':>8s} {'instructions':>13s} {'mispredicts':>12s}  per piece")
    for corpus in argv or ["agent", "prose", "code", "json", "cjk", "base64"]:
        pieces, instructions, mispredicts = measure(corpus)
        print(
            f"{corpus:8s} {pieces:8,d} {instructions:13,d} {mispredicts:12,d}  "
            f"{instructions / pieces:.0f} instructions, {mispredicts / pieces:.2f} mispredicts"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
