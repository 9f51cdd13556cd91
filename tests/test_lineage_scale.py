"""Lineages made without reading them back, and lookups past a seq: what keeps a nested import linear.

A branch's lineage is its parent's plus its own segment (:meth:`Lineage.child`), so a store
object that creates a branch keeps its lineage instead of reading it back (one row per
ancestor), and ``import --branches`` scopes one store object to each path in turn
(:meth:`~compaction.store.scope.ConversationScope.scope_to`) instead of opening the store
anew for each.  An import key chained from the row at seq ``s`` is looked for past ``s`` only
(:meth:`Lineage.keyed` with ``after``).  These tests hold each to what it replaces.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from claude_code_sessions import nested_rewinds, write_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import BACKENDS, store_location

from compaction import Message
from compaction.branch_import import plan_branches, session_main, store_branches
from compaction.errors import CompactionError, InvalidArgument, StoreError
from compaction.formats import load_transcript
from compaction.store import lineage as lineage_module
from compaction.store import open_store, scope
from compaction.store.lineage import Lineage, Segment, lineage_of

Tree = dict[int, tuple[int | None, int | None]]


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    """A store's conversations: 1 is a root, each later one a root or a branch of an earlier one."""
    count = draw(st.integers(1, 24))
    tree: Tree = {1: (None, None)}
    for cid in range(2, count + 1):
        if draw(st.booleans()) or cid == 2:
            tree[cid] = (draw(st.integers(1, cid - 1)), draw(st.integers(0, 30)))
        else:
            tree[cid] = (None, None)
    return tree


@given(trees())
def test_a_branchs_lineage_made_from_its_parents_is_the_one_read_from_the_table(tree: Tree) -> None:
    for cid, (parent, fork) in tree.items():
        if parent is None:
            continue
        assert fork is not None
        made = lineage_of(parent, tree).child(cid, fork)
        assert made == lineage_of(cid, tree)
        assert made.segments[0] == Segment(cid, fork, None)


def test_a_child_lineage_shares_the_ancestors_its_fork_does_not_cut() -> None:
    # nested forks, each past the one before: only the parent's segment changes
    tree: Tree = {1: (None, None), 2: (1, 5), 3: (2, 9)}
    parent = lineage_of(3, tree)
    child = parent.child(4, 12)
    assert child.segments == (Segment(4, 12, None), Segment(3, 9, 12), Segment(2, 5, 9), Segment(1, 0, 5))
    assert child.segments[2] is parent.segments[1] and child.segments[3] is parent.segments[2]
    # a fork below the ancestors' ends caps every one of them
    assert parent.child(5, 2).segments == (
        Segment(5, 2, None),
        Segment(3, 9, 2),
        Segment(2, 5, 2),
        Segment(1, 0, 2),
    )


@pytest.mark.parametrize("fork", [-1, True, 2.0, "3", None])
def test_a_child_lineage_refuses_a_fork_that_is_no_seq(fork: object) -> None:
    with pytest.raises(InvalidArgument, match="fork is a message's seq") as caught:
        lineage_of(1, {1: (None, None)}).child(2, fork)  # type: ignore[arg-type]
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, CompactionError)


def test_a_child_lineage_of_a_conversation_not_created_yet_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="not created yet"):
        Lineage(()).child(2, 0)


def _ids(condition: str) -> set[int]:
    found = re.fullmatch(r"\(conversation_id IN \(([0-9, ]*)\)\)", condition)
    if condition == "(1 = 0)":
        return set()
    assert found is not None, condition
    return {int(part) for part in found.group(1).split(", ")}


@given(trees(), st.integers(-1, 40))
def test_keyed_after_names_exactly_the_conversations_holding_a_seq_past_it(tree: Tree, after: int) -> None:
    for cid in tree:
        lineage = lineage_of(cid, tree)
        holding = {
            seg.conversation_id
            for seg in lineage.segments
            if (seg.end is None or seg.end > seg.start) and (seg.end is None or seg.end > after + 1)
        }
        assert _ids(lineage.keyed(after=after)) == holding
        # every seq past `after` the lineage shows is owned by one of them
        for seq in range(after + 1, after + 40):
            owner = lineage.owner(seq)
            assert owner is None or owner in holding
        assert _ids(lineage.keyed()) >= holding  # the whole lineage's, as before


def _text(role: str, body: str) -> Message:
    return Message(role, ({"type": "text", "text": body},))


def _chain(location: str, depth: int, per_level: int = 2) -> list[str]:
    """A root of ``per_level`` messages and ``depth`` branches, each of the one before at its end."""
    names = ["root"]
    with open_store(location, conversation="root") as store:
        store.append([_text("user" if i % 2 == 0 else "assistant", f"root {i}") for i in range(per_level)])
        for level in range(1, depth + 1):
            name = f"b{level}"
            store.branch(name, store.next_seq())
            store.scope_to(name)
            store.append(
                [_text("user" if i % 2 == 0 else "assistant", f"{name} {i}") for i in range(per_level)]
            )
            names.append(name)
    return names


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_store_scoped_in_turn_reads_what_a_fresh_open_reads(backend: str, tmp_path: Path) -> None:
    with store_location(backend, tmp_path) as location:
        names = _chain(location, 6)
        with open_store(location, create=False, conversation="b6") as store:
            for name in [*reversed(names), "b3", "root", "b6"]:
                store.scope_to(name, create=False)
                with open_store(location, create=False, conversation=name) as fresh:
                    assert store.messages() == fresh.messages()
                    assert list(store.lineage()) == list(fresh.lineage())
                    assert store.next_seq() == fresh.next_seq() == 2 * (names.index(name) + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scope_to_a_missing_conversation_raises_and_keeps_the_scope(backend: str, tmp_path: Path) -> None:
    with store_location(backend, tmp_path) as location:
        _scope_to_a_missing_conversation(location)


def _scope_to_a_missing_conversation(location: str) -> None:
    _chain(location, 2)
    with open_store(location, create=False, conversation="b2") as store:
        before = store.messages()
        with pytest.raises(StoreError, match="no conversation 'nope' in the store") as caught:
            store.scope_to("nope", create=False)
        assert isinstance(caught.value, CompactionError)
        assert store.conversation == "b2" and store.messages() == before
        with pytest.raises(InvalidArgument, match="must not be empty"):
            store.scope_to(" ")
        store.scope_to("fresh")  # created at its first write, as open_store does
        assert store.messages() == []
        store.append([_text("user", "new")])
        assert [m.content[0]["text"] for m in store.messages()] == ["new"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_branching_keeps_the_branchs_lineage_without_reading_it(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store_location(backend, tmp_path) as location:
        _branching_reads_nothing_back(location, monkeypatch)


def _branching_reads_nothing_back(location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _chain(location, 3)
    with open_store(location, create=False, conversation="b3") as store:
        reads = []
        real, walked = scope.lineage_of, scope.lineage_from_walk
        monkeypatch.setattr(scope, "lineage_of", lambda *a: reads.append(a) or real(*a))
        monkeypatch.setattr(scope, "lineage_from_walk", lambda *a: reads.append(a) or walked(*a))
        info = store.branch("b4", 5)
        assert info.messages == 5 and info.parent == "b3"
        store.scope_to("b4")
        assert reads == []  # made from b3's, not read back
        with open_store(location, create=False, conversation="b4") as fresh:
            assert list(store.lineage()) == list(fresh.lineage())
            assert store.messages() == fresh.messages()


def _lineage_reads(tmp_path: Path, depth: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Import a session of ``depth`` nested rewinds with ``--branches``; return the lineages read
    whole during the branches' import, and the branches made."""
    session = write_session(tmp_path / f"nested{depth}.jsonl", nested_rewinds(depth))
    location = str(tmp_path / f"nested{depth}.db")
    parsed, _notes = session_main(location, session, "main", load_transcript(session, "claude-code"))
    with open_store(location, conversation="main") as store:
        store.append(parsed.messages, chain_seed="claude-code")
    plan = plan_branches(location, session, "main", "claude-code")
    reads = []
    real, walked = scope.lineage_of, scope.lineage_from_walk  # a whole tree's, or a walk up the table's
    monkeypatch.setattr(scope, "lineage_of", lambda *a: reads.append(a) or real(*a))
    monkeypatch.setattr(scope, "lineage_from_walk", lambda *a: reads.append(a) or walked(*a))
    made, _notes = store_branches(location, plan)
    monkeypatch.undo()
    with open_store(location, create=False, conversation=made[-1].name) as deepest:
        # the deepest branch shows its whole path (the kept prompt's and every abandoned one's)
        assert deepest.next_seq() == made[-1].messages
        assert len(list(deepest.lineage())) > depth
    return len(reads), len(made)


def test_importing_nested_rewinds_reads_no_lineage_per_branch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shallow, shallow_made = _lineage_reads(tmp_path, 8, monkeypatch)
    deep, deep_made = _lineage_reads(tmp_path, 32, monkeypatch)
    assert deep_made > shallow_made >= 8
    # before: three reads a branch (opening its parent, reading it back, opening it); now the
    # store's listing, the main conversation and its first branch's parent, whatever the depth
    assert deep == shallow <= 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    depth=st.integers(0, 5),
    bodies=st.lists(st.sampled_from(["a", "b", "c", "a b"]), min_size=1, max_size=8),
    split=st.integers(0, 8),
)
def test_appends_at_a_deep_branchs_end_add_each_message_once(
    tmp_path_factory: pytest.TempPathFactory, depth: int, bodies: list[str], split: int
) -> None:
    # repeated bodies give repeated messages: a lookup past the chain's last row must still
    # find each one already stored, and only those
    location = str(tmp_path_factory.mktemp("appends") / "chain.db")
    names = _chain(location, depth)
    messages = [_text("user" if i % 2 == 0 else "assistant", body) for i, body in enumerate(bodies)]
    cut = min(split, len(messages))
    with open_store(location, create=False, conversation=names[-1]) as store:
        shared = store.messages()
        assert store.append(messages[:cut]) == cut
        assert store.append(messages[cut:]) == len(messages) - cut
        assert [(m.role, m.content) for m in store.messages()] == [
            (m.role, m.content) for m in [*shared, *messages]
        ]
        # a seeded import of the whole is stored once, and again adds nothing
        store.scope_to("seeded")
        assert store.append(messages, chain_seed="t") == len(messages)
        assert store.append(messages[:cut], chain_seed="t") == 0
        assert store.append(messages, chain_seed="t") == 0
        assert store.append([*messages, _text("user", "more")], chain_seed="t") == 1
        assert len(store.messages()) == len(messages) + 1


def test_the_lineage_module_still_builds_one_condition_per_ask() -> None:
    tree: Tree = {1: (None, None), **{cid: (cid - 1, cid) for cid in range(2, 300)}}
    lineage = lineage_of(299, tree)
    first = lineage.keyed(after=297)
    assert lineage.keyed(after=297) is first  # built once
    assert _ids(first) == {299, 298}
    assert len(lineage.__dict__["_conditions"]) <= lineage_module._MEMO_SIZE


@settings(max_examples=60, deadline=None)
@given(
    trees(),
    st.lists(
        st.tuples(st.integers(1, 24), st.integers(1, 3), st.integers(0, 30), st.integers(1, 12)), max_size=30
    ),
)
def test_a_summary_count_over_the_conversations_keeping_one_is_the_whole_lineages(
    tree: Tree, summaries: list[tuple[int, int, int, int]]
) -> None:
    # the count a new branch reports leaves out the ancestors keeping no summary; the whole
    # lineage's condition (what compile reads) must count the same
    from compaction.store.sqlite import SQLiteStore

    with SQLiteStore(":memory:", conversation=lineage_module.ANY_CONVERSATION) as store:
        db = store._db
        for cid, (parent, fork) in sorted(tree.items()):
            db.execute(
                "INSERT INTO conversations (id, name, parent_id, fork_seq, created_at) VALUES (?, ?, ?, ?, 0)",
                (cid, f"c{cid}", parent, fork),
            )
        for cid, level, start, length in summaries:
            if cid in tree:
                db.execute(
                    "INSERT OR IGNORE INTO summaries (conversation_id, level, start_seq, end_seq, text, created_at)"
                    " VALUES (?, ?, ?, ?, 's', 0)",
                    (cid, level, start, start + length),
                )
        for cid in tree:
            lineage = lineage_of(cid, tree)
            where, args = lineage.summaries()
            whole = db.execute(f"SELECT COUNT(*) FROM summaries WHERE {where}", args).fetchone()[0]
            assert store._summary_count(lineage) == whole
