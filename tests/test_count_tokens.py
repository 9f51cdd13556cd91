"""Anthropic's count_tokens endpoint as an exact source of calibration samples (a loopback fake, never the network)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compaction.blocks import Message
from compaction.calibration import correction_for
from compaction.cli import main
from compaction.count_tokens import CountTokensError, anthropic_count_tokens, probe_with_count_tokens
from compaction.recipe import Recipe
from compaction.store import Store

KEY_ENV = "COMPACTION_TEST_ANTHROPIC_KEY"
SECRET = "sk-ant-fake-" + "Wq8" * 8


class FakeCountTokens:
    """``POST /v1/messages/count_tokens`` on loopback: ``input_tokens`` = the body's JSON length // 3.

    ``status`` other than 200 answers an Anthropic error body; every request is kept.
    """

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.status = 200
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if fake.status != 200:
                    answer = {
                        "type": "error",
                        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
                    }
                else:
                    answer = {"input_tokens": fake.count(body)}
                data = json.dumps(answer).encode()
                self.send_response(fake.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def count(body: dict[str, Any]) -> int:
        return len(json.dumps(body, sort_keys=True)) // 3


@pytest.fixture
def fake() -> Iterator[FakeCountTokens]:
    server = FakeCountTokens()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)


def history(turns: int) -> list[Message]:
    out = []
    for i in range(turns):
        out.append(
            Message("user", ({"type": "text", "text": f"question {i}: " + "why does the cache miss " * 20},))
        )
        out.append(
            Message("assistant", ({"type": "text", "text": f"answer {i}: " + "the key changed again " * 20},))
        )
    return out


def test_the_endpoint_gets_only_its_fields_and_the_key_in_its_header(fake: FakeCountTokens) -> None:
    payload = json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 512,
            "stream": False,
            "system": "terse",
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    count = anthropic_count_tokens(payload, base_url=fake.base_url, api_key_env=KEY_ENV)
    ((path, headers, body),) = fake.received
    assert path == "/v1/messages/count_tokens"
    assert body == {
        "model": "claude-sonnet-4-5",
        "system": "terse",
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert count == FakeCountTokens.count(body)
    assert headers["x-api-key"] == SECRET and headers["anthropic-version"] == "2023-06-01"


def test_errors_are_one_typed_line_without_the_key(
    fake: FakeCountTokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = b'{"model": "m", "messages": []}'
    fake.status = 401
    with pytest.raises(CountTokensError, match="HTTP 401: invalid x-api-key") as caught:
        anthropic_count_tokens(payload, base_url=fake.base_url, api_key_env=KEY_ENV)
    assert SECRET not in str(caught.value)
    monkeypatch.delenv(KEY_ENV)
    sent = len(fake.received)
    with pytest.raises(CountTokensError, match=f"set {KEY_ENV} \\(nothing was sent\\)"):
        anthropic_count_tokens(payload, base_url=fake.base_url, api_key_env=KEY_ENV)
    assert len(fake.received) == sent
    assert isinstance(caught.value, RuntimeError)


def test_probing_records_one_sample_per_distinct_request_and_fits_them(fake: FakeCountTokens) -> None:
    with Store(":memory:") as store:
        store.append(history(30))
        made = probe_with_count_tokens(
            store, Recipe(), base_url=fake.base_url, api_key_env=KEY_ENV, shares=(1.0, 1.0)
        )
        records = store.usage_records()
        assert [r.id for r in records] == made and len(made) == 1  # the same request twice is counted once
        (record,) = records
        ((_path, _headers, body),) = fake.received
        assert (record.model, record.request_format, record.source) == (
            "claude-sonnet-4-5",
            "anthropic",
            "count_tokens",
        )
        assert record.input_tokens == FakeCountTokens.count(body) and record.compiled_tokens > 0
        assert correction_for(store, "claude-sonnet-4-5") is None  # one sample: below the minimum


def test_calibrate_count_tokens_records_then_prints(fake: FakeCountTokens, tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with Store(db) as store:
        store.append(history(30))
    result = CliRunner().invoke(
        main,
        [
            "calibrate",
            "--store",
            str(db),
            "--count-tokens",
            fake.base_url,
            "--api-key-env",
            KEY_ENV,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["model"], row["samples"]) == ("claude-sonnet-4-5", len(fake.received)) and row["samples"] >= 1
    with Store(db, create=False) as store:
        assert [r.input_tokens for r in store.usage_records()] == [
            FakeCountTokens.count(b) for _p, _h, b in fake.received
        ]
    missing = CliRunner().invoke(main, ["calibrate", "--count-tokens", fake.base_url])
    assert missing.exit_code == 2 and "--store" in missing.output


def test_a_hostile_server_cannot_show_the_key_nor_fill_memory_and_urls_lose_their_credentials() -> None:
    import httpx

    from compaction.count_tokens import MAX_ANSWER_BYTES

    payload = b'{"model": "m", "messages": []}'

    def echo(request: httpx.Request) -> httpx.Response:  # puts the key it got in its error text
        key = request.headers["x-api-key"]
        return httpx.Response(401, json={"error": {"message": f"invalid x-api-key: {key}"}})

    with pytest.raises(CountTokensError, match="HTTP 401: invalid x-api-key") as caught:
        anthropic_count_tokens(
            payload, base_url="http://user:pw@127.0.0.1:9/v1", api_key_env=KEY_ENV, transport=httpx.MockTransport(echo)
        )
    assert SECRET not in str(caught.value) and "[redacted]" in str(caught.value)
    assert "user:pw" not in str(caught.value) and "127.0.0.1:9" in str(caught.value)

    def huge(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"input_tokens": 1' + b" " * (MAX_ANSWER_BYTES + 10) + b"}")

    with pytest.raises(CountTokensError, match="the answer is over 1,048,576 bytes; nothing was recorded"):
        anthropic_count_tokens(
            payload, base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV, transport=httpx.MockTransport(huge)
        )
