"""Compaction in events (issue #12, item 1): between two events a request only grows at its end.

Generated conversations are appended turn by turn as an agent loop does (append what is new,
compile, send); between two recorded events each request's messages start with the previous
request's messages, byte for byte (prompt-cache markers aside, which move to the newest
message); every request fits the budget, keeps coverage and the provider's grammar; a store
reopened in another process compiles the same request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_turns import strip_markers, turns_of
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from strategies import CapturingSummarizer, check_provider_grammar, histories

from compaction import Message, OverBudget, Recipe, Store, load_transcript
from compaction.events import Frame, compile_in_events, latest_frame

EXAMPLES = Path(__file__).parent.parent / "examples"


def _replay(store: Store, messages: list[Message], recipe: Recipe) -> list[tuple[int, dict[str, Any]]]:
    """Append turn by turn, compiling before each; return (events so far, body) per request."""
    out = []
    for turn in turns_of(messages):
        store.append(turn, chain_seed=str(len(store)))
        compiled, _ticks = compile_in_events(store, recipe, CapturingSummarizer)
        assert compiled.tokens <= recipe.budget_tokens  # type: ignore[operator]
        out.append((len(store.events()), compiled.request.body()))
    return out


def _assert_extends(old: dict[str, Any], new: dict[str, Any]) -> None:
    """The previous request's last message is the start of this request's message there.

    A turn of one role that continues (two assistant messages in a row) renders as one
    message whose content grows at its end; the bytes before the growth are unchanged.
    """
    assert old["role"] == new["role"]
    if old == new:
        return
    before, after = old.get("content"), new.get("content")
    if isinstance(before, list):
        assert isinstance(after, list) and after[: len(before)] == before
    elif isinstance(before, str):
        assert isinstance(after, str) and after.startswith(before)
    calls = old.get("tool_calls") or []
    assert (new.get("tool_calls") or [])[: len(calls)] == calls


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    messages=histories(min_turns=4, max_turns=14),
    budget=st.integers(min_value=1500, max_value=6000),
    fmt=st.sampled_from(["openai", "anthropic"]),
    low=st.sampled_from([0.4, 0.6, 0.8]),
)
def test_between_events_each_request_extends_the_previous(messages: list[Message], budget: int, fmt: str, low: float) -> None:
    recipe = Recipe(
        budget_tokens=budget, output_format=fmt, low_water_ratio=low,  # type: ignore[arg-type]
        chunk_target_tokens=300, chunk_min_messages=2, merge_fanout=3, summary_max_tokens=120,
    )
    store = Store(":memory:")
    try:
        try:
            requests = _replay(store, messages, recipe)
        except OverBudget as err:
            event(f"over budget ({err.stage})")
            return
        events = requests[-1][0]
        event(f"events: {min(events, 3)}")
        for (events_before, before), (events_after, after) in zip(requests, requests[1:], strict=False):
            check_provider_grammar(after, fmt)
            if events_after != events_before:
                continue
            old, new = strip_markers(before), strip_markers(after)
            assert old.get("system") == new.get("system")
            if not old["messages"]:
                continue
            kept = len(old["messages"]) - 1
            assert new["messages"][:kept] == old["messages"][:kept], "the prefix changed between events"
            _assert_extends(old["messages"][kept], new["messages"][kept])
    finally:
        store.close()


def test_an_event_is_recorded_with_its_frame_and_a_reopened_store_resumes_it(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    messages = load_transcript(EXAMPLES / "pi__pi-mono__before-compaction.jsonl").messages[:300]
    recipe = Recipe(budget_tokens=16000)
    with Store(path) as store:
        requests = _replay(store, messages, recipe)
        events = store.events()
        assert events and requests[-1][0] == len(events)
        frame = latest_frame(store)
        assert frame is not None and frame.cut > 0 and frame.cover
        last = events[-1]
        assert last.tokens_before > recipe.budget_tokens >= last.tokens_after  # type: ignore[operator]
        assert last.tokens_after <= int(16000 * recipe.low_water_ratio) or last.detail.get("low_water")
        here = compile_in_events(store, recipe, CapturingSummarizer)[0].request.payload
    code = (
        "import sys\n"
        "from compaction import Recipe, Store\n"
        "from compaction.events import compile_in_events\n"
        "from compaction.summarizers.extractive import ExtractiveSummarizer\n"
        "with Store(sys.argv[1], create=False) as store:\n"
        "    c, _ = compile_in_events(store, Recipe(budget_tokens=16000), lambda: ExtractiveSummarizer('o200k_base'))\n"
        "    sys.stdout.buffer.write(c.request.payload)\n"
    )
    there = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, check=True).stdout
    assert there == here
    assert Frame.from_json(json.loads(json.dumps(frame.to_json()))) == frame


def test_events_keep_far_more_of_the_prefix_than_replanning() -> None:
    """On a real session at 32k, events change the prefix far less often than re-planning."""
    from compaction.pipeline import compress_and_compile

    messages = load_transcript(EXAMPLES / "pi__pi-mono__before-compaction.jsonl").messages[:500]
    recipe = Recipe(budget_tokens=32000)
    with Store(":memory:") as store:
        events_bodies = [body for _e, body in _replay(store, messages, recipe)]
    replanned = []
    with Store(":memory:") as store:
        for turn in turns_of(messages):
            store.append(turn, chain_seed=str(len(store)))
            replanned.append(compress_and_compile(store, recipe, mode="replan")[0].request.body())

    def breaks(bodies: list[dict[str, Any]]) -> int:
        return sum(
            1 for a, b in zip(bodies, bodies[1:], strict=False) if b["messages"][: len(a["messages"])] != a["messages"]
        )

    assert breaks(events_bodies) * 3 < breaks(replanned)
