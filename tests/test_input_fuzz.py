"""Fuzzing the inputs: nesting depth, lone surrogates and forced formats.

The property tests of ``test_invariants.py`` generate well-formed histories; these generate what
an adversarial pass of issue 10 fed the tool and would have found its faults: tool results and
JSON nested hundreds of levels deep (a ``RecursionError`` traceback), text holding lone
surrogates (a ``UnicodeEncodeError`` traceback) and a ``--format`` forced onto another format's
file (0 messages and success).  The properties: every input is accepted and handled, or refused
with one :class:`~compaction.CompactionError`; nothing accepted is lost or changed.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from conftest import CASES, EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction import (
    CompactionError,
    InvalidMessage,
    InvalidTranscript,
    Message,
    OverBudget,
    Recipe,
    Store,
    compile_request,
    compress_and_compile,
    load_transcript,
)
from compaction.blocks import MAX_BLOCK_DEPTH, MAX_JSON_DEPTH
from compaction.formats import FORMATS
from compaction.tokens.counting import message_text_tokens
from compaction.tools import normalize_tools, tools_tokens

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- deep nesting ------------------------------------------------------------------------------------


@st.composite
def nested_blocks(draw: Any) -> tuple[dict[str, Any], int, int]:
    """A tool result holding tool results ``levels`` deep, with an input ``json_levels`` deep inside."""
    levels = draw(st.integers(min_value=1, max_value=350))
    json_levels = draw(st.integers(min_value=0, max_value=100))
    value: Any = draw(st.sampled_from(["leaf", 1, None, []]))
    for _ in range(json_levels):
        value = draw(st.sampled_from([lambda v: {"k": v}, lambda v: [v], lambda v: {"a": 1, "b": v}]))(value)
    leaf = draw(
        st.sampled_from(
            [
                {"type": "tool_use", "id": "inner", "name": "n", "input": {"v": value}},
                {"type": "opaque", "payload": value},
                {"type": "text", "text": "leaf"},
            ]
        )
    )
    block: dict[str, Any] = leaf
    for level in range(levels):
        block = {"type": "tool_result", "tool_use_id": f"t{level}", "content": [block]}
    return block, levels, json_depth_of(leaf)


def json_depth_of(value: Any) -> int:
    depth, pending = 0, [(value, 0)]
    while pending:
        current, level = pending.pop()
        if isinstance(current, (dict, list)):
            depth = max(depth, level + 1)
            children = current.values() if isinstance(current, dict) else current
            pending.extend((child, level + 1) for child in children)
    return depth


@FUZZ
@given(nested_blocks())
def test_any_nesting_is_handled_or_refused_with_one_clear_error(
    drawn: tuple[dict[str, Any], int, int],
) -> None:
    block, levels, own_depth = drawn
    allowed = levels <= MAX_BLOCK_DEPTH and own_depth <= MAX_JSON_DEPTH
    history = [
        Message("user", ({"type": "text", "text": "go"},)),
        Message("assistant", ({"type": "tool_use", "id": f"t{levels - 1}", "name": "sh", "input": {}},)),
    ]
    try:
        message = Message("user", (block,))
    except InvalidMessage as err:
        assert not allowed, err
        assert "nest" in str(err)
        return
    assert allowed
    assert message_text_tokens(message) > 0 and message.fingerprint()
    store = Store(":memory:")
    try:
        store.append([*history, message, Message("assistant", ({"type": "text", "text": "ok"},))])
        assert store.messages(2, 3)[0].content == message.content
        for fmt in ("openai", "anthropic"):
            compiled = compile_request(store, Recipe(budget_tokens=200_000, output_format=fmt))
            assert json.loads(compiled.request.payload)["messages"]
    finally:
        store.close()


@FUZZ
@given(nested_blocks(), st.sampled_from(["openai", "anthropic"]), st.booleans())
def test_any_nesting_in_a_file_parses_or_is_one_invalid_transcript(
    drawn: tuple[dict[str, Any], int, int], fmt: str, lenient: bool
) -> None:
    block, levels, own_depth = drawn
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{levels - 1}", "name": "sh", "input": {}}],
        },
        {"role": "user", "content": [block]},
        {"role": "assistant", "content": "done"},
    ]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "nested.jsonl"
        path.write_text("\n".join(json.dumps(m) for m in messages) + "\n", "utf-8")
        try:
            parsed = load_transcript(
                path, format="anthropic" if fmt == "anthropic" else None, lenient=lenient
            )
        except InvalidTranscript as err:
            assert not lenient and str(path) in str(err)
            return
    allowed = levels <= MAX_BLOCK_DEPTH and own_depth <= MAX_JSON_DEPTH
    assert (parsed.skipped == 0) == allowed
    assert len(parsed.messages) == (4 if allowed else 3)


@FUZZ
@given(st.integers(min_value=0, max_value=1500), st.booleans())
def test_any_tool_schema_depth_is_counted_or_refused(levels: int, openai_shape: bool) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    spec = {"name": "t", "parameters": schema}
    tool = {"type": "function", "function": spec} if openai_shape else spec
    try:
        tools = normalize_tools([tool])
    except InvalidMessage as err:
        assert json_depth_of(tool) > MAX_JSON_DEPTH and "tools[0] (t)" in str(err)
        return
    assert json_depth_of(tool) <= MAX_JSON_DEPTH
    assert tools_tokens(tools, "openai", "o200k_base") > 0


# -- lone surrogates ---------------------------------------------------------------------------------

#: Text of any code points, lone surrogates (category Cs) included, and often one for sure.
_CODE_POINTS = st.text(st.characters(categories=["L", "N", "P", "S", "Z", "Cs", "Cc"]), max_size=30)
ANY_TEXT = st.one_of(
    _CODE_POINTS.filter(bool),
    st.builds(
        lambda head, lone, tail: head + lone + tail,
        _CODE_POINTS,
        st.integers(min_value=0xD800, max_value=0xDFFF).map(chr),
        _CODE_POINTS,
    ),
)


@FUZZ
@given(st.lists(ANY_TEXT, min_size=1, max_size=6), st.sampled_from(["openai", "anthropic"]))
def test_any_code_points_survive_import_and_storage(texts: list[str], fmt: str) -> None:
    messages = [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(texts)]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "chat.json"
        path.write_text(json.dumps({"format": fmt, "messages": messages}), "utf-8")  # escapes, valid UTF-8
        parsed = load_transcript(path)
        store = Store(Path(directory) / "store.sqlite")
        try:
            assert store.append(parsed.messages, chain_seed="t") == len(parsed.messages)
            assert store.append(parsed.messages, chain_seed="t") == 0
            stored = store.messages(0, len(parsed.messages))
        finally:
            store.close()
    # what the file carries: JSON reads an escaped high and low surrogate as the pair they make
    carried = [json.loads(json.dumps(text)) for text in texts]
    assert ["".join(b["text"] for b in m.content) for m in stored] == carried
    for message in stored:
        assert message_text_tokens(message) > 0


@FUZZ
@given(st.lists(ANY_TEXT, min_size=6, max_size=12), st.sampled_from(["openai", "anthropic"]))
def test_any_code_points_survive_compression_and_the_request(texts: list[str], fmt: str) -> None:
    history = [
        Message(("user", "assistant")[i % 2], ({"type": "text", "text": text * (400 // len(text) + 1)},))
        for i, text in enumerate(texts)
    ]
    store = Store(":memory:")
    try:
        store.append([*history, Message("user", ({"type": "text", "text": "next?"},))])
        try:
            compiled, _reports = compress_and_compile(store, Recipe(budget_tokens=1000, output_format=fmt))
        except OverBudget:
            return  # a budget too small for what this history's summaries need: not this property
        assert json.loads(compiled.request.payload)["messages"]
    finally:
        store.close()


# -- forced formats ----------------------------------------------------------------------------------

SHIPPED = sorted(
    [p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md"]
    + [p for p in CASES.glob("*") if p.suffix in (".json", ".jsonl")]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SHIPPED),
    st.sampled_from(FORMATS),
    st.booleans(),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=1, max_value=400),
)
def test_a_forced_format_on_any_slice_of_any_transcript_never_succeeds_with_nothing(
    source: Path, fmt: str, lenient: bool, start: int, length: int
) -> None:
    lines = source.read_text("utf-8").split("\n")
    start = min(start, max(0, len(lines) - 1))
    text = "\n".join(lines[start : start + length])
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / source.name
        path.write_text(text, "utf-8")
        try:
            parsed = load_transcript(path, format=fmt, lenient=lenient)
        except CompactionError as err:
            assert isinstance(err, InvalidTranscript) and str(path) in str(err)
            return
    assert parsed.messages, (
        f"{source.name}[{start}:{start + length}] read as {fmt} gave nothing, without an error"
    )
