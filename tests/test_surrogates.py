"""Lone surrogates: text that JSON can carry and UTF-8 cannot, kept exactly and never a crash.

Reproduction of issue 10: ``"a\\ud800b"`` in a JSON transcript gave a ``UnicodeEncodeError``
traceback in ``Message.fingerprint`` on import and run.  JSON decodes the escape to a lone
surrogate code point; hashing it, counting it, storing it as JSON in SQLite and rendering it
into a request must all work and give the same code point back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from strategies import payload_json

from compaction import Message, Store, load_transcript
from compaction.blocks import canonical_json, escape_lone_surrogates
from compaction.cli import main
from compaction.tokens.counting import count_text, message_text_tokens

LONE = ["a\ud800b", "\udfff", "x\udc00\ud800y", "end\udbff"]


def cli(*args: str | Path) -> Result:
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, [str(a) for a in args])


def transcript(tmp_path: Path) -> Path:
    # written with JSON escapes, as a transcript carries them: the file itself is valid UTF-8
    path = tmp_path / "surrogate.json"
    path.write_text(
        '{"messages": ['
        '{"role": "user", "content": "a\\ud800b"},'
        '{"role": "assistant", "content": [{"type": "text", "text": "seen \\udfff"},'
        ' {"type": "tool_use", "id": "c\\ud801", "name": "sh", "input": {"cmd": "echo \\udc00"}}]},'
        '{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c\\ud801", "content": "ok \\ud800"}]},'
        '{"role": "assistant", "content": "done"}]}',
        "utf-8",
    )
    return path


@pytest.mark.parametrize("text", LONE)
def test_canonical_json_escapes_lone_surrogates_and_parses_back(text: str) -> None:
    value = {"text": text, "list": [text, {"k": text}], text: 1}
    encoded = canonical_json(value)
    encoded.encode("utf-8")  # strict: no surrogate left
    assert json.loads(encoded) == value
    assert canonical_json({"t": "é中😀"}) == '{"t":"é中😀"}'  # other text stays as its characters


def test_escaping_leaves_json_without_surrogates_alone() -> None:
    text = json.dumps({"a": "plain é"}, ensure_ascii=False)
    assert escape_lone_surrogates(text) is text


def test_fingerprints_and_counts_of_lone_surrogates() -> None:
    """Before: ``UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800'``."""
    one = Message("user", ({"type": "text", "text": "a\ud800b"},))
    other = Message("user", ({"type": "text", "text": "a\ud801b"},))
    assert one.fingerprint() != other.fingerprint()
    assert one.fingerprint() != Message("user", ({"type": "text", "text": "a\ufffdb"},)).fingerprint()
    assert count_text("a\ud800b") == count_text("a\ufffdb")  # tiktoken counts it as U+FFFD
    assert message_text_tokens(one) > 0


@pytest.mark.parametrize("path_kind", ["memory", "file"])
def test_store_append_keeps_lone_surrogates_exactly(path_kind: str, tmp_path: Path) -> None:
    messages = [Message("user", ({"type": "text", "text": text},), meta={"note": text}) for text in LONE]
    messages.append(
        Message(
            "assistant",
            ({"type": "tool_use", "id": "c\ud800", "name": "n\udfff", "input": {"k\ud800": "v\udc00"}},),
        )
    )
    path = ":memory:" if path_kind == "memory" else tmp_path / "store.sqlite"
    store = Store(path)
    try:
        assert store.append(messages, chain_seed="t") == len(messages)
        assert store.append(messages, chain_seed="t") == 0  # the same fingerprints: nothing twice
        stored = store.messages(0, len(messages))
        assert [m.content for m in stored] == [m.content for m in messages]
    finally:
        store.close()


def test_import_keeps_lone_surrogates(tmp_path: Path) -> None:
    parsed = load_transcript(transcript(tmp_path))
    assert parsed.messages[0].content[0]["text"] == "a\ud800b"
    store_path = tmp_path / "store.sqlite"
    result = cli("import", transcript(tmp_path), "--store", store_path)
    assert result.exit_code == 0, result.stderr
    store = Store(store_path)
    try:
        assert [m.content for m in store.messages(0, 4)] == [m.content for m in parsed.messages]
    finally:
        store.close()


def test_run_ships_lone_surrogates_as_json_escapes(tmp_path: Path) -> None:
    """Before: a ``UnicodeEncodeError`` traceback from ``compaction run``."""
    out = tmp_path / "request.json"
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["run", str(transcript(tmp_path)), "--budget", "4000", "--out", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    body = payload_json(out.read_bytes())
    assert body["messages"][0]["content"] == "a\ud800b"
    assert b"a\\ud800b" in out.read_bytes()
