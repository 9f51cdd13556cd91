"""``compaction serve`` operations: ``GET /metrics``, a dead summarizer, 50 concurrent SDK clients.

A summarizer that cannot be reached never blocks a request: it ships within budget with what
exists, or gets a 413 with a clear JSON error when even the minimum does not fit.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
from serve_support import (
    MockUpstream,
    RecordingUpstream,
    conversations,
    free_port,
    make_app,
    post,
    served_app,
    stored_messages,
)
from strategies import independent_tokens

from compaction import Recipe

OPENAI = "/v1/chat/completions"
LINE = "FAILED tests/test_parser.py::test_case - AssertionError: expected list, got None\n"


def _history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"make\"}"}}
        history += [{"role": "user", "content": f"ask {turn}: fix case {turn}"},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"call_{turn}", "content": LINE * 8},
                    {"role": "assistant", "content": f"fixed {turn}"}]
    return history + [{"role": "user", "content": "and now the last one"}]


def _get(app: Any, path: str) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client:
            return await client.get(path)

    return asyncio.run(go())


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match, name
    return float(match.group(1))


def test_metrics_count_requests_errors_events_tokens_and_latency(tmp_path: Path) -> None:
    async def fail_third(seen: Any) -> httpx.Response:
        if len(upstream.seen) == 3:
            return httpx.Response(529, json={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                                      "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 50, "completion_tokens": 2}})

    upstream = MockUpstream(fail_third)
    app = make_app(tmp_path, upstream, budget=1500)
    history = _history(12)
    for _ in range(3):
        assert post(app, OPENAI, {"model": "gpt-4o", "messages": history}).status_code in (200, 529)
    assert post(app, OPENAI, {"model": "gpt-4o"}).status_code == 400  # refused before the upstream
    answer = _get(app, "/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = answer.text
    assert _metric(text, 'compaction_serve_requests_total{api="openai",status="200"}') == 2
    assert _metric(text, 'compaction_serve_requests_total{api="openai",status="529"}') == 1
    assert _metric(text, 'compaction_serve_requests_total{api="openai",status="400"}') == 1
    assert _metric(text, 'compaction_serve_upstream_errors_total{code="http_529"}') == 1
    assert _metric(text, "compaction_serve_compaction_events_total") >= 1
    shipped = _metric(text, "compaction_serve_tokens_shipped_total")
    tokens_in = _metric(text, "compaction_serve_tokens_in_total")
    assert 0 < shipped <= 3 * 1500 and tokens_in > 1500  # the history went in once, over the budget
    assert _metric(text, "compaction_serve_upstream_input_tokens_total") == 100
    assert _metric(text, "compaction_serve_overhead_seconds_count") == 3  # the 400 never reached the upstream
    assert _metric(text, 'compaction_serve_overhead_seconds_bucket{le="+Inf"}') == 3
    assert _metric(text, "compaction_serve_upstream_seconds_count") == 3
    assert _metric(text, "compaction_serve_overhead_seconds_sum") > 0


def _dead_summarizer() -> Recipe:
    return Recipe().replace(summarizer={"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1",
                                        "model": "gone", "max_retries": 0, "timeout_seconds": 2.0})


def test_a_dead_summarizer_never_blocks_a_request(tmp_path: Path, caplog: Any) -> None:
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream, budget=1500, recipe=_dead_summarizer())
    history = _history(20)
    answer = post(app, OPENAI, {"model": "gpt-4o", "messages": history})
    assert answer.status_code == 200, answer.text
    (seen,) = upstream.seen
    assert independent_tokens(seen.body, "gpt-4o") <= 1500
    newest = seen.body["messages"][-1]["content"]
    assert newest == "and now the last one" or newest.endswith("\n\nand now the last one")  # the newest ask, last
    (conversation,) = conversations(tmp_path / "stores")
    assert len(stored_messages(tmp_path / "stores", conversation)) == len(history) + 1  # the answer too
    assert "the summarizer could not make the request fit" in caplog.text and "compacting this turn offline" in caplog.text


def test_a_dead_summarizer_and_a_prompt_over_budget_get_413(tmp_path: Path) -> None:
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream, budget=1500, recipe=_dead_summarizer())
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": LINE * 200}]}
    answer = post(app, OPENAI, body)
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert error["code"] == "context_too_large" and error["message"].startswith("compaction serve: ")
    assert "1,500" in error["message"] or "1500" in error["message"]
    assert upstream.seen == []


def test_fifty_concurrent_sdk_conversations_do_not_cross(tmp_path: Path) -> None:
    """50 threads, each its own conversation through the openai SDK, 4 turns each."""
    store_dir = tmp_path / "stores"
    failures: list[str] = []
    with RecordingUpstream() as upstream, served_app(store_dir, upstream.base_url, budget=2000) as proxy:
        def agent(index: int) -> None:
            client = openai.OpenAI(base_url=proxy, api_key="sk-test-concurrent-0123456789", max_retries=0, timeout=60)
            history: list[dict[str, Any]] = [{"role": "user", "content": f"conv-{index} start"}]
            try:
                for turn in range(4):
                    answer = client.chat.completions.create(model="gpt-4o", messages=history)
                    text = answer.choices[0].message.content or ""
                    assert text == f"ack: {history[-1]['content']}", text
                    history += [{"role": "assistant", "content": text},
                                {"role": "user", "content": f"conv-{index} turn {turn}"}]
            except Exception as err:  # collected: a thread's assertion would be lost otherwise
                failures.append(f"{index}: {type(err).__name__}: {err}")

        threads = [threading.Thread(target=agent, args=(i,)) for i in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert failures == []
    assert len(upstream.received) == 200
    for _path, body in upstream.received:  # each request holds only its own conversation's text
        owners = {m["content"].split()[0] for m in body["messages"] if isinstance(m["content"], str)
                  and m["content"].startswith("conv-")}
        assert len(owners) == 1, owners
    names = conversations(store_dir)
    assert len(names) == 50
    for name in names:  # 4 asks and 4 answers each, nothing lost, nothing twice
        stored = stored_messages(store_dir, name)
        texts = [content[0]["text"] for _role, content in stored]
        owner = texts[0].split()[0]
        assert texts == [f"{owner} start", f"ack: {owner} start"] + [
            t for turn in range(3) for t in (f"{owner} turn {turn}", f"ack: {owner} turn {turn}")]
