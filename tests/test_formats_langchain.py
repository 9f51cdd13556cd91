"""LangChain / LangGraph message dumps: the three serialized shapes, tool calls once each."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.formats import detect_format, load_transcript

DATA = Path(__file__).resolve().parent / "data" / "formats"
TO_DICT = DATA / "langchain__messages_to_dict.json"
DUMPD = DATA / "langgraph__state_dumpd.json"


def test_messages_to_dict_imports_with_every_call_answered() -> None:
    parsed = load_transcript(TO_DICT)
    assert parsed.format == "langchain" and parsed.skipped == 0 and parsed.unknown_blocks == {}
    messages = parsed.messages
    assert [m.role for m in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "user",
        "assistant",
    ]
    assert messages[1].content == (
        {
            "type": "text",
            "text": "Why does the nightly build fail on the docs job? Fix it if it is a config problem.",
        },
    )
    uses = [b for m in messages for b in m.content if b["type"] == "tool_use"]
    results = [b for m in messages for b in m.content if b["type"] == "tool_result"]
    assert [b["id"] for b in uses] == ["call_wf1", "call_sh1", "toolu_mk1", "call_ed1"]
    assert [b["tool_use_id"] for b in results] == ["call_wf1", "call_sh1", "toolu_mk1", "call_ed1"]
    assert uses[3]["input"] == {"path": "Makefile", "old": "--keep-going-on-warn", "new": "--keep-going"}
    assert [b["is_error"] for b in results] == [False, True, False, False]
    assert results[1]["content"].startswith("sphinx-build: error: unrecognized arguments")
    assert results[2]["content"] == [
        {"type": "text", "text": "docs:\n\tsphinx-build -W --keep-going-on-warn docs docs/_build"}
    ]
    assert messages[2].meta["model"] == "gpt-4o-2024-08-06" and messages[2].source_id == "run-a1"


def test_a_tool_use_part_that_repeats_a_tool_call_is_imported_once() -> None:
    turn = load_transcript(TO_DICT).messages[4]
    assert turn.content == (
        {
            "type": "text",
            "text": "The docs job passes an option Sphinx does not have. Let me look at the Makefile.",
        },
        {"type": "tool_use", "id": "toolu_mk1", "name": "read_file", "input": {"path": "Makefile"}},
    )


def test_invalid_tool_calls_are_kept_in_meta_and_the_image_as_an_image() -> None:
    messages = load_transcript(TO_DICT).messages
    assert messages[6].meta["langchain_invalid_tool_calls"][0]["error"] == "Unterminated string"
    image = messages[8].content[1]
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"


def test_dumpd_state_and_model_dump_give_the_same_messages(tmp_path: Path) -> None:
    expected = [(m.role, m.content, m.source_id) for m in load_transcript(TO_DICT).messages]
    parsed = load_transcript(DUMPD)
    assert parsed.format == "langchain"
    assert [(m.role, m.content, m.source_id) for m in parsed.messages] == expected
    flat = tmp_path / "flat.jsonl"  # model_dump(), one message a line
    flat.write_text("".join(json.dumps(record["data"]) + "\n" for record in json.loads(TO_DICT.read_text())))
    assert detect_format(flat) == "langchain"
    assert [(m.role, m.content, m.source_id) for m in load_transcript(flat).messages] == expected


def test_detected_from_its_types() -> None:
    assert detect_format(TO_DICT) == "langchain" and detect_format(DUMPD) == "langchain"


def test_a_tool_message_without_its_call_id_is_named(tmp_path: Path) -> None:
    records = json.loads(TO_DICT.read_text())
    del records[3]["data"]["tool_call_id"]
    path = tmp_path / "history.json"
    path.write_text(json.dumps(records))
    parsed = load_transcript(path, lenient=True)
    assert parsed.problems == [f"{path}: messages[3]: a tool message needs a string 'tool_call_id'"]


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)
_CLASS = {"human": "HumanMessage", "ai": "AIMessage", "system": "SystemMessage"}


@settings(max_examples=60, deadline=None)
@given(turns=st.lists(st.tuples(st.sampled_from(["human", "ai", "system"]), _TEXT), min_size=1, max_size=8))
def test_the_three_shapes_import_alike(tmp_path_factory, turns: list[tuple[str, str]]) -> None:
    folder = tmp_path_factory.mktemp("lc")
    shapes = {
        "to_dict": [{"type": kind, "data": {"content": text, "type": kind}} for kind, text in turns],
        "flat": {"messages": [{"type": kind, "content": text, "additional_kwargs": {}} for kind, text in turns]},
        "dumpd": [
            {
                "lc": 1,
                "type": "constructor",
                "id": ["langchain", "schema", "messages", _CLASS[kind]],
                "kwargs": {"content": text},
            }
            for kind, text in turns
        ],
    }
    role = {"human": "user", "ai": "assistant", "system": "system"}
    for name, document in shapes.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(document))
        parsed = load_transcript(path)
        assert parsed.format == "langchain", name
        assert [(m.role, m.content[0]["text"]) for m in parsed.messages] == [(role[k], t) for k, t in turns]
