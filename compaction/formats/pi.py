"""pi coding-agent session JSONL (``~/.pi/agent/sessions/**.jsonl``).

One entry a line.  The first is the ``session`` header (``id``, ``cwd``, ``provider``,
``modelId``...).  ``message`` entries carry ``message`` with a role:

* ``user``: ``content`` a string or blocks (``text``, ``image`` with ``data`` / ``mimeType``;
  ``data`` that is a reference, such as ``blob:sha256:<hex>``, becomes an image reference
  block: kept, never shown, see :func:`~compaction.blocks.image_reference_block`);
* ``assistant``: blocks ``text``, ``thinking`` (``thinkingSignature`` becomes the block's
  ``signature``; ``redacted`` thinking becomes ``redacted_thinking``), ``toolCall``
  (``id``, ``name``, ``arguments``) -> ``tool_use``; plus ``model``, ``stopReason``;
* ``toolResult``: ``toolCallId``, ``content`` blocks, ``isError`` -> a user message holding a
  ``tool_result`` (``is_error`` kept);
* ``bashExecution``: a command the user ran with ``!``: ``command``, ``output``,
  ``exitCode``, ``cancelled``, ``truncated`` -> a user text message worded as pi words it
  for the model (``Ran `cmd` `` and the output in a fence);
* ``custom`` (extension messages) -> a user message with their content.

Newer sessions are trees: entries carry ``id`` / ``parentId`` and branching leaves
abandoned paths in the file.  The active branch is the path from the root to the last entry
of the file, and only it is returned; the entries left on other branches are reported (one
note naming their lines), never dropped silently.  A chain broken by a skipped line is
re-linked in file order, and an import that would still lose messages (entries under a
skipped line that the re-linked branch does not reach) fails with
:class:`~compaction.formats.LenientLoss`.  Older sessions (like the example in ``examples/``)
have no ids and are linear.

``compaction`` entries are pi's own render decisions (a summary plus the first entry it
kept); the store keeps every message, so no message is dropped: the summary is attached as
``meta["pi_compaction"]`` to the next message.  ``branch_summary`` entries summarise a branch
the user came back from, which is not otherwise in the result, so they become a user text
message (pi sends them to the model the same way).  ``custom_message`` entries become user
messages.  The header (``session``), ``model_change``, ``thinking_level_change``, ``label``,
``session_info`` and ``custom`` (extension state) entries carry no conversation and are
skipped; an entry of any other type is skipped too, and the report names it (one note per
type: how many, and their lines).  Assistant messages with no content (aborted requests)
are dropped as empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..blocks import Block, image_reference_block
from ._common import Context, Draft, Malformed, iter_jsonl, text_blocks, tool_result, tool_use, typed_parts
from ._sniff import Sample, TranscriptFormat

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "pi"


def _image(block: dict[str, Any]) -> Block:
    data, media_type = block.get("data"), block.get("mimeType")
    if not isinstance(data, str) or not isinstance(media_type, str):
        raise Malformed("an image block needs string 'data' and 'mimeType'")
    if data.startswith("blob:") or ":" in data[:80]:
        # A reference to bytes stored elsewhere (pi-derived stores write "blob:sha256:<hex>"):
        # kept as an image reference, never refused as bad base64.
        return image_reference_block(data, media_type)
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _blocks(content: Any) -> list[Block]:
    blocks: list[Block] = []
    for index, block in enumerate(typed_parts(content, strings=False)):
        kind = block["type"]
        if kind == "text":
            blocks.extend(text_blocks(block.get("text")))
        elif kind == "image":
            blocks.append(_image(block))
        elif kind == "thinking":
            signature = block.get("thinkingSignature")
            if block.get("redacted"):
                blocks.append({"type": "redacted_thinking", "data": signature or ""})
            else:
                thinking = block.get("thinking")
                if not isinstance(thinking, str):
                    raise Malformed(f"content[{index}]: a thinking block needs a string 'thinking'")
                blocks.append({"type": "thinking", "thinking": thinking, "signature": signature or ""})
        elif kind == "toolCall":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise Malformed(f"content[{index}]: a toolCall needs string 'id' and 'name'")
            arguments = block.get("arguments")
            blocks.append(tool_use(call_id, name, arguments if isinstance(arguments, dict) else {}))
        else:
            blocks.append(block)
    return blocks


def _bash_text(message: dict[str, Any]) -> str:
    text = f"Ran `{message.get('command', '')}`\n"
    output = message.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif message.get("exitCode") not in (None, 0):
        text += f"\n\nCommand exited with code {message['exitCode']}"
    if message.get("truncated") and message.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {message['fullOutputPath']}]"
    return text


def _message(message: Any) -> Draft:
    if not isinstance(message, dict):
        raise Malformed("a message entry needs a 'message' object")
    role = message.get("role")
    meta: dict[str, Any] = {}
    if role == "user":
        draft = Draft("user", _blocks(message.get("content")))
    elif role == "assistant":
        draft = Draft("assistant", _blocks(message.get("content")))
        for key, name in (("model", "model"), ("stopReason", "stop_reason")):
            if isinstance(message.get(key), str):
                meta[name] = message[key]
    elif role == "toolResult":
        call_id = message.get("toolCallId")
        if not isinstance(call_id, str):
            raise Malformed("a toolResult needs a string 'toolCallId'")
        result = tool_result(call_id, _blocks(message.get("content")), bool(message.get("isError")))
        draft = Draft("user", [result])
    elif role == "bashExecution":
        draft = Draft("user", text_blocks(_bash_text(message)))
        meta["kind"] = "bash_execution"
    elif role == "custom":
        draft = Draft("user", _blocks(message.get("content")))
        meta["kind"] = "custom"
    else:
        raise Malformed(
            f"unknown message role {role!r}; expected user, assistant, toolResult, bashExecution or custom"
        )
    draft.meta = meta
    return draft


#: Entry types that make a message (``compaction`` entries are kept as meta, not counted).
_CONVERSATION = frozenset({"message", "custom_message", "branch_summary"})


def _active_branch(
    entries: list[tuple[int, dict[str, Any]]], ctx: Context | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """Keep the entries on the path from the root to the last entry (tree sessions only).

    When the path breaks (an entry's ``parentId`` names an entry that is not in the file, such
    as a line skipped as malformed), the part before the break is re-linked in file order: the
    walk goes on from the last entry written before the oldest entry reached so far, so no
    message before a bad line is lost.  Each re-link is reported through ``ctx`` (it names
    the line, the missing parent and the number of entries re-linked).

    What stays off the path is said too: conversation entries on branches the session left
    (their chain to the root is whole) in one note, and, when the path was re-linked, entries
    whose own chain runs through a missing entry: nothing tells whether they belonged to the
    active branch, so they could not be placed (:meth:`Context.lose`; the import then fails
    with :class:`~compaction.formats.LenientLoss` rather than lose them silently).
    """
    with_ids = [entry for entry in entries if isinstance(entry[1].get("id"), str)]
    if not any("parentId" in entry for _, entry in with_ids):
        return entries
    parents = {entry["id"]: entry.get("parentId") for _, entry in with_ids if entry.get("type") != "session"}
    position = {entry["id"]: index for index, (_, entry) in enumerate(with_ids)}
    leaf = next((e["id"] for _, e in reversed(with_ids) if e.get("type") != "session"), None)
    path: set[str] = set()
    relinked = False
    node = leaf
    while isinstance(node, str) and node not in path:
        path.add(node)
        parent = parents.get(node)
        if isinstance(parent, str) and parent not in parents:
            oldest = position[node]
            before = [e["id"] for _, e in with_ids[:oldest] if e.get("type") != "session"]
            if before:
                relinked = True
                if ctx is not None:
                    line = next(number for number, e in entries if e.get("id") == node)
                    ctx.note(
                        f"parentId {parent!r} is in no entry of the file (a skipped or missing line); "
                        f"the {len(before)} entries written before line {line} were re-linked in file order",
                        line=line,
                    )
            parent = before[-1] if before else None
        node = parent
    if ctx is not None:
        _report_off_path(entries, parents, path, relinked, ctx)
    return [(line, e) for line, e in entries if e.get("type") == "session" or e.get("id") in path]


def _chain_is_whole(node: str, parents: dict[str, Any], whole: dict[str, bool]) -> bool:
    """Whether every ancestor of ``node`` is in the file, up to a root (memoized in ``whole``)."""
    walked: list[str] = []
    answer = True
    current: Any = node
    while isinstance(current, str):
        if current in whole:
            answer = whole[current]
            break
        if current not in parents:
            answer = False
            break
        if current in walked:  # a cycle never reaches a root
            answer = False
            break
        walked.append(current)
        current = parents[current]
    for name in walked:
        whole[name] = answer
    return answer


def _report_off_path(
    entries: list[tuple[int, dict[str, Any]]],
    parents: dict[str, Any],
    path: set[str],
    relinked: bool,
    ctx: Context,
) -> None:
    """Say which conversation entries stay off the active branch, and lose none silently."""
    whole: dict[str, bool] = {}
    left: list[int] = []
    unplaced: list[int] = []
    for line, entry in entries:
        name = entry.get("id")
        if entry.get("type") not in _CONVERSATION or not isinstance(name, str) or name in path:
            continue
        if relinked and not _chain_is_whole(name, parents, whole):
            unplaced.append(line)
        else:
            left.append(line)
    if left:
        one = len(left) == 1
        ctx.note(
            f"{len(left)} conversation entr{'y' if one else 'ies'} on branches the session left "
            f"(line{'' if one else 's'} {_lines(left)}) {'is' if one else 'are'} not imported into this "
            "conversation: only the active branch, from the root to the last entry, is (compaction import --branches "
            "imports each other branch as a branch of it)",
            line=left[0],
        )
    if unplaced:
        one = len(unplaced) == 1
        ctx.lose(
            len(unplaced),
            f"{len(unplaced)} message{'' if one else 's'} (line{'' if one else 's'} {_lines(unplaced)}) could "
            "not be placed: their chain to the root runs through a missing entry and the re-linked active "
            "branch does not reach them",
            line=unplaced[0],
        )


def _lines(numbers: list[int], shown: int = 10) -> str:
    """Return line numbers as ``"3, 5, 9"``, the first ``shown`` and a count of the rest."""
    text = ", ".join(str(n) for n in numbers[:shown])
    return text + (f" and {len(numbers) - shown} more" if len(numbers) > shown else "")


#: Entry types that carry no conversation: skipped without a note.
_BOOKKEEPING = frozenset(
    {"session", "model_change", "thinking_level_change", "label", "session_info", "custom"}
)

#: The fields of an entry that place it in the session tree (all :func:`_active_branch` reads).
_LINK_KEYS = ("type", "id", "parentId")

#: What one entry gives: a draft, a compaction's fields (meta of the next draft), a
#: malformed entry's reason, or nothing (a session header, an entry of another type).
_Outcome = Draft | dict[str, Any] | Malformed | None


def _outcome(line: int, entry: dict[str, Any]) -> _Outcome:
    """Return what ``entry`` (from ``line``) gives, built as soon as it is read."""
    kind = entry.get("type")
    try:
        if kind == "message":
            draft = _message(entry.get("message"))
        elif kind == "branch_summary":
            summary = entry.get("summary")
            if not isinstance(summary, str):
                raise Malformed("a branch_summary entry needs a string 'summary'")
            draft = Draft(
                "user",
                text_blocks(
                    "The following is a summary of a branch that this conversation came back from:\n\n"
                    f"<summary>\n{summary}\n</summary>"
                ),
                meta={"kind": "branch_summary"},
            )
        elif kind == "custom_message":
            draft = Draft("user", _blocks(entry.get("content")), meta={"kind": "custom_message"})
        elif kind == "compaction":
            return {
                key: entry[key]
                for key in ("summary", "firstKeptEntryIndex", "firstKeptEntryId", "tokensBefore")
                if key in entry
            }
        elif not isinstance(kind, str):
            raise Malformed("an entry needs a string 'type'")
        else:
            return None
    except Malformed as err:
        return Malformed(str(err))  # without its traceback, which holds the decoded entry
    if isinstance(entry.get("timestamp"), str):
        draft.meta["timestamp"] = entry["timestamp"]
    if isinstance(entry.get("id"), str):
        draft.source_id = entry["id"]
    draft.line = line
    return draft


def parse(text: str | bytes | Iterable[bytes], ctx: Context) -> list[Draft]:
    """Parse a pi session into drafts (the active branch, compaction summaries as meta).

    One pass over the lines: each entry becomes its draft (or compaction fields, or the
    reason it is malformed) as it is read, and only its tree links (``type``, ``id``,
    ``parentId``) are kept beside, so the decoded lines are never all held at once.  The
    active branch is then chosen from the links, and the drafts on it are kept in order;
    a malformed entry is reported only when it is on the branch, as before.
    """
    links: list[tuple[int, dict[str, Any]]] = []
    outcomes: dict[int, _Outcome] = {}
    unknown: dict[str, list[int]] = {}
    for line, entry in iter_jsonl(text, ctx):
        links.append((line, {key: entry[key] for key in _LINK_KEYS if key in entry}))
        outcome = _outcome(line, entry)
        if outcome is not None:
            outcomes[line] = outcome
        elif isinstance(entry.get("type"), str) and entry["type"] not in _BOOKKEEPING:
            unknown.setdefault(entry["type"], []).append(line)
    for kind, lines in unknown.items():
        ctx.note(
            f"{len(lines)} entr{'y' if len(lines) == 1 else 'ies'} of type {kind!r} (not one this "
            f"reader knows) skipped: line{'s' if len(lines) != 1 else ''} {_lines(lines)}",
            line=lines[0],
        )
    drafts: list[Draft] = []
    pending: dict[str, Any] = {}
    for line, _links in _active_branch(links, ctx):
        outcome = outcomes.pop(line, None)
        if outcome is None:
            continue
        if isinstance(outcome, Malformed):
            ctx.problem(str(outcome), line=line)
            continue
        if isinstance(outcome, dict):
            pending["pi_compaction"] = outcome
            continue
        draft = outcome
        if pending and draft.content:
            draft.meta.update(pending)
            pending = {}
        drafts.append(draft)
    if pending:
        for draft in reversed(drafts):
            if draft.content:
                draft.meta.update(pending)
                break
    return drafts


def _is_pi_entry(record: dict[str, Any]) -> bool:
    kind = record.get("type")
    if kind == "session":
        return "cwd" in record or "version" in record or "modelId" in record
    message = record.get("message")
    if kind != "message" or not isinstance(message, dict):
        return False
    # Claude Code events carry 'uuid' / 'parentUuid'; pi's own roles settle it either way.
    return message.get("role") in ("toolResult", "bashExecution") or (
        "parentUuid" not in record and "uuid" not in record
    )


def sniff(sample: Sample) -> bool:
    """Claim JSONL whose first lines hold a pi session header (``type: session`` with ``cwd``,
    ``version`` or ``modelId``) or a pi ``message`` entry."""
    return any(_is_pi_entry(record) for record in sample.entries)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=90,
    sniff=sniff,
    parse=parse,
    holds="a pi session entry with a conversation message (type 'message')",
    reads_bytes=True,
)
