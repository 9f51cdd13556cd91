"""aider chat history (``.aider.chat.history.md``).

Markdown that aider appends to as the chat goes:

* ``# aider chat started at <time>`` opens a session: no message; the next message carries
  ``meta["session_started"]``;
* ``#### `` lines are what the user typed (several consecutive lines are one message);
* ``> `` lines are aider's own terminal output: command lines, ``/run`` and lint output,
  "Applied edit", token and cost reports, warnings;
* everything else is the assistant's reply (prose and SEARCH/REPLACE edit blocks).

aider ends user and output lines with two spaces (a Markdown line break); they are removed.

Choice for ``> `` blocks: there is no tool call they answer, so a ``tool_result`` would be an
orphan, and a mid-history system message would be hoisted into the system prompt by
renderers that allow only one.  They become **user** messages holding the output text
verbatim, marked ``meta["kind"] = "tool_output"`` so they can be told apart from what the
user typed.  A leading Emacs mode line (``-*- mode: ... -*-``) is not conversation and is
skipped.  The format has no malformed lines; text that is not UTF-8 is rejected when read.
"""

from __future__ import annotations

import re

from ._common import Context, Draft
from ._sniff import Sample, TranscriptFormat

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "aider"

_SESSION = "# aider chat started at "
_SESSION_LINE = re.compile(r"^# aider chat started at ", re.MULTILINE)
_USER_LINE = re.compile(r"^#### ", re.MULTILINE)
_OUTPUT_LINE = re.compile(r"^> ", re.MULTILINE)


def _kind(line: str) -> str:
    if line.startswith("#### ") or line == "####":
        return "user"
    if line.startswith("> ") or line == ">":
        return "tool_output"
    if line.startswith(_SESSION):
        return "session"
    return "assistant"


def _strip_marker(line: str, kind: str) -> str:
    body = line[5:] if kind == "user" else line[2:]
    body = body[:-2] if body.endswith("  ") else body
    return body if body.strip() else ""


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse an aider chat history into drafts."""
    lines = text.split("\n")
    if not any(_kind(line) != "assistant" for line in lines):
        raise ctx.error(
            "no aider chat markers ('# aider chat started at', '#### ', '> '): this is not an aider chat history"
        )
    drafts: list[Draft] = []
    session: str | None = None
    kind: str | None = None
    chunk: list[str] = []
    start = 0

    def flush() -> None:
        nonlocal session
        if kind is None:
            return
        body = "\n".join(chunk).strip("\n")
        if not body.strip():
            return
        role = "assistant" if kind == "assistant" else "user"
        draft = Draft(role, [{"type": "text", "text": body}], line=start)
        if kind == "tool_output":
            draft.meta["kind"] = "tool_output"
        if session is not None:
            draft.meta["session_started"] = session
            session = None
        drafts.append(draft)

    for number, line in enumerate(lines, 1):
        if number == 1 and line.startswith("-*-") and line.rstrip().endswith("-*-"):
            continue
        line_kind = _kind(line)
        if line_kind == "session":
            flush()
            kind, chunk = None, []
            session = line[len(_SESSION) :].strip()
            continue
        if line_kind == "assistant" and not line.strip() and kind != "assistant":
            # A blank line ends what the user typed; output blocks separated by blank
            # lines are one stretch of terminal output.
            if kind == "user":
                flush()
                kind, chunk = None, []
            continue
        if line_kind != kind:
            flush()
            kind, chunk, start = line_kind, [], number
        chunk.append(line if line_kind == "assistant" else _strip_marker(line, line_kind))
    flush()
    return drafts


def sniff(sample: Sample) -> bool:
    """Claim Markdown (not JSON) with ``# aider chat started at``, or with both aider's
    ``#### `` (user) and ``> `` (output) line markers."""
    if sample.looks_json:
        return False
    head = sample.head
    return bool(_SESSION_LINE.search(head) or (_USER_LINE.search(head) and _OUTPUT_LINE.search(head)))


FORMAT = TranscriptFormat(
    name=NAME,
    priority=30,
    sniff=sniff,
    parse=parse,
    holds="aider chat text ('#### ' lines the user typed and the replies after them)",
)
