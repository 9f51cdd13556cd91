"""Soak: three appenders, a compressor and a compiler on one store file for a minute (issue 10).

Five processes share one SQLite store (loopback only: the summarizer is the offline
extractive one) for ``COMPACTION_SOAK_SECONDS`` (default 60):

* three **appenders**, each writing its own generated agent history (every message tagged
  with its name; user prompts, single and parallel tool calls answered in one message,
  small images) in appends of one to three whole turns, reopening the store every few
  appends as separate ``compaction import`` runs would, and re-sending a batch it already
  appended now and then (which must add nothing);
* a **compressor**, alternating :meth:`Compactor.tick` and :func:`compress_and_compile`
  under a budget (which must fit, unless the history appended meanwhile outgrew it);
* a **compiler**, compiling requests (OpenAI and Anthropic in turn) under the budget and
  checking each one: within the budget, valid JSON, the provider's grammar (tool pairing,
  images only where they may be).

Afterwards nothing may be lost, duplicated or invalid: every appended message is stored
exactly once and in its appender's order, seqs are dense, the summaries are well formed
(level-1 summaries a contiguous chain from seq 0, each higher one tiled exactly by the
level below, no empty text), no summarizer failure was recorded, every process exited 0
with nothing on stderr (so no ``database is locked``), and the compiler checked requests.
"""

from __future__ import annotations

import base64
import json
import os
import random
import sqlite3
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from compaction import Compactor, Message, OverBudget, Recipe, Store, compile_request, compress_and_compile

SECONDS = float(os.environ.get("COMPACTION_SOAK_SECONDS", "60"))
APPENDERS = ("A", "B", "C")
REOPEN_EVERY = 6
RESEND_EVERY = 7
BUDGET = 16000
RECIPE = Recipe(chunk_target_tokens=400, budget_tokens=BUDGET)
WORDS = "alpha beta gamma delta parser store index chunk summary budget window token tool result".split()


def _png(seed: int) -> str:
    """Return a small PNG (2 to 4 pixels a side) as base64; a worker does not import hypothesis."""
    width, height = 2 + seed % 3, 2 + seed % 2
    rows = b"".join(b"\x00" + bytes((seed + x + y) % 256 for x in range(width * 3)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def turn(name: str, number: int) -> list[Message]:
    """Return turn ``number`` of ``name``'s history (the same every time it is asked for)."""
    rng = random.Random(f"{name}:{number}")
    tag = f"[{name}:{number}]"
    words = " ".join(rng.choices(WORDS, k=rng.randint(5, 30)))
    prompt: list[dict[str, Any]] = [{"type": "text", "text": f"{tag} please {words}"}]
    if rng.random() < 0.1:
        prompt.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png(number)}})
    calls = [f"call_{name}_{number}_{i}" for i in range(rng.choice((0, 1, 1, 2)))]
    messages = [Message("user", tuple(prompt))]
    if calls:
        messages.append(Message("assistant", (
            {"type": "text", "text": f"{tag} on it"},
            *({"type": "tool_use", "id": c, "name": "bash", "input": {"cmd": rng.choice(WORDS)}} for c in calls),
        )))
        messages.append(Message("user", tuple(
            {"type": "tool_result", "tool_use_id": c, "content": f"{tag} {c} {words}"} for c in calls
        )))
    messages.append(Message("assistant", ({"type": "text", "text": f"{tag} done: {words}"},)))
    return messages


def _wait_for_go(workdir: Path, name: str) -> float:
    """Say this worker is ready, wait for the go file and return the deadline it holds."""
    (workdir / f"ready-{name}").touch()
    while not (workdir / "go").exists():
        time.sleep(0.005)
    return float((workdir / "go").read_text())


def append_worker(store_path: str, workdir: str, name: str) -> None:
    """Append ``name``'s turns in batches until the deadline; print how many turns were appended."""
    work = Path(workdir)
    rng = random.Random(f"batches-{name}")
    Store(":memory:").append(turn(name, 0))  # warm the encoding before the barrier
    end = _wait_for_go(work, name)
    store = Store(store_path)
    done = appends = 0
    previous: tuple[list[Message], str] | None = None
    while time.time() < end:
        size = rng.randint(1, 3)
        batch = [m for number in range(done, done + size) for m in turn(name, number)]
        seed = f"{name}-{done}"
        added = store.append(batch, chain_seed=seed)
        if added != len(batch):
            raise AssertionError(f"{name}: append of {len(batch)} new messages added {added}")
        done += size
        appends += 1
        if previous is not None and appends % RESEND_EVERY == 0:
            again = store.append(*previous[:1], chain_seed=previous[1])
            if again:
                raise AssertionError(f"{name}: re-sending a batch added {again} messages")
        previous = (batch, seed)
        if appends % REOPEN_EVERY == 0:
            store.close()
            store = Store(store_path)
        time.sleep(rng.uniform(0.05, 0.15))
    store.close()
    print(json.dumps({"turns": done, "appends": appends}))


def compress_worker(store_path: str, workdir: str) -> None:
    """Tick the compactor and compress for the budget, in turn, until the deadline."""
    work = Path(workdir)
    Store(":memory:").append(turn("warm", 0))
    end = _wait_for_go(work, "compressor")
    ticks = fitted = over = 0
    with Store(store_path) as store:
        compactor = Compactor(store, RECIPE)
        while time.time() < end:
            if ticks % 2:
                compactor.tick()
            elif len(store):
                try:
                    compiled, _reports = compress_and_compile(store, RECIPE)
                except OverBudget as err:  # true only if the newest turns alone exceed the budget
                    assert err.stage in ("live window", "unsummarized tail", "summaries"), err
                    over += 1
                else:
                    assert compiled.tokens <= BUDGET, compiled.tokens
                    fitted += 1
            ticks += 1
            time.sleep(0.05)
        compactor.tick()
    print(json.dumps({"ticks": ticks + 1, "fitted": fitted, "over_budget": over}))


def compile_worker(store_path: str, workdir: str) -> None:
    """Compile and check requests until the deadline; print how many were checked."""
    from strategies import check_provider_grammar, check_tool_pairing, payload_json

    work = Path(workdir)
    Store(":memory:").append(turn("warm", 0))
    end = _wait_for_go(work, "compiler")
    checked = over = 0
    with Store(store_path) as store:
        while time.time() < end:
            if not len(store):
                time.sleep(0.01)
                continue
            format = ("openai", "anthropic")[checked % 2]
            try:
                compiled = compile_request(store, RECIPE, format=format)
            except OverBudget:  # compile never summarizes: until the compressor catches up
                over += 1
                time.sleep(0.02)
                continue
            assert compiled.tokens <= BUDGET, f"{compiled.tokens} tokens over the budget of {BUDGET}"
            body = payload_json(compiled.request.payload)  # valid JSON
            check_tool_pairing(body, format)
            check_provider_grammar(body, format)
            checked += 1
    print(json.dumps({"checked": checked, "over_budget": over}))


_RUN = "import sys; sys.path.insert(0, {tests!r}); import test_soak as t; t.{function}(*sys.argv[1:])"


def _spawn(function: str, *args: str) -> subprocess.Popen[str]:
    code = _RUN.format(tests=str(Path(__file__).parent), function=function)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _check_summaries(db: sqlite3.Connection, messages: int) -> dict[int, int]:
    rows = db.execute("SELECT level, start_seq, end_seq, text, provenance FROM summaries ORDER BY level, start_seq").fetchall()
    by_level: dict[int, list[tuple[int, int]]] = {}
    for level, start, end, text, provenance in rows:
        assert level >= 1 and 0 <= start < end <= messages, (level, start, end)
        assert text.strip(), f"an empty level-{level} summary of [{start}, {end})"
        assert isinstance(json.loads(provenance), dict)
        by_level.setdefault(level, []).append((start, end))
    position = 0
    for start, end in by_level.get(1, []):
        assert start == position, f"level-1 summaries leave a gap or overlap at seq {position}"
        position = end
    for level in sorted(by_level):
        if level == 1:
            continue
        below = dict(by_level[level - 1])
        for start, end in by_level[level]:
            at = start
            while at < end:
                assert at in below, f"level-{level} [{start}, {end}) is not tiled by level {level - 1} at {at}"
                at = below[at]
            assert at == end, f"level-{level} [{start}, {end}) overruns its children"
    return {level: len(spans) for level, spans in by_level.items()}


@pytest.mark.slow
def test_three_appenders_a_compressor_and_a_compiler_lose_nothing(tmp_path: Path) -> None:
    store_path = tmp_path / "shared.db"
    Store(store_path).close()
    workers = {name: _spawn("append_worker", str(store_path), str(tmp_path), name) for name in APPENDERS}
    workers["compressor"] = _spawn("compress_worker", str(store_path), str(tmp_path))
    workers["compiler"] = _spawn("compile_worker", str(store_path), str(tmp_path))
    start = time.monotonic()
    while not all((tmp_path / f"ready-{name}").exists() for name in workers):
        assert time.monotonic() - start < 30, "the workers did not start"
        died = [name for name, p in workers.items() if p.poll() is not None]
        assert not died, f"{died} died at start: {[workers[n].communicate() for n in died]}"
        time.sleep(0.01)
    (tmp_path / "go.tmp").write_text(str(time.time() + SECONDS))
    (tmp_path / "go.tmp").replace(tmp_path / "go")
    went = time.monotonic()
    results = {name: process.communicate(timeout=SECONDS + 60) for name, process in workers.items()}
    ran = time.monotonic() - went
    for name, (_out, err) in results.items():
        assert "database is locked" not in err, f"{name}: {err}"
        assert err == "", f"{name} wrote to stderr:\n{err}"
    assert {name: p.returncode for name, p in workers.items()} == dict.fromkeys(workers, 0)
    report = {name: json.loads(out) for name, (out, _err) in results.items()}

    with Store(store_path, create=False) as store:
        stored = store.messages()
        failures = store.failures()
    assert [m.seq for m in stored] == list(range(len(stored))), "seqs are not dense"
    by_owner: dict[str, list[Message]] = {name: [] for name in APPENDERS}
    for message in stored:
        owners = [name for name in APPENDERS if f"[{name}:" in json.dumps(message.content)]
        assert len(owners) == 1, f"seq {message.seq} belongs to {owners}"
        by_owner[owners[0]].append(message)
    for name in APPENDERS:
        sent = [m for number in range(report[name]["turns"]) for m in turn(name, number)]
        got = [(m.role, m.content) for m in by_owner[name]]
        assert len(got) == len(sent), f"{name}: {len(got)} stored, {len(sent)} sent"
        assert got == [(m.role, m.content) for m in sent], f"{name}: messages lost, duplicated or out of order"
    assert failures == [], failures

    db = sqlite3.connect(store_path)
    try:
        levels = _check_summaries(db, len(stored))
    finally:
        db.close()
    assert levels.get(1, 0) > 0, "the compressor summarized nothing"
    assert report["compiler"]["checked"] > 0, "the compiler checked no request"
    assert report["compressor"]["fitted"] > 0, "compress_and_compile never fitted the budget"
    print(
        f"{SECONDS:.0f} s (ran {ran:.1f} s, started in {went - start:.1f} s, checked in "
        f"{time.monotonic() - went - ran:.1f} s): {len(stored)} messages from {[report[n]['appends'] for n in APPENDERS]} appends, "
        f"summaries per level {levels}, {report['compressor']}, {report['compiler']}"
    )
