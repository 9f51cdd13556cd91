"""Every request is one the provider accepts (DESIGN.md invariant 9).

The gate verifies each rendered body against the request format's grammar and raises
instead of shipping; these tests check the same grammar independently
(:func:`strategies.check_provider_grammar`) on the reproductions issue #10 found and on
fuzzed histories (reused tool ids, results split across messages, images in tool results
and in assistant text), compiled in both formats and through every summarizer request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from request_checks import compact_checking_summarizer_grammar
from strategies import CapturingSummarizer, check_provider_grammar, histories, payload_json, png_b64, recipes

from compaction import (
    Compactor,
    InvariantViolation,
    Message,
    OverBudget,
    Recipe,
    Store,
    compile_request,
    run_pipeline,
)
from compaction.outputs import REQUEST_FORMATS

EXAMPLES = int(os.environ.get("GRAMMAR_EXAMPLES", "1000"))
FORMATS = sorted(REQUEST_FORMATS)


def _text(role: str, text: str) -> Message:
    return Message(role, ({"type": "text", "text": text},))


def _image(w: int = 8, h: int = 8, seed: int = 0) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_b64(w, h, seed)}}


@pytest.mark.parametrize("fmt", FORMATS)
def test_data_uri_in_assistant_text_is_never_an_image(tmp_path: Path, fmt: str) -> None:
    """Repro: "icon?" then an assistant whose text is a 1x1 PNG data URI; run at --budget 9000."""
    transcript = tmp_path / "au.jsonl"
    lines = [
        {"role": "user", "content": "icon?"},
        {"role": "assistant", "content": f"data:image/png;base64,{png_b64(1, 1)}"},
    ]
    transcript.write_text("\n".join(json.dumps(line) for line in lines), "utf-8")
    result = run_pipeline(transcript, Recipe(budget_tokens=9000, output_format=fmt))  # type: ignore[arg-type]
    body = payload_json(result.compiled.request.payload)
    check_provider_grammar(body, fmt)
    assert result.compiled.request.images_shown == 0
    (replaced,) = result.compiled.request.replacements
    assert "assistant turn" in replaced.reason
    assert result.compiled.tokens == result.tokens_before
    # and the L1 request that summarizes it
    store = Store(":memory:")
    try:
        store.append([Message(m["role"], ({"type": "text", "text": m["content"]},)) for m in lines] + [_text("user", "next")])
        summarizer = CapturingSummarizer()
        Compactor(store, Recipe(chunk_min_messages=1), summarizer).tick(close_tail=True)
        assert summarizer.requests
        for _kind, payload in summarizer.requests:
            check_provider_grammar(payload_json(payload), "openai")
    finally:
        store.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_parallel_results_split_across_messages_stay_together(fmt: str) -> None:
    """Repro: calls a and b; result a (with an image) in one message, result b in the next."""
    store = Store(":memory:")
    try:
        store.append([
            _text("user", "look at both pages"),
            Message("assistant", (
                {"type": "tool_use", "id": "a", "name": "screenshot", "input": {"page": 1}},
                {"type": "tool_use", "id": "b", "name": "screenshot", "input": {"page": 2}},
            )),
            Message("user", ({"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "page 1"}, _image()]},)),
            Message("user", ({"type": "tool_result", "tool_use_id": "b", "content": "page 2 failed to load"},)),
            _text("assistant", "Page 1 shows a login form; page 2 did not load."),
        ])
        compiled = compile_request(store, Recipe(budget_tokens=9000, output_format=fmt))  # type: ignore[arg-type]
        body = compiled.request.body()
        check_provider_grammar(body, fmt)
        if fmt == "openai":
            assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "tool", "user", "assistant"]
        assert compiled.request.images_shown == 1
        assert [r for r in compiled.request.replacements if r.kind.startswith("orphan")] == []
    finally:
        store.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_ids_reused_through_the_api_are_sent_unique(fmt: str) -> None:
    """Repro: go, call x, result a, call x, result b (an agent loop that reuses its ids)."""
    store = Store(":memory:")
    try:
        store.append([
            _text("user", "go"),
            Message("assistant", ({"type": "tool_use", "id": "x", "name": "run", "input": {"n": 1}},)),
            Message("user", ({"type": "tool_result", "tool_use_id": "x", "content": "a"},)),
            Message("assistant", ({"type": "tool_use", "id": "x", "name": "run", "input": {"n": 2}},)),
            Message("user", ({"type": "tool_result", "tool_use_id": "x", "content": "b"},)),
        ])
        compiled = compile_request(store, Recipe(budget_tokens=9000, output_format=fmt))  # type: ignore[arg-type]
        body = compiled.request.body()
        check_provider_grammar(body, fmt)
        kinds = [r.kind for r in compiled.request.replacements]
        assert kinds == ["renamed_tool_id"]
        text = json.dumps(body)
        assert '"x_2"' in text and text.count('"x_2"') == 2  # the second call and its result
        assert store.messages()[3].content[0]["id"] == "x"  # the store keeps the original
    finally:
        store.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_images_in_a_system_message_become_placeholders(fmt: str) -> None:
    """A pinned system message carries text only: its image block and data URI are replaced loudly."""
    store = Store(":memory:")
    try:
        store.append([
            Message("system", ({"type": "text", "text": f"logo data:image/png;base64,{png_b64(4, 4)}"}, _image(4, 4, 1))),
            _text("user", "hi"),
        ])
        compiled = compile_request(store, Recipe(budget_tokens=5000, output_format=fmt))  # type: ignore[arg-type]
        body = compiled.request.body()
        check_provider_grammar(body, fmt)
        assert compiled.request.images_shown == 0
        system = {"openai": lambda: body["messages"][0]["content"], "anthropic": lambda: body["system"][0]["text"],
                  "openai-responses": lambda: body["instructions"]}[fmt]()
        assert system.count("[image not shown: image/png, 4x4 px") == 2 and "base64," not in system
    finally:
        store.close()


def test_an_unsigned_thinking_block_ships_to_anthropic_as_text() -> None:
    """Anthropic refuses a thinking block without a valid signature (pi writes signature "")."""
    store = Store(":memory:")
    try:
        store.append([
            _text("user", "plan it"),
            Message("assistant", ({"type": "thinking", "thinking": "first the parser", "signature": ""},
                                  {"type": "text", "text": "I will fix the parser."})),
            _text("user", "go"),
        ])
        compiled = compile_request(store, Recipe(budget_tokens=4000, output_format="anthropic"))
        body = compiled.request.body()
        check_provider_grammar(body, "anthropic")
        (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]
        assert assistant["content"][0]["type"] == "text"
        assert assistant["content"][0]["text"].endswith("first the parser")
        assert compiled.planned_tokens == compiled.tokens
    finally:
        store.close()


def test_the_gate_refuses_a_body_that_breaks_the_grammar() -> None:
    """A renderer bug can never ship: the gate checks the rendered body itself."""
    fmt = REQUEST_FORMATS["openai"]
    bad = {"messages": [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "between"},
        {"role": "tool", "tool_call_id": "a", "content": "late"},
    ]}
    assert fmt.grammar_problems(bad)
    anthropic = REQUEST_FORMATS["anthropic"]
    assert anthropic.grammar_problems({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [_image()]},
    ]})
    with pytest.raises(AssertionError):
        check_provider_grammar(bad, "openai")
    assert issubclass(InvariantViolation, AssertionError)


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=histories(max_turns=10), recipe=recipes(), fmt=st.sampled_from(FORMATS), keep=st.integers(0, 2000))
def test_every_request_keeps_the_provider_grammar(messages: list[Message], recipe: Recipe, fmt: str, keep: int) -> None:
    """Fuzz: every compiled request and every summarizer request is one the provider accepts."""
    recipe = recipe.replace(output_format=fmt)
    store = Store(":memory:")
    try:
        store.append(messages)
        compact_checking_summarizer_grammar(store, recipe, keep)
        try:
            compiled = compile_request(store, recipe)
        except OverBudget as err:
            event(f"over budget ({err.stage})")
            return
        event(f"{fmt}: renamed ids {any(r.kind == 'renamed_tool_id' for r in compiled.request.replacements)}")
        check_provider_grammar(payload_json(compiled.request.payload), fmt)
    finally:
        store.close()
