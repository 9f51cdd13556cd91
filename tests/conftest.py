"""Shared fixtures: stores (in memory and on disk, closed after each test) and the cases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compaction import Store

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
