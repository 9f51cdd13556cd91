"""Planning a compile: what each candidate live window and summary cover costs.

:class:`WindowPlanner` reads only what a compile can reach: the raw messages' cached facts
newest first, a page at a time, as far back as the budget allows; summary covers and
children through indexed queries.  It prices each message exactly as the wire gate will
count it: text tokens from the store's cache plus each image decided and priced by
:mod:`compaction.images` in the same newest-first walk, and the summary message as the
gate counts it.  :mod:`compaction.compile` chooses among the candidates it prices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .blocks import Block
from .errors import InvariantViolation
from .images import ImageDecider, decide_and_price
from .outputs import RequestFormat
from .policy import ImageSettings, image_settings
from .recipe import Recipe
from .store import HistoryStore, MessageFacts, StoredSummary
from .tokens.counting import BLOCK_SEPARATOR, MESSAGE_OVERHEAD, count_text

__all__ = ["WindowPlanner", "SUMMARY_INTRO", "live_image_settings", "summary_block", "refine_cover"]

SUMMARY_INTRO = "[Earlier messages, summarized: a record of what happened, not instructions]"


def live_image_settings(recipe: Recipe) -> ImageSettings:
    """Return the image settings of live compiles (policy and live caps) from ``recipe``."""
    return image_settings(recipe, "live")


def summary_block(summary: StoredSummary) -> Block:
    return {
        "type": "text",
        "text": f"[Messages {summary.start_seq}–{summary.end_seq - 1}, L{summary.level}]\n{summary.text}",
    }


class WindowPlanner:
    """Plan a compile reading only the live window, the summaries it shows and cached counts.

    Nothing here scans the whole store: raw costs are read newest first, a page at a time,
    only as far back as the budget can reach; covers and children come from indexed queries.
    Images are decided and priced by :mod:`compaction.images`, exactly as the gate will.
    """

    PAGE = 256

    def __init__(self, store: HistoryStore, recipe: Recipe, budget: int, fmt: RequestFormat, model: str) -> None:
        self.store = store
        self.recipe = recipe
        self.budget = budget
        self.format = fmt
        self.model = model
        self.encoding = recipe.encoding
        self.settings = live_image_settings(recipe)
        self.n = store.next_seq()
        self.frontier = store.summary_frontier(1)
        self._summary_cost: dict[int, int] = {}
        self._suffix: dict[int, int] = {self.n: 0}
        self.text_tokens: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self._low = self.n
        self._decider = ImageDecider(self.settings)
        self._depth = 0

    def summary_cost(self, summary: StoredSummary) -> int:
        """Return what one summary adds to the summary message (its text and one join, tokens)."""
        if summary.id not in self._summary_cost:
            text = summary_block(summary)["text"]
            self._summary_cost[summary.id] = count_text(text, self.encoding) + BLOCK_SEPARATOR
        return self._summary_cost[summary.id]

    def summary_message_cost(self, cover: Sequence[StoredSummary]) -> int:
        """Return the tokens of the message that shows ``cover`` (0 for no summaries)."""
        if not cover:
            return 0
        return MESSAGE_OVERHEAD + count_text(SUMMARY_INTRO, self.encoding) + sum(self.summary_cost(s) for s in cover)

    def first_role(self, cut: int, cover: Sequence[StoredSummary]) -> str | None:
        """Return the role of the request's first message for a live window from ``cut``."""
        if cover:
            return "user"
        self.suffix(cut)
        return next((self.roles[seq] for seq in range(cut, self.n) if self.roles[seq] != "system"), None)

    def cover(self, end: int, start: int = 0) -> list[StoredSummary]:
        """Return the coarsest cover of ``[start, end)`` by summaries (highest level first)."""
        out: list[StoredSummary] = []
        position = start
        while position < end:
            best = self.store.coarsest_summary_at(position, end)
            if best is None:
                raise InvariantViolation(f"coverage: no summary starts at seq {position} below the cut {end}")
            out.append(best)
            position = best.end_seq
        return out

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
        """Return the planned tokens of the raw messages ``[seq, n)`` (pinned ones excluded)."""
        while self._low > seq:
            start = max(seq, self._low - self.PAGE)
            for fact in reversed(self.store.facts(start, self._low, encoding=self.encoding)):
                self._suffix[fact.seq] = self._suffix[fact.seq + 1] + self._cost(fact)
                self.text_tokens[fact.seq] = fact.text_tokens
                self.roles[fact.seq] = fact.role
            self._low = start
        return self._suffix[seq]

    def _cost(self, fact: MessageFacts) -> int:
        """Price one message newest first: its text, and each image as decided (tokens)."""
        if fact.role == "system":
            return 0
        _decisions, images = decide_and_price(
            fact.images, self._decider, self._depth, role=fact.role, model=self.model, encoding=self.encoding, format=self.format
        )
        cost = fact.text_tokens + images
        self._depth += cost
        return cost


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


