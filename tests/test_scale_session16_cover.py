"""A compile asks the store for the coarsest summary at a seq once, not once per cover (session 16).

:meth:`compaction.planning.WindowPlanner.cover` prices one cover per live-window start, and
the covers share their older summaries; each :meth:`coarsest_summary_at` of a deep branch runs
the shadowing condition over its whole lineage, so a chain of branches 1,600 deep spent 1.26 of
its 2.2 s compile asking 528 times for 32 summaries.  :meth:`WindowPlanner.coarsest_at` keeps
the store's answers per start seq and reuses one whenever it settles a smaller bound.  These
tests hold its answers to the store's, and count what a compile asks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_backends import BACKENDS, branch_chain, store_location

from compaction import Message, Recipe, Store, compile_request
from compaction.compile import resolve_target
from compaction.planning import WindowPlanner
from compaction.store import open_store


def _text(role: str, body: str) -> Message:
    return Message(role=role, content=[{"type": "text", "text": body}])


@st.composite
def hierarchies(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, int]]]:
    """A history of ``n`` messages and a hierarchy of summaries over a prefix of it:
    contiguous L1 chunks from seq 0, L2s merging runs of consecutive L1s, L3s of L2s."""
    n = draw(st.integers(4, 60))
    bounds = sorted(set(draw(st.lists(st.integers(1, n - 1), min_size=1, max_size=12))))
    spans = list(zip([0, *bounds[:-1]], bounds, strict=True))
    summaries = [(1, s, e) for s, e in spans]
    for level in (2, 3):
        below = [(s, e) for lv, s, e in summaries if lv == level - 1]
        index = 0
        while index < len(below):
            size = draw(st.integers(1, 4))
            group = below[index : index + size]
            if len(group) >= 2 and draw(st.booleans()):
                summaries.append((level, group[0][0], group[-1][1]))
            index += size
    return n, summaries


@settings(max_examples=60)
@given(hierarchies(), st.data())
def test_the_planners_answers_are_the_stores_in_any_order_of_asking(
    shape: tuple[int, list[tuple[int, int, int]]], data: st.DataObject
) -> None:
    n, summaries = shape
    with Store(":memory:") as store:
        store.append([_text(("user", "assistant")[i % 2], f"m{i}") for i in range(n)])
        for level, start, end in summaries:
            store.add_summary(level, start, end, f"L{level} {start}-{end}", {})
        fmt, model = resolve_target(Recipe())
        plan = WindowPlanner(store, Recipe(), 100_000, fmt, model)
        starts = sorted({s for _lv, s, _e in summaries} | {0, n})
        for _ in range(data.draw(st.integers(1, 25))):
            start = data.draw(st.sampled_from(starts))
            bound = data.draw(st.integers(0, n + 2))
            assert plan.coarsest_at(start, bound) == store.coarsest_summary_at(start, bound)
        for end in sorted({e for _lv, _s, e in summaries}, reverse=True):
            direct, position = [], 0
            while position < end:
                best = store.coarsest_summary_at(position, end)
                assert best is not None
                direct.append(best)
                position = best.end_seq
            assert plan.cover(end) == direct


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deep_chains_compile_asks_once_a_summary_and_ships_the_same_bytes(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store_location(backend, tmp_path) as location:
        name = branch_chain(location, 60, summary_every=4)  # 15 summaries, 60 branches deep
        with open_store(location, conversation=name) as store:
            store.append([_text("user", "last")])
        asked: list[tuple[int, int]] = []
        original = type(store).coarsest_summary_at

        def counting(self, start_seq: int, max_end_seq: int):  # type: ignore[no-untyped-def]
            asked.append((start_seq, max_end_seq))
            return original(self, start_seq, max_end_seq)

        recipe = Recipe(budget_tokens=200_000)
        with open_store(location, conversation=name) as store:
            monkeypatch.setattr(type(store), "coarsest_summary_at", counting)
            memoized = compile_request(store, recipe)
            summaries = len(store.summaries())
            calls_memoized = len(asked)
            asked.clear()
            # the same compile asking the store every time, as before
            monkeypatch.setattr(
                WindowPlanner, "coarsest_at", lambda self, s, e: self.store.coarsest_summary_at(s, e)
            )
            direct = compile_request(store, recipe)
    assert summaries == 15
    assert memoized.request.payload == direct.request.payload
    # every cover of the 16 live-window starts: 1 + 2 + ... + 15 asks before; one per start now
    assert len(asked) >= 15 * 16 // 2
    assert calls_memoized <= summaries + 1
