"""Transcript parsers: every real transcript in examples/, detection, errors, pairing properties."""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import Message
from compaction.errors import InvalidTranscript, UnknownFormat
from compaction.formats import FORMATS, ParsedTranscript, detect_format, load_transcript, parse_messages

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CASES = ROOT / "tests" / "data" / "cases"

PI = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"
TARS = EXAMPLES / "agent-tars__browser__event-stream-with-many-images.json"
SWE = EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"
OPENHANDS = EXAMPLES / "openhands__multi-swe-bench__output.jsonl"
AIDER = EXAMPLES / "aider__chat-history__slice.md"
CODEX = EXAMPLES / "codex" / "claude-code-log__codex-rollout.jsonl"
CC = EXAMPLES / "claude-code"
MALFORMED = CASES / "malformed-line.jsonl"

EXPECTED_FORMAT = {
    PI.name: "pi",
    TARS.name: "agent-tars",
    SWE.name: "swe-agent",
    OPENHANDS.name: "openhands",
    AIDER.name: "aider",
    CODEX.name: "codex",
    "claude-code-log__edge_cases.jsonl": "claude-code",
    "claude-code-log__representative_messages.jsonl": "claude-code",
    "claude-code-log__session_b.jsonl": "claude-code",
    "claude-code-log__todowrite_examples.jsonl": "claude-code",
    "claude-code-transcripts__sample_session.jsonl": "claude-code",
}
# Files with malformed lines on purpose; they are parsed leniently in the corpus-wide tests.
DELIBERATELY_BROKEN = {"claude-code-log__edge_cases.jsonl"}


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md")


# -- helpers -------------------------------------------------------------------------------------


def blocks(messages: list[Message], kind: str) -> list[dict]:
    return [b for m in messages for b in m.content if b["type"] == kind]


def roles(messages: list[Message]) -> str:
    return "".join(m.role[0] for m in messages)


def pairing(messages: list[Message]) -> dict[str, list[str]]:
    """Check tool pairing; return unanswered use ids, orphan results and repeated answers."""
    use_at: dict[str, int] = {}
    answers: Counter[str] = Counter()
    orphans: list[str] = []
    duplicate_ids: list[str] = []
    for index, message in enumerate(messages):
        for block in message.content:
            if block["type"] == "tool_use":
                if block["id"] in use_at:
                    duplicate_ids.append(block["id"])
                use_at[block["id"]] = index
            elif block["type"] == "tool_result":
                tool_id = block["tool_use_id"]
                if tool_id not in use_at or use_at[tool_id] >= index:
                    orphans.append(tool_id)
                answers[tool_id] += 1
    return {
        "unanswered": [i for i in use_at if answers[i] == 0],
        "orphans": orphans,
        "answered_twice": [i for i, n in answers.items() if n > 1],
        "duplicate_ids": duplicate_ids,
    }


def assert_paired(messages: list[Message], unanswered: set[str] = frozenset()) -> None:
    report = pairing(messages)
    assert report["orphans"] == []
    assert report["answered_twice"] == []
    assert report["duplicate_ids"] == []
    assert set(report["unanswered"]) == set(unanswered)


def jpeg_size(data: bytes) -> tuple[int, int]:
    """Return (width, height) from a JPEG's SOF marker."""
    assert data[:2] == b"\xff\xd8"
    index = 2
    while index < len(data):
        assert data[index] == 0xFF
        marker = data[index + 1]
        length = int.from_bytes(data[index + 2 : index + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height = int.from_bytes(data[index + 5 : index + 7], "big")
            width = int.from_bytes(data[index + 7 : index + 9], "big")
            return width, height
        index += 2 + length
    raise AssertionError("no SOF marker")


def raw_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


# -- the whole corpus ------------------------------------------------------------------------------


def test_every_example_has_an_expectation() -> None:
    assert {p.name for p in example_files()} == set(EXPECTED_FORMAT)


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_detection_on_each_example(path: Path) -> None:
    assert detect_format(path) == EXPECTED_FORMAT[path.name]
    head = path.read_bytes()[: 64 * 1024]
    assert detect_format(path, head=head) == EXPECTED_FORMAT[path.name]


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_each_example_parses_with_unique_ids_and_ordered_pairs(path: Path) -> None:
    lenient = path.name in DELIBERATELY_BROKEN
    parsed = load_transcript(path, lenient=lenient)
    assert isinstance(parsed, ParsedTranscript)
    assert parsed.format == EXPECTED_FORMAT[path.name]
    assert parsed.messages
    assert all(m.seq is None and m.content for m in parsed.messages)
    report = pairing(parsed.messages)
    assert report["orphans"] == [] and report["answered_twice"] == [] and report["duplicate_ids"] == []
    if not lenient:
        empty = EMPTY_MESSAGES.get(path.name)
        assert parsed.skipped == 0
        if path.name in SKIPPED_KINDS:  # a record kind the reader does not know, named loudly
            [note] = parsed.problems
            assert note.startswith(f"{path}:") and SKIPPED_KINDS[path.name] in note
        elif empty is None:
            assert parsed.problems == []
        else:  # messages with no content are left out, and one note says how many
            [note] = parsed.problems
            assert note.startswith(f"{path}: {empty} messages with no content left out")


#: Examples holding a record kind their reader skips, which the import names: what it says.
SKIPPED_KINDS = {"claude-code-log__codex-rollout.jsonl": "1 record 'future_synthetic_record'"}

#: Examples holding messages with no content (left out on import, with a note): how many.
EMPTY_MESSAGES = {"pi__pi-mono__before-compaction.jsonl": 13, "openhands__multi-swe-bench__output.jsonl": 2}


@pytest.mark.parametrize("path", sorted(CASES.glob("*.json")), ids=lambda p: p.name)
def test_failure_cases_are_anthropic_and_keep_their_blocks(path: Path) -> None:
    source = json.loads(path.read_text("utf-8"))
    assert detect_format(path) == "anthropic"
    parsed = load_transcript(path)
    expected = [
        b for m in source["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])
    ]
    got = [b for m in parsed.messages for b in m.content]
    if all(isinstance(m["content"], list) for m in source["messages"]):
        assert got == expected  # verbatim, unknown types included
    assert_paired(parsed.messages)


# -- pi -------------------------------------------------------------------------------------------


def test_pi_counts_match_the_corpus_readme() -> None:
    parsed = load_transcript(PI)
    messages = parsed.messages
    assert len(blocks(messages, "tool_use")) == 454
    assert len(blocks(messages, "thinking")) == 49
    assert len(blocks(messages, "tool_result")) == 448
    # 990 source messages: empty aborted assistant messages carry nothing and are dropped;
    # runs of toolResult messages (answers to one fan-out) merge into one user message.
    entries = [e["message"] for e in raw_jsonl(PI) if e["type"] == "message"]
    assert len(entries) == 990
    kept = [m for m in entries if m["role"] != "assistant" or m["content"]]
    runs = sum(
        1
        for i, m in enumerate(kept)
        if m["role"] == "toolResult" and i > 0 and kept[i - 1]["role"] == "toolResult"
    )
    assert len(messages) == len(kept) - runs == 962
    # the six calls without results are the ones pi never answered (aborted or cut by compaction)
    assert_paired(
        messages,
        unanswered={
            "toolu_0134E2F4jLV9HVUFhunmam8N",
            "toolu_01XfdvT2StjnLNw7MpkvVvJP",
            "toolu_01GBRsfbomRe6sBo32xf6hPK",
            "toolu_01G37VFJMMftUXQaqu3pHizc",
            "toolu_01571BXn2nSXvrR7sxVHAXXE",
            "toolu_01F2Xbizd52r1AuErXgFpR6W",
        },
    )
    errors = sum(1 for m in entries if m["role"] == "toolResult" and m.get("isError"))
    assert sum(1 for b in blocks(messages, "tool_result") if b["is_error"]) == errors > 0


def test_pi_keeps_every_message_and_compaction_summaries_as_meta() -> None:
    messages = load_transcript(PI).messages
    compactions = [m.meta["pi_compaction"] for m in messages if "pi_compaction" in m.meta]
    assert [c["tokensBefore"] for c in compactions] == [175004, 185014]
    assert all(c["summary"].startswith("# Context Checkpoint") for c in compactions)
    assert not any("Context Checkpoint" in m.text() for m in messages)
    # the first user request survives although pi's compactions dropped it from its context
    assert messages[0].role == "user" and messages[0].text().startswith("alright, read @packages")
    bash = [m for m in messages if m.meta.get("kind") == "bash_execution"]
    assert len(bash) == 3 and bash[0].text().startswith("Ran `ls`\n```\nAGENTS.md")
    assert messages[1].meta["model"] == "claude-opus-4-5" and "timestamp" in messages[1].meta
    thinking = blocks(messages, "thinking")[0]
    assert set(thinking) == {"type", "thinking", "signature"}


def test_pi_tree_follows_the_active_branch(tmp_path: Path) -> None:
    def entry(id_: str, parent: str | None, role: str, text: str) -> dict:
        return {
            "type": "message",
            "id": id_,
            "parentId": parent,
            "timestamp": "2025-01-01T00:00:00Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}]},
        }

    lines = [
        {"type": "session", "version": 3, "id": "s", "cwd": "/w", "timestamp": "2025-01-01T00:00:00Z"},
        entry("a", None, "user", "first question"),
        entry("b", "a", "assistant", "first answer"),
        entry("c", "b", "user", "abandoned branch"),
        entry("d", "c", "assistant", "abandoned answer"),
        {"type": "branch_summary", "id": "e", "parentId": "b", "summary": "we tried X", "fromId": "d"},
        {"type": "compaction", "id": "f", "parentId": "e", "summary": "S", "firstKeptEntryId": "b"},
        entry("g", "f", "user", "second question"),
    ]
    path = tmp_path / "tree.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", "utf-8")
    assert detect_format(path) == "pi"
    messages = load_transcript(path).messages
    assert [m.source_id for m in messages] == ["a", "b", "e", "g"]
    assert "we tried X" in messages[2].text()
    assert messages[3].meta["pi_compaction"] == {"summary": "S", "firstKeptEntryId": "b"}


# -- Agent TARS -------------------------------------------------------------------------------------


def test_agent_tars_images_and_reused_tool_ids() -> None:
    messages = load_transcript(TARS).messages
    images = blocks(messages, "image")
    assert len(images) == 7
    for image in images:
        assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/jpeg"
        assert jpeg_size(base64.b64decode(image["source"]["data"])) == (2560, 1600)
    uses = blocks(messages, "tool_use")
    assert len(uses) == 6
    base = "call_1747633091730_6m2magifs"
    assert [u["id"] for u in uses] == [base] + [f"{base}_{n}" for n in range(2, 7)]
    assert_paired(messages)
    # user, screenshot, then six rounds of (assistant call, tool result, screenshot)
    assert roles(messages) == "uu" + "auu" * 6
    for index, message in enumerate(messages):
        if message.has_tool_use:
            result = messages[index + 1].content[0]
            assert result["tool_use_id"] == message.content[-1]["id"]
    assert "click(point=" in messages[3].content[0]["content"]


# -- SWE-agent ----------------------------------------------------------------------------------------


def test_swe_agent_history() -> None:
    messages = load_transcript(SWE).messages
    assert len(messages) == 28
    assert roles(messages) == "su" + "au" * 13
    uses = blocks(messages, "tool_use")
    assert len(uses) == 13
    assert_paired(messages)
    reused = "call_5iDdbOYybq7L19vqXmR0DPaU"
    assert [u["id"] for u in uses if u["id"].startswith(reused)] == [reused] + [
        f"{reused}_{n}" for n in (2, 3, 4)
    ]
    for index in range(2, 28, 2):  # each result answers the call just before it
        assert messages[index + 1].content[0]["tool_use_id"] == messages[index].content[-1]["id"]
    assert messages[0].meta["message_type"] == "system_prompt"
    assert uses[-1]["name"] == "submit" and uses[-1]["input"] == {}


# -- OpenHands ----------------------------------------------------------------------------------------


def test_openhands_runs_concatenate_with_pairs() -> None:
    records = raw_jsonl(OPENHANDS)
    messages = load_transcript(OPENHANDS).messages
    responses = {
        e["tool_call_metadata"]["model_response"]["id"]
        for r in records
        for e in r["history"]
        if "action" in e and e.get("tool_call_metadata")
    }
    observations = sum(
        1 for r in records for e in r["history"] if "observation" in e and e.get("tool_call_metadata")
    )
    assert len(blocks(messages, "tool_use")) == len(responses) == 105
    assert len(blocks(messages, "tool_result")) == observations == 103
    starts = [m for m in messages if "instance_id" in m.meta]
    assert [m.meta["instance_id"] for m in starts] == [r["instance_id"] for r in records]
    assert all(m.role == "system" for m in starts)
    assert sum(1 for m in messages if m.role == "system") == 3
    # the two runs that ended with `finish` leave that call unanswered: the source has no answer
    finish_ids = {b["id"] for b in blocks(messages, "tool_use") if b["name"] == "finish"}
    assert len(finish_ids) == 2
    assert_paired(messages, unanswered=finish_ids)
    # toolu_01 is used in all three runs; later runs get suffixed ids
    assert {b["id"] for b in blocks(messages, "tool_use") if b["id"].startswith("toolu_01_")} >= {
        "toolu_01_2",
        "toolu_01_3",
    }
    errors = [m for m in messages if m.role == "user" and "Parameter 'command' is expected" in m.text()]
    assert len(errors) == 2


# -- aider ------------------------------------------------------------------------------------------


def test_aider_sessions_users_and_output() -> None:
    lines = AIDER.read_text("utf-8").split("\n")
    messages = load_transcript(AIDER).messages
    typed = [m for m in messages if m.role == "user" and "kind" not in m.meta]
    output = [m for m in messages if m.meta.get("kind") == "tool_output"]
    assistant = [m for m in messages if m.role == "assistant"]
    user_lines = sum(1 for line in lines if line.startswith("#### "))
    assert user_lines == 747  # the corpus README's "747 user messages" counts lines
    runs = sum(
        1 for i, line in enumerate(lines) if line.startswith("#### ") and not lines[i - 1].startswith("#### ")
    )
    assert len(typed) == runs == 531
    typed_lines = [line for m in typed for line in m.text().split("\n") if line.strip()]
    assert len(typed_lines) == sum(1 for line in lines if line.startswith("#### ") and line[5:].strip())
    assert len(output) > 0 and len(assistant) > 0
    assert sum(1 for line in lines if line.startswith("# aider chat started at ")) == 316
    assert all(not m.text().startswith(("#### ", "-*-")) for m in messages)
    assert typed[1].text() == "Use the Spinner instead of the inlined custom spinner"
    after = messages[messages.index(typed[1]) + 1]
    assert after.role == "assistant" and after.text().startswith("Certainly! I'll modify the `run_install`")
    assert "<<<<<<< SEARCH" in after.text()
    assert any(m.meta.get("session_started") == "2024-08-05 19:33:32" for m in messages)


# -- Claude Code ------------------------------------------------------------------------------------


def test_claude_code_representative_session() -> None:
    messages = load_transcript(CC / "claude-code-log__representative_messages.jsonl").messages
    assert roles(messages) == "uauauauauau"
    assert messages[0].source_id == "msg_001" and messages[1].meta["model"] == "claude-3-sonnet-20240229"
    assert_paired(messages)


def test_claude_code_sample_and_todo_sessions() -> None:
    sample = load_transcript(CC / "claude-code-transcripts__sample_session.jsonl").messages
    assert roles(sample) == "uauauua"  # the leading summary event is not a message
    assert sample[0].content == ({"type": "text", "text": "Create a hello world function"},)
    assert_paired(sample)
    todo = load_transcript(CC / "claude-code-log__todowrite_examples.jsonl").messages
    assert len(todo) == 11 and len(blocks(todo, "tool_use")) == 3
    assert_paired(todo)


def test_claude_code_edge_cases_strict_and_lenient() -> None:
    path = CC / "claude-code-log__edge_cases.jsonl"
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    assert caught.value.line == 10 and str(path) in str(caught.value)
    assert "no 'content'" in str(caught.value)
    parsed = load_transcript(path, lenient=True)
    assert parsed.skipped == 7
    assert [int(p.split(":")[1]) for p in parsed.problems] == [10, 11, 13, 14, 15, 16, 17, 18]
    assert parsed.problems[6].endswith(  # a note, not a skipped line: the chain broke, nothing is cut
        ":17: parentUuid 'assistant_003' is in no event of the file (line 16 was skipped); "
        "the events after it are kept in file order"
    )
    assert all(p.startswith(f"{path}:") for p in parsed.problems)
    # line 12 repeats uuid edge_011 of the malformed line 11, and is the one kept
    assert [m.source_id for m in parsed.messages].count("edge_011") == 1
    # tool_edge_002's only answers are the malformed lines 10 and 18; line 17's call has none here
    assert_paired(parsed.messages, unanswered={"tool_edge_002", "toolu_todowrite_002"})
    assert blocks(parsed.messages, "tool_result")[0]["is_error"] is True


def test_claude_code_joins_split_assistant_lines(tmp_path: Path) -> None:
    def event(kind: str, uuid: str, message: dict, **extra: object) -> str:
        base = {"parentUuid": None, "isSidechain": False, "sessionId": "s1", "type": kind, "uuid": uuid}
        return json.dumps({**base, "timestamp": "2025-07-01T10:00:00Z", "message": message, **extra})

    def part(block: dict) -> dict:
        return {
            "id": "msg_01ABC",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4",
            "content": [block],
        }

    lines = [
        json.dumps({"type": "file-history-snapshot", "messageId": "x", "snapshot": {}}),
        event("user", "u1", {"role": "user", "content": "look at both files"}),
        event("assistant", "a1", part({"type": "thinking", "thinking": "two reads", "signature": "sig"})),
        event("assistant", "a2", part({"type": "text", "text": "Reading both."})),
        event(
            "assistant",
            "a3",
            part({"type": "tool_use", "id": "toolu_A", "name": "Read", "input": {"p": "a"}}),
        ),
        event(
            "assistant",
            "a4",
            part({"type": "tool_use", "id": "toolu_B", "name": "Read", "input": {"p": "b"}}),
        ),
        event(
            "user",
            "u2",
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "A"}]},
        ),
        event(
            "user",
            "u3",
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_B", "content": "B"}]},
        ),
        event("user", "side", {"role": "user", "content": "sub-agent prompt"}, isSidechain=True),
        event(
            "user",
            "u2",
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "A"}]},
        ),
        json.dumps(
            {
                "type": "system",
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "uuid": "s",
            }
        ),
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    assert detect_format(path) == "claude-code"
    parsed = load_transcript(path)
    assert parsed.skipped == 0
    messages = parsed.messages
    assert roles(messages) == "uau"
    joined = messages[1]
    assert [b["type"] for b in joined.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert joined.source_id == "a1" and joined.meta["source_ids"] == ["a1", "a2", "a3", "a4"]
    assert [b["tool_use_id"] for b in messages[2].content] == ["toolu_A", "toolu_B"]
    assert_paired(messages)


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_codex_encrypted_reasoning_is_neither_sent_nor_counted(fmt: str) -> None:
    """OpenAI's ciphertext reaches no request: Anthropic cannot decrypt it, Chat Completions has no field for it."""
    from compaction import Message, Recipe, Store, compile_request
    from compaction.compile import raw_history_tokens

    store = Store(":memory:")
    store.append(load_transcript(CODEX).messages)
    alone = {"type": "encrypted_reasoning", "provider": "openai", "encrypted_content": "QUJD" * 200}
    store.append(
        [
            Message("user", ({"type": "text", "text": "think about it"},)),
            Message("assistant", (alone,)),
            Message("user", ({"type": "text", "text": "go on"},)),
        ]
    )
    recipe = Recipe(budget_tokens=100_000, output_format=fmt)  # type: ignore[arg-type]
    compiled = compile_request(store, recipe)
    assert b"SYNTHETIC_ENCRYPTED" not in compiled.request.payload and b"QUJDQUJD" not in compiled.request.payload
    assert sum(kind == "encrypted_reasoning" for _index, kind in compiled.request.dropped) == 2
    # a turn of nothing else ships as a loud line, counted, never as an empty turn
    assert b"[reasoning this request format cannot carry was left out of this turn]" in compiled.request.payload
    assert compiled.planned_tokens == compiled.tokens == raw_history_tokens(store, recipe)


# -- Codex ----------------------------------------------------------------------------------------


def test_codex_rollout() -> None:
    messages = load_transcript(CODEX).messages
    assert roles(messages) == "uauauaua"
    encrypted = blocks(messages, "encrypted_reasoning")
    assert encrypted == [
        {
            "type": "encrypted_reasoning",
            "provider": "openai",
            "encrypted_content": "SYNTHETIC_ENCRYPTED_CONTENT_MUST_NOT_RENDER",
        }
    ]
    for message in messages:  # the encrypted reasoning is never text anywhere
        assert "SYNTHETIC_ENCRYPTED" not in message.text()
        for block in message.content:
            if block["type"] != "encrypted_reasoning":
                assert "SYNTHETIC_ENCRYPTED" not in json.dumps(block)
    assert blocks(messages, "thinking")[0]["thinking"] == "I will inspect the synthetic directory."
    uses = blocks(messages, "tool_use")
    assert [u["name"] for u in uses] == ["exec_command", "apply_patch", "mcp__synthetic__lookup"]
    assert uses[0]["input"] == {"cmd": "find . -maxdepth 1 -type f"}
    assert uses[1]["input"]["input"].startswith("*** Begin Patch")
    assert blocks(messages, "tool_result")[1]["content"] == [{"type": "text", "text": "Done!"}]
    assert_paired(messages)
    # the event_msg stream duplicates the items: each text appears once
    texts = [m.text() for m in messages if m.text()]
    assert texts == ["List the synthetic files.", "The synthetic files are alpha.txt and beta.txt."]
    assert messages[1].meta["model"] == "synthetic-model"


# -- malformed lines, overrides, unknown formats -----------------------------------------------------


def test_malformed_line_strict_names_the_line() -> None:
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(MALFORMED)
    error = caught.value
    assert error.line == 3 and error.path == str(MALFORMED)
    assert str(error).startswith(f"{MALFORMED}:3: invalid JSON: Invalid \\escape")
    assert "lenient=True" in str(error)


def test_malformed_line_lenient_skips_it() -> None:
    parsed = load_transcript(MALFORMED, lenient=True)
    assert parsed.format == "openai"
    assert [m.text() for m in parsed.messages] == ["hello", "hi", "still here"]
    assert parsed.skipped == 1
    assert len(parsed.problems) == 1 and parsed.problems[0].startswith(f"{MALFORMED}:3: invalid JSON")


def test_format_override(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    url = "https://example.com/cat.png"
    path.write_text(
        json.dumps([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]), "utf-8"
    )
    assert detect_format(path) == "openai"
    assert load_transcript(path).messages[0].content == (
        {"type": "image", "source": {"type": "url", "url": url}},
    )
    forced = load_transcript(path, format="anthropic")
    assert forced.format == "anthropic"
    assert forced.messages[0].content[0]["type"] == "image_url"  # an unknown block, kept verbatim


def test_unknown_formats_are_refused_clearly(tmp_path: Path) -> None:
    png = tmp_path / "picture.jsonl"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    text = tmp_path / "notes.json"
    text.write_text("just some words\nabout nothing in particular\n", "utf-8")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", "utf-8")
    for path in (png, text, empty):
        with pytest.raises(UnknownFormat) as caught:
            load_transcript(path)
        assert str(path) in str(caught.value)
        assert all(name in str(caught.value) for name in FORMATS)
        with pytest.raises(UnknownFormat):
            detect_format(path)
    with pytest.raises(UnknownFormat, match="unknown format 'word'"):
        load_transcript(MALFORMED, format="word")
    with pytest.raises(InvalidTranscript, match="not UTF-8"):
        load_transcript(png, format="openai")


def test_broken_json_document_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text(
        '[\n  {"role": "user", "content": "hi"},\n  {"role": "assistant", "content": \n]\n', "utf-8"
    )
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path, format="openai", lenient=True)
    assert caught.value.line == 4


# -- OpenAI and Anthropic mappings -------------------------------------------------------------------


def test_openai_mapping_details() -> None:
    data = [
        {"role": "developer", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"x": 1}'}},
                {"id": "c2", "type": "function", "function": {"name": "look", "arguments": "{not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]},
        {"role": "assistant", "content": None, "function_call": {"name": "legacy", "arguments": "{}"}},
        {"role": "function", "name": "legacy", "content": "done"},
        {"role": "assistant", "content": "ok"},
    ]
    messages = parse_messages(data)
    assert roles(messages) == "suauaua"
    assert messages[1].content[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert [b["input"] for b in messages[2].content] == [{"x": 1}, {"_raw_arguments": "{not json"}]
    assert [b["tool_use_id"] for b in messages[3].content] == ["c1", "c2"]  # one message for the fan-out
    assert messages[3].content[1]["content"] == [{"type": "text", "text": "two"}]
    assert messages[5].content[0]["tool_use_id"] == messages[4].content[0]["id"] == "function_call_1"
    assert_paired(messages)


def test_anthropic_system_and_string_content(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    body = {
        "model": "claude",
        "system": [{"type": "text", "text": "You are terse."}],
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "text", "text": "yo"},
                ],
            },
        ],
    }
    path.write_text(json.dumps(body), "utf-8")
    assert detect_format(path) == "anthropic"
    messages = load_transcript(path).messages
    assert roles(messages) == "sua"
    assert messages[0].text() == "You are terse." and messages[1].content == ({"type": "text", "text": "hi"},)
    assert messages[2].content == tuple(body["messages"][1]["content"])


def test_parse_messages_errors_name_the_message() -> None:
    with pytest.raises(InvalidTranscript, match=r"messages\[1\]: unknown role 'robot'"):
        parse_messages([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])
    with pytest.raises(InvalidTranscript, match=r"messages\[0\]: a tool message needs"):
        parse_messages([{"role": "tool", "content": "x"}])
    with pytest.raises(UnknownFormat):
        parse_messages([], format="pi")


def test_reused_ids_in_a_parallel_round_pair_first_in_first_out() -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
    data = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x", **call}, {"id": "x", **call}]},
        {"role": "tool", "tool_call_id": "x", "content": "first"},
        {"role": "tool", "tool_call_id": "x", "content": "second"},
    ]
    messages = parse_messages(data)
    assert [b["id"] for b in messages[0].content] == ["x", "x_2"]
    assert [(b["tool_use_id"], b["content"]) for b in messages[1].content] == [
        ("x", "first"),
        ("x_2", "second"),
    ]


# -- property: random OpenAI conversations ------------------------------------------------------------

_text = st.text(min_size=1, max_size=20)
_image_part = st.sampled_from(
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "low"}},
    ]
)
_content = st.one_of(
    _text,
    st.lists(
        st.one_of(_text.map(lambda t: {"type": "text", "text": t}), _image_part), min_size=1, max_size=3
    ),
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict]:
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(_text)})
    pool = [f"call_{n}" for n in range(4)]  # ids get reused across rounds, as real agents do
    for _ in range(draw(st.integers(1, 6))):
        messages.append({"role": "user", "content": draw(_content)})
        calls = draw(st.lists(st.sampled_from(pool), unique=True, max_size=3))
        assistant: dict = {
            "role": "assistant",
            "content": draw(st.one_of(st.none(), _text)) if calls else draw(_text),
        }
        if calls:
            assistant["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": "tool",
                        "arguments": draw(st.sampled_from(["{}", '{"a": 1}', "oops"])),
                    },
                }
                for call_id in calls
            ]
        messages.append(assistant)
        answers = draw(st.permutations(calls))
        for call_id in answers:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": draw(_content)})
    return messages


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_random_openai_conversations_keep_counts_and_pairs(data: list[dict]) -> None:
    messages = parse_messages(data)
    calls = sum(len(m.get("tool_calls", [])) for m in data)
    tool_messages = [m for m in data if m["role"] == "tool"]
    tool_runs = sum(1 for i, m in enumerate(data) if m["role"] == "tool" and data[i - 1]["role"] != "tool")
    assert len(messages) == len(data) - len(tool_messages) + tool_runs
    assert len(blocks(messages, "tool_use")) == calls
    assert len(blocks(messages, "tool_result")) == len(tool_messages)
    assert_paired(messages)
    # each round's results answer that round's calls
    for index, message in enumerate(messages):
        if message.has_tool_use:
            uses = {b["id"] for b in message.content if b["type"] == "tool_use"}
            assert {b["tool_use_id"] for b in messages[index + 1].content} == uses
    parts = [p for m in data for p in (m["content"] if isinstance(m.get("content"), list) else [])]
    images = sum(1 for p in parts if p["type"] == "image_url")
    nested = [
        b
        for m in messages
        for r in blocks([m], "tool_result")
        if isinstance(r["content"], list)
        for b in r["content"]
    ]
    top = blocks(messages, "image")
    assert len(top) + sum(1 for b in nested if b["type"] == "image") == images
