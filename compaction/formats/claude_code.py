"""Claude Code session JSONL (``~/.claude/projects/<project>/<session>.jsonl``).

One event a line.  ``user`` and ``assistant`` events carry ``message``: an Anthropic message
whose ``content`` is a string or content blocks (``text``, ``tool_use``, ``tool_result``,
``thinking``, ``image`` ...), kept as they are.  Events carry ``uuid``, ``parentUuid``,
``sessionId``, ``timestamp``, ``isSidechain``; assistant messages carry ``message.id`` and
``message.model``.

* Newer versions write each content block of one assistant response on its own line, all
  sharing one ``message.id``: they are joined back into one message, at the place of the
  first line (a block repeated on a later line, same ``tool_use`` id or identical, is kept once).
* Each tool result is its own ``user`` line; consecutive ones merge into one message later
  (``_common.finish``), so a parallel fan-out is answered by one message.
* Sidechain events (``isSidechain: true``, sub-agent conversations) and ``progress`` events
  that carry a sub-agent's message (``data.message``, newer versions, which also write the
  sub-agent's own ``agent-*.jsonl``) are not imported into the main conversation, and the
  report says so (one note each: how many, and their lines).  Sidechain events, the only
  record older versions keep of a sub-agent's work, are kept as a nested record: ``line``,
  ``uuid``, ``type`` and ``message`` of each, in ``meta["claude_code_sidechain"]`` of the next
  main message (of the last one when none follows); an event
  whose ``uuid`` was already taken (sessions resumed into a new file repeat events) is skipped.
* Events that are not messages and that Claude Code writes for itself (``summary``,
  ``system``, ``file-history-snapshot``, ``queue-operation``, ``progress``, ``custom-title``,
  ``ai-title``, ``agent-name``, ``permission-mode``, ``last-prompt``, ``pr-link``, ``tag``)
  are skipped without being counted as problems.  An event of any other ``type`` is skipped
  too, and the report names it (one note per type: how many, and their lines), since it may
  hold something the model saw.
* A line that is not a JSON object with a string ``type``, or a user/assistant event whose
  ``message`` is missing, has no ``content`` or holds something other than blocks, is
  malformed.

Claude Code's own compaction: a ``system`` event with ``subtype: "compact_boundary"``
(``compactMetadata``: ``trigger``, ``preTokens``) marks where Claude Code compacted, and the
``user`` event after it with ``isCompactSummary: true`` (its text opens "This session is being
continued from a previous conversation") holds the summary Claude Code wrote.  That summary is
a prior compaction, not a human ask and not a message the model saw beside the raw messages
it replaced (which stay in the file and in the store), so it makes no message: it is kept, with
the boundary's trigger, token count and uuid, as ``meta["claude_code_compaction"]`` of the next
message (of the last one when nothing follows), the way pi ``compaction`` entries and Codex
``compacted`` records are kept.  A file that opens with the summary (a session resumed from
a compaction, whose earlier messages are in another file) keeps it as its first message,
``meta["kind"] = "compaction_summary"``, since there it is the only record of what came before.

The order is the file's order (``parentUuid`` chains are not followed: compaction and
resumes restart them, and the fixtures leave them ``null``), so a chain broken by a skipped
line is never truncated: the events after it are kept in file order, and the report says
where (a note naming the ``parentUuid`` no event holds).  A prompt that continues from an
earlier event than the one before it (a rewind, or an edited message: the events between
are an abandoned branch) is kept in file order too, with a note naming both lines, so the
abandoned branch is neither dropped nor passed off silently as part of one conversation;
``compaction import --branches`` imports it as a branch instead
(:mod:`compaction.formats._claude_code_tree`).  Other events that continue an earlier one are
not rewinds and get no note: Claude Code links each answer of parallel tool calls to its
own call, and hook ``progress`` events hang off the chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from ..blocks import MAX_JSON_DEPTH, canonical_json, json_depth
from . import anthropic
from ._claude_code_tree import is_prompt
from ._common import Context, Draft, Malformed, copy_draft, iter_jsonl, line_list
from ._gemini_chat import is_chat_recording
from ._sniff import Sample, TranscriptFormat

__all__ = ["FORMAT", "NAME", "SessionReader", "parse", "sniff"]

NAME = "claude-code"


def _event_draft(event: dict[str, Any]) -> Draft:
    """Return the draft of a user or assistant event: its Anthropic message, with the event's
    ``uuid`` as source id and its timestamp (and the message id, to join split lines)."""
    kind = event["type"]
    message = event.get("message")
    if not isinstance(message, dict):
        raise Malformed(f"a {kind} event needs a 'message' object, found {type(message).__name__}")
    if "content" not in message:
        raise Malformed(f"the {kind} event's message has no 'content'")
    role = message.get("role", kind)
    if role != kind:
        raise Malformed(f"a {kind} event holds a message with role {role!r}")
    draft = anthropic.convert({**message, "role": kind})
    draft.source_id = event["uuid"] if isinstance(event.get("uuid"), str) else None
    if isinstance(event.get("timestamp"), str):
        draft.meta["timestamp"] = event["timestamp"]
    if isinstance(message.get("id"), str):
        draft.meta["message_id"] = message["id"]
    return draft


def _join(target: Draft, extra: Draft) -> None:
    """Append the blocks of a later line of the same assistant message, without repeats."""
    seen_ids = {b["id"] for b in target.content if b.get("type") == "tool_use" and "id" in b}
    seen = {canonical_json(b) for b in target.content}
    content = list(target.content)
    for block in extra.content:
        if block.get("type") == "tool_use" and block.get("id") in seen_ids:
            continue
        key = canonical_json(block)
        if key in seen:
            continue
        seen.add(key)
        content.append(block)
    target.content = content
    ids = target.meta.setdefault("source_ids", [target.source_id])
    ids.append(extra.source_id)


#: Event types Claude Code writes for itself (titles, snapshots, queue and UI state): no message.
BOOKKEEPING_TYPES = frozenset(
    {
        "summary",
        "system",
        "file-history-snapshot",
        "queue-operation",
        "progress",
        "custom-title",
        "ai-title",
        "agent-name",
        "permission-mode",
        "last-prompt",
        "pr-link",
        "tag",
    }
)

#: How Claude Code opens the summary it writes when it compacts a conversation.
COMPACT_SUMMARY_PREFIX = "This session is being continued from a previous conversation"


def _summary_text(event: dict[str, Any]) -> str:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _is_compact_summary(event: dict[str, Any], boundary: dict[str, Any] | None) -> bool:
    """Whether a user event is the summary Claude Code wrote when it compacted."""
    if event.get("isCompactSummary") is True:
        return True
    return (
        boundary is not None
        and "summary" not in boundary
        and (_summary_text(event).lstrip().startswith(COMPACT_SUMMARY_PREFIX))
    )


class _Chain:
    """Follow the main chain's ``parentUuid`` links to report breaks and rewinds (never to reorder)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.lines: dict[str, int] = {}  # uuid -> line of the main-chain events seen
        self.last: str | None = None
        self.last_line = 0
        self.sidechain_lines: list[int] = []
        self.progress_lines: list[int] = []

    def see(self, event: dict[str, Any], line: int) -> None:
        """Record one main-chain event and report how its ``parentUuid`` links to the file."""
        uuid, parent = event.get("uuid"), event.get("parentUuid")
        if isinstance(parent, str) and self.last is not None and parent != self.last:
            skipped = [n for n in self.ctx.skipped_lines if self.last_line < n < line]
            if parent in self.lines:
                if is_prompt(event):  # a prompt continuing an earlier event: the user went back
                    self.ctx.note(
                        f"parentUuid {parent!r} is the event at line {self.lines[parent]}, not the one before "
                        f"(line {self.last_line}): a rewind or an edited message; the events between are kept "
                        "in file order (compaction import --branches imports them as a branch)",
                        line=line,
                    )
                # else a structural link, not a rewind: each answer of parallel tool calls names its
                # own call, hook progress events hang off the chain; file order is their order
            elif skipped:
                self.ctx.note(
                    f"parentUuid {parent!r} is in no event of the file (line {skipped[-1]} was skipped); "
                    "the events after it are kept in file order",
                    line=line,
                )
        if isinstance(uuid, str):
            self.lines.setdefault(uuid, line)
            self.last, self.last_line = uuid, line

    def report_sidechains(self) -> None:
        """Say how many sub-agent events the main conversation leaves out, and where: sidechain
        events (older versions) and ``progress`` events that carry a sub-agent's message."""
        for lines, what in (
            (
                self.sidechain_lines,
                "sidechain event{s} (a sub-agent's conversation, isSidechain: true, kept verbatim in the "
                "meta 'claude_code_sidechain' of the next message",
            ),
            (
                self.progress_lines,
                "progress event{s} carrying a sub-agent's message (data.message, under the parentToolUseID call",
            ),
        ):
            count = len(lines)
            if not count:
                continue
            shown = ", ".join(str(n) for n in lines[:10])
            more = f" and {count - 10} more" if count > 10 else ""
            plural = count != 1
            self.ctx.note(
                f"{count} {what.format(s='s' if plural else '')}; line{'s' if plural else ''} {shown}{more}) "
                f"{'are' if plural else 'is'} not imported into the main conversation"
                + (
                    " (compaction import --branches imports each sidechain as a branch)"
                    if lines is self.sidechain_lines
                    else " (compaction import --branches imports each sub-agent's as a conversation of its own)"
                ),
                line=lines[0],
            )


#: The deepest a kept sidechain record may nest: it sits two levels down in a message's meta,
#: which may nest :data:`~compaction.blocks.MAX_JSON_DEPTH` levels.
_SIDECHAIN_DEPTH = MAX_JSON_DEPTH - 2


def _carries_subagent_message(event: dict[str, Any]) -> bool:
    """Whether a ``progress`` event carries a sub-agent's user or assistant message."""
    data = event.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    return isinstance(message, dict) and isinstance(message.get("message"), dict)


def _message_digest(event: dict[str, Any]) -> bytes:
    """Return a 16-byte digest of an event's ``message`` (its canonical JSON), to tell repeats apart."""
    try:
        text = canonical_json(event.get("message"))
    except (RecursionError, ValueError):  # nested past what json can write: no repeat of anything
        return b""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def parse(text: str | bytes | Iterable[bytes], ctx: Context) -> list[Draft]:
    """Parse a Claude Code session into drafts (file order; breaks, rewinds, sidechains reported)."""
    reader = SessionReader(ctx)
    for line, event in iter_jsonl(text, ctx):
        reader.feed(line, event)
    return reader.close()


class SessionReader:
    """The Claude Code parse as a fold over events: :meth:`feed` one event at a time, :meth:`close`.

    :func:`parse` feeds it every line of a file.  ``compaction import --branches`` feeds it the
    paths of a session's tree (:mod:`compaction.formats._claude_code_paths`): a path that
    continues another from a fork point resumes from a :meth:`fork` of the reader taken
    there, so the events the paths share are read once, not once a path.  A fork and the
    reader it came from share the drafts made before it; neither changes one (a later line
    of a split assistant message, or what :meth:`close` attaches, goes to a copy), so each
    gives what a parse of its own events alone would.

    Args:
        ctx: the parse's error policy and notes.
        chain: follow the ``parentUuid`` links to report breaks, rewinds and sub-agents
            (notes only; the drafts do not depend on it).
    """

    def __init__(self, ctx: Context, chain: bool = True) -> None:
        self.ctx = ctx
        self.chain: _Chain | None = _Chain(ctx) if chain else None
        self.drafts: list[Draft] = []
        self.by_message_id: dict[str, int] = {}  # an assistant message id -> the index of its draft
        # uuid -> the line of its event and a digest of its message (not the message: holding every
        # event's message kept the whole parsed file alive, 3.4 times its size at peak)
        self.seen_uuids: dict[str, tuple[int, bytes]] = {}
        self.compaction: dict[str, Any] | None = None  # a compact boundary and summary waiting for a message
        self.sidechain: list[dict[str, Any]] = []  # sidechain events waiting for the next main message
        self.shared = 0  # the drafts before this index are shared with a fork: copied before a change
        self.rewritten: list[int] = []  # the index of each shared draft copied to be changed, in order
        self.unknown_types: dict[str, list[int]] = {}  # an event type no reader knows -> its lines

    def fork(self) -> SessionReader:
        """Return a reader in this one's state (its ``ctx`` a copy, no chain), to feed other events."""
        ctx = Context(self.ctx.path, self.ctx.lenient, self.ctx.detected)
        ctx.skipped, ctx.unplaced = self.ctx.skipped, self.ctx.unplaced
        ctx.skipped_lines, ctx.problems = list(self.ctx.skipped_lines), list(self.ctx.problems)
        other = SessionReader(ctx, chain=False)
        other.drafts = list(self.drafts)
        other.by_message_id = dict(self.by_message_id)
        other.seen_uuids = dict(self.seen_uuids)
        other.compaction = self.compaction
        other.sidechain = list(self.sidechain)
        self.shared = other.shared = len(self.drafts)
        return other

    def _own(self, index: int) -> Draft:
        """The draft at ``index``, replaced by a copy first when a fork shares it."""
        draft = self.drafts[index]
        if index < self.shared:
            draft = self.drafts[index] = copy_draft(draft)
            self.rewritten.append(index)
        return draft

    def feed(self, line: int, event: dict[str, Any]) -> None:
        """Read one event (a JSON object) of line ``line`` (1-based).

        Raises:
            InvalidTranscript: the event is malformed and ``ctx`` is strict.
        """
        ctx, chain = self.ctx, self.chain
        kind = event.get("type")
        if not isinstance(kind, str):
            ctx.problem("not a Claude Code event: no string 'type'", line=line)
            return
        if event.get("isSidechain") is True:
            if kind in ("user", "assistant"):
                if chain is not None:
                    chain.sidechain_lines.append(line)
                record = {
                    "line": line,
                    "uuid": event.get("uuid"),
                    "type": kind,
                    "message": event.get("message"),
                }
                if json_depth(record, _SIDECHAIN_DEPTH) <= _SIDECHAIN_DEPTH:
                    self.sidechain.append(record)
                else:
                    ctx.note(
                        f"this sidechain event nests more than {_SIDECHAIN_DEPTH} levels of JSON, "
                        "too deep to keep in a message's meta; it is only reported",
                        line=line,
                    )
        elif chain is not None:
            chain.see(event, line)
            if kind == "progress" and _carries_subagent_message(event):
                chain.progress_lines.append(line)
        if kind == "system" and event.get("subtype") == "compact_boundary":
            metadata = event.get("compactMetadata")
            facts: dict[str, Any] = metadata if isinstance(metadata, dict) else {}
            self.compaction = {
                "boundary_uuid": event.get("uuid"),
                "timestamp": event.get("timestamp"),
                **facts,
            }
            return
        compaction = self.compaction
        if kind == "user" and event.get("isSidechain") is not True and _is_compact_summary(event, compaction):
            compaction = self.compaction = {
                **(compaction or {}),
                "summary": _summary_text(event),
                "summary_uuid": event.get("uuid"),
            }
            if not self.drafts:
                # A session resumed from a compaction: the messages the summary replaced are
                # in another file, so the summary is all this history has of them; it stays
                # a message (kind "compaction_summary", never an ask), not only a note.
                try:
                    draft = _event_draft(event)
                except Malformed as err:
                    ctx.problem(str(err), line=line)
                    return
                draft.line = line
                draft.meta["kind"] = "compaction_summary"
                draft.meta["claude_code_compaction"] = compaction
                self.compaction = None
                self.drafts.append(draft)
            return
        if kind not in ("user", "assistant") or event.get("isSidechain") is True:
            if kind not in BOOKKEEPING_TYPES and kind not in ("user", "assistant"):
                self.unknown_types.setdefault(kind, []).append(line)
            return
        uuid = event.get("uuid")
        if isinstance(uuid, str) and uuid in self.seen_uuids:
            first_line, first_digest = self.seen_uuids[uuid]
            if _message_digest(event) != first_digest:  # not a resumed session's repeat: say it is left out
                ctx.note(
                    f"the {kind} event's uuid {uuid!r} is the event's at line {first_line}, whose message "
                    "differs; a uuid names one event, so this one is not imported",
                    line=line,
                )
            return
        try:
            draft = _event_draft(event)
        except Malformed as err:
            ctx.problem(str(err), line=line)
            return
        if isinstance(uuid, str):
            self.seen_uuids[uuid] = (line, _message_digest(event))
        draft.line = line
        message_id = draft.meta.get("message_id")
        if kind == "assistant" and isinstance(message_id, str):
            first = self.by_message_id.get(message_id)
            if first is not None:
                _join(self._own(first), draft)
                return
            self.by_message_id[message_id] = len(self.drafts)
        if compaction is not None and "summary" in compaction:
            draft.meta["claude_code_compaction"] = compaction
            self.compaction = None
        if self.sidechain:
            draft.meta["claude_code_sidechain"] = self.sidechain
            self.sidechain = []
        self.drafts.append(draft)

    def close(self) -> list[Draft]:
        """Return the drafts read (what :func:`parse` returns); the reader is done after it."""
        drafts, compaction, sidechain = self.drafts, self.compaction, self.sidechain
        if compaction is not None and "summary" in compaction and drafts:
            self._own(len(drafts) - 1).meta["claude_code_compaction"] = compaction
        if sidechain and drafts:
            self._own(len(drafts) - 1).meta.setdefault("claude_code_sidechain", []).extend(sidechain)
        if self.chain is not None:
            self.chain.report_sidechains()
        for kind, lines in self.unknown_types.items():
            self.ctx.note(
                f"{len(lines)} event(s) of type {kind!r} (not a message type this reader knows) "
                f"skipped: {line_list(lines)}",
                line=lines[0],
            )
        return drafts


def sniff(sample: Sample) -> bool:
    """Claim JSONL whose first lines hold a Claude Code event: one with ``parentUuid``,
    ``sessionId``, ``isSidechain`` or ``leafUuid`` that is not a Gemini CLI chat recording."""
    keys = ("parentUuid", "sessionId", "isSidechain", "leafUuid")
    return any(
        key in record and not is_chat_recording(record) for record in sample.entries for key in keys
    )  # a Gemini CLI chat recording written on one line also has a 'sessionId


FORMAT = TranscriptFormat(
    name=NAME,
    priority=70,
    sniff=sniff,
    parse=parse,
    holds="a Claude Code 'user' or 'assistant' event (with its 'message')",
    reads_bytes=True,
)
