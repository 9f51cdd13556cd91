# ruff: noqa: F811  (the imported fake server fixtures are taken as arguments)
"""Summarizer calls record their usage: each request the fake server answered is one usage record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_anthropic_server import FakeAnthropic, fake_anthropic  # noqa: F401
from fake_openai_server import FakeOpenAI, fake_openai  # noqa: F401

from compaction.blocks import Message
from compaction.calibration import correction_for
from compaction.compactor import Compactor
from compaction.recipe import Recipe
from compaction.store import Store
from compaction.summarizers.anthropic import AnthropicMessagesSummarizer
from compaction.summarizers.openai_chat import OpenAIChatSummarizer

KEY_ENV = "COMPACTION_TEST_SUMMARIZER_KEY"
MODEL = "fake-summarizer-7b"
OPTIONS: dict[str, Any] = {
    "api_key_env": KEY_ENV,
    "timeout_seconds": 5.0,
    "max_retries": 1,
    "backoff_base": 0.001,
}


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-fake-" + "Qx7" * 10)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "store.db") as opened:
        yield opened


def rounds(count: int) -> list[Message]:
    out: list[Message] = []
    for i in range(count):
        lines = "\n".join(f"line {j}: value_{i}_{j} = compute({j})" for j in range(12))
        out += [
            Message("user", ({"type": "text", "text": f"Please fix bug {i} in src/mod_{i}.py"},)),
            Message(
                "assistant",
                (
                    {"type": "text", "text": f"I'll read src/mod_{i}.py first."},
                    {
                        "type": "tool_use",
                        "id": f"call_{i}",
                        "name": "read_file",
                        "input": {"path": f"src/mod_{i}.py"},
                    },
                ),
            ),
            Message("user", ({"type": "tool_result", "tool_use_id": f"call_{i}", "content": lines},)),
            Message(
                "assistant", ({"type": "text", "text": f"Fixed bug {i}: the loop bound was off by one."},)
            ),
        ]
    return out


RECIPE = Recipe(
    chunk_target_tokens=150, chunk_min_messages=2, summary_max_tokens=120, summarizer_context_tokens=6000
)


def test_openai_summarizer_calls_are_recorded_with_the_servers_usage(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    store.append(rounds(8))
    with OpenAIChatSummarizer(fake_openai.base_url, MODEL, **OPTIONS) as s:
        report = Compactor(store, RECIPE, summarizer=s).tick()
    sent = [r for r in fake_openai.requests if r.status == 200]
    records = store.usage_records()
    assert report.requests == len(sent) == len(records) >= 5
    # the fake answers prompt_tokens = len(body) // 4 and completion_tokens = 17
    assert [r.input_tokens for r in records] == [max(1, len(r.body) // 4) for r in sent]
    assert {(r.model, r.request_format, r.source, r.output_tokens) for r in records} == {
        (MODEL, "openai", "summarizer", 17)
    }
    assert all(0 < r.compiled_tokens <= report.max_request_tokens for r in records)
    assert max(r.compiled_tokens for r in records) == report.max_request_tokens
    fit = correction_for(store, MODEL)
    ratios = sorted(r.input_tokens / r.compiled_tokens for r in records)  # type: ignore[operator]
    assert fit is not None and fit.samples == len(records) and ratios[0] <= fit.factor <= ratios[-1]


def test_anthropic_summarizer_calls_record_uncached_plus_cached_input(
    fake_anthropic: FakeAnthropic, store: Store
) -> None:
    store.append(rounds(3))
    with AnthropicMessagesSummarizer(fake_anthropic.base_url, MODEL, **OPTIONS) as s:
        Compactor(store, RECIPE, summarizer=s).tick()
    sent = [r for r in fake_anthropic.requests if r.status == 200]
    records = store.usage_records(MODEL)
    assert len(records) == len(sent) >= 1
    # the fake answers input_tokens = len(body) // 4 with cache_read_input_tokens = 0
    assert [(r.input_tokens, r.cache_read_tokens, r.request_format) for r in records] == [
        (max(1, len(r.body) // 4), 0, "anthropic") for r in sent
    ]


def test_the_offline_summarizer_records_nothing(store: Store) -> None:
    store.append(rounds(3))
    report = Compactor(store, RECIPE).tick()
    assert report.l1_added >= 1 and store.usage_records() == []
