# ruff: noqa: F811  (the imported provider fixture is taken as an argument)
"""A summarizer server that misbehaves on purpose: every attempt is bounded, every answer checked.

Each test drives both HTTP providers (OpenAI Chat, Anthropic Messages) against their loopback
fakes (issue 10, "The HTTP summarizer"): a server that trickles its head or body is cut off
at ``timeout_seconds`` per attempt; a body over ``max_response_bytes`` (sized, unsized,
chunked or compressed) is refused without being read or inflated whole; a summary over its
token bound is refused so the compactor splits; a 200 that carries an error is an error; and
malformed answers (a redirect loop, invalid UTF-8, a list, deep nesting, huge parts, a
lone surrogate, odd ``Retry-After`` values) each give one clear error, never a traceback.
"""

from __future__ import annotations

import gzip
import json
import math
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai_server import FAILURE_MARK, Raw
from http_providers import (  # noqa: F401
    MODEL,
    Provider,
    Waits,
    conversation,
    provider,
    text_recipe,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.compactor import Compactor
from compaction.errors import CompactionError, SummarizerError, SummarizerRefused, SummarizerUnavailable
from compaction.store import Store
from compaction.summarizers._http import retry_after_seconds, summary_token_bound
from compaction.summarizers.factory import summarizer_from_recipe
from compaction.tokens.counting import count_text

JSON = {"Content-Type": "application/json"}


def raises_clearly(provider: Provider, error: type[Exception], match: str, **options: Any) -> SummarizerError:
    """Summarize once; return the error, which must be exactly ``error`` and match ``match``."""
    with provider.summarizer(**options) as s, pytest.raises(error, match=match) as caught:
        s.summarize(provider.gated(), kind="l1")
    assert type(caught.value) is error and isinstance(caught.value, CompactionError)
    assert "Traceback" not in str(caught.value)
    return caught.value  # type: ignore[return-value]


# -- 1. the deadline of an attempt ---------------------------------------------------------
@pytest.mark.parametrize("mode", ["trickle_head", "trickle"])
def test_a_trickling_server_is_cut_off_at_the_deadline(provider: Provider, mode: str) -> None:
    # the head is ~1.3 KB (~65 s at one byte per 50 ms); the body ~400 bytes (~20 s)
    provider.fake.set_mode(mode, delay=0.05, size=1200)
    waits = Waits()
    request = provider.gated()
    with provider.summarizer(waits, timeout_seconds=0.5, max_retries=1) as s:
        started = time.monotonic()
        with pytest.raises(SummarizerUnavailable, match=r"timed out after 0.5 s") as caught:
            s.summarize(request, kind="l1")
        elapsed = time.monotonic() - started
    assert caught.value.attempts == 2 and len(waits) == 1 and len(provider.fake.requests) == 2
    assert elapsed < 2 * 0.5 + 1.0, elapsed


def test_the_deadline_holds_through_the_compactor_and_the_recipe(provider: Provider, tmp_path: Path) -> None:
    provider.fake.set_mode("trickle_head", delay=0.05, size=1200)
    recipe = text_recipe(provider, summarizer=provider.settings(timeout_seconds=1, max_retries=1))
    with Store(tmp_path / "store.db") as store:
        store.append(conversation(3))
        summarizer = summarizer_from_recipe(recipe)
        try:
            started = time.monotonic()
            report = Compactor(store, recipe, summarizer=summarizer).tick()
            elapsed = time.monotonic() - started
        finally:
            summarizer.close()
        assert report.failures == 1 and store.summaries() == []
        (failure,) = store.failures()
    assert "no summary after 2 attempt(s): timed out after 1 s" in failure["reason"]
    assert elapsed < 2 * 1 + 0.5 + 1.5, elapsed  # two attempts, one backoff of 0.5 s, slack


def test_the_deadline_also_bounds_a_borrowed_client(provider: Provider) -> None:
    provider.fake.set_mode("trickle_head", delay=0.05, size=1200)
    provider.gated()  # the encoding is loaded before the clock starts
    with httpx.Client() as client:
        started = time.monotonic()
        raises_clearly(provider, SummarizerUnavailable, "timed out after 0.5 s", client=client,
                       timeout_seconds=0.5, max_retries=0)
        assert time.monotonic() - started < 1.5
        provider.fake.set_mode("ok")
        with provider.summarizer(client=client) as s:  # the client still works afterwards
            assert s.summarize(provider.gated(), kind="l1").text.startswith("Asked:")


# -- 2. the size of an answer ---------------------------------------------------------------
@pytest.mark.parametrize("mode", ["huge", "huge_unsized", "huge_chunked"])
def test_an_oversized_body_is_refused_without_reading_it_all(provider: Provider, mode: str) -> None:
    provider.fake.set_mode(mode, size=8 * 1024 * 1024)
    started = time.monotonic()
    err = raises_clearly(provider, SummarizerError, r"65536 bytes \(max_response_bytes\)",
                         max_response_bytes=64 * 1024)
    assert time.monotonic() - started < 5 and len(provider.fake.requests) == 1  # not retried
    assert ("declares" in str(err)) == (mode == "huge")


def test_a_gzip_bomb_is_refused_at_the_bound_without_inflating_it(provider: Provider) -> None:
    bomb = gzip.compress(b" " * (64 * 1024 * 1024), 9)  # 64 MB of spaces in ~64 KB
    provider.script(lambda request, headers: Raw(200, {**JSON, "Content-Encoding": "gzip"}, bomb))
    tracemalloc.start()
    try:
        raises_clearly(provider, SummarizerError, r"1048576 bytes \(max_response_bytes\)",
                       max_response_bytes=1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 * 1024 * 1024, peak


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "deflate", "deflate-raw"])
def test_a_compressed_answer_is_read(provider: Provider, coding: str) -> None:
    def answer(request: Any, headers: dict[str, str]) -> Raw:
        data = json.dumps(provider.answer(request, "Asked:\n- compressed")).encode()
        if coding in ("gzip", "x-gzip"):
            return Raw(200, {**JSON, "Content-Encoding": coding}, gzip.compress(data))
        packer = zlib.compressobj(wbits=-15 if coding == "deflate-raw" else 15)
        return Raw(200, {**JSON, "Content-Encoding": "deflate"}, packer.compress(data) + packer.flush())

    provider.script(answer)
    with provider.summarizer() as s:
        assert s.summarize(provider.gated(), kind="l1").text == "Asked:\n- compressed"
    assert provider.fake.requests[0].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize("coding, match", [
    ("br", "Content-Encoding 'br'"),
    ("gzip, gzip", "Content-Encoding 'gzip, gzip'"),
    ("gzip", "corrupt"),
])
def test_an_unreadable_encoding_is_an_error(provider: Provider, coding: str, match: str) -> None:
    provider.script(lambda request, headers: Raw(200, {**JSON, "Content-Encoding": coding}, b"\x00not gzip"))
    raises_clearly(provider, SummarizerError, match)


def test_the_summary_bound() -> None:
    assert summary_token_bound(300) == 500 and summary_token_bound(1) == 52 and summary_token_bound(None) is None


def test_a_summary_over_its_token_bound_is_refused(provider: Provider) -> None:
    cap = 50
    bound = summary_token_bound(cap)
    within, over = "Asked:" + " word" * (bound - 5), "Asked:" + " word" * (bound + 5)
    assert cap < count_text(within) <= bound < count_text(over)
    texts = iter([within, over, "x" * 3_000_000])
    provider.script(lambda request, headers: provider.answer(request, next(texts)))
    with provider.summarizer(max_retries=0) as s:
        assert s.summarize(provider.gated(max_output_tokens=cap), kind="l1").text == within
        with pytest.raises(SummarizerRefused, match=rf"over the bound of {bound} tokens") as caught:
            s.summarize(provider.gated(max_output_tokens=cap), kind="l1")
        assert caught.value.code == "summary_too_long"
        started = time.monotonic()
        with pytest.raises(SummarizerRefused, match=rf"over the bound of {bound} tokens"):
            s.summarize(provider.gated(max_output_tokens=cap), kind="l1")
        assert time.monotonic() - started < 2  # refused by its length in characters, not counted


def test_huge_answers_are_never_stored_the_chunk_fails(provider: Provider, tmp_path: Path) -> None:
    recipe = text_recipe(provider)
    bound = summary_token_bound(recipe.summary_max_tokens)
    provider.script(lambda request, headers: provider.answer(request, "Asked:\n" + "- lorem ipsum dolor\n" * 40_000))
    with Store(tmp_path / "store.db") as store, provider.summarizer() as s:
        store.append(conversation(4))
        report = Compactor(store, recipe, summarizer=s).tick()
        assert store.summaries() == [] and report.failures == 1
        assert report.requests > 1  # the split ladder was tried
        (failure,) = store.failures()
        assert f"over the bound of {bound} tokens" in failure["reason"]


def test_a_huge_answer_to_a_whole_chunk_splits_it(provider: Provider, tmp_path: Path) -> None:
    recipe = text_recipe(provider, chunk_target_tokens=900, chunk_min_messages=8)
    bound = summary_token_bound(recipe.summary_max_tokens)
    sent: list[int] = []

    def answer(request: Any, headers: dict[str, str]) -> Any:
        sent.append(1)
        if len(sent) == 1:  # the first (whole-chunk) request gets 900 KB
            return provider.answer(request, "Asked:\n" + "- lorem ipsum dolor\n" * 40_000)
        return provider.answer(request, f"Asked:\n- part {len(sent)}")

    provider.script(answer)
    with Store(tmp_path / "store.db") as store, provider.summarizer() as s:
        store.append(conversation(4, filler=20))
        report = Compactor(store, recipe, summarizer=s).tick()
        summaries = store.summaries()
        assert summaries and report.failures == 0 and not store.failures()
        assert summaries[0].provenance.get("parts", 0) >= 2
        assert all(count_text(x.text) <= bound for x in summaries)


def test_a_ten_megabyte_chunked_answer_is_recorded_as_a_failure(provider: Provider, tmp_path: Path) -> None:
    provider.fake.set_mode("huge_chunked", size=10 * 1024 * 1024)
    with Store(tmp_path / "store.db") as store, provider.summarizer() as s:
        store.append(conversation(3))
        report = Compactor(store, text_recipe(provider), summarizer=s).tick()
        assert store.summaries() == [] and report.failures == 1
        assert "4194304 bytes (max_response_bytes)" in store.failures()[0]["reason"]


# -- 3. an error in a 200 -------------------------------------------------------------------
def _error_200(provider: Provider, kind: str, text: str) -> Any:
    def answer(request: Any, headers: dict[str, str]) -> Any:
        summary = f"Asked:\n- {FAILURE_MARK} looks like a summary"
        if provider.kind == "openai":
            return provider.answer(request, summary, error={"type": kind, "code": kind, "message": text})
        return provider.answer(request, summary, type="error", error={"type": kind, "message": text})

    return answer


@pytest.mark.parametrize("kind, text, error, match", [
    ("invalid_request_error", "the gateway failed", SummarizerError, "the server answered with an error"),
    ("invalid_request_error", "prompt is too long: 9000 tokens > 8000 maximum", SummarizerRefused, "refused"),
    ("overloaded_error", "Overloaded", SummarizerUnavailable, "no summary after 2 attempt"),
])
def test_a_200_carrying_an_error_and_an_answer_is_an_error(
    provider: Provider, kind: str, text: str, error: type[Exception], match: str
) -> None:
    provider.script(_error_200(provider, kind, text))
    err = raises_clearly(provider, error, match)
    assert FAILURE_MARK not in str(err) and text[:20] in str(err)


def test_the_compactor_stores_no_summary_from_a_200_with_an_error(provider: Provider, tmp_path: Path) -> None:
    provider.script(_error_200(provider, "api_error_x", "upstream failed"))
    with Store(tmp_path / "store.db") as store, provider.summarizer() as s:
        store.append(conversation(3))
        report = Compactor(store, text_recipe(provider), summarizer=s).tick()
        assert store.summaries() == [] and report.failures == 1
        assert "upstream failed" in store.failures()[0]["reason"]


# -- 5. malformed answers: one clear error each --------------------------------------------
def test_a_redirect_loop_is_not_followed_even_by_a_client_that_follows(provider: Provider) -> None:
    provider.script(lambda request, headers: Raw(307, {"Location": "/v1/again", **JSON}, b"{}"))
    with httpx.Client(follow_redirects=True) as client:
        raises_clearly(provider, SummarizerError, "HTTP 307 redirect", client=client)
    assert len(provider.fake.requests) == 1


@pytest.mark.parametrize("body, match", [
    (b'{"choices": "\xff\xfe\xfd"}', "not valid UTF-8"),
    (b"[1, 2, 3]", "not a JSON object"),
    (b"null", "not a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    (b'{"usage": ' + b"7" * 5000 + b"}", "not JSON"),
    (b"<html>bad gateway</html>", "not JSON"),
])
def test_a_malformed_answer_is_one_clear_error(provider: Provider, body: bytes, match: str) -> None:
    provider.script(lambda request, headers: Raw(200, JSON, body))
    raises_clearly(provider, SummarizerError, match)


def test_a_lone_surrogate_in_an_answer_is_replaced_and_stored(provider: Provider, tmp_path: Path) -> None:
    provider.script(lambda request, headers: provider.answer(
        request, "Asked:\n- a\ud800b", model="m\udfff", usage={"note\ud800": "x\udc00", "output_tokens": 3}))
    with Store(tmp_path / "store.db") as store, provider.summarizer() as s:
        store.append(conversation(3))
        report = Compactor(store, text_recipe(provider), summarizer=s).tick()
        assert report.failures == 0 and report.l1_added >= 1
        summary = store.summaries()[0]
    assert summary.text == "Asked:\n- a\ufffdb"
    assert summary.provenance["served_model"] == "m\ufffd"
    assert summary.provenance["usage"]["output_tokens"] == 3


def test_content_as_many_huge_parts_is_refused_as_too_long(provider: Provider) -> None:
    part = {"type": "text", "text": "- lorem ipsum dolor\n" * 10_000}
    provider.script(lambda request, headers: provider.answer(request, [part] * 10))
    raises_clearly(provider, SummarizerRefused, "over the bound of")


def test_text_parts_that_are_not_text_are_skipped(provider: Provider) -> None:
    parts = [{"type": "text", "text": {"nested": 1}}, {"type": "text", "text": ["x"]}, "loose",
             {"type": "text", "text": "Asked:\n- ok"}]
    provider.script(lambda request, headers: provider.answer(request, parts))
    with provider.summarizer() as s:
        assert s.summarize(provider.gated(), kind="l1").text == "Asked:\n- ok"


def test_usage_and_model_from_the_server_are_bounded(provider: Provider) -> None:
    usage = {"input_tokens": 5, "output_tokens": 7, "junk": "j" * 1_000_000, "deep": {"a": {"b": {"c": 1}}},
             **{f"k{i}": i for i in range(1000)}}
    provider.script(lambda request, headers: provider.answer(request, "Asked:\n- ok", model="M" * 100_000,
                                                             usage=usage))
    with provider.summarizer() as s:
        provenance = s.summarize(provider.gated(), kind="l1").provenance
    assert len(json.dumps(provenance)) < 4096
    assert provenance["usage"]["input_tokens"] == 5 and provenance["usage"]["output_tokens"] == 7
    assert len(provenance["served_model"]) <= 200


def test_an_oversized_head_is_a_transient_failure(provider: Provider) -> None:
    padding = {f"X-Pad-{i}": "p" * 1000 for i in range(300)}  # 300 KB of headers: over httpcore's ~100 KB
    provider.script(lambda request, headers: Raw(200, {**JSON, **padding}, b"{}"))
    raises_clearly(provider, SummarizerUnavailable, "connection failed", max_retries=1)


def test_a_body_shorter_than_declared_is_a_transient_failure(provider: Provider) -> None:
    provider.script(lambda request, headers: Raw(200, {**JSON, "Content-Length": "500"}, b'{"a": 1}'))
    raises_clearly(provider, SummarizerUnavailable, "connection failed", max_retries=1)


@pytest.mark.parametrize("headers, waited", [
    ({"Retry-After": "-5"}, 0.0),
    ({"Retry-After": "nan"}, 0.001),
    ({"Retry-After": "1e400"}, None),
    ({"Retry-After": "99999999999"}, None),
    ({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, None),
    ({"Retry-After": "Mon, 01 Jan 0001 00:00:00 GMT"}, 0.0),
    ({"Retry-After": "soon"}, 0.001),
    ({"retry-after-ms": "-1000", "Retry-After": "0.25"}, 0.25),
    ({"retry-after-ms": "nan"}, 0.001),
    ({"retry-after-ms": "inf"}, None),
])
def test_odd_retry_after_values(provider: Provider, headers: dict[str, str], waited: float | None) -> None:
    provider.script(lambda request, _: Raw(503, {**JSON, **headers}, b'{"error": {"message": "busy"}}'))
    waits = Waits()
    err = raises_clearly(provider, SummarizerUnavailable, "HTTP 503", waits=waits, max_retries=1)
    if waited is None:  # a wait longer than backoff_max is not waited out
        assert waits == [] and "more than backoff_max" in str(err)
    else:
        assert waits == [waited]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["retry-after", "retry-after-ms"]), st.text(max_size=40)))
def test_retry_after_never_raises_and_is_never_negative(headers: dict[str, str]) -> None:
    value = retry_after_seconds(headers, time.time())
    assert value is None or (not math.isnan(value) and value >= 0)


def test_the_default_model_is_recorded_not_the_served_one_unless_it_differs(provider: Provider) -> None:
    provider.script(lambda request, headers: provider.answer(request, "Asked:\n- ok", model=MODEL))
    with provider.summarizer() as s:
        provenance = s.summarize(provider.gated(), kind="l1").provenance
    assert provenance["model"] == MODEL and "served_model" not in provenance
