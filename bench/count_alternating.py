"""First-time counting, ours against fastokens, their rounds alternating (a noisy machine's view).

``bench_count.py`` times all the first-time rounds of one counter, then all of the next: on a
virtual machine whose host steals time in bursts, one counter's rounds can all land in a slow
stretch (a best round of 2.2 ms in one run, 3.3 ms in the next, for one build).  Here each
round counts the first 300 messages of a corpus with a new counter of each kind, one right
after the other, so both see the same stretch; the best round of each is reported, with the
ratio.  Both counters' tables are warm (ours: a throwaway counter counts other text first, as
fastokens' untimed constructor has just written its own), and a fastokens ``Tokenizer`` is
built, untimed, before each round.  CPU time (``time.process_time``).

Usage (fastokens installed: ``pip install -e '.[bench]'``)::

    python bench/count_alternating.py [ROUNDS] [CORPUS ...]

prints ``corpus  ours MB/s  fastokens MB/s  ours / fastokens`` per corpus (default: 7 rounds,
the six corpora of ``bench/conftest.py``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENCODING = "o200k_base"
MESSAGES = 300


def main(argv: list[str]) -> None:
    import fastokens

    from compaction.tokens import _count_c
    from compaction.tokens.encodings import rank_file

    rounds = int(argv[0]) if argv and argv[0].isdigit() else 7
    names = [a for a in argv if not a.isdigit()] or ["agent", "prose", "code", "json", "cjk", "base64"]
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_estimator

    corpora = fit_estimator.build_corpora()
    with tempfile.NamedTemporaryFile(suffix=".tiktoken", delete=False) as handle:
        handle.write(rank_file(ENCODING))
    _count_c._backtrack_splits(ENCODING)  # the process's tables, built once (untimed)
    warm_texts = corpora["agent"][1][MESSAGES : MESSAGES + 1000] + corpora["cjk"][1][MESSAGES:]
    print(f"{'corpus':8s} {'ours MB/s':>10s} {'fastokens':>10s}  ours / fastokens")
    for name in names:
        messages = corpora[name][1][:MESSAGES]
        size = sum(len(text.encode("utf-8")) for text in messages)
        best = {"ours": float("inf"), "fastokens": float("inf")}
        for _ in range(rounds):
            tokenizer = fastokens.Tokenizer.from_tiktoken(handle.name, encoding=ENCODING)
            tokenizer.encode_ordinary("warm-up: its first call builds its tables")
            encode = tokenizer.encode_ordinary
            warm = _count_c.PieceCounter(ENCODING).count
            for text in warm_texts:
                warm(text)
            count = _count_c.PieceCounter(ENCODING).count
            start = time.process_time()
            for text in messages:
                count(text)
            best["ours"] = min(best["ours"], time.process_time() - start)
            start = time.process_time()
            for text in messages:
                len(encode(text))
            best["fastokens"] = min(best["fastokens"], time.process_time() - start)
        ours, theirs = size / best["ours"] / 1e6, size / best["fastokens"] / 1e6
        print(f"{name:8s} {ours:10.1f} {theirs:10.1f}  {ours / theirs:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
