"""Usage records on every backend: record a request's count beside the provider's usage, read it back."""

from __future__ import annotations

import pytest
from store_backends import every_backend_location, every_backend_store  # noqa: F401  (fixtures over every backend)

from compaction.errors import InvalidArgument, StoreError
from compaction.store import HistoryStore, UsageRecord
from compaction.store.factory import open_store


def test_a_usage_record_reads_back_as_written(store: HistoryStore) -> None:
    first = store.record_usage(
        "claude-sonnet-4-5",
        "anthropic",
        1000,
        input_tokens=1180,
        cache_read_tokens=900,
        cache_write_tokens=40,
        output_tokens=212,
        source="summarizer",
    )
    second = store.record_usage("gpt-4o", "openai", 500)  # no usage returned
    assert second > first
    records = store.usage_records()
    assert [(r.id, r.model, r.request_format, r.compiled_tokens) for r in records] == [
        (first, "claude-sonnet-4-5", "anthropic", 1000),
        (second, "gpt-4o", "openai", 500),
    ]
    claude = records[0]
    assert (
        claude.input_tokens,
        claude.cache_read_tokens,
        claude.cache_write_tokens,
        claude.output_tokens,
    ) == (
        1180,
        900,
        40,
        212,
    )
    assert claude.source == "summarizer" and claude.conversation == store.conversation
    assert claude.ratio == pytest.approx(1.18)
    assert records[1].input_tokens is None and records[1].ratio is None and records[1].source == "client"
    assert store.usage_records("gpt-4o") == [records[1]]
    assert store.usage_records("no-such-model") == []


def test_usage_records_are_read_across_conversations_and_survive_reopening(location: str) -> None:
    with open_store(location, conversation="a") as a:
        a.record_usage("m", "openai", 100, input_tokens=110)
    with open_store(location, conversation="b") as b:
        b.record_usage("m", "openai", 200, input_tokens=230)
    with open_store(location, conversation="a", create=False) as again:
        records = again.usage_records("m")
    assert [(r.conversation, r.compiled_tokens, r.input_tokens) for r in records] == [
        ("a", 100, 110),
        ("b", 200, 230),
    ]
    assert all(isinstance(r, UsageRecord) for r in records)


@pytest.mark.parametrize(
    ("args", "options", "error", "message"),
    [
        (("", "openai", 10), {}, InvalidArgument, "model must be a non-empty string"),
        (("m", "openai", 1.5), {}, InvalidArgument, "compiled_tokens must be an integer of tokens; found"),
        (("m", "openai", 10), {"input_tokens": "12"}, InvalidArgument, "input_tokens must be an integer"),
        (("m", "openai", 10), {"output_tokens": True}, InvalidArgument, "output_tokens must be an integer"),
        (("m", "openai", -1), {}, StoreError, "compiled_tokens must be 0 or more tokens; found -1"),
        (("m", "openai", 10), {"cache_read_tokens": -3}, StoreError, "cache_read_tokens must be 0 or more"),
    ],
)
def test_a_bad_usage_record_is_refused_with_one_line_and_nothing_stored(
    store: HistoryStore, args: tuple[object, ...], options: dict[str, object], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        store.record_usage(*args, **options)  # type: ignore[arg-type]
    assert store.usage_records() == []


def test_the_newest_records_are_read_in_order(store: HistoryStore) -> None:
    ids = [store.record_usage("m", "openai", 100 + i, input_tokens=110 + i) for i in range(7)]
    store.record_usage("other", "openai", 5, input_tokens=6)
    assert [r.id for r in store.usage_records("m", 3)] == ids[-3:]
    assert [r.compiled_tokens for r in store.usage_records("m", 100)] == [100 + i for i in range(7)]
    assert [r.model for r in store.usage_records(None, 2)] == ["m", "other"]
    with pytest.raises(InvalidArgument, match="newest must be a number of records"):
        store.usage_records("m", 0)
