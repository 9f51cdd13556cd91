"""Crash safety: SIGKILL a process that imports and compresses, at random points, many times.

A worker process appends a generated 1,500-message agent history in batches of 50 (each
append is one transaction, as an import is), then compresses it with small chunks
(``chunk_target_tokens=400``: ~160 level-1 summaries, merges up to level 3).  It notes each
committed step in a log file.  Workers are forked from this (warm) process, so a kill lands
in the work and not in interpreter start-up.

Sequences of up to three kills each: the worker is killed (SIGKILL) after a seeded random
delay, the store is checked, the worker is restarted on the same store and may be killed
again; finally a rerun completes.  The first delay of a sequence falls in the import phase
or the compress phase alternately (measured on an uninterrupted reference run), so both
phases are hit.  After every kill:

* the store opens and ``PRAGMA integrity_check`` is ``ok``;
* messages are dense from seq 0, each equal to the source message at that position (role,
  content, import key: no duplicates), at a batch boundary (appends are atomic), and at
  least as many as the log says were committed;
* every summary is whole: non-empty text, ``0 <= start < end <= messages``, provenance that
  parses as a JSON object; level 1 is a contiguous chain from 0 reaching at least the
  committed frontier; levels are contiguous from 1; every merge's children exist one
  level down and tile its range exactly; no failure was recorded.

After each sequence the rerun's store equals the uninterrupted run's store: messages and
summaries (ids, levels, ranges, text, provenance) identical, ``created_at`` aside.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from compaction import Compactor, Recipe, Store
from compaction.blocks import Message, canonical_json
from compaction.tokens.counting import count_text

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL")

MESSAGES = 1500
BATCH = 50
KILLS = 22
KILLS_PER_SEQUENCE = 3
SEED = 20240607
RECIPE = Recipe(chunk_target_tokens=400)
WORDS = (
    "alpha beta gamma delta parser store index chunk summary budget window token request tool "
    "result file path error fix test commit branch merge schema cursor retry"
).split()


def agent_history(n: int, seed: int) -> list[Message]:
    """Return ``n`` messages of a generated agent session: prompt, call, result, answer, ..."""
    rng = random.Random(seed)
    out: list[Message] = []
    turn = 0
    while len(out) < n:
        call = f"call_{seed}_{turn}"
        words = lambda k: " ".join(rng.choices(WORDS, k=k))  # noqa: E731
        prompt = f"[{seed}:{turn}] please {words(rng.randint(10, 40))}"
        out.append(Message("user", ({"type": "text", "text": prompt},)))
        out.append(Message("assistant", (
            {"type": "text", "text": words(rng.randint(5, 30))},
            {"type": "tool_use", "id": call, "name": "bash", "input": {"cmd": f"grep {rng.choice(WORDS)}"}},
        )))
        result = "\n".join(words(12) for _ in range(rng.randint(1, 8)))
        out.append(Message("user", ({"type": "tool_result", "tool_use_id": call, "content": result},)))
        out.append(Message("assistant", ({"type": "text", "text": f"done: {words(rng.randint(5, 25))}"},)))
        turn += 1
    return out[:n]


SOURCE = agent_history(MESSAGES, 7)


def _work(path: str, log_path: str) -> None:
    """The worker: append the source in batches, then compress; note each committed step."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(line: str) -> None:
        os.write(log, f"{time.monotonic():.4f} {line}\n".encode())

    note("start")
    store = Store(path)
    try:
        for start in range(0, len(SOURCE), BATCH):
            store.append(SOURCE[start : start + BATCH], chain_seed=f"crash-test-{start}")
            note(f"appended {min(start + BATCH, len(SOURCE))}")
        note("imported")
        frontier = store.summary_frontier(1)
        Compactor(store, RECIPE).tick(progress=lambda done, total: note(f"l1 {frontier + done}"))
        note("done")
    finally:
        store.close()


def _log(log_path: Path) -> list[tuple[float, str]]:
    if not log_path.exists():
        return []
    out = []
    for line in log_path.read_text().splitlines():
        stamp, _, what = line.partition(" ")
        out.append((float(stamp), what))
    return out


def _expected_keys() -> list[str]:
    """The import key of every source message (the store's hash chain, per batch)."""
    import hashlib

    keys = []
    for start in range(0, len(SOURCE), BATCH):
        key = hashlib.sha256(f"crash-test-{start}".encode()).hexdigest()
        for message in SOURCE[start : start + BATCH]:
            key = hashlib.sha256((key + message.fingerprint()).encode("ascii")).hexdigest()
            keys.append(key)
    return keys


KEYS = _expected_keys()


def _dump(path: Path) -> tuple[list[tuple], list[tuple]]:
    db = sqlite3.connect(path)
    try:
        messages = db.execute("SELECT seq, role, content, import_key FROM messages ORDER BY seq").fetchall()
        summaries = db.execute(
            "SELECT id, level, start_seq, end_seq, text, provenance FROM summaries ORDER BY id"
        ).fetchall()
    finally:
        db.close()
    return messages, summaries


def _check_store(path: Path, log: list[tuple[float, str]]) -> int:
    """Assert every invariant of a store left by a killed worker; return its message count."""
    committed = max((int(w.split()[1]) for _, w in log if w.startswith("appended ")), default=0)
    l1_committed = max((int(w.split()[1]) for _, w in log if w.startswith("l1 ")), default=0)
    with Store(path) as store:  # opens without error
        assert store._db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert store.failures() == []
    messages, summaries = _dump(path)
    n = len(messages)
    assert [m[0] for m in messages] == list(range(n)), "seqs are not dense from 0"
    assert n >= committed, f"lost committed messages: {n} stored, {committed} committed"
    assert n % BATCH == 0 or n == len(SOURCE), f"a partial append is visible: {n} messages"
    for (seq, role, content, key), source, expected_key in zip(messages, SOURCE, KEYS, strict=False):
        assert (role, json.loads(content), key) == (
            source.role, json.loads(canonical_json(list(source.content))), expected_key,
        ), f"message {seq} differs from the source"
    by_id = {}
    for sid, level, start, end, text, provenance in summaries:
        assert text.strip(), f"summary {sid} has empty text"
        assert 0 <= start < end <= n, f"summary {sid} has a bad range [{start}, {end}) of {n} messages"
        parsed = json.loads(provenance)
        assert isinstance(parsed, dict)
        by_id[sid] = (level, start, end, parsed)
    levels = sorted({v[0] for v in by_id.values()})
    assert levels == list(range(1, len(levels) + 1)), f"levels are not contiguous: {levels}"
    chain = sorted((start, end) for level, start, end, _ in by_id.values() if level == 1)
    position = 0
    for start, end in chain:
        assert start == position, f"level-1 summaries leave a gap or overlap at {position}"
        position = end
    assert position >= l1_committed, f"lost committed level-1 summaries: frontier {position} < {l1_committed}"
    for sid, (level, start, end, provenance) in by_id.items():
        if level == 1:
            continue
        children = [by_id[c] for c in provenance["children"]]
        assert all(c[0] == level - 1 for c in children), f"summary {sid}: children not one level down"
        tiles = [(c[1], c[2]) for c in children]
        assert tiles[0][0] == start and tiles[-1][1] == end, f"summary {sid}: children do not span it"
        gaps = [a for a, b in zip(tiles, tiles[1:], strict=False) if a[1] != b[0]]
        assert not gaps, f"summary {sid}: children do not tile"
    return n


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.mark.slow
def test_sigkill_during_import_and_compress_loses_nothing(tmp_path: Path) -> None:
    count_text("warm the encoding before forking")
    context = multiprocessing.get_context("fork")

    def launch(store: Path, log: Path) -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_work, args=(str(store), str(log)))
        process.start()
        return process

    # The uninterrupted run: the expected store, and how long each phase takes.
    reference, reference_log = tmp_path / "reference.db", tmp_path / "reference.log"
    worker = launch(reference, reference_log)
    worker.join(60)
    assert worker.exitcode == 0
    log = _log(reference_log)
    began = log[0][0]
    import_seconds = next(t for t, w in log if w == "imported") - began
    total_seconds = log[-1][0] - began
    assert log[-1][1] == "done"
    expected = _dump(reference)
    assert len(expected[0]) == MESSAGES and len(expected[1]) > 100

    rng = random.Random(SEED)
    kills: list[tuple[float, str]] = []  # (delay, phase)
    sequence = 0
    while len(kills) < KILLS:
        assert sequence < 3 * KILLS, f"the workers finish before the kills: {len(kills)} kills so far"
        store, log_path = tmp_path / f"crash-{sequence}.db", tmp_path / f"crash-{sequence}.log"
        _remove(store)
        for attempt in range(KILLS_PER_SEQUENCE):
            if attempt == 0 and sequence % 2 == 0:
                delay = rng.uniform(0.0, import_seconds)
            elif attempt == 0:
                delay = rng.uniform(import_seconds, total_seconds)
            else:
                delay = rng.uniform(0.0, total_seconds)
            worker = launch(store, log_path)
            worker.join(delay)
            if not worker.is_alive():
                assert worker.exitcode == 0, f"the worker failed (exit code {worker.exitcode})"
                break
            os.kill(worker.pid, signal.SIGKILL)
            worker.join(10)
            if worker.exitcode == 0:
                break  # it finished between the check and the kill: not a kill
            assert worker.exitcode == -signal.SIGKILL, f"the worker failed (exit code {worker.exitcode})"
            log = _log(log_path)
            starts = [i for i, (_, w) in enumerate(log) if w == "start"]
            this_run = log[starts[-1] :] if starts else []
            phase = "compress" if any(w == "imported" for _, w in this_run) else "import"
            kills.append((delay, phase))
            _check_store(store, log)
        # The rerun completes with the same result as the uninterrupted run.
        worker = launch(store, log_path)
        worker.join(60)
        assert worker.exitcode == 0
        assert _check_store(store, _log(log_path)) == MESSAGES
        assert _dump(store) == expected, f"sequence {sequence}: the rerun differs from an uninterrupted run"
        sequence += 1
    phases = [phase for _, phase in kills]
    assert phases.count("import") >= 3 and phases.count("compress") >= 3, phases
    print(f"{len(kills)} kills in {sequence} sequences: {phases.count('import')} during import, "
          f"{phases.count('compress')} during compress; delays "
          f"{', '.join(f'{d:.2f}' for d, _ in kills)} s (run: import {import_seconds:.2f} s, "
          f"total {total_seconds:.2f} s)")
