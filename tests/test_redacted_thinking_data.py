"""A ``redacted_thinking`` block whose ``data`` is not a string ships as the loud line, counted.

The Anthropic Messages API requires ``data``, a string of the provider's ciphertext.  A block
imported with ``data`` missing, ``None``, a number, a list or an object shipped as stored in an
earlier assistant turn, which the API refuses; it now ships as the final turn's stand-in
(``counting.REDACTED_THINKING``) in every turn.  Its count was already the larger of its data's
``str()`` tokens and the stand-in's, so plan == gate holds and the report is never below an
independent count of the body (``strategies.independent_tokens``).  A string ``data`` still
ships verbatim outside the final turn.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import check_provider_grammar, independent_tokens, payload_json

from compaction import Message, Recipe, Store, compile_request
from compaction.outputs import request_format
from compaction.tokens.counting import REDACTED_THINKING

_MISSING = object()

#: Data of every JSON type but a string, and none at all.
_NOT_A_STRING = st.one_of(
    st.just(_MISSING),
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.text(max_size=20), max_size=5),
    st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=4),
    st.just("Q" * 3000).map(lambda s: [s]),  # a large list: counted above the stand-in
)


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _block(data: Any) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "redacted_thinking"}
    if data is not _MISSING:
        block["data"] = data
    return block


def _shipped(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        b for m in body["messages"] for b in m["content"] if isinstance(b, dict) and b.get("type") == kind
    ]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=_NOT_A_STRING,
    after=st.sampled_from(["", "answer"]),
    final=st.booleans(),
)
def test_redacted_thinking_without_string_data_ships_as_the_stand_in(
    data: Any, after: str, final: bool
) -> None:
    turn = [_block(data), _text(after)] if after else [_block(data)]
    messages = [Message("user", [_text("q")]), Message("assistant", turn)]
    if not final:
        messages.append(Message("user", [_text("next")]))
    with Store(":memory:") as store:
        store.append(messages)
        compiled = compile_request(store, Recipe(budget_tokens=100_000, output_format="anthropic"))
    body = payload_json(compiled.request.payload)
    assert _shipped(body, "redacted_thinking") == []
    assistant = [m for m in body["messages"] if m["role"] == "assistant"]
    assert assistant[0]["content"][0] == {"type": "text", "text": REDACTED_THINKING}
    assert body["messages"][-1]["role"] == ("assistant" if final else "user")
    assert not request_format("anthropic").grammar_problems(body)
    check_provider_grammar(body, "anthropic")
    assert compiled.planned_tokens == compiled.tokens
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens


@given(data=st.text(max_size=40))
@settings(max_examples=50, deadline=None)
def test_redacted_thinking_with_string_data_ships_verbatim_before_the_final_turn(data: str) -> None:
    block = {"type": "redacted_thinking", "data": data}
    with Store(":memory:") as store:
        store.append(
            [
                Message("user", [_text("q")]),
                Message("assistant", [block, _text("a")]),
                Message("user", [_text("n")]),
            ]
        )
        compiled = compile_request(store, Recipe(budget_tokens=100_000, output_format="anthropic"))
    body = payload_json(compiled.request.payload)
    assert _shipped(body, "redacted_thinking") == [block]
    assert compiled.planned_tokens == compiled.tokens


def test_the_grammar_check_names_a_redacted_thinking_block_without_string_data() -> None:
    body = {
        "messages": [
            {"role": "user", "content": [_text("q")]},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": None}, _text("a")]},
            {"role": "user", "content": [_text("n")]},
        ]
    }
    assert request_format("anthropic").grammar_problems(body) == [
        "message 1: a redacted_thinking block whose data is not a string"
    ]
