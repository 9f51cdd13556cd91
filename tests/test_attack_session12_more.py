"""Hostile input that predates session 12: each test failed before its fix.

Each compiles a stored history in every request format and checks what leaves the engine:
the body passes the format's grammar (the gate raises otherwise), the planner's price equals
the gate's count, and the reported tokens are never below the independent count of the body
(``strategies.independent_tokens``: 3 a message, every string, 3 a request).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import independent_tokens, payload_json, png_b64

from compaction import Message, Recipe, Store, compile_request
from compaction.blocks import DATA_URI_RE, replace_data_uris, unknown_block_text
from compaction.tokens.counting import EMPTY_STAND_IN, shipped_blocks

FORMATS = ("openai", "openai-responses", "anthropic")


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _compile(messages: list[Message], fmt: str) -> tuple[dict[str, Any], int, int]:
    """Return (body, reported tokens, independent count of the body) of ``messages`` compiled for ``fmt``."""
    store = Store(":memory:")
    with store:
        store.append(messages)
        request = compile_request(store, Recipe(budget_tokens=100_000, output_format=fmt))
        assert request.planned_tokens == request.tokens
        body = payload_json(request.request.payload)
        return body, request.tokens, independent_tokens(body, request.request.model)


#: The content of a message with nothing a provider takes: no blocks, an empty text, whitespace.
_NOTHING = st.one_of(
    st.just([]),
    st.lists(st.sampled_from(["", " ", "\n", " \t\n ", "\u3000"]).map(_text), min_size=1, max_size=3),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=_NOTHING, role=st.sampled_from(["assistant", "user"]), fmt=st.sampled_from(FORMATS))
def test_a_stored_message_of_nothing_ships_as_its_counted_stand_in(
    content: list[dict[str, str]], role: str, fmt: str
) -> None:
    # before: an assistant message of [] (or one empty text) made every OpenAI Chat compile
    # fail ("an assistant message with neither content nor tool calls"), [] every Anthropic
    # one too ("an empty assistant turn"); whitespace shipped as a text block Anthropic refuses
    messages = [
        Message(role="user", content=[_text("hi")]),
        Message(role="assistant", content=[_text("hello")]),
        Message(role=role, content=content),
        Message(role="user" if role == "assistant" else "assistant", content=[_text("yo")]),
        Message(role="user", content=[_text("go on")]),
    ]
    body, tokens, independent = _compile(messages, fmt)
    assert EMPTY_STAND_IN["text"] in payload_text(body)
    assert independent <= tokens


def payload_text(body: dict[str, Any]) -> str:
    """Return every string of a body joined (for looking a text up in it)."""
    out: list[str] = []
    stack: list[Any] = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return "\n".join(out)


def test_only_a_message_of_nothing_becomes_the_stand_in() -> None:
    assert shipped_blocks([]) == [EMPTY_STAND_IN]
    assert shipped_blocks([_text(" "), _text("")]) == [EMPTY_STAND_IN]
    assert shipped_blocks([_text(" "), _text("a"), _text("\n")]) == [_text("a")]
    thinking = {"type": "thinking", "thinking": "x"}
    dropped = shipped_blocks([thinking, _text(" ")], frozenset({"thinking"}))
    assert dropped != [EMPTY_STAND_IN] and len(dropped) == 1  # says reasoning was left out
    assert shipped_blocks([thinking]) == [thinking]


def _uri(data: str) -> str:
    return "data:image/png;base64," + data


@st.composite
def _blocks_holding_a_data_uri(draw: st.DrawFn) -> list[Message]:
    """A history where a block of a type the gate does not walk holds a ``data:`` image URI."""
    data = draw(st.sampled_from([png_b64(8, 8), png_b64(2, 3), "iVBORw0KGgo"]))  # the last is cut short
    key = draw(st.sampled_from(["payload", "url", "data"]))
    where = draw(st.sampled_from(["user", "assistant", "nested", "anthropic's own"]))
    unknown = {"type": draw(st.sampled_from(["weird_block", "web_search_call"])), key: _uri(data)}
    ask = Message(role="user", content=[_text("look")])
    call = {"type": "tool_use", "id": "c1", "name": "read", "input": {}}
    if where == "user":
        return [Message(role="user", content=[_text("see"), unknown])]
    if where == "assistant":
        return [
            ask,
            Message(role="assistant", content=[unknown]),
            Message(role="user", content=[_text("ok")]),
        ]
    if where == "nested":
        result = {"type": "tool_result", "tool_use_id": "c1", "content": [_text("a"), unknown]}
        return [ask, Message(role="assistant", content=[call]), Message(role="user", content=[result])]
    server = {"type": "server_tool_use", "id": "s1", "name": "web_fetch", "input": {"url": _uri(data)}}
    fetched = {"type": "web_fetch_tool_result", "tool_use_id": "s1", "content": {key: _uri(data)}}
    return [
        ask,
        Message(role="assistant", content=[server, fetched]),
        Message(role="user", content=[_text("ok")]),
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_blocks_holding_a_data_uri(), fmt=st.sampled_from(FORMATS))
def test_a_data_uri_in_a_block_of_unknown_type_ships_as_its_counted_stand_in(
    messages: list[Message], fmt: str
) -> None:
    # before: "the body carries 1 image inputs, the gate kept 0" in every format: the block's
    # JSON stand-in (or Anthropic's verbatim block) carried the URI, which the gate never decided
    body, tokens, independent = _compile(messages, fmt)
    text = payload_text(body)
    assert ";base64," not in text
    assert "base64 characters not shown: it is inside a block this format cannot carry" in text
    assert independent <= tokens


def test_a_data_uri_stand_in_names_the_image_and_is_no_image_input() -> None:
    data = png_b64(8, 8)
    text = replace_data_uris(f"a {_uri(data)} b")
    assert text == (
        f"a [data:image/png URI of {len(data):,} base64 characters not shown: it is inside a block this"
        " format cannot carry; the block is kept in the store] b"
    )
    assert not DATA_URI_RE.search(text)
    assert ";base64," not in unknown_block_text({"type": "x", "v": [_uri(data), _uri(data)]})


@st.composite
def _turns_with_texts_around_calls(draw: st.DrawFn) -> list[Message]:
    """An assistant turn whose texts and calls interleave in any order, answered by one user turn."""
    calls = draw(st.integers(min_value=1, max_value=3))
    texts = draw(st.integers(min_value=1, max_value=3))
    kinds = draw(st.permutations(["call"] * calls + ["text"] * texts))
    content: list[dict[str, Any]] = []
    for kind in kinds:
        if kind == "call":
            number = sum(1 for b in content if b["type"] == "tool_use") + 1
            content.append({"type": "tool_use", "id": f"c{number}", "name": "bash", "input": {"n": number}})
        else:
            content.append(_text(f"said {len(content)}"))
    results = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": "ok"}
        for b in content
        if b["type"] == "tool_use"
    ]
    return [
        Message(role="user", content=[_text("hi")]),
        Message(role="assistant", content=content),
        Message(role="user", content=[*results, _text("next")]),
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_turns_with_texts_around_calls())
def test_a_responses_turn_ships_its_texts_before_its_calls(messages: list[Message]) -> None:
    # before: [text, tool_use, text] rendered a message item between the call and its output,
    # which broke the Responses grammar ("a assistant message comes before the outputs of calls")
    body, tokens, independent = _compile(messages, "openai-responses")
    items = body["input"]
    turn = messages[1].content
    said = [b["text"] for b in turn if b["type"] == "text"]
    calls = [b["id"] for b in turn if b["type"] == "tool_use"]
    assert items[1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "\n\n".join(said)}],
    }
    assert [item["call_id"] for item in items[2 : 2 + len(calls)]] == calls
    assert [item["type"] for item in items[2 + len(calls) : 2 + 2 * len(calls)]] == [
        "function_call_output"
    ] * len(calls)
    assert independent <= tokens


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blank=st.sampled_from(["", " ", "\n\n", "\u3000"]),
    first=st.booleans(),
    role=st.sampled_from(["assistant", "user"]),
    fmt=st.sampled_from(FORMATS),
)
def test_a_blank_text_beside_other_blocks_is_not_shipped(
    blank: str, first: bool, role: str, fmt: str
) -> None:
    # before: Anthropic got {"type": "text", "text": " "} beside the message's other blocks,
    # which it refuses ("text content blocks must contain non-whitespace text")
    said = [_text(blank), _text("words")] if first else [_text("words"), _text(blank)]
    if role == "assistant":
        call = {"type": "tool_use", "id": "c1", "name": "bash", "input": {}}
        turn = Message(role="assistant", content=[*said, call])
        after = [
            Message(role="user", content=[{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}])
        ]
        messages = [Message(role="user", content=[_text("hi")]), turn, *after]
    else:
        messages = [Message(role="user", content=said)]
    body, tokens, independent = _compile(messages, fmt)
    if fmt == "anthropic":
        texts = [b["text"] for m in body["messages"] for b in m["content"] if b["type"] == "text"]
        assert texts == (["hi", "words"] if role == "assistant" else ["words"])
    assert independent <= tokens
