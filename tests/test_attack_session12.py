"""Hostile input against what session 12 changed (attack pass): each test failed before its fix.

Session 12 priced requests as they ship (a call's id or frame, tool-result messages without
a frame of their own, merged turns).  The invariant attacked here is the property tests' own:
a compiled request's reported tokens are never below the independent count of its body
(``strategies.independent_tokens``: 3 a message, every string, 3 a request).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import independent_tokens, payload_json

from compaction import Message, Recipe, Store, compile_request
from compaction.outputs import request_format
from compaction.planning import WindowPlanner


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _compiled_anthropic(messages: list[Message]) -> tuple[int, int]:
    """Return (reported tokens, independent count of the body) of ``messages`` compiled for Anthropic."""
    store = Store(":memory:")
    with store:
        store.append(messages)
        request = compile_request(store, Recipe(budget_tokens=100_000, output_format="anthropic"))
        assert request.planned_tokens == request.tokens
        return request.tokens, independent_tokens(
            payload_json(request.request.payload), request.request.model
        )


def test_an_unsigned_thinking_block_is_counted_as_the_text_it_ships_as() -> None:
    # Anthropic refuses a thinking block without a signature, so it ships as the text
    # "[earlier reasoning, not signed, sent as text] hmm": 13 o200k tokens of prefix, which a
    # constant frame of 8 under-counted (29 reported, 31 in the body; 27 and 30 alone)
    for messages in (
        [
            Message(role="user", content=[_text("a")]),
            Message(role="assistant", content=[{"type": "thinking", "thinking": "hmm"}]),
            Message(role="assistant", content=[_text("b")]),
            Message(role="user", content=[_text("c")]),
        ],
        [
            Message(role="user", content=[_text("a")]),
            Message(role="assistant", content=[{"type": "thinking", "thinking": "hmm"}]),
            Message(role="user", content=[_text("c")]),
        ],
    ):
        tokens, independent = _compiled_anthropic(messages)
        assert independent <= tokens


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    thinking=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60),
    signed=st.booleans(),
    tail=st.booleans(),
)
def test_thinking_blocks_never_count_below_the_anthropic_body(
    thinking: str, signed: bool, tail: bool
) -> None:
    block: dict[str, str] = {"type": "thinking", "thinking": thinking}
    if signed:
        block["signature"] = "c2lnbmF0dXJl"
    assistant = [block, _text("done")] if tail else [block]
    messages = [
        Message(role="user", content=[_text("go")]),
        Message(role="assistant", content=assistant),
        Message(role="user", content=[_text("next")]),
    ]
    tokens, independent = _compiled_anthropic(messages)
    assert independent <= tokens


def _call(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"path": "the"}}


def _result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "", "is_error": False}


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic"])
def test_a_renamed_tool_id_is_counted_in_the_result_that_carries_it_too(fmt: str) -> None:
    # the second call reuses toolu_0001: the gate sends it and its result as toolu_0001_2, and
    # repriced only the call's message (where the repair is reported), not the result's, so
    # the reported tokens (102) fell below the OpenAI body's independent count (104)
    messages = [
        Message(role="user", content=[_text("go")]),
        Message(role="assistant", content=[_call("toolu_0001"), _call("toolu_0002")]),
        Message(role="user", content=[_result("toolu_0001"), _result("toolu_0002")]),
        Message(role="user", content=[_text("the")]),
        Message(role="assistant", content=[_call("toolu_0001")]),
        Message(role="user", content=[_result("toolu_0001")]),
    ]
    store = Store(":memory:")
    with store:
        store.append(messages)
        request = compile_request(store, Recipe(budget_tokens=100_000, output_format=fmt))  # type: ignore[arg-type]
    assert [r.kind for r in request.request.replacements] == ["renamed_tool_id"]
    body = payload_json(request.request.payload)
    assert "toolu_0001_2" in json.dumps(body)
    assert independent_tokens(body, request.request.model) <= request.tokens
    # the gate prices the repaired messages as they read: the renamed result as recounted alone
    fmt_ = request_format(fmt)
    renamed = [_result("toolu_0001_2")]
    stored = [_result("toolu_0001")]
    assert fmt_.text_tokens(renamed, "o200k_base") > fmt_.text_tokens(stored, "o200k_base")
    # and the planner prices the rename as the gate counts it (plan == gate): the renamed call
    # and result each cost what their longer id adds
    assert request.planned_tokens == request.tokens
    with Store(":memory:") as again:
        again.append(messages)
        planner = WindowPlanner(again, Recipe(), 100_000, fmt_, request.request.model)
        assert planner.renaming_tokens(0) == 2 * (
            fmt_.text_tokens(renamed, "o200k_base") - fmt_.text_tokens(stored, "o200k_base")
        )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ids=st.lists(st.sampled_from(["a", "toolu_0001", "", "调用", "x" * 40]), min_size=1, max_size=6),
    fmt=st.sampled_from(["openai", "openai-responses", "anthropic"]),
)
def test_repeated_tool_ids_never_count_below_the_body(ids: list[str], fmt: str) -> None:
    messages = [Message(role="user", content=[_text("go")])]
    for call_id in ids:  # one round a call, ids repeating as drawn
        messages += [
            Message(role="assistant", content=[_call(call_id)]),
            Message(role="user", content=[_result(call_id)]),
        ]
    store = Store(":memory:")
    with store:
        store.append(messages)
        request = compile_request(store, Recipe(budget_tokens=100_000, output_format=fmt))  # type: ignore[arg-type]
    body = payload_json(request.request.payload)
    assert independent_tokens(body, request.request.model) <= request.tokens


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.text(max_size=30), before=st.booleans())
def test_the_cache_breakpoint_on_an_unknown_block_marks_its_stand_in(payload: str, before: bool) -> None:
    # the gate marks the newest message's last block; Anthropic ships an unknown type as loud
    # text of its JSON, which swallowed the marker: the breakpoint was lost and the text grew
    # by '"cache_control":{"type":"ephemeral"}', uncounted (33 reported, 42 in the body)
    weird = {"type": "weird_block", "payload": payload}
    content = [_text("x"), weird] if before else [weird]
    tokens, independent = _compiled_anthropic([Message(role="user", content=content)])
    assert independent <= tokens
    store = Store(":memory:")
    with store:
        store.append([Message(role="user", content=content)])
        request = compile_request(store, Recipe(budget_tokens=100_000, output_format="anthropic"))
    shipped = payload_json(request.request.payload)["messages"][-1]["content"][-1]
    assert shipped["type"] == "text" and shipped["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in shipped["text"] and "weird_block" in shipped["text"]


_INNER = st.sampled_from(
    [
        {"type": "tool_result", "tool_use_id": "c9", "content": "inner"},
        {"type": "tool_result", "tool_use_id": "c9", "content": [{"type": "text", "text": "deeper"}]},
        {"type": "thinking", "thinking": "zz"},
        {"type": "tool_use", "id": "c8", "name": "n", "input": {"a": 1}},
        {"type": "weird_block", "payload": "x y"},
        {"type": "text", "text": "plain"},
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inner=st.lists(_INNER, min_size=1, max_size=3),
    fmt=st.sampled_from(["openai", "openai-responses", "anthropic"]),
)
def test_blocks_inside_a_tool_result_are_counted_as_they_ship(inner: list[dict[str, Any]], fmt: str) -> None:
    # OpenAI ships a block in a result other than text or an image as the loud text of its
    # JSON; it was counted by its own rule (a nested result by its content, a thinking block
    # by its text), 44 reported against 74 in the body for one nested result
    messages = [
        Message(role="user", content=[_text("hi")]),
        Message(role="assistant", content=[_call("c1")]),
        Message(role="user", content=[{"type": "tool_result", "tool_use_id": "c1", "content": inner}]),
    ]
    store = Store(":memory:")
    with store:
        store.append(messages)
        request = compile_request(store, Recipe(budget_tokens=100_000, output_format=fmt))  # type: ignore[arg-type]
    assert request.planned_tokens == request.tokens
    assert independent_tokens(payload_json(request.request.payload), request.request.model) <= request.tokens
