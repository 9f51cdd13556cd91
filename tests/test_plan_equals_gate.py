"""Plan == gate (DESIGN.md invariant 10): what the compile planner prices is what the gate ships.

On generated stores (tool rounds with nested images, URL images, data URIs in text, string
tool results and tool arguments, cut data URIs) crossed with every image policy, count cap,
byte cap and depth cap, in both request formats:

* the planner's price of the compiled request equals the gate's count of what it ships,
  tool repairs included (renamed ids and orphan stand-ins);
* a history that fits raw compiles to exactly the raw figure (``tokens_before``);
* an independent count of the shipped body never exceeds the reported tokens.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from strategies import CapturingSummarizer, histories, independent_tokens, payload_json, recipes

from compaction import Message, OverBudget, Recipe, Store, compile_request, compress_and_compile
from compaction.compile import raw_history_tokens

EXAMPLES = int(os.environ.get("PLAN_GATE_EXAMPLES", "500"))


def _optional(low: int, high: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(min_value=low, max_value=high))


image_recipes = st.builds(
    Recipe,
    budget_tokens=st.just(400_000),
    vision=st.booleans(),
    max_live_images=_optional(0, 3),
    image_strip_depth_tokens=_optional(0, 3000),
    max_live_image_bytes=_optional(0, 3000),
    assumed_url_image_bytes=st.integers(min_value=1, max_value=5000),
    output_format=st.sampled_from(["openai", "anthropic"]),
    model=st.sampled_from([None, "gpt-4o", "gpt-4.1-mini", "claude-sonnet-4-5", "gemini-2.5-pro"]),
)


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(messages=histories(max_turns=8), recipe=image_recipes)
def test_planner_price_equals_gate_count(messages: list[Message], recipe: Recipe) -> None:
    store = Store(":memory:")
    try:
        store.append(messages)
        compiled = compile_request(store, recipe)
        event(
            f"images shown {min(compiled.request.images_shown, 2)}, replaced {min(compiled.request.images_replaced, 2)}"
        )
        repairs = sorted({r.kind for r in compiled.request.replacements if r.kind != "image"})
        event(f"tool repairs: {', '.join(repairs) or 'none'}")
        assert compiled.planned_tokens == compiled.tokens
        # nothing was summarized: the whole history fits raw and ships exactly as priced
        assert compiled.live_start == 0 and not compiled.summaries
        assert compiled.tokens == raw_history_tokens(store, recipe)
        body = payload_json(compiled.request.payload)
        assert independent_tokens(body, recipe.target_model) <= compiled.tokens
    finally:
        store.close()


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(messages=histories(max_turns=10), recipe=recipes())
def test_planner_price_equals_gate_count_with_summaries(messages: list[Message], recipe: Recipe) -> None:
    """The same holds for requests that show summaries and a shortened live window."""
    store = Store(":memory:")
    try:
        store.append(messages)
        try:
            compiled, _ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
        except OverBudget as err:
            event(f"over budget ({err.stage})")
            return
        event(f"summaries shown: {min(len(compiled.summaries), 2)}")
        repairs = sorted({r.kind for r in compiled.request.replacements if r.kind != "image"})
        event(f"tool repairs: {', '.join(repairs) or 'none'}")
        assert compiled.planned_tokens == compiled.tokens
        assert compiled.tokens <= recipe.budget_tokens  # type: ignore[operator]
        body = payload_json(compiled.request.payload)
        assert independent_tokens(body, recipe.target_model) <= compiled.tokens
    finally:
        store.close()
