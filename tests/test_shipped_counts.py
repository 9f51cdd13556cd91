"""Counts of what ships: a request format's dropped blocks and tool-call arguments as serialized."""

from __future__ import annotations

from typing import Any

from body_tokens import string_tokens
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import canonical_json
from compaction.outputs import request_format
from compaction.tokens.counting import (
    MESSAGE_OVERHEAD,
    THINKING_FRAME,
    TOOL_CALL_OVERHEAD,
    blocks_text_tokens,
    cache_key,
    count_text,
)
from compaction.tokens.encodings import get_encoding

ENCODING = "o200k_base"


def tiktoken_count(text: str) -> int:
    return len(get_encoding(ENCODING).encode_ordinary(text))


def shipped_strings(value: Any) -> int:
    """tiktoken's tokens of every string of a rendered body, the ``type`` and ``role`` tags aside."""
    return string_tokens(value, tiktoken_count, aside=("type", "role"))


KOREAN_CALL = {
    "type": "tool_use",
    "id": "call_7",
    "name": "write_file",
    "input": {"path": "문서/요약.md", "content": '# 회의 요약\n\n"중요": 내일까지 검토\n\t- 항목 하나\n'},
}
THINKING = {
    "type": "thinking",
    "thinking": "The user wants the file written. " * 40,
    "signature": "EqQBCkYIBxgCKkA" * 30,
}


def test_tool_call_arguments_count_as_the_json_text_that_ships() -> None:
    blocks = [KOREAN_CALL]
    expected = (
        MESSAGE_OVERHEAD
        + max(TOOL_CALL_OVERHEAD, tiktoken_count("call_7"))
        + tiktoken_count("write_file")
        + tiktoken_count(canonical_json(KOREAN_CALL["input"]))
    )
    assert blocks_text_tokens(blocks, ENCODING) == expected
    body = request_format("openai").render_conversation(None, [("assistant", blocks)])
    arguments = body["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert arguments == canonical_json(KOREAN_CALL["input"])
    # never below what ships, and within the fixed frame of it (before: the arguments were
    # counted escaped a second time inside the JSON of the whole call)
    shipped = shipped_strings(body["messages"])
    assert shipped <= blocks_text_tokens(blocks, ENCODING) <= shipped + MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD


def test_openai_chat_does_not_count_the_thinking_it_drops() -> None:
    openai, anthropic = request_format("openai"), request_format("anthropic")
    text = {"type": "text", "text": "Written."}
    blocks = [THINKING, {"type": "redacted_thinking", "data": "c2VjcmV0" * 50}, text, KOREAN_CALL]
    kept = [text, KOREAN_CALL]
    assert openai.text_tokens(blocks, ENCODING) == blocks_text_tokens(kept, ENCODING)
    assert openai.dropped_blocks(blocks) == blocks[:2]
    thinking = count_text(THINKING["thinking"]) + count_text(THINKING["signature"]) + THINKING_FRAME
    redacted = count_text("c2VjcmV0" * 50)
    assert (
        anthropic.text_tokens(blocks, ENCODING)
        == blocks_text_tokens(kept, ENCODING) + thinking + redacted + 2
    )
    assert anthropic.dropped_blocks(blocks) == []
    # the rendered OpenAI body has no trace of them
    body = openai.render_conversation(None, [("assistant", blocks)])
    assert "user wants" not in str(body) and "c2VjcmV0" not in str(body)


def test_counts_that_drop_different_blocks_are_cached_apart() -> None:
    openai, anthropic = request_format("openai"), request_format("anthropic")
    assert cache_key(ENCODING) == "o200k_base@14"
    assert anthropic.count_key(ENCODING) == "o200k_base@14-encrypted_reasoning"
    assert openai.count_key(ENCODING) == "o200k_base@14-encrypted_reasoning+redacted_thinking+thinking"
    assert openai.count_key("cl100k_base") != openai.count_key(ENCODING)


words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), words),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(words, inner, max_size=4)),
    max_leaves=12,
)
assistant_blocks = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, words),
        st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, words, words),
        st.builds(
            lambda i, n, a: {"type": "tool_use", "id": i or "c", "name": n or "f", "input": {"a": a}},
            words,
            words,
            json_values,
        ),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(blocks=assistant_blocks)
def test_openai_count_is_never_below_what_ships(blocks: list[dict[str, Any]]) -> None:
    openai = request_format("openai")
    body = openai.render_conversation(None, [("assistant", blocks)])
    message = body["messages"][0]
    assert shipped_strings(message) <= openai.text_tokens(blocks, ENCODING)


def _thinking_history() -> list:
    from compaction import Message

    thought = "Let me weigh the options for the migration carefully. " * 40
    return [
        Message("user", ({"type": "text", "text": "Plan the database migration"},)),
        Message(
            "assistant",
            (
                {"type": "thinking", "thinking": thought, "signature": "sig-abc"},
                {"type": "text", "text": "First we add the column, then backfill."},
            ),
        ),
        Message("user", ({"type": "text", "text": "Go on"},)),
    ]


def test_compile_for_openai_neither_counts_nor_ships_thinking_and_plan_equals_gate() -> None:
    from compaction import Recipe, Store, compile_request
    from compaction.compile import raw_history_tokens

    store = Store(":memory:")
    store.append(_thinking_history())
    openai = compile_request(store, Recipe(budget_tokens=10_000, output_format="openai"))
    anthropic = compile_request(store, Recipe(budget_tokens=10_000, output_format="anthropic"))
    assert b"weigh the options" not in openai.request.payload
    assert b"weigh the options" in anthropic.request.payload
    assert openai.request.dropped == ((1, "thinking"),)
    assert anthropic.request.dropped == ()
    assert openai.planned_tokens == openai.tokens == raw_history_tokens(store, Recipe(output_format="openai"))
    # the thought (~400 tokens) is in the Anthropic count only
    assert anthropic.tokens - openai.tokens > 350
    # a message without thinking takes its plain cached count under the OpenAI key
    plain = store.facts(0, 3, encoding="o200k_base")
    shipped = store.facts(0, 3, encoding="o200k_base", dropped=frozenset({"thinking", "redacted_thinking"}))
    assert [f.text_tokens for f in shipped][0::2] == [f.text_tokens for f in plain][0::2]
    assert shipped[1].text_tokens < plain[1].text_tokens - 350


def test_anthropic_ships_a_block_type_it_does_not_know_as_counted_loud_text() -> None:
    """Another provider's block (an OpenAI ``web_search_call``) would make Anthropic refuse the request."""
    from compaction import Message, Recipe, Store, compile_request
    from compaction.outputs.anthropic_messages import AnthropicMessages

    store = Store(":memory:")
    store.append(
        [
            Message("user", ({"type": "text", "text": "search the docs"},)),
            Message(
                "assistant",
                ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, {"type": "text", "text": "found it"}),
            ),
            Message("user", ({"type": "text", "text": "thanks"},)),
        ]
    )
    compiled = compile_request(store, Recipe(budget_tokens=5000, output_format="anthropic"))
    body = compiled.request.body()
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["text", "text"]
    assert assistant[0]["text"].startswith("[content block of type 'web_search_call' not supported by this format:")
    assert compiled.planned_tokens == compiled.tokens
    assert AnthropicMessages().grammar_problems(
        {"messages": [{"role": "user", "content": [{"type": "web_search_call"}]}]}
    ) == ["message 0: block types Anthropic does not take: web_search_call"]


def test_unknown_blocks_shipped_counts_nested_ones_and_not_dropped_ones() -> None:
    from compaction import Message, Recipe, Store, compile_request
    from compaction.wire import unknown_blocks_shipped

    store = Store(":memory:")
    store.append(
        [
            Message("user", ({"type": "text", "text": "look"},)),
            Message(
                "assistant",
                (
                    {"type": "encrypted_reasoning", "provider": "openai", "encrypted_content": "QUJD" * 50},
                    {"type": "tool_use", "id": "t1", "name": "fetch", "input": {"url": "https://x"}},
                ),
            ),
            Message(
                "user",
                (
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "page"}, {"type": "web_page", "url": "https://x"}],
                    },
                ),
            ),
        ]
    )
    compiled = compile_request(store, Recipe(budget_tokens=5000))
    shipped = unknown_blocks_shipped(compiled.request, "o200k_base")
    assert list(shipped) == ["web_page"] and shipped["web_page"][0] == 1 and shipped["web_page"][1] > 5
