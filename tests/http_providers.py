"""Both HTTP summarizer providers behind one face, for tests that must hold for each of them.

:func:`provider` is a fixture parametrized over ``openai`` and ``anthropic``: it starts the
provider's loopback fake (:mod:`fake_openai_server`, :mod:`fake_anthropic_server`), sets the
test key in :data:`KEY_ENV`, and yields a :class:`Provider` that builds the summarizer, gated
requests, finished answers and recipes for that provider.  :func:`leaked` lists every piece
of 8 characters of the key found in a text or a byte string.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_anthropic_server import FakeAnthropic, message
from fake_openai_server import FakeOpenAI, completion

from compaction.blocks import Message
from compaction.compactor import compression_image_settings
from compaction.recipe import Recipe, SummarizerSettings
from compaction.summarizers._http import HTTPSummarizer
from compaction.summarizers.anthropic import AnthropicMessagesSummarizer
from compaction.summarizers.openai_chat import OpenAIChatSummarizer
from compaction.wire import GatedRequest, OutboundRequest, gate

__all__ = [
    "KEY_ENV", "SECRET", "MODEL", "Provider", "Waits", "provider", "leaked", "conversation", "db_bytes",
]

KEY_ENV = "COMPACTION_TEST_UNTRUSTED_KEY"
#: A key whose pieces of 8 characters are all distinct, so any leaked piece is found.
SECRET = "sk-test-7fQ2mZ9pLx4vR8tK1wN6cY3hB5dJ0gSa"
MODEL = "fake-summarizer"


def leaked(data: str | bytes, key: str = SECRET) -> list[str]:
    """Return every piece of 8 characters of ``key`` found in ``data``."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return sorted({key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8] in text})


class Waits(list[float]):
    """An injected ``sleep`` that records the waits instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@dataclass
class Provider:
    """One provider: its fake server and how to talk to it."""

    kind: str
    fake: Any

    @property
    def key_header(self) -> str:
        return "authorization" if self.kind == "openai" else "x-api-key"

    @property
    def base_url(self) -> str:
        return str(self.fake.base_url)

    def summarizer(self, waits: Waits | None = None, **overrides: Any) -> HTTPSummarizer:
        options: dict[str, Any] = {
            "api_key_env": KEY_ENV,
            "timeout_seconds": 2.0,
            "max_retries": 1,
            "backoff_base": 0.001,
            "backoff_max": 5.0,
            "sleep": waits if waits is not None else Waits(),
        }
        options.update(overrides)
        cls = OpenAIChatSummarizer if self.kind == "openai" else AnthropicMessagesSummarizer
        return cls(self.base_url, MODEL, **options)

    def gated(self, text: str = "hello", max_output_tokens: int = 50) -> GatedRequest:
        request = OutboundRequest("l1", "Summarize.", (("user", ({"type": "text", "text": text},)),))
        return gate(request, compression_image_settings(Recipe()), format=self.kind,  # type: ignore[arg-type]
                    model=MODEL, max_output_tokens=max_output_tokens)

    def answer(self, request: Any, text: Any, **fields: Any) -> dict[str, Any]:
        """A finished 200 answer carrying ``text`` (a string, or the provider's content list)."""
        if self.kind == "openai":
            return completion(request, text, "stop", **fields)
        return message(request, text, "end_turn", **fields)

    def script(self, answer: Callable[[Any, dict[str, str]], Any]) -> None:
        """Answer every request with ``answer(request, headers)`` (a JSON value or a ``Raw``)."""
        self.fake.set_mode("scripted", answer=answer)

    def key_of(self, headers: dict[str, str]) -> str:
        """The key the client sent, read back from the request headers."""
        value = headers.get(self.key_header, "")
        return value.removeprefix("Bearer ")

    def settings(self, **overrides: Any) -> SummarizerSettings:
        options: dict[str, Any] = {
            "kind": self.kind, "base_url": self.base_url, "model": MODEL, "api_key_env": KEY_ENV,
            "timeout_seconds": 2.0, "max_retries": 0,
        }
        options.update(overrides)
        return SummarizerSettings(**options)

    def recipe_toml(self, **overrides: Any) -> str:
        """A recipe file's text: small chunks, this provider's ``[summarizer]`` table."""
        table = self.settings(**overrides).to_dict()
        lines = [
            "chunk_target_tokens = 150", "chunk_min_messages = 2", "merge_fanout = 6",
            "summary_max_tokens = 120", "summarizer_context_tokens = 6000", "", "[summarizer]",
        ]
        for name, value in table.items():
            lines.append(f"{name} = {value!r}".replace("'", '"'))
        return "\n".join(lines) + "\n"


def text_recipe(provider: Provider, **overrides: Any) -> Recipe:
    base: dict[str, Any] = {
        "chunk_target_tokens": 150,
        "chunk_min_messages": 2,
        "merge_fanout": 6,
        "summary_max_tokens": 120,
        "summarizer_context_tokens": 6000,
        "summarizer": provider.settings(),
    }
    base.update(overrides)
    return Recipe(**base)


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Provider]:
    """Each provider in turn, its fake started, the test key set in :data:`KEY_ENV`."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    fake: Any = FakeOpenAI() if request.param == "openai" else FakeAnthropic()
    fake.start()
    try:
        yield Provider(request.param, fake)
    finally:
        fake.stop()


def conversation(rounds: int, filler: int = 12) -> list[Message]:
    """Tool rounds of plain text: a prompt, a call, its result, an answer."""
    out: list[Message] = []
    for i in range(rounds):
        lines = "\n".join(f"line {j}: value_{i}_{j} = compute({j})" for j in range(filler))
        out += [
            Message("user", ({"type": "text", "text": f"Please fix bug {i} in src/mod_{i}.py"},)),
            Message("assistant", (
                {"type": "text", "text": f"I'll read src/mod_{i}.py first."},
                {"type": "tool_use", "id": f"call_{i}", "name": "read_file", "input": {"path": f"src/mod_{i}.py"}},
            )),
            Message("user", ({"type": "tool_result", "tool_use_id": f"call_{i}", "content": lines},)),
            Message("assistant", ({"type": "text", "text": f"Fixed bug {i}: the loop bound was off by one."},)),
        ]
    return out


def db_bytes(path: Path) -> bytes:
    """Every byte of an SQLite store on disk, the WAL and shared-memory files included."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))
