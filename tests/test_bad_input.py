"""Bad input: every user error is one clear line naming the input, and nothing stored is lost.

Each attack runs through the command line (exit code 1 for a library error, 2 for a usage
error, no traceback) and, where there is one, the Python API (a typed error derived from
``CompactionError``).  Where a store already held messages, its rows are compared before and
after.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_runner import cli
from click.testing import Result

from compaction import (
    CompactionError,
    ImageError,
    InvalidMessage,
    InvalidTranscript,
    OverBudget,
    Recipe,
    RecipeError,
    Store,
    StoreError,
    UnknownFormat,
    compile_request,
    load_transcript,
)
from compaction.blocks import Message
from compaction.recipe import load_recipe

GOOD = [
    {"role": "user", "content": "hello there"},
    {"role": "assistant", "content": "hi, how can I help"},
    {"role": "user", "content": "list the files"},
    {"role": "assistant", "content": "done"},
]


def user_error(result: Result, *fragments: str, code: int = 1) -> str:
    """Assert a clean user error: the exit code, no traceback, one stderr line with the fragments."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr + result.stdout
    if code == 1:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("compaction: error: ")
    else:
        assert "Error:" in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)
    return result.stderr


def write(path: Path, content: Any) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return path


def snapshot(path: Path) -> tuple[list[tuple[Any, ...]], ...]:
    """Every row a store holds that compaction must never lose (read with plain sqlite3)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        messages = db.execute("SELECT seq, role, content, import_key FROM messages ORDER BY seq").fetchall()
        blobs = db.execute("SELECT sha256, data FROM blobs ORDER BY sha256").fetchall()
        summaries = db.execute("SELECT level, start_seq, end_seq, text FROM summaries ORDER BY id").fetchall()
        return messages, blobs, summaries
    finally:
        db.close()


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A store file that already holds the four GOOD messages."""
    store_path = tmp_path / "filled.db"
    result = cli("import", write(tmp_path / "good.json", GOOD), "--store", store_path)
    assert result.exit_code == 0, result.stderr
    assert len(snapshot(store_path)[0]) == 4
    return store_path


def png(width: int, height: int, tail: bytes = b"") -> bytes:
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I4sII", 13, b"IHDR", width, height)
        + b"\x08\x02\x00\x00\x00"
        + tail
    )


def image(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def with_block(block: dict[str, Any]) -> list[dict[str, Any]]:
    return [GOOD[0], GOOD[1], {"role": "user", "content": [{"type": "text", "text": "look"}, block]}, GOOD[3]]


# -- malformed transcripts ---------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000

MALFORMED: dict[str, tuple[Any, tuple[str, ...]]] = {
    "truncated.jsonl": (
        '{"role":"user","content":"hi"}\n{"role":"assistant","content":"hel',
        (":2:", "invalid JSON", "Unterminated string"),
    ),
    "bad-role-type.jsonl": (
        '{"role":["user"],"content":"hi"}\n{"role":"assistant","content":"x"}\n',
        (":1:", "unknown role ['user']"),
    ),
    "number-content.jsonl": (
        '{"role":"user","content":42}\n{"role":"assistant","content":"x"}\n',
        (":1:", "content must be a string or a list of parts, found int"),
    ),
    "bad-block.json": (
        [{"role": "user", "content": [{"type": "text", "text": 5}]}, GOOD[1]],
        ("messages[0]", "a text part needs a string 'text'"),
    ),
    "block-not-object.json": (
        [{"role": "user", "content": [{"type": "image_url", "image_url": None}]}, GOOD[1]],
        ("messages[0]", "an image needs a URL string"),
    ),
    "tool-no-id.json": (
        [GOOD[0], {"role": "tool", "content": "x"}],
        ("messages[1]", "tool message needs a string 'tool_call_id'"),
    ),
    "empty.json": (b"", ("cannot tell the transcript format", "the file is empty")),
    "blank.jsonl": (b"\n\n   \n", ("the file is empty",)),
    "binary.dat": (bytes(range(256)) * 8, ("the content is binary",)),
    "image.png": (png(10, 10, bytes(100)), ("the content is binary",)),
    "latin1.json": (
        json.dumps(GOOD[:1] + [{"role": "assistant", "content": "héllo"}], ensure_ascii=False).encode(
            "latin-1"
        ),
        ("not UTF-8 text", "byte"),
    ),
    "utf16.json": (json.dumps(GOOD).encode("utf-16"), ("cannot tell the transcript format",)),
    "random.txt": ("just some prose\nwith no transcript in it\n", ("the content matches none of them",)),
    "deep.jsonl": (
        '{"role":"user","content":"hi"}\n{"role":"user","content":[{"type":"x","v":' + DEEP + "}]}\n",
        (":2:", "nested too deeply"),
    ),
    "bad-escape-first.jsonl": (
        '{"role":"user","content":"bad \\q"}\n{"role":"assistant","content":"x"}\n',
        (":1:", "Invalid \\escape"),
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_transcript_is_one_clear_line_and_the_store_keeps_its_messages(
    name: str, tmp_path: Path, filled: Path
) -> None:
    content, fragments = MALFORMED[name]
    path = write(tmp_path / name, content)
    before = snapshot(filled)
    user_error(cli("import", path, "--store", filled), name, *fragments)
    assert snapshot(filled) == before
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    assert str(path) in str(caught.value)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_deeply_nested_json_document_is_an_error_not_a_recursion_crash(tmp_path: Path, filled: Path) -> None:
    path = write(tmp_path / "deep.json", DEEP)
    before = snapshot(filled)
    user_error(cli("import", path, "--store", filled, "--format", "openai"), "deep.json", "nested too deeply")
    user_error(cli("import", path, "--store", filled), "deep.json", "cannot tell the transcript format")
    assert snapshot(filled) == before
    with pytest.raises(InvalidTranscript, match="nested too deeply"):
        load_transcript(path, format="anthropic")


def test_lenient_skips_a_nested_too_deeply_line(tmp_path: Path) -> None:
    path = write(
        tmp_path / "deep.jsonl", MALFORMED["deep.jsonl"][0] + '{"role":"assistant","content":"ok"}\n'
    )
    parsed = load_transcript(path, lenient=True)
    assert [m.role for m in parsed.messages] == ["user", "assistant"]
    assert parsed.skipped == 1 and "nested too deeply" in parsed.problems[0]


def test_jsonl_with_a_malformed_first_line_is_read_line_by_line(tmp_path: Path, filled: Path) -> None:
    path = write(
        tmp_path / "first.jsonl",
        '{"role":"user","content":"bad \\q"}\n' + "\n".join(json.dumps(m) for m in GOOD) + "\n",
    )
    stderr = user_error(
        cli("import", path, "--store", filled), "first.jsonl:1:", "Invalid \\escape", "lenient"
    )
    assert "whole file is one JSON document" not in stderr
    parsed = load_transcript(path, lenient=True)
    assert parsed.skipped == 1 and parsed.problems[0].startswith(f"{path}:1: invalid JSON")
    assert [m.text() for m in parsed.messages] == [m["content"] for m in GOOD]


def test_truncated_json_document_names_the_file_and_cannot_be_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "cut.json", json.dumps(GOOD)[:-20])
    user_error(
        cli("import", path, "--store", tmp_path / "s.db", "--format", "openai", "--lenient"),
        "cut.json:1:",
        "invalid JSON",
        "whole file is one JSON document",
    )
    with pytest.raises(InvalidTranscript, match=r"cut\.json:1: invalid JSON: .* \(the file ends before") as caught:
        load_transcript(path)  # detected: the damage is named, not an unknown format (session 15)
    assert not isinstance(caught.value, UnknownFormat)


def test_missing_file_and_directory_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    for command in (["import", "--store", str(tmp_path / "s.db")], ["run", "--budget", "100"], ["count"]):
        user_error(
            cli(command[0], tmp_path / "missing.json", *command[1:]), "missing.json", "does not exist", code=2
        )
        user_error(cli(command[0], tmp_path / "adir", *command[1:]), "adir", "is a directory", code=2)
    with pytest.raises(OSError):
        load_transcript(tmp_path / "missing.json")


def test_utf16_with_explicit_format_says_not_utf8(tmp_path: Path) -> None:
    path = write(tmp_path / "u16.json", json.dumps(GOOD).encode("utf-16"))
    user_error(
        cli("import", path, "--store", tmp_path / "s.db", "--format", "openai"), "u16.json", "not UTF-8 text"
    )


def test_bom_and_null_content_are_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "bom.json", b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    assert [m.text() for m in load_transcript(path).messages] == [m["content"] for m in GOOD]
    nulls = write(tmp_path / "null.json", [{"role": "user", "content": None}] + GOOD)
    assert len(load_transcript(nulls).messages) == 4  # a message with no content carries nothing


@pytest.mark.parametrize(
    "fmt", ["pi", "claude-code", "codex", "agent-tars", "swe-agent", "openhands", "aider"]
)
def test_format_that_does_not_match_the_content_is_refused(fmt: str, tmp_path: Path, filled: Path) -> None:
    path = write(tmp_path / "chat.json", GOOD)
    before = snapshot(filled)
    user_error(cli("import", path, "--store", filled, "--format", fmt), "chat.json")
    assert snapshot(filled) == before
    with pytest.raises(InvalidTranscript):
        load_transcript(path, format=fmt)


def test_unknown_format_name() -> None:
    with pytest.raises(UnknownFormat, match="unknown format 'nope'"):
        load_transcript("whatever.json", format="nope")
    user_error(cli("import", "x.json", "--store", "s.db", "--format", "nope"), "--format", code=2)


# -- images ----------------------------------------------------------------------------------------

BAD_IMAGES: dict[str, tuple[dict[str, Any], str]] = {
    "not-base64": (image("!!!not base64***"), "unexpected character '!'"),
    "nested": (
        {"type": "tool_result", "tool_use_id": "t", "content": [image("$$$$")]},
        "content[1].content[0]",
    ),
    "data-uri-garbage": (
        {"type": "image", "source": {"type": "url", "url": "data:image/png;base64,@@@@"}},
        "unexpected character '@'",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_IMAGES))
def test_invalid_base64_image_names_file_and_message_and_lenient_skips_it(
    name: str, tmp_path: Path, filled: Path
) -> None:
    block, fragment = BAD_IMAGES[name]
    path = write(tmp_path / f"{name}.json", with_block(block))
    before = snapshot(filled)
    user_error(
        cli("import", path, "--store", filled),
        f"{name}.json",
        "messages[2]",
        "invalid base64 image data",
        fragment,
    )
    assert snapshot(filled) == before
    with pytest.raises(InvalidTranscript, match="invalid base64 image data"):
        load_transcript(path)
    parsed = load_transcript(path, lenient=True)
    assert parsed.skipped == 1 and len(parsed.messages) == 3


def test_openai_image_url_with_garbage_data_uri(tmp_path: Path) -> None:
    path = write(
        tmp_path / "oa.json",
        [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}],
            },
            GOOD[1],
        ],
    )
    user_error(cli("run", path, "--budget", "1000"), "oa.json", "messages[0]", "unexpected character '%'")


def test_store_append_with_bad_base64_is_an_image_error_and_stores_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        store.append([Message("user", ({"type": "text", "text": "kept"},))])
        with pytest.raises(ImageError, match="invalid base64"):
            store.append(
                [Message("user", ({"type": "text", "text": "fine"},)), Message("user", (image("!!!!"),))]
            )
        assert [m.text() for m in store.messages()] == ["kept"] and store.image_count() == 0


def test_url_safe_base64_image_keeps_every_byte(tmp_path: Path) -> None:
    raw = png(640, 480, b"\x00" + b"\xfb\xef\xbe" * 5)  # aligned: encodes as '----' URL-safe
    for data in (base64.urlsafe_b64encode(raw).decode(), base64.encodebytes(raw).decode()):
        assert "-" in data or "\n" in data
        with Store(tmp_path / f"s{len(data)}.db") as store:
            store.append([Message("user", (image(data),))])
            (fact,) = store.facts()[0].images
            assert store.blob(store.blob_hashes()[0]) == raw
            assert fact.sha256 == store.blob_hashes()[0] and fact.byte_size == len(raw) and fact.width == 640
            assert base64.b64decode(store.messages()[0].content[0]["source"]["data"]) == raw


@pytest.mark.parametrize(
    "name,data,media_type",
    [
        ("truncated-png", base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00").decode(), "image/png"),
        ("truncated-jpeg", base64.b64encode(b"\xff\xd8\xff\xe0\x00").decode(), "image/jpeg"),
        ("zero-size", "", "image/png"),
        ("zero-dimensions", base64.b64encode(png(0, 0)).decode(), "image/png"),
        ("huge-dimensions", base64.b64encode(png(0xFFFFFFFF, 0xFFFFFFFF)).decode(), "image/png"),
        ("wrong-media-type", base64.b64encode(png(64, 64)).decode(), "image/jpeg"),
        ("not-an-image-type", base64.b64encode(png(64, 64)).decode(), "text/html"),
    ],
)
def test_damaged_or_odd_images_compile_within_budget(
    name: str, data: str, media_type: str, tmp_path: Path
) -> None:
    path = write(tmp_path / f"{name}.json", with_block(image(data, media_type)))
    for vision in ("true", "false"):
        result = cli(
            "run", path, "--budget", "3000", "--vision", vision, "--json", "--out", tmp_path / "req.json"
        )
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["tokens_after"] <= 3000 and report["messages"] == 4
        body = (tmp_path / "req.json").read_text()
        if vision == "false":
            assert report["images_shown"] == 0 and report["images_replaced"] == 1 and "base64," not in body


def test_url_images_and_empty_url(tmp_path: Path) -> None:
    for url in ("https://example.com/x.png", "", "data:,hello%ZZ"):
        path = write(
            tmp_path / "url.json", with_block({"type": "image", "source": {"type": "url", "url": url}})
        )
        result = cli("run", path, "--budget", "3000", "--vision", "false", "--json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["images_shown"] == 0


# -- odd conversations --------------------------------------------------------------------------

ODD: dict[str, Any] = {
    "result-before-use": [
        GOOD[0],
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "early result"}],
        },
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
        GOOD[2],
        GOOD[3],
    ],
    "orphans": [
        GOOD[0],
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "ls", "input": {}}]},
        {"role": "user", "content": "never answered"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zzz", "content": "orphan"}]},
        GOOD[3],
    ],
    "duplicate-ids": [
        GOOD[0],
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "ls", "input": {}},
                {"type": "tool_use", "id": "t1", "name": "ls", "input": {"a": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "r1"},
                {"type": "tool_result", "tool_use_id": "t1", "content": "r2"},
            ],
        },
        GOOD[3],
    ],
    "unknown-blocks-and-empty-content": [
        {
            "role": "user",
            "content": [{"type": "weird_block", "foo": [1, {"x": None}]}, {"type": "text", "text": "hi"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "server_tool_use", "id": "s1", "name": "web", "input": {}}],
        },
        {"role": "system", "content": "a system message in the middle"},
        {"role": "user", "content": []},
        GOOD[3],
    ],
    "system-last-and-assistant-first": {
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "assistant", "content": "I speak first"},
            {"role": "system", "content": "late system"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "last system"},
        ],
    },
}


def _check_pairing(body: dict[str, Any], fmt: str) -> None:
    messages = body["messages"]
    if fmt == "openai":
        seen: set[str] = set()
        for index, message in enumerate(messages):
            for call in message.get("tool_calls") or []:
                following = [m["tool_call_id"] for m in messages[index + 1 :] if m["role"] == "tool"]
                assert call["id"] in following
                seen.add(call["id"])
            if message["role"] == "tool":
                assert message["tool_call_id"] in seen
    else:
        for index, message in enumerate(messages):
            uses = [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
            if uses:
                answered = {
                    b["tool_use_id"] for b in messages[index + 1]["content"] if b.get("type") == "tool_result"
                }
                assert set(uses) <= answered
            results = [b["tool_use_id"] for b in message["content"] if b.get("type") == "tool_result"]
            if results:
                called = {b["id"] for b in messages[index - 1]["content"] if b.get("type") == "tool_use"}
                assert set(results) <= called


@pytest.mark.parametrize("name", sorted(ODD))
@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_odd_conversations_compile_with_every_block_accounted_for(
    name: str, fmt: str, tmp_path: Path
) -> None:
    path = write(tmp_path / f"{name}.json", ODD[name])
    out = tmp_path / "req.json"
    result = cli("run", path, "--budget", "2000", "--to", fmt, "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    body = json.loads(out.read_text())
    _check_pairing(body, fmt)
    text = json.dumps(body)
    for needle in (
        "early result",
        "orphan",
        "r1",
        "r2",
        "never answered",
        "weird_block",
        "server_tool_use",
        "late system",
        "last system",
        "I speak first",
    ):
        if needle in json.dumps(ODD[name]):
            assert needle in text, needle
    if fmt == "anthropic":
        assert body["messages"][0]["role"] == "user"


# -- stores ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content", [b"not sqlite at all, just text " * 10, bytes(range(256)) * 20], ids=["text", "binary"]
)
def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(content: bytes, tmp_path: Path) -> None:
    path = write(tmp_path / "junk.db", content)
    transcript = write(tmp_path / "good.json", GOOD)
    commands: tuple[list[str | Path], ...] = (
        ["import", transcript, "--store", path],
        ["stats", "--store", path],
        ["compile", "--store", path, "--budget", "100"],
        ["compress", "--store", path],
        ["run", transcript, "--budget", "1000", "--store", path],
    )
    for args in commands:
        user_error(cli(*args), "junk.db", "cannot open as a compaction store")
    assert path.read_bytes() == content
    with pytest.raises(StoreError, match="junk.db"):
        Store(path)


def _set_schema_version(path: Path, value: str) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (value,))
    db.commit()
    db.close()


@pytest.mark.parametrize(
    "version,fragment",
    [("99", "schema version 99 is newer"), ("abc", "schema version 'abc' is not a number")],
)
def test_store_with_a_newer_or_broken_schema_version_is_refused(
    version: str, fragment: str, tmp_path: Path, filled: Path
) -> None:
    _set_schema_version(filled, version)
    before = snapshot(filled)
    transcript = write(tmp_path / "more.json", ODD["orphans"])
    user_error(cli("import", transcript, "--store", filled), "filled.db", fragment)
    user_error(cli("stats", "--store", filled), "filled.db", fragment)
    user_error(cli("compile", "--store", filled, "--budget", "1000"), "filled.db", fragment)
    assert snapshot(filled) == before
    with pytest.raises(StoreError, match=fragment.replace("'", ".")):
        Store(filled)


def _make_read_only(path: Path) -> None:
    if os.geteuid() == 0:  # root writes through file modes: make the file immutable instead
        subprocess.run(["chattr", "+i", str(path)], check=True)
    else:
        path.chmod(0o444)


def _make_writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o644)


def test_read_only_store_refuses_writes_and_still_reads(tmp_path: Path, filled: Path) -> None:
    with Store(filled) as store:  # checkpoint the WAL so the main file holds everything
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = snapshot(filled)
    recipe = write(tmp_path / "cl.toml", 'encoding = "cl100k_base"\n')
    _make_read_only(filled)
    try:
        user_error(
            cli("import", write(tmp_path / "more.json", ODD["orphans"]), "--store", filled),
            "filled.db",
            "readonly",
        )
        stats = cli(
            "stats", "--store", filled, "--recipe", recipe, "--json"
        )  # counts in a new encoding: not cacheable
        assert stats.exit_code == 0, stats.stderr
        assert json.loads(stats.stdout)["messages"] == 4
        compiled = cli("compile", "--store", filled, "--recipe", recipe, "--budget", "1000")
        assert compiled.exit_code == 0, compiled.stderr
        assert "hello there" in compiled.stdout
    finally:
        _make_writable(filled)
    assert snapshot(filled) == before


def test_concurrent_imports_of_the_same_file_add_it_once(tmp_path: Path) -> None:
    transcript = write(
        tmp_path / "long.json",
        [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(40)],
    )
    path = tmp_path / "conc.db"
    errors: list[BaseException] = []
    added: list[int] = []

    def work() -> None:
        try:
            with Store(path) as store:
                added.append(store.append(load_transcript(transcript).messages, chain_seed="openai"))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and sorted(added) == [0, 0, 0, 40]
    assert [row[0] for row in snapshot(path)[0]] == list(range(40))
    result = cli("import", transcript, "--store", path, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["added"] == 0


def test_compile_and_compress_on_an_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    # a mistyped path is an error, not a new empty store
    user_error(cli("compile", "--store", path, "--budget", "1000"), "empty.db", "no store there")
    user_error(cli("stats", "--store", path), "empty.db", "no store there")
    user_error(cli("compress", "--store", path), "empty.db", "no store there")
    assert not path.exists()
    Store(path).close()
    user_error(cli("compile", "--store", path, "--budget", "1000"), "empty.db", "holds no messages")
    assert cli("compress", "--store", path).exit_code == 0
    with Store(path) as store:
        with pytest.raises(InvalidMessage, match="holds no messages"):
            compile_request(store, Recipe(budget_tokens=1000))
        assert len(store) == 0


# -- recipes -------------------------------------------------------------------------------------------

RECIPES: dict[str, tuple[bytes | str, tuple[str, ...]]] = {
    "unknown-key": ("vison = false\n", ("key 'vison': unknown", "did you mean 'vision'")),
    "wrong-type": ('budget_tokens = "100"\n', ("key 'budget_tokens'", "found string '100'")),
    "float-budget": ("budget_tokens = 1e9\n", ("key 'budget_tokens'", "found float")),
    "negative-budget": ("budget_tokens = -5\n", ("key 'budget_tokens'", "integer -5")),
    "zero-budget": ("budget_tokens = 0\n", ("key 'budget_tokens'", "integer 0")),
    "bool-as-int": ("max_live_images = true\n", ("key 'max_live_images'", "boolean true")),
    "invalid-toml": ("budget_tokens = = 3\n", ("invalid TOML", "line 1")),
    "not-utf8": (b"\xff\xfe\x00b", ("invalid TOML", "not UTF-8")),
    "summarizer-string": ('summarizer = "x"\n', ("key 'summarizer'", "expected a table")),
    "summarizer-array": ('[[summarizer]]\nkind = "x"\n', ("key 'summarizer'", "found array")),
    "nan-timeout": ("[summarizer]\ntimeout_seconds = nan\n", ("summarizer.timeout_seconds", "nan")),
    "bad-encoding": ('encoding = "p50k_base"\n', ("key 'encoding'", "p50k_base")),
    "empty-model": ('model = ""\n', ("key 'model'", "non-empty string")),
    "fanout-one": ("merge_fanout = 1\n", ("key 'merge_fanout'", ">= 2")),
}

SECRET = "sk-abcdefghijklmnopqrstuvwxyz123456"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_bad_recipe_names_the_file_and_key(name: str, tmp_path: Path, filled: Path) -> None:
    content, fragments = RECIPES[name]
    recipe = write(tmp_path / f"{name}.toml", content)
    before = snapshot(filled)
    user_error(
        cli("run", write(tmp_path / "good.json", GOOD), "--budget", "1000", "--recipe", recipe),
        f"{name}.toml",
        *fragments,
    )
    user_error(
        cli("compile", "--store", filled, "--budget", "1000", "--recipe", recipe), f"{name}.toml", *fragments
    )
    assert snapshot(filled) == before
    with pytest.raises(RecipeError) as caught:
        load_recipe(recipe)
    assert str(caught.value).startswith(str(recipe))


@pytest.mark.parametrize(
    "content",
    [
        f'[summarizer]\nkind = "openai"\nmodel = "m"\napi_key = "{SECRET}"\n',
        f'model = "{SECRET}"\n',
        f'[summarizer]\nkind = "openai"\nmodel = "m"\nbase_url = "Bearer {SECRET}"\n',
    ],
)
def test_secrets_in_a_recipe_are_refused_without_being_echoed(content: str, tmp_path: Path) -> None:
    recipe = write(tmp_path / "secret.toml", content)
    stderr = user_error(
        cli("run", write(tmp_path / "good.json", GOOD), "--budget", "1000", "--recipe", recipe), "secret.toml"
    )
    assert SECRET not in stderr and "key" in stderr
    with pytest.raises(RecipeError) as caught:
        load_recipe(recipe)
    assert SECRET not in str(caught.value)


def test_missing_and_directory_recipe(tmp_path: Path) -> None:
    transcript = write(tmp_path / "good.json", GOOD)
    user_error(
        cli("run", transcript, "--budget", "100", "--recipe", tmp_path / "nope.toml"),
        "nope.toml",
        "cannot read the recipe",
    )
    (tmp_path / "dir.toml").mkdir()
    user_error(
        cli("run", transcript, "--budget", "100", "--recipe", tmp_path / "dir.toml"), "is a directory", code=2
    )
    with pytest.raises(RecipeError, match="nope.toml: cannot read"):
        load_recipe(tmp_path / "nope.toml")


# -- budgets and options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--budget", "0"], "'--budget': 0 is not in the range"),
        (["--budget", "-3"], "'--budget': -3 is not in the range"),
        (["--budget", "abc"], "'--budget'"),
        (["--budget", "100", "--max-live-images", "-1"], "'--max-live-images': -1"),
        (["--budget", "100", "--vision", "maybe"], "'--vision'"),
        (["--budget", "100", "--to", "gemini"], "'--to'"),
        (["--budget", "100", "--format", "xml"], "'--format'"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], fragment: str, tmp_path: Path) -> None:
    user_error(cli("run", write(tmp_path / "good.json", GOOD), *args), fragment, code=2)


def test_budget_of_one_token_is_over_budget_and_changes_nothing(tmp_path: Path, filled: Path) -> None:
    before = snapshot(filled)
    user_error(cli("compile", "--store", filled, "--budget", "1"), "budget of 1 tokens")
    user_error(cli("run", write(tmp_path / "good.json", GOOD), "--budget", "1"), "budget of 1 tokens")
    assert snapshot(filled) == before
    with Store(filled) as store:
        with pytest.raises(OverBudget) as caught:
            compile_request(store, Recipe(budget_tokens=1))
        assert caught.value.budget == 1 and caught.value.needed > 1
    assert snapshot(filled) == before


def test_missing_budget_and_invalid_recipe_values_from_the_api(tmp_path: Path) -> None:
    user_error(cli("run", write(tmp_path / "good.json", GOOD)), "budget is required", code=2)  # a usage error
    for bad in (
        {"budget_tokens": 0},
        {"budget_tokens": -1},
        {"max_live_images": -1},
        {"budget_tokens": True},
        {"vision": "no"},
    ):
        with pytest.raises(RecipeError):
            Recipe(**bad)


def test_huge_budget_fits_everything(tmp_path: Path) -> None:
    # session 16: a budget over 100,000,000 tokens is refused as absurd (exit 2); the cap fits all
    absurd = cli("run", write(tmp_path / "good.json", GOOD), "--budget", str(10**30), "--json")
    assert absurd.exit_code == 2 and "Error: Invalid value for '--budget'" in absurd.stderr
    result = cli("run", write(tmp_path / "good.json", GOOD), "--budget", str(10**8), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["budget"] == 10**8 and report["tokens_after"] == report["tokens_before"]


# -- count ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 8,
        png(10, 10, bytes(64)),
        json.dumps(GOOD).encode("utf-16"),
        "café".encode("latin-1"),
    ],
    ids=["binary", "png", "utf-16", "latin-1"],
)
@pytest.mark.parametrize("method", ["exact", "fast", "estimate"])
def test_count_refuses_files_that_are_not_utf8_text(content: bytes, method: str, tmp_path: Path) -> None:
    good = write(tmp_path / "good.txt", "plain text")
    bad = write(tmp_path / "blob.bin", content)
    result = cli("count", good, bad, "--method", method)
    user_error(result, "blob.bin", "not UTF-8 text")
    ok = cli("count", good, "--method", method, "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["files"][0]["tokens"] > 0


def test_errors_are_compaction_errors() -> None:
    for error in (
        InvalidTranscript,
        UnknownFormat,
        InvalidMessage,
        StoreError,
        RecipeError,
        OverBudget,
        ImageError,
    ):
        assert issubclass(error, CompactionError)


@pytest.mark.parametrize("where", ["missing.jsonl", "."])
def test_load_transcript_of_a_missing_file_or_a_directory_is_a_typed_error(tmp_path, where: str) -> None:
    from compaction import CompactionError, TranscriptUnreadable, load_transcript

    target = tmp_path / where
    with pytest.raises(TranscriptUnreadable, match="cannot read the transcript") as caught:
        load_transcript(target)
    assert isinstance(caught.value, CompactionError) and isinstance(caught.value, OSError)
    assert str(target) in str(caught.value)
