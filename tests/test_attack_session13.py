"""Hostile input against what session 13 changed (attack pass): each test failed before its fix.

Session 13 let a branch start from its parent's event at the fork (``events.inherited_frame``,
recorded as the branch's own event), left blank blocks out of tool results
(``counting.shipped_blocks``), right-stripped a final assistant turn for Anthropic, and priced
the pairing repair's renamed tool ids in the planner (``pairing.renamed_tool_ids``).  Each
test below states what broke and asserts the invariant it broke: coverage, pairing, the
budget (plan == gate), the provider grammar, or a typed error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from request_checks import assert_coverage
from store_backends import store_location
from strategies import (
    CapturingSummarizer,
    check_provider_grammar,
    check_tool_pairing,
    independent_tokens,
    payload_json,
)

from compaction import Message, Recipe, Store, compile_request, compress_and_compile
from compaction.compile import CompiledRequest
from compaction.events import compile_current, compile_in_events
from compaction.formats import parse_messages
from compaction.outputs import request_format
from compaction.outputs.anthropic_messages import FINAL_THINKING
from compaction.pairing import ToolIds, ToolSlot, renamed_tool_ids, turns_of, wire_tool_id
from compaction.store import open_store
from compaction.tokens.counting import REDACTED_THINKING


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


# -- a branch's frame after its parent edits a shared message ----------------------------------


@pytest.fixture(name="forked", params=["sqlite", "postgres"])
def forked_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A parent ``main`` of 8 messages whose event shows an L1 summary of ``[0, 4)``, forked at its tip as ``b``.

    ``b`` has compiled once: it inherited ``main``'s frame and recorded it as its own event.
    """
    with store_location(request.param, tmp_path) as location:
        with open_store(location, conversation="main") as main:
            roles = ("user", "assistant")
            main.append(
                [Message(roles[i % 2], (_text(f"message {i} about the export job"),)) for i in range(8)]
            )
            main.add_summary(1, 0, 4, "The user asked about the export job.", {"by": "test"})
            main.record_event(900, 400, 3000, {"frame": {"cut": 4, "cover": [[1, 0, 4]]}, "messages": 8})
            main.branch("b", 8)
        with open_store(location, conversation="b") as branch:
            branch.append([Message("assistant", (_text("the branch's answer"),))])
            first, _ticks = compile_in_events(branch, Recipe(budget_tokens=3000), CapturingSummarizer)
            assert [(s.start_seq, s.end_seq) for s in first.summaries] == [(0, 4)]
            assert "inherited" in branch.events()[-1].detail
        yield location


def test_a_parent_edit_of_a_shared_message_does_not_break_the_branch_frame(forked: str) -> None:
    # The branch recorded the frame it inherited (a summary of [0, 4)) as its own event; the
    # parent then edited message 1, which the branch shares and sees, so the summary went
    # stale, but the edit event is the parent's: the branch's next compile raised
    # InvariantViolation "frame: no level-1 summary of [0, 4) in the store" (compile_in_events,
    # what the proxy calls, and compile_current, what `compaction compile` calls).
    recipe = Recipe(budget_tokens=3000)
    with open_store(forked, conversation="main") as main:
        main.edit(1, [_text("EDITED in the parent")])
    with open_store(forked, conversation="b") as branch:
        for compiled in (
            compile_in_events(branch, recipe, CapturingSummarizer)[0],
            compile_current(branch, recipe),
        ):
            body = payload_json(compiled.request.payload)
            assert "EDITED in the parent" in compiled.request.payload.decode("utf-8")
            assert all(s.end_seq <= 1 for s in compiled.summaries)  # the stale summary is not shown
            assert_coverage(branch, compiled)
            check_tool_pairing(body, recipe.output_format)
            check_provider_grammar(body, recipe.output_format)
            assert compiled.tokens <= 3000
        assert branch.messages(1, 2)[0].content == ({"type": "text", "text": "EDITED in the parent"},)
        assert branch.revisions(1) == 1  # the edit is a revision: the original row is kept


# -- one tool id called twice in one turn ------------------------------------------------------


def _call(call_id: str, path: str = "a.txt") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"path": path}}


def _result(call_id: str, content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def _compiled(messages: list[Message], fmt: str, budget: int = 100_000) -> CompiledRequest:
    with Store(":memory:") as store:
        store.append(messages)
        return compile_request(store, Recipe(budget_tokens=budget, output_format=fmt))  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "openai-responses"])
@pytest.mark.parametrize("tool_id", ["", "call_0", "x_2"])
def test_parallel_calls_sharing_one_id_ship_as_pairs_planned_as_shipped(fmt: str, tool_id: str) -> None:
    # A turn of two parallel calls under one id (a provider that leaves ids empty, or numbers
    # them per turn) and their two results: pairing matched only the first call of a turn
    # with an id, so the second call and the second result shipped as orphan stand-ins
    # (loud text, no longer a tool call) and the planner, which prices renames but not
    # orphans, planned 39 tokens where the gate counted 65 (OpenAI Chat, id "x").  Calls and
    # results pair in order now; the second pair is sent under a fresh id.
    messages = [
        Message("user", [_text("read both")]),
        Message("assistant", [_call(tool_id, "a.txt"), _call(tool_id, "b.txt")]),
        Message("user", [_result(tool_id, "ALPHA"), _result(tool_id, "BRAVO")]),
        Message("assistant", [_text("read")]),
    ]
    compiled = _compiled(messages, fmt)
    first = wire_tool_id(tool_id, fmt)  # "" is outside Anthropic's id pattern: both pairs are sent renamed
    assert [r.kind for r in compiled.request.replacements] == ["renamed_tool_id"] * (1 + (first != tool_id))
    assert compiled.planned_tokens == compiled.tokens
    body = payload_json(compiled.request.payload)
    check_tool_pairing(body, fmt)
    check_provider_grammar(body, fmt)
    assert "no result was recorded" not in compiled.request.payload.decode("utf-8")
    pairs = _shipped_pairs(body, fmt)
    assert pairs == {first: ("a.txt", "ALPHA"), f"{first}_2": ("b.txt", "BRAVO")}


def _shipped_pairs(body: dict[str, Any], fmt: str) -> dict[str, tuple[str, str]]:
    """Return ``{call id: (path argument, result text)}`` of the tool calls a body ships."""
    paths: dict[str, str] = {}
    outputs: dict[str, str] = {}
    if fmt == "openai":
        for message in body["messages"]:
            for call in message.get("tool_calls") or []:
                paths[call["id"]] = json.loads(call["function"]["arguments"])["path"]
            if message["role"] == "tool":
                outputs[message["tool_call_id"]] = message["content"]
    elif fmt == "openai-responses":
        for item in body["input"]:
            if item.get("type") == "function_call":
                paths[item["call_id"]] = json.loads(item["arguments"])["path"]
            elif item.get("type") == "function_call_output":
                outputs[item["call_id"]] = item["output"]
    else:
        for message in body["messages"]:
            for block in message["content"]:
                if block.get("type") == "tool_use":
                    paths[block["id"]] = block["input"]["path"]
                elif block.get("type") == "tool_result":
                    outputs[block["tool_use_id"]] = block["content"]
    assert set(paths) == set(outputs)
    return {tool_id: (paths[tool_id], outputs[tool_id]) for tool_id in paths}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(
        st.lists(st.sampled_from(["", "t", "t_2", "t_3", "\u3000"]), min_size=1, max_size=4),
        min_size=1,
        max_size=5,
    ),
    fmt=st.sampled_from(["openai", "anthropic", "openai-responses"]),
)
def test_any_reuse_of_ids_within_and_across_turns_ships_every_pair_as_planned(
    turns: list[list[str]], fmt: str
) -> None:
    # every call is answered in the next turn, in call order, whatever its id repeats
    messages = [Message("user", [_text("go")])]
    expected: list[tuple[str, str]] = []
    for number, ids in enumerate(turns):
        calls = [_call(tool_id, f"f{number}_{k}") for k, tool_id in enumerate(ids)]
        results = [_result(tool_id, f"OUT{number}_{k}") for k, tool_id in enumerate(ids)]
        messages += [Message("assistant", calls), Message("user", results)]
        expected += [(f"f{number}_{k}", f"OUT{number}_{k}") for k in range(len(ids))]
    compiled = _compiled(messages, fmt)
    assert {r.kind for r in compiled.request.replacements} <= {"renamed_tool_id"}
    assert compiled.planned_tokens == compiled.tokens
    body = payload_json(compiled.request.payload)
    check_tool_pairing(body, fmt)
    check_provider_grammar(body, fmt)
    assert sorted(_shipped_pairs(body, fmt).values()) == sorted(expected)


# -- the renamed id's form against the providers' id rules --------------------------------------

#: Anthropic's rule for a ``tool_use`` id, as its API answers a request that breaks it:
#: "messages.1.content.1.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
#: (quoted in https://github.com/CommandCodeAI/command-code/issues/323 and
#: https://github.com/BlockRunAI/ClawRouter/issues/17).
ANTHROPIC_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

#: OpenAI Chat's longest ``tool_calls[].id``: "Invalid 'messages[3].tool_calls[0].id': string
#: too long. Expected a string with maximum length 40, but got a string with length 41
#: instead." (quoted in https://github.com/microsoft/autogen/issues/6377).
OPENAI_TOOL_ID_MAX = 40


def test_a_renamed_tool_id_keeps_anthropic_tool_id_pattern() -> None:
    # valid Anthropic ids, one reused by a later round: the second round was sent as toolu_01~2
    # ('~' is outside Anthropic's pattern, so the API refused the request); it is sent as toolu_01_2
    messages = [Message("user", [_text("go")])]
    for round_ in range(2):
        messages += [
            Message("assistant", [_call("toolu_01", f"r{round_}.txt")]),
            Message("user", [_result("toolu_01", f"OUT{round_}")]),
        ]
    compiled = _compiled(messages, "anthropic")
    body = payload_json(compiled.request.payload)
    ids = [b["id"] for m in body["messages"] for b in m["content"] if b.get("type") == "tool_use"]
    assert len(ids) == 2
    assert ids == ["toolu_01", "toolu_01_2"]
    assert all(ANTHROPIC_TOOL_ID.match(tool_id) for tool_id in ids), ids


def test_a_renamed_tool_id_keeps_openai_id_length() -> None:
    # a reused 40-character id was sent as '<id>~2', 42 characters, over OpenAI Chat's 40
    long_id = "call_" + "a" * 35  # 40 characters: valid as stored
    messages = [Message("user", [_text("go")])]
    for round_ in range(2):
        messages += [
            Message("assistant", [_call(long_id, f"r{round_}.txt")]),
            Message("user", [_result(long_id, f"OUT{round_}")]),
        ]
    body = payload_json(_compiled(messages, "openai").request.payload)
    ids = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert max(len(tool_id) for tool_id in ids) <= OPENAI_TOOL_ID_MAX, ids
    assert ids == [long_id, long_id[:38] + "_2"]  # the stored id cut so the number fits


# -- a final assistant turn's trailing whitespace ----------------------------------------------


def test_a_final_assistant_turn_s_stripped_whitespace_is_not_counted_past_one_percent() -> None:
    # an assistant message that degenerated into a run of newlines, the store's newest: the
    # body ships "ok" (13 tokens by the independent count) and was reported as 138 tokens
    messages = [Message("user", [_text("go")]), Message("assistant", [_text("ok" + "\n" * 2000)])]
    compiled = _compiled(messages, "anthropic")
    body = payload_json(compiled.request.payload)
    assert body["messages"][-1]["content"][-1]["text"] == "ok"
    assert compiled.planned_tokens == compiled.tokens
    independent = independent_tokens(body, compiled.request.model)
    assert independent <= compiled.tokens <= independent * 1.01


def test_an_imported_transcript_that_reuses_ids_keeps_anthropic_tool_id_pattern() -> None:
    # an OpenAI Chat transcript whose two parallel calls share the id "call_0": the import made
    # the second "call_0#2", and '#' is outside Anthropic's pattern; it makes it "call_0_2"
    transcript = [
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a"}'},
                },
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "b"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "ALPHA"},
        {"role": "tool", "tool_call_id": "call_0", "content": "BRAVO"},
        {"role": "assistant", "content": "read"},
    ]
    messages = parse_messages(transcript, "openai")
    assert [b["id"] for b in messages[1].content if b["type"] == "tool_use"] == ["call_0", "call_0_2"]
    body = payload_json(_compiled(messages, "anthropic").request.payload)
    ids = [b["id"] for m in body["messages"] for b in m["content"] if b.get("type") == "tool_use"]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert all(ANTHROPIC_TOOL_ID.match(tool_id) for tool_id in ids), ids


# -- the renames' search for a free suffix ------------------------------------------------------


def _reference_renames(messages: list[ToolIds]) -> dict[ToolSlot, str]:
    """The renames as the repair defined them before (each search from ``_2``): quadratic in an
    id's reuses (8,000 reuses of one id took 9.3 s), kept here as the specification."""
    turns = turns_of([m.role for m in messages])
    pairs = {}
    calls: dict[tuple[int, str], list[ToolSlot]] = {}
    for index, message in enumerate(messages):
        if message.role == "assistant":
            for ordinal, tool_id in enumerate(message.tool_uses):
                calls.setdefault((turns[index], tool_id), []).append((index, "tool_use", ordinal))
    for index, message in enumerate(messages):
        if message.role == "user":
            for ordinal, tool_id in enumerate(message.tool_results):
                waiting = calls.get((turns[index] - 1, tool_id))
                if waiting:
                    pairs[waiting.pop(0)] = (index, "tool_result", ordinal)
    taken = {tool_id for message in messages for tool_id in message.tool_uses}
    used: set[str] = set()
    renamed: dict[ToolSlot, str] = {}
    for call in sorted(pairs):
        tool_id = messages[call[0]].tool_uses[call[2]]
        new_id, suffix = tool_id, 2
        while new_id in used or (new_id != tool_id and new_id in taken):
            new_id, suffix = f"{tool_id}_{suffix}", suffix + 1
        used.add(new_id)
        if new_id != tool_id:
            renamed[call] = renamed[pairs[call]] = new_id
    return renamed


_IDS = st.sampled_from(["x", "x_2", "x_3", "x_2_2", "", "_2", "y"])


@settings(max_examples=200, deadline=None)
@given(turns=st.lists(st.lists(_IDS, min_size=1, max_size=4), min_size=1, max_size=12))
def test_renamed_ids_are_the_ones_a_search_from_two_finds(turns: list[list[str]]) -> None:
    # the search for a free suffix resumes where the id's previous one stopped (linear in an
    # id's reuses); it must pick exactly the ids a fresh search from _2 picks
    messages = [ToolIds("user", [], [])]
    for ids in turns:
        messages += [ToolIds("assistant", ids, []), ToolIds("user", [], ids)]
    assert renamed_tool_ids(messages) == _reference_renames(messages)


def test_an_id_reused_thousands_of_times_gets_every_suffix_in_order() -> None:
    messages = [ToolIds("user", [], [])]
    for _round in range(3000):
        messages += [ToolIds("assistant", ["x"], []), ToolIds("user", [], ["x"])]
    renamed = renamed_tool_ids(messages)
    calls = [renamed[(index, "tool_use", 0)] for index in range(3, len(messages), 2)]
    assert calls == [f"x_{k}" for k in range(2, 3001)]
    assert all(
        renamed[(index + 1, "tool_result", 0)] == renamed[(index, "tool_use", 0)]
        for index in range(3, 6001, 2)
    )


def test_a_tool_id_reused_by_every_round_still_leaves_a_live_window() -> None:
    # 300 tool rounds under one id: with distinct ids, compress_and_compile at 5,000 tokens
    # keeps 236 messages raw beside one summary; with one id it summarized all 601 messages
    # ([0, 1) and [1, 601)) into a 108-token request
    def history(ids: list[str]) -> list[Message]:
        messages = [Message("user", [_text("go")])]
        for i, tool_id in enumerate(ids):
            messages += [
                Message("assistant", [{"type": "tool_use", "id": tool_id, "name": "f", "input": {"i": i}}]),
                Message("user", [{"type": "tool_result", "tool_use_id": tool_id, "content": f"out {i}"}]),
            ]
        return messages

    recipe = Recipe(budget_tokens=5000)
    shown = []
    for ids in ([f"x{i}" for i in range(300)], ["x"] * 300):
        with Store(":memory:") as store:
            store.append(history(ids))
            compiled, _ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
            assert_coverage(store, compiled)
            shown.append(len(compiled.raw_seqs))
    assert shown[0] > 100
    assert shown[1] > 100, shown


# -- a final assistant turn holding a thinking block -------------------------------------------

SIGNED = {"type": "thinking", "thinking": "the export job failed on batch 7", "signature": "c2lnbmF0dXJl"}


def _final_thinking(final: list[dict[str, Any]]) -> tuple[CompiledRequest, dict[str, Any]]:
    messages = [Message("user", [_text("why did it fail?")]), Message("assistant", final)]
    compiled = _compiled(messages, "anthropic")
    return compiled, payload_json(compiled.request.payload)


@pytest.mark.parametrize(
    "final",
    [[SIGNED], [SIGNED, _text("It failed on batch 7.  ")], [_text("It failed."), SIGNED]],
    ids=["only thinking", "thinking then text", "text then thinking"],
)
def test_a_final_assistant_turn_ships_no_thinking_block(final: list[dict[str, Any]]) -> None:
    # The store's newest message is the assistant's (a turn cut after its reasoning): the
    # Anthropic body ended with an assistant turn holding the signed thinking block, and the
    # request enables no thinking, which Anthropic refuses ("When thinking is disabled, an
    # `assistant` message in the final position cannot contain `thinking`"); it ships as text
    compiled, body = _final_thinking(final)
    last = body["messages"][-1]
    assert last["role"] == "assistant"
    assert [b["type"] for b in last["content"]] == ["text"] * len(final)
    shipped = "".join(b["text"] for b in last["content"])
    assert FINAL_THINKING + SIGNED["thinking"] in shipped
    assert not request_format("anthropic").grammar_problems(body)
    check_provider_grammar(body, "anthropic")
    assert compiled.planned_tokens == compiled.tokens
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens


def test_the_anthropic_grammar_refuses_a_final_turn_holding_thinking() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [_text("go")]}, {"role": "assistant", "content": [SIGNED]}],
    }
    assert request_format("anthropic").grammar_problems(body) == [
        "message 1: the final assistant turn holds a thinking block"
    ]
    body["messages"].append({"role": "user", "content": [_text("next")]})  # not final: taken
    assert request_format("anthropic").grammar_problems(body) == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    thinking=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60),
    signature=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40),
    after=st.sampled_from(["", "Done.", "Done. \n"]),
)
def test_a_final_thinking_block_shipped_as_text_never_counts_below_the_body(
    thinking: str, signature: str, after: str
) -> None:
    final = [{"type": "thinking", "thinking": thinking, "signature": signature}]
    if after:
        final.append(_text(after))
    with Store(":memory:") as store:
        store.append([Message("user", [_text("go")]), Message("assistant", final)])
        compiled = compile_request(store, Recipe(budget_tokens=100_000, output_format="anthropic"))
        assert store.messages(1, 2)[0].content[0] == final[0]  # the store keeps the signed block
    body = payload_json(compiled.request.payload)
    assert not request_format("anthropic").grammar_problems(body)
    assert all(b["type"] != "thinking" for b in body["messages"][-1]["content"])
    assert compiled.planned_tokens == compiled.tokens
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens


def test_a_final_assistant_turn_ships_no_redacted_thinking_block() -> None:
    # It shipped verbatim in the final assistant turn, which Anthropic refuses with thinking
    # disabled; it ships as a loud line (its ciphertext is no text a model reads), the last
    # message counted as it ships (test_final_redacted_thinking covers an earlier message of
    # the turn, which needs the count floor)
    compiled, body = _final_thinking([{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}])
    assert body["messages"][-1]["content"] == [{"type": "text", "text": REDACTED_THINKING}]
    assert not request_format("anthropic").grammar_problems(body)
    assert compiled.planned_tokens == compiled.tokens
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens


def test_the_anthropic_grammar_refuses_a_final_turn_holding_redacted_thinking() -> None:
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": [_text("go")]},
            {"role": "assistant", "content": [redacted]},
        ],
    }
    assert request_format("anthropic").grammar_problems(body) == [
        "message 1: the final assistant turn holds a redacted_thinking block"
    ]
    body["messages"].append({"role": "user", "content": [_text("next")]})  # not final: taken
    assert request_format("anthropic").grammar_problems(body) == []
