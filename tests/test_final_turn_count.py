"""A final assistant turn is counted as Anthropic ships it, by the planner and the gate alike.

Anthropic refuses a final assistant turn whose last text ends in whitespace or that holds a
thinking block, so the renderer right-strips that text and sends signed thinking as text
(``anthropic_messages.final_assistant_content``).  A store caches each message's count as
stored; both the planner and the gate now recount the request's last message from
``wire.final_message_blocks``.  Checked here on generated last messages: plan == gate, never
below an independent count of the body, and trailing whitespace stored after the last text
adds no token.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import independent_tokens, payload_json

from compaction import Message, Recipe, Store, compile_request
from compaction.compile import CompiledRequest
from compaction.outputs import request_format

_WORDS = st.text(st.sampled_from("abc xyz.\u00e9\u4e2d"), min_size=1, max_size=20).filter(str.strip)
_WHITESPACE = st.text(st.sampled_from(" \n\t\u3000"), max_size=30)

_BLOCKS = st.one_of(
    st.builds(lambda text, tail: {"type": "text", "text": text + tail}, _WORDS, _WHITESPACE),
    st.builds(lambda text, tail: {"type": "thinking", "thinking": text + tail}, _WORDS, _WHITESPACE),
    st.builds(
        lambda text, tail: {"type": "thinking", "thinking": text + tail, "signature": "c2ln"},
        _WORDS,
        _WHITESPACE,
    ),
    st.builds(lambda text: {"type": "custom_note", "note": text}, _WORDS),
)


def _compiled(last: list[list[dict[str, Any]]]) -> CompiledRequest:
    messages = [Message("user", [{"type": "text", "text": "go"}])]
    messages += [Message("assistant", blocks) for blocks in last]
    with Store(":memory:") as store:
        store.append(messages)
        return compile_request(store, Recipe(budget_tokens=100_000, output_format="anthropic"))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(last=st.lists(st.lists(_BLOCKS, min_size=1, max_size=3), min_size=1, max_size=2))
def test_a_final_assistant_turn_is_planned_as_the_gate_counts_it(last: list[list[dict[str, Any]]]) -> None:
    compiled = _compiled(last)
    body = payload_json(compiled.request.payload)
    assert not request_format("anthropic").grammar_problems(body)
    assert compiled.planned_tokens == compiled.tokens
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(_BLOCKS, max_size=2),
    text=_WORDS,
    tail=_WHITESPACE.filter(bool),
)
def test_whitespace_after_the_last_text_adds_no_token(
    before: list[dict[str, Any]], text: str, tail: str
) -> None:
    # the same request whether the store holds the text with its trailing whitespace or without
    stored = _compiled([[*before, {"type": "text", "text": text + tail}]])
    clean = _compiled([[*before, {"type": "text", "text": text.rstrip()}]])
    assert stored.request.payload == clean.request.payload
    assert stored.tokens == clean.tokens == stored.planned_tokens
