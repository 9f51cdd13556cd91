"""The tree of a Claude Code session: its rewinds and its sub-agents' sidechains, as sets of lines.

A Claude Code session file is a tree of events linked by ``parentUuid``.  The main chain
(``isSidechain`` false) forks in two ways.  Structurally, all the time: each answer of
parallel tool calls names its own call, and hook ``progress`` events hang off the chain (in
real sessions a fork every few events; file order is their order, and the parser keeps it).
And at a **rewind**: the user went back to an earlier point and asked again, or edited a
prompt, so the event continued from has two or more children that are prompts (a person's
user messages, not tool results), and the events under the older one are an abandoned branch.
A sub-agent's thread (``isSidechain: true``, which older versions write inline) is a chain of
its own: its first event's ``parentUuid`` is ``null`` (the sub-agent starts from a fresh
context, which is what Claude Code writes) or, when it shares the history before it, a
main-chain event.

:func:`session_tree` reads the links and returns, as line indexes of the file:

* ``main``: the lines the main conversation is parsed from under ``compaction import
  --branches``: every line but the events of rewound branches, so those are not flattened
  into it (at a rewind, the prompt whose events reach furthest in the file goes on in it);
* one :class:`Thread` per rewind: its events (its whole subtree but the rewinds inside it),
  preceded by the events of what it forks from that come before it in the file;
* one :class:`Thread` per sidechain: its events, preceded the same way by the main
  conversation's when it continues a main-chain event;
* one :class:`Thread` per sub-agent whose messages newer versions carry in ``progress``
  events (``data.message``, by ``data.agentId``, under the ``Task`` call): those events.

Each thread is parsed by the Claude Code parser in file order, as the main conversation is.
Links that do not fork: a main-chain event whose ``parentUuid`` is ``null`` (Claude Code
restarts the chain after a compaction, pointing back with ``logicalParentUuid``, which is
followed when given) or names no event of the file (a skipped line) continues the main-chain
event before it in file order; likewise a sidechain event whose parent is in no event of the
file continues the sidechain event before it.  An event whose ``uuid`` was seen already (a
resumed session repeats events) is left out.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SessionTree", "Thread", "is_prompt", "json_lines", "path_lines", "session_tree", "split_lines"]


@dataclass(frozen=True)
class Thread:
    """A rewound branch or a sidechain of a Claude Code session.

    Attributes:
        kind: ``"rewind"`` or ``"sidechain"``.
        start: the uuid of its first event: the abandoned prompt, or the sidechain's first
            event (stable while the file grows; it names the branch).
        lines: the line indexes (0-based, file order) of its events and of the events it shares.
        sidechain_lines: those of them that are sidechain events (parsed as main-chain ones).
        shares_history: for a sidechain, whether its first event continues a main-chain
            event (else it starts a conversation of its own); always True for a rewind.
        agent_id: the sidechain's ``agentId`` when an event carries one.
        task_line: the line (1-based) of the main-chain tool result that answers the
            sub-agent's ``Task`` call (same ``agentId``), when there is one.
        carried_lines: lines of ``progress`` events that carry the sub-agent's messages
            (``data.message``, newer versions) instead of sidechain events; each is parsed
            as the event it carries.
        fork_line: the line index of its first event, where it leaves what it continues
            (``None`` when it shares no history): its ``lines`` before it are those of
            what it continues, its own lines are from it on.
        continues: the index in :attr:`SessionTree.threads` of the rewind it continues (its
            lines before ``fork_line`` are that thread's), ``None`` when it continues the
            conversation (they are :attr:`SessionTree.trunk`'s) or shares no history.
    """

    kind: str
    start: str
    lines: tuple[int, ...]
    sidechain_lines: frozenset[int]
    shares_history: bool
    agent_id: str | None = None
    task_line: int | None = None
    carried_lines: frozenset[int] = frozenset()
    fork_line: int | None = None
    continues: int | None = None


@dataclass(frozen=True)
class SessionTree:
    """The conversation, rewinds and sidechains of a Claude Code session (see the module docstring).

    Attributes:
        main: the line indexes the main conversation is parsed from (every line but the
            events of rewound branches).
        abandoned: how many main-chain events are in rewound branches (left out of ``main``).
        threads: the rewinds, then the sidechains, each in file order of its first event.
        trunk: the line indexes of the conversation's own events (the main chain's events
            outside rewinds, first occurrences of each uuid): what a thread continuing the
            conversation shares of it is those before its ``fork_line``.
    """

    main: tuple[int, ...]
    abandoned: int
    threads: tuple[Thread, ...]
    trunk: tuple[int, ...] = ()


def split_lines(text: str) -> list[str]:
    """The lines of a JSONL text, split at ``\n`` only (as the parsers read it): ``str.splitlines``
    also splits at U+2028, NEL and form feed, which JSON allows raw inside strings."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line
    return lines


def json_lines(text: str) -> list[tuple[int, dict[str, Any]]]:
    """Return the JSON object lines of a session with their line index (other lines are left out)."""
    out = []
    for index, line in enumerate(split_lines(text)):
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


def _link(events: list[tuple[int, dict[str, Any]]]) -> dict[str, str | None]:
    """Return each main-chain event's parent uuid (a chain restart continues the event before)."""
    parents: dict[str, str | None] = {}
    previous: str | None = None
    for _line, event in events:
        parent = _parent_of(event)
        parents[event["uuid"]] = parent if parent is not None and parent in parents else previous
        previous = event["uuid"]
    return parents


def is_prompt(event: dict[str, Any]) -> bool:
    """Whether an event is a person's prompt: a user message that is not tool results, meta or a compaction summary."""
    if event.get("type") != "user" or event.get("isMeta") is True or event.get("isCompactSummary") is True:
        return False
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return isinstance(content, str)


def session_tree(text: str) -> SessionTree:
    """Return the main conversation's lines, the rewinds and the sidechains of a Claude Code session.

    A **rewind** is a fork of the main chain between prompts: an event with two or more
    children that are a person's prompts, or lead to one through events that are no messages
    (the prompt's hook ``progress`` events): the user went back to that point and asked
    again, or edited the prompt.  Of those, the one whose events reach furthest in the file goes
    on in the conversation; each other starts a rewind branch holding its whole subtree.
    Other forks are not rewinds and stay in the conversation in file order, as the parser
    keeps them: Claude Code links each answer of parallel tool calls to its own call, and
    hook ``progress`` events hang off the chain.

    Args:
        text: the session file's text (JSONL).

    Returns:
        A :class:`SessionTree`.  A session without rewinds or sidechains gives one with
        ``main`` holding every line and no thread.
    """
    entries = json_lines(text)
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
    parents = _link(main_events)
    children: dict[str, list[str]] = {}
    for uuid, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(uuid)
    reach = {uuid: line_of[uuid] for uuid in parents}  # the last line of each event's subtree
    for _line, event in reversed(main_events):
        parent = parents[event["uuid"]]
        if parent is not None:
            reach[parent] = max(reach[parent], reach[event["uuid"]])
    ahead = _prompts_ahead(main_events, children, line_of)
    segment: dict[str, str | None] = {}  # event -> the rewind it belongs to (None: the conversation)
    names: dict[str, str] = {}  # a rewind's first event -> its prompt's uuid (names the branch)
    kept: dict[
        str, str | None
    ] = {}  # each fork -> the child leading to a prompt that goes on (None: no rewind)
    for parent, kids in children.items():  # once a fork, not once a child (a prompt with n siblings)
        led = [c for c in kids if c in ahead]
        kept[parent] = max(led, key=lambda c: reach[c]) if len(led) >= 2 else None
    for _line, event in main_events:
        uuid = event["uuid"]
        parent = parents[uuid]
        goes_on = kept.get(parent) if parent is not None else None
        if goes_on is not None and uuid in ahead and uuid != goes_on:
            segment[uuid] = uuid
            names[uuid] = ahead[uuid]
        else:
            segment[uuid] = segment[parent] if parent is not None else None
    origin: dict[str, str | None] = {}  # a rewind -> the one it forks from (None: the conversation)
    for uuid, owner in segment.items():
        fork = parents[uuid]
        if owner == uuid and fork is not None:
            origin[uuid] = segment[fork]

    owned: dict[str | None, list[int]] = {}  # each segment's lines, in file order
    for uuid, owner in segment.items():
        owned.setdefault(owner, []).append(line_of[uuid])
    for lines_of_owner in owned.values():
        lines_of_owner.sort()

    def shared(owner: str | None, before: int) -> set[int]:
        """The lines of ``owner``'s events before line ``before``, and of what it shares in turn
        (a loop, not recursion: rewinds nest as deep as the session goes)."""
        lines: set[int] = set()
        while True:
            held = owned.get(owner, [])
            lines.update(held[: bisect.bisect_left(held, before)])
            if owner is None:
                return lines
            owner, before = origin.get(owner), line_of[owner]

    rewound = {line_of[u] for u, s in segment.items() if s is not None}
    main = tuple(i for i in range(len(split_lines(text))) if i not in rewound)
    roots = sorted(origin, key=lambda r: line_of[r])
    index_of: dict[str | None, int | None] = {root: index for index, root in enumerate(roots)}
    index_of[None] = None
    # a rewind's lines: those of what it forks from before its first event (all before it,
    # since a parent comes before its children in the file), then its own (all after): sliced
    # from the lines of what it forks from (whose thread comes first), not gathered ancestor by
    # ancestor, which nested rewinds made quadratic
    path_of: dict[str | None, tuple[int, ...]] = {None: tuple(owned.get(None, ()))}
    threads = []
    for root in roots:
        base = path_of[origin.get(root)]
        path_of[root] = base[: bisect.bisect_left(base, line_of[root])] + tuple(owned.get(root, ()))
        threads.append(
            Thread(
                "rewind",
                names[root],
                path_of[root],
                frozenset(),
                True,
                fork_line=line_of[root],
                continues=index_of[origin.get(root)],
            )
        )
    del path_of
    threads += _sidechains(side_events, segment, line_of, shared, main_events, index_of)
    threads += _carried(entries, main_events)
    return SessionTree(main, len(rewound), tuple(threads), tuple(owned.get(None, ())))


def _prompts_ahead(
    events: list[tuple[int, dict[str, Any]]], children: dict[str, list[str]], line_of: dict[str, int]
) -> dict[str, str]:
    """Map each event that leads to a prompt to that prompt's uuid: a prompt itself, or an event
    that is no message (a hook ``progress``, a ``system`` event) with a prompt after it before any
    message (newer versions put the prompt's hooks before it)."""
    kinds = {e["uuid"]: e for _line, e in events}
    ahead: dict[str, str] = {}
    for _line, event in reversed(events):  # children come after their parent in the file
        uuid = event["uuid"]
        if is_prompt(event):
            ahead[uuid] = uuid
        elif event.get("type") not in ("user", "assistant"):
            found = sorted((line_of[ahead[c]], ahead[c]) for c in children.get(uuid, []) if c in ahead)
            if found and all(
                kinds[c].get("type") not in ("user", "assistant") or c in ahead
                for c in children.get(uuid, [])
            ):
                ahead[uuid] = found[0][1]
    return ahead


def _sidechains(
    side_events: list[tuple[int, dict[str, Any]]],
    segment: dict[str, str | None],
    line_of: dict[str, int],
    shared: Any,
    main_events: list[tuple[int, dict[str, Any]]],
    index_of: dict[str | None, int | None],
) -> list[Thread]:
    """One thread per sub-agent: the sidechain events linked to one first event (see the module docstring);
    ``index_of`` gives the index of each rewind's thread by its first event (``None``: the conversation)."""
    root_of: dict[str, str] = {}
    previous: str | None = None
    for _line, event in side_events:
        uuid, parent = event["uuid"], _parent_of(event)
        if parent is not None and parent in root_of:
            root_of[uuid] = root_of[parent]
        elif parent is None or parent in segment or previous is None:
            root_of[uuid] = uuid  # a first event: from a fresh context, or continuing a main-chain event
        else:
            root_of[uuid] = root_of[previous]  # its parent is in no event of the file
        previous = uuid
    answers = {
        e["agentId"]: line + 1
        for line, e in main_events
        if isinstance(e.get("agentId"), str) and e.get("type") == "user"
    }
    events = {e["uuid"]: e for _line, e in side_events}
    threads = []
    members: dict[str, list[str]] = {}  # each first event -> its thread's events, in file order
    for uuid, root in root_of.items():
        members.setdefault(root, []).append(uuid)
    for root, own in members.items():
        fork = _parent_of(events[root])
        shares = fork is not None and fork in segment
        lines = {line_of[u] for u in own}
        if shares and fork is not None:
            lines |= shared(segment[fork], line_of[root])
        agent = next((events[u]["agentId"] for u in own if isinstance(events[u].get("agentId"), str)), None)
        threads.append(
            Thread(
                "sidechain",
                root,
                tuple(sorted(lines)),
                frozenset(line_of[u] for u in own),
                shares,
                agent,
                answers.get(agent) if agent is not None else None,
                fork_line=line_of[root] if shares else None,
                continues=index_of[segment[fork]] if shares and fork is not None else None,
            )
        )
    return threads


def _carried(
    entries: list[tuple[int, dict[str, Any]]], main_events: list[tuple[int, dict[str, Any]]]
) -> list[Thread]:
    """One thread per sub-agent whose messages ``progress`` events carry (``data.message``), by agent.

    Newer versions write a sub-agent's own transcript to a file of its own and, in the main
    file, a ``progress`` event per message of it (``data.agentId``, under the ``Task`` call
    ``parentToolUseID``); the sub-agent starts from a fresh context, so it shares no history.
    """
    groups: dict[str, list[int]] = {}
    calls: dict[str, str] = {}
    for line, event in entries:
        data = event.get("data")
        carried = data.get("message") if isinstance(data, dict) and event.get("type") == "progress" else None
        if not (isinstance(carried, dict) and isinstance(carried.get("message"), dict)):
            continue
        if carried.get("type") not in ("user", "assistant"):
            continue
        assert isinstance(data, dict)
        agent = data.get("agentId") if isinstance(data.get("agentId"), str) else event.get("parentToolUseID")
        key = str(agent) if isinstance(agent, str) else "progress"
        groups.setdefault(key, []).append(line)
        if isinstance(event.get("parentToolUseID"), str):
            calls.setdefault(key, event["parentToolUseID"])
    answers: dict[str, int] = {}
    for line, event in main_events:
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_result"
                and isinstance(block.get("tool_use_id"), str)
            ):
                answers.setdefault(block["tool_use_id"], line + 1)
    return [
        Thread(
            "sidechain",
            f"agent-{key}",
            tuple(lines),
            frozenset(),
            False,
            key,
            answers.get(calls.get(key, "")),
            frozenset(lines),
        )
        for key, lines in groups.items()
    ]


def path_lines(
    text: str | list[str],
    keep: tuple[int, ...],
    sidechain: frozenset[int] = frozenset(),
    carried: frozenset[int] = frozenset(),
) -> str:
    """Return ``text`` with only the lines ``keep`` (the others blank, so line numbers stay), the
    ``sidechain`` ones rewritten with ``isSidechain: false`` and the ``carried`` ``progress`` ones
    replaced by the event they carry, so the parser takes them as messages.

    ``text`` may be given as its lines (:func:`split_lines`), so a caller taking many paths
    of one session splits it once, not once a path."""
    lines = split_lines(text) if isinstance(text, str) else text
    out = [""] * len(lines)  # the lines not kept stay blank: a path costs its own lines, not the file's
    for index in keep:
        line = lines[index]
        if index in sidechain:
            out[index] = json.dumps({**json.loads(line), "isSidechain": False}, ensure_ascii=False)
        elif index in carried:
            event = json.loads(line)
            out[index] = json.dumps({**event["data"]["message"], "isSidechain": False}, ensure_ascii=False)
        else:
            out[index] = line
    return "\n".join(out) + "\n"
