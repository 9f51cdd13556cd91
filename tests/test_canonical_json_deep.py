"""canonical_json of values nested deeper than Python's recursion allows: the same text, by a loop."""

from __future__ import annotations

import json
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import _canonical_json_deep, canonical_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_the_loop_writes_what_json_dumps_writes(value: Any) -> None:
    assert _canonical_json_deep(value) == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_a_result_nested_5000_deep_is_written_under_a_low_recursion_limit() -> None:
    deep: dict[str, Any] = {"type": "text", "text": "ok"}
    for level in range(5_000):
        deep = {"type": "tool_result", "tool_use_id": f"t{level}", "content": [deep]}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        text = canonical_json(deep)
    finally:
        sys.setrecursionlimit(limit)
    opening = "".join('{"content":[' for _ in range(5_000))
    closing = "".join(f'],"tool_use_id":"t{level}","type":"tool_result"}}' for level in range(5_000))
    assert text == opening + '{"text":"ok","type":"text"}' + closing
