"""The agent-loop API: one call appends a turn in the shape the agent already has."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import (
    InvalidArgument,
    InvalidMessage,
    Recipe,
    Store,
    append_anthropic,
    append_openai,
    append_responses,
    compress_and_compile,
)
from compaction.formats import parse_messages
from compaction.loop import from_anthropic, from_openai, from_responses

BUDGET = 3000
_OUTPUT = "line {n}: " + "checked the module and found nothing unusual; " * 30


def _openai_turn(n: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    call = f"call_{n}"
    sent = [{"role": "user", "content": f"Step {n}: inspect module_{n}.py"}]
    answer = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call,
                "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"path": f"module_{n}.py"})},
            }
        ],
    }
    return sent, answer


def _loop_openai(store: Store, n: int) -> None:
    sent, answer = _openai_turn(n)
    if n == 0:
        sent.insert(0, {"role": "system", "content": "You are a careful code reviewer."})
    else:
        sent.insert(0, {"role": "tool", "tool_call_id": f"call_{n - 1}", "content": _OUTPUT.format(n=n - 1)})
    assert append_openai(store, sent) == len(sent)
    compiled, _ = compress_and_compile(store, Recipe(budget_tokens=BUDGET))
    assert compiled.tokens <= BUDGET
    assert append_openai(store, answer) == 1  # the model's answer, appended as it came


def _loop_anthropic(store: Store, n: int) -> None:
    content: list[dict[str, Any]] = [{"type": "text", "text": f"Step {n}: inspect module_{n}.py"}]
    if n:
        content.insert(
            0, {"type": "tool_result", "tool_use_id": f"toolu_{n - 1}", "content": _OUTPUT.format(n=n - 1)}
        )
    system = "You are a careful code reviewer." if n == 0 else None
    assert append_anthropic(store, [{"role": "user", "content": content}], system=system) == (
        2 if system else 1
    )
    compiled, _ = compress_and_compile(store, Recipe(budget_tokens=BUDGET, output_format="anthropic"))
    assert compiled.tokens <= BUDGET
    answer = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {"path": f"module_{n}.py"}}
        ],
    }
    assert append_anthropic(store, answer) == 1


def _loop_responses(store: Store, n: int) -> None:
    items: list[dict[str, Any]] = [{"role": "user", "content": f"Step {n}: inspect module_{n}.py"}]
    if n == 0:
        items.insert(0, {"role": "developer", "content": "You are a careful code reviewer."})
    else:
        items.insert(
            0, {"type": "function_call_output", "call_id": f"fc_{n - 1}", "output": _OUTPUT.format(n=n - 1)}
        )
    assert append_responses(store, items) == 2
    compiled, _ = compress_and_compile(store, Recipe(budget_tokens=BUDGET))
    assert compiled.tokens <= BUDGET
    output = [
        {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"enc-{n}"},
        {
            "type": "function_call",
            "call_id": f"fc_{n}",
            "name": "read",
            "arguments": json.dumps({"path": f"module_{n}.py"}),
        },
    ]
    assert append_responses(store, output) == 1  # one model turn, one message


@pytest.mark.parametrize(
    ("turn", "stored"),
    [(_loop_openai, 1 + 30 * 2 + 29), (_loop_anthropic, 1 + 30 * 2), (_loop_responses, 1 + 30 * 2 + 29)],
    ids=["openai", "anthropic", "responses"],
)
def test_thirty_turns_compile_within_the_budget(
    memory_store: Store, turn: Callable[[Store, int], None], stored: int
) -> None:
    """System, then per turn the ask and the answer; the tool output is a message of its own
    except in Anthropic's shape, where it shares the user turn with the next ask."""
    for n in range(30):
        turn(memory_store, n)
    assert len(memory_store) == stored
    compiled, _ = compress_and_compile(memory_store, Recipe(budget_tokens=BUDGET))
    assert compiled.tokens <= BUDGET
    assert compiled.summaries, "30 turns of tool output do not fit 3,000 tokens raw"
    messages = memory_store.messages()
    assert messages[0].role == "system" and messages[-1].content[-1]["id"] in ("call_29", "toolu_29", "fc_29")


def test_each_call_appends_exactly_what_it_is_given(memory_store: Store) -> None:
    assert append_openai(memory_store, {"role": "user", "content": "ok"}) == 1
    assert append_openai(memory_store, {"role": "user", "content": "ok"}) == 1  # repeats are messages too
    assert append_openai(memory_store, []) == 0
    assert [m.content for m in memory_store.messages()] == [({"type": "text", "text": "ok"},)] * 2


class _SdkObject:
    """Stands for an SDK response object (pydantic): what the API sent, with None fields."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        """Return the fields; ``exclude_none`` leaves out None values at every level, as pydantic does."""

        def dump(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: dump(v) for k, v in value.items() if not (exclude_none and v is None)}
            if isinstance(value, list):
                return [dump(v) for v in value]
            return value

        result: dict[str, Any] = dump(self._data)
        return result


def test_sdk_response_objects_are_taken_as_they_come(memory_store: Store) -> None:
    message = _SdkObject(
        {"role": "assistant", "content": "Done.", "refusal": None, "tool_calls": None, "audio": None}
    )
    assert append_openai(memory_store, message) == 1
    reply = _SdkObject(
        {
            "id": "msg_9",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Also done.", "citations": None}],
            "stop_reason": "end_turn",
        }
    )
    assert append_anthropic(memory_store, reply) == 1
    outputs = [
        _SdkObject(
            {
                "type": "message",
                "id": "msg_r",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "And this.", "annotations": []}],
            }
        )
    ]
    assert append_responses(memory_store, outputs) == 1
    stored = memory_store.messages()
    assert [m.content for m in stored] == [
        ({"type": "text", "text": "Done."},),
        ({"type": "text", "text": "Also done."},),
        ({"type": "text", "text": "And this."},),
    ]
    assert stored[1].source_id == "msg_9" and stored[1].meta["model"] == "claude-sonnet-4-5"


@pytest.mark.parametrize(
    ("call", "bad", "message"),
    [
        (
            from_openai,
            [{"role": "user", "content": "a"}, {"role": "tool", "content": "x"}],
            "messages[1]: a tool message needs a string 'tool_call_id'",
        ),
        (
            from_openai,
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}],
            "messages[0]: tool_calls[0] needs a function with a string 'name'",
        ),
        (
            from_openai,
            [{"role": "robot", "content": "x"}],
            "messages[0]: unknown role 'robot'; expected system, developer, user, assistant, tool or function",
        ),
        (
            from_anthropic,
            [{"role": "user", "content": [{"text": "no type"}]}],
            "messages[0]: content[0] must be an object with a string 'type', found dict",
        ),
        (
            from_anthropic,
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "@@"},
                        }
                    ],
                }
            ],
            "messages[0]: malformed user message: content[0]: invalid base64 image data: unexpected character '@'",
        ),
        (
            from_responses,
            [{"type": "function_call_output", "output": "x"}],
            "items[0]: a function_call_output item needs a string 'call_id'",
        ),
        (
            from_responses,
            [{"type": "compaction", "encrypted_content": "e"}],
            "items[0]: a compaction item needs a message beside it to be kept with (it is a prior compaction, never a message of its own); give it with the items that follow it",
        ),
    ],
)
def test_a_bad_shape_raises_one_typed_error_naming_the_index_and_field(
    call: Callable[[Any], Any], bad: Any, message: str
) -> None:
    with pytest.raises(InvalidMessage) as caught:
        call(bad)
    assert str(caught.value) == message


def test_a_bad_message_appends_nothing(memory_store: Store) -> None:
    with pytest.raises(InvalidMessage):
        append_openai(
            memory_store, [{"role": "user", "content": "fine"}, {"role": "tool", "content": "no id"}]
        )
    assert len(memory_store) == 0


def test_arguments_of_the_wrong_type_are_named() -> None:
    with pytest.raises(
        InvalidArgument,
        match=r"^messages must be a list of Chat Completions messages \(dicts\), or one of them; found str 'hi'$",
    ):
        from_openai("hi")
    with pytest.raises(InvalidArgument, match=r"^store must be a history store"):
        append_responses(None, [{"role": "user", "content": "x"}])  # type: ignore[arg-type]


def test_a_compaction_item_rides_on_the_message_after_it(memory_store: Store) -> None:
    items = [
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "enc"},
        {"role": "user", "content": "go on"},
    ]
    assert append_responses(memory_store, items) == 1
    stored = memory_store.messages()[0]
    assert stored.content == ({"type": "text", "text": "go on"},)
    assert stored.meta["openai_compaction"] == {"id": "cmp_1", "encrypted_content": "enc"}


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
_CHAT = st.lists(
    st.one_of(
        st.builds(lambda t: {"role": "user", "content": t}, _TEXT),
        st.builds(lambda t: {"role": "system", "content": t}, _TEXT),
        st.builds(lambda t: {"role": "assistant", "content": t}, _TEXT),
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(messages=_CHAT)
def test_from_openai_is_the_openai_transcript_parser(messages: list[dict[str, Any]]) -> None:
    assert from_openai(messages) == parse_messages(messages, "openai")
    anthropic_shaped = [m for m in messages if m["role"] != "system"]
    assert from_anthropic(anthropic_shaped) == parse_messages(anthropic_shaped, "anthropic")
    # as Responses items, consecutive assistant messages are one model turn
    expected: list[tuple[str, list[Any]]] = []
    for message in from_openai(messages):
        if expected and message.role == "assistant" == expected[-1][0]:
            expected[-1][1].extend(message.content)
        else:
            expected.append((message.role, list(message.content)))
    as_items = [{"type": "message", **m} for m in messages]
    assert [(m.role, list(m.content)) for m in from_responses(as_items)] == expected
