"""Measure the latency ``compaction serve`` adds per request, beside direct calls to the same upstream.

A loopback fake OpenAI upstream (``tests/fake_openai_server.py``) and the proxy under uvicorn
on loopback; one conversation driven turn by turn (each turn a user ask, a tool call, a tool
output of ~1k tokens, an answer) until it holds ``--messages`` messages, then ``--requests``
more turns timed through the proxy and the same bodies sent to the upstream directly.

    python scripts/measure_serve_latency.py --messages 1000 --requests 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_openai_server import FakeOpenAI  # noqa: E402
from serve_support import live_server  # noqa: E402

from compaction.serve import ServeSettings, create_app  # noqa: E402

OUTPUT = "FAILED test_parser.py::test_case - AssertionError: expected a list, found None\n" * 60


def turn(index: int) -> list[dict[str, Any]]:
    call = {"id": f"call_{index}", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"pytest\"}"}}
    return [
        {"role": "user", "content": f"Ask {index}: fix the parser bug number {index}."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{index}", "content": OUTPUT},
    ]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--budget", type=int, default=32000)
    args = parser.parse_args()
    with FakeOpenAI(lifetime=3600, max_requests=10**6) as fake, tempfile.TemporaryDirectory() as tmp:
        app = create_app(ServeSettings(fake.base_url, Path(tmp), budget=args.budget))
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
        headers = {"X-Compaction-Conversation": "bench"}
        with live_server(app) as proxy, httpx.Client(timeout=600) as client:
            index = 0
            warm_started = time.monotonic()
            while len(history) < args.messages:
                history += turn(index)
                index += 1
                answer = client.post(f"{proxy}/chat/completions", json={"model": "gpt-4o", "messages": history},
                                     headers=headers)
                answer.raise_for_status()
                history.append({"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]})
            warm = time.monotonic() - warm_started
            proxied: list[float] = []
            direct: list[float] = []
            for _ in range(args.requests):
                history += turn(index)
                index += 1
                body = {"model": "gpt-4o", "messages": history}
                started = time.perf_counter()
                answer = client.post(f"{proxy}/chat/completions", json=body, headers=headers)
                proxied.append((time.perf_counter() - started) * 1000)
                answer.raise_for_status()
                started = time.perf_counter()
                client.post(f"{fake.base_url}/chat/completions", content=json.dumps(body)).raise_for_status()
                direct.append((time.perf_counter() - started) * 1000)
                history.append({"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]})
        shipped = len(fake.requests[-2].body)
    raw = len(json.dumps(history))
    print(f"conversation: {len(history)} messages, {raw:,} bytes raw; last proxied body {shipped:,} bytes "
          f"(budget {args.budget:,}); growing it took {warm:.1f} s")
    for name, values in (("proxy", proxied), ("direct", direct)):
        print(f"{name:>6}: p50 {statistics.median(values):7.1f} ms   p99 {percentile(values, 0.99):7.1f} ms   "
              f"({len(values)} requests)")
    added = [p - d for p, d in zip(proxied, direct, strict=True)]
    print(f" added: p50 {statistics.median(added):7.1f} ms   p99 {percentile(added, 0.99):7.1f} ms")


if __name__ == "__main__":
    main()
