"""Probes read from tool calls for ``compaction eval``: the files touched and the errors met.

See :mod:`compaction.eval_probes` for the definitions.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .blocks import Message
from .eval_text import MIN_WORDS, Probe, Rarity, result_text, texts, words

__all__ = ["file_probes", "error_probes", "command_head", "ERROR_WORDS"]

ERROR_WORDS = 6
#: A word found in this many different error fragments, and in at least this share of them, is
#: part of a template ("No replacement was performed"), not of one error: it is left out of
#: errors' distinctive words.
TEMPLATE_ERRORS = 3
TEMPLATE_SHARE = 1 / 3

_PATH_KEYS = frozenset({"path", "file_path", "filename", "file", "notebook_path", "target_file", "paths"})
_COMMAND_KEYS = ("command", "cmd")
_READ_TOOLS = frozenset({"read", "read_file", "view", "open", "cat", "notebookread"})
_EXTENSIONLESS = frozenset(
    {
        "Makefile",
        "Dockerfile",
        "LICENSE",
        "README",
        "Gemfile",
        "Rakefile",
        "Procfile",
        "Justfile",
        "Jenkinsfile",
    }
)
_FILE_NAME = re.compile(r"^[\w@+-][\w.@+-]*\.[A-Za-z][A-Za-z0-9]{0,9}$")
_CODE_EXTENSIONS = frozenset(
    """py pyi pyx ts tsx js jsx mjs cjs md mdx rst txt json jsonl toml yaml yml ini cfg conf lock c h cc cpp
    hpp cxx rs go java kt kts scala rb php sh bash zsh fish ps1 pony swift cs fs vue svelte lua pl r sql
    html htm css scss less xml csv tsv log traj ipynb env gradle tex proto graphql dart ex exs erl hs ml
    clj zig nim tf sol patch diff""".split()
)
_PATCH_HEADER = re.compile(
    r"^(?:\*\*\* (?:Add|Update|Delete) File: (.+)|(?:\+\+\+|---) (?:[ab]/)?(\S+))$", re.M
)
_AIDER_EDIT = re.compile(r"^Applied edit to (\S+)$", re.MULTILINE)

_EXIT_CODE = re.compile(
    r"(?:exit(?:ed)?(?: with)?(?: exit)? (?:code|status)|exit code|returncode)[\s:=]*([1-9]\d*)",
    re.IGNORECASE,
)
_ERROR_LINE = re.compile(
    r"^(?:Traceback \(most recent call last\):|(?:[A-Za-z_][\w.]*)?(?:Error|Exception|ERROR|error)(?:\[\w+\])?:"
    r"|FAILED |FATAL|fatal: |npm ERR!|npm error |panic: |E\s+\w*(?:Error|Exception)\b)"
    r"|\berror TS\d+:|:\d+(?::\d+)?: (?:fatal )?error:"
)


# -- files --------------------------------------------------------------------------------


def _is_file(path: str, from_command: bool) -> bool:
    base = path.rstrip("/").rsplit("/", 1)[-1]
    if base in _EXTENSIONLESS:
        return True
    if not _FILE_NAME.match(base):
        return False
    return not from_command or "/" in path or base.rsplit(".", 1)[1].lower() in _CODE_EXTENSIONS


def _command_paths(command: str) -> Iterator[str]:
    line = command.strip().split("\n", 1)[0]
    try:
        tokens = shlex.split(line, posix=True)
    except ValueError:
        tokens = line.split()
    for token in tokens:
        if "://" in token or (token.startswith("-") and "=" not in token):
            continue
        token = token.split("=", 1)[-1].strip("\"'`,;:()")
        if token and not any(c.isspace() for c in token) and _is_file(token, from_command=True):
            yield token


def _input_paths(tool_input: dict[str, Any]) -> Iterator[str]:
    for key, value in tool_input.items():
        values = value if isinstance(value, list) else [value]
        if key in _PATH_KEYS:
            yield from (
                v.strip() for v in values if isinstance(v, str) and _is_file(v.strip(), from_command=False)
            )
        elif key in _COMMAND_KEYS:
            line = " ".join(v for v in values if isinstance(v, str))
            yield from _command_paths(line)
        if isinstance(value, str) and ("*** Begin Patch" in value or "\n+++ " in value):
            for match in _PATCH_HEADER.finditer(value):
                path = (match.group(1) or match.group(2) or "").strip()
                if path and path != "/dev/null" and _is_file(path, from_command=False):
                    yield path


def _same_file(a: str, b: str) -> bool:
    """Return whether two paths name one file (equal, or one a suffix of the other at a ``/``)."""
    a, b = a.removeprefix("./"), b.removeprefix("./")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


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


def command_head(command: str) -> str:
    """Return the first three words of a shell command's last ``&&``/``;`` part, pipes cut."""
    parts = [p.strip() for p in re.split(r"\s*(?:&&|\|\||;)\s+", command.split("\n", 1)[0]) if p.strip()]
    parts = [p for p in parts if not p.startswith("cd ")] or parts
    last = re.split(r"\s\|\s", parts[-1], maxsplit=1)[0].replace("2>&1", "") if parts else ""
    return " ".join(last.split()[:3])


def _call_key(name: str, tool_input: dict[str, Any]) -> tuple[str, str]:
    """Return what identifies a run of the same call: the tool and its path or command head."""
    path = next((tool_input[k] for k in _PATH_KEYS if isinstance(tool_input.get(k), str)), None)
    command = next((tool_input[k] for k in _COMMAND_KEYS if k in tool_input), None)
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    if path is not None:  # an editor: its sub-command (one word: view, str_replace) and the path
        sub = command if isinstance(command, str) and command.isidentifier() else ""
        return name, f"{sub} {path}".strip()
    if isinstance(command, str):
        return name, command_head(command)
    return name, ""


def _error_fragment(text: str, is_error: bool, first_line_only: bool, command: str = "") -> str | None:
    """Return the error's lines (the marker line and up to three after it), or ``None``.

    A search that found nothing (``grep``, ``rg``, ``diff``, ``test`` exiting with 1) is not an error.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    scan = lines[:1] if first_line_only else lines
    for index, line in enumerate(scan):
        if _ERROR_LINE.search(line):
            return "\n".join(lines[index : index + 4])
    exit_code = _EXIT_CODE.search(text)
    no_match = (
        exit_code is not None
        and exit_code.group(1) == "1"
        and command_head(command).split(" ")[:1] in (["grep"], ["rg"], ["diff"], ["test"], ["["])
    )
    if no_match:
        return None
    if exit_code:
        before = [line for line in text[: exit_code.start()].splitlines() if line.strip()]
        return "\n".join(before[-3:] + [text[exit_code.start() :].split("\n", 1)[0]])
    if is_error and lines:
        return "\n".join(lines[:4])
    return None


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
                reads = name.lower() in _READ_TOOLS or tool_input.get("command") == "view"
                command = next((str(tool_input[k]) for k in _COMMAND_KEYS if k in tool_input), "")
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
