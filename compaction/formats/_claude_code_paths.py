"""Parse every path of a Claude Code session's tree, reading each event once.

``compaction import --branches`` imports each rewind and sidechain of a session
(:func:`~compaction.formats._claude_code_tree.session_tree`) as a branch: its path is the
events of what it continues up to where it leaves it, then its own.  Parsing each path whole
reads the shared events again for every path: ``n`` rewinds each nested inside the one
before read the sum of the paths' lengths, quadratic in ``n`` (1.2 million messages at 1,100
deep).  Here the paths are read as a tree instead: the conversation's own events (the
trunk) and each thread are fed once to a :class:`~compaction.formats.claude_code.SessionReader`,
and a thread continuing another resumes from a :meth:`~compaction.formats.claude_code.SessionReader.fork`
of that one's reader taken at its fork point, so each event is read and converted once; the
drafts are finished with a shared :class:`~compaction.formats._common.FinishMemo`, so a
message the paths share is checked and made once and is one :class:`~compaction.blocks.Message`.

The result is what parsing each path's text whole gives (``path_lines`` and the parser):
the reader is the parser's own fold, and a fork starts from exactly the state the parser
reaches after the lines the paths share.  Where that cannot be had, :func:`thread_messages`
says so and the caller parses the path whole as before: a thread whose shared lines are not
a prefix of what it continues (never, for trees :func:`session_tree` builds), one that
shares no history (a sub-agent's own conversation, already linear), a path with no message
left (its error names what was skipped), and, under strict parsing, every thread once any
line fails (the error is then the one the first failing path gives).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any

from ..blocks import Message
from ..errors import InvalidTranscript
from ._claude_code_tree import SessionTree, Thread, split_lines
from ._common import (
    Context,
    Draft,
    FinishMemo,
    _is_tool_results_only,
    _merge_remembered,
    finish,
    read_jsonl_line,
)
from .claude_code import SessionReader

__all__ = ["ThreadParse", "holds_messages", "line_holds_message", "thread_messages"]


@dataclass(frozen=True)
class ThreadParse:
    """What one thread's path parses to.

    Attributes:
        holds: whether the path holds a user or assistant event the parser would take as a
            message (:func:`holds_messages`); a path that does not is not imported.
        messages: the path's messages, or ``None`` when the caller must parse the path whole
            (see the module docstring).
        shares: ``(thread, count)``: the first ``count`` of ``messages`` are the first
            ``count`` of that (earlier) thread's, the same objects; ``None`` when not known.
    """

    holds: bool
    messages: list[Message] | None
    shares: tuple[int, int] | None = None


def line_holds_message(line: str) -> bool:
    """Whether one line of a Claude Code session is a user or assistant event of the main chain."""
    if '"user"' not in line and '"assistant"' not in line:
        return False  # a quick skip of blank and other lines before parsing
    try:
        event = json.loads(line)
    except ValueError:
        return False
    return (
        isinstance(event, dict)
        and event.get("type") in ("user", "assistant")
        and event.get("isSidechain") is not True
    )


def holds_messages(text: str) -> bool:
    """Whether a Claude Code text holds a user or assistant event the parser would take as a message."""
    return any(line_holds_message(line) for line in split_lines(text))


class _Finished:
    """:func:`~._common.finish` as a fold: its state after a path's first drafts.

    ``messages``: the messages of the drafts before ``group``; ``group``: the last message's
    drafts (a run of tool-result-only ones may still grow); ``ids``: the ``tool_use`` ids
    seen; ``repeated``: one was seen twice, so :func:`~._common.uniquify_tool_ids` would
    rename one and the fold's messages are not finish's (the path is finished whole).
    Without a repeated id the renaming changes nothing, so the fold gives finish's messages
    and a path continuing another starts from the other's state where it forks.
    """

    __slots__ = ("group", "ids", "messages", "repeated")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.group: list[Draft] = []
        self.ids: set[Any] = set()
        self.repeated = False

    def copy(self) -> _Finished:
        other = _Finished()
        other.messages, other.group, other.ids = list(self.messages), list(self.group), set(self.ids)
        other.repeated = self.repeated
        return other

    def fold(
        self, drafts: list[Draft], start: int, ctx: Context, memo: FinishMemo, cuts: set[int]
    ) -> dict[int, _Finished]:
        """Take in ``drafts[start:]``; return a copy of the state before each index of ``cuts``."""
        states: dict[int, _Finished] = {}
        for index in range(start, len(drafts)):
            if index in cuts:
                states[index] = self.copy()
            draft = drafts[index]
            if not draft.content:
                continue  # left out (the note saying so is a branch parse's, which is not kept)
            why = memo.problem(draft)
            if why is not None:
                ctx.problem(why, line=draft.line, where=draft.where)
                continue
            for block in draft.content:
                if block.get("type") == "tool_use":
                    if block.get("id") in self.ids:
                        self.repeated = True
                    self.ids.add(block.get("id"))
            group = self.group
            if group and _is_tool_results_only(group[-1]) and _is_tool_results_only(draft):
                group.append(draft)
                continue
            if group:
                self.messages.append(memo.message(_merge_remembered(group, memo)[0]))
            self.group = [draft]
        if len(drafts) in cuts:
            states[len(drafts)] = self.copy()
        return states

    def result(self, memo: FinishMemo) -> list[Message]:
        """The path's messages (its drafts all taken in)."""
        if not self.group:
            return list(self.messages)
        return [*self.messages, memo.message(_merge_remembered(self.group, memo)[0])]


def _path_line(lines: list[str], index: int, sidechain: frozenset[int]) -> str:
    """Line ``index`` as the path's text holds it (see :func:`~._claude_code_tree.path_lines`)."""
    line = lines[index]
    if index in sidechain:
        line = json.dumps({**json.loads(line), "isSidechain": False}, ensure_ascii=False)
    return line


def _resumable(thread: Thread, base: tuple[int, ...] | None) -> int | None:
    """How many of ``thread``'s first lines are ``base``'s first (``None``: it cannot resume from ``base``)."""
    if base is None or thread.fork_line is None or thread.carried_lines or not thread.shares_history:
        return None
    shared = bisect.bisect_left(base, thread.fork_line)
    if thread.lines[:shared] != base[:shared]:
        return None
    if any(index < thread.fork_line for index in thread.sidechain_lines):
        return None
    return shared


class _Walk:
    """The readers of the trunk and the threads, and the forks taken for the threads to resume from."""

    def __init__(self, lines: list[str], name: str, lenient: bool) -> None:
        self.lines = lines
        self.memo = FinishMemo()
        self.forks: dict[tuple[int, int], SessionReader] = {}  # (base, position) -> a reader there
        self.waiting: dict[tuple[int, int], int] = {}  # (base, position) -> threads still to resume there
        self.positions: dict[int, set[int]] = {}  # base -> the positions threads resume from
        self.holds_at: dict[tuple[int, int], bool] = {}  # (base, position) -> a message line before it
        self.drafts_at: dict[tuple[int, int], int] = {}  # (base, position) -> the drafts its reader had
        self.marks: dict[tuple[int, int], int] = {}  # (base, position) -> len(base reader.rewritten) then
        self.finished: dict[tuple[int, int], _Finished] = {}  # (base, position) -> finish's fold there
        self.name, self.lenient = name, lenient

    def run(
        self,
        base: int,
        reader: SessionReader,
        path: tuple[int, ...],
        start: int,
        holds: bool,
        sidechain: frozenset[int],
    ) -> bool:
        """Feed ``path[start:]`` to ``reader``, forking it where threads resume from ``base``
        (``-1``: the trunk; else a thread's index); return whether the path holds a message line."""
        positions = sorted(p for p in self.positions.get(base, ()) if p >= start)
        lines, ctx = self.lines, reader.ctx
        at = start
        # the trunk is read only as far as a thread shares it (the main import reads it whole)
        for position in [*positions] if base < 0 else [*positions, None]:
            stop = len(path) if position is None else min(position, len(path))
            for index in path[at:stop]:
                line = _path_line(lines, index, sidechain)
                holds = holds or line_holds_message(line)
                if index == 0 and line.startswith("\ufeff"):
                    line = line[1:]  # a path's text starting with a byte order mark: the parse drops it
                event = read_jsonl_line(index + 1, line, ctx)
                if event is not None:
                    reader.feed(index + 1, event)
            at = stop
            if position is not None:
                self.forks[(base, position)] = reader.fork()
                self.holds_at[(base, position)] = holds
                self.drafts_at[(base, position)] = len(reader.drafts)
                self.marks[(base, position)] = len(reader.rewritten)
        return holds

    def finish(
        self, base: int, reader: SessionReader, drafts: list[Draft], start: int, state: _Finished
    ) -> None:
        """Fold ``drafts[start:]`` (``base``'s, from ``reader``) into ``state`` and keep the fold's
        state where each thread resuming from ``base`` forks, when its drafts there are still
        the ones it forked with (the reader copied none of them to change it since)."""
        keys = [(base, p) for p in self.positions.get(base, ()) if (base, p) in self.drafts_at]
        cuts = {self.drafts_at[key] for key in keys}
        states = state.fold(drafts, start, reader.ctx, self.memo, cuts)
        for key in keys:
            count = self.drafts_at[key]
            if count in states and all(i >= count for i in reader.rewritten[self.marks[key] :]):
                self.finished[key] = states[count].copy()  # keys may share a count: one state each

    def resume(self, base: int, position: int) -> tuple[SessionReader, bool, int, _Finished | None]:
        """A reader at ``position`` of ``base``'s path for one thread, whether a message line came
        before, how many drafts it holds, and the finish fold's state there (``None``: unknown)."""
        key = (base, position)
        self.waiting[key] -= 1
        holds, count, state = self.holds_at[key], self.drafts_at[key], self.finished.get(key)
        if self.waiting[key]:
            return self.forks[key].fork(), holds, count, state.copy() if state is not None else None
        del self.waiting[key], self.holds_at[key], self.drafts_at[key], self.marks[key]
        self.finished.pop(key, None)
        return self.forks.pop(key), holds, count, state


def thread_messages(text: str, tree: SessionTree, name: str, lenient: bool) -> list[ThreadParse]:
    """Parse the path of each thread of ``tree`` (a session's, from ``text``), each event once.

    Args:
        text: the session file's text.
        tree: its :func:`~._claude_code_tree.session_tree`.
        name: the name notes and errors give the file (a branch's parse is named so).
        lenient: parse leniently (malformed lines skipped), as the main import did.

    Returns:
        One :class:`ThreadParse` per thread of ``tree``, in its order: the messages of its
        path exactly as parsing the path's text whole gives them, or ``None`` where the
        caller must parse it whole (see the module docstring).
    """
    threads = tree.threads
    none = [ThreadParse(True, None) for _thread in threads]
    lines = split_lines(text)
    walk = _Walk(lines, name, lenient)
    plan: list[tuple[int, int] | None] = []  # each thread: (its base, where it resumes) or None
    for thread in threads:
        base_index = -1 if thread.continues is None else thread.continues
        base_path = tree.trunk if base_index < 0 else threads[base_index].lines
        resumable = base_index < 0 or plan[base_index] is not None
        shared = _resumable(thread, base_path) if resumable else None
        if shared is not None and base_index >= 0 and shared < plan[base_index][1]:  # type: ignore[index]
            shared = None  # it would resume where its base's reader has not been
        if shared is None:
            plan.append(None)
            continue
        plan.append((base_index, shared))
        walk.waiting[(base_index, shared)] = walk.waiting.get((base_index, shared), 0) + 1
        walk.positions.setdefault(base_index, set()).add(shared)
    if not any(plan):
        return none
    out: list[ThreadParse] = []
    try:
        trunk = SessionReader(Context(name, lenient), chain=False)
        walk.run(-1, trunk, tree.trunk, 0, False, frozenset())
        walk.finish(-1, trunk, trunk.drafts, 0, _Finished())
        for index, thread in enumerate(threads):
            step = plan[index]
            if step is None:
                out.append(ThreadParse(True, None))
                continue
            reader, holds, count, state = walk.resume(*step)
            shares = (step[0], len(state.messages)) if state is not None and step[0] >= 0 else None
            holds = walk.run(index, reader, thread.lines, step[1], holds, thread.sidechain_lines)
            if not holds:
                out.append(ThreadParse(False, None))
                continue
            ctx = reader.ctx
            drafts = reader.close()
            if state is None or any(i < count for i in reader.rewritten):
                state, count = _Finished(), 0  # the drafts it shares changed (or no state there): all of them
                shares = None
            walk.finish(index, reader, drafts, count, state)
            if state.repeated:
                messages, shares = finish(drafts, ctx, walk.memo), None
            else:
                messages = state.result(walk.memo)
            if shares is not None and out[shares[0]].messages is None:
                shares = None  # what it shares with is parsed whole: other messages
            out.append(ThreadParse(True, messages if messages and not ctx.unplaced else None, shares))
    except InvalidTranscript:  # strict: the caller parses each path whole, and the first failing one says why
        return none
    return out
