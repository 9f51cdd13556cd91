"""Branches: a fork shares its parent's prefix (no row copied), compiles and compresses on its own.

Property tests over generated agent histories (``histories()``): a conversation is
compressed, forked at a message where no tool call is open, the branch gets a tail of its
own, and both are compressed and compiled.  Every compiled request must satisfy coverage (each
message shown once, raw or inside one summary, summaries contiguous from 0) and tool pairing
(:func:`check_tool_pairing` on the request body); the branch must add rows only for its own
messages; a summary of the shared prefix must be made once and shown by both.  SQLite runs
many examples; PostgreSQL a few (each needs a schema of its own).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from request_checks import assert_coverage_pinning_system
from store_backends import fresh_store
from strategies import CapturingSummarizer, check_tool_pairing, histories, payload_json

from compaction import Compactor, Message, Recipe, StoreError, compile_request
from compaction.compile import CompiledRequest
from compaction.errors import InvalidArgument
from compaction.store import SQLiteStore, list_conversations, open_store
from compaction.store.postgres import PostgresStore

RECIPE = Recipe(budget_tokens=3000, chunk_target_tokens=200, chunk_min_messages=2, merge_fanout=2)


def closed_points(messages: list[Message]) -> list[int]:
    """The seqs F where no tool call of messages[:F] is unanswered (a rewind point)."""
    open_calls: set[str] = set()
    points = [0]
    for index, message in enumerate(messages):
        for block in message.content:
            if block.get("type") == "tool_use":
                open_calls.add(str(block["id"]))
            elif block.get("type") == "tool_result":
                open_calls.discard(str(block["tool_use_id"]))
        if not open_calls:
            points.append(index + 1)
    return points


def renamed(messages: list[Message], prefix: str) -> list[Message]:
    """The messages with their tool ids renamed (a tail generated apart must not reuse the parent's ids)."""
    out = []
    for message in messages:
        if message.role == "system":
            continue
        content = json.loads(json.dumps(list(message.content)).replace('"toolu_', f'"toolu_{prefix}'))
        out.append(Message(message.role, tuple(content), None, message.source_id, message.meta))
    return out


def check_coverage(store: Any, compiled: CompiledRequest) -> None:
    """Each message shown once (raw in the live window or inside one summary); summaries contiguous from 0.

    A system message is pinned: shown raw wherever it stands.
    """
    assert_coverage_pinning_system(store, compiled)


def compress_and_check(store: Any, keep_tail: int) -> CompiledRequest:
    """Compress ``store`` (two ticks), compile it, and check coverage and pairing of every request."""
    summarizer = CapturingSummarizer(encoding=RECIPE.encoding)
    compactor = Compactor(store, RECIPE, summarizer)
    compactor.tick(keep_tail_tokens=keep_tail)
    compactor.tick(keep_tail_tokens=keep_tail // 2, close_tail=True)
    for _kind, payload in summarizer.requests:
        check_tool_pairing(payload_json(payload), summarizer.request_format)
    compiled = compile_request(store, RECIPE.replace(budget_tokens=10**7))
    check_coverage(store, compiled)
    check_tool_pairing(payload_json(compiled.request.payload), RECIPE.output_format)
    return compiled


def message_rows(store: SQLiteStore | PostgresStore) -> int:
    return int(store._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])


def summary_keys(store: SQLiteStore | PostgresStore) -> list[tuple[int, int, int]]:
    return [(s.level, s.start_seq, s.end_seq) for s in store.summaries()]


@st.composite
def forks(draw: Any) -> tuple[list[Message], int, list[Message], int, bool]:
    """A history, a fork point where no call is open, the branch's own tail, a kept tail, and who compresses first."""
    history = draw(histories(min_turns=2, max_turns=8))
    at = draw(st.sampled_from(closed_points(history)))
    tail = renamed(draw(histories(min_turns=1, max_turns=4)), "b")
    return history, at, tail, draw(st.integers(min_value=0, max_value=400)), draw(st.booleans())


def check_fork(backend: str, tmp_path: Path | None, case: tuple[list[Message], int, list[Message], int, bool]) -> None:
    history, at, tail, keep_tail, parent_first = case
    with fresh_store(backend, tmp_path, conversation="main") as main:
        main.append(history)
        if parent_first:
            compress_and_check(main, keep_tail)
        info = main.branch("alt", at)
        assert (info.parent, info.fork_seq, info.messages, info.own_messages) == ("main", at, at, 0)
        if isinstance(main, SQLiteStore) and main.path == ":memory:":  # the same connection, scoped anew
            branch: SQLiteStore | PostgresStore = SQLiteStore(connection=main._db, conversation="alt")
        else:
            branch = open_store(main.path, conversation="alt")
        try:
            rows_before = message_rows(main)
            branch.append(tail)
            # no copy: the branch adds rows for its own messages only, and shows the shared ones
            assert message_rows(main) == rows_before + len(tail) == len(history) + len(tail)
            assert len(branch) == at + len(tail)
            shown = branch.messages()
            assert [m.content for m in shown[:at]] == [m.content for m in history[:at]]
            assert [m.content for m in shown[at:]] == [m.content for m in tail]
            assert [m.content for m in main.messages()] == [m.content for m in history]  # the parent is unchanged
            compress_and_check(branch, keep_tail)
            compress_and_check(main, keep_tail)
            # a summary on the shared prefix is made once and shown by both
            parent = {(s.level, s.start_seq, s.end_seq): s.id for s in main.summaries()}
            for summary in branch.summaries():
                if summary.end_seq <= at and (summary.level, summary.start_seq, summary.end_seq) in parent:
                    assert parent[(summary.level, summary.start_seq, summary.end_seq)] == summary.id
            # within a level the summaries each one sees never overlap
            for store in (main, branch):
                by_level: dict[int, list[tuple[int, int]]] = {}
                for s in store.summaries():
                    by_level.setdefault(s.level, []).append((s.start_seq, s.end_seq))
                for ranges in by_level.values():
                    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False)), ranges
        finally:
            branch.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=forks())
def test_branches_share_the_prefix_and_compile_with_coverage_and_pairing_sqlite(case: Any) -> None:
    check_fork("memory", None, case)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=forks())
def test_branches_share_the_prefix_and_compile_with_coverage_and_pairing_postgres(case: Any) -> None:
    check_fork("postgres", None, case)


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_summary_of_the_shared_prefix_is_made_once_and_shown_in_both(backend: str, tmp_path: Path) -> None:
    with fresh_store(backend, tmp_path, conversation="main") as main:
        main.append([text("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(10)])
        main.branch("alt", 6)
        with open_store(_location(main), conversation="alt") as alt:
            alt.append([text("user", "a different turn 6"), text("assistant", "a different answer 7")])
            shared = alt.add_summary(1, 0, 4, "the first four", {})
            own = alt.add_summary(1, 4, 7, "four to six, the branch's six", {})
            assert main.add_summary(1, 0, 4, "made again?", {}) == shared  # the same row: made once
            assert [(s.id, s.text) for s in main.summaries()] == [(shared, "the first four")]
            assert [s.id for s in alt.summaries()] == [shared, own]
            assert main.summary_frontier(1) == 4 and alt.summary_frontier(1) == 7
            # the parent's own summary across the fork is not the branch's
            theirs = main.add_summary(1, 4, 8, "four to seven of main", {})
            assert [s.id for s in alt.summaries()] == [shared, own] and theirs not in {s.id for s in alt.summaries()}
            counts = {info.name: (info.messages, info.own_messages, info.summaries) for info in main.conversations()}
            assert counts == {"main": (10, 10, 2), "alt": (8, 2, 2)}


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_branch_of_a_branch_sees_each_ancestors_part(backend: str, tmp_path: Path) -> None:
    with fresh_store(backend, tmp_path, conversation="root") as root:
        root.append([text("user", f"root {i}") for i in range(6)])
        root.branch("child", 4)
        with open_store(_location(root), conversation="child") as child:
            child.append([text("user", f"child {i}") for i in range(4, 9)])
            child.branch("grandchild", 2)  # forks below the child's own rows: shares root's 0..1 only
            child.branch("deep", 7)
        with open_store(_location(root), conversation="grandchild") as grand:
            grand.append([text("user", "grand 2")])
            assert [m.text() for m in grand.messages()] == ["root 0", "root 1", "grand 2"]
        with open_store(_location(root), conversation="deep") as deep:
            deep.append([text("user", "deep 7")])
            assert [m.text() for m in deep.messages()] == ["root 0", "root 1", "root 2", "root 3", "child 4", "child 5", "child 6", "deep 7"]
            assert deep.next_seq() == 8
        listed = {info.name: (info.parent, info.fork_seq, info.messages) for info in list_conversations(_location(root))}
        assert listed == {
            "root": (None, None, 6),
            "child": ("root", 4, 9),
            "grandchild": ("child", 2, 3),
            "deep": ("child", 7, 8),
        }


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_parent_compressed_past_the_fork_keeps_its_summaries_and_the_branch_makes_its_own(
    backend: str, tmp_path: Path
) -> None:
    """The parent summarized [2, 8) before the fork at 5: the branch cannot see it, and its own [2, 4) must not
    overlap it in the parent."""
    with fresh_store(backend, tmp_path, conversation="main") as main:
        main.append([text("user", f"m {i}") for i in range(10)])
        first = main.add_summary(1, 0, 2, "zero and one", {})
        across = main.add_summary(1, 2, 8, "two to seven", {})
        main.branch("alt", 5)
        with open_store(_location(main), conversation="alt") as alt:
            assert [s.id for s in alt.summaries()] == [first]
            made = alt.add_summary(1, 2, 4, "two and three", {})
            assert [s.id for s in alt.summaries()] == [first, made]
            assert [s.id for s in main.summaries()] == [first, across]  # kept with the branch, not the parent


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_the_parents_later_summary_in_the_shared_part_is_hidden_by_the_branchs_own(backend: str, tmp_path: Path) -> None:
    with fresh_store(backend, tmp_path, conversation="main") as main:
        main.append([text("user", f"m {i}") for i in range(10)])
        main.branch("alt", 5)
        with open_store(_location(main), conversation="alt") as alt:
            alt.append([text("user", f"alt {i}") for i in range(5, 8)])
            mine = alt.add_summary(1, 0, 6, "across the fork", {})
            theirs = main.add_summary(1, 0, 3, "main's first three", {})
            assert [s.id for s in alt.summaries()] == [mine]  # overlapped by the branch's own: hidden
            assert [s.id for s in main.summaries()] == [theirs]


def _location(store: SQLiteStore | PostgresStore) -> str:
    return store.path  # a file path, or the URL (the test server's has no password to hide)


@pytest.mark.parametrize("backend", ["memory", "postgres"])
def test_branching_refuses_bad_points_and_names(backend: str) -> None:
    with fresh_store(backend, None) as store:
        store.append([text("user", "one"), text("assistant", "two")])
        with pytest.raises(StoreError, match="cannot branch 'default' at message 3: it holds messages 0 to 1"):
            store.branch("x", 3)
        with pytest.raises(InvalidArgument, match="at must be"):
            store.branch("x", True)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="control character"):
            store.branch("a\nb", 1)
        store.branch("x", 2)
        with pytest.raises(StoreError, match="a conversation named 'x' exists already"):
            store.branch("x", 1)
        assert [info.name for info in store.conversations()] == ["default", "x"]
