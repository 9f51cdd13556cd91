"""compress_and_compile: summarize only what the budget needs, and stop when it cannot help."""

from __future__ import annotations

import pytest

from compaction import OverBudget, Recipe, Store, compress_and_compile
from compaction.blocks import Message
from compaction.summarizers.base import SummaryResult
from compaction.wire import GatedRequest


def _history(turns: int) -> list[Message]:
    out = []
    for i in range(turns):
        out.append(Message("user", ({"type": "text", "text": f"question {i}: " + "why does it fail " * 8},)))
        out.append(Message("assistant", ({"type": "text", "text": f"answer {i}: " + "because of the cache " * 8},)))
    return out


class _Verbose:
    """A summarizer whose summaries are longer than what they cover."""

    name = "verbose"
    request_format = "openai"
    model = None
    max_output_tokens = None

    def summarize(self, request: GatedRequest, *, kind: str) -> SummaryResult:
        return SummaryResult("Done:\n- " + "the same words again " * 60, {"summarizer": self.name})

    def close(self) -> None:
        pass


def test_a_store_that_fits_is_compiled_without_summarizing() -> None:
    with Store(":memory:") as store:
        store.append(_history(3))
        compiled, ticks = compress_and_compile(store, Recipe(budget_tokens=4000))
        assert ticks == [] and store.summaries() == [] and compiled.live_start == 0


# An event's target is the recipe's low-water mark, int(1500 * 0.7) = 1050 tokens (the default
# ratio since 6abb1f4; this test said 900, the old 60%, and passed only while summaries came out
# under their bound).
@pytest.mark.parametrize("mode,target", [("replan", 1500), ("events", int(1500 * Recipe().low_water_ratio))])
def test_only_what_the_budget_needs_is_summarized_and_a_second_call_reuses_it(mode: str, target: int) -> None:
    """Re-planning summarizes what the budget needs; an event what the low-water mark (70%) needs."""
    with Store(":memory:") as store:
        store.append(_history(40))
        # Every user turn here is an ask; the ask ledger (tested in test_ledger.py) would list
        # them and leave less room for raw messages, so it is off to test the ladder alone.
        recipe = Recipe(budget_tokens=1500, chunk_target_tokens=300, ask_ledger=False)
        compiled, ticks = compress_and_compile(store, recipe, mode=mode)  # type: ignore[arg-type]
        assert compiled.tokens <= target and compiled.live_start > 0 and ticks
        # the newest half of the target (about ten or six of these ~70-token messages) was not summarized
        assert max(s.end_seq for s in store.summaries(level=1)) <= compiled.total_messages - target // 200
        again, more = compress_and_compile(store, recipe, mode=mode)  # type: ignore[arg-type]
        assert more == [] and again.request.payload == compiled.request.payload
        assert len(store.events()) == (1 if mode == "events" else 0)
        if mode == "events":
            assert store.events()[0].detail["low_water"] == target == 1050


def test_summaries_that_do_not_shrink_the_request_stop_with_a_clear_error() -> None:
    with Store(":memory:") as store:
        store.append(_history(12))
        before = store.messages()
        recipe = Recipe(budget_tokens=300, chunk_target_tokens=100, merge_fanout=50)
        with pytest.raises(OverBudget, match="compaction made no progress") as caught:
            compress_and_compile(store, recipe, summarizer=_Verbose())
        assert caught.value.budget == 300 and caught.value.needed > 300
        assert store.messages() == before  # the store keeps every message


@pytest.mark.parametrize("mode", ["events", "replan"])
def test_a_newest_turn_that_answers_calls_and_then_asks_stays_raw(mode: str) -> None:
    """Anthropic-shaped agents put the results and the next ask in one user turn: it is the prompt."""
    with Store(":memory:") as store:
        for turn in range(30):
            store.append(
                [
                    Message(
                        "user",
                        (
                            {"type": "tool_result", "tool_use_id": f"c{turn - 1}", "content": "ok " * 40},
                            {"type": "text", "text": f"ask {turn}: now refactor module {turn}"},
                        )
                        if turn
                        else ({"type": "text", "text": "ask 0: start the refactor"},),
                    ),
                    Message(
                        "assistant",
                        ({"type": "tool_use", "id": f"c{turn}", "name": "bash", "input": {"cmd": f"step {turn}"}},),
                    ),
                ]
            )
        store.append(
            [
                Message(
                    "user",
                    (
                        {"type": "tool_result", "tool_use_id": "c29", "content": "ok " * 40},
                        {"type": "text", "text": "ask 30: and the last one"},
                    ),
                )
            ]
        )
        recipe = Recipe(budget_tokens=1200, chunk_target_tokens=200, output_format="anthropic")
        compiled, ticks = compress_and_compile(store, recipe, mode=mode)  # type: ignore[arg-type]
        assert ticks and compiled.summaries
        assert compiled.live_start < store.next_seq() - 1
        last = compiled.request.body()["messages"][-1]["content"]
        assert [b["type"] for b in last] == ["tool_result", "text"] and last[1]["text"] == "ask 30: and the last one"
