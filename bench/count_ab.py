"""Two builds of the compiled counter in one process, their first-time rounds alternating.

A change to ``_speedups/_count_c.pyx`` is judged first by what valgrind counts
(``bench/count_branches.py``), then by time; but on a shared virtual machine two runs of one
build differ by 10% or more, so timing build A in one process and build B in the next says
little.  Here both shared objects are loaded side by side (each copied to its own directory
and imported under the module's own name, which its init function requires), and each round
counts the first 300 messages of a corpus with a new counter of A, then of B (B first on every
other round), so both see the same stretch of load.  Before each timed counter, a throwaway
counter of the same build counts 1,000 other agent messages (its process-wide rank tables warm,
as a process that has counted before has them).  The best round of each is reported, with B's
speed over A's.  CPU time (``time.process_time``).

Usage (build B in a git worktree: ``python setup.py build_ext --inplace`` there)::

    python bench/count_ab.py A.so B.so [--rounds N] [CORPUS[:1|:2] ...]

``CORPUS`` is one of ``bench/conftest.py``'s six (default: all); ``:1`` keeps the messages
whose text is of Python's 1-byte kind, ``:2`` the others.  Prints ``corpus  A MB/s  B MB/s
B / A`` per corpus.  The same build against itself gave 0.91-1.00 in 3 rounds: give it 9 or
more, and repeat.  Session 15's experiments judged with it (all reverted; A = main):
an if-free choice among a piece's alternatives (json 0.78, agent 0.77: 48% more
instructions for 24% fewer mispredicts), a rank table at most 4/5 full instead of 1/2
(json:1 0.88), splitting the next piece before counting this one and prefetching its rank
slot (json:1 0.87-0.89), a cache of merges keyed by the two ranks (json 1.00-1.06, agent
0.93-0.97, base64 0.90-0.97).  Session 16's (reverted): a miss of 3 to 32 bytes first tried as
two tokens (a cut where both halves are tokens, the two compatible as backtracking decides;
four misses in five of 4 to 23 bytes are two tokens) instead of merged (json 0.94, agent 0.89,
code 0.91, base64 0.81; valgrind: json -2.4% instructions, about 1,050 a call, near the merge
loop's own), and short ASCII pieces looked up in the memo before the rank table (agent 0.82,
json 0.91, base64 0.81).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
ENCODING = "o200k_base"
MESSAGES = 300
CORPORA = ("agent", "prose", "code", "json", "cjk", "base64")


def _load(path: str, directory: Path) -> ModuleType:
    """Import the shared object at ``path`` from its own copy in ``directory``."""
    copy = directory / Path(path).name
    shutil.copy(path, copy)
    spec = importlib.util.spec_from_file_location("compaction.tokens._count_c", copy)
    if spec is None or spec.loader is None:
        raise SystemExit(f"count_ab: {path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _messages(corpora: dict, name: str) -> list[str]:
    """The first MESSAGES messages of corpus ``name`` (``:1``/``:2``: of that string kind only)."""
    corpus, _, kind = name.partition(":")
    messages = corpora[corpus][1][:MESSAGES]
    if kind == "1":
        return [m for m in messages if not m or max(map(ord, m)) < 256]
    if kind == "2":
        return [m for m in messages if m and max(map(ord, m)) >= 256]
    return messages


def main(argv: list[str]) -> None:
    args = list(argv)
    rounds = 9
    if "--rounds" in args:
        at = args.index("--rounds")
        rounds = int(args[at + 1])
        del args[at : at + 2]
    if len(args) < 2:
        raise SystemExit(__doc__)
    for path in args[:2]:
        if not Path(path).is_file():
            raise SystemExit(f"count_ab: no such shared object: {path}")
    for name in args[2:]:
        if name.partition(":")[0] not in CORPORA or name.partition(":")[2] not in ("", "1", "2"):
            raise SystemExit(
                f"count_ab: unknown corpus {name!r}; choose from {', '.join(CORPORA)} (with :1 or :2)"
            )
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_estimator

    corpora = fit_estimator.build_corpora()
    warm_texts = corpora["agent"][1][MESSAGES : MESSAGES + 1000]
    with tempfile.TemporaryDirectory() as a_dir, tempfile.TemporaryDirectory() as b_dir:
        builds = [_load(args[0], Path(a_dir)), _load(args[1], Path(b_dir))]
        for build in builds:
            build._backtrack_splits(ENCODING)  # the process's tables, built once (untimed)
        print(f"{'corpus':8s} {'A MB/s':>8s} {'B MB/s':>8s}  B / A")
        for name in args[2:] or CORPORA:
            messages = _messages(corpora, name)
            size = sum(len(text.encode("utf-8")) for text in messages)
            best = [float("inf"), float("inf")]
            for round_ in range(rounds):
                for which in (0, 1) if round_ % 2 == 0 else (1, 0):
                    warm = builds[which].PieceCounter(ENCODING).count
                    for text in warm_texts:
                        warm(text)
                    count = builds[which].PieceCounter(ENCODING).count
                    start = time.process_time()
                    for text in messages:
                        count(text)
                    best[which] = min(best[which], time.process_time() - start)
            a, b = size / best[0] / 1e6, size / best[1] / 1e6
            print(f"{name:8s} {a:8.1f} {b:8.1f}  {b / a:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
