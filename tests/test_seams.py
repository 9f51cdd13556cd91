"""The defects issue #9 found, each as a user would meet it, and the seams that fix them.

* the planner and the gate decide images the same way (a history that fits ships as priced);
* merge, stitch and split requests are planned to fit the summarizer's window;
* an Anthropic request names a Claude model by default and prices images as Claude does;
* the over-budget message names tool definitions as tool definitions;
* each summarizer request is gated once, and the gated bytes are what is sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from strategies import CapturingSummarizer, independent_tokens, payload_json, png_b64

from compaction import Compactor, Message, OverBudget, Recipe, Store, compile_request, run_pipeline
from compaction.compile import raw_history_tokens
from compaction.outputs import REQUEST_FORMATS, request_format
from compaction.tokens.image_pricing import price_image

EXAMPLES = Path(__file__).parent.parent / "examples"
PI = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"


def _screenshot_transcript(path: Path) -> Path:
    """The issue's six-message OpenAI transcript with two 512x512 PNG screenshots."""
    shot = [png_b64(512, 512, seed) for seed in (1, 2)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a browser agent."},
        {"role": "user", "content": [
            {"type": "text", "text": "What does the home page look like?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{shot[0]}"}},
        ]},
        {"role": "assistant", "content": "A header, a search box and three cards."},
        {"role": "user", "content": [
            {"type": "text", "text": "And after the click?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{shot[1]}"}},
        ]},
        {"role": "assistant", "content": "The search results page with ten links."},
        {"role": "user", "content": "Open the second link."},
    ]
    path.write_text(json.dumps(messages), "utf-8")
    return path


def test_two_screenshots_ship_as_priced(tmp_path: Path) -> None:
    """tokens_after == tokens_before with nothing summarized: the older image is stripped in both."""
    recipe = Recipe(budget_tokens=4000, image_strip_depth_tokens=100)
    result = run_pipeline(_screenshot_transcript(tmp_path / "shots.json"), recipe)
    assert result.summaries_per_level == {}
    assert result.compiled.live_start == 0
    assert result.compiled.tokens == result.tokens_before
    assert result.compiled.planned_tokens == result.compiled.tokens
    assert result.compiled.request.images_shown == 1  # the newer screenshot; the older is deeper than 100
    (replaced,) = result.compiled.request.replacements
    assert "depth cap" in replaced.reason
    # an independent count of the shipped body is not above what the engine reports
    body = payload_json(result.compiled.request.payload)
    assert independent_tokens(body, "gpt-4o") <= result.compiled.tokens


@pytest.mark.parametrize("fmt", sorted(REQUEST_FORMATS))
def test_history_that_fits_compiles_to_the_raw_figure(tmp_path: Path, fmt: str) -> None:
    transcript = _screenshot_transcript(tmp_path / "shots.json")
    tools = [{"name": "click", "description": "Click an element.", "parameters": {"type": "object"}}]
    for depth in (None, 0, 100, 10_000):
        recipe = Recipe(budget_tokens=4000, image_strip_depth_tokens=depth, output_format=fmt)  # type: ignore[arg-type]
        result = run_pipeline(transcript, recipe, tools=tools)
        assert result.compiled.tokens == result.tokens_before, (fmt, depth)


def _small_window_run(context: int, output: int) -> tuple[CapturingSummarizer, Recipe, int]:
    recipe = Recipe(budget_tokens=16000, summarizer_context_tokens=context, summary_max_tokens=output)
    summarizer = CapturingSummarizer()
    result = run_pipeline(PI, recipe, summarizer=summarizer)
    assert result.compiled.tokens <= 16000
    return summarizer, recipe, sum(result.summaries_per_level.values())


@pytest.mark.parametrize("context,output", [(3000, 600), (2000, 300)])
def test_small_summarizer_window_every_request_fits(context: int, output: int) -> None:
    """Every L1, merge, split and stitch request fits summarizer_context_tokens with its output."""
    summarizer, recipe, made = _small_window_run(context, output)
    kinds = {kind for kind, _payload in summarizer.requests}
    assert "l1" in kinds and "merge" in kinds
    assert made > 0
    limit = context - output
    for (kind, payload), tokens in zip(summarizer.requests, summarizer.tokens, strict=True):
        assert tokens <= limit, f"a {kind} request of {tokens} tokens over {limit}"
        body = payload_json(payload)
        assert body["max_tokens"] == output
        assert independent_tokens(body, recipe.target_model) <= tokens


def test_merge_of_records_too_large_for_one_request_is_combined_in_halves() -> None:
    """Six 600-token children cannot share a 2,400-token request: they merge in halves."""
    recipe = Recipe(summarizer_context_tokens=3000, summary_max_tokens=600, merge_fanout=6)
    store = Store(":memory:")
    try:
        for index in range(6):
            store.append([Message("user", ({"type": "text", "text": f"message {index}"},))], chain_seed=str(index))
        long_record = "Done:\n" + "\n".join(f"- step {i} edited src/module_{i}.py and ran the suite" for i in range(60))
        for index in range(6):
            store.add_summary(1, index, index + 1, long_record, {"summarizer": "test"})
        summarizer = CapturingSummarizer()
        report = Compactor(store, recipe, summarizer).tick()
        assert report.merged == {2: 1}
        assert report.failures == 0
        merges = [t for (kind, _p), t in zip(summarizer.requests, summarizer.tokens, strict=True) if kind == "merge"]
        assert len(merges) > 1 and max(merges) <= 2400
        (merged,) = store.summaries(level=2)
        assert (merged.start_seq, merged.end_seq) == (0, 6)
        assert len(merged.provenance["children"]) == 6
    finally:
        store.close()


def test_anthropic_request_names_a_claude_model_by_default(tmp_path: Path) -> None:
    store = Store(":memory:")
    try:
        store.append([Message("user", ({"type": "text", "text": "look"}, {
            "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_b64(1000, 1000)}}))])
        compiled = compile_request(store, Recipe(output_format="anthropic", budget_tokens=8000))
        body = compiled.request.body()
        assert body["model"] == "claude-sonnet-4-5" == compiled.request.model
        assert compiled.request.format == "anthropic"
        claude = price_image(1000, 1000, "claude-sonnet-4-5").tokens
        assert claude == 1334  # Anthropic's documented example
        assert compiled.tokens >= claude and compiled.tokens < claude + 50
        assert Recipe(output_format="anthropic").target_model == request_format("anthropic").default_model
        assert Recipe().target_model == "gpt-4o"
        # a model the recipe names wins over the format's default
        named = compile_request(store, Recipe(output_format="anthropic", model="claude-opus-4-1", budget_tokens=8000))
        assert named.request.body()["model"] == "claude-opus-4-1"
    finally:
        store.close()


def test_over_budget_names_tool_definitions_as_such() -> None:
    store = Store(":memory:")
    try:
        store.append([Message("user", ({"type": "text", "text": "hello"},))])
        tools = [
            {"name": f"tool_{i}", "description": "does a thing " * 20, "parameters": {"type": "object"}}
            for i in range(3)
        ]
        with pytest.raises(OverBudget) as caught:
            compile_request(store, Recipe(budget_tokens=60), tools=tools)
        message = str(caught.value)
        assert "the tool definitions" in message
        assert "pinned system messages" not in message
    finally:
        store.close()


def test_each_summarizer_request_is_gated_once() -> None:
    """On a history whose chunks all fit, the gate runs exactly once per request sent."""
    store = Store(":memory:")
    try:
        messages = []
        for index in range(40):
            messages.append(Message("user", ({"type": "text", "text": f"please fix bug {index} in src/app_{index}.py"},)))
            messages.append(Message("assistant", ({"type": "text", "text": f"fixed bug {index}; tests pass"},)))
        store.append(messages)
        summarizer = CapturingSummarizer()
        report = Compactor(store, Recipe(chunk_target_tokens=120, merge_fanout=3), summarizer).tick()
        assert report.requests == len(summarizer.requests) > 3
        assert report.gated == report.requests
    finally:
        store.close()


def test_raw_history_tokens_counts_tools_and_framing() -> None:
    store = Store(":memory:")
    try:
        store.append([Message("assistant", ({"type": "text", "text": "I start."},)), Message("user", ({"type": "text", "text": "ok"},))])
        tools = [{"name": "t", "description": "d", "parameters": {"type": "object"}}]
        for fmt in ("openai", "anthropic"):
            recipe = Recipe(budget_tokens=1000, output_format=fmt)  # type: ignore[arg-type]
            compiled = compile_request(store, recipe, tools=tools)
            assert raw_history_tokens(store, recipe, tools=tools) == compiled.tokens
    finally:
        store.close()


def test_the_request_format_registry_is_the_one_list_of_formats() -> None:
    """The recipe, the CLI's --to and the RequestFormatName type all list the registry's formats."""
    from typing import get_args

    from compaction.recipe import OUTPUT_FORMATS
    from compaction.types import RequestFormatName

    assert tuple(REQUEST_FORMATS) == OUTPUT_FORMATS == get_args(RequestFormatName)
    for name, fmt in REQUEST_FORMATS.items():
        assert fmt.name == name and fmt.default_model
        body = fmt.render(None, [("user", [{"type": "text", "text": "hi"}])], model=fmt.default_model)
        assert body["model"] == fmt.default_model and fmt.count_images(body) == 0
