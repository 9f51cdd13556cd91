"""Plan == gate for histories with unanswered calls and results without calls (DESIGN.md invariant 10).

The gate's pairing repair ships a ``tool_use`` that no result of the next turn answers (an
agent killed mid-call leaves one), and a ``tool_result`` that answers no call of the turn
before (its call summarized away, or never stored), as loud text stand-ins, and counts each
changed message as it then reads.  The compile planner prices the same stand-ins
(``WindowPlanner.orphan_tokens``, from :func:`compaction.pairing.orphan_tool_slots`, the
function the repair itself applies), so on such histories, at every live-window cut, with
tool outputs masked or not, in every request format:

* the planner's price of a compiled request equals the gate's count;
* a request compiled at a budget of exactly that price fits it and ships the same bytes;
* an independent count of the shipped body never exceeds the reported tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from strategies import WORDS, independent_tokens, payload_json, png_b64
from tool_histories import FORMATS, ROOMY
from tool_histories import call as _call
from tool_histories import frame as _frame
from tool_histories import recipe as _recipe
from tool_histories import result as _result
from tool_histories import text as _text

from compaction import Message, Store, compile_request
from compaction.compile import CompiledRequest, raw_history_tokens, resolve_target
from compaction.pairing import orphan_tool_slots, repair_tool_pairing, tool_ids_of
from compaction.planning import WindowPlanner

#: a small pool, so ids repeat and results meet calls they do not answer
POOL = ["toolu_01", "toolu_02", "call_3"]
_WORDS = list(WORDS)


def _image(number: int) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": png_b64(16 * (1 + number), 16, number),
        },
    }


def _summarize_each(store: Store, n: int) -> None:
    """Store an L1 summary of each message alone, so a live window may start at any seq."""
    for seq in range(n):
        store.add_summary(1, seq, seq + 1, f"Done: message {seq}.", {})


def _check(compiled: CompiledRequest, exact: CompiledRequest | None = None) -> list[str]:
    """Assert plan == gate (and the exact fit) for one request; return its tool repairs' kinds."""
    assert compiled.planned_tokens == compiled.tokens
    body = payload_json(compiled.request.payload)
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens
    if exact is not None:
        assert exact.tokens == compiled.tokens <= exact.budget == compiled.planned_tokens
        assert exact.request.payload == compiled.request.payload
    return [r.kind for r in compiled.request.replacements if r.kind != "image"]


# -- the pairing repair and the planner name the same orphans -----------------------------------


def test_orphan_tool_slots_names_what_the_repair_ships_as_stand_ins() -> None:
    messages = [
        ("user", [_text("go"), _result("early")]),  # answers no call: nothing before it
        ("assistant", [_call("a"), _text("and"), _call("b")]),
        ("user", [_result("b"), _result("a"), _result("a")]),  # the second result of a answers nothing
        ("assistant", [_call("c")]),  # killed mid-call: never answered
    ]
    slots = orphan_tool_slots(tool_ids_of(messages))
    assert slots == [(0, "tool_result", 0), (2, "tool_result", 2), (3, "tool_use", 0)]
    reports: list[tuple[str, int]] = []
    repaired = repair_tool_pairing(messages, lambda kind, _reason, index: reports.append((kind, index)))
    assert reports == [("orphan_tool_result", 0), ("orphan_tool_result", 2), ("orphan_tool_use", 3)]
    assert repaired[0][1][1] == _text("[result of tool call early, whose call is not in this request]\nok")
    assert repaired[2][1][:2] == messages[2][1][:2]
    assert repaired[2][1][2]["type"] == "text" and repaired[2][1][2]["text"].startswith(
        "[result of tool call a,"
    )
    assert repaired[3][1] == [
        _text('[tool call read_file (id c) with input {"path":"src/app.py"}; no result was recorded for it]')
    ]
    # the turns may be given, for the messages with tool blocks alone
    assert orphan_tool_slots(tool_ids_of(messages[1:3]), [5, 7]) == [
        (0, "tool_use", 0),
        (0, "tool_use", 1),
    ] + [(1, "tool_result", k) for k in range(3)]


# -- the shapes by hand, in each format ----------------------------------------------------------------


def _killed_mid_call() -> list[Message]:
    return [
        Message("user", [_text("read the files and fix the failing test")]),
        Message("assistant", [_text("reading"), _call("toolu_01")]),
        Message("user", [_result("toolu_01", "def f(): pass")]),
        Message("assistant", [_text("now the test"), _call("toolu_02", "tests/test_app.py")]),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_agent_killed_mid_call_is_planned_as_shipped(fmt: str) -> None:
    messages = _killed_mid_call()
    with Store(":memory:") as store:
        store.append(messages)
        recipe = _recipe(fmt)
        roomy = compile_request(store, recipe)
        assert roomy.live_start == 0
        assert _check(roomy, compile_request(store, recipe, budget=roomy.planned_tokens)) == [
            "orphan_tool_use"
        ]
        assert raw_history_tokens(store, recipe) == roomy.tokens
        planner = WindowPlanner(store, recipe, ROOMY, *resolve_target(recipe))
        assert planner.orphan_tokens(0) > 0  # the stand-in is longer than the call it replaces
        assert planner.orphan_tokens(0) == planner.suffix(0) - sum(planner.message_cost(s) for s in range(4))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_result_whose_call_is_summarized_away_is_planned_as_shipped(fmt: str) -> None:
    messages = [
        *_killed_mid_call()[:3],
        Message("user", [_text("thanks")]),
        Message("assistant", [_text("done")]),
    ]
    with Store(":memory:") as store:
        store.append(messages)
        _summarize_each(store, len(messages))
        recipe = _recipe(fmt)
        planner = WindowPlanner(store, recipe, ROOMY, *resolve_target(recipe))
        assert planner.orphan_tokens(3) == planner.orphan_tokens(1) == 0  # the call and its result together
        assert planner.orphan_tokens(2) != 0  # the call summarized away, its result in the window
        compiled, exact = _frame(store, recipe, 2)
        assert _check(compiled, exact) == ["orphan_tool_result"]
        assert compiled.summaries and compiled.live_start == 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_orphan_result_with_an_image_and_a_masked_output_is_planned_as_shipped(fmt: str) -> None:
    long_output = " ".join(_WORDS) * 40
    messages = [
        Message("user", [_text("look"), _result("gone", [_text("screen"), _image(1)])]),
        Message("assistant", [_call("toolu_01")]),
        Message("user", [_result("toolu_01", long_output), _result("toolu_09", long_output)]),
        Message("assistant", [_text("ok")]),
        Message("user", [_result("late", long_output)]),
    ]
    with Store(":memory:") as store:
        store.append(messages)
        _summarize_each(store, len(messages))
        for vision in (True, False):
            recipe = _recipe(fmt, vision=vision)
            for mask_before in (0, len(messages)):
                for cut in range(len(messages)):
                    compiled, exact = _frame(store, recipe, cut, mask_before=mask_before)
                    assert "orphan_tool_result" in _check(compiled, exact)


# -- generated histories, every cut --------------------------------------------------------------------


@st.composite
def orphan_histories(draw: Any) -> list[Message]:
    """Tool turns whose calls a random subset of results answers, with results whose call is
    missing, consecutive messages of one role, system notes, images in results and trailing
    whitespace; the newest message may be an assistant's unanswered call."""
    messages = [Message("user", [_text("go")])]
    for number in range(draw(st.integers(min_value=1, max_value=5))):
        calls = draw(st.lists(st.sampled_from(POOL), max_size=3))
        note = draw(st.sampled_from(["", "", f"round {number}", "thinking  \n\n"]))
        blocks: list[dict[str, Any]] = ([_text(note)] if note else []) + [
            _call(t, draw(st.sampled_from(_WORDS))) for t in calls
        ]
        if not blocks:
            blocks = [_text("ok")]
        if draw(st.booleans()) and len(blocks) > 1:  # one turn in two assistant messages
            split = draw(st.integers(min_value=1, max_value=len(blocks) - 1))
            messages += [Message("assistant", blocks[:split]), Message("assistant", blocks[split:])]
        else:
            messages.append(Message("assistant", blocks))
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            messages.append(Message("system", [_text("the sandbox restarted")]))
        answered = draw(st.lists(st.sampled_from(POOL), max_size=3))  # some answer a call, some none
        results = []
        for tool_id in answered:
            shape = draw(st.sampled_from(["short", "long", "image"]))
            words = " ".join(draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6)))
            if shape == "long":  # long enough to be masked
                content: Any = words * (1 + 400 // len(words))
            elif shape == "image":
                content = [_text(words), _image(number)]
            else:
                content = words
            results.append(_result(tool_id, content))
        if results:
            messages.append(Message("user", results))
        if draw(st.booleans()):
            messages.append(Message("user", [_text(draw(st.sampled_from(_WORDS)))]))
    if draw(st.booleans()):  # the agent was killed mid-call
        messages.append(Message("assistant", [_text("next  "), _call(draw(st.sampled_from(POOL)))]))
    return messages


def _shapes(messages: list[Message], cut: int) -> list[str]:
    """Name the orphans of a live window from ``cut`` (and of the whole history) for the statistics."""
    shown = [(m.role, list(m.content)) for m in messages[cut:] if m.role != "system"]
    whole = [(m.role, list(m.content)) for m in messages if m.role != "system"]
    kinds: list[str] = []
    repair_tool_pairing(shown, lambda kind, _r, _i: kinds.append(kind))
    before: list[str] = []
    repair_tool_pairing(whole, lambda kind, _r, _i: before.append(kind))
    out = sorted({k for k in kinds if k.startswith("orphan")})
    if kinds.count("orphan_tool_result") > before.count("orphan_tool_result"):
        out.append("an orphan the cut made")
    return out or ["no orphan"]


@pytest.mark.parametrize("fmt", FORMATS)
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(messages=orphan_histories(), masking=st.sampled_from(["none", "all"]), vision=st.booleans())
def test_plan_equals_gate_with_orphans_at_every_cut(
    fmt: str, messages: list[Message], masking: str, vision: bool
) -> None:
    with Store(":memory:") as store:
        store.append(messages)
        n = len(messages)
        _summarize_each(store, n)
        recipe = _recipe(fmt, vision=vision)
        mask_before = n if masking == "all" else 0
        for cut in range(n):
            compiled, exact = _frame(store, recipe, cut, mask_before=mask_before)
            for shape in _shapes(messages, cut):
                event(shape)
            _check(compiled, exact)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(messages=orphan_histories(), fmt=st.sampled_from(FORMATS), order=st.randoms(use_true_random=False))
def test_one_planner_asked_cut_after_cut_prices_the_orphans_of_a_fresh_one(
    messages: list[Message], fmt: str, order: Any
) -> None:
    """A planner that reads further back cut after cut (as compile's candidate scan does, or in
    any order) prices each window's stand-ins and joins as a planner that reads it at once."""
    with Store(":memory:") as store:
        store.append(messages)
        recipe = _recipe(fmt)
        target = resolve_target(recipe)
        cuts = list(range(len(messages) - 1, -1, -1))
        if order.random() < 0.5:
            order.shuffle(cuts)
        shared = WindowPlanner(store, recipe, ROOMY, *target)
        for cut in cuts:
            fresh = WindowPlanner(store, recipe, ROOMY, *target)
            assert shared.orphan_tokens(cut) == fresh.orphan_tokens(cut), cut
            assert shared.suffix(cut) == fresh.suffix(cut)
            assert shared.merge_saving(cut) == fresh.merge_saving(cut)
        event(
            "an orphan in the whole history" if shared.orphan_tokens(0) else "no orphan in the whole history"
        )


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cut_inside_a_turn_of_calls_is_planned_as_shipped(fmt: str) -> None:
    # one assistant turn in two messages: a cut between them leaves the first call's result
    # without its call, and the planner, having read further back, must not pair it
    messages = [
        Message("user", [_text("go")]),
        Message("assistant", [_call("toolu_01")]),
        Message("assistant", [_text("and"), _call("toolu_02")]),
        Message("user", [_result("toolu_01"), _result("toolu_02")]),
        Message("assistant", [_text("both read")]),
    ]
    with Store(":memory:") as store:
        store.append(messages)
        _summarize_each(store, len(messages))
        recipe = _recipe(fmt)
        shared = WindowPlanner(store, recipe, ROOMY, *resolve_target(recipe))
        assert shared.orphan_tokens(0) == 0  # read from the start: every call answered
        assert shared.orphan_tokens(2) > 0  # toolu_01's call summarized away
        assert shared.orphan_tokens(2) == WindowPlanner(
            store, recipe, ROOMY, *resolve_target(recipe)
        ).orphan_tokens(2)
        compiled, exact = _frame(store, recipe, 2)
        assert _check(compiled, exact) == ["orphan_tool_result"]
