"""Concurrency: two processes appending and one compressing the same store file at once.

Each appender writes its own generated agent history (every message tagged with the
source's name, distinct chain seeds) in many small appends of one to three whole turns,
reopening the store every few appends as separate ``compaction import`` runs would.  The
compressor runs :meth:`Compactor.tick` in a loop until both appenders are done, then once
more.  The three start together (a barrier of files) and their exit codes and stderr are
captured.

Afterwards: every message of each source is stored exactly once and in the source's order,
seqs are dense, no process failed or printed ``database is locked`` (or anything at all on
stderr), and the level-1 summaries form a contiguous chain from seq 0.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compaction import Compactor, Recipe, Store
from compaction.blocks import Message, canonical_json

TURNS = 200  # 4 messages a turn: 800 messages per appender
REOPEN_EVERY = 8
RECIPE = Recipe(chunk_target_tokens=300)
WORDS = "alpha beta gamma delta parser store index chunk summary budget window token tool result".split()


def turns(name: str, count: int) -> list[list[Message]]:
    """Return ``count`` whole turns of a generated history; every message names ``name``."""
    rng = random.Random(name)
    out = []
    for turn in range(count):
        tag = f"[{name}:{turn}]"
        words = " ".join(rng.choices(WORDS, k=rng.randint(5, 30)))
        call = f"call_{name}_{turn}"
        out.append([
            Message("user", ({"type": "text", "text": f"{tag} please {words}"},)),
            Message("assistant", (
                {"type": "text", "text": f"{tag} on it"},
                {"type": "tool_use", "id": call, "name": "bash", "input": {"cmd": rng.choice(WORDS)}},
            )),
            Message("user", ({"type": "tool_result", "tool_use_id": call, "content": f"{tag} {words}"},)),
            Message("assistant", ({"type": "text", "text": f"{tag} done"},)),
        ])
    return out


def _wait_for_go(workdir: Path, name: str) -> None:
    (workdir / f"ready-{name}").touch()
    while not (workdir / "go").exists():
        time.sleep(0.005)


def append_worker(store_path: str, workdir: str, name: str) -> None:
    """Append ``name``'s history in small batches of whole turns."""
    work = Path(workdir)
    history = turns(name, TURNS)
    rng = random.Random(f"batches-{name}")
    Store(":memory:").append(history[0])  # warm the encoding before the barrier
    _wait_for_go(work, name)
    store = Store(store_path)
    index = appends = 0
    while index < len(history):
        size = rng.randint(1, 3)
        batch = [m for turn in history[index : index + size] for m in turn]
        store.append(batch, chain_seed=f"{name}-{index}")
        index += size
        appends += 1
        if appends % REOPEN_EVERY == 0:
            store.close()
            store = Store(store_path)
    store.close()
    print(appends)


def compress_worker(store_path: str, workdir: str) -> None:
    """Tick the compactor until both appenders are done, then once more."""
    work = Path(workdir)
    Store(":memory:").append(turns("warm", 1)[0])
    _wait_for_go(work, "compressor")
    ticks = 0
    with Store(store_path) as store:
        compactor = Compactor(store, RECIPE)
        while not (work / "stop").exists():
            compactor.tick()
            ticks += 1
        compactor.tick()
    print(ticks + 1)


_RUN = (
    "import sys; sys.path.insert(0, {tests!r}); import test_concurrency as t; "
    "t.{function}(*sys.argv[1:])"
)


def _spawn(function: str, *args: str) -> subprocess.Popen[str]:
    code = _RUN.format(tests=str(Path(__file__).parent), function=function)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_two_appenders_and_a_compressor_lose_nothing(tmp_path: Path) -> None:
    store_path = tmp_path / "shared.db"
    Store(store_path).close()
    appenders = {name: _spawn("append_worker", str(store_path), str(tmp_path), name) for name in ("A", "B")}
    compressor = _spawn("compress_worker", str(store_path), str(tmp_path))
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"ready-{n}").exists() for n in ("A", "B", "compressor")):
        assert time.monotonic() < deadline, "the workers did not start"
        assert all(p.poll() is None for p in (*appenders.values(), compressor)), "a worker died at start"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    results = {}
    for name, process in appenders.items():
        results[name] = process.communicate(timeout=50)
    (tmp_path / "stop").touch()
    results["compressor"] = compressor.communicate(timeout=50)
    codes = {name: p.returncode for name, p in (*appenders.items(), ("compressor", compressor))}
    for name, (_out, err) in results.items():
        assert "database is locked" not in err, f"{name}: {err}"
        assert err == "", f"{name} wrote to stderr:\n{err}"
    assert codes == {"A": 0, "B": 0, "compressor": 0}, codes
    appends = {name: int(results[name][0]) for name in ("A", "B")}
    ticks = int(results["compressor"][0])

    db = sqlite3.connect(store_path)
    try:
        rows = db.execute("SELECT seq, role, content FROM messages ORDER BY seq").fetchall()
        l1 = db.execute(
            "SELECT start_seq, end_seq FROM summaries WHERE level = 1 ORDER BY start_seq"
        ).fetchall()
    finally:
        db.close()
    assert [r[0] for r in rows] == list(range(len(rows))), "seqs are not dense"
    stored: dict[str, list[tuple[str, object]]] = {"A": [], "B": []}
    for _seq, role, content in rows:
        blocks = json.loads(content)
        text = json.dumps(blocks)
        owner = "A" if "[A:" in text else "B"
        assert ("[B:" in text) != (owner == "A"), f"a message of neither or both sources: {text[:80]}"
        stored[owner].append((role, blocks))
    for name in ("A", "B"):
        sent = [m for turn in turns(name, TURNS) for m in turn]
        expected = [(m.role, json.loads(canonical_json(list(m.content)))) for m in sent]
        assert len(stored[name]) == len(expected), f"{name}: {len(stored[name])} stored, {len(expected)} sent"
        assert stored[name] == expected, f"{name}: messages lost, duplicated or out of order"
    position = 0
    for start, end in l1:
        assert start == position, f"level-1 summaries leave a gap or overlap at {position}"
        position = end
    assert position > 0, "the compressor summarized nothing"
    interleaved = sum(1 for a, b in zip(rows, rows[1:], strict=False) if ("[A:" in a[2]) != ("[A:" in b[2]))
    print(f"{appends['A']} + {appends['B']} appends, {len(rows)} messages ({interleaved} switches between "
          f"sources), {ticks} compress ticks, {len(l1)} level-1 summaries")
