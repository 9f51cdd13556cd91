"""Benchmark: what conversations and branches cost compile and facts, beside a one-conversation store.

Run ``pytest bench/bench_branches.py --benchmark-only -q -s`` (``-s`` shows the table).  Four stores are built once, all
holding the pi transcript (962 messages), compressed with the extractive summarizer:

* ``alone``: a store of that one conversation (the reference, measured in the same run);
* ``among``: the same conversation in a store that also holds 200 other conversations
  (copies of the first 40 messages of the transcript, each its own conversation);
* ``branch``: a branch of ``among``'s conversation forked at message 600 that holds the
  transcript's messages 600 to 961 as its own rows (so it shows the same 962 messages,
  reading 600 of them from its parent);
* ``edited``: ``alone`` with 10 of its messages edited (a revision each) and compressed again.

Each compiles at 40,000 tokens; a table printed when the module's tests end (before
pytest-benchmark's) gives the median of 15 compiles per store and its ratio to ``alone``.

**Importing branches.**  :func:`siblings_session` and :func:`nested_session` write a
generated Claude Code session: one prompt with ``n`` siblings (the user rewound to it ``n``
times), or ``n`` rewinds each inside the one before.  ``test_import_branches`` times
``compaction import --branches`` of 200 siblings beside the same file imported flat (the
reference, same run), and ``test_import_nested_branches`` 300 nested rewinds likewise.
The sizes the attack pass reported (500, 1,000, 3,000 siblings; 300 and 1,100 nested
rewinds) take seconds to minutes each, so they run from the command line, each in a fresh
process that reports its own wall time and peak RSS::

    python bench/bench_branches.py siblings 500 1000 3000 nested 300 1100

Measured on 2026-12-01 on the shared 2-core machine (other work running), wall seconds and
peak RSS of the importing process; "before" is commit d73ff92 run the same way (its code
first on ``PYTHONPATH``, ``--timeout 600``):

=================  ========  ==================  ==================  =======
session            branches  before: s, MiB      after: s, MiB       flat s
=================  ========  ==================  ==================  =======
500 siblings       499       21.9, 56.7          2.7, 56.9           0.3
1,000 siblings     999       50.0, 60.2          4.8, 60.4           0.4
3,000 siblings     2,999     248.0, 69.4         11.4, 70.8          0.5
300 nested         300       over 600            7.6, 58.8           0.3
1,100 nested       1,100     over 600            114.9, 101.6        0.6
=================  ========  ==================  ==================  =======

**A branch's first requests and the prompt cache.**  :func:`branch_cache_shares` replays
the pi session in events at 32,000 tokens, forks it at four turns as a rewind does (the
branch answers "Let me try another way." and goes on with the session's next turns) and
measures the cached share of the branch's first 10 requests, the cache holding the parent's
request at the fork: "before" plans a branch without events afresh (as before
:func:`compaction.events.inherited_frame`, patched to answer ``None``), "after" starts it
from the parent's newest event that showed no message past the fork.  Both in the same run::

    python bench/bench_branches.py cache [N]

Measured again on 2026-12-01 at 23:32 UTC (the shared working tree at fb66bdd with 83b468d's
planner change; cached tokens over tokens; events: the branch's own).  The table this replaces
had the fork at turn 354 at 0.967 / 0.986 with 1 event; it now prints 0.970 / 0.908 with 2,
so a branch's first ten requests are cached 0.90-0.93 (the README's figure since b7bee70)::

                     fork at requests first: before  after first N: before  after events: before  after
      turn 118/472 (seq 237)       10         0.000  0.988           0.767  0.899              2      2
      turn 236/472 (seq 479)       10         0.000  0.987           0.710  0.931              2      2
      turn 354/472 (seq 719)       10         0.000  0.970           0.776  0.908              2      2
      turn 424/472 (seq 862)       10         0.000  0.991           0.767  0.903              2      2

Before, the branch's first request opened with an ask ledger and summaries of its own fresh
plan, so nothing past the request header was cached; after, it is the parent's request at
the fork plus the branch's new messages.  "after" counts the inherited frame, recorded as
the branch's first event, among its events.

Siblings now grow linearly (the store's work per branch no longer grows with the store).
Nested rewinds are no longer parsed whole path by path (the sum of the paths' lengths, what
the branches show: 1.2 million messages at 1,100 deep): each event is read and converted
once, a branch resuming from a fork of the parser of the path it continues, taken where it
leaves it (``compaction.formats._claude_code_paths``), its shared messages finished,
fingerprinted and interned once, and the trie of stored paths walked from the fork rather
than the root.  The same command on 2026-12-01 (load average 1.5 to 3; "before" is
69b5f26, the session's start, its tree first on ``PYTHONPATH`` with the compiled counter
copied in; "after" the shared working tree at d16272c, this work's last code commit 51d3aa5)::

    python bench/bench_branches.py nested 300 1100 siblings 1000

=================  ========  ==================  ==================  =======
session            branches  before: s, MiB      after: s, MiB       flat s
=================  ========  ==================  ==================  =======
300 nested         300       9.8, 59.1           2.3, 59.7           0.2
1,100 nested       1,100     102.2, 99.3         17.5, 98.7          0.5
1,000 siblings     999       4.5, 60.3           3.8, 60.7           0.3
=================  ========  ==================  ==================  =======

Parsing and naming the paths (:func:`compaction.branch_import.plan_branches`, timed in one
process) took, at 300, 1,100 and 2,200 nested rewinds, 2.84 and 60.72 s before (2,200 not
run) and 0.08, 0.54 and 2.11 s after: no Python-level step per shared message is left,
though each branch still holds its path's messages and line numbers as lists (copied in C,
what still grows with the square).  What grows faster than the depth now is the store's:
opening a branch reads its lineage, one row per ancestor (lineage_of, three opens a
branch), 14.8 of the 1,100-deep import's 16.1 s in one timed run.  Before, 1,100 nested rewinds could not
finish at all: SQLite refuses a lineage condition past 1,000 terms (fixed: balanced).

**The store's lineage reads.**  Profiled (``python -m cProfile``, 1,100 nested at 09c757f),
the store took 29.1 of the import's 32.6 s: 3,303 lineage reads (``_lineage_of``, 15.0 s:
the recursive query, then :func:`compaction.store.lineage.lineage_of` making a segment per
ancestor), 2,205 opens of the store (checking the file and its schema, 14.1 s with their
reads) and 5,503 import-key lookups (``seq_of``, 5.1 s: an ``IN`` of every conversation of
the lineage, its text rebuilt each time).  Now the import scopes one store object to each
path in turn (``ConversationScope.scope_to``) and a branch's lineage is made from its
parent's when it is created (``Lineage.child``) and kept (16 a store object, most recently
used), so the import reads 3 lineages whatever the depth (tests/test_lineage_scale.py); a key
chained from the row at seq ``s`` is looked for only in the conversations holding seqs past
``s`` (one or two at a branch's end), and ``keyed`` is built once a lineage.  The same
profile after: the store 1.8 of 4.7 s, lineage reads 0.01 s, lookups 0.13 s.  The same
command twice on 2026-12-01, alternating (load average 1 to 2.4; "before" is 09c757f, its
tree first on ``PYTHONPATH`` with the compiled counter copied in; "after" the shared working
tree at dce81b2 and dcf5fba, this work's code commits 115c900 and 97b7d7a)::

    python bench/bench_branches.py nested 300 1100 siblings 1000

=================  ========  ==================  ==================  =======
session            branches  before: s, MiB      after: s, MiB       flat s
=================  ========  ==================  ==================  =======
300 nested         300       2.8 / 2.6, 60.0     1.2 / 0.6, 60.0     0.3
1,100 nested       1,100     25.1 / 23.5, 99.0   2.4 / 2.4, 99.1     0.6
1,000 siblings     999       7.7 / 4.5, 60.9     1.2 / 1.1, 61.2     0.4
=================  ========  ==================  ==================  =======

Peak RSS is unchanged: the paths still hold their messages and line numbers as lists
(see above), 99 MiB at 1,100 deep against 60 MiB at 300.  On PostgreSQL (this session's
server on 54337, ``compaction import FILE --store URL?store=NEW --json --branches`` timed
by the shell, process start included, one run each), 300 nested took 19.7 s before and
3.8 s after, 1,100 nested 240.8 s and 10.6 s; profiled after, 30,900 statements of about
0.4 ms each are its time (the lineage lookups 0.03 s in all).

**Depth.**  :func:`depth_scaling` times, per depth, ``import --branches`` of
:func:`nested_session` (a fresh process), building a chain of branches as
tests/test_deep_branch_compile.py does (one message a conversation, a summary every 50th,
each forking the next; SQLite, and PostgreSQL with ``--postgres URL``) and compiling its
deepest at 200,000 tokens; each figure's ratio to the depth before is in brackets (2 when
linear, 4 when quadratic)::

    python bench/bench_branches.py depth --postgres postgresql://postgres@127.0.0.1:54331/compaction_test

Measured on 2026-12-01 on the shared 2-core machine, heavily loaded by other work (the
figures wander by 2x from run to run); "before" is commit ae0de08, "after" 87478ed (each
tree first on ``PYTHONPATH``), seconds::

    before  depth  import        chain         compile      pg chain       pg compile
              100    4.50          1.20          0.06          4.32          0.10
              200    7.03 (x1.6)   4.91 (x4.1)   0.14 (x2.4)  15.54 (x3.6)   0.29 (x2.9)
              400   32.43 (x4.6)  18.58 (x3.8)   0.72 (x5.1)  63.08 (x4.1)   1.19 (x4.1)
              800  154.84 (x4.8)  63.95 (x3.4)   3.04 (x4.2) 219.20 (x3.5)   3.25 (x2.7)
    after   depth  import        chain         compile      pg chain       pg compile
              100    1.70          1.46          0.05          6.39          0.13
              200   11.69 (x6.9)   6.73 (x4.6)   0.22 (x4.0)  22.41 (x3.5)   0.43 (x3.2)
              400   41.27 (x3.5)  16.23 (x2.4)   0.53 (x2.5)  38.33 (x1.7)   0.74 (x1.7)
              800  105.29 (x2.6)  46.01 (x2.8)   1.07 (x2.0)  91.82 (x2.4)   0.66 (x0.9)

The same command at 200, 400 and 800 on 2026-12-01 (``depth --postgres URL 200 400 800``,
PostgreSQL 54337 of this session; load average 2 to 3), "before" 09c757f and "after" the
shared working tree at 2658c60 (this work's code commits 115c900 and 97b7d7a), seconds::

    before  depth  import        chain         compile      pg chain       pg compile
              200    2.30          4.50          0.06          6.29          0.13
              400    8.52 (x3.7)  14.28 (x3.2)   0.26 (x4.4)  25.77 (x4.1)   0.32 (x2.4)
              800   10.93 (x1.3)  14.36 (x1.0)   0.81 (x3.1)  99.04 (x3.8)   1.55 (x4.9)
    after   depth  import        chain         compile      pg chain       pg compile
              200    0.60          2.31          0.11          7.17          0.25
              400    1.26 (x2.1)   6.77 (x2.9)   0.24 (x2.1)  16.53 (x2.3)   0.53 (x2.1)
              800    2.25 (x1.8)  17.74 (x2.6)   0.55 (x2.3)  50.40 (x3.0)   1.10 (x2.1)

The before figures wander with the load (its 800-deep import took less than twice its
400-deep one; the 1,100-deep import above took 23.5 to 25.1 s).  The import is now linear
in the depth.  The chain (a fresh store object per level) grew faster: profiled at 800
(SQLite, cProfile, 12.7 s), the new branch's summary count in ``branch`` took 5.2 s (the
shadowing condition over every ancestor, every 50th level adding a summary), each open
4.0 s (its lineage read 2.2 s, closing 1.4 s), appends 1.6 s.  The count now runs over the
lineage's conversations keeping a summary only (e38ace5; the same count, hypothesis-tested
against the whole lineage's): the chain at 800, one run each, 14.05 s at 09c757f and 6.35 s
after.  The depth command again at e38ace5 (load average 1.6 to 2.1)::

    after   depth  import        chain         compile      pg chain       pg compile
              200    0.43          1.11          0.06          6.27          0.15
              400    0.75 (x1.8)   1.85 (x1.7)   0.15 (x2.5)  12.32 (x2.0)   0.40 (x2.6)
              800    1.37 (x1.8)   6.64 (x3.6)   0.75 (x4.8)  39.96 (x3.2)   0.82 (x2.1)

What still grows in the chain is each open's lineage read, one row per ancestor (a fresh
store object keeps no lineage of an earlier one): ms per level over each hundred levels of
an 800-deep chain (SQLite, e38ace5) 5.0, 6.3, 7.1, 8.3, 9.4, 10.8, 9.5, 10.1.

A chain's own cost per level, measured apart (python, SQLite, one store object per step
as above; ms per level over each hundred levels of an 800-deep chain): before 33, 31, 39,
52, 70, 109, 120, 143 (a lookup of an import key planned an OR of one term per
conversation: 23 ms 700 deep); after 4.8, 5.9, 16, 10, 12, 15, 17, 19 (what still grows
is reading the lineage itself on opening each branch, one row per ancestor, and the
shadowing probe of a summary count).  Importing nested rewinds grew with the square of
the depth mostly by parsing every path whole; each event is now parsed once (see above),
and the store's lineage reads are what still grows.  An earlier
run of ffce301 (all but the ranged message read) gave, at 100, 200, 400 and 800: import
1.54, 5.47, 16.99, 100.87 s; chain 2.92, 4.94, 11.26, 46.98 s.

**Depth: the lineage walk and the first compile.**  Profiled at 800 deep on 2026-12-01
(SQLite, 013ef58; cProfile of :func:`chain_seconds`'s chain, and its compile with each
statement timed), two things grew with the depth.  Each open built its lineage in Python
from the recursive query's rows (a dict of the ancestors, then :func:`lineage_of`'s walk:
2.9 ms an open in cProfile, about 40% of it).  The query now carries each row's depth and
the smallest fork below it, so its rows are the segments as they come
(``compaction.store.lineage.LINEAGE_WALK``, ``lineage_from_walk``; commit 4148c73): the query
alone 2.2 ms 1,600 deep, the old one 5.4 ms.  And the deepest branch's first compile
prepared each full read of its messages afresh (a fresh store object has no statement
cache), where SQLite's planner takes time growing faster than the square of the depth over
the lineage's ``OR`` of one range per conversation: a full read 1,600 deep took 566 ms the
first time and 2.2 ms from the cache, and a compile makes five or so (the SQL of the
compile 800 deep: 0.63 of its 1.0 s; 1,600 deep: 3.4 of 5.7 s).  SQLite's full reads
(messages, facts, the user turns) now join the lineage as a ``VALUES`` table
(``Lineage.rows_join``, 2cf065c; the same rows, hypothesis-tested against the condition):
that read 15 ms the first time; the compile's SQL 0.27 s 800 deep and 1.1 s 1,600 deep.
The same command, alternating (load average 2 to 3.7; "before" is 013ef58, its tree first on
``PYTHONPATH`` with the compiled counter copied in; "after" the shared working tree at
2cf065c and 489cd34), seconds, two runs each::

    python bench/bench_branches.py depth 200 400 800 1600

    before  depth  import        chain          compile       run 2: chain   compile
              200    0.92          4.50          0.08                1.11     0.07
              400    2.04 (x2.2)   7.06 (x1.6)   0.50 (x6.2)         3.83     0.22 (x3.1)
              800    3.68 (x1.8)  17.13 (x2.4)   0.61 (x1.2)         8.30     0.69 (x3.2)
             1600    6.43 (x1.7)  40.86 (x2.4)   4.49 (x7.4)        24.68     2.44 (x3.5)
    after   depth  import        chain          compile       run 2: chain   compile
              200    0.87          2.46          0.05                1.26     0.05
              400    1.59 (x1.8)   4.56 (x1.9)   0.12 (x2.2)         2.53     0.11 (x2.3)
              800    1.51 (x1.0)   6.96 (x1.5)   0.29 (x2.5)         8.92     0.32 (x3.0)
             1600    4.04 (x2.7)  34.82 (x5.0)   2.30 (x7.8)        19.00     1.03 (x3.2)

On PostgreSQL (``depth --postgres URL 200 400 800``, this session's server, one run each,
before then after) nothing changed beyond the noise: chain 9.22, 20.57, 44.56 s before and
5.06, 12.08, 45.67 s after; compile 0.36, 0.50, 0.90 s and 0.15, 0.26, 1.06 s (PostgreSQL
plans the ``OR`` in linear time and keeps it).

The target (a ratio near 2 per doubling) is not reached.  The compile is about twice as
fast, but still grows by x2.5 to x3.2: :meth:`coarsest_summary_at` runs once per summary of
each cover the planner asks for (136 queries 800 deep, 528 at 1,600: the chain's summaries
grow with the depth, and the covers with them), each through the shadowing condition over
the whole lineage (0.5 ms 1,600 deep unloaded; 130 ms of the compile 800 deep, 770 ms at
1,600); restricting it to the conversations keeping a summary costs a probe per ancestor
too (0.4 ms), so what would help is one read of the lineage's summaries per compile.
``summary_frontier``, ``level_starts_before``, ``pinned_seqs`` and ``len`` keep the
``OR`` condition (tens of ms each 1,600 deep, the first time).  The chain still reads each branch's
lineage on every open, one row per ancestor (a fresh store object keeps none): the walk
(0.9 s over the opens of a chain 800 deep, 2.2 ms one open at 1,600) and a :class:`Segment` per ancestor grow with
the square of the depth over a chain, beside per-level costs that do not (the commit of
each append, 2.5 of 15 s 800 deep, and the schema check of each open, 0.9 s).

**Depth: one question a summary.**  Profiled 1,600 deep (cProfile of a compile of the chain's
deepest, SQLite, 2026-12-01, fb66bdd): :meth:`coarsest_summary_at` took 1.26 of the 2.2 s,
asked 528 times for 32 summaries (each of the 33 covers priced asked again for the summaries
older covers had found, each through the shadowing condition over the whole lineage).  The
planner now keeps the store's answers per start seq and reuses one whenever it settles a
smaller bound (``WindowPlanner.coarsest_at``, 83b468d): 32 questions, 0.10 s.  The same command
on 2026-12-01 at 23:53-00:00 UTC (load average 3.8 to 4.5; "before" is 4a7276f's tree first on
``PYTHONPATH`` with the compiled counter copied in; "after" the shared working tree at
83b468d, two runs), seconds::

    python bench/bench_branches.py depth 200 400 800 1600

    before  depth  import        chain          compile
              200    1.28          2.76          0.14
              400    2.53 (x2.0)   5.71 (x2.1)   0.27 (x1.8)
              800    4.60 (x1.8)  18.31 (x3.2)   0.52 (x1.9)
             1600    8.51 (x1.8)  46.94 (x2.6)   2.87 (x5.6)
    after   depth  import        chain          compile       run 2: chain   compile
              200    0.81          3.72          0.08                3.19     0.08
              400    1.83 (x2.2)   7.75 (x2.1)   0.12 (x1.6)         7.64     0.20 (x2.4)
              800    4.55 (x2.5)  13.90 (x1.8)   0.21 (x1.8)        17.92     0.39 (x2.0)
             1600    8.14 (x1.8)  38.33 (x2.8)   0.59 (x2.8)        47.51     1.11 (x2.8)

This compile is a fresh store object's first (its statements prepared, the counter's memo
cold: 0.25 s of it 1,600 deep).  A second compile in the same process (``/tmp`` script, the
chains built once) took 0.55 s 800 deep and 1.08 s 1,600 deep (x2.0); in cProfile, what still
grows faster than the depth is the ask ledger's names index (``names_index._window``: once per
live-window start, each over up to 2,000 messages before it: 0.10 s 800 deep, 0.18 s 1,600)
and the 32 remaining questions (a probe per ancestor each: 0.04 s and 0.10 s); the full message
reads (0.16 and 0.29 s) and the fact pages grow with it.  The chain itself still grows by x2.3
to x2.8 a doubling: each level opens the branch afresh and walks its lineage, one row per
ancestor (see above), which this change does not touch.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from compaction import Compactor, Recipe, compile_request
from compaction.formats import load_transcript
from compaction.store import open_store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from claude_code_sessions import nested_rewinds, rewind_tree, write_session  # noqa: E402

PI = ROOT / "examples" / "pi__pi-mono__before-compaction.jsonl"
RECIPE = Recipe(budget_tokens=40000)
OTHERS = 200
FORK = 600
ROUNDS = 15

RESULTS: dict[str, float] = {}


def _median_ms(location: str, conversation: str) -> float:
    with open_store(location, conversation=conversation) as store:
        compile_request(store, RECIPE)  # warm: counts cached
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            compile_request(store, RECIPE)
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    messages = list(load_transcript(PI).messages)
    where = tmp_path_factory.mktemp("branches")
    alone, among = str(where / "alone.db"), str(where / "among.db")
    with open_store(alone, conversation="pi") as store:
        store.append(messages, chain_seed="pi")
        Compactor(store, RECIPE).tick(keep_tail_tokens=4000)
    for index in range(OTHERS):
        with open_store(among, conversation=f"other-{index:03d}") as store:
            store.append(messages[:40], chain_seed="pi")
    with open_store(among, conversation="pi") as store:
        store.append(messages, chain_seed="pi")
        Compactor(store, RECIPE).tick(keep_tail_tokens=4000)
        store.branch("pi-branch", FORK)
    with open_store(among, conversation="pi-branch") as branch:
        branch.append(messages, chain_seed="pi")  # the shared 600 are skipped, 362 stored as its own
        Compactor(branch, RECIPE).tick(keep_tail_tokens=4000)
    edited = str(where / "edited.db")
    with open_store(edited, conversation="pi") as store:
        store.append(messages, chain_seed="pi")
        for seq in range(100, 1000, 90):
            if seq < len(messages) and store.messages(seq, seq + 1)[0].role == "user":
                store.edit(seq, [{"type": "text", "text": f"edited message {seq}"}])
        Compactor(store, RECIPE).tick(keep_tail_tokens=4000)
    return {
        "alone": (alone, "pi"),
        "among": (among, "pi"),
        "branch": (among, "pi-branch"),
        "edited": (edited, "pi"),
    }


@pytest.mark.parametrize("which", ["alone", "among", "branch", "edited"])
def test_compile_latency(benchmark, stores: dict[str, tuple[str, str]], which: str) -> None:  # noqa: ANN001
    location, conversation = stores[which]
    with open_store(location, conversation=conversation) as store:
        compiled = benchmark(compile_request, store, RECIPE)
        assert compiled.total_messages == 962
    RESULTS[which] = _median_ms(location, conversation)


@pytest.fixture(scope="module", autouse=True)
def _table(request: pytest.FixtureRequest):
    yield
    if "alone" not in RESULTS:
        return
    reference = RESULTS["alone"]
    lines = [
        "",
        f"compile at {RECIPE.budget_tokens} tokens, median of {ROUNDS} (ms); ratio to a one-conversation store",
    ]
    for which, ms in RESULTS.items():
        lines.append(f"{which:>8s} {ms:8.2f} ms {ms / reference:6.2f}x")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        reporter.write_line(line) if reporter is not None else print(line)


# -- importing the branches of a generated session -------------------------------------------


def siblings_session(path: Path, n: int) -> Path:
    """Write a Claude Code session whose first answer has ``n`` prompts as children (``n - 1`` rewinds)."""
    return write_session(path, rewind_tree([-1] * n))


def nested_session(path: Path, n: int) -> Path:
    """Write a Claude Code session of ``n`` rewinds each forking inside the one before: the prompt
    ``x{i}`` is abandoned for ``y{i}``, and ``x{i+1}`` / ``y{i+1}`` continue ``x{i}``'s answer
    (the kept prompts' answers come last, newest first, as in tests/test_attack_session11.py)."""
    return write_session(path, nested_rewinds(n))


def _import_args(session: Path, store: Path, branches: bool) -> list[str]:
    return ["import", str(session), "--store", str(store), "--json"] + (["--branches"] if branches else [])


def _import(session: Path, store: Path, branches: bool) -> dict[str, Any]:
    from click.testing import CliRunner

    from compaction.cli import main

    done = CliRunner().invoke(main, _import_args(session, store, branches))
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_import_branches(benchmark, tmp_path: Path) -> None:  # noqa: ANN001
    session = siblings_session(tmp_path / "wide.jsonl", 200)
    runs = iter(range(10_000))

    def branched() -> dict[str, Any]:
        return _import(session, tmp_path / f"b{next(runs)}.db", True)

    report = benchmark.pedantic(branched, rounds=3, iterations=1)
    assert len(report["branches"]) == 199
    started = time.perf_counter()
    flat = _import(session, tmp_path / "flat.db", False)
    reference = time.perf_counter() - started
    assert flat["messages"] == 402
    line = (
        f"import --branches of 200 siblings: {benchmark.stats.stats.median:.2f} s (median of 3); "
        f"the same file flat: {reference:.2f} s"
    )
    print(line)


def test_import_nested_branches(benchmark, tmp_path: Path) -> None:  # noqa: ANN001
    """``import --branches`` of 300 nested rewinds (each branch's lineage one deeper) beside the
    same file flat (the reference, same run): the store's work per branch no longer grows with
    its depth (a lineage made from its parent's, one store object scoped to each path)."""
    session = nested_session(tmp_path / "nested.jsonl", 300)
    runs = iter(range(10_000))

    def branched() -> dict[str, Any]:
        return _import(session, tmp_path / f"n{next(runs)}.db", True)

    report = benchmark.pedantic(branched, rounds=3, iterations=1)
    assert len(report["branches"]) == 300
    started = time.perf_counter()
    _import(session, tmp_path / "flat.db", False)
    reference = time.perf_counter() - started
    print(
        f"import --branches of 300 nested rewinds: {benchmark.stats.stats.median:.2f} s (median of 3); "
        f"the same file flat: {reference:.2f} s"
    )


_MEASURE = """
import json, resource, sys, time
from click.testing import CliRunner
from compaction.cli import main
started = time.perf_counter()
done = CliRunner().invoke(main, sys.argv[1:])
elapsed = time.perf_counter() - started
assert done.exit_code == 0, done.output[-2000:]
report = json.loads(done.stdout)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"seconds": elapsed, "peak_kib": peak, "branches": len(report.get("branches", [])),
                  "messages": report["messages"]}))
"""


def measure(kind: str, n: int, branches: bool = True, timeout: float = 3600) -> dict[str, Any]:
    """Import a generated session in a fresh process; return its wall time (s), peak RSS (KiB) and counts."""
    with tempfile.TemporaryDirectory() as where:
        make = siblings_session if kind == "siblings" else nested_session
        session = make(Path(where) / f"{kind}{n}.jsonl", n)
        args = _import_args(session, Path(where) / "store.db", branches)
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def _cli(argv: list[str]) -> None:
    """``python bench/bench_branches.py [--timeout S] siblings 500 1000 nested 300``: one row per size.

    A run past ``S`` seconds (default 3600) is stopped and shown as ``>S``; one that fails
    shows the last line of its error.
    """
    kind, timeout = "siblings", 3600.0
    if argv[:1] == ["--timeout"]:
        timeout, argv = float(argv[1]), argv[2:]
    print(
        f"{'session':>18s} {'branches':>8s} {'--branches s':>12s} {'peak MiB':>9s} {'flat s':>7s} {'flat MiB':>9s}"
    )
    for word in argv:
        if word in ("siblings", "nested"):
            kind = word
            continue
        n = int(word)
        flat = measure(kind, n, False)
        try:
            branched = measure(kind, n, True, timeout)
        except subprocess.TimeoutExpired:
            print(f"{kind + ' ' + str(n):>18s} {'':8s} {'>' + str(int(timeout)):>12s}", flush=True)
            continue
        except RuntimeError as err:
            print(f"{kind + ' ' + str(n):>18s} failed: {str(err).strip().splitlines()[-1][:300]}", flush=True)
            continue
        print(
            f"{kind + ' ' + str(n):>18s} {branched['branches']:8d} {branched['seconds']:12.2f} "
            f"{branched['peak_kib'] / 1024:9.1f} {flat['seconds']:7.2f} {flat['peak_kib'] / 1024:9.1f}",
            flush=True,
        )


# -- a branch's first requests: what the prompt cache serves -----------------------------------

CACHE_RECIPE = Recipe(budget_tokens=32000)
#: Where the cache measure forks the pi session (fractions of its turns) and how many requests it counts.
CACHE_FORKS = (0.25, 0.5, 0.75, 0.9)
CACHE_REQUESTS = 10


def _turns(messages: list[Any]) -> list[list[Any]]:
    """The pi session as an agent appends it: what comes before each assistant message."""
    turns: list[list[Any]] = [[]]
    for message in messages:
        if message.role == "assistant" and turns[-1]:
            turns.append([])
        turns[-1].append(message)
    return turns


def _compile_events(store: Any, recipe: Recipe) -> Any:
    from compaction.events import compile_in_events
    from compaction.summarizers.extractive import ExtractiveSummarizer

    compiled, _ticks = compile_in_events(store, recipe, lambda: ExtractiveSummarizer(recipe.encoding))
    return compiled


def _parent_requests(path: Path, turns: list[list[Any]], recipe: Recipe) -> dict[int, Any]:
    """Replay the session at ``path`` (conversation ``pi``) in events; return each request by messages held."""
    sent = {}
    with open_store(path, conversation="pi") as store:
        for turn in turns:
            store.append(turn, chain_seed="pi")
            sent[store.next_seq()] = _compile_events(store, recipe).request
    return sent


def branch_cache_shares(
    where: Path,
    *,
    forks: tuple[float, ...] = CACHE_FORKS,
    requests: int = CACHE_REQUESTS,
    recipe: Recipe = CACHE_RECIPE,
) -> list[dict[str, Any]]:
    """Measure the cached share of a branch's first ``requests`` requests, before and after inherited frames.

    The pi session (962 messages) is replayed turn by turn in events at the recipe's budget.
    At each fork point (a fraction of its turns) a branch forks the session where the parent
    had appended that turn, as a rewind does: its first assistant message is one of its own
    ("Let me try another way."), then it goes on with the session's next turns.  Each branch
    is replayed twice on a copy of the parent's store: "before" plans a branch without events
    afresh (:func:`compaction.events.inherited_frame` answering ``None``, as before it
    existed), "after" starts it from the parent's event.  The prompt cache is taken to hold
    the parent's request at the fork (what it sent last before the rewind); each branch
    request's cached tokens are measured against the request before it
    (:class:`compaction.replay_prefix.PrefixMeter`).

    Returns:
        One row per fork point: ``fork`` (messages shared), ``before`` and ``after``, each a
        dict of ``first`` (the first request's cached share), ``share`` (cached tokens over
        tokens of the first ``requests`` requests) and ``events`` (the branch's own events).
    """
    import shutil
    from unittest import mock

    from compaction import Message
    from compaction.replay_prefix import PrefixMeter

    messages = list(load_transcript(PI).messages)
    turns = _turns(messages)
    parent = where / "parent.db"
    sent = _parent_requests(parent, turns, recipe)
    rows = []
    for fraction in forks:
        index = min(len(turns) - 1, max(1, int(len(turns) * fraction)))
        fork = sum(len(t) for t in turns[:index])
        assert fork in sent, fork
        later = [list(t) for t in turns[index : index + requests]]
        if not later:  # at the tip: the branch goes on with turns of its own
            later = [[Message("assistant", ({"type": "text", "text": "Let me try another way."},))]]
        later[0][0] = Message("assistant", ({"type": "text", "text": "Let me try another way."},))
        row: dict[str, Any] = {"fork": fork, "turn": index, "of": len(turns)}
        for mode in ("before", "after"):
            copy = where / f"{mode}-{fork}.db"
            shutil.copyfile(parent, copy)
            with open_store(copy, conversation="pi") as store:
                store.branch("retry", fork)
            meter = PrefixMeter(recipe.encoding)
            meter.measure(sent[fork])
            cached, tokens, first = 0, 0, 0.0
            patch = mock.patch("compaction.events.inherited_frame", return_value=None)
            with (
                patch if mode == "before" else contextlib.nullcontext(),
                open_store(copy, conversation="retry") as branch,
            ):
                for count, turn in enumerate(later):
                    branch.append(turn)
                    request = _compile_events(branch, recipe).request
                    got, _kept = meter.measure(request)
                    cached, tokens = cached + got, tokens + request.tokens
                    if count == 0:
                        first = got / request.tokens
                events = len(branch.events())
            row[mode] = {"first": first, "share": cached / tokens, "events": events, "requests": len(later)}
        rows.append(row)
    return rows


def print_cache_shares(rows: list[dict[str, Any]]) -> None:
    """Print one line per fork point: the first request's cached share and the first N's, before and after."""
    print(
        f"{'fork at':>24s} {'requests':>8s} {'first: before':>13s} {'after':>6s} "
        f"{'first N: before':>15s} {'after':>6s} {'events: before':>14s} {'after':>6s}"
    )
    for row in rows:
        before, after = row["before"], row["after"]
        where = f"turn {row['turn']}/{row['of']} (seq {row['fork']})"
        print(
            f"{where:>24s} {after['requests']:8d} {before['first']:13.3f} {after['first']:6.3f} "
            f"{before['share']:15.3f} {after['share']:6.3f} {before['events']:14d} {after['events']:6d}"
        )


def test_branch_first_requests_cached_share(benchmark, tmp_path: Path) -> None:  # noqa: ANN001
    """The cached share of a branch's first requests, before and after (one run, printed)."""
    rows = benchmark.pedantic(branch_cache_shares, args=(tmp_path,), rounds=1, iterations=1)
    print()
    print_cache_shares(rows)
    for row in rows:
        assert row["after"]["first"] >= row["before"]["first"]


# -- depth: import of nested rewinds, and a chain of branches built and compiled ---------------

DEPTHS = (100, 200, 400, 800)


def chain_seconds(location: str, depth: int) -> tuple[float, float]:
    """Build a chain of ``depth`` branches as tests/test_deep_branch_compile.py does
    (``store_backends.branch_chain``); return the seconds it took and those of a compile of the
    deepest at 200,000 tokens.

    Each conversation appends one message, every 50th summarizes what it shows past the
    frontier, and each forks the next at its end (a fresh store object per step, as an
    agent opening its branch does).
    """
    from store_backends import branch_chain

    from compaction import Message

    def text(role: str, body: str) -> Message:
        return Message(role=role, content=[{"type": "text", "text": body}])

    started = time.perf_counter()
    name = branch_chain(location, depth)
    built = time.perf_counter() - started
    with open_store(location, conversation=name) as store:
        store.append([text("user", "last")])
        started = time.perf_counter()
        compile_request(store, Recipe(budget_tokens=200_000))
        compiled = time.perf_counter() - started
    return built, compiled


def depth_scaling(depths: tuple[int, ...] = DEPTHS, postgres: str | None = None) -> list[dict[str, float]]:
    """Time, per depth, ``import --branches`` of :func:`nested_session` (a fresh process,
    :func:`measure`) and building and compiling a chain of branches (:func:`chain_seconds`,
    SQLite, and on PostgreSQL when ``postgres`` names a database URL; each depth's chain
    gets fresh conversations there, named after a random prefix).

    Returns one row per depth: ``depth``, ``import_s``, ``chain_s``, ``compile_s`` (and
    ``pg_chain_s``, ``pg_compile_s`` with ``postgres``).
    """
    rows = []
    for depth in depths:
        row: dict[str, float] = {"depth": depth, "import_s": measure("nested", depth)["seconds"]}
        with tempfile.TemporaryDirectory() as folder:
            row["chain_s"], row["compile_s"] = chain_seconds(str(Path(folder) / "chain.db"), depth)
        if postgres:
            import uuid

            database = _fresh_postgres(postgres, f"bench_{uuid.uuid4().hex[:8]}")
            try:
                row["pg_chain_s"], row["pg_compile_s"] = chain_seconds(database[1], depth)
            finally:
                _drop_postgres(postgres, database[0])
        rows.append(row)
        print_depths(rows[-1:], header=len(rows) == 1, previous=rows[-2] if len(rows) > 1 else None)
    return rows


def _fresh_postgres(url: str, name: str) -> tuple[str, str]:
    """Create database ``name`` on the server of ``url``; return its name and URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name, url.rsplit("/", 1)[0] + "/" + name


def _drop_postgres(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def print_depths(
    rows: list[dict[str, float]], header: bool = True, previous: dict[str, float] | None = None
) -> None:
    """Print seconds per depth and, in brackets, the ratio to the row before (2 when linear, 4 when quadratic)."""
    keys = [k for k in ("import_s", "chain_s", "compile_s", "pg_chain_s", "pg_compile_s") if k in rows[0]]
    if header:
        print(f"{'depth':>6s} " + " ".join(f"{k:>18s}" for k in keys), flush=True)
    for row in rows:
        cells = []
        for key in keys:
            ratio = f"(x{row[key] / previous[key]:.1f})" if previous and previous.get(key) else ""
            cells.append(f"{row[key]:10.2f} {ratio:>7s}")
        print(f"{int(row['depth']):6d} " + " ".join(cells), flush=True)
        previous = row


if __name__ == "__main__":
    if sys.argv[1:2] == ["depth"]:
        # python bench/bench_branches.py depth [--postgres URL] [100 200 400 800]
        argv = sys.argv[2:]
        url = None
        if argv[:1] == ["--postgres"]:
            url, argv = argv[1], argv[2:]
        depth_scaling(tuple(int(a) for a in argv) or DEPTHS, url)
    elif sys.argv[1:2] == ["cache"]:
        with tempfile.TemporaryDirectory() as folder:
            count = int(sys.argv[2]) if len(sys.argv) > 2 else CACHE_REQUESTS
            print_cache_shares(branch_cache_shares(Path(folder), requests=count))
    else:
        _cli(sys.argv[1:])
