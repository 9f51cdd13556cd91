"""Hostile input against what session 13 changed (attack pass): each test failed before its fix.

Session 13 let a branch start from its parent's event at the fork (``events.inherited_frame``,
recorded as the branch's own event), left blank blocks out of tool results
(``counting.shipped_blocks``), right-stripped a final assistant turn for Anthropic, and priced
the pairing repair's renamed tool ids in the planner (``pairing.renamed_tool_ids``).  Each
test below states what broke and asserts the invariant it broke: coverage, pairing, the
budget (plan == gate), the provider grammar, or a typed error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_backends import store_location
from strategies import CapturingSummarizer, check_provider_grammar, check_tool_pairing, payload_json

from compaction import Message, Recipe
from compaction.compile import CompiledRequest
from compaction.events import compile_current, compile_in_events
from compaction.store import HistoryStore, open_store


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _check_coverage(store: HistoryStore, compiled: CompiledRequest) -> None:
    """Every message of the store is shown raw or under exactly one shown summary, in order."""
    position = 0
    for summary in compiled.summaries:
        assert summary.start_seq == position < summary.end_seq
        position = summary.end_seq
    assert position == compiled.live_start
    raw = set(compiled.raw_seqs)
    for seq in range(store.next_seq()):
        covering = sum(1 for s in compiled.summaries if s.start_seq <= seq < s.end_seq)
        assert (seq in raw) + covering == 1, f"seq {seq}: raw={seq in raw}, summaries={covering}"


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
            _check_coverage(branch, compiled)
            check_tool_pairing(body, recipe.output_format)
            check_provider_grammar(body, recipe.output_format)
            assert compiled.tokens <= 3000
        assert branch.messages(1, 2)[0].content == ({"type": "text", "text": "EDITED in the parent"},)
        assert branch.revisions(1) == 1  # the edit is a revision: the original row is kept
