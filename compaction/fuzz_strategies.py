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

__all__ = ["WORDS", "MUTATIONS", "histories", "recipes", "transcript_mutations"]

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




# -- mutations of a user's transcripts ---------------------------------------------------------

#: What :func:`transcript_mutations` does to a window of a transcript.
MUTATIONS = ("image", "nested image", "oversized output", "parallel calls")


def _has(message: Message, kind: str) -> bool:
    return any(b.get("type") == kind for b in message.content)


def _mutation_ids(draw: Any) -> _Ids:
    ids = _Ids()
    ids.seeds = 1000
    return ids


def _fuzz_tool_id(ids: _Ids) -> str:
    return "toolu_fuzz" + ids.tool().removeprefix("toolu_")


def _calls_round(draw: Any, ids: _Ids, nested_image: bool = False) -> list[Message]:
    """Return an assistant message of 2 to 4 parallel tool calls and the user message answering them."""
    tool_ids = [_fuzz_tool_id(ids) for _ in range(draw(st.integers(min_value=2, max_value=4)))]
    calls = [
        {"type": "tool_use", "id": t, "name": draw(st.sampled_from(["read_file", "bash", "screenshot"])),
         "input": {"path": draw(st.sampled_from(WORDS))}}
        for t in tool_ids
    ]
    results = [
        {"type": "tool_result", "tool_use_id": t, "content": _tool_result_content(draw, ids), "is_error": False}
        for t in tool_ids
    ]
    if nested_image:
        results[0] = {**results[0], "content": [{"type": "text", "text": "screenshot"}, _image_block(draw, ids)]}
    return [Message("assistant", tuple(calls)), Message("user", tuple(results))]


def _with_result_content(message: Message, index: int, content: Any) -> Message:
    blocks = list(message.content)
    blocks[index] = {**blocks[index], "content": content}
    return Message(message.role, tuple(blocks))


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or [])


def _mutate(draw: Any, window: list[Message], kind: str, ids: _Ids) -> str:
    """Apply one mutation to ``window`` in place; return what was done (for the recipe of the case)."""
    results = [(i, j) for i, m in enumerate(window) for j, b in enumerate(m.content) if b.get("type") == "tool_result"]
    if kind in ("nested image", "oversized output") and results:
        i, j = draw(st.sampled_from(results))
        block = window[i].content[j]
        if kind == "nested image":
            window[i] = _with_result_content(window[i], j, [*_as_blocks(block.get("content")), _image_block(draw, ids)])
        else:
            window[i] = _with_result_content(window[i], j, _oversized(draw))
        return f"{kind} in message {i}, block {j}"
    if kind == "image":
        users = [i for i, m in enumerate(window) if m.role == "user"]
        if users:
            i = draw(st.sampled_from(users))
            window[i] = Message("user", (*window[i].content, _image_block(draw, ids)))
            return f"image appended to message {i}"
        window.append(Message("user", ({"type": "text", "text": "see this"}, _image_block(draw, ids))))
        return f"image in a new user message {len(window) - 1}"
    if kind == "oversized output":  # no tool result in the window: an oversized text
        window.append(Message("user", ({"type": "text", "text": _oversized(draw)},)))
        return f"oversized text in a new user message {len(window) - 1}"
    # parallel calls (and a nested image with no tool result to put it in): a new round where no call is open
    slots = [p for p in range(len(window) + 1) if p == 0 or not _has(window[p - 1], "tool_use")]
    p = draw(st.sampled_from(slots))
    window[p:p] = _calls_round(draw, ids, nested_image=kind == "nested image")
    return f"{kind} as a round of parallel calls at message {p}"


@st.composite
def transcript_mutations(
    draw: Any, transcripts: tuple[tuple[Message, ...], ...], names: tuple[str, ...] = (), max_window: int = 40
) -> tuple[list[Message], tuple[str, ...]]:
    """Return a mutated window of one of ``transcripts`` and the steps that made it.

    The window keeps the transcript's leading system messages, starts where no tool call is
    open (the first message, or one that answers no call), ends anywhere (a cut point: a tool
    call may be left open) and is at most ``max_window`` messages long.  Then up to four of
    :data:`MUTATIONS`: an image in a user message, an image nested in a tool result, a tool
    output replaced by an oversized one, a round of 2 to 4 parallel tool calls.  Everything
    shrinks toward the first transcript, a one-message window and no mutation.  The steps
    name the transcript (``names[i]``, or ``transcript i``), the window and each mutation.
    """
    index = draw(st.integers(min_value=0, max_value=len(transcripts) - 1))
    source = transcripts[index]
    pinned = 0
    while pinned < len(source) and source[pinned].role == "system":
        pinned += 1
    body = source[pinned:]
    steps = [names[index] if index < len(names) and names[index] else f"transcript {index}"]
    window: list[Message] = []
    if body:
        starts = [i for i, m in enumerate(body) if i == 0 or (not _has(m, "tool_result") and not _has(body[i - 1], "tool_use"))]
        start = draw(st.sampled_from(starts))
        end = draw(st.integers(min_value=start + 1, max_value=min(len(body), start + max_window)))
        window = [Message(m.role, m.content) for m in body[start:end]]
        steps.append(f"messages {pinned + start} to {pinned + end - 1}")
    ids = _mutation_ids(draw)
    for kind in draw(st.lists(st.sampled_from(MUTATIONS), max_size=4)):
        steps.append(_mutate(draw, window, kind, ids))
    return [Message(m.role, m.content) for m in source[:pinned]] + window, tuple(steps)
