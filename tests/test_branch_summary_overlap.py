"""A summary is kept with an ancestor only when the ancestor sees what it summarizes.

Regression for the overlap hypothesis found in ``tests/test_branches.py`` (level-1 summaries
``[(0, 5), (3, 5)]`` in the parent).  The sequence: the parent ``main`` (5 messages) made the
L1 summary ``[0, 5)``; a branch forked at 3 cannot see it (it ends past the fork), so it made
its own L1s ``[0, 2)`` and ``[2, 3)``, then merged them into the L2 ``[0, 3)``.  That merge was
kept with ``main`` (which held no L2 overlapping it), so ``main`` showed an L2 ``[0, 3)`` over
its L1 ``[0, 5)``: its summarized frontier followed the L2 to 3, found no L1 starting at 3, and
its next compression summarized ``[3, 5)`` a second time.  Now a merge is kept with an
ancestor only when the ancestor sees the same children, and a summary of any level only
where the ancestor sees (not only holds) no overlapping one of that level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from store_backends import fresh_store
from strategies import CapturingSummarizer

from compaction import Compactor, Message, Recipe
from compaction.compactor import summarized_frontier
from compaction.store import SQLiteStore, open_store
from compaction.store.postgres import PostgresStore

RECIPE = Recipe(budget_tokens=3000, chunk_target_tokens=200, chunk_min_messages=2, merge_fanout=2)
ICON = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgBAAAAwACS/Xd6gAAAABJRU5ErkJggg=="

Store = SQLiteStore | PostgresStore


def tool_use(**extra: str) -> Message:
    return Message(
        "assistant",
        ({"type": "tool_use", "id": "toolu_0001", "name": "read_file", "input": {"path": "the", **extra}},),
    )


def empty_result() -> Message:
    return Message(
        "user", ({"type": "tool_result", "tool_use_id": "toolu_0001", "content": "", "is_error": False},)
    )


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


def ranges(store: Store) -> list[tuple[int, int, int]]:
    return [(s.level, s.start_seq, s.end_seq) for s in store.summaries()]


def compress(store: Store, keep_tail: int = 0) -> None:
    """Compress as the property test does: a tick, then a tick that closes the tail."""
    compactor = Compactor(store, RECIPE, CapturingSummarizer(encoding=RECIPE.encoding))
    compactor.tick(keep_tail_tokens=keep_tail)
    compactor.tick(keep_tail_tokens=keep_tail // 2, close_tail=True)


def check_consistent(store: Store) -> None:
    """Within a level no two summaries overlap, and each one above level 1 is tiled by level-1-below ones it sees."""
    by_level: dict[int, list[tuple[int, int]]] = {}
    for s in store.summaries():
        by_level.setdefault(s.level, []).append((s.start_seq, s.end_seq))
    for level, spans in by_level.items():
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), (
            store.conversation,
            level,
            spans,
        )
        if level == 1:
            continue
        below = by_level.get(level - 1, [])
        for start, end in spans:
            inside = [(s, e) for s, e in below if start <= s and e <= end]
            assert inside and inside[0][0] == start and inside[-1][1] == end, (
                store.conversation,
                level,
                start,
                end,
            )
            assert all(a[1] == b[0] for a, b in zip(inside, inside[1:], strict=False)), (
                store.conversation,
                inside,
            )


@pytest.mark.parametrize("backend", ["memory", "postgres"])
def test_the_failing_example_leaves_no_overlap_in_the_parent(backend: str) -> None:
    """The hypothesis example, replayed: the branch's merge stays with the branch, the parent is not summarized twice."""
    history = [tool_use(icon=ICON), empty_result(), text("user", "the"), tool_use(), empty_result()]
    with fresh_store(backend, None, conversation="main") as main:
        main.append(history)
        compress(main)
        # the example's calls share one id: once reused ids were paired round by round (a7ddb22)
        # the parent closes as two level-1 summaries and their merge, one of them across the fork
        parent = ranges(main)
        assert parent and summarized_frontier(main) == 5
        assert any(start < 3 < end for level, start, end in parent if level == 1)
        main.branch("alt", 3)
        branch: Store
        if isinstance(main, SQLiteStore):
            branch = SQLiteStore(connection=main._db, conversation="alt")
        else:
            branch = open_store(main.path, conversation="alt")
        try:
            branch.append([text("user", "the")])
            compress(branch)
            assert all(end <= branch.next_seq() for _level, _start, end in ranges(branch))
            assert ranges(main) == parent  # the merge of the branch's own L1s is not the parent's
            assert summarized_frontier(main) == 5
            compress(main)
            assert ranges(main) == parent  # before the fix: [(1, 0, 5), (1, 3, 5), (2, 0, 3)]
            check_consistent(main)
            check_consistent(branch)
        finally:
            branch.close()


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_merge_is_shared_with_the_parent_only_when_the_parent_sees_its_children(
    backend: str, tmp_path: Path
) -> None:
    with fresh_store(backend, tmp_path, conversation="main") as main:
        main.append([text("user", f"m {i}") for i in range(10)])
        a, b = main.add_summary(1, 0, 2, "zero, one", {}), main.add_summary(1, 2, 4, "two, three", {})
        across = main.add_summary(1, 4, 8, "four to seven", {})
        main.branch("alt", 6)
        with open_store(main.path, conversation="alt") as alt:
            own = alt.add_summary(1, 4, 6, "four, five", {})  # the parent's [4, 8) ends past the fork
            shared = alt.add_summary(2, 0, 4, "zero to three", {"children": [a, b]})
            assert [s.id for s in main.summaries(level=2)] == [shared]  # the parent sees a and b: made once
            mine = alt.add_summary(2, 4, 6, "the branch's four, five", {"children": [own]})
            assert [s.id for s in alt.summaries(level=2)] == [shared, mine]
            assert [s.id for s in main.summaries(level=2)] == [shared]  # the parent does not see `own`
            assert [s.id for s in main.summaries(level=1)] == [a, b, across]
            check_consistent(main)
            check_consistent(alt)


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_summary_is_not_kept_with_a_parent_that_sees_an_overlapping_one_from_its_own_parent(
    backend: str, tmp_path: Path
) -> None:
    """root holds [2, 7) (seen by mid, forked at 8); leaf forks mid at 4 and summarizes [2, 4): not mid's."""
    with fresh_store(backend, tmp_path, conversation="root") as root:
        root.append([text("user", f"r {i}") for i in range(10)])
        first, across = (
            root.add_summary(1, 0, 2, "zero, one", {}),
            root.add_summary(1, 2, 7, "two to six", {}),
        )
        root.branch("mid", 8)
        with open_store(root.path, conversation="mid") as mid:
            mid.branch("leaf", 4)
            with open_store(root.path, conversation="leaf") as leaf:
                leaf.append([text("user", "leaf 4")])
                made = leaf.add_summary(1, 2, 4, "two, three", {})
                assert [s.id for s in leaf.summaries()] == [first, made]
                # before the fix it was kept with mid, hiding root's [2, 7) there: mid's chain lost [4, 7)
                assert [s.id for s in mid.summaries()] == [first, across]
                assert [s.id for s in root.summaries()] == [first, across]


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_parents_merge_is_hidden_with_the_children_the_branchs_own_summary_hides(
    backend: str, tmp_path: Path
) -> None:
    """Found by the tree property below: the branch summarized [0, 4) across its fork at 2 first; the parent
    then summarized [0, 1), [1, 2) and merged them into [0, 2).  The branch's own L1 hides the parent's L1s
    (same level); it must hide their merge too, or the branch shows an L2 over children it does not show
    (its summarized frontier stopped at 2 and its next compression summarized [2, ...) again)."""
    with fresh_store(backend, tmp_path, conversation="root") as root:
        root.append([text("user", f"r {i}") for i in range(3)])
        root.branch("child", 2)
        with open_store(root.path, conversation="child") as child:
            child.append([text("assistant", "c 2"), text("user", "c 3"), text("assistant", "c 4")])
            across = child.add_summary(1, 0, 4, "zero to three", {})
            a, b = root.add_summary(1, 0, 1, "zero", {}), root.add_summary(1, 1, 2, "one", {})
            merged = root.add_summary(2, 0, 2, "zero and one", {"children": [a, b]})
            assert [s.id for s in root.summaries()] == [a, b, merged]
            assert [s.id for s in child.summaries()] == [across]  # before the fix: [across, merged]
            assert summarized_frontier(child) == 4
            check_consistent(child)


def said(role_from: int, sizes: list[int], who: str) -> list[Message]:
    """Messages from seq ``role_from`` on, message ``i`` of ``sizes[i]`` words (about that many tokens)."""
    return [
        text("user" if (role_from + i) % 2 == 0 else "assistant", " ".join([f"{who}{role_from + i}"] * size))
        for i, size in enumerate(sizes)
    ]


@st.composite
def trees(draw: Any) -> tuple[list[int], int, list[int], int, list[int], list[tuple[str, int]]]:
    """A root's message sizes, a child's fork and sizes, a grandchild's fork and sizes, and an order of compressions.

    Sizes are in words (a word and its space are one token or two); compressions are ``(who,
    kept tail tokens)``, the first ``root`` ones made before the forks.
    """
    sizes = st.lists(st.sampled_from([1, 5, 20, 60]), min_size=1, max_size=9)
    root = draw(sizes)
    child_at = draw(st.integers(min_value=0, max_value=len(root)))
    child = draw(sizes)
    grand_at = draw(st.integers(min_value=0, max_value=child_at + len(child)))
    grand = draw(sizes)
    who = st.sampled_from(["root", "child", "grand"])
    order = draw(st.lists(st.tuples(who, st.sampled_from([0, 40, 150])), min_size=1, max_size=6))
    return root, child_at, child, grand_at, grand, order


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=trees())
@example(
    case=([20, 20, 20, 20, 20], 2, [1], 0, [1], [("root", 40), ("child", 40)])
)  # a merge kept with the root
@example(
    case=([20, 1, 5], 2, [20, 20], 2, [5, 5, 1], [("root", 150), ("child", 0), ("root", 40)])
)  # a merge seen
def test_every_conversation_of_a_tree_sees_a_consistent_hierarchy(case: Any) -> None:
    """Whatever order a root, its branch and the branch's branch are compressed in, none sees overlapping summaries.

    Also each summary above level 1 is tiled by the summaries of the level below that the
    same conversation sees, and the summarized frontier stays within the history.
    """
    root_sizes, child_at, child_sizes, grand_at, grand_sizes, drawn = case
    order = list(drawn)
    with fresh_store("memory", None, conversation="root") as root:
        assert isinstance(root, SQLiteStore)
        root.append(said(0, root_sizes, "r"))
        stores: dict[str, SQLiteStore] = {"root": root}
        while order and order[0][0] == "root":  # the root compressed before the forks
            compress(root, order.pop(0)[1])
        root.branch("child", child_at)
        child = stores["child"] = SQLiteStore(connection=root._db, conversation="child")
        child.append(said(child_at, child_sizes, "c"))
        child.branch("grand", grand_at)
        grand = stores["grand"] = SQLiteStore(connection=root._db, conversation="grand")
        grand.append(said(grand_at, grand_sizes, "g"))
        for who, tail in [*order, ("root", 0), ("child", 0), ("grand", 0)]:
            compress(stores[who], tail)
            for store in stores.values():
                check_consistent(store)
                assert summarized_frontier(store) <= len(store)
