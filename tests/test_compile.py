"""Compile on real agent transcripts: the pi coding session and the Agent TARS browser run."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from conftest import EXAMPLES
from strategies import (
    check_tool_pairing,
    independent_tokens,
    iter_strings,
    payload_json,
    placeholders_in,
    wire_images,
)

from compaction import Compactor, Recipe, Store, compile_request, run_pipeline
from compaction.pipeline import import_transcript
from compaction.planning import summary_header

PI = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"
TARS = EXAMPLES / "agent-tars__browser__event-stream-with-many-images.json"
MODELS = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-5"}


@pytest.fixture(scope="module", params=["openai", "anthropic"])
def pi_run(request: pytest.FixtureRequest) -> Any:
    fmt = request.param
    return fmt, run_pipeline(PI, Recipe(budget_tokens=16000, output_format=fmt, model=MODELS[fmt]))


def test_pi_fits_16000_tokens(pi_run: Any) -> None:
    fmt, result = pi_run
    compiled = result.compiled
    assert result.transcript.format == "pi"
    assert compiled.budget == 16000
    assert compiled.tokens <= 16000
    assert result.tokens_before > 16000 * 10  # the history really needed compressing
    body = payload_json(compiled.request.payload)
    assert independent_tokens(body, MODELS[fmt]) <= 16000
    assert compiled.request.format == fmt and body["model"] == MODELS[fmt]


def test_pi_every_message_covered(pi_run: Any) -> None:
    _fmt, result = pi_run
    compiled = result.compiled
    assert compiled.summaries, "the history is summarized"
    position = 0
    for summary in compiled.summaries:
        assert summary.start_seq == position
        position = summary.end_seq
    assert position == compiled.live_start <= compiled.total_messages
    raw = set(compiled.raw_seqs)
    assert raw >= set(range(compiled.live_start, compiled.total_messages))
    for seq in range(compiled.total_messages):
        covering = [s for s in compiled.summaries if s.start_seq <= seq < s.end_seq]
        assert len(covering) + (seq >= compiled.live_start) == 1 or seq in raw
    text = compiled.request.payload.decode()
    assert sum(text.count(summary_header(s)) for s in compiled.summaries) == len(compiled.summaries)


def test_pi_no_orphan_tool_calls_or_results(pi_run: Any) -> None:
    fmt, result = pi_run
    body = payload_json(result.compiled.request.payload)
    check_tool_pairing(body, fmt)
    assert [r for r in result.compiled.request.replacements if r.kind.startswith("orphan")] == []


def test_pi_raw_window_at_a_roomier_budget() -> None:
    """With more room, compile keeps the newest messages raw and still pairs every call."""
    store = Store(":memory:")
    try:
        import_transcript(store, PI)
        recipe = Recipe(budget_tokens=60000, output_format="anthropic", model="claude-sonnet-4-5")
        Compactor(store, recipe).tick(keep_tail_tokens=20000)
        compiled = compile_request(store, recipe)
        assert compiled.tokens <= 60000 and compiled.live_start < compiled.total_messages
        body = payload_json(compiled.request.payload)
        check_tool_pairing(body, "anthropic")
        assert body["messages"][0]["role"] == "user"
        assert independent_tokens(body, "claude-sonnet-4-5") <= 60000
        newest = store.messages(compiled.total_messages - 1)[0]
        assert any(newest.text()[:60] in s for s in iter_strings(body["messages"][-1]))
    finally:
        store.close()


def test_pi_l1_summary_records_request_and_tools() -> None:
    store = Store(":memory:")
    try:
        import_transcript(store, PI)
        Compactor(store, Recipe()).tick()
        l1 = store.summaries(level=1)
        assert l1 and l1[0].start_seq == 0
        chunk = store.messages(l1[0].start_seq, l1[0].end_seq)
        first_prompt = next(m for m in chunk if m.role == "user" and m.text().strip())
        summary = l1[0].text
        assert "\nAsks:\n" in summary and summary.startswith("Goal:\n")
        assert " ".join(first_prompt.text().split()[:8]) in " ".join(summary.split())
        # the files the tools ran on, each with what happened to it
        calls = [(b["name"], b.get("input", {})) for m in chunk for b in m.content if b.get("type") == "tool_use"]
        assert calls
        files = summary.split("\nFiles:\n", 1)[1].split("\n")
        assert any(re.search(r" — (read|edited|wrote|created)", line) for line in files), summary
        paths = [i.get("path") or i.get("file_path") for _n, i in calls if isinstance(i, dict)]
        assert any(p and p in summary for p in paths), "the paths the tools ran on"
    finally:
        store.close()


def _store_images(store: Store) -> list[bytes]:
    found: list[bytes] = []

    def walk(blocks: Any) -> None:
        for block in blocks:
            if block.get("type") == "image" and block["source"]["type"] == "base64":
                found.append(base64.b64decode(block["source"]["data"]))
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                walk(block["content"])

    for message in store.messages():
        walk(message.content)
    return found


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_agent_tars_text_only(fmt: str) -> None:
    result = run_pipeline(TARS, Recipe(budget_tokens=100000, vision=False, output_format=fmt, model=MODELS[fmt]))
    body = payload_json(result.compiled.request.payload)
    assert wire_images(body) == [] and result.compiled.request.images_shown == 0
    found = placeholders_in(body)
    assert len(found) == 7
    for match in found:
        assert "image/jpeg" in match.group("what") and "2560x1600" in match.group("what")
        assert "text-only" in match.group("reason")
    assert result.compiled.request.images_replaced == 7


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_agent_tars_two_newest_screenshots(fmt: str, tmp_path: Any) -> None:
    path = tmp_path / "tars.sqlite"
    result = run_pipeline(TARS, Recipe(budget_tokens=100000, vision=True, max_live_images=2,
                                       output_format=fmt, model=MODELS[fmt]), store_path=path)
    body = payload_json(result.compiled.request.payload)
    shipped = [i.data for i in wire_images(body)]
    assert len(shipped) == 2 and result.compiled.request.images_shown == 2
    with Store(path) as store:
        stored = _store_images(store)
    assert len(stored) == 7
    assert shipped == stored[-2:], "the two newest screenshots, in order"
    assert len(placeholders_in(body)) == 5
    assert all("count cap" in m.group("reason") for m in placeholders_in(body))
    assert independent_tokens(body, MODELS[fmt]) <= result.compiled.tokens
