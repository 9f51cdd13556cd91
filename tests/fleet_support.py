"""Helpers for the fleet tests: fleets of stores made from shipped transcripts, dumps, checks, a dying task.

Worker processes (a Dask ``LocalCluster``, a process pool) import this module by name to run
:func:`compress_or_die`; spawned workers get the tests directory on ``sys.path`` from their
parent.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

from compaction import Recipe
from compaction.fleet import ConversationResult, FleetSettings, FleetTarget, compress_conversation
from compaction.pipeline import import_transcript
from compaction.store import open_store

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: Small shipped transcripts of several formats (see examples/README.md for sources and licences).
TRANSCRIPTS = {
    "swe_agent": EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj",
    "cc_representative": EXAMPLES / "claude-code" / "claude-code-log__representative_messages.jsonl",
    "cc_todowrite": EXAMPLES / "claude-code" / "claude-code-log__todowrite_examples.jsonl",
    "openhands": EXAMPLES / "openhands__multi-swe-bench__output.jsonl",
}

#: Small chunks and a small fan-out, so every transcript above gets L1 summaries and merges.
RECIPE = Recipe(chunk_target_tokens=300, chunk_min_messages=2, merge_fanout=3)


def make_fleet(directory: Path, names: list[str] | None = None) -> Path:
    """Import each transcript into ``directory/conversations/<name>.sqlite`` (the proxy's layout); return ``directory``."""
    (directory / "conversations").mkdir(parents=True)
    for name in names or list(TRANSCRIPTS):
        with open_store(directory / "conversations" / f"{name}.sqlite") as store:
            import_transcript(store, TRANSCRIPTS[name])
    return directory


def import_into(location: str, name: str) -> None:
    """Import the transcript ``name`` into the store at ``location`` (created)."""
    with open_store(location) as store:
        import_transcript(store, TRANSCRIPTS[name])


def copy_fleet(source: Path, destination: Path) -> Path:
    """Copy a fleet directory (every store file) to ``destination``."""
    shutil.copytree(source, destination)
    return destination


def dump(location: str, conversation: str | None = None) -> dict[str, Any]:
    """Return what a conversation holds that compression writes: message count and every summary it shows, field by field."""
    with open_store(location, create=False, conversation=conversation) as store:
        return {
            "messages": len(store),
            "summaries": [
                (s.id, s.level, s.start_seq, s.end_seq, s.text, s.provenance) for s in store.summaries()
            ],
        }


def dump_fleet(targets: list[FleetTarget]) -> dict[str, dict[str, Any]]:
    """Return :func:`dump` of every target, by conversation name."""
    return {t.name: dump(t.location, t.conversation) for t in targets}


def assert_consistent(location: str, conversation: str | None = None) -> None:
    """Assert a store's own integrity and the coverage of its summaries.

    SQLite: ``PRAGMA integrity_check`` is ``ok``.  Every backend: level-1 summaries tile
    ``[0, frontier)`` without gap or overlap inside the stored messages; levels are
    contiguous from 1; each higher summary's children (provenance) are one level down and
    tile exactly its range.
    """
    with open_store(location, create=False, conversation=conversation) as store:
        db = getattr(store, "_db", None)
        if location.endswith(".sqlite"):
            assert db is not None and db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        n = len(store)
        summaries = store.summaries()
    by_id = {s.id: s for s in summaries}
    levels = sorted({s.level for s in summaries})
    assert levels == list(range(1, len(levels) + 1)), f"{location}: levels not contiguous: {levels}"
    position = 0
    for s in sorted((s for s in summaries if s.level == 1), key=lambda s: s.start_seq):
        assert s.start_seq == position, f"{location}: level-1 gap or overlap at {position}"
        assert s.text.strip(), f"{location}: summary {s.id} is empty"
        position = s.end_seq
    assert position <= n, f"{location}: summaries past the {n} stored messages"
    for s in summaries:
        if s.level == 1:
            continue
        children = [by_id[c] for c in s.provenance["children"]]
        assert all(c.level == s.level - 1 for c in children)
        assert children[0].start_seq == s.start_seq and children[-1].end_seq == s.end_seq
        assert all(a.end_seq == b.start_seq for a, b in zip(children, children[1:], strict=False))


def compress_or_die(
    target: FleetTarget, settings: FleetSettings, marker_dir: str, victim: str
) -> ConversationResult:
    """Compress ``target``; on the first attempt at ``victim``, SIGKILL this worker after two summaries commit.

    The marker file ``marker_dir/<victim>`` gets one line per attempt (the worker's pid); a
    first line says the first attempt happened, so a retry (on a restarted or another worker)
    runs plainly.
    """
    marker = Path(marker_dir) / target.name.replace("/", "__")
    first = not marker.exists()
    if target.name == victim:
        with marker.open("a") as attempts:
            attempts.write(f"{os.getpid()}\n")
    if target.name == victim and first:
        from compaction.store.sqlite import SQLiteStore

        original = SQLiteStore.add_summary
        added = [0]

        def add_then_die(self: SQLiteStore, *args: Any, **kwargs: Any) -> int:
            summary_id = original(self, *args, **kwargs)
            added[0] += 1
            if added[0] == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return summary_id

        SQLiteStore.add_summary = add_then_die  # type: ignore[method-assign]  (this process dies with it)
    return compress_conversation(target, settings)
