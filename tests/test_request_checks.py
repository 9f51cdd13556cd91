"""The shared request checks (tests/request_checks.py) pass a sound request and trip on broken ones.

A store of 120 messages is compressed and compiled at 1,500 tokens (summaries and a live window);
each broken copy changes one field of the compiled request as a faulty engine would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest
from request_checks import assert_coverage, assert_coverage_pinning_system, assert_request
from strategies import CapturingSummarizer

from compaction import Message, Recipe, Store, compress_and_compile
from compaction.compile import CompiledRequest

RECIPE = Recipe(budget_tokens=1500, chunk_target_tokens=200, chunk_min_messages=2, merge_fanout=2)


@pytest.fixture(name="compiled_store")
def compiled_store_fixture() -> Iterator[tuple[Store, CompiledRequest]]:
    """A store of 120 alternating user and assistant messages, compressed and compiled at 1,500 tokens."""
    roles = ("user", "assistant")
    text = "the export job retried batch {i} twice and wrote the rest to the staging table"
    with Store(":memory:") as store:
        store.append(
            [Message(roles[i % 2], ({"type": "text", "text": text.format(i=i)},)) for i in range(120)]
        )
        compiled, _ticks = compress_and_compile(store, RECIPE, summarizer=CapturingSummarizer())
        assert compiled.summaries and compiled.live_start < 120  # summaries and a live window
        yield store, compiled


def test_a_sound_request_passes(compiled_store: tuple[Store, CompiledRequest]) -> None:
    store, compiled = compiled_store
    assert_request(store, compiled, RECIPE)
    assert_coverage_pinning_system(store, compiled)


BROKEN: dict[str, tuple[Callable[[CompiledRequest], CompiledRequest], str]] = {
    "newest message lost": (lambda c: dataclasses.replace(c, raw_seqs=c.raw_seqs[:-1]), "raw=False"),
    "summary shown twice": (
        lambda c: dataclasses.replace(c, summaries=c.summaries[:1] + c.summaries),
        "gap or overlap",
    ),
    "summary left out": (lambda c: dataclasses.replace(c, summaries=c.summaries[1:]), "gap or overlap"),
    "message shown raw twice": (
        lambda c: dataclasses.replace(c, raw_seqs=c.raw_seqs + c.raw_seqs[:1]),
        "twice",
    ),
    "summarized message also raw": (
        lambda c: dataclasses.replace(c, raw_seqs=(0, *c.raw_seqs)),
        "seq 0: raw=True, summaries=1",
    ),
    "a message not counted": (
        lambda c: dataclasses.replace(c, total_messages=c.total_messages - 1),
        "counts",
    ),
    "over the budget": (
        lambda c: dataclasses.replace(c, request=dataclasses.replace(c.request, tokens=1501)),
        "1501 tokens, over 1500",
    ),
}


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_a_broken_request_trips_the_check(compiled_store: tuple[Store, CompiledRequest], fault: str) -> None:
    store, compiled = compiled_store
    breaks, said = BROKEN[fault]
    with pytest.raises(AssertionError, match=said):
        assert_request(store, breaks(compiled), RECIPE)


def test_a_pin_before_the_window_is_allowed_only_when_named(
    compiled_store: tuple[Store, CompiledRequest],
) -> None:
    store, compiled = compiled_store
    pinned = dataclasses.replace(compiled, raw_seqs=(0, *compiled.raw_seqs))
    with pytest.raises(AssertionError, match="seq 0: raw=True, summaries=1"):
        assert_coverage(store, pinned)
    assert_coverage(store, pinned, pinned=[0])
    assert_coverage(store, pinned, pins_before_window=True)
    with pytest.raises(AssertionError, match="seq 1: pinned but not shown raw"):
        assert_coverage(store, pinned, pinned=[0, 1])
