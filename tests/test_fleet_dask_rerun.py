"""A Dask worker killed past the scheduler's allowed failures: the fleet reports that conversation
as failed, every store is consistent (the summaries committed before the kill are a prefix of
the sequential run's), and a rerun on Dask completes it to the sequential run's summaries.

``test_fleet.py`` kills a worker that Dask then replaces (the task is retried on another
worker and completes in the same run); here the scheduler gives up at the first death
(``distributed.scheduler.allowed-failures`` 0), as it does after the default 3 on a host that
keeps dying, so the completion has to come from running the fleet again.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from fleet_support import RECIPE, assert_consistent, compress_or_die, copy_fleet, dump_fleet, make_fleet

from compaction.fleet import FleetSettings, fleet_targets, run_fleet

SETTINGS = FleetSettings(RECIPE)


@pytest.mark.slow
def test_a_dask_worker_killed_past_its_retries_leaves_consistent_stores_and_a_rerun_completes_them(
    tmp_path: Path,
) -> None:
    import dask
    import distributed  # noqa: F401  (loads its config, which the setting below changes)

    source = make_fleet(tmp_path / "source", ["openhands", "cc_representative"])
    reference_targets = fleet_targets(copy_fleet(source, tmp_path / "reference"))
    assert run_fleet(reference_targets, SETTINGS, engine="local", workers=1).failed_conversations == []
    reference: dict[str, Any] = dump_fleet(reference_targets)
    targets = fleet_targets(copy_fleet(source, tmp_path / "fleet"))
    markers = tmp_path / "markers"
    markers.mkdir()
    task = functools.partial(compress_or_die, marker_dir=str(markers), victim="openhands")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        report = run_fleet(targets, SETTINGS, engine="dask", workers=2, processes=True, task=task)
    assert len((markers / "openhands").read_text().split()) == 1  # killed once, not retried
    assert [r.name for r in report.failed_conversations] == ["openhands"]
    assert "run the fleet again" in (report.failed_conversations[0].error or "")
    for target in targets:
        assert_consistent(target.location, target.conversation)
    partial = dump_fleet(targets)
    assert partial["cc_representative"] == reference["cc_representative"]
    kept = partial["openhands"]["summaries"]
    assert 2 <= len(kept) < len(reference["openhands"]["summaries"])
    assert kept == reference["openhands"]["summaries"][: len(kept)]
    rerun = run_fleet(targets, SETTINGS, engine="dask", workers=2, processes=True)
    assert rerun.failed_conversations == []
    assert rerun.summaries_made == len(reference["openhands"]["summaries"]) - len(kept)
    assert dump_fleet(targets) == reference
