"""Benchmark: the counted tokens of a whole transcript against tiktoken's count of what ships.

For each transcript in ``examples/`` with thinking blocks or tool calls, rendered as one OpenAI
Chat request (every message raw, no images: their prices are the same either way): the text
tokens counted before (thinking counted, tool-call arguments escaped twice), counted now for
Anthropic Messages (thinking ships) and for OpenAI Chat (thinking dropped), and tiktoken's
count of every string of the OpenAI body (ids, names, arguments, texts; 3 per message).

A second table compiles each transcript in ``examples/`` as one OpenAI Chat request (a budget
that holds it whole, images as placeholders) and sets the request's reported tokens beside an
independent tiktoken count of the shipped body (``request.payload``): the OpenAI cookbook's
count, 3 tokens a message plus every string of it (role, content, names, ids, arguments; the
``type`` tags aside) plus 3 priming the reply.  The cookbook gives no framing for tool calls;
we count a call's id and frame as the larger of the two (``TOOL_CALL_OVERHEAD``, 3 tokens, is
more than a real id only when the id is short).  The column ``calls`` counts them and ``rest``
is the whole difference: mostly ``"\\n\\n"`` joins, which we count
as 1 token and tiktoken often folds into the punctuation or whitespace before them, and image
placeholders' joins.  ``tool msgs`` counts the ``tool`` messages (each framed by itself, as
its result is counted), ``merged`` the stored messages the body no longer shows apart (they
ship merged into the turn before them, see ``RequestFormat.merge_saving``).  ``dropped``
counts the blocks the format dropped (reported in the request's ``dropped``).  The last line
says how many transcripts are within 1% of their body's count.  A third table does the same for
Anthropic Messages against the property tests' independent count (a floor: never below it).

Run ``pytest bench/bench_count_shipped.py --benchmark-only -q -s`` or ``python
bench/bench_count_shipped.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compaction import Recipe, Store, compile_request
from compaction.blocks import DATA_URI_RE, Message, canonical_json
from compaction.compile import CompiledRequest
from compaction.formats import load_transcript
from compaction.outputs import request_format
from compaction.tokens.counting import count_text
from compaction.tokens.encodings import get_encoding

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from body_tokens import string_tokens  # noqa: E402

ENCODING = "o200k_base"


def _old_tool_call_tokens(block: dict[str, Any]) -> int:
    """The count of COUNTING_VERSION 4: the call's JSON, its arguments a string inside it."""
    wire = json.dumps(
        {
            "id": block.get("id", ""),
            "type": "function",
            "function": {"name": block.get("name", ""), "arguments": canonical_json(block.get("input", {}))},
        },
        ensure_ascii=False,
    )
    return 8 + count_text(DATA_URI_RE.sub("", wire), ENCODING)  # version 4's frame: 8 a call


def _new_tool_call_tokens(block: dict[str, Any]) -> int:
    return request_format("anthropic").text_tokens([block], ENCODING) - request_format(
        "anthropic"
    ).text_tokens([], ENCODING)


def _examples() -> Iterator[tuple[Path, list[Message]]]:
    """Each transcript file in ``examples/`` (its README aside) and its messages, read leniently."""
    for path in sorted(ROOT.glob("examples/**/*")):
        if path.is_file() and path.name != "README.md":
            yield path, load_transcript(path, lenient=True).messages


def _compiled_whole(messages: list[Message], output_format: str) -> CompiledRequest:
    """``messages`` compiled as one request for ``output_format`` at a budget that holds them whole
    (4,000,000 tokens), images as placeholders."""
    with Store(":memory:") as store:
        store.append(messages)
        return compile_request(
            store, Recipe(budget_tokens=4_000_000, output_format=output_format, vision=False)
        )


def table() -> str:
    encode = get_encoding(ENCODING).encode_ordinary

    def uri_free(text: str) -> int:  # a data URI in a text is priced as an image, not as text
        return len(encode(DATA_URI_RE.sub("", text)))

    openai, anthropic = request_format("openai"), request_format("anthropic")
    lines = [
        f"{'transcript':58} {'before':>9} {'anthropic':>10} {'openai':>9} {'ships':>9} {'openai/ships':>13}"
    ]
    for path, messages in _examples():
        kinds = {b.get("type") for m in messages for b in m.content}
        if not kinds & {"thinking", "redacted_thinking", "tool_use"}:
            continue
        now = sum(anthropic.text_tokens(m.content, ENCODING) for m in messages)
        calls = [b for m in messages for b in m.content if b.get("type") == "tool_use"]
        before = now + sum(_old_tool_call_tokens(b) - _new_tool_call_tokens(b) for b in calls)
        for_openai = sum(openai.text_tokens(m.content, ENCODING) for m in messages)
        body = openai.render_conversation(None, [(m.role, m.content) for m in messages])
        ships = sum(3 + string_tokens(m, uri_free, aside=("type", "role")) for m in body["messages"])
        lines.append(
            f"{path.relative_to(ROOT / 'examples')!s:58} {before:9,} {now:10,} {for_openai:9,} {ships:9,}"
            f" {for_openai / ships:13.3f}"
        )
    return "\n".join(lines)


def compiled_table() -> str:
    """Each example compiled whole for OpenAI Chat: reported tokens against the shipped body's count."""
    encode = get_encoding(ENCODING).encode_ordinary
    lines = [
        f"{'transcript':58} {'reported':>9} {'body':>9} {'ratio':>7} {'calls':>6} {'tool msgs':>9}"
        f" {'merged':>6} {'rest':>5} {'dropped':>7}"
    ]
    within = total = 0
    for path, messages in _examples():
        compiled = _compiled_whole(messages, "openai")
        shipped = json.loads(compiled.request.payload)["messages"]
        body = sum(3 + string_tokens(m, lambda text: len(encode(text))) for m in shipped) + 3
        calls = sum(len(m.get("tool_calls") or []) for m in shipped)
        tool_messages = sum(m.get("role") == "tool" for m in shipped)
        stored = [m for m in messages if m.role != "system"]
        apart = sum(
            1 for m in stored if any(b.get("type") != "tool_result" for b in m.content) or not m.content
        )
        merged = apart - sum(m.get("role") in ("user", "assistant") for m in shipped)
        rest = compiled.tokens - body
        assert compiled.tokens >= body, path  # never below what ships
        total += 1
        within += compiled.tokens <= body * 1.01
        lines.append(
            f"{path.relative_to(ROOT / 'examples')!s:58} {compiled.tokens:9,} {body:9,}"
            f" {compiled.tokens / body:7.4f} {calls:6,} {tool_messages:9,} {merged:6,} {rest:5,}"
            f" {len(compiled.request.dropped):7,}"
        )
    lines.append(f"within 1%: {within} of {total}")
    return "\n".join(lines)


def anthropic_table() -> str:
    """Each example compiled whole for Anthropic Messages: reported tokens against its body's count.

    The body's count is ``compaction.fuzz_checks.independent_tokens`` (the property tests'): 3
    a message plus every string of it (a tool call's input by its strings only, not its JSON
    keys and punctuation; a tool result with no frame of its own) plus 3.  Anthropic's own
    framing is not published, so this is a floor the count must stay above, not a target.
    """
    from compaction.fuzz_checks import independent_tokens

    lines = [f"{'transcript':58} {'reported':>9} {'body':>9} {'ratio':>7}"]
    for path, messages in _examples():
        compiled = _compiled_whole(messages, "anthropic")
        body = independent_tokens(json.loads(compiled.request.payload), compiled.request.model)
        assert compiled.tokens >= body, path  # never below what ships
        lines.append(
            f"{path.relative_to(ROOT / 'examples')!s:58} {compiled.tokens:9,} {body:9,} {compiled.tokens / body:7.4f}"
        )
    return "\n".join(lines)


@pytest.mark.benchmark(min_rounds=1)
def test_shipped_counts(benchmark) -> None:  # type: ignore[no-untyped-def]
    print("\n" + benchmark.pedantic(table, rounds=1, iterations=1))


@pytest.mark.benchmark(min_rounds=1)
def test_compiled_request_against_its_shipped_body(benchmark) -> None:  # type: ignore[no-untyped-def]
    print("\n" + benchmark.pedantic(compiled_table, rounds=1, iterations=1))


@pytest.mark.benchmark(min_rounds=1)
def test_compiled_anthropic_request_against_its_shipped_body(benchmark) -> None:  # type: ignore[no-untyped-def]
    print("\n" + benchmark.pedantic(anthropic_table, rounds=1, iterations=1))


if __name__ == "__main__":
    print(table())
    print()
    print(compiled_table())
    print()
    print(anthropic_table())
