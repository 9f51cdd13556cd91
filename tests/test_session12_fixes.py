"""Session 12 fixes of what the attack pass found: large branch imports, empty messages left out silently.

1. ``compaction import --branches`` was quadratic in a session's branches (``branch()``
   listed every conversation with a summary count after each fork; opening a conversation
   read every conversation's row; each path was compared with every stored one) and worse in
   nested rewinds.  The work of forking and opening a branch is measured here in SQLite
   virtual-machine steps (``set_progress_handler``), which do not depend on the machine's
   speed: it no longer grows with the store's conversations.  The import's results are
   checked against what importing each path alone gives (hypothesis over generated session
   trees), and the new invariant: every distinct message prefix of the session is stored once.
2. An OpenAI Chat or Anthropic assistant message with ``content`` null or empty and no tool
   call was dropped on import without a word; a note now counts such messages.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from claude_code_sessions import assistant_event, rewind_tree, session_text, user_event, write_session
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.blocks import Message, text_block
from compaction.branch_import import _PrefixTree
from compaction.cli import main
from compaction.formats import load_transcript
from compaction.formats._claude_code_tree import path_lines, session_tree
from compaction.recipe import Recipe
from compaction.replay_strategies import make_strategy
from compaction.store import HistoryStore, list_conversations, open_store
from compaction.store.lineage import Lineage, Segment, lineage_of
from compaction.store.sqlite import SQLiteStore
from compaction.summarizers.extractive import ExtractiveSummarizer

# -- 1. branch imports ----------------------------------------------------------------------


def _import(path: Path, store: Path) -> dict[str, Any]:
    done = CliRunner().invoke(main, ["import", str(path), "--store", str(store), "--branches", "--json"])
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _shown(store: Path, name: str) -> list[tuple[str, str]]:
    with open_store(str(store), conversation=name) as opened:
        return [(m.role, m.text()) for m in opened.messages()]


@st.composite
def _trees(draw: st.DrawFn) -> list[int]:
    """Parents of 1 to 12 turns: each continues the root or an earlier turn (siblings and nesting)."""
    count = draw(st.integers(1, 12))
    return [draw(st.integers(-1, i - 1)) for i in range(count)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parents=_trees())
def test_each_branch_shows_its_path_and_each_prefix_is_stored_once(
    tmp_path_factory: pytest.TempPathFactory, parents: list[int]
) -> None:
    where = tmp_path_factory.mktemp("tree")
    session = where / "tree.jsonl"
    text = session_text(rewind_tree(parents))
    session.write_text(text, encoding="utf-8")
    store = where / "s.db"
    report = _import(session, store)
    tree = session_tree(text)

    def parsed(lines: tuple[int, ...]) -> list[tuple[str, str]]:
        alone = where / "alone.jsonl"
        alone.write_text(path_lines(text, lines), encoding="utf-8")
        return [(m.role, m.text()) for m in load_transcript(alone, format="claude-code").messages]

    paths = {"tree": parsed(tree.main)}
    paths.update({f"tree@{t.start}": parsed(t.lines) for t in tree.threads})
    # every rewind is a branch showing exactly what importing its path alone gives
    assert [b["name"] for b in report["branches"]] == [f"tree@{t.start}" for t in tree.threads]
    for name, messages in paths.items():
        assert _shown(store, name) == messages
    # nothing shared is stored twice: the rows are the session's distinct message prefixes
    prefixes = {tuple(messages[:end]) for messages in paths.values() for end in range(1, len(messages) + 1)}
    infos = list_conversations(str(store))
    assert sum(info.own_messages for info in infos) == len(prefixes)
    # a branch forks where it leaves the path it shares most with
    for info in infos:
        if info.parent is not None:
            assert paths[info.name][: info.fork_seq] == paths[info.parent][: info.fork_seq]
            assert (
                paths[info.name][info.fork_seq] not in paths[info.parent][info.fork_seq : info.fork_seq + 1]
            )
    again = _import(session, store)
    assert [b["added"] for b in again["branches"]] == [0] * len(tree.threads)


def test_a_prompt_with_many_siblings_imports_each_as_a_branch_of_the_conversation(tmp_path: Path) -> None:
    session = write_session(tmp_path / "wide.jsonl", rewind_tree([-1] * 40))
    report = _import(session, tmp_path / "s.db")
    # the last prompt's answer reaches furthest in the file: it goes on in the conversation
    assert report["messages"] == 4
    assert [(b["name"], b["parent"], b["fork_seq"], b["added"]) for b in report["branches"]] == [
        (f"wide@p{i}", "wide", 2, 2) for i in range(39)
    ]


def test_nested_rewinds_fork_each_from_the_one_before(tmp_path: Path) -> None:
    # turn i+1 continues turn i, and a last turn rewinds to the root: every other turn is abandoned
    depth = 30
    events = [user_event("r", None, "root"), assistant_event("ra", "r", "root answer")]
    parent = "ra"
    for i in range(depth):
        events += [user_event(f"x{i}", parent, f"abandon {i}"), assistant_event(f"xa{i}", f"x{i}", f"aa {i}")]
        parent = f"xa{i}"
    events += [user_event("k", "ra", "keep"), assistant_event("ka", "k", "kept")]
    session = write_session(tmp_path / "deep.jsonl", events)
    store = tmp_path / "s.db"
    report = _import(session, store)
    [branch] = report["branches"]  # one rewind: x0's subtree, a chain
    assert (branch["name"], branch["parent"], branch["fork_seq"], branch["added"]) == (
        "deep@x0",
        "deep",
        2,
        2 * depth,
    )
    assert _shown(store, "deep") == [
        ("user", "root"),
        ("assistant", "root answer"),
        ("user", "keep"),
        ("assistant", "kept"),
    ]
    assert len(_shown(store, "deep@x0")) == 2 + 2 * depth


class _Steps:
    """Counts the SQLite virtual-machine steps run on a connection (in tens), a measure of work
    that does not depend on the machine's speed."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.count = 0

    def __enter__(self) -> _Steps:
        self.connection.set_progress_handler(self._tick, 10)
        return self

    def _tick(self) -> int:
        self.count += 1
        return 0

    def __exit__(self, *exc: object) -> None:
        self.connection.set_progress_handler(None, 0)


def _work_with_conversations(path: Path, others: int) -> tuple[int, int]:
    """The steps of forking a branch, and of opening another branch and appending to it, in a
    store holding ``others`` branches beside its conversation."""
    with SQLiteStore(path, conversation="main") as store:
        store.append([Message("user", (text_block(f"m{i}"),)) for i in range(4)])
        for index in range(others):
            store.branch(f"b{index}", 2)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        store = SQLiteStore(connection=connection, conversation="main")
        with _Steps(connection) as forking:
            info = store.branch("new", 3)
        assert (info.name, info.parent, info.fork_seq, info.messages, info.own_messages) == (
            "new",
            "main",
            3,
            3,
            0,
        )
        with _Steps(connection) as appending:
            other = SQLiteStore(connection=connection, conversation="b0")
            assert other.append([Message("user", (text_block("x"),))]) == 1
        assert [m.text() for m in other.messages()] == ["m0", "m1", "x"]
        return forking.count, appending.count
    finally:
        connection.close()


def test_forking_and_opening_a_branch_do_not_grow_with_the_store(tmp_path: Path) -> None:
    # before: branch() counted the summaries of every conversation (376 against 34 steps here)
    # and opening a conversation read every conversation's row (190 against 104)
    few = _work_with_conversations(tmp_path / "few.db", 5)
    many = _work_with_conversations(tmp_path / "many.db", 100)
    assert many[0] <= few[0] * 1.2
    assert many[1] <= few[1] * 1.2


def _longest_by_comparing(
    paths: dict[str, list[str]], prints: list[str], other_than: str
) -> tuple[str, int] | None:
    """The first path (in recording order) sharing the longest prefix with ``prints``, by comparing with each."""

    def common(a: list[str], b: list[str]) -> int:
        count = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            count += 1
        return count

    candidates = [(name, common(prints, held)) for name, held in paths.items() if name != other_than]
    return max(candidates, key=lambda c: c[1]) if candidates else None


_PATHS = st.lists(
    st.tuples(st.sampled_from("abcde"), st.lists(st.sampled_from("xyz"), max_size=6)), max_size=8
)


@given(
    recorded=_PATHS, prints=st.lists(st.sampled_from("xyz"), max_size=7), other_than=st.sampled_from("abcdef")
)
def test_the_prefix_tree_finds_the_path_sharing_most_as_comparing_with_each_did(
    recorded: list[tuple[str, list[str]]], prints: list[str], other_than: str
) -> None:
    tree = _PrefixTree("claude-code")
    held: dict[str, list[str]] = {}
    for name, path in recorded:
        if name in held and path[: len(held[name])] != held[name]:
            continue  # a conversation's messages only grow: a later record extends the earlier
        tree.add(name, path)
        held[name] = path
    assert tree.longest(prints, other_than) == _longest_by_comparing(held, prints, other_than)
    assert tree.covers(prints) == any(path[: len(prints)] == prints for path in held.values())


# -- 2. messages with no content ------------------------------------------------------------

_OPENAI_EMPTY = [None, "", []]


@pytest.mark.parametrize("content", _OPENAI_EMPTY, ids=["null", "empty-string", "empty-list"])
def test_an_openai_assistant_message_with_no_content_is_left_out_with_a_note(
    tmp_path: Path, content: Any
) -> None:
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "ok"},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat), encoding="utf-8")
    parsed = load_transcript(path, format="openai")
    assert [(m.role, m.text()) for m in parsed.messages] == [
        ("user", "hi"),
        ("user", "again"),
        ("assistant", "ok"),
    ]
    assert parsed.problems == [
        f"{path}: 1 message with no content left out (1 assistant: content null or empty and no tool calls, "
        "nothing to show a model; messages[1])"
    ]
    done = CliRunner().invoke(main, ["import", str(path), "--store", str(tmp_path / "s.db"), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["messages"], report["problems"]) == (3, parsed.problems)


def test_an_openai_assistant_message_with_only_tool_calls_is_kept(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    chat = [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(chat), encoding="utf-8")
    parsed = load_transcript(path, format="openai")
    assert [m.role for m in parsed.messages] == ["user", "assistant", "user"]
    assert parsed.problems == []


@pytest.mark.parametrize("content", [None, "", []], ids=["null", "empty-string", "empty-list"])
def test_an_anthropic_assistant_message_with_no_content_is_left_out_with_a_note(
    tmp_path: Path, content: Any
) -> None:
    body = {
        "model": "claude",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": content},
            {"role": "user", "content": [{"type": "text", "text": "again"}]},
        ],
    }
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    parsed = load_transcript(path, format="anthropic")
    assert [(m.role, m.text()) for m in parsed.messages] == [("user", "hi"), ("user", "again")]
    assert parsed.problems == [
        f"{path}: 1 message with no content left out (1 assistant: content null or empty and no tool calls, "
        "nothing to show a model; messages[1])"
    ]


@given(empty=st.lists(st.booleans(), min_size=1, max_size=30), jsonl=st.booleans())
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_message_is_kept_or_counted_in_the_note(tmp_path: Path, empty: list[bool], jsonl: bool) -> None:
    chat: list[dict[str, Any]] = []
    for index, blank in enumerate(empty):
        chat.append({"role": "user", "content": f"ask {index}"})
        chat.append({"role": "assistant", "content": None if blank else f"answer {index}"})
    path = tmp_path / ("chat.jsonl" if jsonl else "chat.json")
    path.write_text(
        "".join(json.dumps(m) + "\n" for m in chat) if jsonl else json.dumps(chat), encoding="utf-8"
    )
    parsed = load_transcript(path, format="openai")
    kept = [m.text() for m in parsed.messages if m.role == "assistant"]
    assert kept == [f"answer {i}" for i, blank in enumerate(empty) if not blank]
    left = sum(empty)
    if not left:
        assert parsed.problems == []
        return
    [note] = parsed.problems
    plural = "s" if left != 1 else ""
    assert f": {left} message{plural} with no content left out ({left} assistant:" in note
    where = [
        f"line {2 * i + 2}" if jsonl else f"messages[{2 * i + 1}]" for i, blank in enumerate(empty) if blank
    ]
    assert ", ".join(where[:10]) in note


# -- 3. a pinned message in the baselines' window -------------------------------------------

PIN = "PINNED-FACT: deploy only from the release branch"


def _pinned_store(store: HistoryStore, count: int, words: int) -> None:
    messages = []
    for i in range(count):
        text = PIN if i == 2 else f"message {i} " + " ".join(f"word{j}" for j in range(words))
        messages.append(Message("user" if i % 2 == 0 else "assistant", (text_block(text),)))
    store.append(messages)
    store.pin(2)


@pytest.mark.parametrize("name", ["compact-at-limit", "masking"])
def test_a_baseline_shows_a_pinned_message_in_its_window_once(name: str) -> None:
    # before: the system text held every pin, so the pinned message in the raw window showed twice
    with open_store(":memory:") as store:
        _pinned_store(store, 4, 3)
        request = make_strategy(name, Recipe(budget_tokens=4000), ExtractiveSummarizer()).request(store)
        assert request.payload.decode("utf-8").count(PIN) == 1
        assert request.system is None
        assert ("user", (text_block(PIN),)) in [(role, tuple(blocks)) for role, blocks in request.messages]


@pytest.mark.parametrize("name", ["compact-at-limit", "masking"])
def test_a_baseline_keeps_a_pinned_message_it_no_longer_shows_in_the_system_text(name: str) -> None:
    with open_store(":memory:") as store:
        _pinned_store(store, 40, 150)
        request = make_strategy(name, Recipe(budget_tokens=3000), ExtractiveSummarizer()).request(store)
        assert request.system == PIN
        assert ("user", (text_block(PIN),)) not in [
            (role, tuple(blocks)) for role, blocks in request.messages
        ]


# -- 4. lineages deeper than SQLite's expression depth ----------------------------------------


def _lineage_db(segments: list[Segment]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE messages (conversation_id INTEGER, seq INTEGER)")
    db.execute("CREATE TABLE pins (conversation_id INTEGER, seq INTEGER)")
    db.execute(
        "CREATE TABLE failures (conversation_id INTEGER, level INTEGER, start_seq INTEGER, end_seq INTEGER)"
    )
    for seg in segments:
        rows = [(seg.conversation_id, seq) for seq in range(max(0, seg.start - 1), seg.start + 2)]
        db.executemany("INSERT INTO messages VALUES (?, ?)", rows)
        db.executemany("INSERT INTO pins VALUES (?, ?)", rows)
        db.execute(
            "INSERT INTO failures VALUES (?, 1, ?, ?)", (seg.conversation_id, seg.start, seg.start + 1)
        )
    return db


def _chain(depth: int) -> Lineage:
    """A branch nested ``depth`` deep, each forking its parent one message after the parent's fork."""
    tree = {0: (None, None)} | {i: (i - 1, i) for i in range(1, depth)}
    return lineage_of(depth - 1, tree)


def test_a_lineage_deeper_than_sqlites_expression_limit_can_be_read() -> None:
    # before: the conditions were one flat OR chain, which SQLite refuses past 1,000 terms
    # ("Expression tree is too large (maximum depth 1000)")
    lineage = _chain(1200)
    db = _lineage_db(list(lineage.segments))
    where, args = lineage.rows()
    seen = db.execute(f"SELECT conversation_id, seq FROM messages WHERE {where}", args).fetchall()
    assert sorted(seen) == [(i, i) for i in range(1199)] + [(1199, 1199), (1199, 1200)]
    where, args = lineage.points()
    assert db.execute(f"SELECT COUNT(*) FROM pins WHERE {where}", args).fetchone()[0] == 1200 + 1199 + 1
    where, args = lineage.summaries(shadowed=False)
    assert db.execute(f"SELECT COUNT(*) FROM failures WHERE {where}", args).fetchone()[0] == 1200


@given(forks=st.lists(st.integers(0, 6), min_size=1, max_size=12))
def test_a_lineage_selects_the_rows_its_segments_hold(forks: list[int]) -> None:
    tree: dict[int, tuple[int | None, int | None]] = {0: (None, None)}
    for index, fork in enumerate(forks, 1):
        tree[index] = (index - 1, fork)
    lineage = lineage_of(len(forks), tree)
    db = _lineage_db(list(lineage.segments))
    stored = db.execute("SELECT conversation_id, seq FROM messages").fetchall()
    where, args = lineage.rows()
    seen = db.execute(f"SELECT DISTINCT conversation_id, seq FROM messages WHERE {where}", args).fetchall()
    assert sorted(seen) == sorted({(c, s) for c, s in stored if lineage.owner(s) == c})
