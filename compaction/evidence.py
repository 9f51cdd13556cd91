"""What a history shows about files, errors and plans: the detectors eval and the summarizer share.

``compaction eval`` reads probes from a raw history with these, and the offline summarizer
records the same facts with them, so what the summary keeps is what the eval looks for.

Files.  A file is named by a tool input under ``path``, ``file_path``, ``filename``,
``file``, ``notebook_path``, ``target_file`` or ``paths``; by a file-looking word of a shell
command's first line; or by an ``apply_patch`` / diff header.  A file looks like
``name.ext`` (or ``Makefile`` and kin); a word of a command also needs a ``/`` or a known
code extension.

Errors.  :func:`error_fragment` returns the lines that show a tool run failed: an error line
at the start of a line (``Traceback (most recent call last):``, ``TypeError: …``,
``error: …``, ``FAILED …``, ``npm ERR!``, ``error TS2307:``, ``file.c:3: error:`` …), a
non-zero exit code, or the first lines of a result marked ``is_error``.  In the output of a
file-reading tool only the first line counts (the rest is file content), and a search that
found nothing (``grep``, ``rg``, ``diff``, ``test`` exiting with 1) is not an error.  A run is
identified by :func:`call_key`: the tool and its path, or the head of its command, so a later
successful run of the same key resolves an earlier error.

Names.  :func:`identifiers` yields the names a text mentions: ``snake_case`` and
``camelCase`` names, ``SCREAMING_CASE`` constants, names defined as ``def name``
(``function``, ``fn``, ``func``), tickets (``ABC-123``), URLs and commit hashes (7-40 hex
digits with a digit and a letter), five characters at least.  ``compaction eval`` probes
the ones that recur; the offline summary lists the most frequent of each stretch.

Plans.  :func:`decision_sentences` returns the sentences of an assistant's text that state a
plan ("I'll", "I will", "We should", "I need to", "Plan:", "Next, …", …) and its checklist
items; :func:`plan_items` the items of a todo or plan tool's input.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

__all__ = [
    "PATH_KEYS",
    "COMMAND_KEYS",
    "READ_TOOLS",
    "PATCH_HEADER",
    "ERROR_LINE",
    "EXIT_CODE",
    "PLAN_TOOL",
    "IDENTIFIER",
    "MIN_IDENTIFIER",
    "is_file",
    "command_paths",
    "input_paths",
    "same_file",
    "command_head",
    "call_key",
    "error_fragment",
    "decision_sentences",
    "checklist_items",
    "plan_items",
    "identifiers",
]

PATH_KEYS = frozenset({"path", "file_path", "filename", "file", "notebook_path", "target_file", "paths"})
COMMAND_KEYS = ("command", "cmd")
READ_TOOLS = frozenset({"read", "read_file", "view", "open", "cat", "notebookread"})
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
#: An ``apply_patch`` header (group 1) or a unified diff header (group 2).
PATCH_HEADER = re.compile(
    r"^(?:\*\*\* (?:Add|Update|Delete) File: (.+)|(?:\+\+\+|---) (?:[ab]/)?(\S+))$", re.M
)

EXIT_CODE = re.compile(
    r"(?:exit(?:ed)?(?: with)?(?: exit)? (?:code|status)|exit code|returncode)[\s:=]*([1-9]\d*)",
    re.IGNORECASE,
)
ERROR_LINE = re.compile(
    r"^(?:Traceback \(most recent call last\):|(?:[A-Za-z_][\w.]*)?(?:Error|Exception|ERROR|error)(?:\[\w+\])?:"
    r"|FAILED |FATAL|fatal: |npm ERR!|npm error |panic: |E\s+\w*(?:Error|Exception)\b)"
    r"|\berror TS\d+:|:\d+(?::\d+)?: (?:fatal )?error:"
)

_DECISION = re.compile(
    r"^(?:[-*]\s+|\d+\.\s+)?(?:(?:Now|So|First|Then|Next),?\s+)?"
    r"(?:I'll|I will|I'm going to|I am going to|We'll|We will|We should|I need to|I decided|I've decided)\b"
    r"|^(?:Plan:|Next,|Next step|The plan\b|My plan\b|Decision:)"
)
_CHECKBOX = re.compile(r"^\s*[-*] \[([ xX])\] (.+)$", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+")
#: A tool whose input is a todo list or a plan (``TodoWrite``, ``update_plan``).
PLAN_TOOL = re.compile(r"todo|plan", re.IGNORECASE)

#: A name (see :func:`identifiers`): a URL, a ticket, a commit hash, a snake, camel or
#: screaming-case name, or the name after ``def``, ``function``, ``fn`` or ``func``.
IDENTIFIER = re.compile(
    r"https?://[^\s<>\"'`)\]}]+"
    r"|\b[A-Z][A-Z0-9]{1,9}-\d+\b"
    r"|\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"
    r"|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"
    r"|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"
    r"|\b[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b"
    r"|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"
    r"|(?<=\bdef )\w+|(?<=\bfunction )\w+|(?<=\bfn )\w+|(?<=\bfunc )\w+"
)
#: The shortest name worth a probe or a place in a summary (characters).
MIN_IDENTIFIER = 5
_TICKET = re.compile(r"[A-Z][A-Z0-9]{1,9}-\d+")
_NOT_TICKETS = frozenset({"UTF", "SHA", "ISO", "GPT", "MD", "X", "P"})


# -- files --------------------------------------------------------------------------------


def is_file(path: str, from_command: bool) -> bool:
    """Return whether ``path`` looks like a file (a word of a command needs a ``/`` or a code extension)."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    if base in _EXTENSIONLESS:
        return True
    if not _FILE_NAME.match(base):
        return False
    return not from_command or "/" in path or base.rsplit(".", 1)[1].lower() in _CODE_EXTENSIONS


def command_paths(command: str) -> Iterator[str]:
    """Yield the file-looking words of a shell command's first line."""
    line = command.strip().split("\n", 1)[0]
    try:
        tokens = shlex.split(line, posix=True)
    except ValueError:
        tokens = line.split()
    for token in tokens:
        if "://" in token or (token.startswith("-") and "=" not in token):
            continue
        token = token.split("=", 1)[-1].strip("\"'`,;:()")
        if token and not any(c.isspace() for c in token) and is_file(token, from_command=True):
            yield token


def input_paths(tool_input: dict[str, Any]) -> Iterator[str]:
    """Yield the files a tool input names: path keys, command words, patch headers."""
    for key, value in tool_input.items():
        values = value if isinstance(value, list) else [value]
        if key in PATH_KEYS:
            yield from (
                v.strip() for v in values if isinstance(v, str) and is_file(v.strip(), from_command=False)
            )
        elif key in COMMAND_KEYS:
            line = " ".join(v for v in values if isinstance(v, str))
            yield from command_paths(line)
        if isinstance(value, str) and ("*** Begin Patch" in value or "\n+++ " in value):
            for match in PATCH_HEADER.finditer(value):
                path = (match.group(1) or match.group(2) or "").strip()
                if path and path != "/dev/null" and is_file(path, from_command=False):
                    yield path


def same_file(a: str, b: str) -> bool:
    """Return whether two paths name one file (equal, or one a suffix of the other at a ``/``)."""
    a, b = a.removeprefix("./"), b.removeprefix("./")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


# -- errors -------------------------------------------------------------------------------


def command_head(command: str) -> str:
    """Return the first three words of a shell command's last ``&&``/``;`` part, pipes cut."""
    parts = [p.strip() for p in re.split(r"\s*(?:&&|\|\||;)\s+", command.split("\n", 1)[0]) if p.strip()]
    parts = [p for p in parts if not p.startswith("cd ")] or parts
    last = re.split(r"\s\|\s", parts[-1], maxsplit=1)[0].replace("2>&1", "") if parts else ""
    return " ".join(last.split()[:3])


def call_key(name: str, tool_input: dict[str, Any]) -> tuple[str, str]:
    """Return what identifies a run of the same call: the tool and its path or command head."""
    path = next((tool_input[k] for k in PATH_KEYS if isinstance(tool_input.get(k), str)), None)
    command = next((tool_input[k] for k in COMMAND_KEYS if k in tool_input), None)
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    if path is not None:  # an editor: its sub-command (one word: view, str_replace) and the path
        sub = command if isinstance(command, str) and command.isidentifier() else ""
        return name, f"{sub} {path}".strip()
    if isinstance(command, str):
        return name, command_head(command)
    return name, ""


def error_fragment(text: str, is_error: bool, first_line_only: bool, command: str = "") -> str | None:
    """Return the error's lines (the marker line and up to three after it), or ``None``.

    Args:
        text: the tool's output.
        is_error: the result is marked ``is_error``.
        first_line_only: only the first line may be an error line (a file-reading tool).
        command: the shell command that ran, if any (a search finding nothing is no error).

    A search that found nothing (``grep``, ``rg``, ``diff``, ``test`` exiting with 1) is not an error.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    scan = lines[:1] if first_line_only else lines
    for index, line in enumerate(scan):
        if ERROR_LINE.search(line):
            return "\n".join(lines[index : index + 4])
    exit_code = EXIT_CODE.search(text)
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


# -- plans --------------------------------------------------------------------------------


def decision_sentences(text: str) -> Iterator[str]:
    """Yield the sentences of an assistant's ``text`` that state a plan or a decision."""
    for line in text.replace("\u2019", "'").splitlines():
        for sentence in _SENTENCE_END.split(line.strip()):
            if _DECISION.match(sentence):
                yield sentence


def checklist_items(text: str) -> Iterator[tuple[bool, str]]:
    """Yield ``(checked, item)`` of each ``- [ ]`` / ``- [x]`` line of ``text``."""
    for match in _CHECKBOX.finditer(text):
        yield match.group(1) != " ", match.group(2)


def plan_items(value: Any) -> Iterator[str]:
    """Yield the item texts of a todo or plan tool's input (``content``, ``step``, ``title``, ``task``)."""
    if isinstance(value, dict):
        for key in ("content", "step", "title", "task"):
            if isinstance(value.get(key), str):
                yield value[key]
                return
        for item in value.values():
            yield from plan_items(item)
    elif isinstance(value, list):
        for item in value:
            yield from plan_items(item)


# -- names --------------------------------------------------------------------------------


def identifiers(text: str) -> Iterator[str]:
    """Yield each name ``text`` mentions, in order, repeats included (see the module docstring).

    Trailing ``.,;:`` are cut; names under :data:`MIN_IDENTIFIER` characters and look-alike
    tickets (``UTF-8``, ``SHA-256``) are left out.
    """
    for match in IDENTIFIER.finditer(text):
        token = match.group(0).rstrip(".,;:")
        if len(token) < MIN_IDENTIFIER:
            continue
        if _TICKET.fullmatch(token) and token.split("-")[0] in _NOT_TICKETS:
            continue
        yield token
