"""``Compactor.merge_tail``: the few summaries a tick leaves past the level above, merged into one."""

from __future__ import annotations

import pytest
from test_calibration import _history

from compaction import Recipe, Store
from compaction.compactor import Compactor
from compaction.errors import InvalidArgument
from compaction.summarizers import ExtractiveSummarizer

RECIPE = Recipe(budget_tokens=10**6, chunk_target_tokens=120, chunk_min_messages=2, merge_fanout=6)


def _levels(store: Store) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for s in store.summaries():
        out.setdefault(s.level, []).append((s.start_seq, s.end_seq))
    return out


def test_the_tail_of_a_level_is_merged_into_one_summary_of_the_next_and_stays_a_chain() -> None:
    with Store(":memory:") as store:
        store.append(_history(40))
        compactor = Compactor(store, RECIPE, ExtractiveSummarizer())
        compactor.tick(close_tail=True)
        before = _levels(store)
        level2_end = max((end for _s, end in before.get(2, [])), default=0)
        tail = [span for span in before[1] if span[0] >= level2_end]
        assert 2 <= len(tail) < RECIPE.merge_fanout  # what a tick leaves unmerged
        report = compactor.merge_tail(1)
        after = _levels(store)
    assert report.merged == {2: 1}
    assert after[1] == before[1]  # nothing at level 1 changes
    assert after[2] == [*before.get(2, []), (tail[0][0], tail[-1][1])]
    chain = after[2]
    assert all(a[1] == b[0] for a, b in zip(chain, chain[1:], strict=False))


def test_fewer_than_two_summaries_past_the_level_above_are_left_alone() -> None:
    with Store(":memory:") as store:
        store.append(_history(40))
        compactor = Compactor(store, RECIPE, ExtractiveSummarizer())
        compactor.tick(close_tail=True)
        compactor.merge_tail(1)
        again = compactor.merge_tail(1)  # the tail is merged: nothing past level 2's frontier
        empty = compactor.merge_tail(3)  # no summaries at level 3
        assert again.merged == {} and empty.merged == {}


@pytest.mark.parametrize("level", [0, -1, True, 1.5, "1"])
def test_a_level_that_is_not_a_whole_number_from_1_is_refused(level: object) -> None:
    with Store(":memory:") as store:
        with pytest.raises(InvalidArgument, match="level must be a whole number >= 1"):
            Compactor(store, RECIPE, ExtractiveSummarizer()).merge_tail(level)  # type: ignore[arg-type]
