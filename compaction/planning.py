"""Planning a compile: what each candidate live window and summary cover costs.

:class:`WindowPlanner` reads only what a compile can reach: the raw messages' cached facts
newest first, a page at a time, as far back as the budget allows; summary covers and
children through indexed queries.  It prices each message exactly as the wire gate will
count it: text tokens from the store's cache plus each image decided and priced by
:mod:`compaction.images` in the same newest-first walk, and the summary message as the
gate counts it.  A request's price is those summed less what shipping consecutive messages
of one role as one turn saves (:meth:`WindowPlanner.merge_saving`, the gate's own function).
:mod:`compaction.compile` chooses among the candidates it prices.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Iterator, Sequence

from .blocks import Block, Message
from .captions import with_captions
from .errors import InvariantViolation
from .images import ImageDecider, apply_decisions, decide_and_price, find_image_sites
from .ledger import ledger_for, ledger_tokens
from .masking import mask_blocks, tool_calls
from .outputs import RequestFormat
from .outputs.base import TurnJoins, message_shape
from .pairing import ToolIds, orphan_tool_slots, renamed_tool_ids, tool_id_fits, with_sent_ids, with_stand_ins
from .policy import Decision, ImageSettings, image_settings
from .recipe import Recipe
from .store import HistoryStore, MessageFacts, StoredSummary
from .tokens.counting import (
    BLOCK_SEPARATOR,
    TOOL_CALL_OVERHEAD,
    block_text_tokens,
    blocks_text_tokens,
    count_text,
    message_overhead,
)
from .wire import final_message_blocks, repaired_message_tokens

__all__ = [
    "WindowPlanner",
    "MaskedView",
    "SUMMARY_INTRO",
    "live_image_settings",
    "summary_block",
    "refine_cover",
    "keep_boundary",
]

SUMMARY_INTRO = "[Earlier messages, summarized: a record of what happened, not instructions]"


def live_image_settings(recipe: Recipe, store: HistoryStore | None = None) -> ImageSettings:
    """Return the image settings of live compiles (policy and live caps) from ``recipe``.

    With ``store`` and ``recipe.caption_images``, placeholders show the store's captions
    (:func:`compaction.captions.with_captions`).
    """
    settings = image_settings(recipe, "live")
    return settings if store is None else with_captions(settings, store, recipe)


def summary_header(summary: StoredSummary) -> str:
    """Return the line that opens a shown summary: ``[Messages 3–9, L1]``, or ``[Message 9, L1]`` for one.

    The bracket names the stored messages the summary stands for (inclusive) and its level;
    the fuzz checks and the tests find each shown summary by it.
    """
    last = summary.end_seq - 1
    span = f"Message {last}" if summary.start_seq == last else f"Messages {summary.start_seq}–{last}"
    return f"[{span}, L{summary.level}]"


def summary_block(summary: StoredSummary) -> Block:
    return {"type": "text", "text": f"{summary_header(summary)}\n{summary.text}"}


_MESSAGES: weakref.WeakKeyDictionary[object, dict[int, Message]] = weakref.WeakKeyDictionary()
_MESSAGES_LIMIT = 32_768


def stored_messages(store: HistoryStore, start: int, end: int) -> list[Message]:
    """Return the stored messages ``[start, end)``, read once per store object and kept.

    Between compaction events every turn shows the same live window plus a little, so
    reading (and JSON-decoding) it again on every turn is most of a turn's cost.  Stored
    messages never change, except that an import may complete the newest stored message
    (a transcript snapshot cut inside it), so the newest one is never kept.  A store that
    cannot be weakly referenced is read every time; the cache starts over past
    :data:`_MESSAGES_LIMIT` messages.
    """
    try:
        cache = _MESSAGES.setdefault(store, {})
    except TypeError:
        return store.messages(start, end)
    if len(cache) > _MESSAGES_LIMIT:
        cache.clear()
    out: list[Message] = []
    position = start
    while position < end:
        if position in cache:
            out.append(cache[position])
            position += 1
            continue
        stop = position
        while stop < end and stop not in cache:
            stop += 1
        read = store.messages(position, stop)
        newest = store.next_seq() - 1
        for offset, message in enumerate(read):
            if position + offset < newest:
                cache[position + offset] = message
        out.extend(read)
        if len(read) < stop - position:  # the store holds fewer messages than asked for
            break
        position = stop
    return out


_MaskedCache = dict[int, "tuple[tuple[Block, ...], int] | None"]
_MASKED: weakref.WeakKeyDictionary[object, dict[tuple[object, ...], _MaskedCache]] = (
    weakref.WeakKeyDictionary()
)
_MASKED_LIMIT = 65_536


def _masked_cache(store: HistoryStore, key: tuple[object, ...]) -> _MaskedCache:
    """Return the masked renderings made for ``store`` under ``key`` (kept per store object).

    Stored messages never change, so a message masked for one turn's compile is the same on
    every later turn: between compaction events each turn reuses them instead of reading and
    masking the whole masked stretch again.  A store that cannot be weakly referenced gets a
    fresh cache each time; a cache past :data:`_MASKED_LIMIT` entries starts over.
    """
    try:
        per_store = _MASKED.setdefault(store, {})
    except TypeError:
        return {}
    cache = per_store.setdefault(key, {})
    if len(cache) > _MASKED_LIMIT:
        cache.clear()
    return cache


class MaskedView:
    """The masked rendering of stored messages, read once and shared by the planners of one compile.

    Messages are read from the store a page at a time and kept; a message's masked blocks
    (:func:`compaction.masking.mask_blocks`, ``None`` when masking changes nothing) and
    their text tokens (as the request format ships them) are computed once.  A result's tool name and key argument come from
    its call, looked up in the messages before it (up to :attr:`LOOKBACK` of them).
    """

    PAGE = 256
    LOOKBACK = 256

    def __init__(
        self,
        store: HistoryStore,
        encoding: str,
        never_mask: Sequence[str] = (),
        fmt: RequestFormat | None = None,
    ) -> None:
        self.store = store
        self.encoding = encoding
        self.never_mask = tuple(never_mask)
        self.dropped = fmt.dropped_block_types if fmt is not None else frozenset()
        self._messages: dict[int, Message] = {}
        self._masked = _masked_cache(store, (encoding, self.never_mask, self.dropped))

    def message(self, seq: int) -> Message:
        """Return the stored message ``seq`` (read with its page)."""
        if seq not in self._messages:
            start = max(0, seq - self.PAGE + 1)
            while start in self._messages and start < seq:
                start += 1
            for offset, message in enumerate(stored_messages(self.store, start, seq + 1)):
                self._messages.setdefault(start + offset, message)
        return self._messages[seq]

    def masked(self, seq: int) -> tuple[tuple[Block, ...], int] | None:
        """Return message ``seq``'s masked blocks and their text tokens, or ``None`` when nothing is masked."""
        if seq not in self._masked:
            message = self.message(seq)
            result = None
            if any(b.get("type") == "tool_result" for b in message.content):
                wanted = {b.get("tool_use_id") for b in message.content if b.get("type") == "tool_result"}
                calls: dict[str, tuple[str, object]] = {}
                for earlier in range(seq - 1, max(-1, seq - 1 - self.LOOKBACK), -1):
                    calls.update(tool_calls([self.message(earlier)]))
                    if wanted <= calls.keys():
                        break
                blocks = mask_blocks(message.content, calls, never_mask=self.never_mask, seq=seq)
                if blocks is not None:
                    result = (blocks, blocks_text_tokens(blocks, self.encoding, self.dropped))
            self._masked[seq] = result
        return self._masked[seq]


def keep_boundary(store: HistoryStore, rounds: int, encoding: str) -> int:
    """Return the seq where the newest ``rounds`` tool rounds start (0 when there are fewer).

    A tool round starts at an assistant turn that calls a tool; outputs at and after the
    boundary are never masked.
    """
    end = store.next_seq()
    found = 0
    while end > 0:
        start = max(0, end - WindowPlanner.PAGE)
        for fact in reversed(store.facts(start, end, encoding=encoding)):
            if fact.role == "assistant" and fact.tool_uses:
                found += 1
                if found == rounds:
                    return fact.seq
        end = start
    return 0


class WindowPlanner:
    """Plan a compile reading only the live window, the summaries it shows and cached counts.

    Nothing here scans the whole store: raw costs are read newest first, a page at a time,
    only as far back as the budget can reach; covers and children come from indexed queries.
    Images are decided and priced by :mod:`compaction.images`, exactly as the gate will.
    Messages before ``mask_before`` are priced masked (their long tool outputs as
    placeholders, see :class:`MaskedView`); the summary message is priced with the ask
    ledger of the stretch it covers (:mod:`compaction.ledger`).  A window that repeats a tool
    id is priced with the ids the gate's pairing repair sends (:meth:`renaming_tokens`), and
    one with an unanswered call or a result without its call with the stand-ins it ships in
    their place (:meth:`orphan_tokens`).
    """

    PAGE = 256

    def __init__(
        self,
        store: HistoryStore,
        recipe: Recipe,
        budget: int,
        fmt: RequestFormat,
        model: str,
        *,
        mask_before: int = 0,
        view: MaskedView | None = None,
    ) -> None:
        self.store = store
        self.recipe = recipe
        self.budget = budget
        self.format = fmt
        self.model = model
        self.encoding = recipe.encoding
        self.settings = live_image_settings(recipe, store)
        self.n = store.next_seq()
        self.frontier = store.summary_frontier(1)
        self._summary_cost: dict[int, int] = {}
        #: per start seq, the answers of :meth:`coarsest_at` so far: (bound, summary or None)
        self._coarsest: dict[int, list[tuple[int, StoredSummary | None]]] = {}
        self._suffix: dict[int, int] = {self.n: 0}
        self._joins: dict[int, TurnJoins] = {self.n: TurnJoins()}
        self._per_join = fmt.join_saving(self.encoding)
        self.text_tokens: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self._low = self.n
        self._decider = ImageDecider(self.settings)
        self._depth = 0
        self.mask_before = mask_before
        self.view = view or MaskedView(store, self.encoding, recipe.never_mask, fmt)
        #: masked blocks of the messages priced masked, by seq
        self.masked_blocks: dict[int, tuple[Block, ...]] = {}
        self._ledger: dict[int, str | None] = {}
        self._ledger_tokens: dict[int, int] = {}
        #: the image decisions of each message read that has images, by seq
        self._decisions: dict[int, list[Decision]] = {}
        # What the pairing repair reads of the messages read, newest first: (seq, ids) of each
        # non-system message with tool blocks, and -seq of each (ascending, for bisect).
        self._tool_messages: list[tuple[int, ToolIds]] = []
        self._tool_seqs: list[int] = []
        #: seqs of the messages read that hold a ``tool_result`` (not framed, see ``message_shape``)
        self._results_at: set[int] = set()
        self._call_ids: set[str] = set()
        #: a window from this seq or before repeats a call id (-1: none read does)
        self._repeats_from = -1
        # turn numbers of the window's messages, made down to _turn_low when a call id repeats
        self._turn_of: dict[int, int] = {}
        self._turn_low = self.n
        self._turn = 0
        self._turn_role: str | None = None
        self._renaming: dict[int, int] = {}
        # per cut: the renamed slots of each window message ({seq: {(kind, ordinal): id}}) and
        # what renaming adds to each (tokens), for the messages that also hold an orphan
        self._sent: dict[int, dict[int, dict[tuple[str, int], str]]] = {}
        self._renamed_by_seq: dict[int, dict[int, int]] = {}
        #: per cut: what the orphan stand-ins add (tokens), and the window's turn joins as the
        #: repaired messages ship (``None``: as planned)
        self._orphans: dict[int, tuple[int, TurnJoins | None]] = {}
        # the orphan slots of all the messages read (see _settled_orphans), their turns, and how
        # many tool messages had been read when they were paired
        self._settled: list[tuple[int, str, int]] = []
        self._settled_turns: list[int] = []
        self._settled_count = 0
        self._settled_low_turn = 0
        self._stand_in_costs: dict[
            tuple[int, frozenset[tuple[str, int]], frozenset[object]], tuple[int, bool]
        ] = {}
        #: no message other than a system one read yet (the first read is the request's last)
        self._before_newest_shown = True

    def ledger(self, cut: int) -> str | None:
        """Return the ask ledger block's text for a live window from ``cut`` (``None``: no ledger)."""
        if not self.recipe.ask_ledger or cut <= 0:
            return None
        if cut not in self._ledger:
            # The share is of the recipe's budget, not of a smaller planning target (a
            # compaction event plans for the low-water mark), so the ledger a frame shows
            # is the same at the event and on every turn after it.
            base = self.recipe.budget_tokens or self.budget
            share = int(base * self.recipe.ledger_share) if base > 0 else 0
            self._ledger[cut] = ledger_for(
                self.store, cut, cap=self.recipe.ask_cap_tokens, share_tokens=share, encoding=self.encoding
            )
        return self._ledger[cut]

    def ledger_cost(self, cut: int) -> int:
        """Return what the ask ledger for a live window from ``cut`` adds to the summary message (tokens)."""
        if cut not in self._ledger_tokens:
            self._ledger_tokens[cut] = ledger_tokens(self.ledger(cut), self.encoding)
        return self._ledger_tokens[cut]

    def summary_cost(self, summary: StoredSummary) -> int:
        """Return what one summary adds to the summary message (its text and one join, tokens)."""
        if summary.id not in self._summary_cost:
            text = summary_block(summary)["text"]
            self._summary_cost[summary.id] = count_text(text, self.encoding) + BLOCK_SEPARATOR
        return self._summary_cost[summary.id]

    def summary_message_cost(self, cover: Sequence[StoredSummary]) -> int:
        """Return the tokens of the message that shows ``cover`` and its ask ledger (0 for no summaries)."""
        if not cover:
            return 0
        ledger = self.ledger_cost(cover[-1].end_seq)
        return (
            message_overhead(self.encoding)
            + ledger
            + count_text(SUMMARY_INTRO, self.encoding)
            + sum(self.summary_cost(s) for s in cover)
        )

    def first_role(self, cut: int, cover: Sequence[StoredSummary]) -> str | None:
        """Return the role of the request's first message for a live window from ``cut``."""
        if cover:
            return "user"
        self._read(cut)
        return next((self.roles[seq] for seq in range(cut, self.n) if self.roles[seq] != "system"), None)

    def cover(self, end: int, start: int = 0) -> list[StoredSummary]:
        """Return the coarsest cover of ``[start, end)`` by summaries (highest level first)."""
        out: list[StoredSummary] = []
        position = start
        while position < end:
            best = self.coarsest_at(position, end)
            if best is None:
                raise InvariantViolation(f"coverage: no summary starts at seq {position} below the cut {end}")
            out.append(best)
            position = best.end_seq
        return out

    def coarsest_at(self, start_seq: int, max_end_seq: int) -> StoredSummary | None:
        """Return :meth:`HistoryStore.coarsest_summary_at` ``(start_seq, max_end_seq)``, asking the store
        once per start seq and bound that an earlier answer does not settle.

        The answer for a bound ``b`` is the greatest (level, end) among the summaries starting
        at ``start_seq`` that end by ``b``; for a smaller bound ``e`` it is the same summary when
        that one ends by ``e`` (the set shrinks but still holds it), and ``None`` stays ``None``.
        A compile prices one cover per live-window start (the candidates newest first, so the
        bounds fall), and covers share their older summaries: a chain of branches 1,600 deep
        asked the store 528 times (33 covers), each query's shadowing condition a probe per
        ancestor (1.26 of its 2.2 s compile in cProfile); now once per start seq and level.
        """
        answers = self._coarsest.setdefault(start_seq, [])
        for bound, best in answers:
            if bound >= max_end_seq and (best is None or best.end_seq <= max_end_seq):
                return best
        best = self.store.coarsest_summary_at(start_seq, max_end_seq)
        answers.append((max_end_seq, best))
        return best

    def children(self, summary: StoredSummary) -> list[StoredSummary]:
        kids = self.store.summaries_within(summary.level - 1, summary.start_seq, summary.end_seq)
        position = summary.start_seq
        for kid in kids:
            if kid.start_seq != position:
                return []
            position = kid.end_seq
        return kids if position == summary.end_seq else []

    def cut_candidates(self) -> Iterator[int]:
        """Yield possible live-window starts: the level-1 frontier, then older chunk starts."""
        yield self.frontier
        before = self.frontier
        while before > 0:
            starts = self.store.level_starts_before(1, before)
            if not starts:
                return
            yield from starts
            before = starts[-1]

    def suffix(self, seq: int) -> int:
        """Return the planned tokens of the raw messages ``[seq, n)`` (system messages excluded: they are
        in the system text; another pinned message in the window is priced here, in its place).

        Each message is priced as the gate counts it; a window that repeats a tool id also
        counts the ids the pairing repair sends in their place (:meth:`renaming_tokens`), and a
        window with orphan calls or results the stand-ins it ships (:meth:`orphan_tokens`).
        """
        self._read(seq)
        return self._suffix[seq] + self.renaming_tokens(seq) + self.orphan_tokens(seq)

    def message_cost(self, seq: int) -> int:
        """Return the planned price of message ``seq`` of the window alone (tokens): its text and
        images as decided, without what merging turns saves or what renamed tool ids add (those
        depend on the whole window: :meth:`merge_saving`, :meth:`renaming_tokens`)."""
        self._read(seq)
        return self._suffix[seq] - self._suffix[seq + 1]

    def _read(self, seq: int) -> None:
        """Read and price the messages down to ``seq``, newest first, a page at a time."""
        while self._low > seq:
            start = max(seq, self._low - self.PAGE)
            facts = self.store.facts(
                start, self._low, encoding=self.encoding, dropped=self.format.dropped_block_types
            )
            for fact in reversed(facts):
                self.text_tokens[fact.seq] = fact.text_tokens
                self._suffix[fact.seq] = self._suffix[fact.seq + 1] + self._cost(fact)
                self.roles[fact.seq] = fact.role
                joins = self._joins[fact.seq + 1]
                if fact.role != "system":  # a system message is in the system text, not in the window
                    joins = joins.before(fact.role, not fact.tool_results, self._per_join)
                    if fact.tool_uses or fact.tool_results:
                        self._note_tool_ids(fact)
                self._joins[fact.seq] = joins
            self._low = start

    def _note_tool_ids(self, fact: MessageFacts) -> None:
        """Keep the tool ids of a window message with tool blocks (read newest first), and whether a call id repeats."""
        self._tool_messages.append((fact.seq, ToolIds(fact.role, fact.tool_uses, fact.tool_results)))
        if fact.tool_results:
            self._results_at.add(fact.seq)
        self._tool_seqs.append(-fact.seq)
        for tool_id in fact.tool_uses:
            # a repeated id, or one the format refuses, is sent under another id
            if (
                tool_id in self._call_ids or not tool_id_fits(tool_id, self.format.name)
            ) and self._repeats_from < 0:
                self._repeats_from = fact.seq
            self._call_ids.add(tool_id)

    def renaming_tokens(self, cut: int) -> int:
        """Return what the pairing repair's renamed tool ids add to the raw window ``[cut, n)`` (tokens).

        The gate sends a tool call whose id an earlier call of the request already used, and
        its result, under a fresh id, and a call whose id the format refuses under a valid one
        (:func:`compaction.pairing.renamed_tool_ids`, the very function the repair applies) and counts each message it changed as it now reads
        (:func:`compaction.wire.repaired_message_tokens`); this is that count less the
        message's planned price, summed over the window.  0 without reading anything when no
        call id repeats in the window and every one fits the format (the usual case); else computed once per ``cut``, from
        the window's tool ids and turns (summarized messages are not in the request, so a call
        whose first use is summarized away keeps its id).

        A message without images is priced as the gate counts it, the text of its blocks
        (:func:`~compaction.tokens.counting.blocks_text_tokens`), in which an id counts only in
        its own block (:meth:`_id_change`); a message with images is read and counted whole,
        its images as decided.
        """
        self._read(cut)
        if cut > self._repeats_from:
            return 0
        if cut not in self._renaming:
            count = bisect.bisect_right(self._tool_seqs, -cut)  # tool messages at or after cut
            window = self._tool_messages[count - 1 :: -1] if count else []
            turns = self._turns(cut)
            renamed = renamed_tool_ids(
                [ids for _seq, ids in window], [turns[seq] for seq, _ids in window], self.format.name
            )
            by_seq: dict[int, int] = {}
            sent: dict[int, dict[tuple[str, int], str]] = {}
            for (index, kind, ordinal), new_id in renamed.items():
                seq, ids = window[index]
                sent.setdefault(seq, {})[(kind, ordinal)] = new_id
                if seq not in self._decisions:
                    old_id = (ids.tool_uses if kind == "tool_use" else ids.tool_results)[ordinal]
                    by_seq[seq] = by_seq.get(seq, 0) + self._id_change(kind, old_id, new_id)
            for seq, slots in sent.items():
                if seq in self._decisions:  # a message with images: counted whole
                    by_seq[seq] = self._repaired_message_cost(seq, slots) - self.message_cost(seq)
            self._sent[cut] = sent
            self._renamed_by_seq[cut] = by_seq
            self._renaming[cut] = sum(by_seq.values())
        return self._renaming[cut]

    def _turns(self, cut: int) -> dict[int, int]:
        """Return the turn number of each window message from ``cut`` on, system messages aside
        (consecutive messages of one role share a turn; counted down from the newest's 0)."""
        while self._turn_low > cut:
            self._turn_low -= 1
            role = self.roles[self._turn_low]
            if role == "system":  # in the system text, not in the window
                continue
            if self._turn_role is not None and role != self._turn_role:
                self._turn -= 1
            self._turn_role = role
            self._turn_of[self._turn_low] = self._turn
        return self._turn_of

    def _id_change(self, kind: str, old_id: str, new_id: str) -> int:
        """Return what sending a ``tool_use`` or ``tool_result`` under ``new_id`` adds to its message (tokens).

        A message's count is its frame, its joins and each block's own tokens
        (:func:`~compaction.tokens.counting.blocks_text_tokens`), and an id counts only in its
        own block's: a call's id as ``max(TOOL_CALL_OVERHEAD, tokens of the id)``, a result's
        as the tokens of its ``tool_use_id`` (a result with images, whose note names the id
        too, is counted whole by :meth:`_repaired_message_cost`).  An id holding a ``data:``
        URI (counted apart from its text) is priced as a bare block of the kind with either id.
        """
        if ";base64," in old_id or ";base64," in new_id:
            field = "id" if kind == "tool_use" else "tool_use_id"
            bare: Block = (
                {"type": kind, "name": "", "input": {}}
                if kind == "tool_use"
                else {"type": kind, "content": "."}
            )
            before = block_text_tokens({**bare, field: old_id}, self.encoding)
            return block_text_tokens({**bare, field: new_id}, self.encoding) - before
        old, new = count_text(old_id, self.encoding), count_text(new_id, self.encoding)
        if kind == "tool_use":
            return max(TOOL_CALL_OVERHEAD, new) - max(TOOL_CALL_OVERHEAD, old)
        return new - old

    def _repaired_message_cost(
        self, seq: int, sent: dict[tuple[str, int], str], orphans: set[tuple[str, int]] | None = None
    ) -> int:
        """Return what message ``seq`` costs with the tool ids ``sent`` and the stand-ins of its
        ``orphans`` slots as the gate counts it (tokens)."""
        blocks = self._repaired_blocks(seq, sent, orphans)
        if seq == self._newest_shown():  # the request's last message, as the format ships it there
            final = final_message_blocks(self.roles[seq], blocks, self.format)
            blocks = blocks if final is None else final
        return repaired_message_tokens(blocks, self.format, self.model, self.encoding)

    def _repaired_blocks(
        self, seq: int, sent: dict[tuple[str, int], str], orphans: set[tuple[str, int]] | None = None
    ) -> list[Block]:
        """Return message ``seq``'s blocks as the gate ships them: masked when priced masked, its
        images as decided, its tool ids as ``sent`` and its ``orphans`` slots as stand-ins."""
        blocks: Sequence[Block] | None = self.masked_blocks.get(seq)
        if blocks is None:
            blocks = self.view.message(seq).content
        decisions = self._decisions.get(seq)
        if decisions:  # the images as the gate ships them, shown or as placeholders
            blocks = apply_decisions(blocks, find_image_sites(blocks), decisions)
        out = with_sent_ids(blocks, sent)
        return with_stand_ins(out, orphans) if orphans else out

    def _window_orphans(self, cut: int) -> list[tuple[int, str, int]]:
        """Return the orphan slots of the raw window ``[cut, n)`` as ``(seq, block type, ordinal)``.

        Pairing joins a turn's calls to the next turn's results only, so a block's fate reads
        its own turn and the turns on either side.  The blocks of the window's turns after its
        second read only whole turns: they are the orphans of everything read
        (:meth:`_settled_orphans`, paired once per page read); the blocks of its first two
        turns (the first may be cut short) are paired here from those turns and the third.
        Cost: a bisection and the tool blocks of three turns.
        """
        count = bisect.bisect_right(self._tool_seqs, -cut)  # tool messages at or after cut
        if not count:
            return []
        turns = self._turns(self._low)
        first = self._tool_messages[count - 1][0]
        edge = turns[first] + 2  # turns from here on pair as in everything read
        out = self._orphans_before(count, turns, edge)
        settled, settled_turns = self._settled_orphans()
        out.extend(settled[bisect.bisect_left(settled_turns, edge) :])
        return out

    def _orphans_before(self, count: int, turns: dict[int, int], edge: int) -> list[tuple[int, str, int]]:
        """Return the orphan slots of the ``count`` newest tool messages read whose turn (``turns``: seq -> turn) is below ``edge``.

        The messages up to turn ``edge`` are paired (oldest first, the turn at ``edge`` only as
        the one answering the turn before it); slots are ``(seq, kind, ordinal)``.
        """
        local: list[tuple[int, ToolIds]] = []
        for index in range(count - 1, -1, -1):  # oldest first
            seq, ids = self._tool_messages[index]
            if turns[seq] > edge:
                break
            local.append((seq, ids))
        return [
            (local[index][0], kind, ordinal)
            for index, kind, ordinal in orphan_tool_slots(
                [ids for _seq, ids in local], [turns[s] for s, _ids in local]
            )
            if turns[local[index][0]] < edge
        ]

    def _settled_orphans(self) -> tuple[list[tuple[int, str, int]], list[int]]:
        """Return the orphan slots of all the messages read, oldest first, and each one's turn.

        Brought up to date when more tool messages were read: the slots of the oldest two
        turns read before may change once the turn before them is read, so those turns and
        the new ones are paired again (with the turn after them), the rest kept; the slots of
        the oldest two turns read may still change, and :meth:`_window_orphans` takes none
        of them.  Cost: the tool blocks read since, three turns more, and the orphans kept.
        """
        total = len(self._tool_messages)
        if self._settled_count != total:
            turns = self._turns(self._low)
            edge = self._settled_low_turn + 2 if self._settled_count else 1 << 62
            fresh = self._orphans_before(total, turns, edge)
            kept = bisect.bisect_left(self._settled_turns, edge)
            self._settled = fresh + self._settled[kept:]
            self._settled_turns = [turns[seq] for seq, _kind, _ordinal in fresh] + self._settled_turns[kept:]
            self._settled_low_turn = turns[self._tool_messages[-1][0]]
            self._settled_count = total
        return self._settled, self._settled_turns

    def _stand_in_cost(
        self, seq: int, sent: dict[tuple[str, int], str], orphans: set[tuple[str, int]]
    ) -> tuple[int, bool]:
        """Return what message ``seq``'s repairs add to its planned price (tokens) and whether it
        ships framed (:func:`~compaction.outputs.base.message_shape`), kept per slots: most cuts
        of one compile leave a message the same orphans and ids."""
        key = (seq, frozenset(orphans), frozenset(sent.items()))
        if key not in self._stand_in_costs:
            blocks = self._repaired_blocks(seq, sent, orphans)
            _role, framed = message_shape(self.roles[seq], blocks)
            cost = self._repaired_message_cost(seq, sent, orphans) - self.message_cost(seq)
            self._stand_in_costs[key] = (cost, framed)
        return self._stand_in_costs[key]

    def _newest_shown(self) -> int | None:
        """Return the seq of the newest message other than a system one (the request's last), or ``None``."""
        return next(
            (seq for seq in range(self.n - 1, self._low - 1, -1) if self.roles[seq] != "system"), None
        )

    def orphan_tokens(self, cut: int) -> int:
        """Return what the pairing repair's orphan stand-ins add to the raw window ``[cut, n)`` (tokens).

        The gate ships a call that no result of the next turn answers, and a result that
        answers no call of the turn before, as loud text (:func:`compaction.pairing.orphan_tool_slots`
        decides which, :func:`~compaction.pairing.with_stand_ins` writes them: the very
        functions the repair applies), and counts each message it changed as it now reads
        (:func:`compaction.wire.repaired_message_tokens`, with its renamed ids); this is that
        count less the message's planned price and renaming, summed over the window.  Which
        blocks are orphans depends on the cut (a result whose call is summarized away is one),
        so it is decided per ``cut`` from the window's tool ids and turns, once (its first
        turns paired apart, the rest as paired for everything read: :meth:`_window_orphans`);
        0 without pairing anything when the window holds no tool block.  A stand-in that leaves a
        message without ``tool_result`` blocks changes how it merges with its neighbours
        (:func:`~compaction.outputs.base.message_shape`): :meth:`merge_saving` then folds the
        window's joins again as the gate does.
        """
        return self._orphan_repair(cut)[0]

    def _orphan_repair(self, cut: int) -> tuple[int, TurnJoins | None]:
        """Return :meth:`orphan_tokens` of ``cut`` and the window's joins as shipped (``None``: as planned)."""
        self._read(cut)
        if cut in self._orphans:
            return self._orphans[cut]
        slots = self._window_orphans(cut)
        if not slots:
            self._orphans[cut] = (0, None)
            return self._orphans[cut]
        self.renaming_tokens(cut)
        sent = self._sent.get(cut, {})
        renamed = self._renamed_by_seq.get(cut, {})
        orphans: dict[int, set[tuple[str, int]]] = {}
        for seq, kind, ordinal in slots:
            orphans.setdefault(seq, set()).add((kind, ordinal))
        total = 0
        reshaped: dict[int, bool] = {}  # seq -> framed, for the messages whose shape the repair changed
        for seq, own in orphans.items():
            slots_sent = sent.get(seq, {})
            cost, framed = self._stand_in_cost(seq, slots_sent, own)
            total += cost - renamed.get(seq, 0)
            if framed != (seq not in self._results_at):
                reshaped[seq] = framed
        joins = None
        if reshaped:
            joins = TurnJoins()
            for seq in range(self.n - 1, cut - 1, -1):
                role = self.roles[seq]
                if role != "system":
                    joins = joins.before(role, reshaped.get(seq, seq not in self._results_at), self._per_join)
        self._orphans[cut] = (total, joins)
        return self._orphans[cut]

    def merge_saving(self, cut: int, cover: Sequence[StoredSummary] = ()) -> int:
        """Return what the request with a live window from ``cut`` saves by merging turns (tokens).

        The shown messages are the summary message (a user message, when ``cover`` is not
        empty) and the window's messages other than system ones, in order; the saving is
        :class:`~compaction.outputs.base.TurnJoins`'s, as the gate computes it
        (``RequestFormat.merge_saving``).  A request's price is its parts summed
        (:meth:`suffix`, :meth:`summary_message_cost`, framing, tools) less this.
        """
        self._read(cut)
        shipped = self._orphan_repair(cut)[1]  # stand-ins that change a message's shape
        joins = self._joins[cut] if shipped is None else shipped
        if cover:
            joins = joins.before("user", True, self._per_join)  # the summary message: text, framed
        return joins.saving

    def _cost(self, fact: MessageFacts) -> int:
        """Price one message newest first: its text, and each image as decided (tokens)."""
        if fact.role == "system":
            return 0
        sites, text_tokens = fact.images, fact.text_tokens
        if self._before_newest_shown:  # the request's last message: counted as it ships there
            self._before_newest_shown = False
            final = self._final_text_tokens(fact)
            if final is not None:
                text_tokens = self.text_tokens[fact.seq] = final
        if fact.seq < self.mask_before and fact.tool_results:
            masked = self.view.masked(fact.seq)
            if masked is not None:
                blocks, text_tokens = masked
                sites = tuple(find_image_sites(blocks))
                self.masked_blocks[fact.seq] = blocks
                self.text_tokens[fact.seq] = text_tokens
        decisions, images = decide_and_price(
            sites,
            self._decider,
            self._depth,
            role=fact.role,
            model=self.model,
            encoding=self.encoding,
            format=self.format,
        )
        if decisions:
            self._decisions[fact.seq] = decisions
        cost = text_tokens + images
        self._depth += cost
        return cost

    def _final_text_tokens(self, fact: MessageFacts) -> int | None:
        """Return the text tokens of the window's last message as the format ships it last, or ``None``
        when that is its stored count (:func:`compaction.wire.final_message_blocks`, which the
        gate counts it by too: Anthropic strips a final assistant turn's trailing whitespace).

        Only an assistant message in a format that changes it is read (itself alone).
        """
        if fact.role != "assistant" or self.format.name != "anthropic":
            return None
        message = self.store.messages(fact.seq, fact.seq + 1)[0]
        final = final_message_blocks(fact.role, message.content, self.format)
        return None if final is None else self.format.text_tokens(final, self.encoding)


def refine_cover(
    plan: WindowPlanner, cover: list[StoredSummary], total: int, budget: int
) -> tuple[list[StoredSummary], int]:
    """Replace summaries by their children, newest first, while the total stays within budget."""
    cover = list(cover)
    index = len(cover) - 1
    while index >= 0:
        summary = cover[index]
        if summary.level > 1:
            kids = plan.children(summary)
            delta = sum(plan.summary_cost(k) for k in kids) - plan.summary_cost(summary)
            if kids and total + delta <= budget:
                cover[index : index + 1] = kids
                total += delta
                index += len(kids) - 1
                continue
        index -= 1
    return cover, total
