# ruff: noqa: F811  (the imported fake_openai fixture is taken as an argument)
"""The OpenAI-compatible HTTP summarizer, driven through real compaction against a fake server.

Every test runs :class:`~compaction.compactor.Compactor` (or the summarizer directly) against
:mod:`fake_openai_server` on loopback and asserts on what reached the transport (the raw
request bytes the server captured) and on what the store holds afterwards.  Waits are
recorded by an injected ``sleep``, never slept.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import json
import socket
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai_server import FAILURE_MARK, FakeOpenAI, fake_openai, image_inputs  # noqa: F401

from compaction.blocks import Message
from compaction.compactor import Compactor, compression_image_settings
from compaction.errors import (
    CompactionError,
    RecipeError,
    SummarizerError,
    SummarizerRefused,
    SummarizerUnavailable,
)
from compaction.formats import load_transcript
from compaction.recipe import Recipe, SummarizerSettings
from compaction.store import Store
from compaction.summarizers import ExtractiveSummarizer
from compaction.summarizers._http import retry_after_seconds as _retry_after_seconds
from compaction.summarizers.factory import summarizer_from_recipe
from compaction.summarizers.openai_chat import OpenAIChatSummarizer, redact_url
from compaction.wire import GatedRequest, OutboundRequest, gate

ROOT = Path(__file__).resolve().parent.parent
AGENT_TARS = ROOT / "examples" / "agent-tars__browser__event-stream-with-many-images.json"
KEY_ENV = "COMPACTION_TEST_SUMMARIZER_KEY"
SECRET = "sk-fake-" + "Zq9xW4" * 6  # a recognisable key that must never leave the header
MODEL = "fake-summarizer-7b"


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


def summarizer(fake: FakeOpenAI, waits: Waits | None = None, **overrides: Any) -> OpenAIChatSummarizer:
    options: dict[str, Any] = {
        "api_key_env": KEY_ENV,
        "timeout_seconds": 2.0,
        "max_retries": 3,
        "backoff_base": 0.001,
        "backoff_max": 5.0,
        "sleep": waits if waits is not None else Waits(),
    }
    options.update(overrides)
    return OpenAIChatSummarizer(fake.base_url, MODEL, **options)


def text_recipe(**overrides: Any) -> Recipe:
    base: dict[str, Any] = {
        "chunk_target_tokens": 150,
        "chunk_min_messages": 2,
        "merge_fanout": 6,
        "summary_max_tokens": 120,
        "summarizer_context_tokens": 6000,
    }
    base.update(overrides)
    return Recipe(**base)


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


def png(width: int, height: int, seed: int) -> bytes:
    """A valid RGB PNG built with struct and zlib."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    row = b"\x00" + bytes((seed * 7 + x) % 256 for x in range(width * 3))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(row * height)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def image_block(seed: int) -> dict[str, Any]:
    data = base64.b64encode(png(4 + seed % 5, 3 + seed % 4, seed)).decode("ascii")
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def data_uri(seed: int) -> str:
    return "data:image/png;base64," + base64.b64encode(png(2 + seed % 3, 2, seed + 100)).decode("ascii")


def image_conversation(rounds: int, filler: int = 6) -> list[Message]:
    """Rounds full of images: top-level, nested in a tool_result beside text in the same
    user message (a mixed tool round), and ``data:`` URIs inside texts and tool arguments."""
    out: list[Message] = []
    for i in range(rounds):
        lines = "\n".join(f"element {j}: button#b{i}_{j}" for j in range(filler))
        out += [
            Message("user", (
                {"type": "text", "text": f"Round {i}: what is on this page?"}, image_block(4 * i),
            )),
            Message("assistant", (
                {"type": "text", "text": "I'll take a screenshot."},
                {"type": "tool_use", "id": f"shot_{i}", "name": "screenshot",
                 "input": {"previous": data_uri(4 * i + 1)}},
            )),
            Message("user", (
                {"type": "tool_result", "tool_use_id": f"shot_{i}",
                 "content": [{"type": "text", "text": lines}, image_block(4 * i + 2)]},
                {"type": "text", "text": f"Also pasted: {data_uri(4 * i + 3)} (end of paste)"},
            )),
            Message("assistant", (
                {"type": "text", "text": f"Page {i} shows a form with {filler} buttons."},
            )),
        ]
    return out


def db_bytes(path: Path) -> bytes:
    """Every byte of an SQLite store on disk, the WAL and shared-memory files included."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def assert_clean(store: Store) -> None:
    """No stored summary is empty or carries the fake server's error text."""
    for summary in store.summaries():
        assert summary.text.strip()
        assert FAILURE_MARK not in summary.text
        assert FAILURE_MARK not in json.dumps(summary.provenance)


def gated(
    text: str = "hello",
    purpose: Any = "l1",
    *,
    model: str = MODEL,
    max_output_tokens: int | None = 50,
    format: Any = "openai",
    blocks: tuple[dict[str, Any], ...] | None = None,
    recipe: Recipe | None = None,
) -> GatedRequest:
    """Gate a one-message request the way the compactor does: the summarizer's format, model, cap."""
    content = blocks if blocks is not None else ({"type": "text", "text": text},)
    request = OutboundRequest(purpose, "Summarize.", (("user", content),))
    return gate(request, compression_image_settings(recipe or Recipe()), format=format, model=model,
                max_output_tokens=max_output_tokens)


# -- the request on the wire --------------------------------------------------------------
def test_the_sent_body_is_the_gated_payload_byte_for_byte(fake_openai: FakeOpenAI) -> None:
    request = gated("Ünïcode text, \"quotes\" and </script>", max_output_tokens=123)
    with summarizer(fake_openai) as s:
        result = s.summarize(request, kind="l1")
    (sent,) = fake_openai.requests
    assert sent.body == request.payload  # nothing set, nothing re-serialized after the gate
    body = sent.json()
    assert body["model"] == MODEL == request.model and body["max_tokens"] == 123 == request.max_output_tokens
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.headers["content-type"] == "application/json"
    assert result.text.startswith("Asked:\n- summarize 2 messages") and result.text == result.text.strip()
    assert result.provenance["request_sha256"] == hashlib.sha256(sent.body).hexdigest()
    assert hashlib.sha256(sent.body).hexdigest()[:12] in result.text
    assert result.provenance["usage"]["prompt_tokens"] == max(1, len(sent.body) // 4)
    assert result.provenance["finish_reason"] == "stop"
    assert SECRET not in json.dumps(result.provenance) and SECRET not in repr(s)


def test_max_output_tokens_is_gated_in_and_the_same_request_gives_the_same_bytes(
    fake_openai: FakeOpenAI,
) -> None:
    with summarizer(fake_openai, max_output_tokens=77) as s:
        request = gated(max_output_tokens=s.max_output_tokens)
        s.summarize(request, kind="l1")
        s.summarize(request, kind="l1")
        with pytest.raises(SummarizerError, match=r"caps answers at 77 tokens.*carries 400"):
            s.summarize(gated(max_output_tokens=400), kind="l1")
    first, second = fake_openai.requests  # the refused one was never sent
    assert first.body == second.body == request.payload and first.json()["max_tokens"] == 77


@pytest.mark.parametrize("what, options, message", [
    ("format", {"format": "anthropic"}, r"sends OpenAI Chat bodies \('openai'\); the gated l1 request is 'anthropic'"),
    ("model", {"model": "gpt-4o"}, r"runs model 'fake-summarizer-7b'; the gated l1 request names 'gpt-4o'"),
])
def test_a_request_gated_for_another_format_or_model_is_refused_before_sending(
    fake_openai: FakeOpenAI, what: str, options: dict[str, Any], message: str
) -> None:
    with summarizer(fake_openai) as s, pytest.raises(SummarizerError, match=message) as caught:
        s.summarize(gated(**options), kind="l1")
    assert type(caught.value) is SummarizerError and fake_openai.requests == []


def test_a_closed_summarizer_refuses_to_send(fake_openai: FakeOpenAI) -> None:
    s = summarizer(fake_openai)
    s.close()
    s.close()  # closing twice is harmless
    with pytest.raises(SummarizerError, match="is closed"):
        s.summarize(gated(), kind="l1")
    assert fake_openai.requests == []


def test_no_key_no_authorization_header(fake_openai: FakeOpenAI) -> None:
    with summarizer(fake_openai, api_key_env=None) as s:
        s.summarize(gated(), kind="l1")
    assert "authorization" not in fake_openai.requests[0].headers


def test_base_url_query_is_sent_but_not_recorded_and_credentials_are_refused(fake_openai: FakeOpenAI) -> None:
    with OpenAIChatSummarizer(fake_openai.base_url + "/?api-version=2024-10-01", MODEL, sleep=Waits()) as s:
        result = s.summarize(gated(), kind="l1")
    assert fake_openai.requests[0].path == "/v1/chat/completions?api-version=2024-10-01"
    assert result.provenance["base_url"] == fake_openai.base_url
    assert redact_url("https://user:pw@example.com:8443/v1?key=abc#x") == "https://example.com:8443/v1"
    with pytest.raises(RecipeError, match="credentials"):
        OpenAIChatSummarizer("https://user:pw@example.com/v1", MODEL)
    with pytest.raises(RecipeError, match="not set"):
        OpenAIChatSummarizer("https://example.com/v1", MODEL, api_key_env="COMPACTION_TEST_UNSET_VARIABLE")


# -- compaction through the HTTP summarizer -----------------------------------------------
def test_ok_stores_l1_summaries_with_provenance_and_no_key(
    fake_openai: FakeOpenAI, store: Store, tmp_path: Path
) -> None:
    store.append(conversation(8))
    recipe = text_recipe()
    with summarizer(fake_openai) as s:
        report = Compactor(store, recipe, summarizer=s).tick()
    l1 = store.summaries(level=1)
    assert report.l1_added == len(l1) >= 3 and report.failures == 0 and not store.failures()
    sent = {hashlib.sha256(r.body).hexdigest(): r for r in fake_openai.requests}
    assert len(sent) == len(fake_openai.requests) == report.requests
    position = 0
    for summary in l1:
        assert summary.start_seq == position
        position = summary.end_seq
        prov = summary.provenance
        assert prov["summarizer"] == "openai-http" and prov["model"] == MODEL
        assert prov["base_url"] == fake_openai.base_url and prov["kind"] == "l1"
        request = sent[prov["request_sha256"]]  # the hash is of the bytes that were sent
        assert prov["usage"] == {"prompt_tokens": len(request.body) // 4, "completion_tokens": 17,
                                 "total_tokens": len(request.body) // 4 + 17}
        assert prov["request_sha256"][:12] in summary.text
        assert request.json()["model"] == MODEL and request.json()["max_tokens"] == recipe.summary_max_tokens
        assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert_clean(store)
    blob = db_bytes(tmp_path / "store.db")
    assert SECRET.encode() not in blob and b"Zq9xW4" not in blob
    assert all(SECRET not in json.dumps(s.provenance) for s in store.summaries())


def test_429_with_retry_after_waits_then_stores(fake_openai: FakeOpenAI, store: Store) -> None:
    store.append(conversation(3))
    fake_openai.set_mode("429", times=1, retry_after="2")
    waits = Waits()
    with summarizer(fake_openai, waits) as s:
        report = Compactor(store, text_recipe(), summarizer=s).tick()
    assert fake_openai.statuses()[0] == 429 and 2.0 in waits
    assert report.l1_added >= 1 and not store.failures()
    assert store.summaries(level=1)[0].provenance["attempts"] == 2
    assert_clean(store)


def test_retry_after_as_http_date_and_too_long_a_wait() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert _retry_after_seconds({"retry-after": date}, now) == pytest.approx(7, abs=1)
    assert _retry_after_seconds({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now) == 0
    assert _retry_after_seconds({"retry-after": "3"}, now) == 3
    assert _retry_after_seconds({"retry-after-ms": "250", "retry-after": "3"}, now) == 0.25
    assert _retry_after_seconds({"retry-after": "soon"}, now) is None


def test_a_retry_after_longer_than_backoff_max_is_not_waited_out(fake_openai: FakeOpenAI) -> None:
    fake_openai.set_mode("429", times=5, retry_after="600")
    waits = Waits()
    with summarizer(fake_openai, waits) as s, pytest.raises(SummarizerUnavailable, match="retry after 600"):
        s.summarize(gated(), kind="l1")
    assert waits == [] and len(fake_openai.requests) == 1


def test_500_twice_then_stored_with_exponential_backoff(fake_openai: FakeOpenAI, store: Store) -> None:
    store.append(conversation(3))
    fake_openai.set_mode("500", times=2)
    waits = Waits()
    with summarizer(fake_openai, waits, backoff_base=0.01) as s:
        Compactor(store, text_recipe(), summarizer=s).tick()
    assert fake_openai.statuses()[:3] == [500, 500, 200]
    assert waits == [0.01, 0.02]  # base * 2**attempt, no jitter
    assert store.summaries(level=1)[0].provenance["attempts"] == 3 and not store.failures()
    assert_clean(store)


@pytest.mark.parametrize("status", [502, 503, 504])
def test_other_5xx_are_transient(fake_openai: FakeOpenAI, status: int) -> None:
    fake_openai.set_mode("500", times=1, status=status)
    with summarizer(fake_openai) as s:
        assert s.summarize(gated(), kind="l1").provenance["attempts"] == 2


def test_timeout_is_retried(fake_openai: FakeOpenAI, store: Store) -> None:
    store.append(conversation(3))
    fake_openai.set_mode("timeout", times=1, delay=1.0)
    waits = Waits()
    with summarizer(fake_openai, waits, timeout_seconds=0.25) as s:
        report = Compactor(store, text_recipe(), summarizer=s).tick()
    assert fake_openai.requests[0].delayed == 1.0 and len(waits) >= 1
    assert report.l1_added >= 1 and not store.failures()
    assert store.summaries(level=1)[0].provenance["attempts"] == 2


def test_unavailable_after_retries_records_a_failure(fake_openai: FakeOpenAI, store: Store) -> None:
    store.append(conversation(3))
    fake_openai.set_mode("500", times=10**6)
    waits = Waits()
    with summarizer(fake_openai, waits, max_retries=2) as s:
        with pytest.raises(SummarizerUnavailable) as caught:
            s.summarize(gated(), kind="l1")
        report = Compactor(store, text_recipe(), summarizer=s).tick()
    assert caught.value.attempts == 3 and "after 3 attempt(s)" in str(caught.value)
    assert report.failures == 1 and report.l1_added == 0 and store.summaries() == []
    (failure,) = store.failures()
    assert failure["level"] == 1 and failure["start_seq"] == 0
    assert "no summary after 3 attempt(s)" in failure["reason"] and "HTTP 500" in failure["reason"]
    assert SECRET not in failure["reason"]


def test_connection_refused_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    waits = Waits()
    s = OpenAIChatSummarizer(f"http://127.0.0.1:{port}/v1", MODEL, api_key_env=KEY_ENV, max_retries=1,
                             backoff_base=0.001, sleep=waits, timeout_seconds=1)
    with s, pytest.raises(SummarizerUnavailable, match="connection failed") as caught:
        s.summarize(gated(), kind="l1")
    assert waits == [0.001] and SECRET not in str(caught.value)


def test_context_length_splits_and_stitches(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    recipe = text_recipe(chunk_target_tokens=900, chunk_min_messages=8)
    messages = conversation(6, filler=20)
    with Store(tmp_path / "reference.db") as reference, summarizer(fake_openai) as s:
        reference.append(messages)
        Compactor(reference, recipe, summarizer=s).tick()
        expected = [(x.start_seq, x.end_seq) for x in reference.summaries(level=1)]
        whole = max(len(r.body) for r in fake_openai.requests)
    assert expected and all(e - b >= 8 for b, e in expected)
    limit = whole * 2 // 3  # whole chunks are refused; their halves fit
    fake_openai.requests.clear()
    fake_openai.set_mode("context_length", max_chars=limit)
    with Store(tmp_path / "split.db") as store, summarizer(fake_openai) as s:
        store.append(messages)
        report = Compactor(store, recipe, summarizer=s).tick()
        l1 = store.summaries(level=1)
        assert [(x.start_seq, x.end_seq) for x in l1] == expected  # the same ranges, covered
        assert not store.failures() and report.l1_added == len(expected)
        statuses = fake_openai.statuses()
        assert statuses.count(400) >= 1 and report.requests > len(expected)
        for request in fake_openai.requests:  # nothing over the limit was answered
            assert (request.status == 400) == (len(request.body) > limit)
        stitched = [x for x in l1 if x.provenance.get("parts")]
        assert stitched and all(x.provenance["kind"] == "stitch" for x in stitched)
        kinds = [r.json()["messages"][0]["content"][:30] for r in fake_openai.requests if r.status == 200]
        assert any(k.startswith("You merge") for k in kinds)  # the stitch request
        assert_clean(store)


@pytest.mark.parametrize("mode, reason", [
    ("empty", "no text"),
    ("length", "cut off at the output limit"),
    ("refusal", "the model refused"),
    ("content_filter", "content filter"),
])
def test_unusable_answers_record_a_failure_and_store_no_text(
    fake_openai: FakeOpenAI, store: Store, tmp_path: Path, mode: str, reason: str
) -> None:
    store.append(conversation(4))
    recipe = text_recipe()
    with summarizer(fake_openai) as s:
        Compactor(store, recipe, summarizer=s).tick()
        before = [(x.level, x.start_seq, x.end_seq, x.text) for x in store.summaries()]
        frontier = max(x.end_seq for x in store.summaries(level=1))
        store.append(conversation(4, first=4), chain_seed="more")
        fake_openai.set_mode(mode)
        failed_from = len(fake_openai.requests)
        report = Compactor(store, recipe, summarizer=s).tick()
    assert report.l1_added == 0 and report.failures == 1
    assert [(x.level, x.start_seq, x.end_seq, x.text) for x in store.summaries()] == before
    assert all(x.end_seq <= frontier for x in store.summaries())  # the chunk stays raw
    (failure,) = store.failures()
    assert failure["start_seq"] == frontier and reason in failure["reason"]
    assert all(r.status == 200 for r in fake_openai.requests[failed_from:])  # answered, yet refused
    assert len(fake_openai.requests) - failed_from > 1  # the compactor tried halves too
    assert_clean(store)
    store.close()
    assert FAILURE_MARK.encode() not in db_bytes(tmp_path / "store.db").replace(
        failure["reason"].encode(), b"")  # error text only ever in the failure record


# -- text-only servers, images and the wire gate ------------------------------------------
def vision_recipe(vision: bool, **overrides: Any) -> Recipe:
    base: dict[str, Any] = {
        "vision": vision,
        "chunk_target_tokens": 300,
        "chunk_min_messages": 2,
        "merge_fanout": 2,
        "summary_max_tokens": 150,
        "summarizer_context_tokens": 6000,
    }
    base.update(overrides)
    return Recipe(**base)


def assert_no_images_sent(fake: FakeOpenAI) -> None:
    assert fake.requests
    for request in fake.requests:
        assert request.status == 200, request.body[:300]
        assert image_inputs(request.body) == 0
        assert b"data:image/" not in request.body and b'"image_url"' not in request.body


def test_text_only_server_agent_tars_transcript(fake_openai: FakeOpenAI, store: Store) -> None:
    parsed = load_transcript(AGENT_TARS)
    store.append(parsed.messages)
    assert store.image_count() >= 5
    fake_openai.set_mode("text_only")
    with summarizer(fake_openai) as s:
        report = Compactor(store, vision_recipe(False), summarizer=s).tick()
    assert_no_images_sent(fake_openai)
    assert 400 not in fake_openai.statuses()
    assert report.l1_added >= 3 and report.merged.get(2, 0) >= 1 and not store.failures()
    assert store.summaries(level=2)
    assert any(b"[image not shown: image/" in r.body for r in fake_openai.requests)  # loud placeholders
    assert_clean(store)


def test_text_only_server_generated_images_with_merges_and_split_fallback(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    messages = image_conversation(6)
    big = "\n".join(f"row {j}: " + "cell " * 12 for j in range(260))  # one round over the window
    messages += [
        Message("user", ({"type": "text", "text": "Dump the whole table."}, image_block(90))),
        Message("assistant", ({"type": "tool_use", "id": "dump", "name": "dump_table", "input": {}},)),
        Message("user", (
            {"type": "tool_result", "tool_use_id": "dump",
             "content": [
                 {"type": "text", "text": "the table follows"}, image_block(91),
                 {"type": "text", "text": data_uri(92)},
             ]},
            # pasted text, not tool output: truncation does not apply, so the round is split into parts
            {"type": "text", "text": f"{big}\nand {data_uri(93)}"},
        )),
        Message("assistant", ({"type": "text", "text": "The table has 260 rows."},)),
        Message("user", ({"type": "text", "text": "Thanks, next task."},)),
    ]
    store.append(messages)
    recipe = vision_recipe(False, summarizer_context_tokens=1400, summary_max_tokens=150)
    fake_openai.set_mode("text_only")
    with summarizer(fake_openai) as s:
        report = Compactor(store, recipe, summarizer=s).tick()
    assert_no_images_sent(fake_openai)
    assert report.l1_added >= 4 and report.merged.get(2, 0) >= 2 and not store.failures()
    assert report.max_request_tokens <= recipe.summarizer_context_tokens
    parts = [r for r in fake_openai.requests if b"(one tool round too large to send whole)" in r.body]
    assert len(parts) >= 2  # the split fallback ran, and its requests carry no image either
    assert any(x.provenance.get("parts", 0) >= 2 for x in store.summaries(level=1))
    covered = max(x.end_seq for x in store.summaries(level=1))
    assert covered >= len(messages) - 2  # the oversized round was summarized, not left raw
    assert_clean(store)


def test_vision_true_on_a_text_only_server_reports_the_refusal(fake_openai: FakeOpenAI, store: Store) -> None:
    store.append(image_conversation(3))
    fake_openai.set_mode("text_only")
    with summarizer(fake_openai) as s:
        with pytest.raises(SummarizerRefused, match="image_input_not_supported") as caught:
            s.summarize(gate(
                OutboundRequest("l1", "x", (("user", (image_block(1),)),)),
                compression_image_settings(vision_recipe(True)), format="openai", model=MODEL,
            ), kind="l1")
        report = Compactor(store, vision_recipe(True), summarizer=s).tick()
    assert caught.value.code == "image_input_not_supported" and caught.value.status == 400
    assert 400 in fake_openai.statuses()
    assert report.failures == 1 and report.l1_added == 0 and store.summaries() == []
    (failure,) = store.failures()
    assert failure["start_seq"] == 0 and "image_input_not_supported" in failure["reason"]
    assert "HTTP 400" in failure["reason"]


# -- the factory and the key --------------------------------------------------------------
def test_factory(fake_openai: FakeOpenAI) -> None:
    assert isinstance(summarizer_from_recipe(Recipe(encoding="cl100k_base")), ExtractiveSummarizer)
    settings = SummarizerSettings(kind="openai", base_url=fake_openai.base_url, model=MODEL,
                                  api_key_env=KEY_ENV, timeout_seconds=5, max_output_tokens=64, max_retries=1)
    made = summarizer_from_recipe(Recipe(summarizer=settings))
    assert isinstance(made, OpenAIChatSummarizer)
    assert (made.model, made.timeout_seconds, made.max_output_tokens, made.max_retries) == (MODEL, 5, 64, 1)
    made.close()
    with pytest.raises(RecipeError, match=r"key 'summarizer\.base_url': required"):
        summarizer_from_recipe(Recipe(summarizer=SummarizerSettings(kind="openai", model=MODEL)))
    unset = SummarizerSettings(kind="openai", base_url="http://127.0.0.1:9/v1", model=MODEL,
                               api_key_env="COMPACTION_TEST_UNSET_VARIABLE")
    with pytest.raises(RecipeError, match=r"key 'summarizer\.api_key_env'"):
        summarizer_from_recipe(Recipe(summarizer=unset))


def _chain(err: BaseException) -> str:
    texts = []
    current: BaseException | None = err
    while current is not None:
        texts += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


@pytest.mark.parametrize("mode, error", [
    ("401", SummarizerError),
    ("400_echo", SummarizerError),
    ("500", SummarizerUnavailable),
    ("429", SummarizerUnavailable),
    ("timeout", SummarizerUnavailable),
    ("context_length", SummarizerRefused),
    ("refusal", SummarizerRefused),
    ("text_only", SummarizerRefused),
])
def test_the_key_never_appears_in_an_error(
    fake_openai: FakeOpenAI, mode: str, error: type[Exception]
) -> None:
    all_options: dict[str, dict[str, Any]] = {
        "500": {"times": 99},
        "429": {"times": 99, "retry_after": "0"},
        "timeout": {"times": 99, "delay": 0.4},
        "context_length": {"max_chars": 10},
    }
    options = all_options.get(mode, {})
    fake_openai.set_mode(mode, **options)
    request = gated() if mode != "text_only" else gated(blocks=(image_block(5),))
    with summarizer(fake_openai, max_retries=1, timeout_seconds=0.2) as s, pytest.raises(error) as caught:
        s.summarize(request, kind="l1")
    assert type(caught.value) is error and isinstance(caught.value, CompactionError)
    assert SECRET not in _chain(caught.value) and "Zq9xW4" not in _chain(caught.value)
    assert fake_openai.base_url in str(caught.value)
    if mode in ("401", "400_echo"):  # the server did echo it; we did not pass it on
        assert SECRET.encode() in b"".join(json.dumps(r.headers).encode() for r in fake_openai.requests)
        assert "HTTP 401" in str(caught.value) or "HTTP 400" in str(caught.value)


def test_a_response_that_is_not_json_is_an_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"<html>gateway</html>"))
    with httpx.Client(transport=transport) as client:
        s = OpenAIChatSummarizer("http://127.0.0.1:1/v1", MODEL, client=client, sleep=Waits())
        with pytest.raises(SummarizerError, match="not JSON"):
            s.summarize(gated(), kind="l1")


def test_oversized_tool_output_is_middle_truncated_with_a_marker_before_any_split(
    fake_openai: FakeOpenAI, store: Store
) -> None:
    big = "\n".join(f"line {j}: " + "value " * 10 for j in range(400))
    store.append([
        Message("user", ({"type": "text", "text": "Print the log."},)),
        Message("assistant", ({"type": "tool_use", "id": "log", "name": "print_log", "input": {}},)),
        Message("user", ({"type": "tool_result", "tool_use_id": "log", "content": big},)),
        Message("assistant", ({"type": "text", "text": "The log has 400 lines."},)),
        Message("user", ({"type": "text", "text": "Next."},)),
    ])
    recipe = vision_recipe(True, summarizer_context_tokens=1400, summary_max_tokens=150)
    fake_openai.set_mode("ok")
    with summarizer(fake_openai) as s:
        report = Compactor(store, recipe, summarizer=s).tick()
    assert report.l1_added == 1 and not store.failures()
    assert len(fake_openai.requests) == 1  # one request: truncated, not split
    body = fake_openai.requests[0].body.decode()
    assert "left out of this summary request to fit the summarizer's context window" in body
    assert "line 0: " in body and "line 399: " in body  # head and tail kept
    assert report.max_request_tokens <= recipe.summarizer_context_tokens - recipe.summary_max_tokens
    assert store.messages(2, 3)[0].content[0]["content"] == big  # the store keeps the whole output
