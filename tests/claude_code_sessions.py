"""Generated Claude Code sessions, shared by the branch-import tests and ``bench/bench_branches.py``.

A session is a JSONL file of events, each naming its ``parentUuid``: a prompt whose parent
already has a child is a rewind (the user went back and asked again), and the import reads
each such fork as a branch.  The events here carry only what the Claude Code reader needs
(``type``, ``uuid``, ``parentUuid``, ``isSidechain``, ``sessionId``, ``timestamp`` and a
message whose assistant form follows Anthropic's Messages response).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "assistant_event",
    "nested_rewinds",
    "rewind_tree",
    "session_text",
    "user_event",
    "write_session",
]

_TIMESTAMP = "2025-07-01T10:00:00.000Z"


def _event(
    kind: str, uuid: str, parent: str | None, sidechain: bool, message: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": kind,
        "parentUuid": parent,
        "isSidechain": sidechain,
        "sessionId": "s",
        "uuid": uuid,
        "timestamp": _TIMESTAMP,
        "message": message,
    }


def user_event(uuid: str, parent: str | None, text: str, *, sidechain: bool = False) -> dict[str, Any]:
    """Return a user prompt event ``uuid`` continuing ``parent`` (``None``: a root)."""
    return _event("user", uuid, parent, sidechain, {"role": "user", "content": text})


def assistant_event(uuid: str, parent: str | None, text: str, *, sidechain: bool = False) -> dict[str, Any]:
    """Return an assistant answer event ``uuid`` of one text block continuing ``parent``."""
    message = {
        "id": f"msg-{uuid}",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    return _event("assistant", uuid, parent, sidechain, message)


def session_text(events: list[dict[str, Any]]) -> str:
    """Return ``events`` as a session file's text: one JSON object a line."""
    return "".join(json.dumps(e) + "\n" for e in events)


def write_session(path: Path, events: list[dict[str, Any]]) -> Path:
    """Write ``events`` to ``path`` as a session file (UTF-8) and return ``path``."""
    path.write_text(session_text(events), encoding="utf-8")
    return path


def rewind_tree(parents: list[int]) -> list[dict[str, Any]]:
    """Return the events of a session whose turn ``i`` (prompt ``p{i}``, answer ``a{i}``) continues
    the answer of turn ``parents[i]`` (``-1``: the root's answer ``ra``), so turns continuing one
    answer are rewinds of each other; ``[-1] * n`` is one prompt with ``n`` siblings."""
    events = [user_event("r", None, "root"), assistant_event("ra", "r", "root answer")]
    for i, parent in enumerate(parents):
        after = "ra" if parent < 0 else f"a{parent}"
        events += [user_event(f"p{i}", after, f"ask {i}"), assistant_event(f"a{i}", f"p{i}", f"answer {i}")]
    return events


def nested_rewinds(depth: int, root_answer: str = "root answer") -> list[dict[str, Any]]:
    """Return the events of ``depth`` rewinds each forking inside the one before: prompt ``x{i}``
    (answer ``xa{i}``) is abandoned for ``y{i}``, and ``x{i+1}`` / ``y{i+1}`` continue ``xa{i}``.
    The kept prompts' answers ``ya{i}`` come last, newest first, so each ``y{i}`` reaches furthest
    in the file: the conversation goes on through ``y0`` and each ``x{i}`` is a branch."""
    events = [user_event("r", None, "root"), assistant_event("ra", "r", root_answer)]
    tail = []
    parent = "ra"
    for i in range(depth):
        events += [user_event(f"x{i}", parent, f"abandon {i}"), assistant_event(f"xa{i}", f"x{i}", f"aa {i}")]
        events.append(user_event(f"y{i}", parent, f"keep {i}"))
        tail.append(assistant_event(f"ya{i}", f"y{i}", f"ka {i}"))
        parent = f"xa{i}"
    return events + tail[::-1]
