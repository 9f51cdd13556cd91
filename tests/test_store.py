"""The append-only store: dedup by hash chain, content-addressed blobs, cached counts, summaries.

Every test that takes ``store`` (or ``location``) runs on SQLite in memory, an SQLite file
and a PostgreSQL schema (tests/store_backends.py).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import BACKENDS, every_backend_location, every_backend_store, fresh_store  # noqa: F401  (fixtures)
from strategies import histories, png_b64, png_bytes, store_snapshot

from compaction import ImageError, Message, Store, StoreError
from compaction.store.factory import open_store
from compaction.tokens.encodings import get_encoding


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


def with_image(data_b64: str, words: str = "look") -> Message:
    return Message("user", ({"type": "text", "text": words},
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data_b64}}))


TRANSCRIPT = [text("user", "hello"), text("assistant", "hi there"), text("user", "fix the loader")]


def test_same_transcript_twice_adds_nothing(store: Store) -> None:
    assert store.append(TRANSCRIPT, chain_seed="t") == 3
    assert store.append(TRANSCRIPT, chain_seed="t") == 0
    assert len(store) == 3 and store.next_seq() == 3
    assert [m.seq for m in store.messages()] == [0, 1, 2]


def test_grown_transcript_adds_its_tail(store: Store) -> None:
    store.append(TRANSCRIPT, chain_seed="t")
    grown = TRANSCRIPT + [text("assistant", "done"), text("user", "thanks")]
    assert store.append(grown, chain_seed="t") == 2
    assert [m.text() for m in store.messages()] == ["hello", "hi there", "fix the loader", "done", "thanks"]
    assert [m.seq for m in store.messages(3)] == [3, 4]


def test_repeated_message_inside_a_transcript_is_kept(store: Store) -> None:
    again = [text("user", "yes"), text("assistant", "ok"), text("user", "yes"), text("assistant", "ok")]
    assert store.append(again) == 4


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(messages=histories(max_turns=5), cut=st.integers(0, 20))
def test_dedup_family(backend: str, tmp_path: Path, messages: list[Message], cut: int) -> None:
    with fresh_store(backend, None if backend == "sqlite" else tmp_path) as store:
        head = messages[: min(cut, len(messages))]
        assert store.append(head, chain_seed="x") == len(head)
        assert store.append(messages, chain_seed="x") == len(messages) - len(head)
        assert store.append(messages, chain_seed="x") == 0
        assert [(m.role, m.content) for m in store.messages()] == [(m.role, m.content) for m in messages]


def test_same_image_twice_is_one_blob(store: Store) -> None:
    data = png_b64(30, 20, 7)
    store.append([with_image(data, "one"), with_image(data, "two")])
    raw = png_bytes(30, 20, 7)
    digest = hashlib.sha256(raw).hexdigest()
    assert store.blob_hashes() == [digest]
    assert store.image_count() == 1
    assert store.blob(digest) == raw
    for message in store.messages():
        assert message.content[1]["source"]["data"] == data  # bytes round-trip exactly


def test_blob_of_unknown_hash_is_a_store_error(store: Store) -> None:
    with pytest.raises(StoreError):
        store.blob("0" * 64)


def test_nested_tool_result_images_are_blobs(store: Store) -> None:
    data = png_b64(5, 6, 1)
    store.append([
        Message("assistant", ({"type": "tool_use", "id": "t1", "name": "shot", "input": {}},)),
        Message("user", ({"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "shot"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]},)),
    ])
    assert store.blob_hashes() == [hashlib.sha256(base64.b64decode(data)).hexdigest()]
    nested = store.messages()[1].content[0]["content"][1]
    assert nested["source"]["data"] == data
    facts = store.facts()[1]
    assert facts.tool_results == ("t1",) and (facts.images[0].width, facts.images[0].height) == (5, 6)


def test_token_count_cache_equals_a_direct_count(store: Store) -> None:
    words = ["the stale cache", "rerun the failing suite", "src/app.py line 42"]
    store.append([text("user" if i % 2 == 0 else "assistant", w) for i, w in enumerate(words)])
    encoding = get_encoding("o200k_base")
    for fact, word in zip(store.facts(), words, strict=True):
        assert fact.text_tokens == len(encoding.encode_ordinary(word)) + 4  # + the framing per message
    cl100k = get_encoding("cl100k_base")
    for fact, word in zip(store.facts(encoding="cl100k_base"), words, strict=True):
        assert fact.text_tokens == len(cl100k.encode_ordinary(word)) + 4
    # cached: a second read gives the same numbers
    assert [f.text_tokens for f in store.facts(encoding="cl100k_base")] == [
        len(cl100k.encode_ordinary(w)) + 4 for w in words
    ]


def test_summaries_add_and_list(store: Store) -> None:
    store.append(TRANSCRIPT + [text("assistant", "a"), text("user", "b")])
    first = store.add_summary(1, 0, 2, "Asked:\n- hello", {"summarizer": "test"})
    second = store.add_summary(1, 2, 4, "Done:\n- x", {})
    top = store.add_summary(2, 0, 4, "Asked:\n- hello\nDone:\n- x", {"children": [first, second]})
    assert store.add_summary(1, 0, 2, "other text", {}) == first  # one summary per range and level
    assert [(s.level, s.start_seq, s.end_seq) for s in store.summaries()] == [(1, 0, 2), (1, 2, 4), (2, 0, 4)]
    assert [s.id for s in store.summaries(level=2)] == [top]
    assert store.summaries(level=1)[0].provenance == {"summarizer": "test"}
    assert store.summaries(level=1)[0].text == "Asked:\n- hello"
    with pytest.raises(StoreError):
        store.add_summary(1, 4, 5, "   ", {})
    with pytest.raises(StoreError):
        store.add_summary(1, 3, 3, "x", {})


@pytest.mark.parametrize("bad", ["not base64 at all!!", "iVBORw0KGgo@@@@", "abcde", "data:image/png;base64,iVBORw0KGgo="])
def test_bad_base64_leaves_the_store_unchanged(store: Store, bad: str) -> None:
    store.append([with_image(png_b64(4, 4), "first")])
    before = store_snapshot(store)
    with pytest.raises(ImageError):
        store.append([text("user", "fine"), with_image(bad, "broken")])
    assert store_snapshot(store) == before
    assert len(store) == 1


def test_file_store_reopens_with_everything(location: str) -> None:
    data = png_b64(12, 9, 3)
    with open_store(location) as store:
        store.append(TRANSCRIPT + [with_image(data)], chain_seed="s")
        store.add_summary(1, 0, 2, "Asked:\n- hello", {"summarizer": "test"})
        store.record_failure(1, 2, 3, "refused")
        before = store_snapshot(store)
        facts = store.facts()
    with open_store(location, create=False) as store:
        assert store_snapshot(store) == before
        assert store.facts() == facts
        assert [(s.level, s.start_seq, s.end_seq, s.text) for s in store.summaries()] == [(1, 0, 2, "Asked:\n- hello")]
        assert store.failures() == [{"level": 1, "start_seq": 2, "end_seq": 3, "reason": "refused", "kind": "failed"}]
        assert store.messages()[-1].content[1]["source"]["data"] == data
        assert store.append(TRANSCRIPT + [with_image(data)], chain_seed="s") == 0


def test_url_image_facts_read_back(store: Store) -> None:
    store.append([Message("user", ({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},))])
    (image,) = store.facts()[0].images
    assert image.source == "url" and image.url == "https://example.com/a.png"
    assert image.sha256 is None and image.width is None and image.byte_size is None


def test_not_a_store_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        Store(path)


def test_cut_data_uri_in_text_is_stored_and_never_shipped_as_an_image(store: Store) -> None:
    """A data: URI cut short in a truncated output is text: stored, and replaced loudly on the wire."""
    cut = "log: data:image/png;base64,iVBORw0KGgoAA"  # 13 base64 characters: cannot decode
    assert store.append([text("user", cut)]) == 1
    assert store.messages()[0].text() == cut
    (image,) = store.facts()[0].images
    assert image.source == "data-uri" and image.sha256 is None
    from compaction import Recipe, compile_request

    for vision in (True, False):
        compiled = compile_request(store, Recipe(budget_tokens=1000, vision=vision))
        assert compiled.request.images_shown == 0
        (replaced,) = compiled.request.replacements
        payload = compiled.request.payload.decode()
        assert "[image not shown: image/png" in payload and replaced.reason in payload
        if vision:
            assert "readable image" in replaced.reason or "damaged" in replaced.reason


def test_text_with_lone_surrogates_is_stored_and_read_back_exactly(store: Store) -> None:
    """A lone surrogate (valid in JSON, no UTF-8 form) in a source id, a summary or a failure
    reason is kept, code point for code point; SQLite could not bind it as TEXT."""
    odd = "a\ud800b\udfff"
    message = Message("user", ({"type": "text", "text": odd},), source_id=f"id-{odd}")
    assert store.append([message, text("assistant", "ok")], chain_seed="") == 2
    assert store.messages()[0].source_id == f"id-{odd}" and store.messages()[0].content == message.content
    first = store.add_summary(1, 0, 2, f"Asked:\n- {odd}", {"quoted": odd})
    assert store.add_summary(1, 0, 2, f"Asked:\n- {odd}", {}) == first
    (summary,) = store.summaries()
    assert summary.text == f"Asked:\n- {odd}" and summary.provenance == {"quoted": odd}
    store.record_failure(1, 0, 2, f"refused: {odd}")
    assert store.failures()[0]["reason"] == f"refused: {odd}"
    assert store.append([message, text("assistant", "ok")], chain_seed="") == 0  # the same transcript again


def test_an_agent_loop_appending_turn_by_turn_loses_nothing(store: Store) -> None:
    """Repro: appending "ok", "sure", "ok", "sure", "now do X" one call each kept 3 of 5."""
    turns = [("user", "ok"), ("assistant", "sure"), ("user", "ok"), ("assistant", "sure"), ("user", "now do X")]
    added = [store.append([text(role, words)]) for role, words in turns]
    assert added == [1, 1, 1, 1, 1]
    assert [(m.role, m.text()) for m in store.messages()] == turns
    # the same conversation synced from its start is recognized: only a grown tail is added
    assert store.append([text(role, words) for role, words in turns], chain_seed="") == 0
    grown = [*turns, ("assistant", "done"), ("user", "ok")]
    assert store.append([text(role, words) for role, words in grown], chain_seed="") == 2
    assert [m.text() for m in store.messages()][-3:] == ["now do X", "done", "ok"]


@pytest.mark.parametrize(
    ("table", "column", "value", "named"),
    [
        ("messages", "content", "{not json", "message 1"),
        ("messages", "content", "null", "message 1"),
        ("messages", "tool_uses", "[", "message 1"),
        ("summaries", "provenance", "[", "summary"),
    ],
)
def test_a_damaged_row_is_one_clear_store_error(tmp_path, table: str, column: str, value: str, named: str) -> None:
    import sqlite3

    from compaction import Message, StoreError

    path = tmp_path / "damaged.db"
    with Store(path) as store:
        store.append([Message("user", ({"type": "text", "text": f"ask {i}"},)) for i in range(3)])
        store.add_summary(1, 0, 2, "summary of the first two", {"summarizer": "test"})
    with sqlite3.connect(path) as db:
        where = "seq = 1" if table == "messages" else "id = 1"
        db.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (value,))
    with Store(path) as store:
        with pytest.raises(StoreError, match=rf"^{named}.*the stored row is damaged") as caught:
            store.messages() if table == "messages" and column == "content" else (
                store.facts(0, 3) if table == "messages" else store.summaries()
            )
        assert "\n" not in str(caught.value)


def test_a_message_deleted_outside_compaction_is_one_clear_store_error(tmp_path) -> None:
    import sqlite3

    from compaction import Message, StoreError

    path = tmp_path / "hole.db"
    with Store(path) as store:
        store.append([Message("user", ({"type": "text", "text": f"ask {i}"},)) for i in range(5)])
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM messages WHERE seq = 2")
    with Store(path) as store:
        for read in (lambda: store.messages(), lambda: store.facts(0, 5), lambda: store.messages(1, 4)):
            with pytest.raises(StoreError, match="message 2 is missing from the store"):
                read()
        assert [m.seq for m in store.messages(3, 5)] == [3, 4]  # what is whole still reads
