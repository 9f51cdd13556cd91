"""Shared fixtures: stores (in memory and on disk, closed after each test), the cases, and the
exact counter's two implementations (``impl``, ``c_impl``, ``py_impl`` from ``counting_twins``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_twins import c_impl, impl, py_impl  # noqa: F401  (the exact counter's twins, as fixtures)
from hypothesis import HealthCheck, settings

from compaction import Store

# Property tests judge the code, not the machine: on a loaded 2-core runner the generation of
# large inputs can exceed Hypothesis' speed health check and a per-example deadline, which
# would fail a correct test.  Tests that set their own settings still override these fields.
settings.register_profile("compaction", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("compaction")

TESTS = Path(__file__).parent
CASES = TESTS / "data" / "cases"
EXAMPLES = TESTS.parent / "examples"


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh store, ``:memory:`` or a file under ``tmp_path``; closed after the test."""
    path = ":memory:" if request.param == "memory" else tmp_path / "store.sqlite"
    opened = Store(path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def memory_store() -> Iterator[Store]:
    """A fresh ``:memory:`` store, closed after the test."""
    opened = Store(":memory:")
    try:
        yield opened
    finally:
        opened.close()


def load_case(name: str) -> dict[str, Any]:
    """Return the parsed case file ``tests/data/cases/<name>.json``."""
    data: dict[str, Any] = json.loads((CASES / f"{name}.json").read_text("utf-8"))
    return data
