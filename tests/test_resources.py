"""Resource use: work and memory that grow with the input, never faster.

Reproductions of issue 10 ("Resource use"): splitting one huge message peeled one part per
recursion level and kept every remainder alive (1 / 2 / 4 / 8 MB took 149 / 240 / 596 /
1,999 MB; a 1.5 MB message under a small summarizer window ended in a ``RecursionError``),
and 330 nested ``tool_result`` levels crashed the token count.  Memory is measured with
``tracemalloc`` after a warm-up (the encodings' tables load once per process); no test
asserts wall-clock time (``bench/bench_split.py`` prints the figures).
"""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from strategies import CapturingSummarizer, independent_tokens, payload_json

from compaction import Compactor, Message, Recipe, Store
from compaction.blocks import MAX_BLOCK_DEPTH, iter_blocks_deep
from compaction.splitting import cut_text, split_texts
from compaction.tokens import _count_py, counting
from compaction.tokens.counting import blocks_text_tokens, count_text
from compaction.tokens.encodings import get_encoding

ENCODING = "o200k_base"
LINE = "    result = compute_the_thing(argument_one, argument_two) + 12345  # explain\n"


def code_text(size: int) -> str:
    """Return about ``size`` characters of code-like lines."""
    return LINE * (size // len(LINE))


def peak_bytes(work: Callable[[], Any]) -> int:
    """Return the peak of traced allocations while ``work`` runs (bytes)."""
    gc.collect()
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Load the encoding tables before anything is measured."""
    count_text(code_text(10_000), ENCODING)
    cut_text(code_text(50_000), 500, ENCODING)


# -- cutting one text into parts -------------------------------------------------------------------


@pytest.mark.parametrize("limit", [128, 1000, 3650])
def test_parts_fit_join_back_and_end_at_line_breaks(limit: int) -> None:
    text = code_text(300_000)
    parts = cut_text(text, limit, ENCODING)
    assert "".join(parts) == text
    assert all(count_text(p, ENCODING) <= limit for p in parts)
    assert all(p.endswith("\n") for p in parts)
    # aimed just under the limit: no more parts than about 1.3 times the fewest possible
    assert len(parts) <= 1.3 * count_text(text, ENCODING) / limit + 1


def test_a_text_within_the_limit_stays_whole() -> None:
    text = " " * 40_000 + "x"  # many characters, few tokens
    assert cut_text(text, count_text(text, ENCODING), ENCODING) == [text]
    assert split_texts([{"type": "text", "text": "short"}], 100, ENCODING) == [
        {"type": "text", "text": "short"}
    ]


def test_a_text_without_line_breaks_is_cut_between_characters() -> None:
    text = "".join(f"{i:x}é中😀" for i in range(40_000))
    parts = cut_text(text, 300, ENCODING)
    assert "".join(parts) == text
    assert all(count_text(p, ENCODING) <= 300 for p in parts)


def test_no_cut_falls_inside_a_data_uri() -> None:
    # not an image the splitter can lift out (no readable header): it stays in the text
    uris = [f"data:image/png;base64,{'QUJD' * (50 + 40 * i)}" for i in range(12)]
    text = "".join(f"{code_text(3_000)}see {uri} there\n" for uri in uris)
    parts = cut_text(text, 200, ENCODING)
    assert "".join(parts) == text
    for uri in uris:
        assert any(uri in part for part in parts), "a data: URI was cut"
    for part in parts:
        if not any(uri in part for uri in uris):
            assert count_text(part, ENCODING) <= 200


def test_a_single_character_over_a_tiny_limit_is_a_part_and_the_cut_ends() -> None:
    assert "".join(cut_text("😀" * 50, 1, ENCODING)) == "😀" * 50


def test_splitting_memory_is_linear_in_the_message() -> None:
    """Before: every remainder stayed alive (quadratic: 4 MB peaked over 500 MB here)."""
    size = 4_000_000
    text = code_text(size)
    peak = peak_bytes(lambda: split_texts([{"type": "text", "text": text}], 3650, ENCODING))
    assert peak < 3 * size, f"splitting {size:,} characters peaked at {peak:,} bytes"


@pytest.mark.parametrize("implementation", ["c", "py"])
def test_counting_a_long_text_in_segments_is_exact_and_small(
    implementation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the pure-Python twin held every piece of the text (14 x its size in memory)."""
    if implementation == "py":
        monkeypatch.setattr(counting, "count_tokens", _count_py.count_tokens)
    encoding = get_encoding(ENCODING)
    text = "".join(f"Line {i}: ok ) \n/{i}\n\n  x\r\ny é中 \n" for i in range(10_000))
    assert count_text(text, ENCODING) == len(encoding.encode_ordinary(text))
    peak = peak_bytes(lambda: count_text(text, ENCODING))
    assert peak < len(text) + 40 * counting.SEGMENT_CHARS


# -- one huge message through the compactor ----------------------------------------------------------


def huge_store(size: int) -> Store:
    store = Store(":memory:")
    store.append(
        [
            Message("user", ({"type": "text", "text": code_text(size)},)),
            Message("assistant", ({"type": "text", "text": "done"},)),
            Message("user", ({"type": "text", "text": "next"},)),
        ]
    )
    return store


def test_a_huge_message_under_a_tiny_summarizer_window_is_summarized_in_parts() -> None:
    """Before: ``RecursionError`` in ``splitting._cut`` (one recursion level per part)."""
    store = huge_store(1_500_000)
    summarizer = CapturingSummarizer()
    recipe = Recipe(summarizer_context_tokens=1000, summary_max_tokens=100)
    try:
        report = Compactor(store, recipe, summarizer).tick(close_tail=True)
        assert report.l1_added == 1 and report.failures == 0
        assert len(summarizer.requests) > 1000  # the message went in parts
        window = recipe.summarizer_context_tokens - recipe.summary_max_tokens
        assert max(summarizer.tokens) <= window
        model = recipe.target_model
        for _kind, payload in summarizer.requests[::50]:
            assert independent_tokens(payload_json(payload), model) <= window
    finally:
        store.close()


def test_compacting_a_huge_message_takes_memory_linear_in_its_size() -> None:
    """Before: 0.5 MB peaked at 10 MB and 2 MB at 130 MB (x 13 for x 4 the size)."""
    peaks = {}
    for size in (500_000, 2_000_000):
        store = huge_store(size)
        try:
            peaks[size] = peak_bytes(lambda: Compactor(store, Recipe()).tick(close_tail=True))  # noqa: B023
        finally:
            store.close()
    assert peaks[2_000_000] < 16 * 2_000_000, peaks
    assert peaks[2_000_000] < 6 * peaks[500_000], peaks  # linear: about 4


# -- deep nesting: walks are iterative and bounded -------------------------------------------------


def nested_result(levels: int, leaf: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return a ``tool_result`` holding a ``tool_result`` ... ``levels`` deep."""
    block: dict[str, Any] = leaf or {"type": "text", "text": "leaf"}
    for level in range(levels):
        block = {"type": "tool_result", "tool_use_id": f"t{level}", "content": [block]}
    return block


def test_walks_over_nested_blocks_do_not_recurse() -> None:
    """Before: ``blocks_text_tokens`` took three frames a level (330 levels crashed)."""
    deep = nested_result(5_000)  # far past what validation allows, as a raw dict
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        tokens = blocks_text_tokens([deep], ENCODING)
        blocks = sum(1 for _ in iter_blocks_deep([deep]))
    finally:
        sys.setrecursionlimit(limit)
    assert blocks == 5_001
    assert tokens > 5_000 * counting.MESSAGE_OVERHEAD


def test_the_deepest_message_allowed_goes_through_the_whole_pipeline(tmp_path: Any) -> None:
    from compaction import compile_request

    uses = [Message("user", ({"type": "text", "text": "go"},))]
    uses.append(
        Message(
            "assistant", ({"type": "tool_use", "id": f"t{MAX_BLOCK_DEPTH - 1}", "name": "sh", "input": {}},)
        )
    )
    uses.append(Message("user", (nested_result(MAX_BLOCK_DEPTH),)))
    uses.append(Message("assistant", ({"type": "text", "text": "ok"},)))
    store = Store(tmp_path / "deep.sqlite")
    try:
        store.append(uses)
        assert store.messages(2, 3)[0].content == uses[2].content
        Compactor(store, Recipe(chunk_target_tokens=50)).tick(close_tail=True)
        for fmt in ("openai", "anthropic"):
            compiled = compile_request(store, Recipe(budget_tokens=20_000, output_format=fmt))
            assert json.loads(compiled.request.payload)["messages"]
    finally:
        store.close()
