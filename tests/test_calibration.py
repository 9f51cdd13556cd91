"""Calibration: the per-model correction fitted from usage records, applied to compile's budget."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from cli_runner import runner
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import Recipe, Store, compress_and_compile
from compaction.blocks import Message
from compaction.calibration import (
    CLAMP,
    FIT_VERSION,
    MIN_SAMPLES,
    WINDOW,
    calibrated_budget,
    correction_for,
    fit_correction,
    fits_from_ledger,
    fits_from_store,
    usage_counts,
)
from compaction.cli import main
from compaction.compile import CompiledRequest
from compaction.errors import InvalidArgument, OverBudget, StoreError
from compaction.pipeline import run_pipeline
from compaction.serve.ledger import Ledger, RequestRecord

ROOT = Path(__file__).resolve().parent.parent
PI = ROOT / "examples" / "pi__pi-mono__before-compaction.jsonl"

ratio = st.floats(min_value=0.01, max_value=100.0, allow_nan=False, allow_infinity=False)


def clamp(value: float) -> float:
    return min(CLAMP[1], max(CLAMP[0], value))


# -- the fit ---------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(ratio, min_size=MIN_SAMPLES, max_size=80))
def test_a_fit_lies_within_the_clamp_and_between_the_smallest_and_largest_ratio(ratios: list[float]) -> None:
    fit = fit_correction(ratios, model="m", newest_id=7)
    assert fit is not None and fit.samples == len(ratios) and fit.model == "m"
    assert CLAMP[0] <= fit.factor <= CLAMP[1]
    assert clamp(min(ratios)) - 1e-6 <= fit.factor <= clamp(max(ratios)) + 1e-6
    assert min(ratios) - 1e-6 <= fit.p10 <= fit.p90 <= max(ratios) + 1e-6
    assert fit.version == f"{FIT_VERSION}@7"
    middle = sorted(ratios)
    assert fit.clamped == (
        not CLAMP[0] <= (middle[len(middle) // 2] + middle[(len(middle) - 1) // 2]) / 2 <= CLAMP[1]
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=1.15, max_value=1.25), min_size=MIN_SAMPLES, max_size=40),
    st.lists(
        st.one_of(st.floats(min_value=0.01, max_value=0.2), st.floats(min_value=5.0, max_value=1e6)),
        max_size=39,
    ),
)
def test_outliers_fewer_than_the_good_samples_leave_a_median_fit_among_the_good_ones(
    good: list[float], outliers: list[float]
) -> None:
    outliers = outliers[: len(good) - 1]
    fit = fit_correction(good + outliers, model="m")
    assert fit is not None
    assert min(good) - 1e-6 <= fit.factor <= max(good) + 1e-6


@given(st.lists(ratio, max_size=MIN_SAMPLES - 1))
def test_below_the_minimum_count_there_is_no_correction(ratios: list[float]) -> None:
    assert fit_correction(ratios, model="m") is None


def test_the_fit_is_the_median_clamped_with_nearest_rank_spread() -> None:
    fit = fit_correction([1.0, 1.1, 1.2, 1.3, 1.4, 1.5], model="m", newest_id=12)
    assert fit is not None
    assert (fit.factor, fit.samples, fit.p10, fit.p90, fit.version, fit.clamped) == (
        1.25,
        6,
        1.0,
        1.5,
        "1@12",
        False,
    )
    high = fit_correction([3.0] * 5, model="m")
    assert high is not None and (high.factor, high.clamped) == (2.0, True)
    assert fit_correction([0.0, -1.0, math.nan, math.inf, 1.0], model="m") is None  # one usable ratio
    with pytest.raises(InvalidArgument, match="clamp must be two positive numbers"):
        fit_correction([1.0] * 5, model="m", clamp=(2.0, 1.0))


def test_the_budget_is_divided_by_a_correction_above_one_and_kept_below_one_unless_asked() -> None:
    up = fit_correction([1.3] * 5, model="m")
    down = fit_correction([0.8] * 5, model="m")
    assert calibrated_budget(10_000, up) == 7692  # floor(10000 / 1.3)
    assert calibrated_budget(10_000, down) == 10_000
    assert calibrated_budget(10_000, down, raise_budget=True) == 12_500
    assert calibrated_budget(10_000, None) == 10_000


def test_provider_usage_is_normalized_to_every_prompt_token() -> None:
    openai = usage_counts(
        "openai",
        {"prompt_tokens": 1200, "completion_tokens": 80, "prompt_tokens_details": {"cached_tokens": 1024}},
    )
    assert openai is not None and (openai.input_tokens, openai.cache_read_tokens, openai.output_tokens) == (
        1200,
        1024,
        80,
    )
    anthropic = usage_counts(
        "anthropic",
        {
            "input_tokens": 30,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 200,
            "output_tokens": 9,
        },
    )
    assert anthropic is not None
    assert (anthropic.input_tokens, anthropic.cache_read_tokens, anthropic.cache_write_tokens) == (
        1230,
        1000,
        200,
    )
    responses = usage_counts(
        "openai-responses", {"input_tokens": 500, "input_tokens_details": {"cached_tokens": 128}}
    )
    assert responses is not None and (responses.input_tokens, responses.cache_read_tokens) == (500, 128)
    assert usage_counts("openai", None) is None
    assert usage_counts("openai", {"completion_tokens": 3}) is None
    assert usage_counts("anthropic", {"input_tokens": "12"}) is None


# -- from the store, in compile --------------------------------------------------------------
def _history(turns: int) -> list[Message]:
    out = []
    for i in range(turns):
        out.append(
            Message("user", ({"type": "text", "text": f"question {i}: " + "why does the cache fail " * 12},))
        )
        out.append(
            Message(
                "assistant", ({"type": "text", "text": f"answer {i}: " + "because the key changed " * 12},)
            )
        )
    return out


def _record(store: Store, model: str, ratios: list[float], *, compiled: int = 2000) -> None:
    for r in ratios:
        store.record_usage(model, "openai", compiled, input_tokens=round(compiled * r), source="proxy")


def test_the_store_fit_uses_only_records_with_a_usage_of_that_model() -> None:
    with Store(":memory:") as store:
        _record(store, "gpt-4o", [1.1, 1.2, 1.3, 1.2])
        store.record_usage("gpt-4o", "openai", 2000)  # no usage: never a sample
        _record(store, "other", [1.9] * 10)
        assert correction_for(store, "gpt-4o") is None  # 4 samples
        _record(store, "gpt-4o", [1.25])
        fit = correction_for(store, "gpt-4o")
        newest = store.usage_records("gpt-4o")[-1].id
    assert fit is not None and (fit.factor, fit.samples, fit.version) == (1.2, 5, f"{FIT_VERSION}@{newest}")


@settings(max_examples=12, deadline=None)
@given(
    st.lists(st.floats(min_value=0.6, max_value=1.9), min_size=MIN_SAMPLES, max_size=12),
    st.integers(1500, 6000),
)
def test_compile_under_a_fitted_correction_stays_within_budget_over_correction(
    ratios: list[float], budget: int
) -> None:
    # Calibration's whole effect is the budget: compiling under a fit must do exactly what an
    # uncalibrated compile at floor(budget / factor) does -- fit with the same tokens, or raise
    # the same OverBudget (a history this engine cannot shrink to that budget), then naming the
    # calibrated budget and where it came from.
    with Store(":memory:") as store:
        store.append(_history(40))
        _record(store, "gpt-4o", ratios)
        fit = correction_for(store, "gpt-4o")
        assert fit is not None
        effective = math.floor(budget / fit.factor) if fit.factor > 1 else budget
        try:
            compiled, _ticks = compress_and_compile(store, Recipe(budget_tokens=budget), mode="replan")
        except OverBudget as err:
            calibrated: CompiledRequest | OverBudget = err
        else:
            calibrated = compiled
    with Store(":memory:") as plain:
        plain.append(_history(40))
        try:
            reference, _ticks = compress_and_compile(
                plain, Recipe(budget_tokens=effective, calibrate=False), mode="replan"
            )
        except OverBudget as err:
            assert isinstance(calibrated, OverBudget), (
                f"calibrated compile fit, uncalibrated at {effective} did not"
            )
            assert (calibrated.budget, calibrated.needed, calibrated.stage) == (
                err.budget,
                err.needed,
                err.stage,
            )
            assert calibrated.budget == effective
            if effective != budget:
                assert f"is the recipe's {budget} divided by gpt-4o's calibration correction" in str(
                    calibrated
                )
            assert str(calibrated).startswith(str(err).rstrip("."))
            return
    assert isinstance(calibrated, CompiledRequest), f"uncalibrated compile at {effective} fit: {calibrated}"
    assert (calibrated.budget, calibrated.tokens) == (effective, reference.tokens)
    assert calibrated.tokens <= effective
    assert calibrated.tokens * max(fit.factor, 1.0) <= budget + 1e-6


def test_calibrate_false_and_raising_below_one_are_the_recipes_choice() -> None:
    with Store(":memory:") as store:
        store.append(_history(40))
        _record(store, "gpt-4o", [1.6] * 5)
        off, _ = compress_and_compile(store, Recipe(budget_tokens=3000, calibrate=False), mode="replan")
        on, _ = compress_and_compile(store, Recipe(budget_tokens=3000), mode="replan")
        assert (off.budget, on.budget) == (3000, 1875)
        assert on.tokens <= 1875 < off.tokens <= 3000
    with Store(":memory:") as store:
        store.append(_history(40))
        _record(store, "gpt-4o", [0.75] * 5)
        kept, _ = compress_and_compile(store, Recipe(budget_tokens=3000), mode="replan")
        raised, _ = compress_and_compile(
            store, Recipe(budget_tokens=3000, calibrate_raise_budget=True), mode="replan"
        )
        assert (kept.budget, raised.budget) == (3000, 4000)


def test_run_reports_the_correction_it_applied(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with Store(db) as store:
        _record(store, "claude-sonnet-4-5", [1.18, 1.2, 1.22, 1.19, 1.21, 1.2])
        newest = store.usage_records()[-1].id
    result = runner().invoke(
        main, ["run", str(PI), "--budget", "16000", "--to", "anthropic", "--store", str(db), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["calibration"] == {
        "model": "claude-sonnet-4-5",
        "factor": 1.2,
        "samples": 6,
        "p10": 1.18,
        "p90": 1.22,
        "version": f"{FIT_VERSION}@{newest}",
        "clamped": False,
    }
    assert report["budget"] == 13333 and report["tokens_after"] <= 13333  # floor(16000 / 1.2)
    plain = run_pipeline(
        PI, Recipe(budget_tokens=16000, output_format="anthropic"), store_path=tmp_path / "t.sqlite"
    )
    assert plain.calibration is None and plain.compiled.budget == 16000


# -- the calibrate command -------------------------------------------------------------------
def test_calibrate_prints_per_model_samples_correction_spread_and_version(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with Store(db, conversation="a") as store:
        _record(store, "claude-sonnet-4-5", [1.1, 1.15, 1.2, 1.25, 1.3])
        _record(store, "gpt-4o", [1.0, 1.0])
        newest = store.usage_records("claude-sonnet-4-5")[-1].id
    with Store(db, conversation="b") as other:
        _record(other, "claude-sonnet-4-5", [1.9] * 3)
    result = runner().invoke(main, ["calibrate", "--store", str(db), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = {row["model"]: row for row in json.loads(result.stdout)}
    assert rows["claude-sonnet-4-5"]["samples"] == 8 and rows["claude-sonnet-4-5"]["correction"] == 1.275
    assert rows["gpt-4o"] == {
        "source": str(db),
        "model": "gpt-4o",
        "samples": 2,
        "correction": None,
        "p10": None,
        "p90": None,
        "version": None,
        "clamped": False,
    }
    only_a = runner().invoke(main, ["calibrate", "--store", str(db), "--conversation", "a", "--json"])
    claude = {row["model"]: row for row in json.loads(only_a.stdout)}["claude-sonnet-4-5"]
    assert (claude["samples"], claude["correction"], claude["p10"], claude["p90"], claude["version"]) == (
        5,
        1.2,
        1.1,
        1.3,
        f"{FIT_VERSION}@{newest}",
    )
    table = runner().invoke(main, ["calibrate", "--store", str(db), "--conversation", "a"])
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["model", "samples", "correction", "p10", "p90", "version", "source"]
    assert lines[1].split()[:6] == [
        "claude-sonnet-4-5",
        "5",
        "1.2000",
        "1.100",
        "1.300",
        f"{FIT_VERSION}@{newest}",
    ]
    assert lines[2].split()[:3] == ["gpt-4o", "2", "none"] and f"fewer than {MIN_SAMPLES} samples" in lines[2]


def test_calibrate_reads_the_proxys_ledger(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "requests.sqlite")
    shipped = [1000, 2000, 3000, 4000, 5000]
    for i, tokens in enumerate(shipped):  # Anthropic: uncached input + cache reads + writes is the prompt
        ledger.add(
            RequestRecord(
                "anthropic",
                status=200,
                conversation="c",
                model="claude-opus-4-1",
                tokens_shipped=tokens,
                input_tokens=tokens // 10,
                cache_read_tokens=tokens,
                cache_write_tokens=tokens // 10 + 50 * i,
            )
        )
    ledger.add(
        RequestRecord(
            "openai", status=200, conversation="d", model="gpt-4o", tokens_shipped=1000, input_tokens=1050
        )
    )
    ledger.add(
        RequestRecord(
            "openai", status=500, conversation="d", model="gpt-4o", tokens_shipped=1000, input_tokens=9999
        )
    )
    ledger.close()
    fits = {model: (fit, n) for model, fit, n in fits_from_ledger(tmp_path / "requests.sqlite")}
    claude, n = fits["claude-opus-4-1"]
    ratios = sorted((t // 10 + t + t // 10 + 50 * i) / t for i, t in enumerate(shipped))
    assert n == 5 and claude is not None and claude.factor == round(ratios[2], 6)
    assert fits["gpt-4o"] == (None, 1)  # the 500 is no sample
    result = runner().invoke(
        main, ["calibrate", "--store-dir", str(tmp_path), "--conversation", "c", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["model"], row["samples"], row["correction"]) == ("claude-opus-4-1", 5, round(ratios[2], 6))


def test_calibrate_refuses_a_missing_ledger_or_store_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no proxy ledger there"):
        fits_from_ledger(tmp_path / "requests.sqlite")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "requests.sqlite").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StoreError, match="cannot read as a proxy ledger"):
        fits_from_ledger(tmp_path / "junk" / "requests.sqlite")
    result = runner().invoke(main, ["calibrate", "--store", str(tmp_path / "none.sqlite")])
    assert (
        result.exit_code != 0
        and "none.sqlite" in result.stderr
        and len(result.stderr.strip().splitlines()) == 1
    )
    bare = runner().invoke(main, ["calibrate"])
    assert bare.exit_code == 2 and "--store" in bare.stderr


def test_an_empty_ledger_file_is_no_ledger(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "requests.sqlite").close()
    with pytest.raises(StoreError, match="cannot read as a proxy ledger"):
        fits_from_ledger(tmp_path / "requests.sqlite")


def test_a_fit_follows_the_newest_window_of_records() -> None:
    with Store(":memory:") as store:
        _record(store, "gpt-4o", [1.9] * 300)  # before the provider changed its tokenizer
        _record(store, "gpt-4o", [1.1] * WINDOW)
        fit = correction_for(store, "gpt-4o")
        (row,) = fits_from_store(store)
    assert fit is not None and (fit.factor, fit.samples) == (1.1, WINDOW)
    assert row[1] == fit and row[2] == WINDOW


@given(st.integers(1, 2_000_000), st.floats(min_value=0.5, max_value=2.0), st.booleans())
def test_the_calibrated_budget_never_lets_the_providers_count_exceed_the_users_budget(
    budget: int, factor: float, raise_budget: bool
) -> None:
    fit = fit_correction([factor] * MIN_SAMPLES, model="m")
    assert fit is not None
    effective = calibrated_budget(budget, fit, raise_budget=raise_budget)
    assert effective >= 1
    if fit.factor > 1:
        # the largest budget whose provider count stays within the user's (1e-6: float products)
        # (a budget under the factor still compiles with 1 token, the least there is)
        assert effective * fit.factor <= budget + 1e-6 or effective == 1
        assert (effective + 1) * fit.factor > budget - 1e-6
    elif not raise_budget:
        assert effective == budget
    else:
        assert effective >= budget and effective * fit.factor <= budget + 1e-6
