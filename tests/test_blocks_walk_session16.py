"""A block's non-finite number check walks each container once and never follows a cycle.

Session 16's check for numbers JSON cannot carry (``inf``, ``nan``) first walked a value without
remembering what it had seen: a block holding itself looped until memory ran out (the depth check
that refuses it came after the walk), and a value whose containers are shared (an API caller's
Python objects, not parsed JSON) was walked once per path, exponentially many.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import validate_block
from compaction.errors import InvalidMessage


def _shared(levels: int, leaf: Any) -> list[Any]:
    """A list ``levels`` deep whose every level holds the level below twice: 2**levels paths."""
    value: list[Any] = [leaf]
    for _ in range(levels):
        value = [value, value]
    return value


def test_a_value_holding_itself_inside_an_input_is_refused_as_too_deep() -> None:
    loop: list[Any] = [1.5]
    loop.append(loop)
    with pytest.raises(InvalidMessage, match="nests more than 100 levels"):
        validate_block({"type": "tool_use", "id": "t", "name": "n", "input": {"a": loop}})


@pytest.mark.parametrize("leaf", [float("inf"), float("-inf"), float("nan")])
def test_a_shared_value_60_levels_deep_is_walked_once_and_its_number_named(leaf: float) -> None:
    # 2**60 paths: a walk per path would never end
    with pytest.raises(InvalidMessage, match="which JSON cannot carry") as raised:
        validate_block({"type": "odd", "payload": _shared(60, leaf)})
    assert repr(leaf) in str(raised.value)


def test_a_shared_value_of_finite_numbers_is_accepted() -> None:
    validate_block({"type": "odd", "payload": _shared(60, 2.5)})


@settings(max_examples=60, deadline=None)
@given(
    levels=st.integers(min_value=0, max_value=90),
    leaf=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=3)),
)
def test_a_shared_value_is_refused_exactly_when_it_holds_a_non_finite_number(levels: int, leaf: Any) -> None:
    block = {"type": "odd", "payload": _shared(levels, leaf)}
    if isinstance(leaf, float) and not math.isfinite(leaf):
        with pytest.raises(InvalidMessage, match="which JSON cannot carry"):
            validate_block(block)
    else:
        validate_block(block)
