"""The calibration fit compile applies is kept per store and model until a new usage record arrives.

``correction_for`` fits the newest ``WINDOW`` usage records of a model; compile asks for it on
every turn.  These tests count the reads of ``usage_records`` a sequence of turns makes, and
check that a new record (made through the same store object or another one on the same
database) changes the fit, on every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from store_backends import every_backend_location, every_backend_store  # noqa: F401  (fixtures over every backend)

from compaction import Recipe, Store, compress_and_compile
from compaction.blocks import Message
from compaction.calibration import WINDOW, correction_for, fit_correction
from compaction.store import HistoryStore
from compaction.store.factory import open_store

MODEL = Recipe().target_model


class _CountedReads:
    """Wrap a store's ``usage_records`` so a test can count the reads of it."""

    def __init__(self, store: Any) -> None:
        self.calls = 0
        self._read: Callable[..., Any] = store.usage_records
        store.usage_records = self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._read(*args, **kwargs)


def _record(store: Any, ratios: list[float], *, model: str = MODEL, compiled: int = 2000) -> None:
    for r in ratios:
        store.record_usage(model, "openai", compiled, input_tokens=round(compiled * r), source="proxy")


def _uncached_fit(store: Any, model: str) -> Any:
    """The fit as the newest WINDOW records give it, read without the kept fit."""
    records = [r for r in store.usage_records(model, WINDOW) if r.ratio is not None]
    if not records:
        return None
    return fit_correction([r.ratio for r in records], model=model, newest_id=records[-1].id)


def _history(turns: int) -> list[Message]:
    return [
        Message(role, ({"type": "text", "text": f"{role} {i}: " + "the cache key changed again " * 10},))
        for i in range(turns)
        for role in ("user", "assistant")
    ]


def test_turns_without_a_new_usage_record_read_the_records_once(store: HistoryStore) -> None:
    store.append(_history(20))
    _record(store, [1.2] * 6)
    reads = _CountedReads(store)
    budgets = []
    for turn in range(4):
        store.append([Message("user", ({"type": "text", "text": f"one more question, turn {turn}"},))])
        compiled, _ = compress_and_compile(store, Recipe(budget_tokens=3000), mode="replan")
        budgets.append(compiled.budget)
    assert reads.calls == 1
    assert budgets == [2500] * 4  # floor(3000 / 1.2) on every turn, from the one fit


def test_a_new_usage_record_changes_the_fit(store: HistoryStore) -> None:
    _record(store, [1.2] * 5)
    reads = _CountedReads(store)
    first = correction_for(store, MODEL)
    again = correction_for(store, MODEL)
    assert reads.calls == 1 and first is again
    assert first is not None and (first.factor, first.samples) == (1.2, 5)
    _record(store, [1.6] * 2)
    changed = correction_for(store, MODEL)
    assert reads.calls == 2
    assert changed is not None and (changed.factor, changed.samples) == (1.2, 7)
    assert changed.version != first.version
    _record(store, [1.6] * 4)
    moved = correction_for(store, MODEL)
    assert reads.calls == 3
    assert moved is not None and (moved.factor, moved.samples) == (1.6, 11)


def test_a_record_of_another_model_keeps_the_fit(store: HistoryStore) -> None:
    _record(store, [1.3] * 5)
    reads = _CountedReads(store)
    kept = correction_for(store, MODEL)
    _record(store, [1.9] * 5, model="another-model")
    assert correction_for(store, MODEL) is kept and reads.calls == 1
    other = correction_for(store, "another-model")
    assert other is not None and other.factor == 1.9 and reads.calls == 2


def test_a_record_made_through_another_store_object_changes_the_fit(location: str) -> None:
    with open_store(location, conversation="a") as a, open_store(location, conversation="b") as b:
        _record(a, [1.1] * 5)
        first = correction_for(a, MODEL)
        assert first is not None and first.factor == 1.1
        _record(b, [1.5] * 6)  # another process would do the same through its own object
        changed = correction_for(a, MODEL)
        assert changed is not None and (changed.factor, changed.samples) == (1.5, 11)


def test_a_store_without_records_reads_none() -> None:
    with Store(":memory:") as store:
        reads = _CountedReads(store)
        assert correction_for(store, MODEL) is None
        assert reads.calls == 0 and store.newest_usage_id() == 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("record"), st.sampled_from(["m1", "m2"]), st.floats(0.3, 3.0)),
            st.tuples(st.just("no usage"), st.sampled_from(["m1", "m2"]), st.just(0.0)),
            st.tuples(st.just("fit"), st.sampled_from(["m1", "m2"]), st.just(0.0)),
        ),
        max_size=40,
    )
)
def test_the_kept_fit_always_equals_a_fresh_fit(steps: list[tuple[str, str, float]]) -> None:
    with Store(":memory:") as store:
        for action, model, ratio in steps:
            if action == "record":
                _record(store, [ratio], model=model)
            elif action == "no usage":
                store.record_usage(model, "openai", 2000)
            else:
                assert correction_for(store, model) == _uncached_fit(store, model)
        for model in ("m1", "m2"):
            assert correction_for(store, model) == _uncached_fit(store, model)
