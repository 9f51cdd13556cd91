"""Prompt-cache hints on compiled requests (issue #12, item 2).

Anthropic Messages: ``cache_control`` breakpoints on the stable prefix: the end of the system
text (or of the tools without one), the end of the summary stack, and the newest message;
never more than four, never on a thinking block, never on a summarizer request.  OpenAI
Chat: the recipe's ``prompt_cache_key``, on compiled requests only.
"""

from __future__ import annotations

import json
import re
from typing import Any

from strategies import CapturingSummarizer, check_provider_grammar

from compaction import Compactor, Message, Recipe, Store, compile_request


def _markers(value: Any) -> int:
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(_markers(v) for v in value.values())
    if isinstance(value, list):
        return sum(_markers(v) for v in value)
    return 0


def _history(turns: int) -> list[Message]:
    messages = [Message("system", ({"type": "text", "text": "You are a careful coding agent."},))]
    for index in range(turns):
        messages.append(Message("user", ({"type": "text", "text": f"step {index}: fix the parser for case {index}"},)))
        messages.append(Message("assistant", (
            {"type": "thinking", "thinking": f"case {index} needs a look", "signature": "sig"},
            {"type": "text", "text": f"fixed case {index} in src/parser_{index}.py; all tests pass"},
        )))
    messages.append(Message("user", ({"type": "text", "text": "and now the docs"},)))
    return messages


def test_anthropic_marks_system_summaries_and_the_newest_message() -> None:
    with Store(":memory:") as store:
        store.append(_history(40))
        recipe = Recipe(budget_tokens=1500, output_format="anthropic", chunk_target_tokens=200)
        Compactor(store, recipe, CapturingSummarizer()).tick(keep_tail_tokens=400, close_tail=True)
        compiled = compile_request(store, recipe)
        body = compiled.request.body()
        check_provider_grammar(body, "anthropic")
        assert compiled.summaries
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        first, last = body["messages"][0], body["messages"][-1]
        (marked,) = [b for b in first["content"] if "cache_control" in b]  # the end of the summary stack
        summaries = [b for b in first["content"] if re.match(r"\[Messages? \d+(–\d+)?, L\d+\]", b["text"])]
        assert marked is summaries[-1] and marked["cache_control"] == {"type": "ephemeral"}
        assert last["content"][-1]["cache_control"] == {"type": "ephemeral"}  # the newest message
        assert _markers(body) == 3
        assert not any(
            "cache_control" in b for m in body["messages"] for b in m["content"] if b["type"] == "thinking"
        )
        # the markers are metadata: the tokens are the same without them
        plain = compile_request(store, recipe.replace(cache_breakpoints=False))
        assert _markers(plain.request.body()) == 0 and plain.tokens == compiled.tokens


def test_summarizer_requests_carry_no_cache_hints() -> None:
    with Store(":memory:") as store:
        store.append(_history(30))
        summarizer = CapturingSummarizer()
        recipe = Recipe(output_format="anthropic", chunk_target_tokens=200, prompt_cache_key="agent-42")
        Compactor(store, recipe, summarizer).tick(close_tail=True)
        assert summarizer.requests
        for _kind, payload in summarizer.requests:
            body = json.loads(payload)
            assert _markers(body) == 0 and "prompt_cache_key" not in body


def test_openai_sends_the_recipe_prompt_cache_key() -> None:
    with Store(":memory:") as store:
        store.append(_history(3))
        keyed = compile_request(store, Recipe(budget_tokens=4000, prompt_cache_key="agent-42")).request.body()
        assert keyed["prompt_cache_key"] == "agent-42" and _markers(keyed) == 0
        assert "prompt_cache_key" not in compile_request(store, Recipe(budget_tokens=4000)).request.body()
