"""Real transcripts of session 16 (tests/data/formats/real_s16, see its SOURCE.md): each file's
import checked against the file by hand (message count, roles, tool pairs, block types), and
``compaction run --budget 16000`` on it; plus property tests of the reader rules these files
brought (Codex asks recorded only as events, Gemini CLI chat recordings, loud skips)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import load_transcript
from compaction.blocks import Message
from compaction.formats import detect_format, parse_text
from tests.cli_runner import cli

DATA = Path(__file__).parent / "data" / "formats" / "real_s16"

#: What each file imports as, checked by hand against the file: format, message count, the
#: roles of the first messages (s/u/a), tool_use and tool_result blocks (nested ones counted),
#: and the count of every block type.
EXPECTED: dict[str, dict[str, Any]] = {
    "codex__codemie-code__rollout-2026-05-11T13-28-45-desktop.jsonl": {
        "format": "codex",
        "messages": 40,
        "roles": "uauauauauauaua",
        "tool_use": 38,
        "tool_result": 38,
        "types": {"text": 6, "encrypted_reasoning": 16, "tool_use": 38, "tool_result": 38},
    },
    "codex__codemie-code__rollout-2026-05-11T11-26-55-tui.jsonl": {
        "format": "codex",
        "messages": 134,
        "roles": "suuauauaua",
        "tool_use": 102,
        "tool_result": 102,
        "types": {
            "text": 21,
            "encrypted_reasoning": 25,
            "tool_use": 102,
            "tool_result": 102,
            "web_search_call": 3,
        },
    },
    "claude-code__codemie-code__session-9eda1058.jsonl": {
        "format": "claude-code",
        "messages": 12,
        "roles": "uauuuauauaua",
        "tool_use": 3,
        "tool_result": 3,
        "types": {"text": 13, "tool_use": 3, "tool_result": 3, "thinking": 4},
    },
    "claude-code__codemie-code__incremental-simple-turn-2.jsonl": {
        "format": "claude-code",
        "messages": 12,
        "roles": "uauauauauaua",
        "tool_use": 2,
        "tool_result": 2,
        "types": {"text": 14, "thinking": 6, "tool_use": 2, "tool_result": 2},
    },
    "gemini-cli__codemie-code__session-2026-01-16T11-01-file-ops.json": {
        "format": "gemini-cli",
        "messages": 18,
        "roles": "uauauauauauauauaua",
        "tool_use": 14,
        "tool_result": 14,
        "types": {"text": 10, "tool_use": 14, "tool_result": 14},
    },
    "pi__pi-mono__large-session-head.jsonl": {
        "format": "pi",
        "messages": 237,
        "roles": "uuauauauau",
        "tool_use": 135,
        "tool_result": 118,
        "types": {"text": 195, "tool_use": 135, "tool_result": 118},
    },
    "anthropic__pydantic-ai__tool-with-thinking.json": {
        "format": "anthropic",
        "messages": 4,
        "roles": "uaua",
        "tool_use": 1,
        "tool_result": 1,
        "types": {"text": 3, "thinking": 1, "tool_use": 1, "tool_result": 1},
    },
    "anthropic__pydantic-ai__web-fetch-tool.json": {
        "format": "anthropic",
        "messages": 4,
        "roles": "uaua",
        "tool_use": 0,
        "tool_result": 0,
        "types": {"text": 4, "thinking": 2, "server_tool_use": 1, "web_fetch_tool_result": 1},
    },
    "anthropic__pydantic-ai__mcp-servers.json": {
        "format": "anthropic",
        "messages": 4,
        "roles": "uaua",
        "tool_use": 0,
        "tool_result": 0,
        "types": {"text": 4, "thinking": 2, "mcp_tool_use": 2, "mcp_tool_result": 2},
    },
    "anthropic__pydantic-ai__compaction-round-trip.json": {
        "format": "anthropic",
        "messages": 5,
        "roles": "suaua",
        "tool_use": 0,
        "tool_result": 0,
        "types": {"text": 6, "compaction": 1},
    },
}


def block_types(messages: list[Message]) -> Counter[str]:
    """Count every block's type, the blocks nested in tool results included."""
    counts: Counter[str] = Counter()

    def walk(block: dict[str, Any]) -> None:
        counts[block["type"]] += 1
        if block["type"] == "tool_result" and isinstance(block.get("content"), list):
            for inner in block["content"]:
                walk(inner)

    for message in messages:
        for block in message.content:
            walk(block)
    return counts


def tool_ids(messages: list[Message], kind: str) -> list[str]:
    key = "id" if kind == "tool_use" else "tool_use_id"
    return [b[key] for m in messages for b in m.content if b["type"] == kind]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def test_every_shipped_sample_has_an_expectation() -> None:
    shipped = {p.name for p in DATA.iterdir() if p.name != "SOURCE.md"}
    assert shipped == set(EXPECTED)
    assert len(shipped) >= 8 and len({e["format"] for e in EXPECTED.values()}) >= 5
    assert all(p.stat().st_size < 400_000 for p in DATA.iterdir())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_imports_as_checked_by_hand(name: str) -> None:
    expected = EXPECTED[name]
    parsed = load_transcript(DATA / name)
    messages = parsed.messages
    assert parsed.format == expected["format"]
    assert len(messages) == expected["messages"]
    roles = "".join(m.role[0] for m in messages)
    assert roles.startswith(expected["roles"])
    types = block_types(messages)
    assert dict(types) == expected["types"]
    uses, results = tool_ids(messages, "tool_use"), tool_ids(messages, "tool_result")
    assert (len(uses), len(results)) == (expected["tool_use"], expected["tool_result"])
    assert len(set(uses)) == len(uses) and set(results) <= set(uses)  # no result without its call
    position = {call: i for i, m in enumerate(messages) for call in tool_ids([m], "tool_use")}
    for i, message in enumerate(messages):  # every result answers a call made before it
        assert all(position[call] < i for call in tool_ids([message], "tool_result"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_run_at_16000_exits_0_under_budget(name: str, tmp_path: Path) -> None:
    out = tmp_path / "request.json"
    result = cli("run", DATA / name, "--budget", "16000", "--json", "--out", out)
    assert result.exit_code == 0, result.output + result.stderr
    report = json.loads(result.stdout)
    assert report["messages"] == EXPECTED[name]["messages"]
    assert report["budget"] == 16000
    assert 0 < report["tokens_after"] <= 16000
    body = json.loads(out.read_text("utf-8"))
    assert body["messages"]


def test_import_cli_reports_the_checked_counts(tmp_path: Path) -> None:
    for name, expected in EXPECTED.items():
        result = cli("import", DATA / name, "--store", tmp_path / f"{name}.db", "--json")
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        assert (report["format"], report["messages"]) == (expected["format"], expected["messages"])


# -- what each file showed of its reader --------------------------------------------------------


def test_codex_desktop_asks_recorded_only_as_events_are_restored_in_place() -> None:
    path = DATA / "codex__codemie-code__rollout-2026-05-11T13-28-45-desktop.jsonl"
    records = lines(path)
    asks = [r["payload"]["message"] for r in records if r["payload"].get("type") == "user_message"]
    assert len(asks) == 3
    assert not [
        r for r in records if r["payload"].get("type") == "message" and r["payload"]["role"] == "user"
    ]
    messages = load_transcript(path).messages
    users = [m for m in messages if m.role == "user" and m.content[0]["type"] == "text"]
    assert [m.content[0]["text"] for m in users] == asks
    assert all(m.meta["codex_event"] == "user_message" for m in users)
    # each ask ends the model's turn: the two answers around the second ask stay apart
    index = [messages.index(m) for m in users]
    assert index == [0, 10, 12]
    assert messages[9].content[-1]["text"].startswith("I analyzed")
    assert messages[11].content == ({"type": "text", "text": records[31]["payload"]["content"][0]["text"]},)


def test_codex_tui_events_repeating_asks_add_nothing_and_hosted_calls_stay_verbatim() -> None:
    path = DATA / "codex__codemie-code__rollout-2026-05-11T11-26-55-tui.jsonl"
    records = lines(path)
    parsed = load_transcript(path)
    asks = [m for m in parsed.messages if m.role == "user" and m.content[0]["type"] == "text"]
    assert [m.content[0]["text"] for m in asks][1:] == [
        "show tools",
        "let's update the defailt context compart to 90 in env var",
    ]
    assert not any("codex_event" in m.meta for m in parsed.messages)
    searches = [r["payload"] for r in records if r["payload"].get("type") == "web_search_call"]
    kept = [b for m in parsed.messages for b in m.content if b["type"] == "web_search_call"]
    assert kept == searches and len(kept) == 3
    assert parsed.problems == []


def test_gemini_recording_calls_and_results_match_the_file() -> None:
    path = DATA / "gemini-cli__codemie-code__session-2026-01-16T11-01-file-ops.json"
    document = json.loads(path.read_text("utf-8"))
    calls = [c for r in document["messages"] for c in r.get("toolCalls") or []]
    messages = load_transcript(path).messages
    uses = [b for m in messages for b in m.content if b["type"] == "tool_use"]
    results = [b for m in messages for b in m.content if b["type"] == "tool_result"]
    assert [(b["id"], b["name"], b["input"]) for b in uses] == [
        (c["id"], c["name"], c["args"]) for c in calls
    ]
    outputs = [c["result"][0]["functionResponse"]["response"]["output"] for c in calls]
    assert [b["content"] for b in results] == outputs
    assert not any(b["is_error"] for b in results)
    asks = [r["content"] for r in document["messages"] if r["type"] == "user"]
    assert [
        m.content[0]["text"] for m in messages if m.role == "user" and m.content[0]["type"] == "text"
    ] == asks
    assert {m.meta.get("model") for m in messages if m.role == "assistant"} == {"gemini-3-pro"}


def test_pi_first_format_keeps_the_calls_of_failed_turns_unanswered_as_written() -> None:
    path = DATA / "pi__pi-mono__large-session-head.jsonl"
    records = lines(path)
    answered = {
        r["message"]["toolCallId"] for r in records if r.get("message", {}).get("role") == "toolResult"
    }
    unanswered = [
        b["id"]
        for r in records
        if r.get("message", {}).get("role") == "assistant"
        for b in r["message"]["content"]
        if b["type"] == "toolCall" and b["id"] not in answered
    ]
    assert len(unanswered) == 17
    parsed = load_transcript(path)
    uses = set(tool_ids(parsed.messages, "tool_use"))
    assert set(unanswered) <= uses and uses - set(tool_ids(parsed.messages, "tool_result")) == set(unanswered)
    [note] = parsed.problems  # thinking_level_change and model_change are bookkeeping: no note
    assert "1 message with no content left out" in note and "line 3" in note


def test_claude_code_bookkeeping_events_are_skipped_quietly_and_thinking_kept() -> None:
    path = DATA / "claude-code__codemie-code__session-9eda1058.jsonl"
    parsed = load_transcript(path)
    assert parsed.problems == []
    thinking = [b for m in parsed.messages for b in m.content if b["type"] == "thinking"]
    raw = [
        b
        for r in lines(path)
        if r.get("type") == "assistant"
        for b in r["message"]["content"]
        if b["type"] == "thinking"
    ]
    assert thinking == raw and all(b["signature"] for b in thinking)
    assert parsed.messages[3].content == (
        {"type": "text", "text": "[Request interrupted by user for tool use]"},
    )


@pytest.mark.parametrize(
    "name",
    [
        "anthropic__pydantic-ai__web-fetch-tool.json",
        "anthropic__pydantic-ai__mcp-servers.json",
        "anthropic__pydantic-ai__compaction-round-trip.json",
        "anthropic__pydantic-ai__tool-with-thinking.json",
    ],
)
def test_anthropic_request_log_blocks_are_kept_verbatim(name: str) -> None:
    document = json.loads((DATA / name).read_text("utf-8"))
    parsed = load_transcript(DATA / name)
    source = [b for m in document["messages"] for b in m["content"]]
    kept = [b for m in parsed.messages if m.role != "system" for b in m.content]
    assert kept == source
    assert parsed.unknown_blocks == {
        t: n
        for t, n in EXPECTED[name]["types"].items()
        if t not in ("text", "thinking", "tool_use", "tool_result")
    }


# -- properties of the reader rules ------------------------------------------------------------


def _record(kind: str, payload: dict[str, Any]) -> str:
    return json.dumps({"timestamp": "2026-05-11T10:00:00Z", "type": kind, "payload": payload})


def _user_item(text: str) -> str:
    return _record(
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )


def _event(text: str) -> str:
    return _record("event_msg", {"type": "user_message", "message": text, "images": [], "local_images": []})


def _answer(text: str) -> str:
    return _record(
        "response_item",
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]},
    )


asks_strategy = st.lists(
    st.tuples(
        st.text(
            st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=20
        ).filter(lambda s: s.strip() != ""),
        st.sampled_from(["item", "event", "item+event", "event+item"]),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(asks_strategy)
def test_codex_each_ask_is_imported_once_however_it_was_recorded(asks: list[tuple[str, str]]) -> None:
    rows = [_record("session_meta", {"id": "s"})]
    for number, (text, how) in enumerate(asks):
        for part in how.split("+"):
            rows.append(_user_item(text) if part == "item" else _event(text))
        rows.append(_answer(f"answer {number}"))
    parsed = parse_text("\n".join(rows) + "\n", "codex", name="rollout.jsonl")
    users = [m for m in parsed.messages if m.role == "user"]
    assert [m.content[0]["text"] for m in users] == [text for text, _ in asks]
    assert [m.role for m in parsed.messages] == ["user", "assistant"] * len(asks)
    restored = [m for m in users if m.meta.get("codex_event") == "user_message"]
    assert len(restored) == sum(1 for _, how in asks if how == "event")


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(["future_record", "ghost_snapshot", "web_search_call", "image_generation_call"]),
        max_size=6,
    )
)
def test_codex_unknown_kinds_are_kept_or_named_never_dropped_silently(kinds: list[str]) -> None:
    rows = [_user_item("go")]
    for kind in kinds:
        if kind == "future_record":
            rows.append(_record("future_record", {"x": 1}))
        else:
            rows.append(_record("response_item", {"type": kind, "id": f"{kind}-1", "status": "completed"}))
    rows.append(_answer("done"))
    parsed = parse_text("\n".join(rows) + "\n", "codex", name="rollout.jsonl")
    kept = Counter(b["type"] for m in parsed.messages for b in m.content if b["type"].endswith("_call"))
    calls = Counter(k for k in kinds if k.endswith("_call"))
    assert kept == calls
    named = " ".join(parsed.problems)
    for kind in set(kinds) - set(calls):
        count = kinds.count(kind)
        assert f"{count} {'record' if kind == 'future_record' else 'response_item'} {kind!r}" in named
    if set(kinds) <= set(calls):
        assert parsed.problems == []


call_strategy = st.lists(
    st.tuples(st.sampled_from(["success", "error", "cancelled"]), st.booleans()), min_size=0, max_size=5
)


@settings(max_examples=150, deadline=None)
@given(st.lists(call_strategy, min_size=1, max_size=5))
def test_gemini_recording_answers_every_call_once_after_its_turn(turns: list[list[tuple[str, bool]]]) -> None:
    records: list[dict[str, Any]] = []
    for t, calls in enumerate(turns):
        records.append(
            {"id": f"u{t}", "type": "user", "content": f"ask {t}", "timestamp": "2026-01-01T00:00:00Z"}
        )
        tool_calls = []
        for c, (status, has_result) in enumerate(calls):
            call_id = f"read_file-{t}-{c}"
            result = (
                [
                    {
                        "functionResponse": {
                            "id": call_id,
                            "name": "read_file",
                            "response": {"output": f"out {t} {c}"},
                        }
                    }
                ]
                if has_result
                else None
            )
            tool_calls.append(
                {
                    "id": call_id,
                    "name": "read_file",
                    "args": {"path": "a"},
                    "status": status,
                    "result": result,
                }
            )
        records.append(
            {"id": f"g{t}", "type": "gemini", "content": "", "toolCalls": tool_calls, "thoughts": []}
        )
        records.append({"id": f"i{t}", "type": "info", "content": "notice"})
    document = {"sessionId": "s", "projectHash": "h", "messages": records}
    parsed = parse_text(json.dumps(document), "gemini-cli", name="session.json")
    uses = tool_ids(parsed.messages, "tool_use")
    results = [b for m in parsed.messages for b in m.content if b["type"] == "tool_result"]
    assert uses == [f"read_file-{t}-{c}" for t, calls in enumerate(turns) for c in range(len(calls))]
    assert [b["tool_use_id"] for b in results] == uses
    flat = [call for calls in turns for call in calls]
    assert [b["is_error"] for b in results] == [status != "success" or not has for status, has in flat]
    assert sum(len(m.meta.get("gemini_notices", [])) for m in parsed.messages) == len(turns)
    empty = sum(1 for calls in turns if not calls)  # a gemini record with no text and no call
    if empty:
        [note] = parsed.problems
        assert note.startswith(
            f"session.json: {empty} message{'s' if empty > 1 else ''} with no content left out"
        )
    else:
        assert parsed.problems == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["stats", "heartbeat", "future_event"]), min_size=1, max_size=6))
def test_gemini_stream_names_event_types_it_skips(kinds: list[str]) -> None:
    rows = [{"type": "init", "timestamp": "t", "session_id": "s", "model": "gemini-3-pro"}]
    rows.append({"type": "message", "timestamp": "t", "role": "user", "content": "hi"})
    rows += [{"type": kind, "timestamp": "t"} for kind in kinds]
    rows.append({"type": "message", "timestamp": "t", "role": "assistant", "content": "hello", "delta": True})
    parsed = parse_text("\n".join(json.dumps(r) for r in rows) + "\n", "gemini-cli", name="stream.jsonl")
    assert [m.role for m in parsed.messages] == ["user", "assistant"]
    assert len(parsed.problems) == len(set(kinds))
    for kind in set(kinds):
        first = 3 + kinds.index(kind)
        assert any(
            p.startswith(f"stream.jsonl:{first}: {kinds.count(kind)} event(s) of type {kind!r}")
            for p in parsed.problems
        )


def test_a_gemini_recording_on_one_line_is_detected_as_gemini_not_claude_code(tmp_path: Path) -> None:
    source = DATA / "gemini-cli__codemie-code__session-2026-01-16T11-01-file-ops.json"
    compact = tmp_path / "session.json"
    compact.write_text(json.dumps(json.loads(source.read_text("utf-8"))), "utf-8")  # one line
    assert detect_format(compact) == detect_format(source) == "gemini-cli"
    assert [m.content for m in load_transcript(compact).messages] == [
        m.content for m in load_transcript(source).messages
    ]
