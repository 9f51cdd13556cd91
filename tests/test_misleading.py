"""Successes and messages that must be true (issue 10, "Errors that mislead or data that is not
what it seems").

Each test is built from the issue's reproduction and failed before its fix:

* an image whose base64 validation accepts (unpadded, URL-safe, broken by whitespace) is
  stored byte for byte, not refused at append with ``Incorrect padding``;
* a transcript re-imported after it grew, whose earlier snapshot ended between the answers
  to parallel tool calls (or inside an assistant response written a block a line), ends
  exactly as one import of the whole file: no tool result twice, none lost (and an older
  snapshot imported after the grown file adds nothing);
* ``--store`` naming another application's SQLite file, a file that is not SQLite or an
  empty file is refused untouched (byte-identical), with one clear line;
* ``compress --budget`` says what it added when the budget still cannot be met, and names the
  summarizer's failure when chunks could not be summarized;
* a store file deleted or replaced while a command runs is an error, not a success;
* a full disk is reported as a full disk, and a failing rollback never hides the error;
* a read-only store with a failing summarizer is one clear line, not a traceback.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import runner
from click.testing import Result

import compaction.pipeline
from compaction import (
    CompactionError,
    ImageError,
    Message,
    OverBudget,
    Recipe,
    Store,
    StoreError,
    compress_and_compile,
)
from compaction.cli import main
from compaction.errors import SummarizerUnavailable
from compaction.imageinfo import info_from_base64
from compaction.pipeline import import_transcript
from compaction.summarizers.base import SummaryResult
from compaction.wire import GatedRequest


def one_line_error(result: Result) -> str:
    """Assert the command failed with exactly one line on stderr, no traceback; return it."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compaction: error: "), result.stderr
    return lines[0]


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


def history(turns: int) -> list[Message]:
    out = []
    for i in range(turns):
        out.append(text("user", f"question {i}: " + "why does the parser fail " * 8))
        out.append(text("assistant", f"answer {i}: " + "because of the cache key " * 8))
    return out


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def store_rows(path: Path | str) -> list[tuple[Any, ...]]:
    """Every message row as stored, import keys and token counts included."""
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT m.seq, m.role, m.content, m.source_id, m.meta, m.import_key, m.tool_uses,"
            " m.tool_results, m.images, t.encoding, t.text_tokens"
            " FROM messages m LEFT JOIN token_counts t ON t.seq = m.seq ORDER BY m.seq"
        ).fetchall()
    finally:
        db.close()


# -- 1. base64 that validation accepts is stored, byte for byte ---------------------------------


def png_with_padding_and_both_alphabets() -> bytes:
    """A valid PNG whose base64 needs padding and holds '+' and '/' (so URL-safe differs)."""
    for seed in range(1000):
        raw = bytes((seed * 7 + i * 13) % 256 for i in range(3 * 3 * 4))
        rows = b"".join(b"\x00" + raw[r * 12 : (r + 1) * 12] for r in range(3))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        png = (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 3, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b"")
        )
        encoded = base64.b64encode(png).decode()
        if encoded.endswith("=") and "+" in encoded and "/" in encoded:
            return png
    raise AssertionError("no such PNG")  # pragma: no cover


PNG = png_with_padding_and_both_alphabets()
PADDED = base64.b64encode(PNG).decode()
SPELLINGS = {
    "unpadded": PADDED.rstrip("="),
    "url-safe": base64.urlsafe_b64encode(PNG).decode(),
    "url-safe unpadded": base64.urlsafe_b64encode(PNG).decode().rstrip("="),
    "broken by whitespace": "\n".join(PADDED[i : i + 16] for i in range(0, len(PADDED), 16)) + "\n",
    "unpadded with spaces": " ".join(PADDED.rstrip("=")[i : i + 10] for i in range(0, len(PADDED) - 1, 10)),
}


def image_message(data: str) -> Message:
    return Message(
        "user",
        (
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        ),
    )


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_base64_that_validation_accepts_is_stored_byte_for_byte(spelling: str) -> None:
    data = SPELLINGS[spelling]
    assert data != PADDED
    info = info_from_base64(data)  # validation accepts it...
    assert (info.media_type, info.width, info.height, info.byte_size) == ("image/png", 3, 3, len(PNG))
    with Store(":memory:") as store:  # ...and so does the store (it said "Incorrect padding")
        assert store.append([image_message(data)], chain_seed="t") == 1
        (sha,) = store.blob_hashes()
        assert store.blob(sha) == PNG  # every byte kept
        shown = store.messages()[0].content[1]["source"]["data"]
        assert base64.b64decode(shown, validate=True) == PNG
        assert store.append([image_message(data)], chain_seed="t") == 0  # and it is the same message next time


def test_an_unpadded_image_in_a_transcript_imports_through_the_cli(tmp_path: Path) -> None:
    transcript = tmp_path / "chat.json"
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SPELLINGS["unpadded"]}}
    transcript.write_text(
        json.dumps([{"role": "user", "content": [{"type": "text", "text": "icon?"}, block]},
                    {"role": "assistant", "content": "a tiny square"}]),
        encoding="utf-8",
    )
    result = runner().invoke(main, ["import", str(transcript), "--store", str(tmp_path / "s.db"), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 2
    with Store(tmp_path / "s.db") as store:
        assert store.blob(store.blob_hashes()[0]) == PNG


def test_base64_that_validation_refuses_is_refused_naming_the_message() -> None:
    with Store(":memory:") as store:
        with pytest.raises(ImageError, match=r"message 1 of the 2 appended \(user\).*invalid base64") as caught:
            store.append([text("user", "fine"), image_message("abcde")])
        assert "Incorrect padding" not in str(caught.value)
        assert len(store) == 0


# -- 2. a grown transcript whose snapshot ended inside a merged message ---------------------------


def openai_jsonl() -> list[dict[str, Any]]:
    """One user turn, an assistant fanning out two calls, their results on two lines, an answer."""
    calls = [
        {"id": name, "type": "function", "function": {"name": tool, "arguments": "{}"}}
        for name, tool in (("call_a", "ls"), ("call_b", "pwd"))
    ]
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "look around"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_a", "content": "README.md setup.py"},
        {"role": "tool", "tool_call_id": "call_b", "content": "/home/me/project"},
        {"role": "assistant", "content": "Two files in /home/me/project."},
        {"role": "user", "content": "thanks"},
    ]


def claude_code_jsonl() -> list[dict[str, Any]]:
    """A Claude Code session: one response written a block a line (one message id), two results."""

    def event(kind: str, uuid: str, message: dict[str, Any]) -> dict[str, Any]:
        return {"type": kind, "uuid": uuid, "parentUuid": None, "isSidechain": False, "sessionId": "s",
                "timestamp": f"2025-06-14T11:00:{len(uuid):02d}Z", "message": message}

    def assistant(uuid: str, message_id: str, block: dict[str, Any]) -> dict[str, Any]:
        return event("assistant", uuid, {"id": message_id, "role": "assistant", "model": "claude", "content": [block]})

    def result(uuid: str, call: str, output: str) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": call, "content": output}
        return event("user", uuid, {"role": "user", "content": [block]})

    return [
        event("user", "u1", {"role": "user", "content": "look around"}),
        assistant("a1", "msg_1", {"type": "text", "text": "Looking."}),
        assistant("a2", "msg_1", {"type": "tool_use", "id": "toolu_a", "name": "ls", "input": {}}),
        assistant("a3", "msg_1", {"type": "tool_use", "id": "toolu_b", "name": "pwd", "input": {}}),
        result("r1", "toolu_a", "README.md setup.py"),
        result("r2", "toolu_b", "/home/me/project"),
        assistant("a4", "msg_2", {"type": "text", "text": "Two files."}),
    ]


def codex_jsonl() -> list[dict[str, Any]]:
    """A Codex rollout: reasoning and two calls are one assistant message, the outputs one user message."""

    def item(payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "2025-06-14T11:00:00Z", "type": "response_item", "payload": payload}

    def call(call_id: str, name: str) -> dict[str, Any]:
        return item({"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"})

    return [
        {"timestamp": "2025-06-14T11:00:00Z", "type": "session_meta", "payload": {"id": "s", "cwd": "/tmp"}},
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look around"}]}),
        item({"type": "reasoning", "summary": [{"type": "summary_text", "text": "List, then locate."}]}),
        call("call_a", "ls"),
        call("call_b", "pwd"),
        item({"type": "function_call_output", "call_id": "call_a", "output": "README.md setup.py"}),
        item({"type": "function_call_output", "call_id": "call_b", "output": "/home/me/project"}),
        item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two files."}]}),
    ]


TRANSCRIPTS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "openai": openai_jsonl,
    "claude-code": claude_code_jsonl,
    "codex": codex_jsonl,
}


def tool_result_ids(store: Store) -> list[str]:
    return [b["tool_use_id"] for m in store.messages() for b in m.content if b["type"] == "tool_result"]


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_a_grown_transcript_ends_as_one_import_of_the_whole_file(name: str, tmp_path: Path) -> None:
    records = TRANSCRIPTS[name]()
    whole = write_jsonl(tmp_path / "whole.jsonl", records)
    with Store(tmp_path / "once.db") as once:
        import_transcript(once, whole, format=name)
        results = tool_result_ids(once)
    assert len(results) == 2
    first = 2 if name == "codex" else 1  # a rollout's first line holds no message
    for cut in range(first, len(records)):
        path = tmp_path / f"grown-{cut}.db"
        snapshot = write_jsonl(tmp_path / f"snapshot-{cut}.jsonl", records[:cut])
        with Store(path) as store:
            import_transcript(store, snapshot, format=name)
            import_transcript(store, whole, format=name)
            assert tool_result_ids(store) == results, f"cut after line {cut}"
            _parsed, again = import_transcript(store, whole, format=name)
            assert again == 0, f"cut after line {cut}: a third import added {again}"
        assert store_rows(path) == store_rows(tmp_path / "once.db"), f"cut after line {cut}"


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_an_older_snapshot_imported_after_the_whole_file_adds_nothing(name: str, tmp_path: Path) -> None:
    records = TRANSCRIPTS[name]()
    whole = write_jsonl(tmp_path / "whole.jsonl", records)
    with Store(tmp_path / "s.db") as store:
        import_transcript(store, whole, format=name)
    before = store_rows(tmp_path / "s.db")
    for cut in range(2 if name == "codex" else 1, len(records)):
        with Store(tmp_path / "s.db") as store:
            _parsed, added = import_transcript(store, write_jsonl(tmp_path / "old.jsonl", records[:cut]), format=name)
        assert added == 0, f"cut after line {cut}: {added} added"
        assert store_rows(tmp_path / "s.db") == before, f"cut after line {cut}"


def test_a_snapshot_in_three_steps_also_ends_as_one_import(tmp_path: Path) -> None:
    records = openai_jsonl()
    whole = write_jsonl(tmp_path / "whole.jsonl", records)
    with Store(tmp_path / "once.db") as once:
        import_transcript(once, whole)
    with Store(tmp_path / "steps.db") as store:
        for cut in (3, 4, 5, len(records)):  # ends before, inside, after the results
            import_transcript(store, write_jsonl(tmp_path / f"s{cut}.jsonl", records[:cut]))
    assert store_rows(tmp_path / "steps.db") == store_rows(tmp_path / "once.db")


def test_a_summarized_snapshot_gets_the_missing_results_as_their_own_message(tmp_path: Path) -> None:
    records = openai_jsonl()
    whole = write_jsonl(tmp_path / "whole.jsonl", records)
    with Store(tmp_path / "s.db") as store:
        import_transcript(store, write_jsonl(tmp_path / "snap.jsonl", records[:4]))
        partial = store.messages()[-1]
        assert tool_result_ids(store) == ["call_a"]
        store.add_summary(1, 0, len(store), "Asked:\n- look around\nDone:\n- ls", {})  # covers the partial one
        import_transcript(store, whole)
        assert store.messages(partial.seq, partial.seq + 1) == [partial]  # the summary stays true
        assert tool_result_ids(store) == ["call_a", "call_b"]  # none twice, none lost
        assert [m.text() for m in store.messages()[-2:]] == ["Two files in /home/me/project.", "thanks"]
        assert import_transcript(store, whole)[1] == 0


def test_messages_appended_twice_through_the_api_are_still_kept_once() -> None:
    with Store(":memory:") as store:
        batch = history(3)
        assert store.append(batch, chain_seed="api") == 6
        assert store.append(batch, chain_seed="api") == 0
        assert store.append(batch + history(4)[6:], chain_seed="api") == 2
        assert len(store) == 8


# -- 3. a file that is not a compaction store is refused, untouched --------------------------------


def other_application_db(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);"
        "INSERT INTO users (name) VALUES ('ada'), ('grace');"
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"  # a common name, too
        "INSERT INTO meta VALUES ('app', 'notes');"
    )
    db.commit()
    db.close()
    return path


def files_beside(path: Path) -> set[str]:
    return {p.name for p in path.parent.iterdir()}


FOREIGN: dict[str, Callable[[Path], Path]] = {
    "another application's database": other_application_db,
    "a lone meta table": lambda p: (sqlite3.connect(p).executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"), p)[1],
    "a messages table of another shape": lambda p: (sqlite3.connect(p).executescript(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)"), p)[1],
    "a text file": lambda p: (p.write_text("name,age\nada,36\n"), p)[1],
}


@pytest.mark.parametrize("kind", sorted(FOREIGN))
@pytest.mark.parametrize("command", ["import", "compress", "compile", "stats"])
def test_a_file_that_is_not_a_store_is_refused_untouched(kind: str, command: str, tmp_path: Path) -> None:
    transcript = write_jsonl(tmp_path / "t.jsonl", openai_jsonl())
    target = FOREIGN[kind](tmp_path / "app.db")
    before, beside = target.read_bytes(), files_beside(target)
    args = {
        "import": ["import", str(transcript)],
        "compress": ["compress", "--budget", "100"],
        "compile": ["compile", "--budget", "100"],
        "stats": ["stats"],
    }[command]
    line = one_line_error(runner().invoke(main, [*args, "--store", str(target)]))
    assert str(target) in line
    assert "not a compaction store" in line or "not an SQLite database" in line, line
    assert target.read_bytes() == before, "the file was changed"
    assert files_beside(target) == beside, "files were created beside it"


def test_the_library_refuses_another_applications_database_too(tmp_path: Path) -> None:
    target = other_application_db(tmp_path / "app.db")
    before = target.read_bytes()
    with pytest.raises(StoreError, match=r"not a compaction store: the database holds other tables \(meta, users\)"):
        Store(target)
    assert target.read_bytes() == before


def test_an_empty_file_becomes_a_store_on_import_only(tmp_path: Path) -> None:
    """Decided: a 0-byte file (``touch store.db``) is an empty database; `import` (create=True)
    makes it a store, the commands that read a store (create=False) refuse it untouched."""
    target = tmp_path / "store.db"
    target.touch()
    transcript = write_jsonl(tmp_path / "t.jsonl", openai_jsonl())
    for args in (["compress", "--budget", "100"], ["compile", "--budget", "100"], ["stats"]):
        line = one_line_error(runner().invoke(main, [*args, "--store", str(target)]))
        assert "empty" in line and "compaction import" in line, line
        assert target.read_bytes() == b"" and files_beside(target) == {"store.db", "t.jsonl"}
    with pytest.raises(StoreError, match="empty"):
        Store(target, create=False)
    result = runner().invoke(main, ["import", str(transcript), "--store", str(target)])
    assert result.exit_code == 0, result.stderr
    with Store(target, create=False) as store:
        assert len(store) == 6


def test_a_connection_may_hold_the_callers_tables_beside_the_store(tmp_path: Path) -> None:
    conn = sqlite3.connect(other_application_db(tmp_path / "app.db"), isolation_level=None)
    try:
        with pytest.raises(StoreError, match="not a compaction store"):  # its 'meta' is not ours
            Store(connection=conn)
        conn.execute("DROP TABLE meta")
        with Store(connection=conn) as store:  # the caller embeds the store in its own database
            store.append(history(1))
        assert conn.execute("SELECT COUNT(*) FROM users").fetchone() == (2,)
    finally:
        conn.close()


# -- 4. compress --budget says what it did, and why it could not do more ----------------------------


class Failing:
    """A summarizer that cannot reach its server."""

    name = "failing"
    request_format = "openai"
    model = None
    max_output_tokens = None

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: GatedRequest, *, kind: str) -> SummaryResult:
        self.calls += 1
        raise SummarizerUnavailable(
            "http://127.0.0.1:9/v1: no summary after 1 attempt(s): connection failed "
            "(ConnectError: [Errno 111] Connection refused)"
        )

    def close(self) -> None:
        pass


def test_over_budget_after_compressing_says_what_was_added() -> None:
    with Store(":memory:") as store:
        store.append(history(30))
        with pytest.raises(OverBudget) as caught:
            compress_and_compile(store, Recipe(budget_tokens=1, chunk_target_tokens=300))
        added = len(store.summaries())
        assert added > 0
        message = str(caught.value)
        assert "Nothing was changed" not in message
        assert added > 1 and f"added {added} summaries" in message and "kept them in the in-memory store (gone when it closes)" in message, message
        with pytest.raises(OverBudget) as again:  # a second run adds nothing, and says so
            compress_and_compile(store, Recipe(budget_tokens=1, chunk_target_tokens=300))
        assert len(store.summaries()) == added
        assert "found nothing more to summarize" in str(again.value)


def test_over_budget_after_summarizer_failures_names_the_failure() -> None:
    with Store(":memory:") as store:
        store.append(history(30))
        summarizer = Failing()
        with pytest.raises(OverBudget) as caught:
            compress_and_compile(store, Recipe(budget_tokens=500, chunk_target_tokens=300), summarizer=summarizer)
        message = str(caught.value)
        assert "1 chunk could not be summarized (http://127.0.0.1:9/v1: " in message, message
        assert "connection failed" in message and "Nothing was changed" not in message
        assert "compress --budget" not in message  # it just did; do not advise it
        assert summarizer.calls == 1  # the same failing chunk was not sent again and again


def unused_loopback_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_compress_with_an_unreachable_summarizer_names_the_connection_failure(tmp_path: Path) -> None:
    store_path = tmp_path / "s.db"
    with Store(store_path) as store:
        store.append(history(30))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        "chunk_target_tokens = 300\n[summarizer]\nkind = \"openai\"\n"
        f"base_url = \"http://127.0.0.1:{unused_loopback_port()}/v1\"\nmodel = \"m\"\n"
        "max_retries = 0\ntimeout_seconds = 5\n",
        encoding="utf-8",
    )
    result = runner().invoke(main, ["compress", "--store", str(store_path), "--budget", "500", "--recipe", str(recipe)])
    line = one_line_error(result)
    assert "1 chunk could not be summarized" in line and "connection failed" in line, line


def test_compress_budget_one_in_the_cli_reports_what_it_added(tmp_path: Path) -> None:
    store_path = tmp_path / "s.db"
    with Store(store_path) as store:
        store.append(history(30))
    line = one_line_error(runner().invoke(main, ["compress", "--store", str(store_path), "--budget", "1"]))
    with Store(store_path) as store:
        added = len(store.summaries())
    assert added, "nothing was summarized"
    assert f"Compression added {added} summar" in line and "in the store" in line, line
    assert "Nothing was changed" not in line


# -- 5. a store deleted or replaced while a command runs -------------------------------------------


class Vandal:
    """A summarizer that deletes (or replaces) the store file at its first request, then works."""

    name = "vandal"
    request_format = "openai"
    model = None
    max_output_tokens = None

    def __init__(self, path: Path, how: str) -> None:
        self.path, self.how, self.done = path, how, False

    def summarize(self, request: GatedRequest, *, kind: str) -> SummaryResult:
        if not self.done:
            self.done = True
            if self.how == "deleted":
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            else:
                os.replace(self.path, f"{self.path}.moved")
                Store(self.path).close()  # someone puts a new store there
        return SummaryResult("Done:\n- something", {"summarizer": self.name})

    def close(self) -> None:
        pass


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_deleted_while_compressing_is_an_error(how: str, tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append(history(30))
        with pytest.raises(StoreError, match=f"the store file was {how} while this command ran") as caught:
            compress_and_compile(store, Recipe(budget_tokens=800, chunk_target_tokens=300), summarizer=Vandal(path, how))
        assert "nothing was kept" in str(caught.value)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_compress_in_the_cli_fails_when_the_store_is_deleted(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append(history(30))
    monkeypatch.setattr(compaction.pipeline, "summarizer_from_recipe", lambda recipe: Vandal(path, how))
    line = one_line_error(runner().invoke(main, ["compress", "--store", str(path), "--budget", "800"]))
    assert f"was {how} while this command ran" in line and "nothing was kept" in line, line


# -- 6. a full disk is a full disk; a failing rollback hides nothing --------------------------------


def filled_store(path: Path, factory: type[sqlite3.Connection] = sqlite3.Connection) -> sqlite3.Connection:
    """Return a connection to a new store at ``path`` that can grow by two pages only."""
    Store(path).close()
    conn = sqlite3.connect(path, isolation_level=None, factory=factory)
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    return conn


def big_message() -> Message:
    return text("user", os.urandom(30000).hex())


def test_a_full_disk_during_append_says_the_disk_is_full(tmp_path: Path) -> None:
    conn = filled_store(tmp_path / "s.db")
    try:
        store = Store(connection=conn)
        store.append([text("user", "kept")])
        with pytest.raises(StoreError, match=r"append failed: the disk is full \(database or disk is full"):
            store.append([text("user", "lost"), big_message()])
        assert [m.text() for m in store.messages()] == ["kept"]  # nothing of the failed append
        assert store.append([text("assistant", "still works")]) == 1
    finally:
        conn.close()


class RollbackFails(sqlite3.Connection):
    """A connection whose rollbacks fail, as after SQLite rolled back on its own."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if sql.startswith("ROLLBACK"):
            raise sqlite3.OperationalError("cannot rollback - no transaction is active")
        return super().execute(sql, *args)


def test_a_failing_rollback_does_not_hide_the_error_it_undoes(tmp_path: Path) -> None:
    conn = filled_store(tmp_path / "s.db", RollbackFails)
    try:
        store = Store(connection=conn)
        with pytest.raises(StoreError, match="the disk is full") as full:
            store.append([big_message()])
        assert "cannot rollback" not in str(full.value)
        with pytest.raises(ImageError, match="invalid base64") as bad:  # raised inside the transaction
            store.append([text("user", "fine"), image_message("abcde")])
        assert "cannot rollback" not in str(bad.value)
    finally:
        conn.close()


@pytest.fixture
def tiny_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every store file opened by path can grow to 64 pages only (a full disk, for SQLite)."""
    connect = sqlite3.connect

    def limited(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(database, *args, **kwargs)
        if not kwargs.get("uri"):
            conn.execute("PRAGMA max_page_count = 64")
        return conn

    monkeypatch.setattr(sqlite3, "connect", limited)
    yield


def test_a_full_disk_during_import_is_one_line_naming_it(tmp_path: Path, tiny_disk: None) -> None:
    transcript = tmp_path / "big.jsonl"
    write_jsonl(transcript, [{"role": "user", "content": os.urandom(2000).hex()} for _ in range(200)])
    line = one_line_error(runner().invoke(main, ["import", str(transcript), "--store", str(tmp_path / "s.db")]))
    assert "append failed: the disk is full (database or disk is full" in line, line
    assert "cannot rollback" not in line


# -- 7. a read-only store and a failing summarizer -------------------------------------------------


def test_a_read_only_store_with_a_failing_summarizer_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append(history(30))
        store.facts()
    read_only = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    try:
        store = Store(connection=read_only)
        with pytest.raises(StoreError) as caught:
            compress_and_compile(store, Recipe(budget_tokens=500, chunk_target_tokens=300), summarizer=Failing())
        message = str(caught.value)
        assert "the store is read-only" in message and "connection failed" in message, message
        assert isinstance(caught.value, CompactionError) and not isinstance(caught.value, sqlite3.Error)
    finally:
        read_only.close()


def read_only_connect(connect: Callable[..., sqlite3.Connection]) -> Callable[..., sqlite3.Connection]:
    """Return ``sqlite3.connect`` opening every file read-only (as chmod 444 would, even for root)."""

    def read_only(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if kwargs.get("uri") or str(database) == ":memory:":
            return connect(database, *args, **kwargs)
        return connect(f"{Path(database).resolve().as_uri()}?mode=ro", *args, uri=True, **kwargs)

    return read_only


def test_compress_on_a_read_only_store_with_a_failing_summarizer_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append(history(30))
        store.facts()
    monkeypatch.setattr(compaction.pipeline, "summarizer_from_recipe", lambda recipe: Failing())
    monkeypatch.setattr(sqlite3, "connect", read_only_connect(sqlite3.connect))
    line = one_line_error(runner().invoke(main, ["compress", "--store", str(path), "--budget", "500"]))
    assert "the store is read-only" in line and "connection failed" in line, line


@pytest.mark.slow
def test_the_pi_example_cut_between_parallel_results_ends_as_one_import(tmp_path: Path) -> None:
    """The shipped pi session, cut where one tool result line follows another, then grown."""
    example = Path(__file__).parent.parent / "examples" / "pi__pi-mono__before-compaction.jsonl"
    lines = example.read_text(encoding="utf-8").splitlines(keepends=True)
    results = ['"role":"toolResult"' in line for line in lines]
    cuts = [i for i in range(1, len(lines)) if results[i - 1] and results[i]][:3]
    assert cuts, "the example has no parallel tool results"
    with Store(tmp_path / "once.db") as once:
        import_transcript(once, example)
    for cut in cuts:
        snapshot = tmp_path / f"pi-{cut}.jsonl"
        snapshot.write_text("".join(lines[:cut]), encoding="utf-8")
        with Store(tmp_path / f"grown-{cut}.db") as store:
            import_transcript(store, snapshot)
            import_transcript(store, example)
        assert store_rows(tmp_path / f"grown-{cut}.db") == store_rows(tmp_path / "once.db"), f"cut after line {cut}"
