"""The OpenAI Responses request format (``compaction/outputs/openai_responses.py``).

A property test compiles random agent histories to the Responses shape and reads the body's
``input`` items directly: every ``function_call`` is answered by exactly one
``function_call_output`` after it and before the next message, no output answers nothing,
call ids are unique, images only in user messages; the items read back by the Responses
parser (:func:`compaction.loop.from_responses`) carry the same calls and results.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import CapturingSummarizer, histories, payload_json, png_b64, recipes

from compaction import Compactor, Message, Recipe, Store, compile_request
from compaction.errors import OverBudget
from compaction.loop import from_responses
from compaction.outputs import REQUEST_FORMATS, request_format

FMT = request_format("openai-responses")


def check_items(body: dict[str, Any]) -> None:
    """Assert the Responses grammar on ``input``, read without the format's own check."""
    items = body["input"]
    open_calls: list[str] = []
    seen: list[str] = []
    for index, item in enumerate(items):
        kind = item["type"]
        assert kind in ("message", "function_call", "function_call_output"), kind
        if kind == "function_call":
            seen.append(item["call_id"])
            open_calls.append(item["call_id"])
            json.loads(item["arguments"])
        elif kind == "function_call_output":
            assert item["call_id"] in open_calls, f"item {index}: output of no open call"
            open_calls.remove(item["call_id"])
            assert isinstance(item["output"], str)
        else:
            assert not open_calls, f"item {index}: a message before the outputs of {open_calls}"
            assert item["role"] in ("user", "assistant", "system")
            kinds = {part["type"] for part in item["content"]}
            if item["role"] == "user":
                assert kinds <= {"input_text", "input_image"}, kinds
            else:
                assert kinds <= {"output_text", "input_text"}, kinds
    assert not open_calls, f"unanswered calls at the end: {open_calls}"
    assert len(seen) == len(set(seen))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=histories(max_turns=8), recipe=recipes(), keep=st.integers(0, 2000))
def test_every_function_call_is_answered_by_its_output(messages: list[Message], recipe: Recipe, keep: int) -> None:
    recipe = recipe.replace(output_format="openai-responses")
    store = Store(":memory:")
    try:
        store.append(messages)
        Compactor(store, recipe, CapturingSummarizer()).tick(keep_tail_tokens=keep, close_tail=True)
        try:
            compiled = compile_request(store, recipe)
        except OverBudget:
            return
        body = payload_json(compiled.request.payload)
        assert "messages" not in body and body["model"]
        check_items(body)
        assert FMT.grammar_problems(body) == []
        assert compiled.tokens <= recipe.budget_tokens
        # read back by the Responses parser: the same calls, each with its result
        back = from_responses(body["input"])
        calls = [b["id"] for m in back for b in m.content if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for m in back for b in m.content if b.get("type") == "tool_result"]
        assert calls == [i["call_id"] for i in body["input"] if i["type"] == "function_call"]
        assert sorted(calls) == sorted(results)
    finally:
        store.close()


def _call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "bash", "arguments": "{}"}


def _output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_grammar_problems_name_what_the_api_refuses() -> None:
    assert FMT.grammar_problems({"input": [_user("hi"), _call("a"), _output("a")]}) == []
    assert FMT.grammar_problems({"input": [_call("a"), _user("between"), _output("a")]}) == [
        "input 1: a user message comes before the outputs of calls ['a']",
        "input 2: function_call_output 'a' answers no open function_call",
    ]
    assert FMT.grammar_problems({"input": [_user("hi"), _call("a")]}) == [
        "the input ends before the outputs of calls ['a']"]
    assert FMT.grammar_problems({"input": [_call("a"), _output("a"), _call("a"), _output("a")]}) == [
        "input 2: call id 'a' is used twice"]
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{png_b64(2, 2)}"}
    assert FMT.grammar_problems({"input": [{"type": "message", "role": "assistant", "content": [image]}]}) == [
        "input 0: an image in a assistant message"]


def test_rendering_a_turn_with_calls_results_and_images() -> None:
    shot = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_b64(2, 2)}}
    body = FMT.render(
        "Be brief.",
        [
            ("user", [{"type": "text", "text": "look"}, shot]),
            ("assistant", [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                           {"type": "text", "text": "calling"},
                           {"type": "tool_use", "id": "c1", "name": "shot", "input": {"x": 1}}]),
            ("user", [{"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "done"}, shot]},
                      {"type": "text", "text": "next"}]),
        ],
        model="gpt-4.1",
        max_output_tokens=100,
    )
    url = f"data:image/png;base64,{png_b64(2, 2)}"
    assert body == {
        "model": "gpt-4.1",
        "max_output_tokens": 100,
        "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": url, "detail": "auto"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
            {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": '{"x":1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "[images returned by tool call c1]"},
                {"type": "input_image", "image_url": url, "detail": "auto"},
                {"type": "input_text", "text": "next"}]},
        ],
    }
    assert FMT.count_images(body) == 2 and FMT.grammar_problems(body) == []


def test_registered_under_its_name_and_tools_are_flat() -> None:
    assert REQUEST_FORMATS["openai-responses"] is FMT
    tools = FMT.render_tools([{"name": "bash", "description": "Run.", "parameters": {"type": "object"}}])
    assert tools == [{"type": "function", "name": "bash", "description": "Run.", "parameters": {"type": "object"}}]
