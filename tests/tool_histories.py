"""Shared pieces of the plan == gate tests over tool histories (test_plan_renamed_ids, test_plan_orphans)."""

from __future__ import annotations

from typing import Any

from compaction import Recipe, Store
from compaction.compile import CompiledRequest, compile_frame, resolve_target
from compaction.planning import WindowPlanner

FORMATS = ["openai", "anthropic", "openai-responses"]
#: a budget no test history reaches (tokens)
ROOMY = 10_000_000


def recipe(fmt: str, **changes: Any) -> Recipe:
    """A roomy recipe of request format ``fmt`` (a Claude model for Anthropic)."""
    model = "claude-sonnet-4-5" if fmt == "anthropic" else None
    return Recipe(budget_tokens=ROOMY, output_format=fmt, model=model, **changes)  # type: ignore[arg-type]


def call(tool_id: str, path: str = "src/app.py") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": path}}


def result(tool_id: str, content: Any = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": False}


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def frame(
    store: Store, recipe: Recipe, cut: int, mask_before: int = 0
) -> tuple[CompiledRequest, CompiledRequest]:
    """Compile the window from ``cut`` (its coarsest cover shown) roomily, then at a budget of exactly its planned price."""
    planner = WindowPlanner(store, recipe, ROOMY, *resolve_target(recipe))
    ranges = [(s.level, s.start_seq, s.end_seq) for s in planner.cover(cut)]
    roomy = compile_frame(store, recipe, cut, ranges, budget=ROOMY, mask_before=mask_before).compiled
    assert roomy is not None
    exact = compile_frame(store, recipe, cut, ranges, budget=roomy.planned_tokens, mask_before=mask_before)
    assert exact.compiled is not None, exact.shortfall
    return roomy, exact.compiled
