# ruff: noqa: F811  (the imported fake_anthropic fixture is taken as an argument)
"""The Anthropic Messages summarizer, over the shared HTTP transport, against a loopback fake.

Every test runs the summarizer (directly, or inside :class:`~compaction.compactor.Compactor`)
against :mod:`fake_anthropic_server` and asserts on what reached the transport (the raw
request bytes and headers the server captured) and on what the store holds afterwards.
Waits are recorded by an injected ``sleep``, never slept.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_anthropic_server import FAILURE_MARK, FakeAnthropic, fake_anthropic  # noqa: F401

from compaction.blocks import Message
from compaction.compactor import Compactor, compression_image_settings
from compaction.errors import (
    CompactionError,
    RecipeError,
    SummarizerError,
    SummarizerRefused,
    SummarizerUnavailable,
)
from compaction.recipe import Recipe, SummarizerSettings, recipe_from_mapping
from compaction.store import Store
from compaction.summarizers.anthropic import AnthropicMessagesSummarizer
from compaction.summarizers.factory import summarizer_from_recipe
from compaction.wire import GatedRequest, OutboundRequest, gate

KEY_ENV = "COMPACTION_TEST_ANTHROPIC_KEY"
SECRET = "sk-ant-fake-" + "Qv7pL2" * 6  # a recognisable key that must never leave the header
MODEL = "claude-fake-haiku"


# -- helpers ------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "store.db")
    try:
        yield s
    finally:
        s.close()


class Waits(list[float]):
    """An injected ``sleep`` that records the waits instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def summarizer(fake: FakeAnthropic, waits: Waits | None = None, **overrides: Any) -> AnthropicMessagesSummarizer:
    options: dict[str, Any] = {
        "api_key_env": KEY_ENV,
        "timeout_seconds": 2.0,
        "max_retries": 3,
        "backoff_base": 0.001,
        "backoff_max": 5.0,
        "sleep": waits if waits is not None else Waits(),
    }
    options.update(overrides)
    return AnthropicMessagesSummarizer(fake.base_url, MODEL, **options)


def gated(
    text: str = "hello",
    *,
    model: str = MODEL,
    max_output_tokens: int | None = 50,
    format: Any = "anthropic",
) -> GatedRequest:
    """Gate a one-message request the way the compactor does: the summarizer's format, model, cap."""
    request = OutboundRequest("l1", "Summarize.", (("user", ({"type": "text", "text": text},)),))
    return gate(request, compression_image_settings(Recipe()), format=format, model=model,
                max_output_tokens=max_output_tokens)


def conversation(rounds: int, first: int = 0, filler: int = 12) -> list[Message]:
    """Tool rounds of plain text: a prompt, a call, its result, an answer."""
    out: list[Message] = []
    for i in range(first, first + rounds):
        lines = "\n".join(f"line {j}: value_{i}_{j} = compute({j})" for j in range(filler))
        out += [
            Message("user", ({"type": "text", "text": f"Please fix bug {i} in src/mod_{i}.py"},)),
            Message("assistant", (
                {"type": "text", "text": f"I'll read src/mod_{i}.py first."},
                {"type": "tool_use", "id": f"call_{i}", "name": "read_file",
                 "input": {"path": f"src/mod_{i}.py"}},
            )),
            Message("user", ({"type": "tool_result", "tool_use_id": f"call_{i}", "content": lines},)),
            Message("assistant", (
                {"type": "text", "text": f"Fixed bug {i}: the loop bound was off by one."},
            )),
        ]
    return out


def text_recipe(**overrides: Any) -> Recipe:
    base: dict[str, Any] = {
        "chunk_target_tokens": 150,
        "chunk_min_messages": 2,
        "merge_fanout": 3,
        "summary_max_tokens": 120,
        "summarizer_context_tokens": 6000,
    }
    base.update(overrides)
    return Recipe(**base)


def db_bytes(path: Path) -> bytes:
    """Every byte of an SQLite store on disk, the WAL and shared-memory files included."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def assert_clean(store: Store) -> None:
    """No stored summary is empty or carries the fake server's error text or the key."""
    for summary in store.summaries():
        assert summary.text.strip()
        assert FAILURE_MARK not in summary.text
        assert FAILURE_MARK not in json.dumps(summary.provenance)
        assert SECRET not in json.dumps(summary.provenance)


def _chain(err: BaseException) -> str:
    texts = []
    current: BaseException | None = err
    while current is not None:
        texts += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


# -- the request on the wire --------------------------------------------------------------
def test_the_sent_body_is_the_gated_payload_with_native_headers(fake_anthropic: FakeAnthropic) -> None:
    request = gated("Ünïcode text, \"quotes\" and </script>", max_output_tokens=123)
    with summarizer(fake_anthropic) as s:
        result = s.summarize(request, kind="l1")
    (sent,) = fake_anthropic.requests
    assert sent.body == request.payload  # byte for byte: nothing set or re-serialized after the gate
    body = sent.json()
    assert body["model"] == MODEL and body["max_tokens"] == 123 and body["system"] == "Summarize."
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    assert result.text.startswith("Asked:\n- summarize 1 messages") and result.text == result.text.strip()
    prov = result.provenance
    assert prov["request_sha256"] == hashlib.sha256(sent.body).hexdigest()
    assert hashlib.sha256(sent.body).hexdigest()[:12] in result.text
    assert prov["usage"] == {"input_tokens": max(1, len(sent.body) // 4), "output_tokens": 17,
                             "cache_read_input_tokens": 0}
    assert prov["stop_reason"] == "end_turn" and prov["summarizer"] == "anthropic-http"
    assert prov["model"] == MODEL and prov["base_url"] == fake_anthropic.base_url
    assert prov["kind"] == "l1" and prov["attempts"] == 1
    assert SECRET not in json.dumps(prov) and SECRET not in repr(s)


def test_the_version_header_and_the_key_variable_are_configurable(
    fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET + "-default")
    with AnthropicMessagesSummarizer(fake_anthropic.base_url, MODEL, anthropic_version="2099-01-01",
                                     sleep=Waits()) as s:
        s.summarize(gated(), kind="l1")
    (sent,) = fake_anthropic.requests
    assert sent.headers["anthropic-version"] == "2099-01-01"
    assert sent.headers["x-api-key"] == SECRET + "-default"  # ANTHROPIC_API_KEY by default
    with pytest.raises(RecipeError, match="anthropic_version"):
        AnthropicMessagesSummarizer(fake_anthropic.base_url, MODEL, anthropic_version="2023-06-01\r\nx: y")


def test_no_key_sends_no_key_header() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"type": "message", "content": [{"type": "text", "text": "ok"}],
                                         "stop_reason": "end_turn"})

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        s = AnthropicMessagesSummarizer("http://gateway.invalid", MODEL, api_key_env=None, client=client)
        assert s.summarize(gated(), kind="l1").text == "ok"
    assert "x-api-key" not in seen[0].headers and "authorization" not in seen[0].headers


@pytest.mark.parametrize("suffix, path", [
    ("", "/v1/messages"),
    ("/", "/v1/messages"),
    ("/v1", "/v1/messages"),
    ("/v1/", "/v1/messages"),
    ("/v1?beta=true", "/v1/messages?beta=true"),
])
def test_the_endpoint_gets_one_v1(fake_anthropic: FakeAnthropic, suffix: str, path: str) -> None:
    with AnthropicMessagesSummarizer(fake_anthropic.base_url + suffix, MODEL, api_key_env=KEY_ENV,
                                     sleep=Waits()) as s:
        result = s.summarize(gated(), kind="l1")
    assert fake_anthropic.requests[0].path == path
    assert result.provenance["base_url"] == fake_anthropic.base_url + suffix.split("?")[0].rstrip("/")


@pytest.mark.parametrize("options, message", [
    ({"format": "openai"}, r"sends Anthropic Messages bodies \('anthropic'\); the gated l1 request is 'openai'"),
    ({"model": "claude-other"}, r"runs model 'claude-fake-haiku'; the gated l1 request names 'claude-other'"),
])
def test_a_request_gated_for_another_format_or_model_is_refused_before_sending(
    fake_anthropic: FakeAnthropic, options: dict[str, Any], message: str
) -> None:
    with summarizer(fake_anthropic) as s, pytest.raises(SummarizerError, match=message) as caught:
        s.summarize(gated(**options), kind="l1")
    assert type(caught.value) is SummarizerError and fake_anthropic.requests == []


def test_a_request_gated_with_another_cap_is_refused_before_sending(fake_anthropic: FakeAnthropic) -> None:
    with summarizer(fake_anthropic, max_output_tokens=64) as s:
        with pytest.raises(SummarizerError, match=r"caps answers at 64 tokens.*carries 50"):
            s.summarize(gated(max_output_tokens=50), kind="l1")
        assert fake_anthropic.requests == []
        s.summarize(gated(max_output_tokens=s.max_output_tokens), kind="l1")
    assert fake_anthropic.requests[0].json()["max_tokens"] == 64


# -- answers ------------------------------------------------------------------------------
def test_text_blocks_are_joined_and_other_blocks_ignored(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("blocks")
    with summarizer(fake_anthropic) as s:
        result = s.summarize(gated(), kind="merge")
    assert result.text.startswith("Asked:\n- summarize 1 messages") and "\nDone:\n- recorded" in result.text
    assert FAILURE_MARK not in result.text  # the thinking block is not part of the summary
    assert result.provenance["kind"] == "merge"


def test_stop_sequence_is_a_finished_answer(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("stop_sequence")
    with summarizer(fake_anthropic) as s:
        assert s.summarize(gated(), kind="l1").provenance["stop_reason"] == "stop_sequence"


@pytest.mark.parametrize("mode, code, reason", [
    ("max_tokens", "max_tokens", "cut off before its end"),
    ("refusal", "refusal", "the model refused"),
    ("empty", "empty", "no text"),
])
def test_unusable_answers_are_refused(fake_anthropic: FakeAnthropic, mode: str, code: str, reason: str) -> None:
    fake_anthropic.set_mode(mode)
    with summarizer(fake_anthropic) as s, pytest.raises(SummarizerRefused, match=reason) as caught:
        s.summarize(gated(), kind="l1")
    assert caught.value.code == code and FAILURE_MARK not in str(caught.value)
    assert len(fake_anthropic.requests) == 1  # refused, not retried


def test_other_stop_reasons_are_refused_as_unfinished() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"type": "message", "stop_reason": "pause_turn",
                                         "content": [{"type": "text", "text": "half"}]})

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        s = AnthropicMessagesSummarizer("http://x.invalid", MODEL, api_key_env=KEY_ENV, client=client)
        with pytest.raises(SummarizerRefused, match="did not finish.*'pause_turn'") as caught:
            s.summarize(gated(), kind="l1")
    assert caught.value.code == "pause_turn"


@pytest.mark.parametrize("content, message", [
    (b"<html>gateway</html>", "not JSON"),
    (b'["a list"]', "not a JSON object"),
    (b'{"type": "message", "stop_reason": "end_turn"}', "no content list"),
])
def test_malformed_answers_are_errors(content: bytes, message: str) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=content))
    with httpx.Client(transport=transport) as client:
        s = AnthropicMessagesSummarizer("http://x.invalid", MODEL, api_key_env=KEY_ENV, client=client)
        with pytest.raises(SummarizerError, match=message) as caught:
            s.summarize(gated(), kind="l1")
    assert type(caught.value) is SummarizerError


# -- errors -------------------------------------------------------------------------------
def test_prompt_too_long_is_refused(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("prompt_too_long", max_chars=10)
    with summarizer(fake_anthropic) as s, pytest.raises(SummarizerRefused, match="prompt is too long") as caught:
        s.summarize(gated(), kind="l1")
    assert caught.value.status == 400 and caught.value.code == "invalid_request_error"
    assert "the chunk will be split" in str(caught.value) and len(fake_anthropic.requests) == 1


def test_request_too_large_is_refused(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("413", max_chars=10)
    with summarizer(fake_anthropic) as s, pytest.raises(SummarizerRefused, match="HTTP 413") as caught:
        s.summarize(gated(), kind="l1")
    assert caught.value.status == 413 and caught.value.code == "request_too_large"


@pytest.mark.parametrize("mode, retry_after, waited", [
    ("429", "2", 2.0),
    ("529", "3", 3.0),
    ("529", "", 0.001),  # no retry-after: the backoff
    ("500", "", 0.001),
])
def test_transient_errors_are_retried_then_succeed(
    fake_anthropic: FakeAnthropic, mode: str, retry_after: str, waited: float
) -> None:
    fake_anthropic.set_mode(mode, times=1, retry_after=retry_after)
    waits = Waits()
    with summarizer(fake_anthropic, waits) as s:
        result = s.summarize(gated(), kind="l1")
    assert fake_anthropic.statuses() == [int(mode), 200] and waits == [waited]
    assert result.provenance["attempts"] == 2 and FAILURE_MARK not in result.text
    first, second = fake_anthropic.requests
    assert first.body == second.body  # the retry sends the same bytes


def test_exhausted_retries_are_unavailable(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("529", times=10**6, retry_after="")
    waits = Waits()
    with summarizer(fake_anthropic, waits, max_retries=2, backoff_base=0.01) as s:
        with pytest.raises(SummarizerUnavailable, match="no summary after 3 attempt") as caught:
            s.summarize(gated(), kind="l1")
    assert caught.value.attempts == 3 and "HTTP 529 overloaded_error" in str(caught.value)
    assert waits == [0.01, 0.02] and fake_anthropic.statuses() == [529, 529, 529]


def test_a_spend_limit_and_a_long_retry_after_are_not_waited_out(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("spend_limit")
    waits = Waits()
    with summarizer(fake_anthropic, waits) as s:
        with pytest.raises(SummarizerUnavailable, match="spend limit is reached; waiting will not help"):
            s.summarize(gated(), kind="l1")
        fake_anthropic.set_mode("429", times=5, retry_after="600")
        with pytest.raises(SummarizerUnavailable, match="retry after 600 s, more than backoff_max"):
            s.summarize(gated(), kind="l1")
    assert waits == [] and len(fake_anthropic.requests) == 2


@pytest.mark.parametrize("mode, status, kind", [
    ("401", 401, "authentication_error"),
    ("403", 403, "permission_error"),
])
def test_auth_errors_name_the_variable_never_the_key(
    fake_anthropic: FakeAnthropic, mode: str, status: int, kind: str
) -> None:
    fake_anthropic.set_mode(mode)
    with summarizer(fake_anthropic) as s, pytest.raises(SummarizerError) as caught:
        s.summarize(gated(), kind="l1")
    message = str(caught.value)
    assert type(caught.value) is SummarizerError
    assert f"HTTP {status}" in message and kind in message and f"check the key in ${KEY_ENV}" in message
    assert SECRET not in _chain(caught.value) and "Qv7pL2" not in _chain(caught.value)
    assert len(fake_anthropic.requests) == 1  # not retried


def test_not_found_names_the_model(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("404")
    with summarizer(fake_anthropic) as s, pytest.raises(SummarizerError, match=f"model name '{MODEL}'"):
        s.summarize(gated(), kind="l1")


@pytest.mark.parametrize("mode, options, error", [
    ("401", {}, SummarizerError),
    ("403", {}, SummarizerError),
    ("500", {"times": 99}, SummarizerUnavailable),
    ("529", {"times": 99, "retry_after": "0"}, SummarizerUnavailable),
    ("timeout", {"times": 99, "delay": 0.4}, SummarizerUnavailable),
    ("prompt_too_long", {"max_chars": 10}, SummarizerRefused),
    ("refusal", {}, SummarizerRefused),
    ("huge", {"size": 5000}, SummarizerError),
])
def test_the_key_never_appears_in_an_error(
    fake_anthropic: FakeAnthropic, mode: str, options: dict[str, Any], error: type[Exception]
) -> None:
    fake_anthropic.set_mode(mode, **options)
    with summarizer(fake_anthropic, max_retries=1, timeout_seconds=0.2, max_response_bytes=1000) as s:
        with pytest.raises(error) as caught:
            s.summarize(gated(), kind="l1")
    assert type(caught.value) is error and isinstance(caught.value, CompactionError)
    assert SECRET not in _chain(caught.value) and "Qv7pL2" not in _chain(caught.value)
    assert fake_anthropic.base_url in str(caught.value)


def test_a_server_echoing_the_key_into_an_answer_does_not_reach_the_provenance() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        key = request.headers["x-api-key"]
        return httpx.Response(200, json={
            "type": "message", "model": f"served-by-{key}", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "Asked:\n- ok"}], "usage": {"note": key, "input_tokens": 3},
        })

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        s = AnthropicMessagesSummarizer("http://x.invalid", MODEL, api_key_env=KEY_ENV, client=client)
        result = s.summarize(gated(), kind="l1")
    assert SECRET not in json.dumps(result.provenance) and "[redacted]" in result.provenance["served_model"]
    assert result.provenance["usage"] == {"note": "[redacted]", "input_tokens": 3}


# -- bounded responses --------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["huge", "huge_unsized"])
def test_an_oversized_response_is_refused_without_reading_it_all(fake_anthropic: FakeAnthropic, mode: str) -> None:
    fake_anthropic.set_mode(mode, size=8 * 1024 * 1024)
    with summarizer(fake_anthropic, max_response_bytes=64 * 1024) as s:
        started = time.monotonic()
        with pytest.raises(SummarizerError, match=r"65536 bytes \(max_response_bytes\)") as caught:
            s.summarize(gated(), kind="l1")
        assert time.monotonic() - started < 5
    assert type(caught.value) is SummarizerError and len(fake_anthropic.requests) == 1  # not retried
    declared = "declares" in str(caught.value)
    assert declared == (mode == "huge")  # a declared size is refused before reading


def test_the_default_bound_is_a_few_megabytes(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("huge_unsized", size=5 * 1024 * 1024)
    with summarizer(fake_anthropic) as s, pytest.raises(SummarizerError, match="4194304 bytes"):
        s.summarize(gated(), kind="l1")


def test_a_trickling_response_is_cut_off_at_the_timeout(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("trickle", size=400, delay=0.05)  # ~25 s if read to the end
    waits = Waits()
    with summarizer(fake_anthropic, waits, timeout_seconds=0.5, max_retries=1) as s:
        started = time.monotonic()
        with pytest.raises(SummarizerUnavailable, match=r"timed out after 0.5 s") as caught:
            s.summarize(gated(), kind="l1")
        elapsed = time.monotonic() - started
    assert elapsed < 3 and caught.value.attempts == 2 and len(waits) == 1


def test_a_silent_server_times_out_and_is_retried(fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.set_mode("timeout", times=1, delay=1.0)
    with summarizer(fake_anthropic, timeout_seconds=0.25) as s:
        result = s.summarize(gated(), kind="l1")
    assert result.provenance["attempts"] == 2 and fake_anthropic.requests[0].delayed == 1.0


# -- lifecycle and the factory ------------------------------------------------------------
def test_close_closes_the_owned_client_only(fake_anthropic: FakeAnthropic) -> None:
    s = summarizer(fake_anthropic)
    s.close()
    with pytest.raises(SummarizerError, match="is closed"):
        s.summarize(gated(), kind="l1")
    assert fake_anthropic.requests == []
    with httpx.Client() as client:
        borrowed = AnthropicMessagesSummarizer(fake_anthropic.base_url, MODEL, api_key_env=KEY_ENV, client=client)
        borrowed.close()
        assert not client.is_closed  # the caller's client is the caller's to close


def test_construction_errors() -> None:
    with pytest.raises(RecipeError, match="model: required"):
        AnthropicMessagesSummarizer()
    with pytest.raises(RecipeError, match="credentials"):
        AnthropicMessagesSummarizer("https://user:pw@api.anthropic.com", MODEL, api_key_env=KEY_ENV)
    with pytest.raises(RecipeError, match="COMPACTION_TEST_UNSET_VARIABLE is not set"):
        AnthropicMessagesSummarizer(model=MODEL, api_key_env="COMPACTION_TEST_UNSET_VARIABLE")
    with pytest.raises(RecipeError, match="max_response_bytes"):
        AnthropicMessagesSummarizer(model=MODEL, api_key_env=KEY_ENV, max_response_bytes=0)


def test_factory_builds_the_anthropic_summarizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    recipe = recipe_from_mapping({"summarizer": {"kind": "anthropic", "model": MODEL, "max_output_tokens": 300,
                                                 "timeout_seconds": 7, "max_retries": 1}})
    made = summarizer_from_recipe(recipe)
    try:
        assert isinstance(made, AnthropicMessagesSummarizer)
        assert (made.model, made.max_output_tokens, made.timeout_seconds, made.max_retries) == (MODEL, 300, 7, 1)
        assert made.api_key_env == "ANTHROPIC_API_KEY" and str(made.endpoint) == "https://api.anthropic.com/v1/messages"
        assert made.request_format == "anthropic"
    finally:
        made.close()
    with pytest.raises(RecipeError, match=r"key 'summarizer\.model': required when summarizer\.kind = 'anthropic'"):
        SummarizerSettings(kind="anthropic")
    unset = SummarizerSettings(kind="anthropic", model=MODEL, api_key_env="COMPACTION_TEST_UNSET_VARIABLE")
    with pytest.raises(RecipeError, match=r"<summarizer>: key 'summarizer\.api_key_env': environment variable"):
        summarizer_from_recipe(Recipe(summarizer=unset))
    with pytest.raises(RecipeError, match=r"key 'summarizer\.kind'.*did you mean 'anthropic'"):
        SummarizerSettings(kind="anthropc", model=MODEL)


# -- compaction through the Anthropic summarizer ------------------------------------------
def test_compactor_end_to_end(fake_anthropic: FakeAnthropic, store: Store, tmp_path: Path) -> None:
    store.append(conversation(10))
    recipe = text_recipe()
    with summarizer(fake_anthropic) as s:
        report = Compactor(store, recipe, summarizer=s).tick()
    l1 = store.summaries(level=1)
    assert report.l1_added == len(l1) >= 3 and report.failures == 0 and not store.failures()
    assert report.merged.get(2, 0) >= 1 and store.summaries(level=2)
    sent = {hashlib.sha256(r.body).hexdigest(): r for r in fake_anthropic.requests}
    assert len(sent) == len(fake_anthropic.requests) == report.requests
    position = 0
    for summary in l1:
        assert summary.start_seq == position
        position = summary.end_seq
    for summary in store.summaries():
        prov = summary.provenance
        assert prov["summarizer"] == "anthropic-http" and prov["model"] == MODEL
        assert prov["stop_reason"] == "end_turn" and prov["usage"]["output_tokens"] == 17
        request = sent[prov["request_sha256"]]  # the hash is of the bytes that were sent
        body = request.json()
        assert body["model"] == MODEL and body["max_tokens"] == recipe.summary_max_tokens
        assert isinstance(body["system"], str) and body["messages"][0]["role"] == "user"
        assert all(m["role"] != "system" for m in body["messages"])
        assert request.headers["x-api-key"] == SECRET and "authorization" not in request.headers
        assert prov["request_sha256"][:12] in summary.text
    assert_clean(store)
    blob = db_bytes(tmp_path / "store.db")
    assert SECRET.encode() not in blob and b"Qv7pL2" not in blob


def test_compactor_splits_a_chunk_the_api_calls_too_long(fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    recipe = text_recipe(chunk_target_tokens=900, chunk_min_messages=8)
    messages = conversation(6, filler=20)
    with Store(tmp_path / "reference.db") as reference, summarizer(fake_anthropic) as s:
        reference.append(messages)
        Compactor(reference, recipe, summarizer=s).tick()
        expected = [(x.start_seq, x.end_seq) for x in reference.summaries(level=1)]
        whole = max(len(r.body) for r in fake_anthropic.requests)
    assert expected
    limit = whole * 2 // 3  # whole chunks are refused; their halves fit
    fake_anthropic.requests.clear()
    fake_anthropic.set_mode("prompt_too_long", max_chars=limit)
    with Store(tmp_path / "split.db") as split, summarizer(fake_anthropic) as s:
        split.append(messages)
        report = Compactor(split, recipe, summarizer=s).tick()
        l1 = split.summaries(level=1)
        assert [(x.start_seq, x.end_seq) for x in l1] == expected and not split.failures()
        assert 400 in fake_anthropic.statuses() and report.requests > len(expected)
        assert any(x.provenance.get("parts") for x in l1)
        assert_clean(split)


def test_compactor_records_a_failure_when_unavailable(fake_anthropic: FakeAnthropic, store: Store) -> None:
    store.append(conversation(3))
    fake_anthropic.set_mode("529", times=10**6, retry_after="")
    with summarizer(fake_anthropic, max_retries=1) as s:
        report = Compactor(store, text_recipe(), summarizer=s).tick()
    assert report.failures == 1 and report.l1_added == 0 and store.summaries() == []
    (failure,) = store.failures()
    assert "HTTP 529" in failure["reason"] and SECRET not in failure["reason"]
