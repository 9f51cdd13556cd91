"""Compile refuses a prefill exactly when the request it would ship ends on the assistant's turn.

The check before planning refused whenever the store's newest message (system ones aside) was
the assistant's, though a newest message the summaries already cover, or one larger than the
budget, is summarized and the request ends on the summaries' user turn.  Now the compiled
request's last turn is the authority (``compile.check_compiled_prefill``), and the check before
any work refuses only a newest message that will ship raw: past every level-1 summary and
within the budget (half the compaction target for the pipeline, whose last round may summarize
a larger one).  Checked with hypothesis on histories ending on an assistant message of 5 to
35,000 tokens, fresh or compressed first, three formats, both pipeline modes: compile refuses
exactly when the same call with ``assistant_prefill = "allow"`` ships a body ending on the
assistant, and otherwise ships that same body.  The pipeline does the same but for one gap,
asserted as such: a newest message of at most half the compaction target is refused before any
summary, though the last compaction round (``keep_tail_tokens=0``), run when it and the
summaries before it exceed the target, would have summarized it (500 tokens at a budget of
1,500: the low-water target is 1,050).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction import Message, Recipe, Store, compile_request, compress_and_compile
from compaction.errors import AssistantPrefillRefused, OverBudget
from compaction.events import low_water
from compaction.tokens.counting import count_text

FORMATS = ["anthropic", "openai", "openai-responses"]


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _history(turns: int, words: int) -> list[Message]:
    messages: list[Message] = []
    for i in range(turns):
        messages.append(Message("user", [_text(f"ask {i} " + "about the export " * 30)]))
        messages.append(Message("assistant", [_text(f"answer {i} " + "the batch failed " * 30)]))
    messages.append(Message("user", [_text("list the files")]))
    messages.append(Message("assistant", [_text(" ".join(f"/src/file{i}.py" for i in range(words)))]))
    return messages


def _items(body: dict[str, Any], fmt: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = body["input" if fmt == "openai-responses" else "messages"]
    return [i for i in items if i.get("role") != "system"]


def _recipes(fmt: str, budget: int) -> tuple[Recipe, Recipe]:
    """The same recipe allowing a prefill, and refusing one (Claude Opus 4.6, auto)."""
    refusing = Recipe(budget_tokens=budget, output_format=fmt, model="claude-opus-4-6")  # type: ignore[arg-type]
    return refusing.replace(assistant_prefill="allow"), refusing


_WORDS = st.sampled_from([1, 10, 100, 250, 400, 700, 1200, 7000])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(min_value=0, max_value=8),
    words=_WORDS,
    budget=st.sampled_from([1500, 3000, 6000]),
    fmt=st.sampled_from(FORMATS),
    compressed=st.booleans(),
)
def test_compile_refuses_exactly_when_the_shipped_request_ends_on_the_assistant(
    turns: int, words: int, budget: int, fmt: str, compressed: bool
) -> None:
    allow, refusing = _recipes(fmt, budget)
    with Store(":memory:") as store:
        store.append(_history(turns, words))
        if compressed:
            compress_and_compile(store, allow)
        try:
            shipped = compile_request(store, allow).request.body()
        except OverBudget:
            with pytest.raises((OverBudget, AssistantPrefillRefused)):
                compile_request(store, refusing)
            return
        if _items(shipped, fmt)[-1]["role"] == "assistant":
            with pytest.raises(AssistantPrefillRefused) as caught:
                compile_request(store, refusing)
            assert caught.value.seq == len(store) - 1 and "\n" not in str(caught.value)
        else:
            assert compile_request(store, refusing).request.body() == shipped


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(min_value=0, max_value=8),
    words=_WORDS,
    budget=st.sampled_from([1500, 3000, 6000]),
    fmt=st.sampled_from(FORMATS),
    mode=st.sampled_from(["events", "replan"]),
)
def test_the_pipeline_refuses_exactly_when_the_shipped_request_ends_on_the_assistant(
    turns: int, words: int, budget: int, fmt: str, mode: str
) -> None:
    allow, refusing = _recipes(fmt, budget)
    history = _history(turns, words)
    with Store(":memory:") as store:
        store.append(history)
        compiled, _ = compress_and_compile(store, allow, mode=mode)  # type: ignore[arg-type]
        shipped = compiled.request.body()
    ends_on_assistant = _items(shipped, fmt)[-1]["role"] == "assistant"
    target = low_water(refusing, budget) if mode == "events" else budget
    with Store(":memory:") as store:
        store.append(history)
        try:
            again, _ = compress_and_compile(store, refusing, mode=mode)  # type: ignore[arg-type]
        except AssistantPrefillRefused:
            if not ends_on_assistant:
                # the one gap left: refused before any work on a newest message of at most half
                # the compaction target, which the last round (keep 0) summarized under "allow"
                assert store.summaries() == [] and store.events() == []
                assert count_text(history[-1].content[0]["text"], refusing.encoding) <= target // 2
        else:
            assert not ends_on_assistant and again.request.body() == shipped


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_newest_message_larger_than_the_budget_is_not_refused_before_planning(fmt: str) -> None:
    # 35,000 tokens in a 6,000-token budget: never shown raw, so compile names the shortfall
    # instead of refusing a prefill it would never send; the pipeline summarizes it
    allow, refusing = _recipes(fmt, 6000)
    with Store(":memory:") as store:
        store.append(_history(10, 6000))
        with pytest.raises(OverBudget):
            compile_request(store, refusing)
        compiled, ticks = compress_and_compile(store, refusing)
        assert ticks and _items(compiled.request.body(), fmt)[-1]["role"] == "user"
        assert compiled.tokens <= 6000
        again = compile_request(store, refusing)  # the newest message is summarized now
    assert _items(again.request.body(), fmt)[-1]["role"] == "user"


def test_a_newest_message_that_fits_is_still_refused_before_any_summary() -> None:
    allow, refusing = _recipes("anthropic", 3000)
    with Store(":memory:") as store:
        store.append(_history(20, 10))  # needs compressing; the newest message is small
        with pytest.raises(AssistantPrefillRefused):
            compress_and_compile(store, refusing)
        assert store.summaries() == [] and store.events() == []
        compiled, _ = compress_and_compile(store, allow)
    assert compiled.request.body()["messages"][-1]["role"] == "assistant"
