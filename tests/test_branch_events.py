"""A branch's first request reuses its parent's cached prefix (compaction/events.py, inherited frames).

A parent conversation is appended turn by turn as an agent loop does and compiled in events
(several events on the way).  It is then forked at turn boundaries: before its first event,
at an event, between two events, at its tip.  Each branch goes on with turns of its own, and:

* its first request opens, byte for byte (system text and messages, cache markers aside),
  with the request the parent sent when it held the fork's messages: the frame of the
  parent's newest event that showed no message past the fork, not a newer one;
* a fresh plan of the same branch would share less (the gap this closes);
* no request shows a message the branch does not have (the parent's own messages past the
  fork carry markers that never appear in a branch's request), and coverage, tool pairing,
  the budget and the provider's grammar hold in every request;
* between the branch's own events each request extends the previous one.

On SQLite and PostgreSQL (``tests/store_backends.py``).  A hypothesis test forks at drawn
points, turn boundaries or not, and checks the same invariants and that the first request
shares at least the prefix of the frame it inherited.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_turns import strip_markers, turns_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from request_checks import assert_request
from store_backends import store_location
from strategies import CapturingSummarizer, payload_json

from compaction import Message, Recipe
from compaction.compile import CompiledRequest, plan_compile
from compaction.events import Frame, compile_in_events, inherited_frame
from compaction.store import HistoryStore, open_store

RECIPE = Recipe(
    budget_tokens=3000,
    chunk_target_tokens=300,
    chunk_min_messages=2,
    merge_fanout=3,
    summary_max_tokens=120,
    low_water_ratio=0.8,
)

FILLER = (
    "The export job reads rows in batches, retries a timed out batch twice and writes the rest to the "
    "staging table before the swap; the log shows which batch failed and how long it waited."
)


def _parent_marker(seq: int) -> str:
    return f"PARENTMSG{seq:04d}Q"


def _history(exchanges: int) -> list[Message]:
    """A parent history: asks, answers and tool rounds, each message marked with its seq."""
    messages: list[Message] = []

    def add(role: str, *blocks: dict[str, Any]) -> None:
        messages.append(Message(role, tuple(blocks)))

    for i in range(exchanges):
        add("user", {"type": "text", "text": f"{_parent_marker(len(messages))} Ask {i}: {FILLER}"})
        if i % 3 == 1:
            call = {"type": "tool_use", "id": f"call_{i}", "name": "read_log", "input": {"batch": i}}
            add(
                "assistant",
                {"type": "text", "text": f"{_parent_marker(len(messages))} Reading the log."},
                call,
            )
            add(
                "user",
                {
                    "type": "tool_result",
                    "tool_use_id": f"call_{i}",
                    "content": f"{_parent_marker(len(messages))} {FILLER}",
                },
            )
        add("assistant", {"type": "text", "text": f"{_parent_marker(len(messages))} Answer {i}: {FILLER}"})
    return messages


def _branch_turns(name: str, count: int, long: bool = True) -> list[list[Message]]:
    """Turns a branch appends after its fork: an answer of its own, then its next ask."""
    turns = []
    for i in range(count):
        text = FILLER if long or i else "Retried."
        turns.append(
            [
                Message("assistant", ({"type": "text", "text": f"BRANCH {name} answer {i}: {text}"},)),
                Message("user", ({"type": "text", "text": f"BRANCH {name} ask {i}: {text}"},)),
            ]
        )
    return turns


Sent = tuple[int, int, bytes]  # messages held, events recorded, request bytes


def _compile(store: HistoryStore, recipe: Recipe) -> CompiledRequest:
    compiled, _ticks = compile_in_events(store, recipe, CapturingSummarizer)
    return compiled


def _check_request(
    store: HistoryStore, compiled: CompiledRequest, recipe: Recipe, fork: int | None = None
) -> None:
    """Budget, coverage, pairing and grammar of one request; with ``fork``, no parent message past it."""
    assert_request(store, compiled, recipe)
    if fork is not None:
        text = compiled.request.payload.decode("utf-8")
        shown = [seq for seq in range(fork, fork + 400) if _parent_marker(seq) in text]
        assert not shown, f"the branch forked at {fork} shows the parent's messages {shown[:5]}"


def _elements(payload: bytes) -> list[bytes]:
    """The request's system text then each message, as canonical JSON bytes (cache markers left out)."""
    body = strip_markers(payload_json(payload))
    parts = [body.get("system"), *body["messages"]]
    return [json.dumps(p, sort_keys=True, separators=(",", ":")).encode("utf-8") for p in parts]


def shared_bytes(a: bytes, b: bytes) -> int:
    """Bytes of the leading system-and-messages elements two requests have equal, plus the common
    start of the first element that differs (a turn that merges into the previous message)."""
    shared = 0
    for x, y in zip(_elements(a), _elements(b), strict=False):
        if x == y:
            shared += len(x)
            continue
        common = 0
        while common < min(len(x), len(y)) and x[common] == y[common]:
            common += 1
        return shared + common
    return shared


def _opens_with(before: bytes, after: bytes) -> None:
    """``after`` is ``before`` with messages appended (its last message may have grown at its end)."""
    old, new = strip_markers(payload_json(before)), strip_markers(payload_json(after))
    assert old.get("system") == new.get("system"), "the system text changed"
    assert old.get("tools") == new.get("tools")
    if not old["messages"]:
        return
    kept = len(old["messages"]) - 1
    assert new["messages"][:kept] == old["messages"][:kept], "the prefix changed"
    last, grown = old["messages"][kept], new["messages"][kept]
    assert last["role"] == grown["role"]
    if last != grown:
        a, b = last.get("content"), grown.get("content")
        if isinstance(a, list):
            assert isinstance(b, list) and b[: len(a)] == a
        else:
            assert isinstance(a, str) and isinstance(b, str) and b.startswith(a)


def build_parent(location: str, recipe: Recipe = RECIPE, exchanges: int = 60) -> list[Sent]:
    """Append the parent history turn by turn at ``location`` (conversation ``main``); return each request."""
    sent: list[Sent] = []
    with open_store(location, conversation="main") as store:
        for turn in turns_of(_history(exchanges)):
            store.append(turn)
            compiled = _compile(store, recipe)
            _check_request(store, compiled, recipe)
            sent.append((store.next_seq(), len(store.events()), bytes(compiled.request.payload)))
    return sent


def expected_event(parent_events: list[Any], fork: int) -> Any:
    """The parent's event a branch at ``fork`` starts from: the newest whose request held at most ``fork`` messages."""
    held = [e for e in parent_events if e.detail["messages"] <= fork]
    return held[-1] if held else None


def fork_main(
    location: str, name: str, fork: int, turns: list[list[Message]], parent: str = "main"
) -> list[list[Message]]:
    """Fork ``parent`` at ``fork`` as ``name``; return ``turns`` fitted to follow the shared messages.

    After an answer (or at the start) the branch's first message is the user's, so its first
    turn's answer is left out; after an ask it answers first.
    """
    with open_store(location, conversation=parent) as store:
        before = store.messages(fork - 1, fork)[0].role if fork else None
        store.branch(name, fork)
    if before in (None, "assistant"):
        return [turns[0][1:], *turns[1:]]
    return turns


def replay_branch(
    location: str, name: str, fork: int, turns: list[list[Message]], recipe: Recipe = RECIPE
) -> list[Sent]:
    """Replay ``turns`` on the branch ``name`` (forked at ``fork``), checking each request and the
    prefix between the branch's events; return its requests."""
    sent: list[Sent] = []
    with open_store(location, conversation=name) as branch:
        for turn in turns:
            branch.append(turn)
            compiled = _compile(branch, recipe)
            _check_request(branch, compiled, recipe, fork)
            events = len(branch.events())
            if sent and sent[-1][1] == events:
                _opens_with(sent[-1][2], compiled.request.payload)
            sent.append((branch.next_seq(), events, bytes(compiled.request.payload)))
    return sent


def run_branch(
    location: str, name: str, fork: int, turns: list[list[Message]], recipe: Recipe = RECIPE
) -> list[Sent]:
    """Fork ``main`` at ``fork`` as ``name`` and replay ``turns`` there (see :func:`replay_branch`)."""
    return replay_branch(location, name, fork, fork_main(location, name, fork, turns), recipe)


@dataclass(frozen=True)
class Parent:
    """A parent conversation replayed in events: where it lives, its requests, its events, its recipe."""

    location: str
    sent: list[Sent]
    events: list[Any]
    recipe: Recipe


PARENTS = {
    "sqlite-openai": ("sqlite", RECIPE),
    "sqlite-anthropic": ("sqlite", RECIPE.replace(output_format="anthropic", model="claude-sonnet-4-5")),
    "postgres-openai": ("postgres", RECIPE),
}


def _parent(backend: str, recipe: Recipe, folder: Path, exchanges: int) -> Iterator[Parent]:
    with store_location(backend, folder) as location:
        sent = build_parent(location, recipe, exchanges)
        with open_store(location, conversation="main") as store:
            events = store.events()
        yield Parent(location, sent, events, recipe)


@pytest.fixture(name="parent", scope="module", params=sorted(PARENTS))
def parent_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Parent]:
    """A parent conversation with several events, on each backend (and the Anthropic format on SQLite)."""
    backend, recipe = PARENTS[request.param]
    yield from _parent(backend, recipe, tmp_path_factory.mktemp("branch-events"), 60)


def _main_id(location: str) -> int:
    with open_store(location, conversation="main") as store:
        return next(iter(store.lineage()))[0]


def _fork_points(sent: list[Sent], events: list[Any]) -> dict[str, int]:
    """Turn boundaries to fork at: before the first event, at one, between two, at the tip."""
    boundaries = [n for n, _e, _p in sent]
    held = [e.detail["messages"] for e in events]
    points = {"before the first event": boundaries[1], "at the tip": boundaries[-1]}
    for index, (low, high) in enumerate(zip(held, held[1:], strict=False)):
        between = [n for n in boundaries if low < n < high]
        if between:
            points[f"between events {index + 1} and {index + 2}"] = between[len(between) // 2]
        points[f"at event {index + 1}"] = low
    return points


def test_the_parent_has_several_events_each_recording_its_message_count(
    parent: Parent,
) -> None:
    sent, events = parent.sent, parent.events
    assert len(events) >= 3
    assert all(isinstance(e.detail["messages"], int) for e in events)
    counts = [e.detail["messages"] for e in events]
    assert counts == sorted(counts) and counts[0] > sent[1][0]
    # each event's count is the number of messages of the request compiled when it was recorded
    by_events: dict[int, int] = {}
    for n, recorded, _p in sent:
        by_events.setdefault(recorded, n)
    assert [by_events[i + 1] for i in range(len(events))] == counts


def test_a_branch_first_request_opens_with_the_parent_request_at_the_fork(
    parent: Parent,
) -> None:
    location, sent, events, recipe = parent.location, parent.sent, parent.events, parent.recipe
    at = {n: payload for n, _e, payload in sent}
    points = _fork_points(sent, events)
    assert any(k.startswith("between") for k in points) and any(k.startswith("at event") for k in points)
    whole = 0
    main = _main_id(location)
    for where, fork in points.items():
        name = f"b{fork}-{uuid.uuid4().hex[:6]}"
        first = run_branch(location, name, fork, _branch_turns(name, 1, long=False), recipe)[0]
        with open_store(location, conversation=name) as branch:
            mine = branch.events()
            fresh = plan_compile(branch, recipe).compiled
        chosen = expected_event(events, fork)
        if chosen is None:  # before the parent's first event: nothing to inherit, planned afresh
            assert mine == [] or "inherited" not in mine[0].detail, where
            assert fresh is not None and first[2] == fresh.request.payload, where
        else:
            assert mine, where
            assert mine[0].detail["inherited"] == {
                "conversation_id": main,
                "event": chosen.id,
                "fork": fork,
            }, where
            assert Frame.from_json(mine[0].detail["frame"]) == Frame.from_json(chosen.detail["frame"]), where
        if len(mine) <= 1 and "low_water" not in (mine[0].detail if mine else {}):
            # no event of its own: the whole request the parent sent at the fork opens this one
            _opens_with(at[fork], first[2])
            whole += 1
            parent_bytes = sum(len(x) for x in _elements(at[fork]))
            assert shared_bytes(at[fork], first[2]) >= parent_bytes - len(_elements(at[fork])[-1]), where
        shared = shared_bytes(at[fork], first[2])
        assert fresh is not None
        replanned = shared_bytes(at[fork], bytes(fresh.request.payload))
        assert shared >= replanned, where
        if chosen is not None and where.startswith("between"):
            assert shared > replanned, f"{where}: inheriting shared {shared} bytes, a fresh plan {replanned}"
    assert whole >= len(points) - 1


def test_later_branch_turns_keep_the_prefix_between_the_branch_events(
    parent: Parent,
) -> None:
    location, sent, events, recipe = parent.location, parent.sent, parent.events, parent.recipe
    held = [e.detail["messages"] for e in events]
    fork = next(n for n, _e, _p in sent if held[1] < n < held[2]) if len(held) > 2 else sent[-1][0]
    name = f"long-{uuid.uuid4().hex[:6]}"
    requests = run_branch(
        location, name, fork, _branch_turns(name, 14), recipe
    )  # checks the prefix between events
    assert requests[-1][1] >= 2, "the branch held events of its own"
    with open_store(location, conversation=name) as branch:
        mine = branch.events()
        assert "inherited" in mine[0].detail
        assert all(e.detail["messages"] >= fork for e in mine)
        again = _compile(branch, recipe)
        assert again.request.payload == requests[-1][2]  # a restarted agent compiles the same request


def test_an_event_past_the_fork_is_passed_over_and_a_root_inherits_nothing(
    parent: Parent,
) -> None:
    location, events = parent.location, parent.events
    last = events[-1]
    fork = last.detail["messages"] - 1  # the newest event showed message `fork`: not the branch's
    name = f"past-{uuid.uuid4().hex[:6]}"
    with open_store(location, conversation="main") as store:
        assert inherited_frame(store) is None
        store.branch(name, fork)
    with open_store(location, conversation=name) as branch:
        got = inherited_frame(branch)
        chosen = expected_event(events, fork)
        assert got is not None and chosen is not None and got.event_id == chosen.id != last.id
        assert got.frame.cut <= fork and got.stop == fork


def test_a_branch_of_a_branch_without_events_inherits_from_the_grandparent(
    parent: Parent,
) -> None:
    location, sent, events, recipe = parent.location, parent.sent, parent.events, parent.recipe
    fork = sent[-1][0]
    child, grandchild = f"c-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with open_store(location, conversation="main") as store:
        store.branch(child, fork)
    turns = fork_main(location, grandchild, fork, _branch_turns(grandchild, 1, long=False), parent=child)
    first = replay_branch(location, grandchild, fork, turns, recipe)[0][2]
    _opens_with(sent[-1][2], first)
    with open_store(location, conversation=grandchild) as store:
        assert store.events()[0].detail["inherited"]["event"] == events[-1].id


# -- drawn fork points -------------------------------------------------------------------------


@pytest.fixture(name="drawn_parent", scope="module", params=["sqlite", "postgres"])
def drawn_parent_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Parent]:
    """A shorter parent for the drawn forks, on each backend."""
    yield from _parent(request.param, RECIPE, tmp_path_factory.mktemp("branch-events-drawn"), 30)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_drawn_fork_points_keep_the_invariants_and_the_inherited_prefix(
    drawn_parent: Parent, data: st.DataObject
) -> None:
    location, sent, events = drawn_parent.location, drawn_parent.sent, drawn_parent.events
    total = sent[-1][0]
    fork = data.draw(st.integers(min_value=0, max_value=total), label="fork seq")
    count = data.draw(st.integers(min_value=1, max_value=6), label="branch turns")
    long = data.draw(st.booleans(), label="long turns")
    with open_store(location, conversation="main") as store:
        before = store.messages(fork - 1, fork)[0] if fork else None
    if before is not None and any(b.get("type") == "tool_use" for b in before.content):
        fork -= 1  # a branch's own messages do not answer its parent's call: fork before it
    name = f"d{fork}-{uuid.uuid4().hex[:8]}"
    turns = fork_main(location, name, fork, _branch_turns(name, count, long=long))
    with open_store(location, conversation=name) as branch:
        inherited = inherited_frame(branch)
    chosen = expected_event(events, fork)
    if chosen is None:
        assert inherited is None
    else:
        assert inherited is not None and inherited.event_id == chosen.id
        assert inherited.frame.cut <= fork and all(end <= fork for _lv, _s, end in inherited.frame.cover)
    requests = replay_branch(location, name, fork, turns)  # invariants, and the prefix between events
    assert requests
    if inherited is not None:
        with open_store(location, conversation=name) as branch:
            first_event = branch.events()[0]
        assert first_event.detail["inherited"]["event"] == chosen.id
        if "low_water" not in first_event.detail:  # the first request fitted the inherited frame
            assert Frame.from_json(first_event.detail["frame"]) == inherited.frame
            # the parent's newest request on that frame within the shared messages opens it
            shown = max(n for n, _e, _p in sent if chosen.detail["messages"] <= n <= fork)
            _opens_with(dict((n, p) for n, _e, p in sent)[shown], requests[0][2])


def test_an_edit_past_the_fork_is_passed_over_and_an_edit_of_a_shared_message_plans_afresh(
    tmp_path: Path,
) -> None:
    location = str(tmp_path / "edits.sqlite")
    sent = build_parent(location, exchanges=40)
    with open_store(location, conversation="main") as store:
        events = store.events()
        fork = sent[-1][0] - 4
        shared = next(seq for seq in range(fork - 1, 0, -1) if store.messages(seq, seq + 1)[0].role == "user")
        store.branch("before-edits", fork)
        store.edit(sent[-1][0] - 1, [{"type": "text", "text": "edited past the fork"}])
    with open_store(location, conversation="before-edits") as branch:
        got = inherited_frame(branch)
        chosen = expected_event(events, fork)
        assert (
            got is not None and chosen is not None and got.event_id == chosen.id
        )  # the edit event is not the branch's
    with open_store(location, conversation="main") as store:
        store.edit(shared, [{"type": "text", "text": "edited in the shared part"}])
        edit_event = store.events()[-1]
        store.branch("after-edits", fork)
    with open_store(location, conversation="after-edits") as branch:
        got = inherited_frame(branch)
        assert got is not None and got.event_id == edit_event.id and got.frame == Frame(0, ())
        turns = _branch_turns("after-edits", 2)
    replay_branch(location, "after-edits", fork, turns)  # budget, coverage, pairing, grammar
    with open_store(
        location, conversation="before-edits"
    ) as branch:  # its summaries over the edit went stale
        got = inherited_frame(branch)
        assert got is not None and all(end <= shared for _lv, _s, end in got.frame.cover)


def test_an_event_recorded_before_message_counts_is_judged_by_its_cut_and_cover(tmp_path: Path) -> None:
    location = str(tmp_path / "legacy.sqlite")
    with open_store(location, conversation="main") as store:
        store.append(_history(4))
        store.add_summary(1, 0, 3, "The user asked about the export job.", {"by": "test"})
        store.record_event(900, 400, 3000, {"frame": {"cut": 3, "cover": [[1, 0, 3]]}})  # no "messages" kept
        store.record_event(900, 400, 3000, {"frame": {"cut": 3, "cover": []}})  # a cover short of its cut
        for name, fork in (("at-3", 3), ("at-2", 2)):
            store.branch(name, fork)
    turns = fork_main(location, "at-6", 6, _branch_turns("at-6", 2))
    with open_store(location, conversation="at-6") as branch:
        got = inherited_frame(branch)
        assert got is not None and got.frame == Frame(3, ((1, 0, 3),)) and got.stop == 6 and got.event_id == 1
    first = replay_branch(location, "at-6", 6, turns)[0]
    with open_store(location, conversation="at-6") as branch:
        assert branch.events()[0].detail["inherited"]["event"] == 1
        assert "The user asked about the export job." in first[2].decode("utf-8")
    with open_store(location, conversation="at-3") as branch:
        got = inherited_frame(branch)
        assert got is not None and got.frame.cut == 3  # a cut at the fork: the summary ends there
    with open_store(location, conversation="at-2") as branch:
        assert inherited_frame(branch) is None  # its cut (3) is past the fork (2): plan afresh


def test_the_test_history_is_well_formed(tmp_path: Path) -> None:
    """The generated parent pairs every call with its result (so a failure above is the engine's)."""
    messages = _history(6)
    calls = [b["id"] for m in messages for b in m.content if b.get("type") == "tool_use"]
    results = [b["tool_use_id"] for m in messages for b in m.content if b.get("type") == "tool_result"]
    assert calls == results == ["call_1", "call_4"]
