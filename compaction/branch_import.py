"""Import the branches a pi session tree left as branches of a store, instead of dropping them.

A pi session is a tree: entries carry ``id`` / ``parentId``, and going back to an earlier
message and going on from there leaves the old path in the file.  The pi parser returns
the active branch (root to the last entry) and reports the entries on the others;
``compaction import --branches`` imports that active branch as usual and then, with
:func:`import_session_branches`, every other leaf's path as a branch of the conversation
(:meth:`~compaction.store.scope.ConversationScope.branch`): forked where it leaves the
conversation (or an earlier branch) it shares the longest prefix with, so nothing shared is
stored twice.  Each path is read by the pi parser itself, from the file's lines on that path
(the session line and the entries from the root to the leaf), so a branch's messages are
exactly what importing that path alone would give.

Only pi sessions are trees this way; other formats import as one conversation.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .blocks import Message
from .formats import load_transcript
from .store.base import HistoryStore
from .store.factory import open_store

__all__ = ["ImportedBranch", "import_session_branches", "session_leaves"]


@dataclass(frozen=True)
class ImportedBranch:
    """One branch a session tree left, as imported.

    Attributes:
        name: the branch's conversation name (``CONVERSATION@LEAF_ID``).
        parent: the conversation it forks from.
        fork_seq: where it forks (it shares the parent's messages before it).
        messages: the messages on its path (shared ones included).
        added: the messages this import added to it (0 when imported before).
    """

    name: str
    parent: str
    fork_seq: int
    messages: int
    added: int


def _entries(text: str) -> list[tuple[int, dict[str, Any]]]:
    """The JSON object lines of a session, with their index (lines that are not one are left out)."""
    out = []
    for index, line in enumerate(text.splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append((index, entry))
    return out


def session_leaves(text: str) -> list[list[int]]:
    """Return, for each leaf of a pi session tree but the last entry's, the line indexes of its path.

    A path is the session line(s) and the entries from the root to the leaf, in file order.
    A session that is not a tree (no ``parentId``) has none.
    """
    entries = _entries(text)
    nodes = {e["id"]: (i, e) for i, e in entries if isinstance(e.get("id"), str) and e.get("type") != "session"}
    if not any("parentId" in e for _i, e in nodes.values()):
        return []
    sessions = [i for i, e in entries if e.get("type") == "session"]
    has_child = {e.get("parentId") for _i, e in nodes.values()}
    leaves = [node for node in nodes if node not in has_child]
    last = max(nodes, key=lambda node: nodes[node][0]) if nodes else None
    paths = []
    for leaf in sorted(leaves, key=lambda node: nodes[node][0]):
        if leaf == last:
            continue
        path: list[int] = []
        node: Any = leaf
        seen: set[str] = set()
        while isinstance(node, str) and node in nodes and node not in seen:
            seen.add(node)
            path.append(nodes[node][0])
            node = nodes[node][1].get("parentId")
        if isinstance(node, str) and node not in seen:  # a parent not in the file: the path is broken
            continue
        paths.append(sorted(sessions + path))
    return paths


def _common(a: list[str], b: list[str]) -> int:
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def import_session_branches(location: str | Path, transcript: str | Path, conversation: str) -> list[ImportedBranch]:
    """Import every branch a pi session tree left as a branch of ``conversation`` in the store at ``location``.

    Call it after importing the transcript's active branch into ``conversation``.  Each leaf's
    path becomes the conversation ``CONVERSATION@LEAF_ID``, forked from the conversation (the
    main one or a branch made before) whose messages it shares the longest prefix with, at
    the end of that prefix; importing again adds nothing.  A path whose messages another
    conversation already holds whole (a leaf that is not a message) is not made a branch.

    Returns:
        The branches, in file order of their leaves.

    Raises:
        InvalidTranscript: a path could not be parsed.
        StoreError: as the store's ``branch`` and ``append``.
    """
    text = Path(transcript).read_text(encoding="utf-8")
    lines = text.splitlines()
    with open_store(location, create=False, conversation=conversation) as main:
        known: dict[str, list[str]] = {conversation: [m.fingerprint() for m in main.messages()]}
    made: list[ImportedBranch] = []
    entries = dict(_entries(text))
    for path in session_leaves(text):
        leaf_id = str(entries[path[-1]].get("id"))
        name = f"{conversation}@{leaf_id}"
        parsed = _parse_path(transcript, [lines[i] for i in path])
        prints = [m.fingerprint() for m in parsed]
        if name not in known and any(_common(prints, held) == len(prints) for held in known.values()):
            continue  # nothing of its own: a leaf that adds no message
        parent, fork = max(((n, _common(prints, held)) for n, held in known.items() if n != name), key=lambda c: c[1])
        with open_store(location, create=False, conversation=parent) as source:
            existing = {info.name: info for info in source.conversations()}
            if name not in existing:
                source.branch(name, fork)
            else:
                parent, fork = existing[name].parent or parent, existing[name].fork_seq or 0
        with open_store(location, conversation=name) as branch:
            added = _append(branch, parsed)
            known[name] = [m.fingerprint() for m in branch.messages()]
        made.append(ImportedBranch(name, parent, fork, len(parsed), added))
    return made


def _append(store: HistoryStore, messages: list[Message]) -> int:
    return store.append(messages, chain_seed="pi")


def _parse_path(transcript: str | Path, lines: list[str]) -> list[Message]:
    """Parse the lines of one path as a pi session of their own (named after the transcript in errors)."""
    handle, name = tempfile.mkstemp(prefix=Path(transcript).stem + ".", suffix=".jsonl")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        return list(load_transcript(name, format="pi").messages)
    finally:
        os.unlink(name)
