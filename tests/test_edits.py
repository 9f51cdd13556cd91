"""Edits: a new revision of a message, shown by every read; the summaries it invalidates are remade.

The property test compresses a generated history, edits one of its messages, compresses
again and compiles: the store still holds the original row (append-only), reads show the
newest revision, no summary made before the edit that covers the message or follows it is
shown any more, and the compiled request satisfies coverage and tool pairing.
Store-level tests run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import every_backend_store, fresh_store  # noqa: F401  (the store fixture over every backend)
from strategies import CapturingSummarizer, check_tool_pairing, histories, payload_json
from test_branches import check_coverage

from compaction import Compactor, Message, Recipe, Store, StoreError, compile_request
from compaction.cli import main
from compaction.errors import InvalidMessage
from compaction.store import open_store
from compaction.store.factory import compaction_claim

RECIPE = Recipe(budget_tokens=10**7, chunk_target_tokens=200, chunk_min_messages=2, merge_fanout=2)


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


def compress(store: Any, keep_tail: int) -> None:
    summarizer = CapturingSummarizer(encoding=RECIPE.encoding)
    compactor = Compactor(store, RECIPE, summarizer)
    compactor.tick(keep_tail_tokens=keep_tail)
    compactor.tick(keep_tail_tokens=keep_tail // 2, close_tail=True)
    for _kind, payload in summarizer.requests:
        check_tool_pairing(payload_json(payload), summarizer.request_format)


@st.composite
def edits(draw: Any) -> tuple[list[Message], int, str, int]:
    messages = draw(histories(min_turns=2, max_turns=8))
    seq = draw(st.sampled_from([i for i, m in enumerate(messages) if m.role != "system"]))
    return messages, seq, f"EDITED {draw(st.integers(0, 999))}", draw(st.integers(min_value=0, max_value=400))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=edits())
def test_an_edit_shows_everywhere_and_its_stale_summaries_are_remade(case: tuple[list[Message], int, str, int]) -> None:
    messages, seq, new_text, keep_tail = case
    with Store(":memory:") as store:
        store.append(messages)
        compress(store, keep_tail)
        before = {s.id: s for s in store.summaries()}
        row = store._db.execute("SELECT content FROM messages WHERE seq = ?", (seq,)).fetchone()
        assert store.edit(seq, [{"type": "text", "text": new_text}]) == 1
        # append-only: the message row is as it was; reads show the revision
        assert store._db.execute("SELECT content FROM messages WHERE seq = ?", (seq,)).fetchone() == row
        assert store.messages(seq, seq + 1)[0].content == ({"type": "text", "text": new_text},)
        assert store.revisions(seq) == 1
        stale = {s["id"] for s in store.stale_summaries()}
        assert stale == {i for i, s in before.items() if s.end_seq > seq}  # covering it or after it
        assert {s.id for s in store.summaries()} == set(before) - stale  # those before it are kept
        compress(store, keep_tail)  # remade from the edited history
        assert not stale & {s.id for s in store.summaries()}  # a stale id never comes back
        compiled = compile_request(store, RECIPE)
        check_coverage(store, compiled)
        body = payload_json(compiled.request.payload)
        check_tool_pairing(body, RECIPE.output_format)
        if seq >= compiled.live_start:
            assert new_text in compiled.request.payload.decode("utf-8")


def test_an_edit_refuses_what_it_cannot_do(store: Any) -> None:
    store.append([text("user", "one"), text("assistant", "two")])
    with pytest.raises(StoreError, match="no message 2 in conversation 'default'"):
        store.edit(2, [{"type": "text", "text": "x"}])
    with pytest.raises(InvalidMessage, match="non-empty list of content blocks"):
        store.edit(0, "just a string")
    with pytest.raises(InvalidMessage, match="non-empty list of content blocks"):
        store.edit(0, [])
    for blank in ([{"type": "text", "text": ""}], [{"type": "text", "text": " \n"}, {"type": "text", "text": ""}]):
        with pytest.raises(InvalidMessage, match="holds only empty text"):  # no request could send it
            store.edit(1, blank)
    assert [m.text() for m in store.messages()] == ["one", "two"]
    assert store.edit(1, [{"type": "text", "text": "second"}]) == 1
    assert store.edit(1, [{"type": "text", "text": "third"}]) == 2
    assert [m.text() for m in store.messages()] == ["one", "third"]
    assert [f.text_tokens for f in store.facts()][1] > 0
    assert store.events()[-1].detail["edit"] == {"seq": 1, "revision": 2, "stale_summaries": 0}


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_an_edit_of_a_shared_message_reaches_the_branch_and_stales_its_summaries(backend: str, tmp_path: Path) -> None:
    with fresh_store(backend, tmp_path, conversation="main") as main:
        main.append([text("user" if i % 2 == 0 else "assistant", f"m {i}") for i in range(8)])
        main.branch("alt", 6)
        with open_store(main.path, conversation="alt") as alt:
            alt.append([text("user", "alt 6"), text("assistant", "alt 7")])
            shared = alt.add_summary(1, 0, 2, "zero and one", {})  # kept with main
            across = alt.add_summary(1, 2, 7, "two to six", {})  # the branch's own
            with pytest.raises(StoreError, match="message 3 of 'alt' is shared with the conversation it branches from"):
                alt.edit(3, [{"type": "text", "text": "no"}])
            main.edit(3, [{"type": "text", "text": "m 3, corrected"}])
            assert alt.messages(3, 4)[0].text() == "m 3, corrected"
            assert [s.id for s in alt.summaries()] == [shared]  # the one covering message 3 is stale
            assert [s["id"] for s in alt.stale_summaries()] == [across]
            alt.edit(7, [{"type": "text", "text": "alt 7, corrected"}])
            assert [m.text() for m in main.messages()][6:] == ["m 6", "m 7"]  # the branch's edit stays its own


def test_edit_from_the_command_line(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with Store(store) as opened:
        opened.append([text("user", f"message {i}") for i in range(6)])
        opened.add_summary(1, 0, 3, "the first three", {})
        opened.add_summary(1, 3, 6, "the last three", {})
    runner = CliRunner()
    done = runner.invoke(main, ["edit", "--store", str(store), "4", "--text", "message four, fixed", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"conversation": "default", "seq": 4, "revision": 1, "stale_summaries": 1}
    content = tmp_path / "c.json"
    content.write_text(json.dumps([{"type": "text", "text": "from a file"}]))
    again = runner.invoke(main, ["edit", "--store", str(store), "4", "--content", str(content)])
    assert again.exit_code == 0 and "revision 2" in again.output
    with Store(store) as opened:
        assert opened.messages(4, 5)[0].text() == "from a file"
        assert [(s.start_seq, s.end_seq) for s in opened.summaries()] == [(0, 3)]
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "text"}')
    refused = runner.invoke(main, ["edit", "--store", str(store), "4", "--content", str(bad)])
    assert refused.exit_code == 1 and "expected a JSON list of content blocks" in refused.output
    both = runner.invoke(main, ["edit", "--store", str(store), "4"])
    assert both.exit_code == 2 and "give one of --text TEXT or --content FILE.json" in both.output


def test_an_edit_on_postgres_waits_for_a_compression_under_way_and_stales_what_it_made() -> None:
    """A worker compressing under the claim may be summarizing the old revision: the edit waits, then stales it."""
    with fresh_store("postgres", conversation="main") as worker:
        worker.append([text("user" if i % 2 == 0 else "assistant", f"m {i}") for i in range(6)])
        done: list[int] = []
        with open_store(worker.path, conversation="main") as editor:
            with compaction_claim(worker):
                thread = threading.Thread(target=lambda: done.append(editor.edit(3, [{"type": "text", "text": "fixed"}])))
                thread.start()
                deadline = time.monotonic() + 30
                while not worker._db.execute(
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone():  # the editor is queued on the claim
                    assert time.monotonic() < deadline and thread.is_alive(), "the edit did not wait for the claim"
                    time.sleep(0.01)
                made = worker.add_summary(1, 0, 6, "made from the old revision", {})
                assert done == []
            thread.join(timeout=60)
        assert done == [1]
        assert worker.summaries() == [] and [s["id"] for s in worker.stale_summaries()] == [made]
        assert worker.messages(3, 4)[0].text() == "fixed"
