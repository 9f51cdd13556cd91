"""Hypothesis strategies for agent histories and recipes (``compaction fuzz`` and the property tests).

Needs hypothesis (``pip install 'compaction[fuzz]'``); nothing else in the package imports
this module at import time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from .blocks import Message
from .fuzz_checks import png_b64
from .recipe import Recipe

__all__ = ["WORDS", "histories", "recipes"]

# -- histories -------------------------------------------------------------------------------

WORDS = (
    "the cache build config loader failed rerun suite path stale because we it and from reads clear so a "
    "test module import error fixed patch diff function value returns None list dict file src/app.py "
    "tests/test_app.py README.md docs/index.rst 42 1337 0.5 ok yes no maybe later next"
).split()


@dataclass
class _Ids:
    next: int = 0
    seeds: int = 0

    def tool(self) -> str:
        self.next += 1
        return f"toolu_{self.next:04d}"

    def seed(self) -> int:
        self.seeds += 1
        return self.seeds


def _text(draw: Any, low: int = 1, high: int = 40) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=low, max_size=high)))


def _oversized(draw: Any) -> str:
    lines = draw(st.integers(min_value=60, max_value=400))
    word = draw(st.sampled_from(WORDS))
    return "\n".join(f"{i:05d} INFO {word} processed item {i} in {i * 7 % 1000} ms" for i in range(lines))


def _image_block(draw: Any, ids: _Ids) -> dict[str, Any]:
    kind = draw(st.sampled_from(["png", "png", "png", "url", "url-noext"]))
    if kind == "png":
        w = draw(st.integers(min_value=1, max_value=48))
        h = draw(st.integers(min_value=1, max_value=48))
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_b64(w, h, ids.seed())}}
    if kind == "url":
        ext = draw(st.sampled_from([".png", ".jpg", ".webp"]))
        return {"type": "image", "source": {"type": "url", "url": f"https://example.com/img/{ids.seed()}{ext}"}}
    return {"type": "image", "source": {"type": "url", "url": f"https://example.com/render?id={ids.seed()}"}}


def _data_uri(draw: Any, ids: _Ids) -> str:
    w = draw(st.integers(min_value=1, max_value=32))
    h = draw(st.integers(min_value=1, max_value=32))
    return f"data:image/png;base64,{png_b64(w, h, ids.seed())}"


def _tool_result_content(draw: Any, ids: _Ids) -> Any:
    shape = draw(st.sampled_from(["str", "str", "str-data-uri", "str-cut-data-uri", "list", "list-image", "list-images", "oversized"]))
    if shape == "str":
        return _text(draw, 0, 60)
    if shape == "str-data-uri":
        return json.dumps({"status": "ok", "favicon": _data_uri(draw, ids), "note": _text(draw, 1, 5)})
    if shape == "str-cut-data-uri":  # an output truncated inside its data: URI
        uri = _data_uri(draw, ids)
        return "screenshot: " + uri[: draw(st.integers(min_value=23, max_value=len(uri) - 1))] + "… [truncated]"
    if shape == "oversized":
        return _oversized(draw)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": _text(draw, 1, 20)}]
    if shape == "list-image":
        blocks.append(_image_block(draw, ids))
    elif shape == "list-images":
        for _ in range(draw(st.integers(min_value=2, max_value=3))):
            blocks.append(_image_block(draw, ids))
            blocks.append({"type": "text", "text": _text(draw, 1, 5)})
    return blocks


def _turn(draw: Any, ids: _Ids) -> list[Message]:
    kind = draw(
        st.sampled_from(
            ["user", "user", "assistant", "tools", "tools", "tools", "user-image", "user-data-uri", "oversized",
             "mixed-round", "assistant-data-uri", "split-results", "reused-ids"]
        )
    )
    if kind == "assistant-data-uri":  # an assistant that wrote an image URI into its text
        return [Message("assistant", ({"type": "text", "text": f"{_text(draw, 0, 5)} {_data_uri(draw, ids)}"},))]
    if kind == "user":
        return [Message("user", ({"type": "text", "text": _text(draw)},))]
    if kind == "assistant":
        return [Message("assistant", ({"type": "text", "text": _text(draw)},))]
    if kind == "user-image":
        blocks = [{"type": "text", "text": _text(draw, 1, 10)}]
        for _ in range(draw(st.integers(min_value=1, max_value=2))):
            blocks.append(_image_block(draw, ids))
        return [Message("user", tuple(blocks))]
    if kind == "user-data-uri":
        text = f"{_text(draw, 1, 8)} {_data_uri(draw, ids)} {_text(draw, 0, 8)}"
        return [Message("user", ({"type": "text", "text": text},))]
    if kind == "oversized":
        role = draw(st.sampled_from(["user", "assistant"]))
        return [Message(role, ({"type": "text", "text": _oversized(draw)},))]
    # a tool round: 1..4 parallel calls, answered by one message of results
    count = draw(st.integers(min_value=2 if kind == "split-results" else 1, max_value=4))
    if kind == "reused-ids" and ids.next:  # an agent loop that numbers its calls per turn, through the API
        tool_ids = [f"toolu_{i + 1:04d}" for i in range(count)]
    else:
        tool_ids = [ids.tool() for _ in range(count)]
    call_blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        call_blocks.append({"type": "text", "text": _text(draw, 1, 12)})
    for tool_id in tool_ids:
        name = draw(st.sampled_from(["read_file", "bash", "grep", "screenshot"]))
        arguments: dict[str, Any] = {"path": draw(st.sampled_from(WORDS))}
        if draw(st.integers(min_value=0, max_value=7)) == 0:  # an image pasted into the arguments
            arguments["icon"] = _data_uri(draw, ids)
        call_blocks.append({"type": "tool_use", "id": tool_id, "name": name, "input": arguments})
    results = [
        {
            "type": "tool_result",
            "tool_use_id": tool_id,
            "content": _tool_result_content(draw, ids),
            "is_error": draw(st.booleans()),
        }
        for tool_id in tool_ids
    ]
    if kind == "mixed-round":  # results share their user message with plain text
        results.append({"type": "text", "text": _text(draw, 1, 10)})
    if kind == "split-results":  # parallel results stored as two user messages
        cut = draw(st.integers(min_value=1, max_value=len(results) - 1))
        return [
            Message("assistant", tuple(call_blocks)),
            Message("user", tuple(results[:cut])),
            Message("user", tuple(results[cut:])),
        ]
    return [Message("assistant", tuple(call_blocks)), Message("user", tuple(results))]


@st.composite
def histories(draw: Any, min_turns: int = 1, max_turns: int = 10) -> list[Message]:
    """Return a random agent history (messages without ``seq``)."""
    ids = _Ids()
    messages: list[Message] = []
    if draw(st.booleans()):
        system = "You are a careful agent. " + _text(draw, 1, 10)
        if draw(st.integers(min_value=0, max_value=3)) == 0:  # a logo pasted into the system prompt
            system += f" {_data_uri(draw, ids)}"
        messages.append(Message("system", ({"type": "text", "text": system},)))
    for _ in range(draw(st.integers(min_value=min_turns, max_value=max_turns))):
        messages.extend(_turn(draw, ids))
    if draw(st.booleans()):
        messages.append(Message("user", ({"type": "text", "text": "Now: " + _text(draw, 1, 10)},)))
    return messages


def _optional(low: int, high: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(min_value=low, max_value=high))


@st.composite
def recipes(draw: Any) -> Recipe:
    """Return a random recipe (budget, image policy and caps, hierarchy settings, format)."""
    summary_max = draw(st.integers(min_value=40, max_value=300))
    return Recipe(
        budget_tokens=draw(st.integers(min_value=150, max_value=6000)),
        vision=draw(st.booleans()),
        max_live_images=draw(_optional(0, 3)),
        image_strip_depth_tokens=draw(_optional(0, 3000)),
        max_live_image_bytes=draw(_optional(0, 3000)),
        max_compression_images=draw(_optional(0, 2)),
        max_compression_image_bytes=draw(_optional(0, 3000)),
        chunk_target_tokens=draw(st.integers(min_value=50, max_value=400)),
        chunk_min_messages=draw(st.integers(min_value=1, max_value=4)),
        merge_fanout=draw(st.integers(min_value=2, max_value=4)),
        summary_max_tokens=summary_max,
        summarizer_context_tokens=draw(st.integers(min_value=summary_max + 700, max_value=8000)),
        output_format=draw(st.sampled_from(["openai", "anthropic"])),
    )


