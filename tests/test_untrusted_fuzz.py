"""Fuzz the HTTP summarizers' answer handling: any answer is a clean, bounded summary or one error.

Hypothesis builds answers a server could send -- provider-shaped or not, any status, odd
``Retry-After`` values, the key (or a piece of it, split by whitespace or escaped) in any
string -- and serves them through ``httpx.MockTransport``.  For every one, ``summarize``
either returns a summary within :func:`~compaction.summarizers._http.summary_token_bound`
whose text and provenance hold no 8 characters of the key, or raises exactly one
:class:`~compaction.errors.SummarizerError` (refused, unavailable or plain) whose text holds
none either; never another exception, never a negative or over-long wait.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from http_providers import KEY_ENV, MODEL, SECRET, Waits, leaked
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.compactor import compression_image_settings
from compaction.errors import SummarizerError
from compaction.recipe import Recipe
from compaction.summarizers._http import summary_token_bound
from compaction.summarizers.anthropic import AnthropicMessagesSummarizer
from compaction.summarizers.openai_chat import OpenAIChatSummarizer
from compaction.tokens.counting import count_text
from compaction.wire import OutboundRequest, gate

CAP = 40
ECHOES = [
    SECRET, SECRET[:12] + "\n" + SECRET[12:], "".join(f"\\u{ord(c):04x}" for c in SECRET),
    "".join(f"%{ord(c):02X}" for c in SECRET), "\u200b".join(SECRET), SECRET[:22], SECRET[9:30],
]

texts = st.one_of(
    st.text(max_size=30),
    st.builds(lambda a, k, b: a + k + b, st.text(max_size=10), st.sampled_from(ECHOES), st.text(max_size=10)),
    st.sampled_from(["stop", "end_turn", "length", "max_tokens", "refusal", "error", "overloaded_error",
                     "prompt is too long", "text", "message"]),
    st.builds(lambda n: "word " * n, st.integers(0, 400)),
)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=12,
)


@st.composite
def answers(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    """A provider-shaped answer with every field drawn from anything."""
    pick = draw(st.sampled_from(["text", "parts", "any"]))
    content: Any = draw(texts) if pick == "text" else (
        draw(st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "thinking"]), "text": values}),
                      max_size=3)) if pick == "parts" else draw(values))
    if kind == "openai":
        message = {"content": content, "refusal": draw(st.none() | texts)}
        answer: dict[str, Any] = {"choices": [{"message": message, "finish_reason": draw(texts)}]}
    else:
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        answer = {"type": draw(st.sampled_from(["message", "error"])), "content": blocks, "stop_reason": draw(texts)}
    for name in ("model", "usage", "error"):
        if draw(st.booleans()):
            answer[name] = draw(values)
    return answer


bodies = st.one_of(
    st.builds(lambda v: json.dumps(v).encode(), values),
    st.binary(max_size=40),
)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_answer_is_a_clean_bounded_summary_or_one_summarizer_error(kind: str, data: st.DataObject) -> None:
    status = data.draw(st.sampled_from([200, 200, 200, 400, 401, 413, 429, 500, 503, 529, 302]))
    body = data.draw(st.builds(lambda a: json.dumps(a).encode(), answers(kind)) | bodies)
    headers = data.draw(st.dictionaries(st.sampled_from(["retry-after", "retry-after-ms"]), texts, max_size=2))
    headers = {k: v.encode("ascii", "replace").decode().replace("\r", "").replace("\n", "") for k, v in headers.items()}

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": "application/json", **headers})

    waits = Waits()
    cls = OpenAIChatSummarizer if kind == "openai" else AnthropicMessagesSummarizer
    with pytest.MonkeyPatch.context() as patch, httpx.Client(transport=httpx.MockTransport(respond)) as client:
        patch.setenv(KEY_ENV, SECRET)
        summarizer = cls("http://127.0.0.1:9/v1", MODEL, api_key_env=KEY_ENV, client=client, sleep=waits,
                         max_retries=1, backoff_max=2.0)
        request = gate(OutboundRequest("l1", "Summarize.", (("user", ({"type": "text", "text": "hi"},)),)),
                       compression_image_settings(Recipe()), format=kind, model=MODEL, max_output_tokens=CAP)
        try:
            result = summarizer.summarize(request, kind="l1")
        except SummarizerError as err:
            assert leaked(str(err) + repr(err) + repr(getattr(err, "code", None))) == []
        else:
            assert result.text.strip() and count_text(result.text) <= (summary_token_bound(CAP) or 0)
            assert leaked(result.text) == [] and leaked(json.dumps(result.provenance)) == []
    assert all(0 <= w <= 2.0 for w in waits)
