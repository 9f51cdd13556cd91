"""Issue #12's "Done when" properties on generated conversations that use every feature at once.

``tests/test_events.py`` replays plain generated histories; here each generated conversation
also carries what changes a request's shape: pins (a message pinned as it is appended),
observation masking (tool rounds with outputs long enough to mask, small
``mask_keep_rounds``), the ask ledger (asks over a small
``ask_cap_tokens``, pasted logs, a small ``ledger_share``), the names index (names and long
URLs recurring across messages) and a branch that forks the conversation at a turn and
goes on with its own turns.  Both conversations are appended turn by turn on an SQLite
file, as an agent loop does, and every request is checked:

* between two compaction events a request is the previous one plus new messages (byte
  prefix, cache markers aside);
* no request is over the budget, by the engine's count and by an independent count;
* coverage (each message raw or under exactly one shown summary, in order) and tool
  pairing (and the rest of the provider's grammar) hold in every request;
* at a generated turn the store is handed to another process (a worker started once per
  module): its compile of the same store is byte-identical to this process's, and it
  appends the next turn and compiles a request that extends the previous one; the
  conversation then goes on in a freshly opened store object (no in-memory caches), which
  compiles the other process's request byte for byte and whose requests still extend it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_turns import strip_markers, turns_of
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from request_checks import assert_request
from strategies import (
    CapturingSummarizer,
    check_provider_grammar,
    check_tool_pairing,
    histories,
    independent_tokens,
    payload_json,
)

from compaction import Message, OverBudget, Recipe, open_store
from compaction.events import compile_in_events
from compaction.store import HistoryStore

WORKER = r"""
import base64, json, sys
from compaction import Message, OverBudget, open_store
from compaction.events import compile_in_events
from compaction.recipe import recipe_from_mapping
from compaction.summarizers.extractive import ExtractiveSummarizer

for line in sys.stdin:
    job = json.loads(line)
    recipe = recipe_from_mapping(job["recipe"])
    with open_store(job["path"], create=False, conversation=job["conversation"]) as store:
        if job["append"]:
            store.append([Message(m["role"], tuple(m["content"])) for m in job["append"]])
        try:
            compiled, ticks = compile_in_events(store, recipe, lambda: ExtractiveSummarizer(recipe.encoding))
        except OverBudget as err:
            sys.stdout.write(json.dumps({"over": err.stage}) + "\n")
            sys.stdout.flush()
            continue
        answer = {
            "payload": base64.b64encode(compiled.request.payload).decode(),
            "ticks": len(ticks),
            "events": len(store.events()),
        }
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""

WHEEL = "https://files.example.org/packages/62/c0/" + "8e" * 32 + "/transformers-4.44.0-py3-none-any.whl"
NAMES = ("fetch_rows", "StoreReader", "MAX_RETRIES", "parse_config", "BILL-1234", WHEEL)


class Worker:
    """Another Python process that opens a store by path and compiles its next request."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def compile(
        self,
        path: Path,
        conversation: str,
        recipe: Recipe,
        append: list[Message] = (),  # type: ignore[assignment]
    ) -> tuple[bytes, int, int]:
        """Append ``append`` (if any) there, compile; return the payload, compression rounds and events."""
        assert self.process.stdin is not None and self.process.stdout is not None
        job = {
            "path": str(path),
            "conversation": conversation,
            "recipe": recipe.to_dict(),
            "append": [{"role": m.role, "content": list(m.content)} for m in append],
        }
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the worker process ended"
        answer = json.loads(line)
        if "over" in answer:
            raise OverBudget(
                f"over budget in the other process ({answer['over']})",
                stage=answer["over"],
                budget=0,
                needed=0,
            )
        return base64.b64decode(answer["payload"]), int(answer["ticks"]), int(answer["events"])

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process.stdout.close()


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    started = Worker()
    yield started
    started.close()


# -- generated conversations -------------------------------------------------------------------


def _pasted_log(draw: Any) -> str:
    lines = draw(st.integers(min_value=20, max_value=80))
    return "Why does the export fail? Log:\n" + "\n".join(
        f"worker{i} fetch_rows raised TimeoutError after {i * 13 % 997} ms" for i in range(lines)
    )


@st.composite
def _named(draw: Any) -> Message:
    """A user ask or an assistant note that names recurring identifiers (a long URL among them)."""
    role = draw(st.sampled_from(["user", "assistant"]))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4))
    text = "Please look at " + " and ".join(names) + " today"
    if role == "user" and draw(st.integers(min_value=0, max_value=3)) == 0:
        text += "\n" + _pasted_log(draw)
    return Message(role, ({"type": "text", "text": text},))


@st.composite
def _long_round(draw: Any) -> list[Message]:
    """A tool round whose output is long enough to be masked (a file read of 20 to 60 lines)."""
    index = draw(st.integers(min_value=0, max_value=10**6))
    lines = draw(st.integers(min_value=20, max_value=60))
    call = {
        "type": "tool_use",
        "id": f"read_{index}",
        "name": "read_file",
        "input": {"path": f"src/mod{index}.py"},
    }
    output = "\n".join(f"def parse_config_{k}(rows): return fetch_rows(rows, {k})" for k in range(lines))
    return [
        Message("assistant", ({"type": "text", "text": "Reading it."}, call)),
        Message("user", ({"type": "tool_result", "tool_use_id": call["id"], "content": output},)),
    ]


def _opens_a_round(message: Message) -> bool:
    return message.role == "assistant" and any(b.get("type") == "tool_use" for b in message.content)


@st.composite
def conversations(draw: Any) -> list[Message]:
    """A generated history with named asks and notes inserted where no tool round is open."""
    messages = draw(histories(min_turns=4, max_turns=12))
    extras = draw(st.lists(st.one_of(_named().map(lambda m: [m]), _long_round()), max_size=8))
    for extra in extras:
        start = 1 if messages and messages[0].role == "system" else 0
        safe = [i for i in range(start, len(messages) + 1) if i == 0 or not _opens_a_round(messages[i - 1])]
        at = safe[draw(st.integers(min_value=0, max_value=len(safe) - 1))]
        messages[at:at] = extra
    return messages


def _short_text(message: Message) -> bool:
    texts = [b["text"] for b in message.content if b.get("type") == "text" and isinstance(b.get("text"), str)]
    return bool(texts) and sum(len(t) for t in texts) < 400 and "base64," not in "".join(texts)


# -- the checks --------------------------------------------------------------------------------


def _assert_extends(before: dict[str, Any], after: dict[str, Any]) -> None:
    """``after``'s messages start with ``before``'s (the last one may have grown at its end)."""
    old, new = strip_markers(before), strip_markers(after)
    assert old.get("system") == new.get("system"), "the system text changed between events"
    assert old.get("tools") == new.get("tools")
    if not old["messages"]:
        return
    kept = len(old["messages"]) - 1
    assert new["messages"][:kept] == old["messages"][:kept], "the prefix changed between events"
    last, grown = old["messages"][kept], new["messages"][kept]
    assert last["role"] == grown["role"]
    if last == grown:
        return
    a, b = last.get("content"), grown.get("content")
    if isinstance(a, list):
        assert isinstance(b, list) and b[: len(a)] == a
    elif isinstance(a, str):
        assert isinstance(b, str) and b.startswith(a)
    calls = last.get("tool_calls") or []
    assert (grown.get("tool_calls") or [])[: len(calls)] == calls


Last = tuple[int, dict[str, Any], bytes]


def _replay(
    store: HistoryStore, turns: list[list[Message]], recipe: Recipe, pins: list[bool], previous: Last | None
) -> Last | None:
    """Append ``turns`` one by one (pinning as drawn), compile, check; return the last (events, body, bytes)."""
    for turn, pin in zip(turns, pins, strict=False):
        first = store.next_seq()
        store.append(turn)
        if pin:
            short = [first + i for i, m in enumerate(turn) if _short_text(m)]
            if short:
                store.pin(short[0])
                event("pinned")
        compiled, _ticks = compile_in_events(store, recipe, CapturingSummarizer)
        body = assert_request(store, compiled, recipe, pins_before_window=True)
        events = len(store.events())
        if compiled.masked_seqs:
            event("masked")
        if compiled.summaries and compiled.ledger_tokens:
            event("ledger")
        if previous is not None and previous[0] == events:
            _assert_extends(previous[1], body)
        previous = (events, body, bytes(compiled.request.payload))
    return previous


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    messages=conversations(),
    budget=st.integers(min_value=1800, max_value=6000),
    fmt=st.sampled_from(["openai", "anthropic"]),
    low=st.sampled_from([0.4, 0.6, 0.8]),
    cap=st.sampled_from([16, 40, 600]),
    share=st.sampled_from([0.05, 0.25]),
    keep_rounds=st.integers(min_value=1, max_value=3),
    masking=st.booleans(),
    data=st.data(),
)
def test_generated_conversations_with_pins_branches_masking_ledger_and_names(
    worker: Worker,
    messages: list[Message],
    budget: int,
    fmt: str,
    low: float,
    cap: int,
    share: float,
    keep_rounds: int,
    masking: bool,
    data: st.DataObject,
) -> None:
    recipe = Recipe(
        budget_tokens=budget,
        output_format=fmt,  # type: ignore[arg-type]
        low_water_ratio=low,
        chunk_target_tokens=300,
        chunk_min_messages=2,
        merge_fanout=3,
        summary_max_tokens=120,
        ask_cap_tokens=cap,
        ledger_share=share,
        mask_keep_rounds=keep_rounds,
        observation_masking=masking,
    )
    if fmt == "anthropic":
        recipe = recipe.replace(model="claude-sonnet-4-5")
    turns = turns_of(messages)
    pins = data.draw(
        st.lists(st.integers(0, 4).map(lambda n: n == 0), min_size=len(turns), max_size=len(turns))
    )
    handoff = data.draw(st.integers(min_value=1, max_value=len(turns)), label="handoff turn")
    fork = data.draw(st.integers(min_value=1, max_value=len(turns)), label="fork turn")
    tail = turns_of(data.draw(conversations(), label="branch turns"))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.db"
        try:
            with open_store(path, conversation="main") as store:
                last = _replay(store, turns[:handoff], recipe, pins, None)
                assert last is not None
                there, ticks, _events = worker.compile(path, "main", recipe)
                assert ticks == 0 and there == last[2], "another process compiled another request"
                fork_seq = sum(len(t) for t in turns[:fork]) if fork <= handoff else store.next_seq()
            if handoff < len(turns):  # the other process takes the next turn: append, compile
                there, _ticks, events = worker.compile(path, "main", recipe, turns[handoff])
                body = payload_json(there)
                check_tool_pairing(body, recipe.output_format)
                check_provider_grammar(body, recipe.output_format)
                assert independent_tokens(body, recipe.target_model) <= budget
                if events == last[0]:
                    _assert_extends(last[1], body)
                last = (events, body, there)
            with open_store(path, conversation="main") as reopened:  # a restarted agent: no warm caches
                assert compile_in_events(reopened, recipe, CapturingSummarizer)[0].request.payload == last[2]
                last = _replay(reopened, turns[handoff + 1 :], recipe, pins[handoff + 1 :], last)
                reopened.branch("alt", min(fork_seq, reopened.next_seq()))
                event(f"main events: {min(len(reopened.events()), 3)}")
            with open_store(path, conversation="alt") as branch:
                _replay(branch, tail, recipe, [not p for p in pins], None)
                event(f"branch events: {min(len(branch.events()), 3)}")
        except OverBudget as err:
            event(f"over budget ({err.stage})")
            return
