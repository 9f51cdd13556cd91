"""Blank texts in tool results and a final assistant turn ending in whitespace (Anthropic refuses both).

Anthropic answers 400 to a text block of whitespace only, inside a ``tool_result`` as
anywhere ("text content blocks must contain non-whitespace text"), to an error result with
nothing in it ("content cannot be empty if is_error is true"), and to a request whose final
assistant turn (a prefill) ends in whitespace ("final assistant content cannot end with
trailing whitespace").  What ships instead:

* a result's blank texts are left out; a result left with nothing ships without ``content``
  (the SDK's ``ToolResultBlockParam`` does not require it), an error one with
  :data:`~compaction.tokens.counting.EMPTY_ERROR_RESULT`; counted as it ships, in every format
  (OpenAI Chat and Responses render it as an empty text, which they take);
* the last text of a final assistant turn ships right-stripped in the Anthropic body only,
  never in the store; the planner and the gate count it as it ships.

The checks of the shipped body here are written apart from the engine's grammar.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from request_checks import assert_coverage_pinning_system, compact_checking_summarizer_grammar
from strategies import (
    BLANKS,
    TRAILING,
    blank_histories,
    check_provider_grammar,
    independent_tokens,
    payload_json,
    recipes,
    store_snapshot,
)
from test_count_ships import _slack

from compaction import Message, OverBudget, Recipe, Store, compile_request
from compaction.blocks import unknown_block_text
from compaction.outputs import request_format
from compaction.tokens.counting import EMPTY_ERROR_RESULT, count_text, shipped_blocks
from compaction.types import RequestFormatName

ENCODING = "o200k_base"
ANTHROPIC = request_format("anthropic")


def _blank(text: Any) -> bool:
    return isinstance(text, str) and not text.strip()


def _clean_result(result: dict[str, Any]) -> dict[str, Any]:
    """What a stored ``tool_result`` must ship as: blank texts out; left with nothing, no content."""
    content = result.get("content")
    kept = content
    if isinstance(content, list):
        kept = [b for b in content if not (b.get("type") == "text" and _blank(b.get("text")))]
    if content is None or _blank(kept) or kept == []:
        out = {k: v for k, v in result.items() if k != "content"}
        if result.get("is_error"):
            out["content"] = EMPTY_ERROR_RESULT
        return out
    return {**result, "content": kept}


def _cleaned(messages: list[Message], *, strip_final: bool) -> list[Message]:
    """The history as it must ship: each result cleaned, blank texts beside other blocks out,
    and (``strip_final``) the last text of a final assistant message right-stripped."""
    out: list[Message] = []
    for message in messages:
        blocks = [_clean_result(b) if b.get("type") == "tool_result" else b for b in message.content]
        kept = [b for b in blocks if not (b.get("type") == "text" and _blank(b.get("text")))]
        out.append(Message(message.role, tuple(kept or blocks)))
    if strip_final and out and out[-1].role == "assistant":
        blocks = list(out[-1].content)
        texts = [i for i, b in enumerate(blocks) if b.get("type") == "text" and not _blank(b.get("text"))]
        if texts:
            blocks[texts[-1]] = {**blocks[texts[-1]], "text": blocks[texts[-1]]["text"].rstrip()}
        out[-1] = Message("assistant", tuple(blocks))
    return out


def assert_anthropic_takes(body: dict[str, Any]) -> None:
    """Assert the blank-text rules on an Anthropic body, read apart from the engine's grammar."""
    messages = body["messages"]
    for index, message in enumerate(messages):
        for block in message["content"]:
            assert not (block.get("type") == "text" and _blank(block.get("text"))), (
                f"message {index}: {block}"
            )
            if block.get("type") != "tool_result":
                continue
            if "content" not in block:
                assert not block.get("is_error"), f"message {index}: an error result without content"
                continue
            content = block["content"]
            assert content, f"message {index}: a result of empty content {content!r}"
            if isinstance(content, str):
                assert content.strip(), f"message {index}: a result of whitespace {content!r}"
            else:
                blanks = [b for b in content if b.get("type") == "text" and _blank(b.get("text"))]
                assert not blanks, f"message {index}: blank texts in a result: {blanks}"
                # the SDK's ToolResultBlockParam content union
                kinds = {b.get("type") for b in content}
                assert kinds <= {"text", "image", "search_result", "document", "tool_reference"}, kinds
    if messages and messages[-1]["role"] == "assistant":
        texts = [b["text"] for b in messages[-1]["content"] if b.get("type") == "text"]
        assert not texts or texts[-1] == texts[-1].rstrip(), (
            f"the final assistant text ends in {texts[-1][-3:]!r}"
        )


def _compiled(messages: list[Message], fmt: str) -> tuple[int, bytes, str]:
    store = Store(":memory:")
    with store:
        store.append(messages)
        before = store_snapshot(store)
        recipe = Recipe(
            budget_tokens=400_000, output_format=cast(RequestFormatName, fmt), image_strip_depth_tokens=None
        )
        request = compile_request(store, recipe)
        assert store_snapshot(store) == before  # the store keeps its blanks and its whitespace
        assert [m.content for m in store.messages()] == [m.content for m in messages]
    assert request.planned_tokens == request.tokens  # the planner prices what the gate counts
    return request.tokens, request.request.payload, request.request.model


def _round(*results: dict[str, Any]) -> list[Message]:
    calls = tuple(
        {"type": "tool_use", "id": r["tool_use_id"], "name": "bash", "input": {"cmd": "ls"}} for r in results
    )
    return [
        Message("user", ({"type": "text", "text": "list the files"},)),
        Message("assistant", calls),
        Message("user", tuple(results)),
    ]


# -- what ships, case by case -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "shipped"),
    [
        ({"content": [{"type": "text", "text": " "}]}, {}),
        ({"content": [{"type": "text", "text": ""}, {"type": "text", "text": "\n"}]}, {}),
        ({"content": "  \n"}, {}),
        ({"content": ""}, {}),
        ({"content": []}, {}),
        ({}, {}),
        ({"content": "", "is_error": True}, {"content": EMPTY_ERROR_RESULT, "is_error": True}),
        (
            {"content": [{"type": "text", "text": " "}], "is_error": True},
            {"content": EMPTY_ERROR_RESULT, "is_error": True},
        ),
        ({"is_error": True}, {"content": EMPTY_ERROR_RESULT, "is_error": True}),
        (
            {
                "content": [{"type": "text", "text": "\t"}, {"type": "text", "text": "3 files"}],
                "is_error": False,
            },
            {"content": [{"type": "text", "text": "3 files"}], "is_error": False},
        ),
    ],
)
def test_a_blank_tool_result_ships_as_anthropic_takes_it(
    stored: dict[str, Any], shipped: dict[str, Any]
) -> None:
    result = {"type": "tool_result", "tool_use_id": "toolu_01", **stored}
    tokens, payload, _model = _compiled(_round(result), "anthropic")
    body = payload_json(payload)
    (sent,) = body["messages"][2]["content"]
    assert {k: v for k, v in sent.items() if k != "cache_control"} == {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        **shipped,
    }
    assert ANTHROPIC.grammar_problems(body) == []
    assert_anthropic_takes(body)
    # counted as it ships: the same as the result stored in its shipped form
    clean_tokens, clean_payload, _ = _compiled(
        _round({"type": "tool_result", "tool_use_id": "toolu_01", **shipped}), "anthropic"
    )
    assert (tokens, payload) == (clean_tokens, clean_payload)


def test_openai_chat_and_responses_ship_an_empty_result_as_empty_text_and_an_error_loudly() -> None:
    results = (
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": " "}]},
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": "", "is_error": True},
    )
    _tokens, chat, _ = _compiled(_round(*results), "openai")
    tool_messages = [m for m in payload_json(chat)["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["", f"[tool error] {EMPTY_ERROR_RESULT}"]
    _tokens, responses, _ = _compiled(_round(*results), "openai-responses")
    outputs = [i["output"] for i in payload_json(responses)["input"] if i["type"] == "function_call_output"]
    assert outputs == ["", f"[tool error] {EMPTY_ERROR_RESULT}"]


def test_a_final_assistant_turn_ships_without_trailing_whitespace_and_the_store_keeps_it() -> None:
    history = [
        Message("user", ({"type": "text", "text": "say done"},)),
        Message("assistant", ({"type": "text", "text": "done. \n"},)),
    ]
    tokens, payload, _ = _compiled(history, "anthropic")  # the store is checked unchanged there
    body = payload_json(payload)
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "done.", "cache_control": {"type": "ephemeral"}}
    ]
    assert ANTHROPIC.grammar_problems(body) == []
    stripped_tokens, stripped, _ = _compiled(
        [history[0], Message("assistant", ({"type": "text", "text": "done."},))], "anthropic"
    )
    assert payload == stripped
    # counted as shipped, not as stored (" \n" after "done." is 1 token more)
    assert tokens == stripped_tokens
    assert count_text("done. \n", ENCODING) - count_text("done.", ENCODING) == 1
    # OpenAI takes trailing whitespace: its body keeps the text as stored
    _tokens, chat, _ = _compiled(history, "openai")
    assert payload_json(chat)["messages"][-1]["content"] == "done. \n"


def test_blocks_anthropic_does_not_take_in_a_result_ship_as_their_counted_text() -> None:
    nested = {
        "type": "tool_result",
        "tool_use_id": "toolu_00",
        "content": [{"type": "text", "text": "deeper"}],
    }
    thinking = {"type": "thinking", "thinking": "zz", "signature": "sig"}
    weird = {"type": "weird_block", "payload": "x y"}
    search = {
        "type": "search_result",
        "source": "https://example.com/a",
        "title": "A",
        "content": [{"type": "text", "text": "found"}],
    }
    result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": [nested, thinking, weird, search]}
    store = Store(":memory:")
    with store:
        store.append(_round(result))
        request = compile_request(store, Recipe(budget_tokens=10_000, output_format="anthropic"))
    body = payload_json(request.request.payload)
    (sent,) = body["messages"][2]["content"]
    assert sent["content"] == [
        {"type": "text", "text": unknown_block_text(nested)},
        {"type": "text", "text": unknown_block_text(thinking)},
        {"type": "text", "text": unknown_block_text(weird)},
        search,
    ]
    assert ANTHROPIC.grammar_problems(body) == []
    assert_anthropic_takes(body)
    assert request.planned_tokens == request.tokens
    assert independent_tokens(body, request.request.model) <= request.tokens
    bad = _body({"content": [nested]})
    (problem,) = ANTHROPIC.grammar_problems(bad)
    assert "block types Anthropic does not take in one: tool_result" in problem


# -- the grammar refuses the bad forms ----------------------------------------------------------


def _body(result: dict[str, Any], final: str | None = None) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", **result}]},
    ]
    if final is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": final}]})
    return {"messages": messages}


@settings(max_examples=60, deadline=None)
@given(blank=st.sampled_from(BLANKS), trailing=st.sampled_from(TRAILING), is_error=st.booleans())
def test_the_grammar_refuses_blank_result_content_and_a_final_whitespace(
    blank: str, trailing: str, is_error: bool
) -> None:
    refused = {
        "an empty or whitespace string": {"content": blank, "is_error": is_error},
        "an empty list": {"content": [], "is_error": is_error},
        "an empty or whitespace text block": {
            "content": [{"type": "text", "text": "ok"}, {"type": "text", "text": blank}],
            "is_error": is_error,
        },
    }
    for what, result in refused.items():
        (problem,) = ANTHROPIC.grammar_problems(_body(result))
        assert what in problem and "'toolu_01'" in problem
        with pytest.raises(AssertionError):
            assert_anthropic_takes(_body(result))
    (problem,) = ANTHROPIC.grammar_problems(_body({"is_error": True}))
    assert "an error tool_result without content" in problem
    assert ANTHROPIC.grammar_problems(_body({"is_error": False})) == []  # no content: taken
    assert ANTHROPIC.grammar_problems(_body({"content": "ok", "is_error": is_error})) == []
    (problem,) = ANTHROPIC.grammar_problems(_body({"content": "ok"}, final="done" + trailing))
    assert "the final assistant turn ends with whitespace" in problem
    assert ANTHROPIC.grammar_problems(_body({"content": "ok"}, final=trailing + "done")) == []


# -- properties over generated histories -----------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=blank_histories(max_turns=6))
def test_what_ships_of_a_message_holds_no_blank_and_ships_as_itself(messages: list[Message]) -> None:
    """``shipped_blocks`` leaves no blank text (top level or in a result), no empty result
    content and no error result without content; applied again it changes nothing, and the
    stored blocks are left as they were."""
    for message in messages:
        stored = copy.deepcopy(message.content)
        shipped = shipped_blocks(message.content)
        assert message.content == stored
        assert shipped_blocks(shipped) == shipped
        assert_anthropic_takes({"messages": [{"role": "user", "content": shipped}]})
        results = [b for b in message.content if b.get("type") == "tool_result"]
        assert [b["tool_use_id"] for b in shipped if b.get("type") == "tool_result"] == [
            b["tool_use_id"] for b in results
        ]


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    messages=blank_histories(max_turns=6), fmt=st.sampled_from(["anthropic", "openai", "openai-responses"])
)
def test_blanks_ship_and_count_as_their_cleaned_history(messages: list[Message], fmt: str) -> None:
    """A history with blanks compiles to the body of its cleaned form, counted the same (the
    final whitespace Anthropic strips is not counted); never below the body's independent count."""
    tokens, payload, model = _compiled(messages, fmt)
    strip = fmt == "anthropic"
    clean = _cleaned(messages, strip_final=strip)
    clean_tokens, clean_payload, _ = _compiled(clean, fmt)
    assert payload == clean_payload
    assert tokens == clean_tokens
    body = payload_json(payload)
    check_provider_grammar(body, fmt)
    if fmt == "anthropic":
        assert_anthropic_takes(body)
    independent = independent_tokens(body, model)
    assert independent <= tokens <= independent * 1.01 + _slack(clean, fmt)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(messages=blank_histories(max_turns=8), recipe=recipes(), keep=st.integers(0, 1500))
def test_blank_histories_compress_and_compile_to_bodies_anthropic_takes(
    messages: list[Message], recipe: Recipe, keep: int
) -> None:
    """Summarized or not, the compiled request keeps the grammar and coverage, within its budget."""
    recipe = recipe.replace(output_format="anthropic")
    store = Store(":memory:")
    with store:
        store.append(messages)
        compact_checking_summarizer_grammar(store, recipe, keep)
        try:
            compiled = compile_request(store, recipe)
        except OverBudget:
            return
        assert_coverage_pinning_system(store, compiled)
        body = payload_json(compiled.request.payload)
        check_provider_grammar(body, "anthropic")
        assert_anthropic_takes(body)
        assert recipe.budget_tokens is not None and compiled.tokens <= recipe.budget_tokens
        assert independent_tokens(body, compiled.request.model) <= compiled.tokens
