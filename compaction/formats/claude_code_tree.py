"""The tree of a Claude Code session: its rewinds and its sub-agents' sidechains, as paths of lines.

A Claude Code session file is a tree of events linked by ``parentUuid``.  The main chain
(``isSidechain`` false) forks where the user rewound or edited an earlier message: the event
continued from gets two or more children, and the events after the old child are an
abandoned branch.  A sub-agent's thread (``isSidechain: true``, older versions write it inline)
is a chain of its own: its first event's ``parentUuid`` is ``null`` (the sub-agent starts
from a fresh context, which is what Claude Code writes) or, when it shares the history
before it, a main-chain event.

:func:`session_tree` reads the links and returns, as line indexes of the file:

* ``main``: the lines the main conversation is parsed from under ``compaction import
  --branches``: every line but the main-chain events off the **active path** (root to the
  last main-chain event of the file), so the abandoned branches are not flattened into it;
* one :class:`Thread` per other leaf of the main chain (a **rewind**): the events from the
  root to that leaf, and one per leaf of each sidechain: the sidechain's events from its
  first to that leaf, preceded by the main path up to the event it forks from when it
  shares that history.

Links that do not fork: a main-chain event whose ``parentUuid`` is ``null`` (Claude Code
restarts the chain after a compaction, pointing back with ``logicalParentUuid``, which is
followed when given) or names no event of the file (a skipped line) continues the main-chain
event before it in file order, as the parser keeps them; likewise a sidechain event whose
parent is in no event of the file continues the sidechain event before it.  An event whose
``uuid`` was seen already (a resumed session repeats events) is left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SessionTree", "Thread", "path_lines", "session_tree"]


@dataclass(frozen=True)
class Thread:
    """One path of a Claude Code session other than the active one.

    Attributes:
        kind: ``"rewind"`` (a main-chain leaf off the active path) or ``"sidechain"``.
        start: the uuid of the first event of the path that is not on the path it forks
            from (stable while the file grows; it names the branch).
        lines: the line indexes (0-based, file order) of the path's events.
        sidechain_lines: those of them that are sidechain events (parsed as main-chain ones).
        shares_history: for a sidechain, whether its first event continues a main-chain
            event (else it starts a conversation of its own); always True for a rewind.
        agent_id: the sidechain's ``agentId`` when an event carries one.
        task_line: the line (1-based) of the main-chain tool result that answers the
            sub-agent's ``Task`` call (same ``agentId``), when there is one.
    """

    kind: str
    start: str
    lines: tuple[int, ...]
    sidechain_lines: frozenset[int]
    shares_history: bool
    agent_id: str | None = None
    task_line: int | None = None


@dataclass(frozen=True)
class SessionTree:
    """The paths of a Claude Code session (see the module docstring).

    Attributes:
        main: the line indexes the main conversation is parsed from (the active path's
            events and every line that is not a main-chain event).
        abandoned: how many main-chain events are off the active path.
        threads: the rewinds, then the sidechains, each in file order of its leaf.
    """

    main: tuple[int, ...]
    abandoned: int
    threads: tuple[Thread, ...]


def _entries(text: str) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for index, line in enumerate(text.splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append((index, entry))
    return out


def _parent_of(event: dict[str, Any]) -> str | None:
    parent = event.get("parentUuid")
    if isinstance(parent, str):
        return parent
    logical = event.get("logicalParentUuid")
    return logical if isinstance(logical, str) else None


def _link(
    events: list[tuple[int, dict[str, Any]]], known: set[str], *, restart_null: bool
) -> dict[str, str | None]:
    """Return each event's parent uuid among ``events`` (a chain restart continues the one before)."""
    parents: dict[str, str | None] = {}
    previous: str | None = None
    for _line, event in events:
        uuid = event["uuid"]
        parent = _parent_of(event)
        if parent is not None and parent in parents:
            parents[uuid] = parent
        elif parent is None and not restart_null:
            parents[uuid] = None
        elif parent is not None and parent in known:
            parents[uuid] = None  # a sidechain's first event: continues a main-chain event
        else:
            parents[uuid] = previous
        previous = uuid
    return parents


def _path(leaf: str, parents: dict[str, str | None]) -> list[str]:
    path: list[str] = []
    node: str | None = leaf
    while node is not None and node not in path:
        path.append(node)
        node = parents.get(node)
    return path[::-1]


def session_tree(text: str) -> SessionTree:
    """Return the active path, the rewinds and the sidechains of a Claude Code session.

    Args:
        text: the session file's text (JSONL).

    Returns:
        A :class:`SessionTree`.  A session without forks or sidechains gives one with
        ``main`` holding every line and no thread.
    """
    entries = _entries(text)
    main_events: list[tuple[int, dict[str, Any]]] = []
    side_events: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    for line, event in entries:
        uuid = event.get("uuid")
        if not isinstance(uuid, str) or uuid in seen:
            continue
        seen.add(uuid)
        (side_events if event.get("isSidechain") is True else main_events).append((line, event))
    line_of = {e["uuid"]: line for line, e in main_events + side_events}
    main_parents = _link(main_events, set(), restart_null=True)
    main_ids = set(main_parents)
    has_child = {p for p in main_parents.values() if p is not None}
    active = _path(main_events[-1][1]["uuid"], main_parents) if main_events else []
    on_active = set(active)
    off_active = {line_of[u] for u in main_ids - on_active}
    main = tuple(i for i in range(len(text.splitlines())) if i not in off_active)
    threads: list[Thread] = []
    taken = set(on_active)
    for _line, event in main_events:
        leaf = event["uuid"]
        if leaf in has_child or leaf in on_active:
            continue
        path = _path(leaf, main_parents)
        start = next(u for u in path if u not in taken)
        taken.update(path)
        threads.append(Thread("rewind", start, tuple(sorted(line_of[u] for u in path)), frozenset(), True))
    side_parents = _link(side_events, main_ids, restart_null=False)
    side_child = {p for p in side_parents.values() if p is not None}
    answers = {
        e["agentId"]: line + 1
        for line, e in main_events
        if isinstance(e.get("agentId"), str) and e.get("type") == "user"
    }
    by_uuid = dict((e["uuid"], e) for _line, e in side_events)
    taken_side: set[str] = set()
    for _line, event in side_events:
        leaf = event["uuid"]
        if leaf in side_child:
            continue
        path = _path(leaf, side_parents)
        start = next((u for u in path if u not in taken_side), path[0])
        taken_side.update(path)
        fork = _parent_of(by_uuid[path[0]])
        shares = fork is not None and fork in main_ids
        shared = _path(fork, main_parents) if shares and fork is not None else []
        agent = next(
            (by_uuid[u]["agentId"] for u in path if isinstance(by_uuid[u].get("agentId"), str)), None
        )
        side_lines = frozenset(line_of[u] for u in path)
        threads.append(
            Thread(
                "sidechain",
                start,
                tuple(sorted(side_lines | {line_of[u] for u in shared})),
                side_lines,
                shares,
                agent,
                answers.get(agent) if agent is not None else None,
            )
        )
    return SessionTree(main, len(off_active), tuple(threads))


def path_lines(text: str, keep: tuple[int, ...], sidechain: frozenset[int] = frozenset()) -> str:
    """Return ``text`` with only the lines ``keep`` (the others blank, so line numbers stay), the
    ``sidechain`` ones rewritten with ``isSidechain: false`` so the parser takes them as messages."""
    lines = text.splitlines()
    kept = set(keep)
    out = []
    for index, line in enumerate(lines):
        if index not in kept:
            out.append("")
        elif index in sidechain:
            out.append(json.dumps({**json.loads(line), "isSidechain": False}, ensure_ascii=False))
        else:
            out.append(line)
    return "\n".join(out) + "\n"
