"""Observation masking: old tool outputs as short loud placeholders, calls and reasoning raw."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import CapturingSummarizer, check_tool_pairing, histories, payload_json

from compaction import Message, OverBudget, Recipe, Store, compile_request, compress_and_compile
from compaction.masking import MIN_MASKED_CHARS, mask_blocks, masked_placeholder

CALLS = {"t1": ("Bash", {"command": "pytest -q tests/test_api.py", "timeout": 60}), "t2": ("Read", {"file_path": "src/app.py"})}


def _output(lines: int, first: str = "collected 12 items") -> str:
    return "\n".join([first, *(f"line {i}: some output of the test run" for i in range(lines))])


def test_placeholder_names_tool_argument_size_status_and_first_line() -> None:
    text = _output(30) + "\nProcess exited with code 1"
    shown = masked_placeholder(text, 0, name="Bash", arguments={"command": "pytest -q"}, is_error=True, seq=41)
    assert shown.startswith("[tool output masked to save context: Bash command='pytest -q' returned 32 lines,")
    assert f"{len(text)} characters" in shown
    assert "marked an error" in shown and "exit status 1" in shown
    assert 'first line: "collected 12 items"' in shown
    assert shown.endswith("message 41 holds it whole]")


def test_mask_blocks_masks_long_outputs_only_and_keeps_ids_and_error_flags() -> None:
    long = {"type": "tool_result", "tool_use_id": "t1", "content": _output(40), "is_error": True}
    short = {"type": "tool_result", "tool_use_id": "t2", "content": "ok"}
    text = {"type": "text", "text": "and here is what I think"}
    masked = mask_blocks([long, short, text], CALLS, seq=7)
    assert masked is not None
    assert masked[0]["tool_use_id"] == "t1" and masked[0]["is_error"] is True
    assert masked[0]["content"].startswith("[tool output masked to save context: Bash command='pytest -q tests/test_api.py'")
    assert masked[1] is short and masked[2] is text
    assert mask_blocks([short, text], CALLS) is None
    assert len("x" * (MIN_MASKED_CHARS - 1)) < MIN_MASKED_CHARS


def test_never_mask_tools_stay_raw_and_images_are_counted() -> None:
    read = {"type": "tool_result", "tool_use_id": "t2", "content": _output(50)}
    assert mask_blocks([read], CALLS, never_mask=["Read"]) is None
    shot = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "screenshot"}, {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}],
    }
    masked = mask_blocks([shot], CALLS)
    assert masked is not None and "1 image" in masked[0]["content"]


def _agent_history(rounds: int, output_lines: int = 60) -> list[Message]:
    messages = [Message("user", ({"type": "text", "text": "Fix every failing test in the billing service"},))]
    for index in range(rounds):
        use_id = f"call_{index}"
        messages.append(
            Message(
                "assistant",
                (
                    {"type": "text", "text": f"Round {index}: running the next check."},
                    {"type": "tool_use", "id": use_id, "name": "Bash", "input": {"command": f"pytest tests/test_{index}.py"}},
                ),
            )
        )
        output = _output(output_lines, first=f"== round {index} output ==")
        messages.append(Message("user", ({"type": "tool_result", "tool_use_id": use_id, "content": output},)))
    messages.append(Message("assistant", ({"type": "text", "text": "All checks ran."},)))
    return messages


def _tool_contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_masking_comes_before_summarizing_and_keeps_the_newest_rounds_raw() -> None:
    store = Store(":memory:")
    store.append(_agent_history(12))
    raw = compile_request(store, Recipe(budget_tokens=100_000))
    assert not raw.masked_seqs
    recipe = Recipe(budget_tokens=raw.tokens // 2, mask_keep_rounds=2)
    compiled, ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer(), mode="replan")
    assert ticks == [] and not compiled.summaries and compiled.live_start == 0  # no summarizer call at all
    assert compiled.masked_seqs and compiled.tokens <= recipe.budget_tokens
    body = payload_json(compiled.request.payload)
    contents = _tool_contents(body)
    assert contents[-1].startswith("== round 11 output ==") and contents[-2].startswith("== round 10 output ==")
    assert contents[0].startswith("[tool output masked to save context: Bash command='pytest tests/test_0.py'")
    # the fewest rounds are masked: one fewer would not fit
    masked_rounds = sum(c.startswith("[tool output masked") for c in contents)
    assert 0 < masked_rounds <= 10
    check_tool_pairing(body, "openai")
    # the calls and the assistant's text stay raw
    assert sum("Round " in (m.get("content") or "") for m in body["messages"] if m["role"] == "assistant") == 13 - 1
    # the store keeps every byte: a big budget shows the outputs again
    assert compile_request(store, Recipe(budget_tokens=100_000)).request.payload == raw.request.payload


def test_masking_off_summarizes_instead() -> None:
    store = Store(":memory:")
    store.append(_agent_history(12))
    raw = compile_request(store, Recipe(budget_tokens=100_000))
    recipe = Recipe(budget_tokens=raw.tokens // 2, observation_masking=False, chunk_target_tokens=800)
    compiled, ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer(), mode="replan")
    assert compiled.summaries and not compiled.masked_seqs


def test_the_masked_stretch_is_fixed_between_events() -> None:
    store = Store(":memory:")
    store.append(_agent_history(12))
    raw = compile_request(store, Recipe(budget_tokens=100_000))
    recipe = Recipe(budget_tokens=raw.tokens * 2 // 3, mask_keep_rounds=2)
    first, _ = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
    assert first.masked_seqs
    store.append(
        [
            Message("assistant", ({"type": "tool_use", "id": "late", "name": "Bash", "input": {"command": "ls"}},)),
            Message("user", ({"type": "tool_result", "tool_use_id": "late", "content": "a.py\nb.py"},)),
        ]
    )
    second, ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
    assert ticks == [] and second.masked_seqs == first.masked_seqs
    one, two = payload_json(first.request.payload)["messages"], payload_json(second.request.payload)["messages"]
    assert two[: len(one) - 1] == one[:-1]  # the prefix holds (the newest message carries a cache hint)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    messages=histories(min_turns=3, max_turns=12),
    budget=st.integers(min_value=300, max_value=4000),
    keep=st.integers(min_value=1, max_value=3),
    output=st.sampled_from(["openai", "anthropic"]),
)
def test_masking_never_separates_a_call_from_its_result_nor_touches_the_newest_round(
    messages: list[Message], budget: int, keep: int, output: str
) -> None:
    store = Store(":memory:")
    try:
        store.append(messages)
        recipe = Recipe(budget_tokens=budget, mask_keep_rounds=keep, chunk_target_tokens=200, output_format=output)  # type: ignore[arg-type]
        try:
            compiled, _ = compress_and_compile(store, recipe, summarizer=CapturingSummarizer(), mode="replan")
        except OverBudget:
            return
        body = payload_json(compiled.request.payload)
        check_tool_pairing(body, output)
        stored = store.messages()
        rounds = [m.seq for m in stored if m.role == "assistant" and any(b.get("type") == "tool_use" for b in m.content)]
        if rounds:
            assert all(seq < rounds[-1] for seq in compiled.masked_seqs)
        for seq in compiled.masked_seqs:
            assert compiled.live_start <= seq and any(b.get("type") == "tool_result" for b in stored[seq].content)
        assert compiled.tokens <= budget
    finally:
        store.close()
