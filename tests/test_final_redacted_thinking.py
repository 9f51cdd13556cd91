"""A ``redacted_thinking`` block never ships where it is refused, and is counted as it ships.

Anthropic refuses thinking in a request's final assistant turn when the request does not enable
thinking (it never does here), so there a ``redacted_thinking`` block ships as the loud line
``counting.REDACTED_THINKING``; elsewhere in an Anthropic body it ships verbatim.  OpenAI Chat
and Responses take no Anthropic reasoning at all and drop it.  The last message of a request is
recounted as it ships (``wire.final_message_blocks``), but an earlier message of the same final
turn keeps its stored count, so the block's count has the stand-in's tokens as its floor
(``COUNTING_VERSION`` 14): before, 19 characters of data (12 tokens) in the first of two
assistant messages shipped as an 18-token line and the body counted 31 against a report of 26.
Checked on data of 0 to 200 characters in the three request formats: the block is absent where
refused, plan == gate, and the report is never below an independent count of the body.
"""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import check_provider_grammar, independent_tokens, payload_json

from compaction import Message, Recipe, Store, compile_request
from compaction.compile import CompiledRequest
from compaction.outputs import request_format
from compaction.tokens.counting import REDACTED_THINKING, block_text_tokens, count_text

FORMATS = ["anthropic", "openai", "openai-responses"]

#: Redacted thinking data is base64 ciphertext; other characters are drawn too.
_DATA = st.one_of(
    st.text(st.sampled_from(string.ascii_letters + string.digits + "+/="), max_size=200),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200),
)


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _history(place: str, turn: list[dict[str, Any]]) -> list[Message]:
    messages = [Message("user", [_text("why did the export fail?")])]
    if place == "last message":
        messages.append(Message("assistant", turn))
    elif place == "earlier message of the final turn":
        messages += [Message("assistant", turn), Message("assistant", [_text("It failed on batch 7.")])]
    else:  # the user answered: the block is not in the final turn
        messages += [Message("assistant", turn), Message("user", [_text("and now?")])]
    return messages


def _compiled(messages: list[Message], fmt: str) -> CompiledRequest:
    with Store(":memory:") as store:
        store.append(messages)
        return compile_request(store, Recipe(budget_tokens=100_000, output_format=fmt))  # type: ignore[arg-type]


def _shipped_redacted(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Return every redacted_thinking block of an Anthropic body's messages, in order."""
    return [
        b
        for m in body.get("messages", [])
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "redacted_thinking"
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(FORMATS),
    data=_DATA,
    place=st.sampled_from(["last message", "earlier message of the final turn", "answered turn"]),
    after=st.sampled_from(["", "Done.", "Done. \n"]),
)
def test_redacted_thinking_never_ships_where_refused_and_is_counted_as_shipped(
    fmt: str, data: str, place: str, after: str
) -> None:
    redacted = {"type": "redacted_thinking", "data": data}
    turn = [redacted, _text(after)] if after else [redacted]
    compiled = _compiled(_history(place, turn), fmt)
    body = payload_json(compiled.request.payload)
    assert not request_format(fmt).grammar_problems(body)  # type: ignore[arg-type]
    check_provider_grammar(body, fmt)
    if fmt == "anthropic":
        final = body["messages"][-1]
        if place == "answered turn":  # allowed there: verbatim, its ciphertext included
            assert final["role"] == "user"
            assert _shipped_redacted(body) == [redacted]
        else:
            assert final["role"] == "assistant"
            assert _shipped_redacted(body) == []
            assert final["content"][0] == {"type": "text", "text": REDACTED_THINKING}
    else:  # OpenAI takes no Anthropic reasoning: neither the block nor its data ships
        assert "redacted_thinking" not in compiled.request.payload.decode()
        without = [{"type": "redacted_thinking", "data": ""}, *turn[1:]]
        assert compiled.request.payload == _compiled(_history(place, without), fmt).request.payload
    assert compiled.planned_tokens == compiled.tokens
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("data", ["", "EmwKAhgBEgy3va3pzix", "A" * 40 + "x9/+" * 50])
def test_a_redacted_thinking_block_counts_at_least_its_stand_in(data: str, encoding: str) -> None:
    counted = block_text_tokens({"type": "redacted_thinking", "data": data}, encoding)
    assert counted == max(count_text(data, encoding), count_text(REDACTED_THINKING, encoding))
    assert counted >= count_text(REDACTED_THINKING, encoding) == 18
