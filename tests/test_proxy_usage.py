"""The proxy records each answered request's usage in its conversation's store, for calibration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from serve_support import MockUpstream, conversations, make_app, post

from compaction.cli import main
from compaction.serve.ledger import Ledger
from compaction.store import Store

KEY = "sk-proxy-test-" + "Ab3" * 8


def _store_records(tmp_path: Path) -> list[Any]:
    (conversation,) = conversations(tmp_path / "stores")
    with Store(tmp_path / "stores" / "conversations" / f"{conversation}.sqlite", create=False) as store:
        return store.usage_records()


def _ledger(tmp_path: Path) -> list[dict[str, Any]]:
    ledger = Ledger(tmp_path / "stores" / "requests.sqlite")
    try:
        return ledger.rows()
    finally:
        ledger.close()


def test_an_openai_turn_records_the_shipped_count_beside_prompt_tokens(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream())
    history = [{"role": "user", "content": "List the files."}]
    answer = post(
        app,
        "/v1/chat/completions",
        {"model": "gpt-4o", "messages": history},
        {"Authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 200, answer.text
    (row,) = _ledger(tmp_path)
    (record,) = _store_records(tmp_path)
    # serve_support's OpenAI answer: prompt_tokens 123 (64 cached), completion_tokens 7
    assert (record.model, record.request_format, record.source) == ("gpt-4o", "openai", "proxy")
    assert (record.compiled_tokens, record.input_tokens, record.cache_read_tokens, record.output_tokens) == (
        row["tokens_shipped"],
        123,
        64,
        7,
    )
    assert record.compiled_tokens > 0


def test_an_anthropic_turn_records_uncached_plus_cached_input(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream())
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Hello there."}],
    }
    for turn in range(5):
        answer = post(app, "/v1/messages", body, {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
        assert answer.status_code == 200, answer.text
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": f"More {turn}."},
        ]
    records = _store_records(tmp_path)
    rows = _ledger(tmp_path)
    # serve_support's Anthropic answer: input 321 uncached + 100 cache reads + 20 cache writes
    assert [
        (r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens) for r in records
    ] == [(441, 100, 20, 9)] * 5
    assert [r.compiled_tokens for r in records] == [row["tokens_shipped"] for row in rows]
    store_dir = tmp_path / "stores"
    (conversation,) = conversations(store_dir)
    db = store_dir / "conversations" / f"{conversation}.sqlite"
    result = CliRunner().invoke(
        main, ["calibrate", "--store", str(db), "--store-dir", str(store_dir), "--json"]
    )
    assert result.exit_code == 0, result.output
    from_store, from_ledger = json.loads(result.stdout)
    ratios = sorted(441 / row["tokens_shipped"] for row in rows)
    for fit in (from_store, from_ledger):  # the store and the ledger agree
        assert (fit["model"], fit["samples"]) == ("claude-sonnet-4-5", 5)
        assert fit["correction"] == round(min(2.0, max(0.5, ratios[2])), 6)
