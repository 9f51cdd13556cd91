"""OpenAI Responses API input items: turns grouped, encrypted reasoning opaque, compactions kept in meta."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.formats import detect_format, load_transcript

SAMPLE = Path(__file__).resolve().parent / "data" / "formats" / "openai-responses__agent-input-items.json"


def test_the_sample_imports_with_every_call_answered() -> None:
    parsed = load_transcript(SAMPLE)
    assert parsed.format == "openai-responses" and parsed.skipped == 0
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
        "assistant",
    ]
    assert messages[0].content == (
        {
            "type": "text",
            "text": "You are a coding agent working in /srv/app. Run tests before you claim a fix.",
        },
    )
    uses = [b for m in messages for b in m.content if b["type"] == "tool_use"]
    results = [b for m in messages for b in m.content if b["type"] == "tool_result"]
    assert [b["id"] for b in uses] == ["call_grep1", "call_edit1", "call_test1"]
    assert [b["tool_use_id"] for b in results] == ["call_grep1", "call_edit1", "call_test1"]
    assert uses[2]["input"] == {"cmd": "pytest -q tests/test_export.py"}
    assert results[2]["content"] == [{"type": "text", "text": "6 passed in 0.41s"}]
    assert [b["type"] for b in messages[4].content] == ["encrypted_reasoning", "text", "tool_use", "tool_use"]
    assert messages[4].source_id == "msg_01"


def test_reasoning_is_thinking_and_encrypted_reasoning_exactly_as_codex_writes_it() -> None:
    turn = load_transcript(SAMPLE).messages[2]
    assert turn.content[0] == {
        "type": "thinking",
        "thinking": "**Locating the exporter**\n\nI should find where the CSV is written before guessing.",
        "signature": "",
    }
    assert turn.content[1] == {
        "type": "encrypted_reasoning",
        "provider": "openai",
        "encrypted_content": "gAAAAABo9reasoning-ciphertext-one==",
    }


def test_a_compaction_item_is_a_prior_compaction_in_meta_never_an_ask() -> None:
    messages = load_transcript(SAMPLE).messages
    ask = messages[1]
    assert ask.content == (
        {"type": "text", "text": "The CSV export drops rows with a comma in the name. Find and fix it."},
    )
    assert ask.meta["openai_compaction"] == {
        "id": "cmp_0a1b2c3d4e5f",
        "encrypted_content": "gAAAAABo9compacted-history-of-turns-1-to-14-opaque-to-clients==",
    }
    assert not any("gAAAAABo9compacted" in json.dumps(m.content) for m in messages)


def test_images_by_url_and_by_file_id_and_unknown_items_are_kept_loudly() -> None:
    parsed = load_transcript(SAMPLE)
    screenshot = parsed.messages[7]
    assert screenshot.content[1]["source"]["media_type"] == "image/png"
    assert screenshot.content[2] == {
        "type": "image",
        "source": {"type": "reference", "reference": "file-7Qm2preview"},
    }
    assert parsed.messages[6].content[0]["type"] == "web_search_call"
    assert parsed.unknown_blocks == {"web_search_call": 1}


def test_detected_from_its_items_as_a_list_a_request_body_and_jsonl(tmp_path: Path) -> None:
    items = json.loads(SAMPLE.read_text())
    assert detect_format(SAMPLE) == "openai-responses"
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"model": "gpt-5", "instructions": "Be terse.", "input": items[2:6]}))
    parsed = load_transcript(body)
    assert parsed.format == "openai-responses"
    assert parsed.messages[0].role == "system" and parsed.messages[0].content[0]["text"] == "Be terse."
    lines = tmp_path / "items.jsonl"
    lines.write_text("".join(json.dumps(item) + "\n" for item in items))
    assert [m.content for m in load_transcript(lines).messages] == [
        m.content for m in load_transcript(SAMPLE).messages
    ]


def test_a_call_without_its_name_is_named_by_its_index(tmp_path: Path) -> None:
    items = json.loads(SAMPLE.read_text())
    del items[4]["name"]
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items))
    parsed = load_transcript(path, lenient=True)
    assert parsed.skipped == 1
    assert parsed.problems == [f"{path}: input[4]: a function_call item needs a string 'name'"]


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(turns=st.lists(st.tuples(_TEXT, st.lists(_TEXT, max_size=3), _TEXT), min_size=1, max_size=6))
def test_any_run_of_calls_and_outputs_round_trips(
    tmp_path_factory, turns: list[tuple[str, list[str], str]]
) -> None:
    """Each turn: a user ask, parallel calls with outputs, an answer; all come back in order, paired."""
    items: list[dict[str, object]] = []
    for number, (ask, outputs, answer) in enumerate(turns):
        items.append({"role": "user", "content": ask})
        ids = [f"call_{number}_{i}" for i in range(len(outputs))]
        items += [
            {"type": "function_call", "call_id": i, "name": "f", "arguments": json.dumps({"n": n})}
            for n, i in enumerate(ids)
        ]
        items += [
            {"type": "function_call_output", "call_id": i, "output": out}
            for i, out in zip(ids, outputs, strict=True)
        ]
        items.append(
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}
        )
    path = tmp_path_factory.mktemp("r") / "items.json"
    path.write_text(json.dumps(items))
    messages = load_transcript(path, format="openai-responses").messages
    asks = [m.content[0]["text"] for m in messages if m.role == "user" and m.content[0]["type"] == "text"]
    assert asks == [ask for ask, _, _ in turns]
    results = [b["content"] for m in messages for b in m.content if b["type"] == "tool_result"]
    assert results == [out for _, outputs, _ in turns for out in outputs]
    uses = [b["id"] for m in messages for b in m.content if b["type"] == "tool_use"]
    assert uses == [b["tool_use_id"] for m in messages for b in m.content if b["type"] == "tool_result"]
    answers = [
        m.content[-1]["text"] for m in messages if m.role == "assistant" and m.content[-1]["type"] == "text"
    ]
    assert answers == [answer for _, _, answer in turns]


# -- real samples: recorded OpenAI traffic from pydantic-ai's test cassettes (MIT) -------------

REAL = Path(__file__).resolve().parent / "data" / "formats"


def test_a_recorded_gpt_5_5_tool_turn_imports_with_its_call_answered() -> None:
    """The input of pydantic-ai's recorded second request (reasoning, commentary, a call and
    its output) and the answer the API gave, as an agent would send them next turn."""
    parsed = load_transcript(REAL / "openai-responses__pydantic-ai-phase-live.json")
    assert parsed.format == "openai-responses" and parsed.skipped == 0 and parsed.unknown_blocks == {}
    messages = parsed.messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0].content == ({"type": "text", "text": "What is the capital of PotatoLand?"},)
    reasoning, commentary, call = messages[1].content
    assert reasoning["type"] == "encrypted_reasoning" and reasoning["encrypted_content"].startswith(
        "gAAAAABp79WD"
    )
    assert commentary == {"type": "text", "text": 'I\'ll check the capital lookup tool for "PotatoLand."'}
    assert call == {
        "type": "tool_use",
        "id": "call_ALAJMWK9buNN7RXxxXbECcHa",
        "name": "get_capital",
        "input": {"country": "PotatoLand"},
    }
    assert messages[2].content == (
        {
            "type": "tool_result",
            "tool_use_id": "call_ALAJMWK9buNN7RXxxXbECcHa",
            "content": "Potato City",
            "is_error": False,
        },
    )
    assert messages[3].content == ({"type": "text", "text": "The capital of PotatoLand is **Potato City**."},)


def test_a_recorded_compaction_item_is_a_prior_compaction_never_an_ask() -> None:
    """The input pydantic-ai sent after ``POST /v1/responses/compact``: the compaction item the
    API returned, then the next ask; and the answer."""
    parsed = load_transcript(REAL / "openai-responses__pydantic-ai-compact-messages.json")
    assert parsed.format == "openai-responses" and parsed.skipped == 0
    ask, answer = parsed.messages
    assert (ask.role, ask.content) == ("user", ({"type": "text", "text": "And 5+5?"},))
    compaction = ask.meta["openai_compaction"]
    assert compaction["id"] == "cmp_0fe74db124a77f9a0169cdf581740c819490de6e615d95448d"
    assert len(compaction["encrypted_content"]) == 2808
    assert (answer.role, answer.content) == ("assistant", ({"type": "text", "text": "5 + 5 = 10"},))
    assert not any(compaction["encrypted_content"] in json.dumps(m.content) for m in parsed.messages)
