"""Cline / Roo Code api_conversation_history.json: Anthropic messages cleaned of Cline's own fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import Recipe, Store, compress_and_compile
from compaction.formats import detect_format, load_transcript
from compaction.formats.cline import clean_block

SAMPLE = Path(__file__).resolve().parent / "data" / "formats" / "cline__api_conversation_history.json"
_CLINE_FIELDS = {"call_id", "reasoning_details", "summary"}


def _keys(blocks: Any) -> set[str]:
    keys: set[str] = set()
    for block in blocks:
        keys |= set(block)
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            keys |= _keys(block["content"])
    return keys


def test_the_sample_imports_as_cline_with_its_facts_in_meta() -> None:
    parsed = load_transcript(SAMPLE)
    assert parsed.format == "cline" and parsed.skipped == 0 and parsed.unknown_blocks == {}
    messages = parsed.messages
    assert [m.role for m in messages] == ["user", "assistant"] * 4
    task = messages[0].content
    assert task[0]["text"].startswith("<task>\nThe date parser in src/parser.ts accepts 2024-02-30.")
    assert task[1]["type"] == "image" and task[1]["source"]["media_type"] == "image/png"
    assert task[2]["text"].startswith(
        "<environment_details>\n# Visual Studio Code Visible Files"
    )  # kept verbatim
    assert messages[0].meta == {"timestamp": "2026-03-14T09:02:11.000Z"}
    assert messages[1].meta["model"] == "claude-sonnet-4-5-20250929"
    assert messages[1].meta["provider"] == "anthropic" and messages[1].meta["mode"] == "act"
    assert messages[1].meta["cline_metrics"]["cost"] == 0.0295
    assert messages[1].source_id == "msg_01Ab"
    results = [b for m in messages for b in m.content if b["type"] == "tool_result"]
    assert [b["tool_use_id"] for b in results] == ["toolu_01R1", "toolu_01E1", "toolu_01T1"]
    assert results[2].get("is_error") is True


def test_cline_fields_are_removed_from_every_block_and_reasoning_details_kept_in_meta() -> None:
    messages = load_transcript(SAMPLE).messages
    for message in messages:
        assert not (_keys(message.content) & _CLINE_FIELDS)
    thinking = messages[1].content[0]
    assert thinking == {
        "type": "thinking",
        "thinking": "I should read the parser first, then the existing tests.",
        "signature": "EqQBCkYIBxgCKkDsig-one",
    }
    assert "signature" not in messages[1].content[2]  # a Gemini signature on a tool_use
    assert messages[3].meta["cline_reasoning_details"][0]["text"] == "Compare the parts after construction."


def test_read_as_anthropic_the_fields_would_ship_and_as_cline_they_do_not() -> None:
    as_anthropic = load_transcript(SAMPLE, format="anthropic").messages
    assert "call_id" in _keys(as_anthropic[1].content)
    with Store(":memory:") as store:
        store.append(load_transcript(SAMPLE).messages)
        compiled, _ = compress_and_compile(store, Recipe(budget_tokens=8000, output_format="anthropic"))
        shipped = json.dumps(compiled.request.body())
    assert (
        "call_id" not in shipped and "reasoning_details" not in shipped and "<environment_details>" in shipped
    )


def test_detected_as_cline_even_with_text_blocks_only(tmp_path: Path) -> None:
    assert detect_format(SAMPLE) == "cline"
    old = [  # an older Cline / Roo Code history: XML tool calls inside text, no ts
        {"role": "user", "content": [{"type": "text", "text": "<task>\nList the files.\n</task>"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "<list_files>\n<path>.</path>\n</list_files>"}],
        },
    ]
    path = tmp_path / "api_conversation_history.json"
    path.write_text(json.dumps(old, indent=2))
    assert detect_format(path) == "cline"
    assert load_transcript(path).messages[1].content[0]["text"].startswith("<list_files>")


_VALUE = st.one_of(st.text(max_size=8), st.integers(), st.lists(st.text(max_size=5), max_size=2))


@settings(max_examples=80, deadline=None)
@given(
    kind=st.sampled_from(["text", "tool_use", "thinking", "image"]),
    extra=st.dictionaries(
        st.sampled_from(sorted(_CLINE_FIELDS | {"signature", "cache_control"})), _VALUE, max_size=4
    ),
)
def test_clean_block_removes_exactly_clines_fields(kind: str, extra: dict[str, Any]) -> None:
    block = {"type": kind, **extra}
    details: list[Any] = []
    cleaned = clean_block(block, details)
    removed = _CLINE_FIELDS | ({"signature"} if kind != "thinking" else set())
    assert cleaned == {k: v for k, v in block.items() if k not in removed}
    assert clean_block(cleaned, []) == cleaned
    reasoning = extra.get("reasoning_details")
    assert details == (reasoning if isinstance(reasoning, list) else [])
