"""Tell a transcript's format from its content (never from its file name).

Detection looks at the head of the file (64 KiB by default):

1. binary content (NUL bytes, image or PDF magic numbers) is no transcript;
2. JSONL (the first line is a complete JSON object): the first lines' keys decide:
   ``type: session`` with pi fields, or pi ``message`` entries -> ``pi``;
   ``session_meta`` / ``response_item`` / ``turn_context`` / ``event_msg`` -> ``codex``;
   ``parentUuid`` / ``sessionId`` / ``isSidechain`` / ``leafUuid`` -> ``claude-code``;
   ``instance_id`` with ``history`` -> ``openhands``; TARS event types -> ``agent-tars``;
   chat messages -> ``anthropic`` or ``openai`` (below);
3. a JSON document: an object with ``trajectory`` (and ``history``) -> ``swe-agent``; a
   record with ``instance_id`` and ``history`` -> ``openhands``; an array of events whose
   ``type`` is ``user_message`` / ``assistant_message`` ... -> ``agent-tars``; messages ->
   ``anthropic`` or ``openai`` (an explicit top-level ``"format"`` of either wins).  When the
   head is not enough (a huge single-line record), the whole document is parsed and
   inspected;
4. Markdown with ``# aider chat started at`` or aider's ``#### `` / ``> `` line markers ->
   ``aider``.

Messages are ``openai`` when they use Chat Completions shapes (roles ``tool`` / ``function`` /
``developer``, ``tool_calls``, parts such as ``image_url``), ``anthropic`` when a top-level
``system`` sits beside them or their content holds any other non-text block (``tool_use``,
``tool_result``, ``thinking``, ``image`` with a ``source``, server tools ...), and ``openai``
when nothing tells them apart (plain text parses the same either way).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["detect_text", "detect_value"]

_BINARY_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"%PDF", b"PK\x03\x04", b"\x1f\x8b", b"RIFF")
_TARS_EVENTS = frozenset(
    {
        "user_message",
        "assistant_message",
        "tool_call",
        "tool_result",
        "environment_input",
        "assistant_thinking_message",
        "assistant_streaming_message",
        "agent_run_start",
    }
)
_CODEX_RECORDS = frozenset({"session_meta", "response_item", "turn_context", "event_msg", "compacted"})
#: Part types of Chat Completions content; any other non-text block type is Anthropic's.
_OPENAI_PARTS = frozenset({"image_url", "input_audio", "file", "refusal", "input_text", "output_text"})
_PI_ROLES = frozenset({"toolResult", "bashExecution"})
_AIDER_HEADER = re.compile(r"^# aider chat started at ", re.MULTILINE)
_AIDER_USER = re.compile(r"^#### ", re.MULTILINE)
_AIDER_OUTPUT = re.compile(r"^> ", re.MULTILINE)


def looks_binary(head: bytes) -> bool:
    """Return whether ``head`` is binary content (NUL bytes or a known magic number)."""
    return head.startswith(_BINARY_MAGIC) or b"\x00" in head[:4096]


def _message_format(messages: list[Any], system: Any = None) -> str | None:
    dicts = [m for m in messages if isinstance(m, dict)]
    if not dicts or not any("role" in m for m in dicts):
        return None
    if system is not None:
        return "anthropic"
    for message in dicts:
        if message.get("role") in ("tool", "function", "developer") or "tool_calls" in message:
            return "openai"
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else None
                if kind in _OPENAI_PARTS:
                    return "openai"
                if isinstance(kind, str) and kind != "text":
                    return "anthropic"
    return "openai"


def _record_format(records: list[dict[str, Any]]) -> str | None:
    """Decide from the first records of a JSONL file."""
    for record in records:
        kind = record.get("type")
        if kind == "session" and ("cwd" in record or "version" in record or "modelId" in record):
            return "pi"
        if kind == "message" and isinstance(record.get("message"), dict):
            message = record["message"]
            if message.get("role") in _PI_ROLES or "parentUuid" not in record and "uuid" not in record:
                return "pi"
        if kind in _CODEX_RECORDS and "payload" in record:
            return "codex"
        if any(key in record for key in ("parentUuid", "sessionId", "isSidechain", "leafUuid")):
            return "claude-code"
        if "instance_id" in record and ("history" in record or "instruction" in record):
            return "openhands"
        if kind in _TARS_EVENTS and "role" not in record:
            return "agent-tars"
    return _message_format(records)


def detect_value(value: Any) -> str | None:
    """Decide from a whole parsed JSON document."""
    if isinstance(value, dict):
        if "trajectory" in value and ("history" in value or "info" in value):
            return "swe-agent"
        if "instance_id" in value and "history" in value:
            return "openhands"
        if isinstance(value.get("messages"), list):
            if value.get("format") in ("openai", "anthropic"):
                return str(value["format"])
            return _message_format(value["messages"], value.get("system"))
        if isinstance(value.get("events"), list):
            return detect_value(value["events"])
        return None
    if isinstance(value, list):
        dicts = [item for item in value[:50] if isinstance(item, dict)]
        if dicts and any(d.get("type") in _TARS_EVENTS and "role" not in d for d in dicts):
            return "agent-tars"
        return _message_format(dicts)
    return None


def _head_of_document(text: str) -> str | None:
    """Decide a JSON document from its head only, by the keys near its start."""
    start = text.lstrip()[:4096]
    if start.startswith("{"):
        if re.match(r'\{\s*"(trajectory|history)"\s*:', start) and '"trajectory"' in text:
            return "swe-agent"
        if re.match(r'\{\s*"instance_id"\s*:', start):
            return "openhands"
    if start.startswith("["):
        match = re.search(r'"type"\s*:\s*"([a-z_]+)"', start)
        if match and match.group(1) in _TARS_EVENTS and not re.search(r'"role"\s*:', start[: match.start()]):
            return "agent-tars"
    return None


def detect_text(head: str, whole: str | None = None) -> str | None:
    """Return the format name for a text's head (and, if given, the whole text), or ``None``."""
    stripped = head.lstrip("\ufeff \t\r\n")
    if stripped.startswith(("{", "[")):
        lines = [line for line in stripped.split("\n", 40)[:40] if line.strip()]
        records: list[dict[str, Any]] = []
        for line in lines:
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(value, dict):
                records.append(value)
        first_complete = bool(records) and _first_is_record(lines[0])
        if first_complete:
            found = _record_format(records)
            if found is not None:
                return found
        found = _head_of_document(stripped)
        if found is not None:
            return found
        if whole is not None:
            try:
                return detect_value(json.loads(whole))
            except (json.JSONDecodeError, RecursionError):
                return _record_format(records) if records else None
        if first_complete:
            return _record_format(records) or detect_value(records[0])
        return None
    if _AIDER_HEADER.search(head) or (_AIDER_USER.search(head) and _AIDER_OUTPUT.search(head)):
        return "aider"
    return None


def _first_is_record(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (json.JSONDecodeError, RecursionError):
        return False
