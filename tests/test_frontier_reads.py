"""The compactor reads frontiers and ranges, not every summary (issue #14, item 7: scale).

``summarized_frontier`` equals the level-1 chain walked over every summary; a tick never
loads the whole summary table and reads texts only of the groups it merges; after a tick no
level holds ``merge_fanout`` contiguous summaries past the level above it; and
``summary_spans`` returns ids and ranges, on every backend.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from store_backends import every_backend_store  # noqa: F401  (the store fixture over every backend)
from test_http_summarizer import conversation

from compaction import Compactor, Recipe, Store
from compaction.compactor import l1_frontier, summarized_frontier
from compaction.store import HistoryStore, SummarySpan


def small_recipe(fanout: int, target: int) -> Recipe:
    return Recipe(
        chunk_target_tokens=target,
        chunk_min_messages=2,
        merge_fanout=fanout,
        summary_max_tokens=120,
        summarizer_context_tokens=6000,
    )


def assert_levels_merged(store: HistoryStore, fanout: int) -> None:
    """Each merge covers contiguous children; no level has ``fanout`` unmerged contiguous ones."""
    level = 1
    while store.summary_spans(level):
        spans = store.summary_spans(level)
        by_id = {s.id: s for s in spans}
        upper = store.summaries(level=level + 1)
        for merged in upper:
            children = [by_id[i] for i in merged.provenance["children"]]
            assert children[0].start_seq == merged.start_seq and children[-1].end_seq == merged.end_seq
            assert all(a.end_seq == b.start_seq for a, b in zip(children, children[1:], strict=False))
        position, chained = max((s.end_seq for s in upper), default=0), 0
        for span in spans:
            if span.start_seq == position:
                position, chained = span.end_seq, chained + 1
        assert chained < fanout, f"level {level}: {chained} contiguous summaries left unmerged"
        level += 1


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    fanout=st.integers(2, 4),
    target=st.sampled_from([120, 150, 400]),
)
def test_the_frontier_read_from_ranges_equals_the_chain_over_every_summary(
    batches: list[int], fanout: int, target: int
) -> None:
    recipe = small_recipe(fanout, target)
    with Store(":memory:") as store:
        first = 0
        for rounds in batches:
            store.append(conversation(rounds, first=first))
            first += rounds
            Compactor(store, recipe).tick()
            assert summarized_frontier(store) == l1_frontier(store.summaries(level=1))
            assert_levels_merged(store, fanout)
        assert (summarized_frontier(store) > 0) == bool(store.summary_spans(1))


class ReadCounter:
    """Wrap a store: refuse ``summaries()``, record the ranges whose texts are read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.text_reads: list[tuple[int, int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def summaries(self, level: int | None = None) -> Any:
        raise AssertionError(f"the tick read every summary (level {level}) with its text")

    def summaries_within(self, level: int, start_seq: int, end_seq: int) -> Any:
        self.text_reads.append((level, start_seq, end_seq))
        return self.store.summaries_within(level, start_seq, end_seq)


def test_a_tick_reads_texts_of_the_merged_groups_only(tmp_path: Any) -> None:
    recipe = small_recipe(3, 150)
    with Store(tmp_path / "s.db") as store:
        store.append(conversation(20))
        Compactor(store, recipe).tick()  # the first tick builds levels 1 to 3
        counter = ReadCounter(store)
        store.append(conversation(9, first=20))
        report = Compactor(counter, recipe).tick()  # type: ignore[arg-type]
        made = [(m.level - 1, m.start_seq, m.end_seq) for m in store.summaries() if m.level > 1]
        assert report.l1_added > 0 and sum(report.merged.values()) == len(counter.text_reads) > 0
        assert set(counter.text_reads) <= set(made)


def test_summary_spans_are_ids_and_ranges_from_a_seq(store: HistoryStore) -> None:
    store.append(conversation(4))
    ids = [store.add_summary(1, a, b, f"summary {a}", {}) for a, b in ((0, 4), (4, 8), (8, 12))]
    top = store.add_summary(2, 0, 12, "merged", {"children": ids})
    assert store.summary_spans(1) == [
        SummarySpan(ids[0], 1, 0, 4),
        SummarySpan(ids[1], 1, 4, 8),
        SummarySpan(ids[2], 1, 8, 12),
    ]
    assert store.summary_spans(1, 4) == [SummarySpan(ids[1], 1, 4, 8), SummarySpan(ids[2], 1, 8, 12)]
    assert store.summary_spans(1, 9) == []
    assert store.summary_spans(2) == [SummarySpan(top, 2, 0, 12)]
    assert store.summary_spans(3) == []
    assert summarized_frontier(store) == 12
