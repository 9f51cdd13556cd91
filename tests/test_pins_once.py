"""A pinned message is shown once: in the system text while it lies before the live window, in
its place in the window once the window reaches it, and counted once in the budget.

The property test pins random messages of a generated history (each pinned message carries a
marker no other message holds), compresses it and compiles at random budgets: every marker is
in the serialized request exactly once, every message is shown raw at most once, coverage
(each message raw or inside one summary, summaries contiguous from 0) and tool pairing hold,
and the planner's price equals the gate's count.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from request_checks import assert_coverage
from strategies import CapturingSummarizer, check_tool_pairing, histories, payload_json

from compaction import Message, OverBudget, Recipe, Store, compile_request, compress_and_compile
from compaction.compile import CompiledRequest, raw_history_tokens


def _marked(index: int, role: str = "assistant") -> Message:
    """A message to pin, holding a marker no other message holds (an assistant turn: not an ask,
    so the ask ledger does not quote it)."""
    return Message(role, ({"type": "text", "text": f"PINNED-MARKER-{index} keep the linter on"},))


@st.composite
def pinned_cases(draw: Any) -> tuple[list[Message], list[int], int]:
    messages = draw(histories(min_turns=3, max_turns=10))
    boundaries = [i for i in range(len(messages) + 1) if i == 0 or not messages[i - 1].has_tool_use]
    spots = draw(st.lists(st.sampled_from(boundaries), min_size=1, max_size=3, unique=True))
    for index, spot in enumerate(sorted(spots, reverse=True)):
        messages.insert(spot, _marked(index))  # between whole tool rounds: pairing stays whole
    pins = [i for i, m in enumerate(messages) if m.text().startswith("PINNED-MARKER-")]
    return messages, pins, draw(st.integers(min_value=1200, max_value=8000))


def _check(store: Store, messages: list[Message], pins: list[int], compiled: CompiledRequest) -> None:
    payload = (
        compiled.request.payload.decode("utf-8")
        if isinstance(compiled.request.payload, bytes)
        else str(compiled.request.payload)
    )
    for seq in pins:
        marker = messages[seq].text().split(" ")[0]
        quoted = sum(
            s.text.count(marker) for s in compiled.summaries
        )  # a summary may quote it: not a raw show
        assert payload.count(marker) - quoted == 1, (
            f"pinned message {seq} shown raw {payload.count(marker) - quoted} times"
        )
    assert len(messages) == store.next_seq()
    system = [seq for seq, message in enumerate(messages) if message.role == "system"]
    assert_coverage(store, compiled, pinned=[*pins, *system])
    check_tool_pairing(payload_json(compiled.request.payload), Recipe().output_format)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(case=pinned_cases())
def test_a_pinned_message_is_shown_once_wherever_the_window_starts(
    case: tuple[list[Message], list[int], int],
) -> None:
    messages, pins, budget = case
    recipe = Recipe(budget_tokens=budget, chunk_target_tokens=200, chunk_min_messages=2, merge_fanout=2)
    with Store(":memory:") as store:
        store.append(messages)
        for seq in pins:
            store.pin(seq)
        everything = compile_request(store, recipe.replace(budget_tokens=10**7))  # all in the window
        _check(store, messages, pins, everything)
        assert everything.planned_tokens == raw_history_tokens(store, recipe)  # each pin priced once
        try:
            compiled, _ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
        except OverBudget as err:
            assert err.budget == budget and err.needed > budget
            return
        _check(store, messages, pins, compiled)
        assert compiled.tokens <= budget
        if not any(r.kind != "image" for r in compiled.request.replacements):
            assert compiled.planned_tokens == compiled.tokens  # plan == gate: the pin priced once


def test_a_pinned_turn_in_the_window_is_shown_in_its_place_not_in_the_system_text() -> None:
    with Store(":memory:") as store:
        store.append([_marked(0, "user"), Message("assistant", ({"type": "text", "text": "noted"},))])
        store.pin(0)
        compiled = compile_request(store, Recipe(budget_tokens=4000))
        body = payload_json(compiled.request.payload)
        assert [m["role"] for m in body["messages"]] == ["user", "assistant"]  # no system message made of it
        assert compiled.raw_seqs == (0, 1)
