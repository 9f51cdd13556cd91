"""Fleet compaction: every engine stores what a sequential run stores, reruns add nothing, kills lose nothing.

The reference is the sequential run (``local`` engine, one worker, in this process) on a
copy of the same stores; every other run is compared with it summary by summary (id, level,
range, text and provenance).  Dask runs use a ``LocalCluster`` of 2 workers, in threads
where nothing is killed.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fleet_support import (
    RECIPE,
    TRANSCRIPTS,
    assert_consistent,
    compress_or_die,
    copy_fleet,
    dump_fleet,
    import_into,
    make_fleet,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from store_backends import admin_connection, postgres_server

from compaction import Message
from compaction.cli import main
from compaction.errors import CompactionError, InvalidArgument
from compaction.fleet import (
    ConversationResult,
    FleetLocationError,
    FleetSettings,
    FleetTarget,
    fleet_targets,
    run_fleet,
    select_targets,
)
from compaction.fleet.engines import _dispatch
from compaction.pipeline import import_transcript
from compaction.store import open_store

SETTINGS = FleetSettings(RECIPE)


@pytest.fixture(scope="module")
def fleet_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fleet of four conversations (shipped transcripts), imported once; tests compress copies."""
    return make_fleet(tmp_path_factory.mktemp("fleet") / "source")


@pytest.fixture(scope="module")
def reference(fleet_source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sequential run's stores, dumped."""
    copy = copy_fleet(fleet_source, tmp_path_factory.mktemp("reference") / "fleet")
    targets = fleet_targets(copy)
    report = run_fleet(targets, SETTINGS, engine="local", workers=1)
    assert report.failed_conversations == [] and report.summaries_made > 0
    return dump_fleet(targets)


def test_the_reference_run_summarizes_and_merges_every_conversation(reference: dict[str, Any]) -> None:
    assert sorted(reference) == sorted(TRANSCRIPTS)
    for name, stored in reference.items():
        levels = {s[1] for s in stored["summaries"]}
        assert 1 in levels, f"{name} got no level-1 summary"
    assert any(2 in {s[1] for s in stored["summaries"]} for stored in reference.values())


@pytest.mark.parametrize("engine,workers", [("local", 2), ("dask", 2)])
def test_every_engine_stores_the_sequential_runs_summaries_byte_for_byte(
    fleet_source: Path, reference: dict[str, Any], tmp_path: Path, engine: str, workers: int
) -> None:
    targets = fleet_targets(copy_fleet(fleet_source, tmp_path / "fleet"))
    done: list[tuple[int, int]] = []
    report = run_fleet(
        targets,
        SETTINGS,
        engine=engine,
        workers=workers,
        processes=False,
        progress=lambda d, t: done.append((d, t)),
    )
    assert report.engine == engine and report.workers == workers
    assert report.failed_conversations == []
    assert [r.name for r in report.results] == [t.name for t in targets]
    assert report.summaries_made == sum(len(s["summaries"]) for s in reference.values())
    assert done[-1] == (len(targets), len(targets)) and len(done) == len(targets)
    assert dump_fleet(targets) == reference


def test_a_rerun_adds_nothing(fleet_source: Path, reference: dict[str, Any], tmp_path: Path) -> None:
    targets = fleet_targets(copy_fleet(fleet_source, tmp_path / "fleet"))
    run_fleet(targets, SETTINGS, engine="dask", workers=2, processes=False)
    again = run_fleet(targets, SETTINGS, engine="dask", workers=2, processes=False)
    assert again.summaries_made == 0 and again.failed_conversations == []
    assert [r.summaries_made for r in again.results] == [0] * len(targets)
    assert dump_fleet(targets) == reference


@settings(max_examples=8, deadline=None)
@given(
    order=st.permutations(sorted(TRANSCRIPTS)),
    repeats=st.lists(st.sampled_from(sorted(TRANSCRIPTS)), max_size=4),
)
def test_any_order_and_any_repetition_of_tasks_store_the_reference(
    fleet_source: Path,
    reference: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    order: list[str],
    repeats: list[str],
) -> None:
    """Idempotence and order independence: tasks in any order, some run twice, give the sequential stores."""
    targets = {
        t.name: t for t in fleet_targets(copy_fleet(fleet_source, tmp_path_factory.mktemp("order") / "fleet"))
    }
    run_fleet([targets[name] for name in order + repeats], SETTINGS, engine="local", workers=1)
    assert dump_fleet(list(targets.values())) == reference


def test_a_budget_fleet_matches_its_sequential_run_and_reports_what_cannot_fit(
    fleet_source: Path, tmp_path: Path
) -> None:
    budget = FleetSettings(RECIPE.replace(budget_tokens=3000), use_budget=True)
    sequential = fleet_targets(copy_fleet(fleet_source, tmp_path / "sequential"))
    first = run_fleet(sequential, budget)
    targets = fleet_targets(copy_fleet(fleet_source, tmp_path / "dask"))
    report = run_fleet(targets, budget, engine="dask", workers=2, processes=False)
    assert dump_fleet(targets) == dump_fleet(sequential)
    by_name = {r.name: r for r in report.results}
    fits = [r for r in report.results if r.error is None]
    assert fits and all(r.request_tokens is not None and r.request_tokens <= 3000 for r in fits)
    over = by_name["openhands"]  # its pinned system message and newest turn alone need more than 3000 tokens
    assert over.error is not None and "cannot fit the budget of 3000 tokens" in over.error
    assert (
        over.summaries_made == len(dump_fleet(targets)["openhands"]["summaries"]) > 0
    )  # made before it failed
    assert [r.summaries_made for r in report.results] == [r.summaries_made for r in first.results]
    again = run_fleet(targets, budget)
    assert again.summaries_made == 0 and dump_fleet(targets) == dump_fleet(sequential)
    result = CliRunner().invoke(
        main, ["fleet", "compress", "--store", str(tmp_path / "dask"), "--budget", "3000"]
    )
    assert (
        result.exit_code == 1 and "compaction: openhands: the request cannot fit the budget" in result.output
    )


# -- the dispatcher: one writer per store file, results in order -----------------------------
class _ShuffledExecutor:
    """Completes submitted tasks in an order hypothesis picks, recording what ran at once."""

    def __init__(self, picks: list[int]) -> None:
        self.picks = picks
        self.running: list[tuple[Future[Any], FleetTarget]] = []
        self.ran: list[str] = []

    def submit(self, target: FleetTarget) -> Future[Any]:
        locks = [t.lock for _f, t in self.running if t.lock is not None]
        assert target.lock is None or target.lock not in locks, f"two tasks write {target.lock} at once"
        future: Future[Any] = Future()
        self.running.append((future, target))
        return future

    def finish_one(self) -> None:
        pick = self.picks.pop(0) if self.picks else 0
        future, target = self.running.pop(pick % len(self.running))
        self.ran.append(target.name)
        future.set_result(ConversationResult(target.name, len(target.name), 0, 0.0))


@settings(max_examples=60, deadline=None)
@given(
    files=st.lists(st.sampled_from(["a.sqlite", "b.sqlite", "c.sqlite", None]), min_size=1, max_size=12),
    picks=st.lists(st.integers(0, 20), max_size=30),
)
def test_the_dispatcher_never_runs_two_tasks_on_one_file_and_keeps_the_order(
    files: list[str | None], picks: list[int]
) -> None:
    targets = [FleetTarget(f"c{i}", f"loc{i}", f"loc{i}", lock=file) for i, file in enumerate(files)]
    targets += targets[: len(targets) // 3]  # the same target twice: each run, each result in its place
    executor = _ShuffledExecutor(picks)
    import concurrent.futures as cf

    real_wait = cf.wait

    def wait(futures: Any, return_when: str) -> Any:
        executor.finish_one()
        return real_wait(futures, timeout=0, return_when=return_when)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cf, "wait", wait)
        results = _dispatch(targets, executor.submit, None)
    assert [r.name for r in results] == [t.name for t in targets]
    assert [r.summaries_made for r in results] == [len(t.name) for t in targets]
    assert sorted(executor.ran) == sorted(t.name for t in targets)
    for lock in {f for f in files if f is not None}:  # one file's conversations run in the order given
        assert [n for n in executor.ran if targets[int(n[1:])].lock == lock] == [
            t.name for t in targets if t.lock == lock
        ]


def test_an_existing_scheduler_runs_the_fleet(
    fleet_source: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    from distributed import LocalCluster

    targets = fleet_targets(copy_fleet(fleet_source, tmp_path / "fleet"))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        report = run_fleet(targets, SETTINGS, engine="dask", scheduler=cluster.scheduler_address)
    assert report.workers == 2 and report.failed_conversations == []
    assert dump_fleet(targets) == reference


def test_an_unreachable_scheduler_is_one_typed_error(
    fleet_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compaction.fleet import engines

    monkeypatch.setattr(engines, "SCHEDULER_TIMEOUT", "1s")
    with pytest.raises(engines.FleetEngineError, match=r"tcp://127.0.0.1:1: cannot reach the Dask scheduler"):
        run_fleet(fleet_targets(fleet_source), SETTINGS, engine="dask", scheduler="tcp://127.0.0.1:1")
    args = [
        "fleet",
        "compress",
        "--store",
        str(fleet_source),
        "--engine",
        "dask",
        "--scheduler",
        "tcp://127.0.0.1:1",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and result.output.startswith(
        "compaction: error: tcp://127.0.0.1:1: cannot reach"
    )
    usage = CliRunner().invoke(
        main, ["fleet", "compress", "--store", str(fleet_source), "--scheduler", "tcp://x:1"]
    )
    assert usage.exit_code == 2 and "--scheduler needs --engine dask" in usage.output


# -- killed workers --------------------------------------------------------------------------
@pytest.mark.slow
def test_killing_a_dask_worker_mid_fleet_loses_nothing_and_the_task_is_retried(
    fleet_source: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    targets = fleet_targets(copy_fleet(fleet_source, tmp_path / "fleet"))
    markers = tmp_path / "markers"
    markers.mkdir()
    task = functools.partial(compress_or_die, marker_dir=str(markers), victim="openhands")
    report = run_fleet(targets, SETTINGS, engine="dask", workers=2, processes=True, task=task)
    attempts = [int(pid) for pid in (markers / "openhands").read_text().split()]
    assert len(attempts) == 2 and len(set(attempts)) == 2  # killed in one worker, run again in another
    assert os.getpid() not in attempts
    assert report.failed_conversations == []  # the scheduler ran the dead worker's task again
    for target in targets:
        assert_consistent(target.location, target.conversation)
    assert dump_fleet(targets) == reference
    again = run_fleet(targets, SETTINGS, engine="local", workers=1)
    assert again.summaries_made == 0 and dump_fleet(targets) == reference


@pytest.mark.slow
def test_a_killed_local_worker_leaves_consistent_stores_and_a_rerun_completes_them(
    fleet_source: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    targets = fleet_targets(copy_fleet(fleet_source, tmp_path / "fleet"))
    markers = tmp_path / "markers"
    markers.mkdir()
    task = functools.partial(compress_or_die, marker_dir=str(markers), victim="openhands")
    report = run_fleet(targets, SETTINGS, engine="local", workers=2, task=task)
    broken = report.failed_conversations
    assert len((markers / "openhands").read_text().split()) == 1  # one attempt, killed; no retry here
    assert "openhands" in [r.name for r in broken]  # the pool broke under it: reported, not hidden
    assert all("run the fleet again" in (r.error or "") for r in broken)
    for target in targets:
        assert_consistent(
            target.location, target.conversation
        )  # two summaries committed before the kill, nothing half-written
    partial = dump_fleet(targets)["openhands"]["summaries"]
    assert 2 <= len(partial) < len(reference["openhands"]["summaries"])
    assert partial == reference["openhands"]["summaries"][: len(partial)]
    rerun = run_fleet(targets, SETTINGS, engine="local", workers=2)
    assert rerun.failed_conversations == []
    assert dump_fleet(targets) == reference


# -- stores of several conversations -----------------------------------------------------------
def _shared_store_fleet(directory: Path) -> Path:
    """A fleet of two stores: one of a single conversation, one of two conversations and a branch."""
    directory.mkdir()
    shared = directory / "shared.sqlite"
    for name in ("swe_agent", "cc_representative"):
        with open_store(shared, conversation=name) as store:
            import_transcript(store, TRANSCRIPTS[name])
    with open_store(shared, conversation="swe_agent") as store:
        store.branch("swe_agent_retry", 14)
    with open_store(shared, conversation="swe_agent_retry") as store:
        store.append(
            [
                Message(
                    "user", ({"type": "text", "text": "Try again from here, with the other approach. " * 40},)
                )
            ]
        )
    import_into(str(directory / "alone.sqlite"), "cc_todowrite")
    return directory


def test_every_conversation_and_branch_of_a_store_is_a_task_and_engines_agree(tmp_path: Path) -> None:
    source = _shared_store_fleet(tmp_path / "source")
    expected = ["alone", "shared/swe_agent", "shared/cc_representative", "shared/swe_agent_retry"]
    assert [t.name for t in fleet_targets(source)] == expected
    alone = fleet_targets(source / "shared.sqlite")  # one store: its conversations by their own names
    assert [(t.name, t.conversation) for t in alone] == [
        (n, n) for n in ("swe_agent", "cc_representative", "swe_agent_retry")
    ]
    sequential = fleet_targets(copy_fleet(source, tmp_path / "sequential"))
    assert run_fleet(sequential, SETTINGS).failed_conversations == []
    stored = dump_fleet(sequential)
    assert all(stored[name]["summaries"] for name in expected)
    for engine, where in (("dask", "dask"), ("local", "pool")):
        targets = fleet_targets(copy_fleet(source, tmp_path / where))
        report = run_fleet(targets, SETTINGS, engine=engine, workers=2, processes=False)
        assert report.failed_conversations == [] and dump_fleet(targets) == stored
        assert run_fleet(targets, SETTINGS, engine=engine, workers=2, processes=False).summaries_made == 0
        for target in targets:
            assert_consistent(target.location, target.conversation)


@pytest.mark.slow
def test_a_pool_broken_while_a_store_waits_reports_the_rest_and_a_rerun_completes(tmp_path: Path) -> None:
    source = _shared_store_fleet(tmp_path / "source")
    sequential = fleet_targets(copy_fleet(source, tmp_path / "sequential"))
    run_fleet(sequential, SETTINGS)
    targets = fleet_targets(copy_fleet(source, tmp_path / "killed"))
    markers = tmp_path / "markers"
    markers.mkdir()
    task = functools.partial(compress_or_die, marker_dir=str(markers), victim="shared/swe_agent")
    report = run_fleet(targets, SETTINGS, engine="local", workers=2, task=task)
    failed = [
        r.name for r in report.failed_conversations
    ]  # the shared store's later tasks found the pool broken
    assert {"shared/swe_agent", "shared/cc_representative", "shared/swe_agent_retry"} <= set(failed)
    assert [r.name for r in report.results] == [t.name for t in targets]
    for target in targets:
        assert_consistent(target.location, target.conversation)
    assert run_fleet(targets, SETTINGS, engine="local", workers=2).failed_conversations == []
    assert dump_fleet(targets) == dump_fleet(sequential)


# -- locations ---------------------------------------------------------------------------------
def test_a_plain_directory_of_stores_and_one_store_file_are_fleets_too(
    fleet_source: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    copy_fleet(fleet_source / "conversations", plain)
    assert [t.name for t in fleet_targets(plain)] == sorted(TRANSCRIPTS)
    one = fleet_targets(plain / "cc_todowrite.sqlite")
    assert [(t.name, t.lock) for t in one] == [
        ("cc_todowrite", str((plain / "cc_todowrite.sqlite").resolve()))
    ]
    assert [t.name for t in select_targets(fleet_targets(plain), "cc_todowrite, swe_agent")] == [
        "cc_todowrite",
        "swe_agent",
    ]


@pytest.mark.parametrize(
    "where,says",
    [
        ("missing", "no such directory or store file"),
        ("empty", "no stores there; expected"),
    ],
)
def test_a_bad_location_is_one_typed_error(tmp_path: Path, where: str, says: str) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FleetLocationError, match=says) as caught:
        fleet_targets(tmp_path / where)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CompactionError)
    result = CliRunner().invoke(main, ["fleet", "compress", "--store", str(tmp_path / where)])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and says in result.output and "Traceback" not in result.output


def test_an_unknown_conversation_is_named(fleet_source: Path) -> None:
    with pytest.raises(FleetLocationError, match=r"no conversation 'nobody' in this fleet \(4 conversations"):
        select_targets(fleet_targets(fleet_source), "cc_todowrite,nobody")


def test_bad_engine_arguments_are_invalid_arguments(fleet_source: Path) -> None:
    targets = fleet_targets(fleet_source)
    with pytest.raises(InvalidArgument, match="engine must be one of local, dask"):
        run_fleet(targets, SETTINGS, engine="spark")
    with pytest.raises(InvalidArgument, match="workers must be a whole number >= 1"):
        run_fleet(targets, SETTINGS, workers=0)
    with pytest.raises(InvalidArgument, match="needs engine='dask'"):
        run_fleet(targets, SETTINGS, scheduler="tcp://127.0.0.1:8786")


def test_a_store_that_cannot_be_opened_fails_its_conversation_only(
    fleet_source: Path, tmp_path: Path
) -> None:
    fleet = copy_fleet(fleet_source, tmp_path / "fleet")
    (fleet / "conversations" / "broken.sqlite").write_bytes(b"not a database" * 100)
    report = run_fleet(fleet_targets(fleet), SETTINGS)
    failed = report.failed_conversations
    assert [r.name for r in failed] == ["broken"] and "broken.sqlite" in (failed[0].error or "")
    assert len(report.results) == len(TRANSCRIPTS) + 1 and report.summaries_made > 0


# -- the command -------------------------------------------------------------------------------
def test_the_command_prints_a_json_report_and_a_rerun_makes_nothing(
    fleet_source: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    fleet = copy_fleet(fleet_source, tmp_path / "fleet")
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("chunk_target_tokens = 300\nchunk_min_messages = 2\nmerge_fanout = 3\n")
    args = ["fleet", "compress", "--store", str(fleet), "--recipe", str(recipe), "--json"]
    first = json.loads(CliRunner().invoke(main, [*args, "--engine", "dask", "--workers", "2"]).output)
    assert (
        first["engine"] == "dask"
        and first["conversations"] == len(TRANSCRIPTS)
        and first["failed_conversations"] == 0
    )
    assert first["summaries_made"] == sum(len(s["summaries"]) for s in reference.values())
    assert {r["conversation"]: r["summaries_made"] for r in first["results"]} == {
        name: len(s["summaries"]) for name, s in reference.items()
    }
    second = json.loads(CliRunner().invoke(main, [*args, "--conversations", "cc_todowrite,openhands"]).output)
    assert second["conversations"] == 2 and second["summaries_made"] == 0
    assert dump_fleet(fleet_targets(fleet)) == reference
    table = CliRunner().invoke(main, ["fleet", "compress", "--store", str(fleet), "--recipe", str(recipe)])
    assert table.exit_code == 0 and "summaries made" in table.output and "local, 1 worker" in table.output


# -- PostgreSQL --------------------------------------------------------------------------------
def test_a_postgresql_database_is_a_fleet_with_the_sqlite_runs_summaries(reference: dict[str, Any]) -> None:
    database = f"fleet_{uuid.uuid4().hex[:12]}"
    admin = admin_connection()
    admin.execute(f'CREATE DATABASE "{database}"')
    server = postgres_server()
    url = server.rsplit("/", 1)[0] + f"/{database}"
    try:
        for name in TRANSCRIPTS:
            import_into(f"{url}?store={name}", name)
        targets = fleet_targets(url)
        assert [t.name for t in targets] == sorted(TRANSCRIPTS) and all(t.lock == t.shown for t in targets)
        assert (targets[0].location, targets[0].shown) == (f"{url}?store=cc_representative",) * 2
        report = run_fleet(targets, SETTINGS, engine="dask", workers=2, processes=False)
        assert report.failed_conversations == []
        assert dump_fleet(targets) == reference  # the same bytes as the SQLite sequential run
        again = run_fleet(targets, SETTINGS, engine="local", workers=2)
        assert again.summaries_made == 0 and again.failed_conversations == []
        for target in targets:
            assert_consistent(target.location, target.conversation)
        assert [t.name for t in fleet_targets(f"{url}?store=cc_todowrite")] == ["cc_todowrite"]
        with open_store(f"{url}?store=cc_todowrite", conversation="second") as store:  # a store of two
            import_transcript(store, TRANSCRIPTS["swe_agent"])
        both = [t for t in fleet_targets(url) if t.name.startswith("cc_todowrite")]
        assert [(t.name, t.conversation) for t in both] == [
            ("cc_todowrite/default", "default"),
            ("cc_todowrite/second", "second"),
        ]
        assert run_fleet(both, SETTINGS, engine="dask", workers=2, processes=False).summaries_made == len(
            reference["swe_agent"]["summaries"]
        )
        second = dump_fleet(both)["cc_todowrite/second"][
            "summaries"
        ]  # ids follow the store's first conversation
        assert [s[1:5] for s in second] == [s[1:5] for s in reference["swe_agent"]["summaries"]]
        with pytest.raises(FleetLocationError, match="no compaction store named 'nobody'"):
            fleet_targets(f"{url}?store=nobody")
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def test_an_empty_postgresql_database_is_a_typed_error() -> None:
    database = f"fleet_{uuid.uuid4().hex[:12]}"
    admin = admin_connection()
    admin.execute(f'CREATE DATABASE "{database}"')
    url = postgres_server().rsplit("/", 1)[0] + f"/{database}"
    try:
        with pytest.raises(FleetLocationError, match="no compaction stores in this database"):
            fleet_targets(url)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def test_dask_is_imported_only_when_the_dask_engine_runs() -> None:
    code = (
        "import json, sys\n"
        "import compaction, compaction.cli, compaction.fleet, compaction.fleet.counting\n"
        "from click.testing import CliRunner\n"
        "CliRunner().invoke(compaction.cli.main, ['fleet', 'compress', '--help'])\n"
        "print(json.dumps(sorted(m for m in ('dask', 'distributed') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
