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
from strategies import independent_tokens, payload_json

from compaction import Message, Recipe, Store, compile_request
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
    assert shipped_blocks([_text(" "), _text("a")]) == [_text(" "), _text("a")]
    thinking = {"type": "thinking", "thinking": "x"}
    dropped = shipped_blocks([thinking, _text(" ")], frozenset({"thinking"}))
    assert dropped != [EMPTY_STAND_IN] and len(dropped) == 1  # says reasoning was left out
    assert shipped_blocks([thinking]) == [thinking]
