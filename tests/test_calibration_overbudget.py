"""The case hypothesis saved: a fitted correction of 1.75 on a budget of 1500 tokens (857 calibrated).

``test_compile_under_a_fitted_correction_stays_within_budget_over_correction`` failed with
``OverBudget`` (884 tokens needed, budget 857) for ``ratios=[1.0, 1.0, 1.75, 1.75, 1.75]``,
``budget=1500``.  Calibration is not the cause: compression and compile both get the
calibrated budget, and an uncalibrated compile at 857 raises the same error after making the
same summaries.  What makes 857 too small is compression's own rounds (``events.compact_to``):
each round closes the tail past ``target // 2``, ``// 4``, ``// 8``, then 0 as a chunk of its
own, so the tail ends as four small level-1 summaries, fewer than ``merge_fanout`` (6) and so
never merged, each with its own framing; one round that closes the whole tail at once makes
two level-1 summaries, and those two merged into one make a request within 857 tokens.
Compression now merges those few summaries into one when every round is over
(``Compactor.merge_tail``), so 857 fits; the over-budget tests use a budget of 700 (400
calibrated), below anything this history can be made into.  (Two level-1 summaries alone
fitted 857 only while summaries came out well under their 400-token bound: since the offline
summary puts back the dropped lines that fit, they need 875 tokens, and two summaries at the
bound with the ask ledger and framing may need more than 857.)
"""

from __future__ import annotations

import math
from typing import Literal

import pytest
from test_calibration import _history, _record  # the property test's own history and usage records

from compaction import Recipe, Store, compress_and_compile
from compaction.calibration import correction_for
from compaction.compactor import Compactor
from compaction.compile import plan_compile
from compaction.errors import OverBudget
from compaction.summarizers.factory import summarizer_from_recipe
from compaction.tokens.counting import count_text

RATIOS = [1.0, 1.0, 1.75, 1.75, 1.75]
BUDGET = 1500
CALIBRATED = math.floor(BUDGET / 1.75)  # 857
OVER = 700  # floor(700 / 1.75) = 400: under the 426 tokens of the smallest request this history makes
OVER_CALIBRATED = math.floor(OVER / 1.75)


def _calibrated_store() -> Store:
    store = Store(":memory:")
    store.append(_history(40))
    _record(store, "gpt-4o", RATIOS)
    return store


def _plain_store() -> Store:
    store = Store(":memory:")
    store.append(_history(40))
    return store


def _ranges(store: Store) -> list[tuple[int, int, int]]:
    return [(s.level, s.start_seq, s.end_seq) for s in store.summaries()]


def test_the_saved_ratios_fit_a_correction_of_1_75_so_compile_is_for_857_tokens() -> None:
    with _calibrated_store() as store:
        fit = correction_for(store, "gpt-4o")
    assert fit is not None and (fit.factor, fit.samples) == (1.75, 5)
    assert CALIBRATED == 857


@pytest.mark.parametrize("mode", ["replan", "events"])
def test_a_budget_too_small_raises_what_an_uncalibrated_compile_at_its_share_raises(
    mode: Literal["events", "replan"],
) -> None:
    with _calibrated_store() as store, pytest.raises(OverBudget) as calibrated:
        compress_and_compile(store, Recipe(budget_tokens=OVER), mode=mode)
    with _plain_store() as plain, pytest.raises(OverBudget) as uncalibrated:
        compress_and_compile(plain, Recipe(budget_tokens=OVER_CALIBRATED, calibrate=False), mode=mode)
    got, want = calibrated.value, uncalibrated.value
    assert (got.budget, got.needed, got.stage) == (want.budget, want.needed, want.stage)
    assert got.budget == OVER_CALIBRATED and got.needed > OVER_CALIBRATED
    assert got.__cause__ is not None and str(got.__cause__) == str(want)


def test_the_error_says_its_budget_is_the_recipes_divided_by_the_correction() -> None:
    with _calibrated_store() as store, pytest.raises(OverBudget) as caught:
        compress_and_compile(store, Recipe(budget_tokens=OVER), mode="replan")
    message = str(caught.value)
    assert f"the budget of {OVER_CALIBRATED} tokens" in message
    assert (
        f"The budget of {OVER_CALIBRATED} tokens is the recipe's {OVER} divided by gpt-4o's calibration "
        "correction 1.75 (the provider counted its requests 1.75 times what we count, median of 5 usage "
        f"records); calibrate = false compiles for {OVER}."
    ) in message
    assert "\n" not in message


def test_compression_is_given_the_calibrated_budget_not_the_recipes() -> None:
    with _calibrated_store() as store:
        compress_and_compile(store, Recipe(budget_tokens=BUDGET), mode="replan")
        calibrated = _ranges(store)
    with _plain_store() as plain:
        compress_and_compile(plain, Recipe(budget_tokens=CALIBRATED, calibrate=False), mode="replan")
        at_857 = _ranges(plain)
    with _plain_store() as plain:
        compress_and_compile(plain, Recipe(budget_tokens=BUDGET, calibrate=False), mode="replan")
        at_1500 = _ranges(plain)
    assert calibrated == at_857
    assert calibrated != at_1500


def test_a_budget_whose_calibrated_share_the_history_fits_compiles_within_it() -> None:
    budget = 1600  # floor(1600 / 1.75) = 914
    with _calibrated_store() as store:
        compiled, _ticks = compress_and_compile(store, Recipe(budget_tokens=budget), mode="replan")
    assert compiled.budget == 914
    assert compiled.tokens <= 914 and compiled.tokens * 1.75 <= budget


def test_one_round_closing_the_whole_tail_then_its_merge_makes_a_request_within_857_tokens() -> None:
    # The evidence that 857 is reachable: the store's own compactor, asked once for
    # everything but the open tail, leaves two level-1 summaries within their bound; merged
    # into one (what compression does when every round is over), they fit.
    recipe = Recipe(budget_tokens=CALIBRATED, calibrate=False)
    with _plain_store() as store:
        summarizer = summarizer_from_recipe(recipe)
        try:
            compactor = Compactor(store, recipe, summarizer)
            compactor.tick(keep_tail_tokens=0, close_tail=True)
            assert [level for level, _start, _end in _ranges(store)] == [1, 1]
            assert all(
                count_text(s.text, recipe.encoding) <= recipe.summary_max_tokens for s in store.summaries()
            )
            compactor.merge_tail(1)
        finally:
            summarizer.close()
        assert [level for level, _start, _end in _ranges(store)] == [1, 1, 2]
        plan = plan_compile(store, recipe, budget=CALIBRATED)
    assert plan.compiled is not None and plan.compiled.tokens <= CALIBRATED


def test_compile_at_857_tokens_fits_when_one_round_of_compression_would() -> None:
    with _calibrated_store() as store:
        compiled, _ticks = compress_and_compile(store, Recipe(budget_tokens=BUDGET), mode="replan")
    assert compiled.budget == CALIBRATED and compiled.tokens <= CALIBRATED
