"""Pins: a pinned message's text is in every compile of its conversation, counted in the budget.

The property test pins a generated history's messages, compresses it to a budget and
compiles: the pinned text is in the request's system text however much is summarized, the
planner's price equals the gate's count (plan == gate), and the request fits.  Pins alone over
the budget give the typed :class:`OverBudget`.  Store-level tests run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import every_backend_store, fresh_store  # noqa: F401  (the store fixture over every backend)
from strategies import DATA_URI, CapturingSummarizer, histories, payload_json

from compaction import Message, OverBudget, Recipe, Store, StoreError, compile_request, compress_and_compile
from compaction.cli import main
from compaction.store import open_store

WORDS = "the pinned instruction says always run the linter before committing".split()


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


def system_text(body: dict[str, Any]) -> str:
    """The system text of an OpenAI Chat body (its first message, when a system one)."""
    first = body["messages"][0]
    if first["role"] != "system":
        return ""
    content = first["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def with_text(messages: list[Message]) -> list[int]:
    return [
        i for i, m in enumerate(messages)
        if m.role != "system" and any(b.get("type") == "text" and b.get("text") for b in m.content)
    ]


@st.composite
def pinned_histories(draw: Any) -> tuple[list[Message], list[int], int]:
    marker = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=3, max_size=8)))
    messages = draw(histories(min_turns=3, max_turns=10))
    messages.append(text("user", f"PINNED: {marker}"))  # one message surely worth pinning
    candidates = with_text(messages)
    chosen = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
    if len(messages) - 1 not in chosen:
        chosen.append(len(messages) - 1)
    return messages, sorted(chosen), draw(st.integers(min_value=1500, max_value=6000))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=pinned_histories())
def test_a_pinned_message_is_in_every_compile_and_counted(case: tuple[list[Message], list[int], int]) -> None:
    messages, pins, budget = case
    recipe = Recipe(budget_tokens=budget, chunk_target_tokens=200, chunk_min_messages=2, merge_fanout=2)
    with Store(":memory:") as store:
        store.append(messages)
        for seq in pins:
            assert store.pin(seq) is True
            assert store.pin(seq) is False  # pinned already
        assert set(pins) <= set(store.pinned_seqs())
        try:
            compiled, _ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
        except OverBudget as err:
            assert err.budget == budget and err.needed > budget
            return
        body = payload_json(compiled.request.payload)
        system = system_text(body)
        window = "\n".join(
            m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"] or [])
            for m in body["messages"]
            if m["role"] != "system"
        )
        for seq in pins:
            for block in messages[seq].content:
                if block.get("type") == "text" and block.get("text"):
                    for part in DATA_URI.split(block["text"]):  # an image in text is a placeholder, as in a system message
                        if seq < compiled.live_start:  # before the live window: kept in the system text
                            assert part in system, f"pinned message {seq} missing from the system text"
                        else:  # in the window: shown in its place (tests/test_pins_once.py: once)
                            assert part in window, f"pinned message {seq} missing from the live window"
            assert seq in compiled.raw_seqs
        assert compiled.tokens <= budget
        if not any(r.kind != "image" for r in compiled.request.replacements):
            assert compiled.planned_tokens == compiled.tokens  # plan == gate


def test_pins_alone_over_the_budget_fail_loudly() -> None:
    with Store(":memory:") as store:
        store.append([text("user", "hello"), text("assistant", " ".join(WORDS * 200)), text("user", "ok")])
        recipe = Recipe(budget_tokens=1000)
        compress_and_compile(store, recipe)  # fits before the pin: the long answer is summarized
        store.pin(1)
        for attempt in (compile_request, compress_and_compile):
            with pytest.raises(OverBudget) as raised:
                attempt(store, recipe)
            assert raised.value.budget == 1000 and raised.value.needed > 1000
            assert "pinned" in str(raised.value), str(raised.value)


def test_pin_refuses_what_it_cannot_keep(store: Any) -> None:
    store.append([
        text("user", "run it"),
        Message("assistant", ({"type": "tool_use", "id": "t1", "name": "sh", "input": {}},)),
        Message("user", ({"type": "tool_result", "tool_use_id": "t1", "content": "done"},)),
    ])
    with pytest.raises(StoreError, match="message 2 \\(user\\) holds no text block to keep"):
        store.pin(2)
    with pytest.raises(StoreError, match="no message 3 in conversation 'default': it holds messages 0 to 2"):
        store.pin(3)
    assert store.pin(0) is True and store.pinned_seqs() == [0]
    assert store.unpin(0) is True and store.unpin(0) is False and store.pinned_seqs() == []


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_branch_sees_the_pins_of_what_it_shares_and_keeps_its_own(backend: str, tmp_path: Path) -> None:
    with fresh_store(backend, tmp_path, conversation="main") as main:
        main.append([text("user", f"m {i}") for i in range(6)])
        main.pin(1)
        main.pin(4)
        main.branch("alt", 3)
        with open_store(main.path, conversation="alt") as alt:
            alt.append([text("user", "alt 3"), text("user", "alt 4")])
            assert alt.pinned_seqs() == [1]  # main's pin of 4 is past the fork: not alt's message
            assert alt.pin(4) is True and alt.pinned_seqs() == [1, 4]
            with pytest.raises(StoreError, match="pinned by a conversation 'alt' branches from"):
                alt.unpin(1)
            shown = compile_request(alt, Recipe(budget_tokens=4000))  # all in the live window: each pin shown in its place
            assert shown.request.payload.count(b"alt 4") == 1 and "alt 4" not in system_text(payload_json(shown.request.payload))
        assert main.pinned_seqs() == [1, 4]
        shown = compile_request(main, Recipe(budget_tokens=4000))
        assert shown.request.payload.count(b"m 4") == 1 and "m 4" not in system_text(payload_json(shown.request.payload))


def test_pin_from_the_command_line(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with Store(store) as opened:
        opened.append([text("user", "always answer in French"), text("assistant", "d'accord")])
    runner = CliRunner()
    pinned = runner.invoke(main, ["pin", "--store", str(store), "0", "--json"])
    assert pinned.exit_code == 0, pinned.output
    assert json.loads(pinned.output) == {"conversation": "default", "seq": 0, "changed": True, "pinned": [0]}
    again = runner.invoke(main, ["pin", "--store", str(store), "0"])
    assert again.exit_code == 0 and "pinned already" in again.output
    compiled = runner.invoke(main, ["compile", "--store", str(store), "--budget", "2000"])
    assert compiled.exit_code == 0, compiled.output
    assert compiled.output.count("always answer in French") == 1  # in the live window: shown in its place, once
    assert "always answer in French" not in system_text(json.loads(compiled.output))
    gone = runner.invoke(main, ["pin", "--store", str(store), "0", "--unpin", "--json"])
    assert json.loads(gone.output)["pinned"] == []
    missing = runner.invoke(main, ["pin", "--store", str(store), "9"])
    assert missing.exit_code == 1 and "no message 9" in missing.output
