"""Observation masking: old tool outputs shown as short loud placeholders.

The tier between raw and summarized.  JetBrains' "The Complexity Trap" (arXiv 2508.21433,
SWE-agent on SWE-bench Verified) measured that replacing old tool outputs by a placeholder,
while the agent's reasoning and tool calls stay raw, halves cost and matches LLM
summarization.  Here a masked ``tool_result`` keeps its block, its ``tool_use_id`` and its
``is_error`` flag (so pairing is untouched) and its content becomes one text line that says
what was there: the tool and the call's key argument, the output's size in lines and
characters, its exit status when it shows one, its images, and its first line; the store
keeps every byte, and the line names the message that holds it.

Which results are masked is decided by :mod:`compaction.compile`: those of messages before a
boundary (never inside the newest ``Recipe.mask_keep_rounds`` tool rounds), except outputs of
the tools named in ``Recipe.never_mask`` and outputs short enough that a placeholder would
not save anything (:data:`MIN_MASKED_CHARS`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .blocks import DATA_URI_RE, Block, Message

__all__ = ["MIN_MASKED_CHARS", "KEY_ARGUMENTS", "tool_calls", "mask_blocks", "masked_placeholder", "round_starts"]

#: Outputs shorter than this (characters of text, no image) are shown raw: a placeholder would not be shorter.
MIN_MASKED_CHARS = 400
#: Argument names shown in a placeholder, most telling first.
KEY_ARGUMENTS = (
    "command", "cmd", "file_path", "path", "filename", "notebook_path", "target_file", "pattern",
    "query", "url", "description",
)  # fmt: skip
_EXIT = re.compile(r"(?i)\b(?:exit(?:ed with)?(?: code|_code| status)?[:= ]\s*|returncode[:= ]\s*)(-?\d+)\b")
_FIRST_LINE_CHARS = 120
_HEAD_CHARS = 65_536
_ARGUMENT_CHARS = 80
_NAME_CHARS = 60


def tool_calls(messages: Iterable[Message]) -> dict[str, tuple[str, Any]]:
    """Return ``{tool_use id: (tool name, input)}`` of the ``tool_use`` blocks in ``messages``."""
    calls: dict[str, tuple[str, Any]] = {}
    for message in messages:
        for block in message.content:
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                calls[block["id"]] = (str(block.get("name") or "tool"), block.get("input"))
    return calls


def round_starts(messages: Sequence[tuple[int, Message]]) -> list[int]:
    """Return the seqs of the assistant turns that call tools (each starts a tool round), in order."""
    return [
        seq
        for seq, message in messages
        if message.role == "assistant" and any(b.get("type") == "tool_use" for b in message.content)
    ]


def _output_parts(content: Any) -> tuple[str, int]:
    """Return a tool result's text and its image count."""
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        return "", 0
    texts, images = [], 0
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "image":
            images += 1
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts), images


def _one_line(value: str, limit: int) -> str:
    """Return ``value`` on one line, its image data URIs named, cut to ``limit`` characters."""
    shown = " ".join(DATA_URI_RE.sub("[image data URI]", value[: 4 * limit + 4096]).split())
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    # A cut may leave the head of a URI the pattern no longer sees whole: name it too.
    return shown.replace(";base64,", ";base64…") if "data:" in shown else shown


def _key_argument(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's recursion limit
            return ""
    if not isinstance(arguments, Mapping):
        return ""
    for key in KEY_ARGUMENTS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return f" {key}={_one_line(value, _ARGUMENT_CHARS)!r}"
    return ""


def masked_placeholder(
    text: str, images: int, *, name: str | None, arguments: Any, is_error: bool, seq: int | None
) -> str:
    """Return the one-line placeholder that stands for a tool output.

    Args:
        text: the output's text.
        images: how many images it held.
        name: the tool's name (``None`` when its call is not known).
        arguments: the call's input (a mapping or a JSON string), for its key argument.
        is_error: whether the result was marked an error.
        seq: the message that holds the output whole (``None`` when unknown).

    Returns:
        ``[tool output masked: <tool> <key argument> returned N lines, M characters[, exit
        status][, images]; first line: "…"; message S holds it whole]``.
    """
    lines = text.count("\n") + 1 if text else 0
    parts = [f"returned {lines} lines, {len(text)} characters"]
    # an exit status is printed at the end (or the start) of an output
    exit_code = _EXIT.search(text[-_HEAD_CHARS:]) or _EXIT.search(text[:_HEAD_CHARS])
    if is_error:
        parts.append("marked an error")
    if exit_code:
        parts.append(f"exit status {exit_code.group(1)}")
    if images:
        parts.append(f"{images} image{'s' if images > 1 else ''}")
    head = text[:_HEAD_CHARS]  # the first line is near the start; a 10 MB output is not split whole
    lines_of = (DATA_URI_RE.sub("[image data URI]", line).strip() for line in head.splitlines())
    first = _one_line(next((line for line in lines_of if line), ""), _FIRST_LINE_CHARS)
    call = f"{_one_line(name, _NAME_CHARS) if name else 'tool'}{_key_argument(arguments)}"
    where = f"; message {seq} holds it whole" if seq is not None else "; the store holds it whole"
    shown_first = f"; first line: {json.dumps(first, ensure_ascii=False)}" if first else ""
    return f"[tool output masked to save context: {call} {', '.join(parts)}{shown_first}{where}]"


def mask_blocks(
    blocks: Sequence[Block],
    calls: Mapping[str, tuple[str, Any]],
    *,
    never_mask: Iterable[str] = (),
    seq: int | None = None,
) -> tuple[Block, ...] | None:
    """Return ``blocks`` with each long ``tool_result`` masked, or ``None`` when none is.

    A result is masked when its tool is not in ``never_mask`` and it holds an image, or
    at least :data:`MIN_MASKED_CHARS` characters of text and more than its placeholder.  The block keeps its type, its
    ``tool_use_id`` and its ``is_error``; its content becomes the placeholder text.
    Every other block is returned as it is (the same object).
    """
    keep = frozenset(never_mask)
    out: list[Block] = []
    changed = False
    for block in blocks:
        if block.get("type") != "tool_result":
            out.append(block)
            continue
        use_id = block.get("tool_use_id")
        name, arguments = calls.get(use_id, (None, None)) if isinstance(use_id, str) else (None, None)
        text, images = _output_parts(block.get("content"))
        if (name is not None and name in keep) or (not images and len(text) < MIN_MASKED_CHARS):
            out.append(block)
            continue
        placeholder = masked_placeholder(
            text, images, name=name, arguments=arguments, is_error=bool(block.get("is_error")), seq=seq
        )
        if not images and len(placeholder) >= len(text):
            out.append(block)  # the placeholder would not be shorter than what it stands for
            continue
        out.append({**block, "content": placeholder})
        changed = True
    return tuple(out) if changed else None
