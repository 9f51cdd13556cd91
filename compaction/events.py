"""Compaction in events: between two events a request only grows at its end.

Providers serve a repeated request prefix from a prompt cache at a fraction of the input
price, so what an agent pays depends on how much of each request is the previous one.
Re-planning the live window on every call moves the cut between summaries and raw
messages as the history grows, and every move breaks the prefix.  Here the shape of the
request (which summaries are shown, where the raw live window starts) is a **frame** that
stays fixed between **compaction events**:

* each call compiles the frame: system, tools, the same summary stack, then every message
  from the frame's cut raw, so the request is the previous one with the new messages
  appended (see :func:`compaction.compile.compile_frame`);
* when that request would exceed the high-water mark (``Recipe.high_water_tokens``, default
  the budget), one event summarizes what the budget needs and plans a new frame whose
  request fits the low-water mark (``Recipe.low_water_ratio`` of the budget, default 60%),
  so the following turns can append again;
* each event is recorded in the store with its frame (``compaction_events``), so a restarted
  agent, or another process on the same store, compiles the same prefix;
* a branch with no event of its own starts from the frame of the newest event of the
  conversation it forks from whose request held no message past the fork
  (:func:`inherited_frame`), so its first request opens with the bytes the parent sent at
  the fork (system text, summaries, the cut) and a rewound or forked agent keeps the
  parent's cached prefix; that frame is then recorded as the branch's own.

Image decisions are the one thing that can still change an earlier message between events:
an image that falls behind the depth cap, or out of the count cap as newer images arrive,
becomes its placeholder (the caps hold on every request).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .compactor import Compactor, TickReport
from .compile import (
    CompiledRequest,
    CompilePlan,
    Shortfall,
    check_compiled_prefill,
    check_prefill,
    compile_frame,
    extend_frame,
    plan_compile,
    require_budget,
)
from .errors import OverBudget
from .recipe import Recipe
from .store import HistoryStore, compaction_claim
from .summarizers.base import Summarizer

__all__ = [
    "Frame",
    "Inherited",
    "compact_to",
    "compile_current",
    "compile_in_events",
    "current_frame",
    "inherited_frame",
    "latest_frame",
    "still_over",
]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Frame:
    """The shape of the requests between two compaction events.

    Attributes:
        cut: the first seq of the raw live window.
        cover: ``(level, start_seq, end_seq)`` of each summary shown, oldest first; they
            cover ``[0, cut)``.
        mask_before: tool outputs of live-window messages before this seq are shown masked
            (``cut`` or less: none); fixed between events like the rest, so the masked
            stretch does not creep forward turn by turn.
    """

    cut: int
    cover: tuple[tuple[int, int, int], ...]
    mask_before: int = 0

    @classmethod
    def of(cls, compiled: CompiledRequest) -> Frame:
        """Return the frame of a compiled request."""
        ranges = tuple((s.level, s.start_seq, s.end_seq) for s in compiled.summaries)
        mask = compiled.mask_before if compiled.mask_before > compiled.live_start else 0
        return cls(compiled.live_start, ranges, mask)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"cut": self.cut, "cover": [list(r) for r in self.cover]}
        if self.mask_before:
            data["mask_before"] = self.mask_before
        return data

    @classmethod
    def from_json(cls, data: Any) -> Frame | None:
        """Return the frame a :meth:`to_json` object describes, or ``None`` if it is not one."""
        try:
            cut = int(data["cut"])
            cover = tuple((int(lv), int(s), int(e)) for lv, s, e in data["cover"])
            mask = int(data.get("mask_before", 0))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return cls(cut, cover, mask)

    def compile(
        self, store: HistoryStore, recipe: Recipe, *, budget: int | None = None, tools: Sequence[dict[str, Any]] = ()
    ) -> CompilePlan:
        """Compile this frame with every message since appended (see :func:`compaction.compile.compile_frame`)."""
        return compile_frame(store, recipe, self.cut, self.cover, budget=budget, tools=tools, mask_before=self.mask_before)


def latest_frame(store: HistoryStore) -> Frame | None:
    """Return the frame of the store's newest compaction event that has one, or ``None``.

    Only the conversation's own events count; a branch without one starts from
    :func:`inherited_frame`.
    """
    for event in reversed(store.events()):
        frame = Frame.from_json(event.detail.get("frame"))
        if frame is not None:
            return frame
    return None


@dataclass(frozen=True)
class Inherited:
    """The frame a branch starts from: an ancestor's event whose request lies within the shared prefix.

    Attributes:
        frame: the frame to compile on (the event's, its masked stretch ended at ``stop``).
        conversation_id: the ancestor that recorded the event.
        event_id: the event's id.
        stop: the seq where the branch's lineage leaves that ancestor (it shares ``[0, stop)``).
    """

    frame: Frame
    conversation_id: int
    event_id: int
    stop: int

    def to_json(self) -> dict[str, int]:
        """Return what a branch's event records of where its frame came from."""
        return {"conversation_id": self.conversation_id, "event": self.event_id, "fork": self.stop}


def inherited_frame(store: HistoryStore) -> Inherited | None:
    """Return the frame a branch without events of its own starts from, or ``None`` (plan afresh).

    The conversations the branch forks from are searched nearest first; in each, its events
    newest first, for one whose request lay within what the branch shares (``[0, stop)``):

    * the event's request held no message at or past ``stop`` (its recorded ``messages``
      count is at most ``stop``; an event recorded before counts were kept is judged by its
      cut alone), so it is the frame the parent compiled on when it held the fork's
      messages, and the branch's first request opens with the same bytes;
    * its cut is at or before ``stop`` and every summary of its cover is one the branch sees
      (a summary that the branch's own summaries shadow, or one an edit made stale, rules it out);
    * an edit event (a frame of cut 0: plan afresh) counts when it edited a shared message,
      and is passed over when it edited one past the fork.

    The frame's masked stretch is ended at ``stop`` (the branch's own tool outputs are not
    masked by a decision made on other messages).

    Args:
        store: a store object scoped to the branch.

    Returns:
        The :class:`Inherited` frame, or ``None`` for a root, or when no ancestor's event fits.
    """
    rows: list[tuple[int, int, Any]] = list(store.ancestor_events())
    for cid, stop, event in reversed(_nearest_last(rows)):
        frame = _shared_frame(store, event.detail, stop)
        if frame is not None:
            return Inherited(frame, cid, event.id, stop)
    return None


def _nearest_last(rows: list[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
    """Order ``(conversation, stop, event)`` rows (nearest ancestor first, events oldest first) for a reversed walk.

    Reversed, the result gives the nearest ancestor's events newest first, then the next one's.
    """
    depth: dict[int, int] = {}
    for cid, _stop, _event in rows:
        depth.setdefault(cid, len(depth))
    return sorted(rows, key=lambda row: (-depth[row[0]], row[2].id))


def _shared_frame(store: HistoryStore, detail: dict[str, Any], stop: int) -> Frame | None:
    """Return the frame of an ancestor's event ``detail`` as the branch sharing ``[0, stop)`` may compile it, else ``None``."""
    frame = Frame.from_json(detail.get("frame"))
    if frame is None or frame.cut > stop:
        return None
    edit = detail.get("edit")
    if isinstance(edit, dict) and isinstance(edit.get("seq"), int) and edit["seq"] >= stop:
        return None  # an edit of the parent's own message past the fork: not the branch's history
    held = detail.get("messages")
    if isinstance(held, int) and not isinstance(held, bool) and held > stop:
        return None  # its request showed messages the branch does not share
    if any(end > stop for _level, _start, end in frame.cover) or not _cover_shown(store, frame):
        return None
    mask = min(frame.mask_before, stop)
    return Frame(frame.cut, frame.cover, mask if mask > frame.cut else 0)


def _cover_shown(store: HistoryStore, frame: Frame) -> bool:
    """Return whether ``frame``'s cover runs contiguously from 0 to its cut over summaries ``store`` shows.

    A summary an edit made stale is not shown, nor one another conversation's summaries shadow.
    """
    position = 0
    for level, start, end in frame.cover:
        if start != position or not any(
            (s.start_seq, s.end_seq) == (start, end) for s in store.summaries_within(level, start, end)
        ):
            return False
        position = end
    return position == frame.cut


def current_frame(store: HistoryStore) -> tuple[Frame | None, Inherited | None]:
    """Return the frame the next request compiles on, and where it came from when a branch inherits it.

    The conversation's newest own frame (:func:`latest_frame`) while the store still shows
    every summary of its cover; else, for a branch, the :func:`inherited_frame`; else
    ``(None, None)``: plan afresh.  An own frame's summary goes stale without an event of
    the conversation's own when another conversation sharing the message edits it (a
    revision is seen by every branch that shares the message): a parent's edit of a shared
    message, or a branch's edit of its parent's message.
    """
    frame = latest_frame(store)
    if frame is not None and _cover_shown(store, frame):
        return frame, None
    inherited = inherited_frame(store)
    return (None, None) if inherited is None else (inherited.frame, inherited)


def _plural(count: int, what: str) -> str:
    return f"{count} {what}" if count == 1 else f"{count} {what}s"


def still_over(short: Shortfall, ticks: Sequence[TickReport], store: HistoryStore, failed_before: int = 0) -> OverBudget:
    """Return the :class:`OverBudget` for a request that still does not fit after compressing.

    The compile's own message ends "Nothing was changed", which is not true once summaries
    were added; this says what compression did (summaries added and kept, chunks that could
    not be summarized and why) before the advice.

    Args:
        short: the last shortfall.
        ticks: the compression rounds run.
        store: the store (its failures since ``failed_before`` are named).
        failed_before: how many failures the store held before compressing.
    """
    failures = store.failures()[failed_before:]
    what, _sep, _advice = short.message.partition(" Nothing was changed;")
    l1 = sum(t.l1_added for t in ticks)
    merged = sum(sum(t.merged.values()) for t in ticks)
    done = []
    if l1 or merged:
        made = "1 summary" if l1 + merged == 1 else f"{l1 + merged} summaries"
        kinds = f"{l1} level-1" + (f", {merged} merged" if merged else "")
        kept = "it" if l1 + merged == 1 else "them"
        where = "in the in-memory store (gone when it closes)" if store.path == ":memory:" else "in the store"
        done.append(f"compression added {made} ({kinds}) and kept {kept} {where}")
    chunks = sorted({(f["level"], f["start_seq"], f["end_seq"]) for f in failures})
    if chunks:
        reasons = list(dict.fromkeys(str(f["reason"]) for f in failures))
        because = reasons[-1] + (f"; and {len(reasons) - 1} other reasons" if len(reasons) > 1 else "")
        done.append(f"{_plural(len(chunks), 'chunk')} could not be summarized ({because})")
    if not done:
        done.append("compression found nothing more to summarize")
    advice = "raise the budget"
    if chunks:
        advice = (
            "make the summarizer work (its failures are listed by `compaction stats`) and run it again, "
            "or raise the budget"
        )
    sentence = "; ".join(done)
    message = f"{what} {sentence[0].upper()}{sentence[1:]}; {advice}"
    return OverBudget(message, stage=short.stage, budget=short.budget, needed=short.needed)


def compact_to(
    store: HistoryStore,
    recipe: Recipe,
    target: int,
    compactor: Callable[[], Compactor],
    *,
    progress: Progress | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> tuple[CompilePlan, list[TickReport], OverBudget | None]:
    """Summarize as much as a request of ``target`` tokens needs; return the plan at ``target``.

    Compression first leaves half the target raw (closing everything older into chunks, the
    last one possibly below the chunk target); while the request does not fit, it summarizes
    more of the tail (a quarter, an eighth, then everything but the user's newest prompt or
    an unanswered call); when even that is over, the few summaries each round left past the
    level above are merged into one, level by level (:meth:`Compactor.merge_tail`).  Summaries
    already made are reused, so a store that fits does no summarizer work.  A chunk the summarizer fails on stops the rounds (a smaller tail would
    only send the same chunk again).

    Args:
        target: the request size to plan for (tokens).
        compactor: builds the compactor on first need (so a store that fits opens no summarizer).

    Returns:
        The plan at ``target`` (fits, or the last shortfall), one report per round, and
        ``None`` or, when new summaries stopped shrinking the request (the progress guard:
        more of the same cannot help), the :class:`OverBudget` that says so.
    """
    ticks: list[TickReport] = []
    plan = plan_compile(store, recipe, budget=target, tools=tools)
    if plan.fits:
        return plan, ticks, None
    assert plan.shortfall is not None
    last = plan.shortfall
    failed_before = len(store.failures())
    messages = store.next_seq()
    built = compactor()
    excused = False
    for keep in (target // 2, target // 4, target // 8, 0):
        frontier = store.summary_frontier(1)
        report = built.tick(keep_tail_tokens=keep, close_tail=True, progress=progress)
        ticks.append(report)
        plan = plan_compile(store, recipe, budget=target, tools=tools)
        if plan.fits:
            return plan, ticks, None
        assert plan.shortfall is not None
        short = plan.shortfall
        made = report.l1_added + sum(report.merged.values())
        grew, messages = store.next_seq() != messages, store.next_seq()
        if report.failures and not made:
            break  # the frontier stops at the chunk that failed
        advanced = store.summary_frontier(1) > frontier
        stuck = made and not grew and short.needed >= last.needed and short.stage == last.stage
        if stuck and advanced and not excused:
            # The ask ledger can make the first summaries of a stretch cost more than its
            # raw asks; a round that reached further into the raw tail is excused once.
            excused = True
        elif stuck:
            # Progress guard: new summaries that do not shrink the request mean more of the
            # same cannot help; stop instead of summarizing on.  (Not when messages were
            # appended meanwhile: then the request grew for another reason.)
            err = still_over(short, ticks, store, failed_before)
            stalled = OverBudget(
                f"compaction made no progress: {made} new summaries left the request at "
                f"{short.needed} tokens (before: {last.needed}). {err}",
                stage=short.stage,
                budget=short.budget,
                needed=short.needed,
            )
            return plan, ticks, stalled
        last = short
    else:
        # Every round ran and the request is still over: each round closed its stretch as a
        # summary of its own, fewer than merge_fanout, each shown with its framing.  Merge
        # each level's tail into one, lowest level first, until the request fits.
        level = 1
        while store.summary_frontier(level) > 0:
            report = built.merge_tail(level)
            if sum(report.merged.values()):
                ticks.append(report)
                plan = plan_compile(store, recipe, budget=target, tools=tools)
                if plan.fits:
                    return plan, ticks, None
            level += 1
    return plan, ticks, None


def compile_current(
    store: HistoryStore, recipe: Recipe, *, tools: Sequence[dict[str, Any]] = ()
) -> CompiledRequest:
    """Compile the next request without summarizing: on the store's current frame when it fits.

    What ``compaction compile`` does after ``compaction compress --budget``: the frame the
    last compaction event recorded, with every message since appended, so the request has
    the prefix the agent's previous requests had; a store without a frame, or whose frame no
    longer fits, is planned afresh (:func:`compaction.compile.compile_request`).

    Raises:
        OverBudget: nothing fits the budget without summarizing more.
        AssistantPrefillRefused: the request would end on an assistant turn its model refuses
            (``recipe.assistant_prefill``, :mod:`compaction.prefill`).
    """
    check_prefill(store, recipe)
    frame, _inherited = current_frame(store)
    if frame is not None:
        plan = frame.compile(store, recipe, tools=tools)
        if plan.compiled is not None:
            return check_compiled_prefill(store, recipe, plan.compiled)
    plan = plan_compile(store, recipe, tools=tools)
    if plan.compiled is None:
        assert plan.shortfall is not None
        raise plan.shortfall.error()
    return check_compiled_prefill(store, recipe, plan.compiled)


def compile_in_events(
    store: HistoryStore,
    recipe: Recipe,
    summarizer: Callable[[], Summarizer],
    *,
    progress: Progress | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> tuple[CompiledRequest, list[TickReport]]:
    """Compile the next request on the current frame, or compact in one event when it outgrows it.

    Args:
        store: the history (summaries and events are added; messages are never edited).
        recipe: settings; ``budget_tokens`` is required; ``high_water_tokens`` and
            ``low_water_ratio`` place the event.
        summarizer: builds the summarizer when an event needs one.
        progress: called as ``progress(done, total)`` while chunks are summarized.
        tools: tool definitions offered to the model (counted against the budget).

    Returns:
        The compiled request (its ``budget`` is the recipe's) and one report per compression
        round (empty between events).

    Raises:
        OverBudget: even the smallest rendering exceeds the budget (stage and sizes named).
        AssistantPrefillRefused: the request would end on an assistant turn its model refuses
            (checked before any summarizing).
    """
    budget = require_budget(recipe.budget_tokens)
    check_prefill(store, recipe, raw_limit=low_water(recipe, budget) // 2)  # an event compacts to low water
    high = min(budget, recipe.high_water_tokens or budget)
    done = _append_only(store, recipe, budget, high, tools)
    if done is not None:
        return check_compiled_prefill(store, recipe, done), []
    # One worker compacts a store at a time (a PostgreSQL store's claim; SQLite needs none):
    # a worker that waited finds the other's event and appends to it instead.
    with compaction_claim(store):
        done = _append_only(store, recipe, budget, high, tools)
        if done is not None:
            return check_compiled_prefill(store, recipe, done), []
        compiled, ticks = _event(store, recipe, summarizer, budget, high, progress, tools)
    return check_compiled_prefill(store, recipe, compiled), ticks


def low_water(recipe: Recipe, budget: int) -> int:
    """Return the request size (tokens) a compaction event compacts to: ``low_water_ratio`` of ``budget``,
    at most the high-water mark, at least 1."""
    high = min(budget, recipe.high_water_tokens or budget)
    return max(1, min(high, int(budget * recipe.low_water_ratio)))


def _append_only(
    store: HistoryStore, recipe: Recipe, budget: int, high: int, tools: Sequence[dict[str, Any]]
) -> CompiledRequest | None:
    """Return the request on the current frame (or a fresh plan, adopted) when it fits ``high``, else ``None``.

    A frame a branch inherits (:func:`inherited_frame`) is recorded as the branch's own
    event once it fits, so the branch keeps it whatever its ancestors record later.
    """
    frame, inherited = current_frame(store)
    if frame is not None:
        plan = frame.compile(store, recipe, budget=high, tools=tools)
    else:
        plan = plan_compile(store, recipe, budget=high, tools=tools)
    if plan.compiled is None:
        return None
    compiled = plan.compiled
    shape = {"frame": Frame.of(compiled).to_json(), "messages": compiled.total_messages}
    if inherited is not None:
        store.record_event(compiled.tokens, compiled.tokens, budget, {**shape, "inherited": inherited.to_json()})
    elif frame is None and (compiled.summaries or compiled.masked_seqs):  # adopt the shape a fresh plan found
        store.record_event(compiled.tokens, compiled.tokens, budget, {**shape, "adopted": True})
    return _at_budget(compiled, budget)


def _event(
    store: HistoryStore,
    recipe: Recipe,
    summarizer: Callable[[], Summarizer],
    budget: int,
    high: int,
    progress: Progress | None,
    tools: Sequence[dict[str, Any]],
) -> tuple[CompiledRequest, list[TickReport]]:
    """Hold one compaction event: summarize down to the low-water mark, record the new frame."""
    frame, inherited = current_frame(store)
    if frame is not None:
        current = frame.compile(store, recipe, budget=high, tools=tools)
    else:
        current = plan_compile(store, recipe, budget=high, tools=tools)
    assert current.shortfall is not None
    before = current.shortfall.needed
    failed_before = len(store.failures())
    low = low_water(recipe, budget)
    built: list[Compactor] = []

    def make() -> Compactor:
        built.append(Compactor(store, recipe, summarizer()))
        return built[-1]

    plan, ticks, stalled = compact_to(store, recipe, low, make, progress=progress, tools=tools)
    if frame is not None:  # keep the old summary stack as the prefix when that fits
        extended = extend_frame(store, recipe, frame.cut, frame.cover, budget=low, tools=tools)
        if extended.fits:
            plan = extended
    if plan.compiled is None:  # the low-water mark is out of reach: settle for the high-water mark
        plan = plan_compile(store, recipe, budget=high, tools=tools)
    if plan.compiled is None:
        assert plan.shortfall is not None
        if stalled is not None:
            raise _at_high(stalled, plan.shortfall)
        raise still_over(plan.shortfall, ticks, store, failed_before) if ticks else plan.shortfall.error()
    compiled = plan.compiled
    made = {
        "l1": sum(t.l1_added for t in ticks),
        "merged": sum(sum(t.merged.values()) for t in ticks),
        "failures": sum(t.failures for t in ticks),
    }
    detail: dict[str, Any] = {
        "frame": Frame.of(compiled).to_json(),
        "low_water": low,
        "messages": compiled.total_messages,
        "summaries": made,
    }
    if inherited is not None:  # the stack kept as the prefix is the ancestor's
        detail["inherited"] = inherited.to_json()
    store.record_event(before, compiled.tokens, budget, detail)
    return _at_budget(compiled, budget), ticks


def _at_budget(compiled: CompiledRequest, budget: int) -> CompiledRequest:
    """Return ``compiled`` (planned for a smaller target) as the request of the full budget.

    The bytes do not change: a request within the low-water mark is within the budget.
    """
    return compiled if compiled.budget == budget else dataclasses.replace(compiled, budget=budget)


def _at_high(stalled: OverBudget, short: Shortfall) -> OverBudget:
    """Report a stalled compaction against the budget (not the low-water mark it aimed at)."""
    return OverBudget(
        f"compaction made no progress: the request still needs {short.needed} tokens, over the budget of "
        f"{short.budget}. {stalled}",
        stage=short.stage,
        budget=short.budget,
        needed=short.needed,
    )
