"""Many conversations in one store: isolation, listing, choosing one, migration, the CLI.

Store-level tests run on SQLite and PostgreSQL (the ``location`` fixture of
``store_backends``).  Isolation is a property test: conversations appended to in any
interleaving each read back exactly their own messages, summaries, failures and events.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import (
    every_backend_location,  # noqa: F401  (the location fixture over every backend)
    fresh_store,
)

from compaction import Message, Recipe, StoreError, compile_request
from compaction.cli import main
from compaction.errors import InvalidArgument
from compaction.store import DEFAULT_CONVERSATION, SQLiteStore, list_conversations, open_store

TESTS = Path(__file__).parent
V1_FIXTURE = TESTS / "data" / "store_v1.sqlite"
PI = TESTS.parent / "examples" / "pi__pi-mono__before-compaction.jsonl"
SHOT = TESTS / "data" / "cases" / "screenshot-pricing.json"


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


def test_a_new_store_opened_without_a_name_uses_default_and_creates_it_at_the_first_write(location: str) -> None:
    with open_store(location) as store:
        assert store.conversation == DEFAULT_CONVERSATION
        assert list_conversations(location) == []  # nothing written: no conversation yet
        store.append([text("user", "hi")])
    [info] = list_conversations(location)
    assert (info.name, info.parent, info.fork_seq, info.messages, info.own_messages, info.summaries) == (
        "default", None, None, 1, 1, 0,
    )


def test_a_store_of_several_conversations_wants_a_name_and_says_which(location: str) -> None:
    for name in ("alpha", "beta"):
        with open_store(location, conversation=name) as store:
            store.append([text("user", f"hello {name}")])
    with pytest.raises(StoreError, match=r"holds 2 conversations \(alpha, beta\); name one \(--conversation NAME\)"):
        open_store(location)
    with pytest.raises(StoreError, match=r"no conversation 'gamma' in the store \(it holds: alpha, beta\)"):
        open_store(location, create=False, conversation="gamma")
    with open_store(location, create=False, conversation="beta") as beta:
        assert [m.text() for m in beta.messages()] == ["hello beta"]


def test_a_conversation_name_must_be_a_line_of_text(location: str) -> None:
    for bad, words in ((7, "must be a string"), ("", "must not be empty"), ("a\x00b", "control character"),
                       ("x" * 201, "at most 200")):
        with pytest.raises(InvalidArgument, match=words):
            open_store(location, conversation=bad)  # type: ignore[arg-type]


@st.composite
def interleavings(draw: Any) -> list[tuple[int, list[str]]]:
    """A sequence of (conversation index, texts appended in one call)."""
    return draw(
        st.lists(
            st.tuples(st.integers(0, 2), st.lists(st.text("abcxyz ", min_size=1, max_size=6), min_size=1, max_size=3)),
            min_size=1,
            max_size=12,
        )
    )


def check_isolation(store_for: Any, calls: list[tuple[int, list[str]]]) -> None:
    names = ["one", "two", "three"]
    stores = [store_for(name) for name in names]
    try:
        expected: list[list[str]] = [[], [], []]
        for index, texts in calls:
            role = "user" if len(expected[index]) % 2 == 0 else "assistant"
            stores[index].append([text(role, t) for t in texts])
            expected[index] += texts
        for index, store in enumerate(stores):
            assert [m.text() for m in store.messages()] == expected[index]
            assert [f.seq for f in store.facts()] == list(range(len(expected[index])))
            if expected[index]:
                store.add_summary(1, 0, len(expected[index]), f"summary of {names[index]}", {})
                store.record_failure(1, 0, 1, f"failed in {names[index]}")
                store.record_event(10, 5, 100, {"who": names[index]})
        for index, store in enumerate(stores):
            if expected[index]:
                assert [s.text for s in store.summaries()] == [f"summary of {names[index]}"]
                assert [f["reason"] for f in store.failures()] == [f"failed in {names[index]}"]
                assert [e.detail for e in store.events()] == [{"who": names[index]}]
                assert store.summary_frontier(1) == len(expected[index])
            else:
                assert store.summaries() == [] and store.failures() == [] and store.events() == []
        listed = {info.name: (info.messages, info.summaries) for info in stores[0].conversations()}
        assert listed == {
            name: (len(expected[i]), 1 if expected[i] else 0) for i, name in enumerate(names) if expected[i]
        }
    finally:
        for store in stores:
            store.close()


@settings(max_examples=60, deadline=None)
@given(calls=interleavings())
def test_conversations_are_isolated_sqlite(calls: list[tuple[int, list[str]]]) -> None:
    shared = sqlite3.connect(":memory:", isolation_level=None)
    try:
        check_isolation(lambda name: SQLiteStore(connection=shared, conversation=name), calls)
    finally:
        shared.close()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=interleavings())
def test_conversations_are_isolated_postgres(calls: list[tuple[int, list[str]]]) -> None:
    with fresh_store("postgres") as first:
        check_isolation(lambda name: open_store(first.path, conversation=name), calls)


def test_the_same_transcript_in_two_conversations_is_stored_twice_and_compiles_alike(location: str) -> None:
    messages = [text("user", "the same"), text("assistant", "words")]
    for name in ("a", "b"):
        with open_store(location, conversation=name) as store:
            assert store.append(messages, chain_seed="t") == 2
            assert store.append(messages, chain_seed="t") == 0  # idempotent within its conversation
    with open_store(location, conversation="a") as a, open_store(location, conversation="b") as b:
        recipe = Recipe(budget_tokens=1000)
        assert compile_request(a, recipe).request.payload == compile_request(b, recipe).request.payload


def test_a_first_release_store_migrates_into_the_conversation_default(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    shutil.copyfile(V1_FIXTURE, path)
    before = sqlite3.connect(path)
    rows = before.execute("SELECT seq, content, import_key FROM messages ORDER BY seq").fetchall()
    summaries = before.execute("SELECT id, level, start_seq, end_seq, text FROM summaries ORDER BY id").fetchall()
    before.close()
    [info] = list_conversations(str(path))
    assert (info.name, info.id, info.messages, info.own_messages, info.summaries) == ("default", 1, 33, 33, 10)
    after = sqlite3.connect(path)
    # nothing rewritten but a key: the same rows, each keyed to conversation 1
    assert after.execute("SELECT seq, content, import_key FROM messages ORDER BY seq").fetchall() == rows
    assert after.execute("SELECT id, level, start_seq, end_seq, text FROM summaries ORDER BY id").fetchall() == summaries
    assert after.execute("SELECT DISTINCT conversation_id FROM messages").fetchall() == [(1,)]
    after.close()
    with open_store(str(path)) as store:  # the only conversation, chosen without a name
        assert store.conversation == "default" and len(store) == 33


# -- the command line ------------------------------------------------------------------------------


def cli(*args: object) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_import_puts_each_transcript_in_its_own_conversation_and_again_adds_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    first = cli("import", PI, "--store", store, "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["conversation"] == "pi__pi-mono__before-compaction"
    assert cli("import", SHOT, "--store", store).exit_code == 0
    again = cli("import", PI, "--store", store, "--json")
    assert (json.loads(again.output)["added"], json.loads(again.output)["conversation"]) == (0, PI.stem)
    listed = cli("conversations", "--store", store, "--json")
    assert listed.exit_code == 0, listed.output
    assert [(c["name"], c["messages"], c["summaries"]) for c in json.loads(listed.output)] == [
        (PI.stem, 962, 0),
        ("screenshot-pricing", 2, 0),
    ]
    table = cli("conversations", "--store", store)
    assert "screenshot-pricing" in table.output and "962" in table.output


def test_commands_on_a_store_of_several_conversations_need_one_named(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    cli("import", PI, "--store", store)
    cli("import", SHOT, "--store", store, "--conversation", "shot")
    for command in (["compile", "--budget", "20000"], ["stats"], ["compress"]):
        refused = cli(*command, "--store", store)
        assert refused.exit_code == 1
        assert f"holds 2 conversations ({PI.stem}, shot); name one (--conversation NAME)" in refused.output
    stats = cli("stats", "--store", store, "--conversation", "shot", "--json")
    assert stats.exit_code == 0, stats.output
    assert (json.loads(stats.output)["conversation"], json.loads(stats.output)["messages"]) == ("shot", 2)
    compiled = cli("compile", "--store", store, "--conversation", "shot", "--budget", "20000")
    assert compiled.exit_code == 0, compiled.output
    missing = cli("compile", "--store", store, "--conversation", "nope", "--budget", "20000")
    assert missing.exit_code == 1 and f"no conversation 'nope' in the store (it holds: {PI.stem}, shot)" in missing.output


def test_branch_from_the_command_line_and_compress_it(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    cli("import", PI, "--store", store)
    made = cli("branch", "--store", store, "--at", "100", "--name", "rewind", "--json")
    assert made.exit_code == 0, made.output
    info = json.loads(made.output)
    assert (info["parent"], info["fork_seq"], info["messages"], info["own_messages"]) == (PI.stem, 100, 100, 0)
    compressed = cli("compress", "--store", store, "--conversation", "rewind", "--json")
    assert compressed.exit_code == 0, compressed.output
    assert json.loads(compressed.output)["l1_added"] > 0
    listed = {c["name"]: c for c in json.loads(cli("conversations", "--store", store, "--json").output)}
    # what the branch summarized lies in the shared prefix: kept once, with the parent, seen by both
    assert listed["rewind"]["summaries"] == listed[PI.stem]["summaries"] > 0
    bad = cli("branch", "--store", store, "--conversation", PI.stem, "--at", "5000", "--name", "x")
    assert bad.exit_code == 1 and "cannot branch" in bad.output and "0 to 961" in bad.output
