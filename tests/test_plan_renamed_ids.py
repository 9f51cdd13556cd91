"""Plan == gate for histories that repeat a tool id (DESIGN.md invariant 10).

The gate's pairing repair sends a tool call whose id an earlier call of the request already
used, and its result, under a fresh id (``<id>_2``, ``_3``, ...) and counts the two messages as
they then read.  The compile planner prices the same renames (``WindowPlanner.renaming_tokens``,
from :func:`compaction.pairing.renamed_tool_ids`), so on histories with repeated tool ids, in
every request format:

* the planner's price of a compiled request equals the gate's count, whatever the live window
  (repeats inside it, repeats only in the summarized stretch, a repeat whose first call is
  summarized away, an id used three times, an id that collides with a renamed one);
* a request planned at exactly its price fits that budget and ships the same bytes;
* an independent count of the shipped body never exceeds the reported tokens.
"""

from __future__ import annotations

import json
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

from compaction import Message, OverBudget, Recipe, Store, compile_request
from compaction.blocks import DATA_URI_RE
from compaction.compile import CompiledRequest, raw_history_tokens
from compaction.inspect import inspect_compiled
from compaction.pairing import ToolIds, renamed_tool_ids, repair_tool_pairing, tool_id_fits, tool_ids_of
from compaction.planning import WindowPlanner

#: Tool ids an agent loop might reuse; ``toolu_01_2`` is what a renamed ``toolu_01`` would be sent as.
POOL = ["toolu_01", "toolu_02", "toolu_01_2", "1", "调用"]
_WORDS = list(WORDS)


def _round(ids: list[str], note: str = "") -> list[Message]:
    """One tool round: an assistant turn calling ``ids``, the user turn answering them."""
    calls: list[dict[str, Any]] = ([_text(note)] if note else []) + [_call(t) for t in ids]
    return [Message("assistant", calls), Message("user", [_result(t, f"contents of {t}") for t in ids])]


def _summarize(store: Store, boundaries: list[int]) -> None:
    """Store an L1 summary of each stretch between consecutive ``boundaries`` (seqs)."""
    for start, end in zip(boundaries, boundaries[1:], strict=False):
        store.add_summary(1, start, end, f"Done: messages {start} to {end - 1}.", {})


def _target(recipe: Recipe) -> tuple[Any, str]:
    from compaction.compile import resolve_target

    return resolve_target(recipe)


def _check(compiled: CompiledRequest, exact: CompiledRequest | None = None) -> list[str]:
    """Assert plan == gate (and the exact fit) for one request; return the renamed ids it ships."""
    kinds = {r.kind for r in compiled.request.replacements}
    assert kinds <= {"image", "renamed_tool_id"}, kinds  # these histories hold no orphan
    assert compiled.planned_tokens == compiled.tokens
    body = payload_json(compiled.request.payload)
    assert independent_tokens(body, compiled.request.model) <= compiled.tokens
    if exact is not None:
        assert exact.tokens == compiled.tokens <= exact.budget == compiled.planned_tokens
        assert exact.request.payload == compiled.request.payload
    return [r.reason.rsplit(" ", 1)[-1] for r in compiled.request.replacements if r.kind == "renamed_tool_id"]


# -- the pairing repair and the planner name the same renames --------------------------------------


def test_renamed_tool_ids_names_what_the_repair_sends() -> None:
    messages = [
        ("assistant", [_call("a"), _call("a_2")]),
        ("user", [_result("a"), _result("a_2")]),
        ("assistant", [_call("a")]),
        ("user", [_result("a")]),
        ("assistant", [_text("again"), _call("a")]),
        ("user", [_text("here"), _result("a")]),
    ]
    renamed = renamed_tool_ids(tool_ids_of(messages))
    # a_2 is another call's id, so the second reuse of a skips it; ordinals count blocks of one type
    assert renamed == {
        (2, "tool_use", 0): "a_3",
        (3, "tool_result", 0): "a_3",
        (4, "tool_use", 0): "a_4",
        (5, "tool_result", 0): "a_4",
    }
    repaired = repair_tool_pairing(messages, lambda *_: None)
    assert repaired[2][1][0]["id"] == "a_3" and repaired[3][1][0]["tool_use_id"] == "a_3"
    assert repaired[4][1][1]["id"] == "a_4" and repaired[5][1][1]["tool_use_id"] == "a_4"
    assert repaired[0] == messages[0] and repaired[1] == messages[1]
    # messages without tool blocks may be left out when their turns are given
    kept = [ToolIds("assistant", ["a"], []), ToolIds("user", [], ["a"]), ToolIds("assistant", ["a"], [])]
    assert renamed_tool_ids([*kept, ToolIds("user", [], ["a"])], [0, 1, 4, 5]) == {
        (2, "tool_use", 0): "a_2",
        (3, "tool_result", 0): "a_2",
    }
    assert renamed_tool_ids([*kept, ToolIds("user", [], ["a"])], [0, 1, 4, 6]) == {}  # not answered next turn


# -- the four shapes by hand, in each format ------------------------------------------------------------


def _history(rounds: list[list[str]]) -> tuple[list[Message], list[int]]:
    """An ask, then each round with a user note after it; return the messages and each round's start seq."""
    messages = [Message("user", [_text("read the files and fix the failing test")])]
    starts = []
    for number, ids in enumerate(rounds):
        starts.append(len(messages))
        messages += _round(ids, f"step {number}")
        messages.append(Message("user", [_text(f"good, now step {number + 1}")]))
    return messages, starts


@pytest.mark.parametrize("fmt", FORMATS)
def test_repeats_in_the_live_window_are_planned_as_shipped(fmt: str) -> None:
    messages, _starts = _history([["toolu_01", "toolu_02"], ["toolu_01"], ["toolu_02"]])
    with Store(":memory:") as store:
        store.append(messages)
        recipe = _recipe(fmt)
        roomy = compile_request(store, recipe)
        assert roomy.live_start == 0
        assert _check(roomy, compile_request(store, recipe, budget=roomy.planned_tokens)) == [
            "toolu_01_2",
            "toolu_02_2",
        ]
        assert raw_history_tokens(store, recipe) == roomy.tokens
        with pytest.raises(OverBudget):  # one token less: the whole history raw no longer fits
            compile_request(store, recipe, budget=roomy.tokens - 1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_id_used_three_times_is_planned_as_shipped(fmt: str) -> None:
    messages, _starts = _history([["toolu_01"], ["toolu_01"], ["toolu_01", "toolu_01_2"]])
    with Store(":memory:") as store:
        store.append(messages)
        recipe = _recipe(fmt)
        roomy = compile_request(store, recipe)
        # the third use skips toolu_01_2, which a call of the request carries
        assert _check(roomy, compile_request(store, recipe, budget=roomy.planned_tokens)) == [
            "toolu_01_3",
            "toolu_01_4",
        ]
        body = json.dumps(payload_json(roomy.request.payload))
        assert body.count('toolu_01_2"') >= 2  # the call that owns toolu_01_2 keeps it, with its result


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_repeat_whose_first_call_is_summarized_away_keeps_its_id(fmt: str) -> None:
    messages, starts = _history([["toolu_01"], ["toolu_02"], ["toolu_01"], ["toolu_02"]])
    with Store(":memory:") as store:
        store.append(messages)
        _summarize(store, [0, starts[1], starts[2]])
        recipe = _recipe(fmt)
        inside, exact = _frame(store, recipe, starts[1])  # toolu_01's first round summarized, toolu_02's not
        assert _check(inside, exact) == ["toolu_02_2"]
        across, exact = _frame(store, recipe, starts[2])  # both first uses summarized: nothing renamed
        assert _check(across, exact) == []
        assert across.summaries and across.live_start == starts[2]


@pytest.mark.parametrize("fmt", FORMATS)
def test_repeats_only_in_the_summarized_stretch_cost_nothing(fmt: str) -> None:
    messages, starts = _history([["toolu_01"], ["toolu_01"], ["toolu_01"], ["toolu_02"]])
    with Store(":memory:") as store:
        store.append(messages)
        _summarize(store, [0, starts[1], starts[2], starts[3]])
        recipe = _recipe(fmt)
        planner = WindowPlanner(store, recipe, ROOMY, *_target(recipe))
        assert planner.renaming_tokens(starts[3]) == 0  # toolu_01's three uses are all summarized
        assert planner.renaming_tokens(starts[2]) == 0  # one use left in the window
        assert planner.renaming_tokens(starts[1]) > 0  # two uses in the window: the second renamed
        compiled, exact = _frame(store, recipe, starts[3])
        assert _check(compiled, exact) == []
        compiled, exact = _frame(store, recipe, starts[1])
        assert _check(compiled, exact) == ["toolu_01_2"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_system_message_between_a_call_and_its_result_leaves_the_turns_as_shipped(fmt: str) -> None:
    # a system message ships in the system text, so the call and the result after it are
    # adjacent turns of the request, and the planner numbers turns without it too
    messages = [
        Message("user", [_text("go")]),
        Message("assistant", [_call("t")]),
        Message("system", [_text("the sandbox restarted")]),
        Message("user", [_result("t")]),
        Message("assistant", [_call("t")]),
        Message("system", [_text("the sandbox restarted again")]),
        Message("user", [_result("t")]),
    ]
    with Store(":memory:") as store:
        store.append(messages)
        recipe = _recipe(fmt)
        roomy = compile_request(store, recipe)
        assert _check(roomy, compile_request(store, recipe, budget=roomy.planned_tokens)) == ["t_2"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_inspect_names_the_renames_as_pairing_repairs(fmt: str) -> None:
    messages, _starts = _history([["toolu_01"], ["toolu_01"], ["toolu_01"]])
    with Store(":memory:") as store:
        store.append(messages)
        recipe = _recipe(fmt)
        compiled = compile_request(store, recipe)
        planner = WindowPlanner(store, recipe, ROOMY, *_target(recipe))
        renaming = planner.renaming_tokens(0)
        assert renaming > 0 and planner.suffix(0) == renaming + sum(
            planner.message_cost(s) for s in range(len(messages))
        )
        parts = {p.name: p.tokens for p in inspect_compiled(store, recipe, compiled).composition}
        assert parts["pairing repairs"] == renaming  # not counted as images of the renamed messages
        assert parts["images"] == 0
        assert sum(parts.values()) == compiled.tokens


@settings(max_examples=60, deadline=None)
@given(
    # (an id that is a data: image URI fails every compile, renamed or not: the body's image
    # count finds it; a separate bug, left out here)
    tool_id=st.text(min_size=0, max_size=30).filter(lambda t: not DATA_URI_RE.search(t))
    | st.sampled_from(["a" * 40, "x;base64,y", "toolu_01"]),
    uses=st.integers(min_value=2, max_value=4),
    fmt=st.sampled_from(FORMATS),
)
def test_any_reused_id_is_planned_as_shipped(tool_id: str, uses: int, fmt: str) -> None:
    """Whatever the id (empty, short, long, any script), its renames are priced as the gate counts them."""
    messages, _starts = _history([[tool_id]] * uses)
    with Store(":memory:") as store:
        store.append(messages)
        compiled = compile_request(store, _recipe(fmt))
        # an id outside the format's grammar is sent under a valid one from its first use
        assert len(_check(compiled)) == uses - 1 + (not tool_id_fits(tool_id, fmt))


# -- generated histories ------------------------------------------------------------------------


@st.composite
def repeating_histories(draw: Any) -> tuple[list[Message], list[int]]:
    """Tool rounds whose ids are drawn from a small pool (so they repeat), some results long or
    with an image; return the messages and each round's start seq (a safe chunk boundary)."""
    messages = [Message("user", [_text("go")])]
    starts = []
    for number in range(draw(st.integers(min_value=2, max_value=7))):
        ids = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=3, unique=True))
        starts.append(len(messages))
        note = draw(st.sampled_from(["", f"round {number}"]))
        calls: list[dict[str, Any]] = ([_text(note)] if note else []) + [
            _call(t, draw(st.sampled_from(_WORDS))) for t in ids
        ]
        results = []
        for tool_id in ids:
            shape = draw(st.sampled_from(["short", "long", "image"]))
            words = draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=8))
            if shape == "long":  # long enough to be masked
                content: Any = " ".join(words) * (1 + 500 // len(" ".join(words)))
            elif shape == "image":
                content = [
                    _text(" ".join(words)),
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": png_b64(16 * (1 + number), 16, number),
                        },
                    },
                ]
            else:
                content = " ".join(words)
            results.append(_result(tool_id, content))
        messages += [Message("assistant", calls), Message("user", results)]
        if draw(st.booleans()):
            messages.append(
                Message(
                    "user", [_text(" ".join(draw(st.lists(st.sampled_from(_WORDS), max_size=5))) or "next")]
                )
            )
    return messages, starts


def _window_shapes(messages: list[Message], cut: int) -> list[str]:
    """Name where a history's repeated ids fall with respect to a live window from ``cut``."""
    uses: dict[str, list[int]] = {}
    for seq, message in enumerate(messages):
        for block in message.content:
            if block.get("type") == "tool_use":
                uses.setdefault(block["id"], []).append(seq)
    window = [len([s for s in seqs if s >= cut]) for seqs in uses.values()]
    before = [len([s for s in seqs if s < cut]) for seqs in uses.values()]
    shapes = {
        "an id used three times or more in the window": any(n >= 3 for n in window),
        "a repeat in the window": any(n >= 2 for n in window),
        "a repeat whose first call is summarized away": any(
            w and b for w, b in zip(window, before, strict=True)
        ),
        "a repeat in the summarized stretch": any(n >= 2 for n in before),
    }
    return [name for name, present in shapes.items() if present] or ["no repeat"]


@pytest.mark.parametrize("fmt", FORMATS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    drawn=repeating_histories(),
    summarized=st.integers(min_value=0, max_value=6),
    masking=st.sampled_from(["none", "all", "older rounds"]),
    vision=st.booleans(),
    share=st.floats(min_value=0.0, max_value=1.0),
)
def test_plan_equals_gate_with_repeated_tool_ids(
    fmt: str,
    drawn: tuple[list[Message], list[int]],
    summarized: int,
    masking: str,
    vision: bool,
    share: float,
) -> None:
    messages, starts = drawn
    with Store(":memory:") as store:
        store.append(messages)
        boundaries = [0, *starts[1 : 1 + summarized]]
        _summarize(store, boundaries)
        recipe = _recipe(fmt, vision=vision)
        n = len(messages)
        # every window the planner may pick: each chunk start, masked as drawn
        for cut in boundaries[1:] or [0]:
            mask_before = {"none": 0, "all": n, "older rounds": starts[-1]}[masking]
            compiled, exact = _frame(store, recipe, cut, mask_before=mask_before)
            for shape in _window_shapes(messages, cut):
                event(shape)
            if compiled.masked_seqs:
                event("masked tool outputs in the window")
            _check(compiled, exact)
        # the planner's own choice at a budget between the smallest window (the frontier's,
        # unmasked: it fits exactly when plan == gate) and the whole history raw
        smallest, _exact = _frame(store, recipe, boundaries[-1])
        raw = raw_history_tokens(store, recipe)
        chosen = compile_request(store, recipe, budget=smallest.tokens + int((raw - smallest.tokens) * share))
        for shape in _window_shapes(messages, chosen.live_start):
            event(f"chosen window: {shape}")
        _check(chosen)
        # at exactly its planned price the planner may choose another window (its masking tier
        # decides by the budget: a history whose masked window is chosen at 280 tokens gets a
        # summarized one at 259, its own price); that one is planned as shipped too
        again = compile_request(store, recipe, budget=chosen.planned_tokens)
        _check(again)
        assert again.tokens <= chosen.planned_tokens
