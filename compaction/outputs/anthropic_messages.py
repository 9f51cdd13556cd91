"""Anthropic Messages request bodies (https://docs.anthropic.com/en/api/messages).

Blocks pass through verbatim (the internal form is this shape), except a thinking block
without a signature, which Anthropic would refuse: it ships as loud text; consecutive messages of
one role merge into one turn; ``tool_result`` blocks come first in their user turn; the
conversation opens with a user turn (one is inserted, and priced, when the history starts
with the assistant); ``max_tokens`` is required by the API, so it is always written.

A request may end with an assistant turn (a store whose newest message is the assistant's):
Anthropic reads it as a prefill of the answer and refuses one whose content ends in
whitespace ("final assistant content cannot end with trailing whitespace", the API's answer
quoted in https://github.com/tailcallhq/forgecode/issues/1872 and
https://github.com/anomalyco/opencode/issues/1295), so that turn's last text ships without
its trailing whitespace (:func:`final_assistant_content`), in the body only: the store keeps
it; the planner and the gate count that message as it ships (``wire.final_message_blocks``).
Nor does Anthropic take a ``thinking`` block in that turn when the request does not enable
thinking (it never does here): "When thinking is disabled, an `assistant` message in the final
position cannot contain `thinking`" (quoted in
https://github.com/anthropics/claude-code/issues/7946; "The final block in an assistant message
cannot be `thinking`", tailcallhq/forgecode#2107), so a signed one ships there as loud text
(:data:`FINAL_THINKING` and its text), counted as that text.  A ``redacted_thinking`` block
ships there as text too: that error names ``thinking`` only, but the API holds the two kinds
to the same rules in that turn ("`thinking` or `redacted_thinking` blocks in the latest
assistant message cannot be modified", quoted in anthropics/claude-code#19539), and no
evidence says it takes a redacted one there with thinking disabled.  Its data is ciphertext no
model reads as text, so it ships as the loud line
:data:`~compaction.tokens.counting.REDACTED_THINKING`, which its count never falls below.
In an earlier turn a ``redacted_thinking`` block ships verbatim when its ``data`` is a string
(the API requires ``data``, a string); one whose data is missing, ``None``, a number, a list or
an object ships as that loud line too, in any turn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from ..blocks import KNOWN_BLOCK_TYPES, canonical_json, replace_data_uris, unknown_block_text
from ..tokens.counting import REDACTED_THINKING, UNSIGNED_THINKING, blocks_text_tokens, shipped_blocks
from ..types import RequestFormatName
from .base import RequestFormat, WireMessage

__all__ = [
    "AnthropicMessages",
    "OPENING_TURN",
    "DEFAULT_MAX_TOKENS",
    "CACHE_CONTROL",
    "final_assistant_content",
    "FINAL_THINKING",
]

#: The user turn put first when a rendered history would open with the assistant.
OPENING_TURN = "[the conversation continues]"
#: ``max_tokens`` when the caller names none (the API requires the field).
DEFAULT_MAX_TOKENS = 4096
#: The marker of a prompt-cache breakpoint (the default 5-minute cache).
CACHE_CONTROL = {"type": "ephemeral"}

#: What a signed thinking block in a request's final assistant turn ships as, before its text
#: (Anthropic takes no thinking block there, see the module docstring): 4 tokens, so the text
#: block (its ``type`` and ``text`` keys included) stays within the signed block's count
#: (its text, its signature and THINKING_FRAME).
FINAL_THINKING = "[reasoning]\n"


#: Content block types the Anthropic Messages API takes in a request (its own server-tool
#: blocks included, which Claude Code transcripts carry); any other type ships as loud text.
ANTHROPIC_BLOCK_TYPES = frozenset(
    {
        "text", "image", "document", "search_result", "tool_use", "tool_result", "thinking",
        "redacted_thinking", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
        "code_execution_tool_result", "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result", "mcp_tool_use", "mcp_tool_result", "container_upload",
    }
)  # fmt: skip


#: Block types Anthropic takes inside a ``tool_result``'s content (the SDK's
#: ``ToolResultBlockParam`` content union: text, image, search_result, document,
#: tool_reference); any other (a nested result, a call, a thinking block, an unknown type)
#: ships as the loud text of its JSON, which is how it is counted.
RESULT_BLOCK_TYPES = frozenset({"text", "image", "search_result", "document", "tool_reference"})


def _sendable_in_result(block: dict[str, Any]) -> dict[str, Any]:
    """Return one block of a ``tool_result``'s content as Anthropic takes it there."""
    kind = block.get("type")
    if kind in ("text", "image"):
        return block
    if kind in RESULT_BLOCK_TYPES:  # verbatim, a data: URI in it as its stand-in
        return _without_data_uris(block)
    return {"type": "text", "text": unknown_block_text(block)}


def _sendable(block: dict[str, Any]) -> dict[str, Any]:
    """Return ``block`` as Anthropic accepts it: an unsigned thinking block becomes loud text, and
    so does a block of a type Anthropic does not know (another provider's ``web_search_call``,
    a converted trajectory's ``tool_call``), counted as that text."""
    kind = block.get("type")
    if kind == "thinking" and not block.get("signature"):
        return {"type": "text", "text": UNSIGNED_THINKING + str(block.get("thinking", ""))}
    if kind == "redacted_thinking" and not _readable_data(block):
        # the API requires data, a string of the provider's ciphertext; any other (None, a
        # number, a list, an object, missing) would be refused, so it ships as the final
        # turn's loud line, which the block's count never falls below
        return {"type": "text", "text": REDACTED_THINKING}
    if kind not in ANTHROPIC_BLOCK_TYPES:
        # the gate's cache breakpoint goes on the stand-in, not into its text (where it would
        # mark nothing and ship uncounted)
        marker = block.pop("cache_control", None)
        stand_in: dict[str, Any] = {"type": "text", "text": unknown_block_text(block)}
        if marker is not None:
            stand_in["cache_control"] = marker
        return stand_in
    if kind not in KNOWN_BLOCK_TYPES:  # Anthropic's own block, verbatim: never an image input
        return _without_data_uris(block)
    if kind == "tool_result" and isinstance(block.get("content"), list):
        # a result's blocks besides texts and images are counted as their text stand-ins; a
        # data: URI inside one ships as its stand-in too, never as an undecided image
        return {**block, "content": [_sendable_in_result(b) for b in block["content"]]}
    return block


def _readable_data(block: dict[str, Any]) -> bool:
    """Return whether a ``redacted_thinking`` block's ``data`` has the type Anthropic requires: a string."""
    return isinstance(block.get("data"), str)


def _without_data_uris(block: dict[str, Any]) -> dict[str, Any]:
    """Return ``block`` with each ``data:`` image URI in its strings replaced by its stand-in."""
    raw = canonical_json(block)
    if ";base64," not in raw:
        return block
    result: dict[str, Any] = json.loads(replace_data_uris(raw))
    return result


def _final_block(block: dict[str, Any]) -> dict[str, Any]:
    """Return one block of a final assistant turn as Anthropic takes it there (thinking as text)."""
    kind = block.get("type")
    if kind == "thinking":
        return {"type": "text", "text": FINAL_THINKING + str(block.get("thinking", ""))}
    if kind == "redacted_thinking":
        return {"type": "text", "text": REDACTED_THINKING}
    return block


def final_assistant_content(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return a final assistant turn's blocks as Anthropic takes them: no thinking block, no trailing whitespace.

    Each ``thinking`` block (signed: an unsigned one is text already) becomes a text block of
    :data:`FINAL_THINKING` and its thinking, each ``redacted_thinking`` block a text block of
    :data:`~compaction.tokens.counting.REDACTED_THINKING` (its ciphertext is not sent), and
    then the last text block is right-stripped
    (see the module docstring; Python's ``str.rstrip`` strips every Unicode whitespace
    character, at least what the API calls whitespace).  Only those blocks change (new
    dicts, a text's ``cache_control`` kept); the input list is not changed.  A text left
    empty cannot occur: blank texts never ship
    (:func:`~compaction.tokens.counting.shipped_blocks`) and a converted thinking block
    keeps its marker.

    Args:
        content: the blocks of the last turn of a rendered body, an assistant's.

    Returns:
        A new list of the blocks, its thinking as text, the last text block without
        trailing whitespace.
    """
    out = [_final_block(b) for b in content]
    for position in range(len(out) - 1, -1, -1):
        block = out[position]
        if block.get("type") == "text":
            text = str(block.get("text", ""))
            if text != text.rstrip():
                out[position] = {**block, "text": text.rstrip()}
            break
    return out


def _last_text(content: list[dict[str, Any]]) -> str | None:
    """Return the text of the last ``text`` block of ``content`` (``None`` without one)."""
    texts = [b for b in content if b.get("type") == "text"]
    return str(texts[-1].get("text", "")) if texts else None


def _result_content_problem(result: dict[str, Any]) -> str | None:
    """Return what Anthropic would refuse in one ``tool_result``'s content, or ``None``.

    Refused: an error result without content ("content cannot be empty if is_error is true");
    an empty or whitespace string (an empty string was refused,
    https://github.com/zed-industries/zed/pull/27130; whitespace is held to the rule for
    text blocks); an empty list (no evidence it is taken; the engine never ships one); an
    empty or whitespace text block inside it ("text content blocks must contain non-whitespace
    text"); a block of a type not in :data:`RESULT_BLOCK_TYPES`.  A result without ``content`` is taken (the SDK's ``ToolResultBlockParam`` does not
    require it).
    """
    content = result.get("content")
    if content is None:
        return "an error tool_result without content" if result.get("is_error") else None
    if isinstance(content, str):
        return None if content.strip() else "a tool_result whose content is an empty or whitespace string"
    if isinstance(content, list):
        if not content:
            return "a tool_result whose content is an empty list"
        foreign = sorted({str(b.get("type")) for b in content if b.get("type") not in RESULT_BLOCK_TYPES})
        if foreign:
            return f"a tool_result holding block types Anthropic does not take in one: {', '.join(foreign)}"
        if any(
            isinstance(b, dict) and b.get("type") == "text" and not str(b.get("text", "")).strip()
            for b in content
        ):
            return "a tool_result holding an empty or whitespace text block"
    return None


class AnthropicMessages(RequestFormat):
    """The Anthropic Messages shape (``{"model", "max_tokens", ["system"], "messages", ["tools"]}``)."""

    name: ClassVar[RequestFormatName] = "anthropic"
    title: ClassVar[str] = "Anthropic Messages"
    default_model: ClassVar[str] = "claude-sonnet-4-5"
    image_types: ClassVar[frozenset[str]] = frozenset({"image", "image_url", "input_image"})

    default_output_cap: ClassVar[int | None] = DEFAULT_MAX_TOKENS
    #: Another provider's encrypted reasoning (Codex ``encrypted_content``): Anthropic can
    #: decrypt only its own ``redacted_thinking``.
    dropped_block_types: ClassVar[frozenset[str]] = frozenset({"encrypted_reasoning"})
    #: Anthropic's own server-tool and MCP blocks ship as they are (:data:`ANTHROPIC_BLOCK_TYPES`).
    native_block_types: ClassVar[frozenset[str]] = ANTHROPIC_BLOCK_TYPES
    native_result_block_types: ClassVar[frozenset[str]] = RESULT_BLOCK_TYPES

    def render_conversation(self, system: str | None, messages: Sequence[WireMessage]) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        system_texts = [system] if system else []
        for role, blocks in messages:
            if role == "system":
                system_texts.extend(b.get("text", "") for b in blocks)
                continue
            # a message of nothing (or of dropped blocks only) ships as its counted stand-in
            content = [
                _sendable(json.loads(canonical_json(b)))
                for b in shipped_blocks(blocks, self.dropped_block_types)
            ]
            if out and out[-1]["role"] == role:
                out[-1]["content"].extend(content)
            else:
                out.append({"role": role, "content": content})
        for message in out:
            if message["role"] == "user":
                results = [b for b in message["content"] if b.get("type") == "tool_result"]
                others = [b for b in message["content"] if b.get("type") != "tool_result"]
                message["content"] = results + others
        if out and out[0]["role"] != "user":
            out.insert(0, {"role": "user", "content": [{"type": "text", "text": OPENING_TURN}]})
        if out and out[-1]["role"] == "assistant":  # a prefill: no trailing whitespace
            out[-1]["content"] = final_assistant_content(out[-1]["content"])
        body: dict[str, Any] = {}
        if system_texts:
            body["system"] = "\n\n".join(system_texts)
        body["messages"] = out
        return body

    #: Blocks Anthropic takes ``cache_control`` on (not thinking blocks).
    cache_markers: ClassVar[bool] = True

    def add_cache_hints(self, body: dict[str, Any], *, key: str | None, mark_prefix: bool) -> None:
        # Prompt caching (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching):
        # the cache prefix runs tools, system, messages; a breakpoint at the end of the system
        # text (or of the tools, without one) caches both.  At most 4 breakpoints a request.
        if not mark_prefix:
            return
        if body.get("system"):
            system = body["system"]
            body["system"] = [{"type": "text", "text": system, "cache_control": dict(CACHE_CONTROL)}]
        elif body.get("tools"):
            body["tools"][-1] = {**body["tools"][-1], "cache_control": dict(CACHE_CONTROL)}

    def render_tools(self, tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in tools
        ]

    def framing_tokens(self, system: str | None, first_role: str | None, encoding: str) -> int:
        tokens = super().framing_tokens(system, first_role, encoding)
        if first_role is not None and first_role != "user":
            tokens += blocks_text_tokens([{"type": "text", "text": OPENING_TURN}], encoding)
        return tokens

    def grammar_problems(self, body: dict[str, Any]) -> list[str]:
        problems: list[str] = []
        messages = body.get("messages", [])
        if messages and messages[0].get("role") != "user":
            problems.append("the first message is not a user turn")
        called: set[str] = set()  # tool_use ids of the assistant turn just before
        seen: set[str] = set()
        for index, message in enumerate(messages):
            role = message.get("role")
            content = message.get("content") if isinstance(message.get("content"), list) else []
            if index and messages[index - 1].get("role") == role:
                problems.append(f"message {index}: two {role} turns in a row")
            kinds = [b.get("type") for b in content]
            unknown = sorted({str(k) for k in kinds if k not in ANTHROPIC_BLOCK_TYPES})
            if unknown:
                problems.append(f"message {index}: block types Anthropic does not take: {', '.join(unknown)}")
            if not content:
                problems.append(f"message {index}: an empty {role} turn")
            if any(b.get("type") == "redacted_thinking" and not _readable_data(b) for b in content):
                # the API: data is a required string
                problems.append(f"message {index}: a redacted_thinking block whose data is not a string")
            if any(b.get("type") == "text" and not str(b.get("text", "")).strip() for b in content):
                # the API: "text content blocks must contain non-whitespace text"
                problems.append(f"message {index}: an empty or whitespace text block")
            if role == "user":
                for block in content:
                    trouble = _result_content_problem(block) if block.get("type") == "tool_result" else None
                    if trouble:
                        problems.append(f"message {index}: {trouble} (for {block.get('tool_use_id')!r})")
                results = [b.get("tool_use_id") for b in content if b.get("type") == "tool_result"]
                if kinds[: len(results)] != ["tool_result"] * len(results):
                    problems.append(f"message {index}: tool_result blocks must come first in a user turn")
                if set(results) != called or len(results) != len(set(results)):
                    problems.append(
                        f"message {index}: results {sorted(map(str, results))} do not answer the calls "
                        f"{sorted(called)} of the turn before, once each"
                    )
                called = set()
                continue
            if "tool_result" in kinds:
                problems.append(f"message {index}: a tool_result in an {role} turn")
            if self._has_image(content):
                problems.append(f"message {index}: an image in an {role} turn")
            if called:
                problems.append(f"message {index}: calls {sorted(called)} are not answered in the next turn")
            called = set()
            for block in content:
                if block.get("type") == "tool_use":
                    if block["id"] in seen:
                        problems.append(f"message {index}: tool_use id {block['id']!r} is used twice")
                    seen.add(block["id"])
                    called.add(block["id"])
        if called:
            problems.append(f"the request ends before the results of calls {sorted(called)}")
        if messages and messages[-1].get("role") == "assistant":
            last = messages[-1].get("content")
            text = _last_text(last) if isinstance(last, list) else last if isinstance(last, str) else None
            if text is not None and text != text.rstrip():
                # the API: "final assistant content cannot end with trailing whitespace"
                problems.append(f"message {len(messages) - 1}: the final assistant turn ends with whitespace")
            for kind in ("thinking", "redacted_thinking"):
                if isinstance(last, list) and any(b.get("type") == kind for b in last):
                    # the API: "an `assistant` message in the final position cannot contain `thinking`"
                    problems.append(
                        f"message {len(messages) - 1}: the final assistant turn holds a {kind} block"
                    )
        return problems

    def _has_image(self, content: list[dict[str, Any]]) -> bool:
        return any(
            b.get("type") in self.image_types
            or (
                b.get("type") == "tool_result"
                and isinstance(b.get("content"), list)
                and self._has_image(b["content"])
            )
            for b in content
        )
