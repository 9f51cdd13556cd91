"""A store of system messages only never compiles to an Anthropic request without a message.

System messages ride in the system text, so such a store compiled to ``messages: []``, which the
Anthropic Messages API refuses (at least one message).  Compile now raises the error an empty
store raises (:class:`~compaction.errors.InvalidMessage`, one line naming the store), before any
summarizer call; OpenAI Chat takes a system message alone and still compiles it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import Message, Recipe, Store, compile_request, compress_and_compile
from compaction.errors import CompactionError, InvalidMessage


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


class _NeverCalled:
    """A summarizer that fails the test when called."""

    def summarize(self, *args: object, **kwargs: object) -> str:
        raise AssertionError("the summarizer was called for a store that cannot compile")

    def close(self) -> None:
        pass


_SYSTEM_TEXTS = st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(texts=_SYSTEM_TEXTS, policy=st.sampled_from(["auto", "allow", "refuse"]))
def test_a_store_of_system_messages_is_refused_for_anthropic(texts: list[str], policy: str) -> None:
    recipe = Recipe(budget_tokens=4000, output_format="anthropic", assistant_prefill=policy)  # type: ignore[arg-type]
    with Store(":memory:") as store:
        store.append([Message("system", [_text(t)]) for t in texts])
        with pytest.raises(InvalidMessage) as caught:
            compile_request(store, recipe)
        with pytest.raises(InvalidMessage) as piped:
            compress_and_compile(store, recipe, summarizer=_NeverCalled())  # type: ignore[arg-type]
        assert store.summaries() == []
    message = str(caught.value)
    assert message == str(piped.value)
    assert "\n" not in message
    assert message == (
        f":memory:: the store holds system messages only ({len(texts)}), and an Anthropic Messages request "
        "needs at least one user message: there is no conversation to compile; append the user's message first"
    )
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CompactionError)


def test_one_user_message_after_the_system_ones_compiles() -> None:
    with Store(":memory:") as store:
        store.append(
            [Message("system", [_text("You are terse.")]), Message("user", [_text("fix the export")])]
        )
        body = compile_request(store, Recipe(budget_tokens=4000, output_format="anthropic")).request.body()
    assert [b["text"] for b in body["system"]] == ["You are terse."]
    assert [(m["role"], [b["text"] for b in m["content"]]) for m in body["messages"]] == [
        ("user", ["fix the export"])
    ]


def test_openai_chat_still_takes_a_system_message_alone() -> None:
    with Store(":memory:") as store:
        store.append([Message("system", [_text("You are terse.")])])
        body = compile_request(store, Recipe(budget_tokens=4000, output_format="openai")).request.body()
    assert [m["role"] for m in body["messages"]] == ["system"]
