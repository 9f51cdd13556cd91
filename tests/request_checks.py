"""Checks of one compiled request that many tests make: budget, coverage, pairing, grammar.

Each function asserts one invariant of ``compaction.compile.CompiledRequest`` against the store
it was compiled from (DESIGN.md: coverage, the budget, the provider's grammar) and raises
``AssertionError`` naming the seq or the count that broke it:

* :func:`assert_within_budget` -- the engine's count and an independent count of the shipped
  body (``strategies.independent_tokens``, tiktoken over the body's text) are both within the
  recipe's budget (tokens);
* :func:`assert_summaries_contiguous` -- the shown summaries run from seq 0 to the live window
  without gap or overlap, none empty;
* :func:`assert_coverage` -- the request holds every stored message, each shown raw or under
  exactly one shown summary (a pinned message raw before the window as well);
  :func:`assert_coverage_pinning_system` pins the store's system messages;
* :func:`assert_request` -- all of the above, then tool pairing and the provider's grammar
  (``strategies.check_tool_pairing`` and ``strategies.check_provider_grammar``);
* :func:`compact_checking_summarizer_grammar` -- one compaction tick whose every summarizer
  request keeps the OpenAI chat grammar.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from strategies import (
    CapturingSummarizer,
    check_provider_grammar,
    check_tool_pairing,
    independent_tokens,
    payload_json,
)

from compaction import Compactor, Recipe
from compaction.compile import CompiledRequest
from compaction.store import HistoryStore


def assert_within_budget(compiled: CompiledRequest, recipe: Recipe) -> dict[str, Any]:
    """Assert ``compiled`` fits ``recipe.budget_tokens`` by the engine's and an independent count.

    Returns the request body (the parsed JSON payload), so a caller checks it further without
    parsing it again.  Raises ``AssertionError`` when the recipe has no budget or either count
    (tokens of ``recipe.target_model``'s encoding) is over it.
    """
    budget = recipe.budget_tokens
    assert budget is not None, "the recipe has no budget_tokens to check against"
    body = payload_json(compiled.request.payload)
    assert compiled.tokens <= budget, f"the engine counts {compiled.tokens} tokens, over {budget}"
    counted = independent_tokens(body, recipe.target_model)
    assert counted <= budget, f"an independent count gives {counted} tokens, over {budget}"
    return body


def assert_summaries_contiguous(compiled: CompiledRequest) -> None:
    """Assert the shown summaries cover seqs ``[0, compiled.live_start)`` in order, each non-empty.

    The first starts at seq 0, each starts where the one before it ended and ends after it
    starts, and the last ends at the live window's first seq.
    """
    position = 0
    for summary in compiled.summaries:
        assert summary.start_seq == position < summary.end_seq, (
            f"summaries leave a gap or overlap at seq {position}: [{summary.start_seq}, {summary.end_seq})"
        )
        position = summary.end_seq
    assert position == compiled.live_start, (
        f"summaries end at {position}, the live window at {compiled.live_start}"
    )


def assert_coverage(
    store: HistoryStore,
    compiled: CompiledRequest,
    *,
    pinned: Collection[int] = (),
    pins_before_window: bool = False,
) -> None:
    """Assert every message of ``store`` is shown raw or under exactly one shown summary, in order.

    The summaries are contiguous (:func:`assert_summaries_contiguous`), the request counts the
    store's ``next_seq()`` messages, no seq is in ``compiled.raw_seqs`` twice, and each seq in
    ``[0, next_seq())`` is in ``compiled.raw_seqs`` or inside one summary's
    ``[start_seq, end_seq)``, not both.  Two kinds of message are shown raw before the live
    window beside the summary that covers them (DESIGN.md, pins):

    * ``pinned``: seqs that must be shown raw wherever they stand (the caller's pins, or its
      system messages);
    * with ``pins_before_window``, any message shown raw before the window is taken for a pin
      the caller does not know, and allowed under at most one summary.
    """
    assert_summaries_contiguous(compiled)
    total = store.next_seq()
    assert compiled.total_messages == total, (
        f"the request counts {compiled.total_messages} messages, the store {total}"
    )
    assert len(compiled.raw_seqs) == len(set(compiled.raw_seqs)), "a message shown raw twice"
    raw = set(compiled.raw_seqs)
    pins = set(pinned)
    for seq in range(total):
        covering = sum(1 for s in compiled.summaries if s.start_seq <= seq < s.end_seq)
        if seq in pins:
            assert seq in raw, f"seq {seq}: pinned but not shown raw"
            assert covering <= 1, f"seq {seq}: pinned and under {covering} summaries"
            continue
        if pins_before_window and seq in raw and seq < compiled.live_start:
            assert covering <= 1, f"seq {seq}: pinned raw and under {covering} summaries"
            continue
        assert (seq in raw) + covering == 1, f"seq {seq}: raw={seq in raw}, summaries={covering}"


def assert_coverage_pinning_system(store: HistoryStore, compiled: CompiledRequest) -> None:
    """Assert :func:`assert_coverage` with every system message of ``store`` pinned (shown raw).

    Also that the request counts ``len(store.messages())`` messages (the conversation's
    lineage, as the store reads it).
    """
    stored = store.messages()
    assert compiled.total_messages == len(stored), (
        f"the request counts {compiled.total_messages} messages, the store holds {len(stored)}"
    )
    system = [m.seq for m in stored if m.role == "system" and m.seq is not None]
    assert_coverage(store, compiled, pinned=system)


def assert_request(
    store: HistoryStore, compiled: CompiledRequest, recipe: Recipe, *, pins_before_window: bool = False
) -> dict[str, Any]:
    """Assert budget, coverage, tool pairing and ``recipe.output_format``'s grammar of one request.

    :func:`assert_within_budget`, then :func:`assert_coverage` (``pins_before_window`` passed
    on), then ``check_tool_pairing`` and ``check_provider_grammar`` of the body, which is
    returned.
    """
    body = assert_within_budget(compiled, recipe)
    assert_coverage(store, compiled, pins_before_window=pins_before_window)
    check_tool_pairing(body, recipe.output_format)
    check_provider_grammar(body, recipe.output_format)
    return body


def compact_checking_summarizer_grammar(
    store: HistoryStore, recipe: Recipe, keep_tail_tokens: int
) -> CapturingSummarizer:
    """Run one ``Compactor`` tick over ``store`` (tail closed) and check every summarizer request.

    ``keep_tail_tokens`` (tokens) is passed to ``Compactor.tick`` with ``close_tail=True``; the
    summarizer is a ``strategies.CapturingSummarizer``, returned with the requests it captured,
    each of which must keep the OpenAI chat grammar (``check_provider_grammar``, which raises
    ``InvariantViolation``, an ``AssertionError``, otherwise).
    """
    summarizer = CapturingSummarizer()
    Compactor(store, recipe, summarizer).tick(keep_tail_tokens=keep_tail_tokens, close_tail=True)
    for _kind, payload in summarizer.requests:
        check_provider_grammar(payload_json(payload), "openai")
    return summarizer
