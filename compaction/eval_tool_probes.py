"""Probes read from tool calls for ``compaction eval``: the files touched and the errors met.

See :mod:`compaction.eval_probes` for the definitions.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .blocks import Message
from .eval_text import MIN_WORDS, Probe, Rarity, result_text, texts, words
from .evidence import COMMAND_KEYS, READ_TOOLS, command_head
from .evidence import ERROR_LINE as _ERROR_LINE
from .evidence import call_key as _call_key
from .evidence import error_fragment as _error_fragment
from .evidence import input_paths as _input_paths
from .evidence import is_file as _is_file
from .evidence import same_file as _same_file

__all__ = ["file_probes", "error_probes", "command_head", "ERROR_WORDS"]

ERROR_WORDS = 6
#: A word found in this many different error fragments, and in at least this share of them, is
#: part of a template ("No replacement was performed"), not of one error: it is left out of
#: errors' distinctive words.
TEMPLATE_ERRORS = 3
TEMPLATE_SHARE = 1 / 3

_AIDER_EDIT = re.compile(r"^Applied edit to (\S+)$", re.MULTILINE)


# -- files --------------------------------------------------------------------------------


def _file_probe(path: str, seq: int) -> Probe:
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return Probe("files", path, seq, needles=(base.lower(),))


def file_probes(messages: Sequence[Message]) -> list[Probe]:
    """Return a probe per file the agent read or wrote, in order of first mention.

    Paths that name one file (``src/a.py`` and ``/repo/src/a.py``) make one probe.
    """
    files: dict[str, Probe] = {}
    for seq, message in enumerate(messages):
        paths: list[str] = []
        for block in message.content:
            if block.get("type") == "tool_use" and isinstance(block.get("input"), dict):
                paths.extend(_input_paths(block["input"]))
        if message.meta.get("kind") == "tool_output":
            paths.extend(_AIDER_EDIT.findall(texts(message.content)))
        elif message.role == "user":
            added = re.match(r"^/(?:add|read-only)\s+(.+)", texts(message.content).strip())
            if added:
                paths.extend(p for p in added.group(1).split() if _is_file(p, from_command=False))
        for path in paths:
            if not any(_same_file(path, known) for known in files):
                files[path] = _file_probe(path, seq)
    return list(files.values())


# -- errors -------------------------------------------------------------------------------


@dataclass
class _Attempt:
    key: tuple[str, str]
    seq: int
    fragment: str | None
    command: str


def _attempts(messages: Sequence[Message]) -> list[_Attempt]:
    """Return every tool run (results, pi ``!`` commands, aider output) with its error fragment."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    nothing: dict[str, Any] = {}
    attempts: list[_Attempt] = []
    running = ""  # aider: the command of the last /run or /test line, while its output follows
    for seq, message in enumerate(messages):
        kind = message.meta.get("kind")
        if message.role == "user" and kind in ("bash_execution", "tool_output"):
            text = texts(message.content)
            if kind == "bash_execution":
                ran = re.match(r"Ran `([^`]*)`", text)
                running = ran.group(1) if ran else ""
            key = ("!", command_head(running)) if running else ("", "")
            attempts.append(_Attempt(key, seq, _error_fragment(text, False, False, running), running))
            if kind == "bash_execution":
                running = ""
            continue
        if message.role == "user" and not any(b.get("type") == "tool_result" for b in message.content):
            typed = re.match(r"^/(?:run|test)\s+(.+)", texts(message.content).strip())
            running = typed.group(1) if typed else ""
        elif message.role == "assistant":
            running = ""
        for block in message.content:
            if block.get("type") == "tool_use":
                given = block.get("input")
                calls[block["id"]] = (
                    str(block.get("name", "")),
                    given if isinstance(given, dict) else nothing,
                )
            elif block.get("type") == "tool_result":
                name, tool_input = calls.get(block.get("tool_use_id", ""), ("", nothing))
                reads = name.lower() in READ_TOOLS or tool_input.get("command") == "view"
                command = next((str(tool_input[k]) for k in COMMAND_KEYS if k in tool_input), "")
                fragment = _error_fragment(result_text(block), bool(block.get("is_error")), reads, command)
                attempts.append(_Attempt(_call_key(name, tool_input), seq, fragment, command))
    return attempts


def error_probes(messages: Sequence[Message], rarity: Rarity) -> list[Probe]:
    """Return a probe per distinct error the tool runs met, in order, each marked resolved or not."""
    attempts = _attempts(messages)
    texts = {
        index: attempt.fragment + "\n" + command_head(attempt.command)
        for index, attempt in enumerate(attempts)
        if attempt.fragment is not None
    }
    spread: Counter[str] = Counter(word for text in set(texts.values()) for word in set(words(text)))
    least = max(TEMPLATE_ERRORS, TEMPLATE_SHARE * len(set(texts.values())))
    template = frozenset(word for word, n in spread.items() if n >= least)
    probes: dict[tuple[str, ...], Probe] = {}
    for index, text in texts.items():
        attempt = attempts[index]
        assert attempt.fragment is not None
        chosen = rarity.distinctive(text, ERROR_WORDS, template)
        if len(chosen) < MIN_WORDS:  # mostly template: its rarest template words complete it
            chosen += rarity.distinctive(text, MIN_WORDS - len(chosen), frozenset(chosen))
        if len(chosen) < MIN_WORDS:
            continue
        resolved = any(
            later.key == attempt.key and later.fragment is None and attempt.key[0] != ""
            for later in attempts[index + 1 :]
        )
        lines = attempt.fragment.splitlines()
        at = next((i for i, ln in enumerate(lines) if _ERROR_LINE.search(ln)), 0)
        line = " ".join(lines[at : at + 2]) if len(lines[at]) < 20 else lines[at]
        key = tuple(sorted(chosen))
        probes.pop(key, None)  # the newest occurrence decides whether it was resolved
        probes[key] = rarity.probe("errors", line, attempt.seq, chosen, resolved)
    return sorted(probes.values(), key=lambda p: p.seq)
