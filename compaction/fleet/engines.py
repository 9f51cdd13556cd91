"""Run a fleet's tasks on an engine: this process, a local process pool, or a Dask cluster.

:func:`run_fleet` hands one task per conversation to an executor and collects a
:class:`FleetReport`.  The engines:

* ``local`` with one worker: the tasks run one after another in this process (the
  sequential reference every other engine must match byte for byte);
* ``local`` with N workers: a :class:`concurrent.futures.ProcessPoolExecutor` (spawned
  workers; a worker that dies breaks the pool, and the conversations it left are reported
  as failures for a rerun to finish);
* ``dask``: a ``dask.distributed`` cluster, a ``LocalCluster`` of N single-threaded workers
  by default or the existing scheduler at ``scheduler``.  Each task is submitted with
  ``retries``; a task whose worker dies is rescheduled by the scheduler on another worker
  (up to ``distributed.scheduler.allowed-failures`` deaths).  ``dask`` is imported only
  here, only when this engine runs.

What is shared: the settings (one picklable :class:`~compaction.fleet.task.FleetSettings`)
and the list of targets; what is per task: one conversation's store, opened and closed by
the task.  Two tasks never write one store at once: a target's ``lock`` (its store) is held
from submission to completion, and a target whose lock is busy waits on this side (the
scheduler never sees it) and goes in the fleet's order, so results cannot depend on the
order workers finish in.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompactionError, InvalidArgument, found
from .targets import FleetTarget
from .task import ConversationResult, FleetSettings, compress_conversation

__all__ = ["ENGINES", "FleetEngineError", "FleetReport", "run_fleet"]

#: The engines :func:`run_fleet` knows.
ENGINES = ("local", "dask")

#: How long to try reaching an existing Dask scheduler before giving up.
SCHEDULER_TIMEOUT = "10s"

Task = Callable[[FleetTarget, FleetSettings], ConversationResult]
Progress = Callable[[int, int], None]


class FleetEngineError(RuntimeError, CompactionError):
    """The engine could not run: dask is not installed, or the scheduler cannot be reached."""


@dataclass
class FleetReport:
    """What a fleet run did.

    Attributes:
        engine: ``"local"`` or ``"dask"``.
        workers: the workers the tasks ran on (for an existing scheduler: those it had).
        results: one per conversation, in the targets' order.
        seconds: the wall time of the whole run, engine start-up included (seconds).
    """

    engine: str
    workers: int
    results: list[ConversationResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def conversations(self) -> int:
        """The conversations the fleet ran over."""
        return len(self.results)

    @property
    def summaries_made(self) -> int:
        """Summaries stored by the run, every conversation and level."""
        return sum(r.summaries_made for r in self.results)

    @property
    def failures(self) -> int:
        """Chunks left raw by summarizer failures, over every conversation."""
        return sum(r.failures for r in self.results)

    @property
    def failed_conversations(self) -> list[ConversationResult]:
        """The conversations that could not be compressed at all (each with its ``error``)."""
        return [r for r in self.results if r.error is not None]

    @property
    def nothing_to_do(self) -> int:
        """The conversations that hold no message (empty branches): skipped, not failed."""
        return sum(1 for r in self.results if r.nothing_to_do)

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (totals, then one entry per conversation)."""
        return {
            "engine": self.engine,
            "workers": self.workers,
            "conversations": self.conversations,
            "summaries_made": self.summaries_made,
            "failures": self.failures,
            "failed_conversations": len(self.failed_conversations),
            "nothing_to_do": self.nothing_to_do,
            "seconds": round(self.seconds, 3),
            "results": [
                {
                    "conversation": r.name,
                    "summaries_made": r.summaries_made,
                    "failures": r.failures,
                    "seconds": round(r.seconds, 3),
                    "error": r.error,
                    **({"nothing_to_do": True} if r.nothing_to_do else {}),
                    **({"request_tokens": r.request_tokens} if r.request_tokens is not None else {}),
                }
                for r in self.results
            ],
        }


def run_fleet(
    targets: Sequence[FleetTarget],
    settings: FleetSettings,
    *,
    engine: str = "local",
    workers: int | None = None,
    scheduler: str | None = None,
    retries: int = 2,
    processes: bool = True,
    progress: Progress | None = None,
    task: Task = compress_conversation,
) -> FleetReport:
    """Compress every target, one task per conversation, on ``engine``; return the report.

    Args:
        targets: the conversations (see :func:`~compaction.fleet.targets.fleet_targets`).
        settings: what every task compresses with.
        engine: ``"local"`` (``workers`` processes; 1 = sequential in this process) or
            ``"dask"`` (a ``LocalCluster`` of ``workers``, default 2, or ``scheduler``).
        workers: worker count (default: 1 for ``local``, 2 for a Dask ``LocalCluster``).
        scheduler: a Dask scheduler address (``tcp://host:8786``); ``engine`` must be ``"dask"``.
        retries: Dask retries of a task that raised (a dead worker's task is rescheduled
            by the scheduler regardless).
        processes: Dask ``LocalCluster`` workers in processes (True) or threads of this one.
        progress: called as ``progress(done, total)`` in conversations.
        task: the function each task runs (a picklable ``(target, settings) -> result``).

    Returns:
        A :class:`FleetReport`, results in the order of ``targets``.  A task that raised
        (after its retries) or whose worker pool broke is a result with an ``error``.

    Raises:
        InvalidArgument: an unknown engine, ``workers`` below 1, or ``scheduler`` with the
            local engine.
        FleetEngineError: dask is not installed, or the scheduler cannot be reached.
    """
    if engine not in ENGINES:
        raise InvalidArgument(f"engine must be one of {', '.join(ENGINES)}; found {found(engine)}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidArgument(f"workers must be a whole number >= 1; found {found(workers)}")
    if scheduler is not None and engine != "dask":
        raise InvalidArgument("a scheduler address needs engine='dask'")
    started = time.perf_counter()
    if engine == "local":
        count = workers or 1
        if count == 1:
            results = _run_inline(targets, settings, task, progress)
        else:
            context = multiprocessing.get_context("spawn")
            with cf.ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
                results = _dispatch(targets, lambda t: pool.submit(task, t, settings), progress)
        return FleetReport("local", count, results, time.perf_counter() - started)
    with _dask_executor(workers, scheduler, retries, processes) as (executor, count):
        results = _dispatch(targets, lambda t: executor.submit(task, t, settings), progress)
    return FleetReport("dask", count, results, time.perf_counter() - started)


def _run_inline(
    targets: Sequence[FleetTarget], settings: FleetSettings, task: Task, progress: Progress | None
) -> list[ConversationResult]:
    results = []
    for done, target in enumerate(targets, 1):
        started = time.perf_counter()
        try:
            results.append(task(target, settings))
        except Exception as err:  # a bug in one task: reported, the fleet goes on
            results.append(_crashed(target, err, time.perf_counter() - started))
        if progress is not None:
            progress(done, len(targets))
    return results


def _dispatch(
    targets: Sequence[FleetTarget], submit: Callable[[FleetTarget], cf.Future[Any]], progress: Progress | None
) -> list[ConversationResult]:
    """Submit each target when its lock is free; collect the results in the targets' order."""
    waiting = list(enumerate(targets))
    busy: set[str] = set()
    running: dict[cf.Future[Any], tuple[int, float]] = {}
    results: dict[int, ConversationResult] = {}

    def finish(index: int, result: ConversationResult) -> None:
        results[index] = result
        if progress is not None:
            progress(len(results), len(targets))

    while waiting or running:
        still = []
        for index, target in waiting:
            if target.lock is not None and target.lock in busy:
                still.append((index, target))
                continue
            try:
                future = submit(target)
            except Exception as err:  # a pool broken by a dead worker takes no more tasks
                finish(index, _crashed(target, err, 0.0))
                continue
            if target.lock is not None:
                busy.add(target.lock)
            running[future] = (index, time.perf_counter())
        waiting = still
        if not running:
            continue
        done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
        for future in done:
            index, submitted = running.pop(future)
            target = targets[index]
            if target.lock is not None:
                busy.discard(target.lock)
            try:
                result = future.result()
            except Exception as err:  # raised after its retries, a dead worker, a broken pool
                result = _crashed(target, err, time.perf_counter() - submitted)
            finish(index, result)
    return [results[i] for i in range(len(targets))]


def _crashed(target: FleetTarget, err: BaseException, seconds: float) -> ConversationResult:
    where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    text = " ".join(str(err).split()) or type(err).__name__
    return ConversationResult(
        target.name, 0, 0, seconds, error=f"{type(err).__name__}: {text}{at}; run the fleet again"
    )


@contextmanager
def _dask_executor(
    workers: int | None, scheduler: str | None, retries: int, processes: bool
) -> Iterator[tuple[cf.Executor, int]]:
    """Yield a concurrent.futures executor over a Dask cluster, and its worker count."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as err:
        raise FleetEngineError(
            "the dask engine needs dask.distributed: pip install 'compaction[fleet]'"
        ) from err
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=SCHEDULER_TIMEOUT)
        except OSError as err:
            raise FleetEngineError(f"{scheduler}: cannot reach the Dask scheduler: {err}") from err
        try:
            count = len(client.scheduler_info().get("workers", {}))
            yield client.get_executor(retries=retries, pure=False), count
        finally:
            client.close()
        return
    count = workers or 2
    with (
        LocalCluster(
            n_workers=count,
            threads_per_worker=1,
            processes=processes,
            dashboard_address="127.0.0.1:0",  # its HTTP server on a free loopback port (no dashboard without bokeh)
            **({"host": "127.0.0.1"} if processes else {}),  # loopback only; threads talk in-process
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client.get_executor(retries=retries, pure=False), count
