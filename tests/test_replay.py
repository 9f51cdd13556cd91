"""The turn-by-turn replay: its figures, the cached-prefix measure, the prices, the baselines, the CLI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import runner
from conftest import CASES, EXAMPLES
from strategies import check_provider_grammar, check_tool_pairing, payload_json

from compaction import ExtractiveSummarizer, InvalidTranscript, Message, Recipe, Store, gate
from compaction.cli import main
from compaction.compile import live_image_settings
from compaction.errors import InvalidArgument, OverBudget, RecipeError
from compaction.formats import load_transcript
from compaction.replay import STRATEGIES, ReplayReport, replay
from compaction.replay_cli import MATPLOTLIB_MISSING
from compaction.replay_prefix import PrefixMeter, message_fingerprint
from compaction.replay_prices import DEFAULT_PRICES, PRICES
from compaction.replay_strategies import make_strategy, pipeline_accepts_mode
from compaction.wire import OutboundRequest

SWE = EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"
PI = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"
TARS = EXAMPLES / "agent-tars__browser__event-stream-with-many-images.json"
SMALL_BUDGET = 4000  # small enough that the swe-agent session compacts several times
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def assistant_turns(path: Path) -> int:
    messages = load_transcript(path).messages
    return sum(1 for i, m in enumerate(messages) if m.role == "assistant" and i > 0)


def without_timing(report: ReplayReport) -> dict[str, Any]:
    data = report.to_dict()
    for result in data["strategies"].values():
        del result["compile_ms_p50"], result["compile_ms_p99"]
    return data


@pytest.fixture(scope="module")
def swe_report() -> ReplayReport:
    return replay(SWE, Recipe(budget_tokens=SMALL_BUDGET))


def check_consistent(report: ReplayReport, turns: int) -> None:
    """The figures every report must satisfy, whatever the strategy."""
    assert report.turns == turns
    assert [s.name for s in report.strategies] == list(STRATEGIES)
    for result in report.strategies:
        assert len(result.turns) == turns, result.name
        assert 0.0 <= result.cached_share <= 1.0
        assert result.over_budget_turns == 0, result.name
        assert result.largest_request <= report.budget
        assert result.turns[0].cached_tokens == 0 and not result.turns[0].prefix_kept
        for turn in result.turns:
            assert turn.fits and 0 <= turn.cached_tokens <= turn.tokens <= report.budget
            assert turn.seconds >= 0
        assert 0 <= result.prefix_changes <= turns - 1
        assert 0 <= result.compile_ms(0.5) <= result.compile_ms(0.99)
        for price in report.prices:
            cached, uncached = result.cost(price)
            assert 0 < cached and 0 < uncached
            if price.explicit:
                # Anthropic bills what it writes to the cache at 1.25x; a strategy that breaks its
                # prefix every turn pays up to that much more than sending without caching.
                assert cached <= uncached * price.cache_write_usd / price.input_usd
            else:
                assert cached <= uncached, (result.name, price.model)


def test_report_figures_are_consistent(swe_report: ReplayReport) -> None:
    check_consistent(swe_report, assistant_turns(SWE))
    assert swe_report.format == "swe-agent" and swe_report.budget == SMALL_BUDGET
    assert swe_report.request_format == "openai" and swe_report.model == "gpt-4o"
    # the small budget forces compaction: the summarizing strategies change their prefix
    assert swe_report.strategy("compact-at-limit").prefix_changes >= 1
    assert swe_report.strategy("compact-at-limit").summarizer_requests >= 1
    assert swe_report.strategy("masking").summarizer_requests == 0


def test_results_are_deterministic(swe_report: ReplayReport) -> None:
    again = replay(SWE, Recipe(budget_tokens=SMALL_BUDGET))
    assert without_timing(again) == without_timing(swe_report)


def test_events_note_says_whether_the_pipeline_takes_a_mode(swe_report: ReplayReport) -> None:
    note = swe_report.strategy("events").note
    assert ("events ran as replan" in note) == (not pipeline_accepts_mode())


def test_a_history_that_fits_is_cached_whole_but_its_new_messages() -> None:
    """Without compaction each request is the previous one plus new messages: the cached prefix
    is exactly the previous request, and the prefix never changes."""
    report = replay(SWE, Recipe(budget_tokens=128_000), strategies=["replan", "compact-at-limit"])
    for result in report.strategies:
        assert result.prefix_changes == 0
        for before, turn in zip(result.turns, result.turns[1:], strict=False):
            assert turn.prefix_kept
            assert turn.cached_tokens == before.tokens, result.name


@pytest.mark.parametrize("name", ["compact-at-limit", "masking"])
def test_baselines_change_their_prefix_exactly_when_they_compact(swe_report: ReplayReport, name: str) -> None:
    result = swe_report.strategy(name)
    assert result.compactions >= 1
    for turn in result.turns[1:]:
        assert turn.prefix_kept != turn.compacted


def test_report_json_is_complete(swe_report: ReplayReport) -> None:
    data = json.loads(json.dumps(swe_report.to_dict()))
    assert set(data["strategies"]) == set(STRATEGIES)
    assert set(data["prices"]) == {p.model for p in DEFAULT_PRICES}
    for result in data["strategies"].values():
        assert len(result["per_turn"]["tokens"]) == data["turns"]
        assert set(result["cost"]) == set(data["prices"])


# -- the cached-prefix measure ----------------------------------------------------------------


def _gated(system: str, *texts: str) -> Any:
    messages = tuple(("user" if i % 2 == 0 else "assistant", ({"type": "text", "text": t},)) for i, t in enumerate(texts))
    return gate(OutboundRequest("live", system, messages), live_image_settings(Recipe()), format="openai")


def test_prefix_meter_counts_common_leading_messages() -> None:
    meter = PrefixMeter("o200k_base")
    first = _gated("be brief", "hello there", "hi", "how are you")
    assert meter.measure(first) == (0, False)
    grown = _gated("be brief", "hello there", "hi", "how are you", "fine", "good")
    cached, kept = meter.measure(grown)
    assert kept and cached == first.tokens
    changed = _gated("be brief", "hello there", "HI", "how are you", "fine", "good")
    cached, kept = meter.measure(changed)
    assert not kept and 0 < cached < first.tokens
    other_system = _gated("be verbose", "hello there", "HI", "how are you", "fine", "good")
    assert meter.measure(other_system) == (0, False)  # a new header invalidates the whole cache


def test_fingerprint_ignores_cache_control_markers() -> None:
    plain = {"type": "text", "text": "x"}
    marked = {**plain, "cache_control": {"type": "ephemeral"}}
    assert message_fingerprint("user", [plain]) == message_fingerprint("user", [marked])
    assert message_fingerprint("user", [plain]) != message_fingerprint("assistant", [plain])


# -- prices -----------------------------------------------------------------------------------


def test_prices_follow_each_providers_rules() -> None:
    gpt, claude, gemini = PRICES["gpt-5"], PRICES["claude-sonnet-4-5"], PRICES["gemini-2.5-pro"]
    assert gpt.turn_cost(2000, 1500).read == 1024 + 3 * 128  # hits count in 128-token steps
    assert gpt.turn_cost(2000, 1000).read == 0  # below 1,024 tokens: a miss
    assert gpt.turn_cost(500, 500).read == 0
    written = claude.turn_cost(10_000, 8_000)
    assert (written.read, written.written) == (8_000, 2_000)
    assert written.usd == pytest.approx((8_000 * 0.30 + 2_000 * 3.75) / 1e6)
    assert claude.turn_cost(900, 0).written == 0  # below the minimum nothing is written
    assert gemini.turn_cost(3000, 2000).read == 0 and gemini.turn_cost(3000, 2048).read == 2048
    for price in PRICES.values():
        assert "https://" in price.source and price.cache_read_usd < price.input_usd


# -- the baselines ----------------------------------------------------------------------------


def _store_until(path: Path, turn: int) -> Store:
    messages = load_transcript(path).messages
    at = [i for i, m in enumerate(messages) if m.role == "assistant" and i > 0][turn]
    store = Store(":memory:")
    store.append(messages[:at], chain_seed="test")
    return store


@pytest.mark.parametrize("output_format", ["openai", "anthropic"])
def test_masking_shows_loud_placeholders_and_a_valid_request(output_format: str) -> None:
    recipe = Recipe(budget_tokens=128_000, output_format=output_format)  # type: ignore[arg-type]
    store = _store_until(SWE, 8)
    try:
        request = make_strategy("masking", recipe, ExtractiveSummarizer()).request(store)
    finally:
        store.close()
    body = payload_json(request.payload)
    check_tool_pairing(body, output_format)
    check_provider_grammar(body, output_format)
    text = request.payload.decode("utf-8")
    assert text.count("[tool output masked: the result of ") >= 4
    assert "characters" in text and "older than the 3 newest tool rounds" in text


def test_masking_drops_the_oldest_messages_when_still_over_budget() -> None:
    result = replay(SWE, Recipe(budget_tokens=3000), strategies=["masking"]).strategy("masking")
    assert result.over_budget_turns == 0 and result.largest_request <= 3000
    assert result.prefix_changes >= 1


def test_a_turn_no_strategy_can_fit_is_reported_not_raised() -> None:
    # the newest tool output of turn 4 alone needs more than 2,400 tokens: masking keeps the
    # newest rounds raw and summarizes nothing, so it cannot fit; the turn is counted
    result = replay(SWE, Recipe(budget_tokens=2400), strategies=["masking"]).strategy("masking")
    failed = [t for t in result.turns if not t.fits]
    assert failed and result.over_budget_turns == len(failed)
    assert all(t.tokens == 0 and t.needed is not None and t.needed > 2400 for t in failed)
    assert result.largest_request <= 2400


def test_compact_at_limit_request_is_valid_after_a_compaction() -> None:
    recipe = Recipe(budget_tokens=3000, output_format="anthropic")
    store = _store_until(SWE, 12)
    try:
        strategy = make_strategy("compact-at-limit", recipe, ExtractiveSummarizer())
        request = strategy.request(store)
    finally:
        store.close()
    assert strategy.summarizer_requests >= 1 and request.tokens <= 3000
    body = payload_json(request.payload)
    check_tool_pairing(body, "anthropic")
    check_provider_grammar(body, "anthropic")
    assert "[Earlier messages, summarized" in request.payload.decode("utf-8")


# -- the library's argument checks ------------------------------------------------------------


def test_replay_takes_messages_and_checks_its_arguments() -> None:
    messages = [
        Message("user", ({"type": "text", "text": "hello"},)),
        Message("assistant", ({"type": "text", "text": "hi"},)),
        Message("user", ({"type": "text", "text": "bye"},)),
        Message("assistant", ({"type": "text", "text": "ciao"},)),
    ]
    report = replay(messages, Recipe(budget_tokens=1000))
    check_consistent(report, 2)
    assert report.source == "<messages>" and report.format is None
    with pytest.raises(OverBudget, match="token budget is required"):
        replay(messages, Recipe())
    with pytest.raises(RecipeError, match="replay strategies"):
        replay(messages, Recipe(budget_tokens=1000), strategies=["nope"])
    with pytest.raises(InvalidArgument, match="item 1 is str"):
        replay([messages[0], "hi"], Recipe(budget_tokens=1000))  # type: ignore[list-item]
    with pytest.raises(InvalidTranscript, match="nothing to replay"):
        replay(messages[:1], Recipe(budget_tokens=1000))
    assert replay(messages, Recipe(budget_tokens=1000), max_turns=1).turns == 1


# -- the command ------------------------------------------------------------------------------


def test_cli_prints_a_table() -> None:
    result = runner().invoke(main, ["replay", str(SWE), "--budget", str(SMALL_BUDGET)])
    assert result.exit_code == 0, result.stderr
    for text in ("compaction replay", "cached share", "compaction", "events", "p99 ms", "gpt-5 $", *STRATEGIES):
        assert text in result.stdout, text


def test_cli_json_parses() -> None:
    args = ["replay", str(SWE), "--budget", "8000", "--to", "anthropic", "--strategy", "masking",
            "--strategy", "replan", "--max-turns", "5", "--json"]
    result = runner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["turns"] == 5 and data["budget"] == 8000 and data["request_format"] == "anthropic"
    assert list(data["strategies"]) == ["masking", "replan"]
    assert data["model"] == "claude-sonnet-4-5"


def test_cli_plot(tmp_path: Path) -> None:
    out = tmp_path / "replay.png"
    args = ["replay", str(SWE), "--budget", str(SMALL_BUDGET), "--max-turns", "6", "--plot", str(out)]
    result = runner().invoke(main, args)
    if HAS_MATPLOTLIB:
        assert result.exit_code == 0, result.stderr
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert result.exit_code == 1
        assert result.stderr == f"compaction: error: {MATPLOTLIB_MISSING}\n"
        assert "install matplotlib (pip install 'compaction[plot]')" in result.stderr
        assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([str(CASES / "malformed-line.jsonl"), "--budget", "1000"], "malformed-line.jsonl"),
        ([str(CASES / "README.md"), "--budget", "1000"], "README.md"),
    ],
)
def test_cli_bad_input_is_one_clear_line(args: list[str], expected: str) -> None:
    result = runner().invoke(main, ["replay", *args])
    assert result.exit_code == 1, result.stdout
    assert result.stderr.startswith("compaction: error: ") and result.stderr.count("\n") == 1
    assert expected in result.stderr


def test_cli_without_a_budget_is_a_usage_error() -> None:
    result = runner().invoke(main, ["replay", str(SWE)])
    assert result.exit_code == 2, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("Error:")] == [
        "Error: a token budget is required: give --budget N, or budget_tokens in the --recipe file"
    ]


# -- real sessions, whole ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("path", "budget"), [(PI, 32_000), (TARS, 32_000), (EXAMPLES / "openhands__multi-swe-bench__output.jsonl", 32_000)])
def test_real_sessions_replay_within_budget(path: Path, budget: int) -> None:
    report = replay(path, Recipe(budget_tokens=budget))
    check_consistent(report, assistant_turns(path))
    compact = report.strategy("compact-at-limit")
    assert compact.cached_share > report.strategy("masking").cached_share or compact.prefix_changes == 0


def test_replay_says_when_nothing_fits_and_checks_the_plot_folder_first(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from compaction.cli import main

    transcript = str(Path(__file__).parent.parent / "examples" / "swe-agent__marshmallow-1867__function-calling.traj")
    tiny = CliRunner().invoke(main, ["replay", transcript, "--budget", "50"])
    assert tiny.exit_code == 0 and "no request of any strategy fit the budget of 50 tokens" in tiny.output
    missing = CliRunner().invoke(main, ["replay", transcript, "--budget", "8000", "--plot", str(tmp_path / "no" / "x.png")])
    assert missing.exit_code == 1 and "does not exist" in missing.output
