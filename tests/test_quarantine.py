# ruff: noqa: F811  (the imported fake_openai fixture is taken as an argument)
"""Quarantine of chunks the summarizer keeps failing on, and the split fallback of failed merges.

Driven through real compaction against :mod:`fake_openai_server` on loopback (scripted to fail
on one chunk, one merge size, or everything), and by hypothesis over random failure patterns
with an in-process summarizer.  Waits are recorded by an injected ``sleep``, never slept.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeOpenAI, Raw, completion, fake_openai  # noqa: F401
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_http_summarizer import KEY_ENV, MODEL, SECRET, Waits, conversation, summarizer, text_recipe

from compaction import Compactor, OverBudget, Recipe, Store, compile_request
from compaction.blocks import Message
from compaction.compactor import QUARANTINE_MARK, l1_frontier, quarantined_chunks
from compaction.errors import SummarizerError, SummarizerRefused, SummarizerUnavailable
from compaction.summarizers import ExtractiveSummarizer
from compaction.summarizers.base import SummaryResult
from compaction.summarizers.openai_chat import OpenAIChatSummarizer
from compaction.types import SummaryKind
from compaction.wire import GatedRequest

POISON = "POISON-ROUND"
#: Round 3's prompt (seq 12) lies in the chunk [11, 15) of :func:`history` under :func:`recipe`.
POISONED = (11, 15)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "store.db")
    try:
        yield s
    finally:
        s.close()


def history(rounds: int = 12, poisoned: int | None = 3) -> list[Message]:
    """Tool rounds of four messages; round ``poisoned``'s prompt carries :data:`POISON`."""
    messages = conversation(rounds)
    if poisoned is not None:
        seq = 4 * poisoned
        messages[seq] = Message("user", ({"type": "text", "text": f"{POISON}: please fix bug {poisoned}"},))
    return messages


def recipe(**overrides: Any) -> Recipe:
    return text_recipe(**{"merge_fanout": 50, **overrides})


def is_merge(request: Any) -> bool:
    return str(request["messages"][0]["content"]).startswith("You merge")


def ok(request: Any) -> Any:
    size = len(json.dumps(request))
    return completion(request, f"Asked:\n- a summary by the fake server ({size} bytes)\nDone:\n- summarized")


def bad_parameter(request: Any) -> Raw:
    """HTTP 400 for a bad parameter: not a refusal, not transient (a plain SummarizerError)."""
    error = {
        "error": {
            "code": "invalid_value",
            "message": "unsupported value in messages",
            "type": "invalid_request_error",
        }
    }
    return Raw(400, {"Content-Type": "application/json"}, error)


def script(
    fake: FakeOpenAI, fails: Callable[[Any], bool], failure: Callable[[Any], Any] = bad_parameter
) -> None:
    """Answer ``failure(request)`` to requests ``fails`` picks, a summary to the others."""
    fake.set_mode(
        "scripted", answer=lambda request, _headers: failure(request) if fails(request) else ok(request)
    )


def poisoned_l1(request: Any) -> bool:
    return POISON in json.dumps(request) and not is_merge(request)


def sent_poison(fake: FakeOpenAI, since: int = 0) -> int:
    return sum(1 for r in fake.requests[since:] if poisoned_l1(r.json()))


def rows(store: Store, level: int = 1) -> list[tuple[int, int, str]]:
    return [(f["start_seq"], f["end_seq"], f["kind"]) for f in store.failures() if f["level"] == level]


def assert_covered(store: Store) -> None:
    """Level-1 summaries are contiguous from 0 and the coarsest walk (compile's cover) reaches their end."""
    frontier = l1_frontier(store.summaries(level=1))
    assert frontier == store.summary_frontier(1)  # no gap: every L1 is in the chain from 0
    position = 0
    while position < frontier:
        best = store.coarsest_summary_at(position, frontier)
        assert best is not None, f"nothing covers seq {position}"
        position = best.end_seq
    assert position == frontier


# -- quarantine -------------------------------------------------------------------------------
def test_a_chunk_failing_on_three_ticks_is_quarantined_and_later_chunks_proceed(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    store.append(history())
    script(fake_openai, poisoned_l1)
    reports = []
    with summarizer(fake_openai) as s:
        for _tick in range(3):
            reports.append(Compactor(store, recipe(), summarizer=s).tick())
            assert_covered(store)
        assert [(r.failures, r.quarantined) for r in reports] == [(1, 0), (1, 0), (0, 1)]
        assert [r.l1_added for r in reports] == [3, 0, 9]  # chunks after the poisoned one waited
        assert rows(store) == [(*POISONED, "failed")] * 3
        (chunk,) = quarantined_chunks(store)
        assert (chunk.level, chunk.start_seq, chunk.end_seq, chunk.failures) == (1, *POISONED, 3)
        assert chunk.failed_summarizer == f"openai-http ({MODEL})"
        assert "HTTP 400" in chunk.last_reason and "unsupported value in messages" in chunk.last_reason
        assert "\n" not in chunk.last_reason and SECRET not in chunk.last_reason
        (stand_in,) = [x for x in store.summaries(level=1) if x.start_seq == POISONED[0]]
        first, _, body = stand_in.text.partition("\n")
        assert first == (
            "[Quarantined: the summarizer failed on this chunk on 3 ticks "
            f"(last: {chunk.last_reason}); this is an offline summary]"
        )
        assert body.strip() and POISON in body  # the offline record of the chunk itself
        assert (
            stand_in.provenance["summarizer"] == "extractive" and stand_in.provenance["quarantined"] is True
        )
        assert stand_in.provenance["last_reason"] == chunk.last_reason
        # Later ticks never send the quarantined chunk again, and record nothing more for it.
        sent = len(fake_openai.requests)
        store.append(history(4, poisoned=None)[:4], chain_seed="more")
        for _tick in range(2):
            Compactor(store, recipe(), summarizer=s).tick()
        assert sent_poison(fake_openai, sent) == 0 and rows(store) == [(*POISONED, "failed")] * 3
    assert l1_frontier(store.summaries(level=1)) >= 47
    compiled = compile_request(store, recipe(budget_tokens=2500))
    assert compiled.tokens <= 2500 and stand_in.id in [x.id for x in compiled.summaries]
    payload = compiled.request.payload.decode("utf-8")
    assert "[Quarantined: the summarizer failed on this chunk on 3 ticks" in payload


@pytest.mark.parametrize("after", [1, 2, 5])
def test_quarantine_after_is_the_number_of_failed_ticks(
    fake_openai: FakeOpenAI, store: Store, after: int
) -> None:
    store.append(history())
    script(fake_openai, poisoned_l1)
    with summarizer(fake_openai) as s:
        quarantined_on = [
            Compactor(store, recipe(quarantine_after=after), summarizer=s).tick().quarantined
            for _ in range(after + 1)
        ]
    assert quarantined_on == [0] * (after - 1) + [1, 0]
    assert rows(store) == [(*POISONED, "failed")] * after
    assert [c.failures for c in quarantined_chunks(store)] == [after]


def test_an_empty_answer_counts_as_a_failed_tick(fake_openai: FakeOpenAI, store: Store) -> None:
    """A refusal (empty text) is split first; what still fails after splitting counts once per tick."""
    store.append(history())
    script(fake_openai, poisoned_l1, failure=lambda request: completion(request, "", "stop"))
    with summarizer(fake_openai) as s:
        reports = [Compactor(store, recipe(), summarizer=s).tick() for _ in range(3)]
    assert [r.quarantined for r in reports] == [0, 0, 1]
    assert [kind for _s, _e, kind in rows(store)] == ["failed"] * 3  # one row per tick, splits included
    (chunk,) = quarantined_chunks(store)
    assert "no text" in chunk.last_reason and (chunk.start_seq, chunk.end_seq) == POISONED


def test_a_flaky_chunk_that_succeeds_on_tick_two_is_not_quarantined(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    store.append(history())
    failed_once: list[bool] = []

    def fails(request: Any) -> bool:
        if poisoned_l1(request) and not failed_once:
            failed_once.append(True)
            return True
        return False

    script(fake_openai, fails)
    with summarizer(fake_openai) as s:
        reports = [Compactor(store, recipe(), summarizer=s).tick() for _ in range(4)]
    assert [(r.failures, r.quarantined) for r in reports] == [(1, 0), (0, 0), (0, 0), (0, 0)]
    assert quarantined_chunks(store) == [] and rows(store) == [(*POISONED, "failed")]
    (summary,) = [x for x in store.summaries(level=1) if x.start_seq == POISONED[0]]
    assert summary.provenance["summarizer"] == "openai-http" and not summary.text.startswith(QUARANTINE_MARK)
    assert_covered(store)


def test_an_unreachable_summarizer_never_quarantines_anything(store: Store) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store.append(history())
    waits = Waits()
    with OpenAIChatSummarizer(
        f"http://127.0.0.1:{port}/v1",
        MODEL,
        api_key_env=KEY_ENV,
        max_retries=1,
        backoff_base=0.001,
        sleep=waits,
        timeout_seconds=1,
    ) as s:
        reports = [Compactor(store, recipe(), summarizer=s).tick() for _ in range(5)]
    assert [(r.l1_added, r.failures, r.quarantined) for r in reports] == [(0, 1, 0)] * 5
    assert rows(store) == [(0, 3, "outage")] * 5  # once per tick, on the chunk it was on
    assert "connection failed" in store.failures()[0]["reason"]
    assert quarantined_chunks(store) == [] and store.summaries() == []


@pytest.mark.parametrize("mode", ["401", "500"])
def test_a_misconfigured_or_failing_server_is_an_outage(
    fake_openai: FakeOpenAI, store: Store, mode: str
) -> None:
    store.append(history(poisoned=None))
    fake_openai.set_mode(mode, times=10**6)
    with summarizer(fake_openai, max_retries=1) as s:
        reports = [Compactor(store, recipe(), summarizer=s).tick() for _ in range(4)]
    assert [r.quarantined for r in reports] == [0] * 4
    assert rows(store) == [(0, 3, "outage")] * 4 and store.summaries() == []


def test_retries_running_out_after_an_answer_count_once_per_tick(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    """The summarizer answered earlier chunks, then kept failing on this one: counted.  The next
    tick starts on it and nothing is answered: an outage, not counted."""
    store.append(history())
    server_error = {"error": {"code": None, "message": "upstream failed", "type": "server_error"}}
    script(
        fake_openai,
        poisoned_l1,
        failure=lambda _r: Raw(500, {"Content-Type": "application/json"}, server_error),
    )
    with summarizer(fake_openai, max_retries=1) as s:
        reports = [Compactor(store, recipe(), summarizer=s).tick() for _ in range(4)]
    assert rows(store) == [(*POISONED, "failed")] + [(*POISONED, "outage")] * 3
    assert [r.quarantined for r in reports] == [0] * 4 and quarantined_chunks(store) == []


# -- merges -----------------------------------------------------------------------------------
def merge_size(request: Any) -> int:
    found = re.search(r"Merge these (\d+) consecutive records", json.dumps(request))
    return int(found.group(1)) if found else 0


def merge_starts(request: Any) -> list[int]:
    return [int(m) for m in re.findall(r"\[Record of messages (\d+)", json.dumps(request))]


def test_a_failing_merge_of_six_falls_back_to_three_and_three(fake_openai: FakeOpenAI, store: Store) -> None:
    store.append(history(poisoned=None))
    script(fake_openai, lambda request: is_merge(request) and merge_size(request) == 6)
    with summarizer(fake_openai) as s:
        report = Compactor(store, recipe(merge_fanout=6), summarizer=s).tick()
    l1 = store.summaries(level=1)
    l2 = store.summaries(level=2)
    assert report.l1_added == 12 and report.merged == {2: 4} and report.failures == 0
    assert [len(x.provenance["children"]) for x in l2] == [3, 3, 3, 3]
    assert [(x.start_seq, x.end_seq) for x in l2] == [
        (l1[i].start_seq, l1[i + 2].end_seq) for i in range(0, 12, 3)
    ]
    assert store.failures() == []  # the split fallback merged every child
    sizes = [merge_size(r.json()) for r in fake_openai.requests if is_merge(r.json())]
    assert sizes == [6, 3, 3, 6, 3, 3]
    assert_covered(store)


def test_children_no_merge_takes_stay_as_they_are_and_head_the_next_group(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    """The group of six fails, its first half merges, its second half fails and so does that
    half's first pair: those three children stay shown as L1s, recorded once as one unmerged
    stretch, and the next tick's group starts with them."""
    store.append(history(poisoned=None))
    starts = [0, 3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43]  # the L1 chunks of this history
    script(fake_openai, lambda request: is_merge(request) and 11 in merge_starts(request))
    with summarizer(fake_openai) as s:
        report = Compactor(store, recipe(merge_fanout=6), summarizer=s).tick()
    assert [x.start_seq for x in store.summaries(level=1)] == starts
    assert [(x.start_seq, x.end_seq) for x in store.summaries(level=2)] == [(0, 11)]
    assert rows(store, level=2) == [(11, 23, "failed")] and report.failures == 1
    sizes = [merge_size(r.json()) for r in fake_openai.requests if is_merge(r.json())]
    assert sizes == [6, 3, 3, 2]  # the 6 fails, 3 merges, 3 fails, its first 2 fail: stop
    for budget in (1050, 600, 450):  # coverage holds with the children left at L1
        compiled = compile_request(store, recipe(budget_tokens=budget))
        assert compiled.tokens <= budget and [x.start_seq for x in compiled.summaries][:1] == [0]
    fake_openai.requests.clear()
    script(fake_openai, lambda request: False)
    with summarizer(fake_openai) as s:
        report = Compactor(store, recipe(merge_fanout=6), summarizer=s).tick()
    assert [(x.start_seq, x.end_seq) for x in store.summaries(level=2)] == [(0, 11), (11, 35)]
    assert report.merged == {2: 1} and rows(store, level=2) == [(11, 23, "failed")]


def test_a_merge_failing_whole_on_three_ticks_gets_an_offline_stand_in(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    store.append(history(poisoned=None))
    script(fake_openai, is_merge)
    with summarizer(fake_openai) as s:
        reports = [Compactor(store, recipe(merge_fanout=6), summarizer=s).tick() for _ in range(3)]
    l1 = store.summaries(level=1)
    # Tick 3 quarantines the first group, then the next group fails for the first time.
    assert [(r.failures, r.quarantined) for r in reports] == [(1, 0), (1, 0), (1, 1)]
    group = (0, l1[5].end_seq)
    assert rows(store, level=2) == [(*group, "failed")] * 3 + [(l1[6].start_seq, l1[11].end_seq, "failed")]
    (stand_in,) = store.summaries(level=2)
    assert (stand_in.start_seq, stand_in.end_seq) == group and stand_in.text.startswith(
        "[Quarantined: the summarizer failed on this merge on 3 ticks (last: "
    )
    assert stand_in.provenance["children"] == [x.id for x in l1[:6]]
    assert [(c.level, c.start_seq, c.end_seq) for c in quarantined_chunks(store)] == [(2, *group)]


# -- properties -------------------------------------------------------------------------------
_RANGE = re.compile(r"messages (\d+)–(\d+)")


class PatternSummarizer:
    """The offline summarizer, failing on requests whose range holds a seq poisoned on this tick."""

    name = "pattern"
    request_format = "openai"
    model: str | None = None
    max_output_tokens: int | None = None

    def __init__(
        self, poison: dict[int, set[int]], errors: dict[int, type[SummarizerError]], merges_fail: set[int]
    ) -> None:
        self.poison, self.errors, self.merges_fail, self.tick = poison, errors, merges_fail, 0
        self.sent: list[tuple[int, int, int]] = []  # (tick, start, end) of each L1, split or part request
        self.offline = ExtractiveSummarizer()

    def close(self) -> None:
        """Hold nothing."""

    def summarize(self, request: GatedRequest, *, kind: SummaryKind) -> SummaryResult:
        text = json.dumps(
            request.messages[-1][1] if kind == "l1" else request.messages[0][1], ensure_ascii=False
        )
        found = _RANGE.search(text) if kind in ("l1", "split") else None
        if found:
            start, end = int(found.group(1)), int(found.group(2)) + 1
            self.sent.append((self.tick, start, end))
            if any(start <= seq < end for seq in self.poison.get(self.tick, ())):
                error = self.errors.get(self.tick, SummarizerError)
                raise error(f"scripted failure on tick {self.tick}")
        if kind == "merge" and self.tick in self.merges_fail:
            raise SummarizerError(f"scripted merge failure on tick {self.tick}")
        return self.offline.summarize(request, kind=kind)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    poison=st.dictionaries(st.integers(0, 5), st.sets(st.integers(0, 47), max_size=3), max_size=6),
    errors=st.dictionaries(
        st.integers(0, 5),
        st.sampled_from([SummarizerError, SummarizerRefused, SummarizerUnavailable]),
        max_size=6,
    ),
    sticky=st.sets(st.integers(0, 47), max_size=2),
    merges_fail=st.sets(st.integers(0, 5), max_size=6),
    after=st.integers(1, 3),
    fanout=st.integers(2, 6),
)
def test_coverage_holds_and_no_chunk_is_sent_after_its_quarantine(
    poison: dict[int, set[int]],
    errors: dict[int, type[SummarizerError]],
    sticky: set[int],
    merges_fail: set[int],
    after: int,
    fanout: int,
) -> None:
    """Seqs poisoned on some ticks (``poison``) or on every tick (``sticky``) fail the requests
    that hold them, with the tick's error; on ``merges_fail`` ticks every merge fails."""
    poison = {tick: poison.get(tick, set()) | sticky for tick in range(6)}
    settings_ = recipe(quarantine_after=after, merge_fanout=fanout)
    quarantined_at: dict[tuple[int, int], int] = {}
    with Store(":memory:") as store:
        store.append(history(poisoned=None))
        s = PatternSummarizer(poison, errors, merges_fail)
        failed = 0
        for tick in range(6):
            s.tick = tick
            before = {(c.start_seq, c.end_seq) for c in quarantined_chunks(store) if c.level == 1}
            report = Compactor(store, settings_, summarizer=s).tick()
            now = {(c.start_seq, c.end_seq) for c in quarantined_chunks(store) if c.level == 1}
            assert len(now - before) <= report.quarantined
            recorded = [(f["level"], f["start_seq"], f["end_seq"]) for f in store.failures()[failed:]]
            assert len(recorded) == len(set(recorded)), recorded  # each range once a tick
            failed += len(recorded)
            quarantined_at.update({chunk: tick for chunk in now - before})
            assert_covered(store)
            try:
                compiled = compile_request(store, settings_.replace(budget_tokens=3000))
            except OverBudget:
                continue
            position = 0
            for summary in compiled.summaries:
                assert summary.start_seq == position
                position = summary.end_seq
            assert position == compiled.live_start
        assert s.sent and s.sent[0][:2] == (0, 0)  # the L1 ranges were read from the requests
        event(f"chunks quarantined: {min(len(quarantined_at), 2)}")
        event(f"merges quarantined: {min(sum(c.level > 1 for c in quarantined_chunks(store)), 1)}")
        # No chunk is sent after its quarantine.
        for (start, end), tick in quarantined_at.items():
            assert not [x for x in s.sent if x[0] > tick and start <= x[1] < end]
        counted = [
            (f["level"], f["start_seq"], f["end_seq"]) for f in store.failures() if f["kind"] == "failed"
        ]
        for chunk in quarantined_chunks(store):
            assert counted.count((chunk.level, chunk.start_seq, chunk.end_seq)) == chunk.failures == after


# -- the command line -------------------------------------------------------------------------
def test_compress_says_how_many_were_quarantined_and_stats_lists_them(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from compaction.cli import main

    path, recipe_file = tmp_path / "store.db", tmp_path / "recipe.toml"
    recipe_file.write_text(
        "chunk_target_tokens = 150\nchunk_min_messages = 2\nmerge_fanout = 50\nsummary_max_tokens = 120\n"
        "summarizer_context_tokens = 6000\n\n[summarizer]\n"
        f'kind = "openai"\nbase_url = "{fake_openai.base_url}"\nmodel = "{MODEL}"\n'
        f'api_key_env = "{KEY_ENV}"\ntimeout_seconds = 2.0\nmax_retries = 0\n'
    )
    with Store(path) as store:
        store.append(history())
    script(fake_openai, poisoned_l1)
    cli = CliRunner()
    outputs = []
    for _run in range(3):
        done = cli.invoke(main, ["compress", "--store", str(path), "--recipe", str(recipe_file)])
        assert done.exit_code == 0, done.output
        outputs.append(done.output.strip())
    assert outputs[0] == "L1 summaries added: 3; merges: none; failures: 1"
    assert outputs[1] == "L1 summaries added: 0; merges: none; failures: 1"
    assert outputs[2] == (
        "L1 summaries added: 9; merges: none; failures: 0; "
        "quarantined: 1 (offline stand-in summaries; see compaction stats)"
    )
    again = cli.invoke(main, ["compress", "--store", str(path), "--recipe", str(recipe_file), "--json"])
    assert json.loads(again.output)["quarantined"] == 0 and json.loads(again.output)["failures"] == 0
    stats = cli.invoke(main, ["stats", "--store", str(path), "--json"])
    assert stats.exit_code == 0, stats.output
    data = json.loads(stats.output)
    (entry,) = data["quarantined"]
    assert {k: entry[k] for k in ("level", "start_seq", "end_seq", "failures")} == {
        "level": 1,
        "start_seq": POISONED[0],
        "end_seq": POISONED[1],
        "failures": 3,
    }
    assert "HTTP 400" in entry["last_reason"] and entry["failed_summarizer"] == f"openai-http ({MODEL})"
    assert [f["kind"] for f in data["failures"]] == ["failed"] * 3
    text = cli.invoke(main, ["stats", "--store", str(path)], env={"COLUMNS": "250"}).output
    assert "quarantined (offline stand-in summaries)" in text and "L1 messages 11–14" in text
    assert "3 failures; last:" in text
    assert re.search(r"chunks left raw \(summarizer failures\)\s*│\s*0 \(3 failed attempts\)", text), text


# -- the store --------------------------------------------------------------------------------
def test_a_failure_keeps_its_kind_and_an_unknown_kind_is_refused(store: Store) -> None:
    from compaction import StoreError
    from compaction.errors import InvalidArgument

    store.record_failure(1, 0, 4, "connection refused", kind="outage")
    store.record_failure(1, 0, 4, "refused")
    assert [f["kind"] for f in store.failures()] == ["outage", "failed"]
    with pytest.raises(StoreError, match="kind must be one of 'failed', 'outage'; found 'flaky'"):
        store.record_failure(1, 0, 4, "x", kind="flaky")
    with pytest.raises(InvalidArgument, match="kind must be a string"):
        store.record_failure(1, 0, 4, "x", kind=1)  # type: ignore[arg-type]
    assert len(store.failures()) == 2
