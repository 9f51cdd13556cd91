"""Gemini CLI chat recordings (``~/.gemini/tmp/<project hash>/chats/session-*.json``).

What Gemini CLI's ``ChatRecordingService`` (google-gemini/gemini-cli,
``packages/core/src/services/chatRecordingService.ts``) writes for every interactive session,
one JSON document: ``{"sessionId", "projectHash", "startTime", "lastUpdated", "messages": [...]}``.
Each message record has ``id``, ``timestamp``, ``type`` and ``content`` (a string, one Gemini
``Part`` or a list of them):

* ``user`` -> a user message (``text`` parts as text, ``inlineData`` as an inline image,
  ``fileData`` as an image reference);
* ``gemini`` -> an assistant message: its ``thoughts`` (``subject`` / ``description``
  summaries) as ``thinking`` blocks with no signature, its text, then one ``tool_use`` block
  per ``toolCalls`` entry (``id``, ``name``, ``args``); the calls' ``result`` parts
  (``functionResponse.response`` ``output`` or ``error``, and any inline image a tool
  returned) become the ``tool_result`` blocks of one user message right after it, an error
  when the call's ``status`` is not ``success``; a call with no result (cancelled before it
  ran) gets a result saying so, so every call keeps its answer; ``model`` and ``tokens`` go
  to the message's ``meta``;
* ``info`` / ``warning`` / ``error`` (the CLI's own notices, not model turns) make no message:
  they are kept in the ``meta`` of the message before them (``gemini_notices``), as the
  stream-json reader keeps ``error`` events.

A record of another ``type`` is kept verbatim in the ``meta`` of the message before it too
(``gemini_unknown_records``) and named in the import's problems, never dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from ..blocks import Block, image_reference_block
from ._common import Context, Draft, Malformed, parse_arguments, tool_result, tool_use

__all__ = ["is_chat_recording", "parse_recording"]

_NOTICES = frozenset({"info", "warning", "error"})


def is_chat_recording(document: Any) -> bool:
    """Return whether a JSON document is a Gemini CLI chat recording: an object with a
    ``sessionId``, a ``projectHash`` and a ``messages`` list whose records carry a ``type`` of
    ``user`` or ``gemini``."""
    if not isinstance(document, dict) or not {"sessionId", "projectHash"} <= document.keys():
        return False
    messages = document.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("type") in ("user", "gemini") for m in messages[:50]
    )


def _part_blocks(part: Any) -> list[Block]:
    """Return the blocks of one Gemini ``Part`` (text, an inline image, a file reference);
    any other part is kept verbatim as a block of its own type (``gemini_part``)."""
    if isinstance(part, str):
        return [{"type": "text", "text": part}] if part else []
    if not isinstance(part, dict):
        raise Malformed(f"a content part must be a string or an object, found {type(part).__name__}")
    if isinstance(part.get("text"), str):
        return [{"type": "text", "text": part["text"]}] if part["text"] else []
    inline = part.get("inlineData")
    if isinstance(inline, dict) and isinstance(inline.get("data"), str):
        media_type = inline.get("mimeType") if isinstance(inline.get("mimeType"), str) else "image/png"
        return [
            {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": inline["data"]}}
        ]
    data = part.get("fileData")
    if isinstance(data, dict) and isinstance(data.get("fileUri"), str):
        return [image_reference_block(data["fileUri"])]
    return [{"type": "gemini_part", "part": part}]


def _content_blocks(content: Any) -> list[Block]:
    """Return a record's ``content`` (a string, a part or a list of parts) as blocks."""
    if content is None:
        return []
    parts = content if isinstance(content, list) else [content]
    blocks: list[Block] = []
    for part in parts:
        blocks.extend(_part_blocks(part))
    return blocks


def _result_block(call: dict[str, Any], call_id: str) -> Block:
    """Return the ``tool_result`` of one ``toolCalls`` entry from its ``result`` parts."""
    status = call.get("status")
    failed = status not in ("success", None)
    result = call.get("result")
    if result is None:
        return tool_result(call_id, f"(no result recorded: the call's status is {status!r})", True)
    texts: list[str] = []
    extra: list[Block] = []
    for part in result if isinstance(result, list) else [result]:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        if isinstance(response, dict):
            body = response.get("response")
            if isinstance(body, dict) and isinstance(body.get("output"), str):
                texts.append(body["output"])
            elif isinstance(body, dict) and isinstance(body.get("error"), str):
                texts.append(f"Error: {body['error']}")
                failed = True
            elif body is not None:
                texts.append(json.dumps(body, ensure_ascii=False))
            for nested in response.get("parts") or []:
                extra.extend(_part_blocks(nested))
        else:
            extra.extend(_part_blocks(part))
    text = "\n".join(texts)
    if not extra:
        return tool_result(call_id, text, failed)
    content: list[Block] = [{"type": "text", "text": text}] if text else []
    return tool_result(call_id, content + extra, failed)


def _assistant(record: dict[str, Any]) -> tuple[Draft, Draft | None]:
    """Return a ``gemini`` record as its assistant draft and the user draft of its results."""
    blocks: list[Block] = []
    for thought in record.get("thoughts") or []:
        if isinstance(thought, dict):
            subject, description = thought.get("subject"), thought.get("description")
            text = "\n\n".join(s for s in (subject, description) if isinstance(s, str) and s)
            if text:
                blocks.append({"type": "thinking", "thinking": text, "signature": ""})
    blocks.extend(_content_blocks(record.get("content")))
    results: list[Block] = []
    calls = record.get("toolCalls") or []
    if not isinstance(calls, list):
        raise Malformed("a gemini record's 'toolCalls' must be a list")
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            raise Malformed("a tool call needs a string 'id'")
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise Malformed(f"tool call {call['id']!r} needs a string 'name'")
        blocks.append(tool_use(call["id"], call["name"], parse_arguments(call.get("args"))))
        results.append(_result_block(call, call["id"]))
    draft = Draft("assistant", blocks)
    for key in ("model", "tokens"):
        if record.get(key) is not None:
            draft.meta[key] = record[key]
    return draft, Draft("user", results) if results else None


def parse_recording(document: Any, ctx: Context) -> list[Draft]:
    """Parse a Gemini CLI chat recording (already loaded as JSON) into drafts.

    Args:
        document: the parsed ``session-*.json`` document.
        ctx: the parse's error policy; a malformed record is reported through it (fatal
            unless lenient) and an unknown record type named in its problems.

    Returns:
        The drafts in record order: a ``gemini`` record with tool calls is followed by the
        user draft holding their results.
    """
    drafts: list[Draft] = []
    early: dict[str, list[Any]] = {}
    unknown: dict[str, int] = {}
    for index, record in enumerate(document.get("messages") or []):
        where = f"messages[{index}]"
        try:
            if not isinstance(record, dict):
                raise Malformed(f"a message record must be an object, found {type(record).__name__}")
            kind = record.get("type")
            if kind in _NOTICES or not isinstance(kind, str) or kind not in ("user", "gemini"):
                key = "gemini_notices" if kind in _NOTICES else "gemini_unknown_records"
                if key == "gemini_unknown_records":
                    unknown[str(kind)] = unknown.get(str(kind), 0) + 1
                # the message before it that has content: an empty one is left out later
                target = next((d.meta for d in reversed(drafts) if d.content), early)
                target.setdefault(key, []).append(record)
                continue
            if kind == "user":
                made = [Draft("user", _content_blocks(record.get("content")))]
            else:
                assistant, results = _assistant(record)
                made = [assistant] if results is None else [assistant, results]
        except Malformed as err:
            ctx.problem(str(err), where=where)
            continue
        for draft in made:
            draft.where = where
            if isinstance(record.get("timestamp"), str):
                draft.meta["timestamp"] = record["timestamp"]
        if isinstance(record.get("id"), str):
            made[0].source_id = record["id"]
        drafts.extend(made)
    first = next((d for d in drafts if d.content), None)
    if first is not None and early:
        first.meta.update(early)
    for kind, count in unknown.items():
        ctx.note(
            f"{count} message record(s) of type {kind!r} (not user, gemini, info, warning or "
            "error) kept verbatim in the meta 'gemini_unknown_records' of the message before them"
        )
    return drafts
