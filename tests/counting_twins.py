"""What the exact counter's tests share: both implementations imported directly, and tiktoken.

The fixtures import ``compaction.tokens._count_c`` and ``_count_py`` themselves, bypassing the
dispatcher, so a missing extension is a failure, not a second run of the Python twin.
``tests/conftest.py`` offers them to every test module (one that tests another twin, as
``test_estimate.py`` does, defines its own of the same names).
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from compaction.tokens.encodings import get_encoding

__all__ = ["ENCODING_NAMES", "c_impl", "impl", "py_impl", "tiktoken_count"]

ENCODING_NAMES = ("o200k_base", "cl100k_base")


@pytest.fixture(params=["c", "py"], scope="module")
def impl(request: pytest.FixtureRequest) -> ModuleType:
    """Each implementation imported directly (no dispatcher): a missing extension fails."""
    return importlib.import_module(f"compaction.tokens._count_{request.param}")


@pytest.fixture(scope="module")
def c_impl() -> ModuleType:
    return importlib.import_module("compaction.tokens._count_c")


@pytest.fixture(scope="module")
def py_impl() -> ModuleType:
    return importlib.import_module("compaction.tokens._count_py")


def tiktoken_count(text: str, encoding: str) -> int:
    """tiktoken's count of ``text`` (``encode_ordinary``): the reference every exact count meets."""
    return len(get_encoding(encoding).encode_ordinary(text))
