"""Claude Agent SDK sessions as Craft Agents writes them (``sessions/<id>/session.jsonl``).

The format is defined in craft-ai-agents/craft-agents-oss (``packages/shared/src/sessions/
jsonl.ts``, ``types.ts`` and ``packages/core/src/types/message.ts``): line 1 is a
``SessionHeader`` (``id``, ``workspaceRootPath``, ``createdAt``, ``messageCount``, ``model``,
``tokenUsage`` ...), every later line a ``StoredMessage`` with ``id``, ``type`` (the role),
``content`` (a string) and ``timestamp`` (epoch milliseconds).  The mapping:

* ``user`` -> a user message: its text, then each attachment: an image attachment with
  ``resizedBase64`` (else ``thumbnailBase64``) -> an image block (a pasted screenshot);
  an image attachment without bytes (only its ``storedPath``) -> an image reference to that
  path (kept, shown as a loud placeholder, never rejected); any other attachment without
  bytes (a PDF) -> a loud text placeholder naming the file;
* ``assistant`` -> assistant text (``isIntermediate`` commentary included);
* ``tool`` (``toolName``, ``toolUseId``, ``toolInput``, ``toolResult``, ``isError`` /
  ``toolStatus: "error"``) -> a ``tool_use`` block in the assistant message it belongs to,
  then a user message with its ``tool_result``; a tool run inside a sub-agent
  (``parentToolUseId``) is kept, marked ``meta["subagent"]`` with the parent call's id;
* ``plan`` -> assistant text (the plan the agent wrote), ``meta["kind"] = "plan"``;
* ``info`` / ``status`` / ``warning`` / ``error`` / ``auth-request`` are notices the app
  showed, not what the model saw: they make no message and are kept in the ``meta`` of the
  next message (``craft_notices``), so nothing is lost.

The header makes no message; its ``model`` becomes the assistant messages' ``meta["model"]``.
"""

from __future__ import annotations

from typing import Any

from ..blocks import Block, image_reference_block
from ._common import Context, Draft, Malformed, iter_jsonl, text_blocks, tool_result, tool_use
from ._sniff import Sample, TranscriptFormat

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "craft-agents"

_NOTICES = frozenset({"info", "status", "warning", "error", "auth-request"})
_ROLES = frozenset({"user", "assistant", "tool", "plan"}) | _NOTICES


def _attachment(attachment: Any, index: int) -> Block:
    if not isinstance(attachment, dict):
        raise Malformed(f"attachments[{index}] must be an object")
    name = attachment.get("name") or attachment.get("storedPath") or f"attachment {index}"
    media_type = attachment.get("mimeType")
    data = attachment.get("resizedBase64") or attachment.get("thumbnailBase64")
    if attachment.get("type") == "image" and isinstance(data, str) and data and isinstance(media_type, str):
        media = media_type if attachment.get("resizedBase64") else "image/png"  # thumbnails are PNG
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    where = attachment.get("markdownPath") or attachment.get("storedPath")
    stored = attachment.get("storedPath") or where
    if attachment.get("type") == "image" and isinstance(stored, str) and stored:
        return image_reference_block(stored, media_type if isinstance(media_type, str) else None)
    return {
        "type": "text",
        "text": f"[attachment not included: {name!r} ({media_type or 'unknown type'}, "
        f"{attachment.get('size', '?')} bytes) is stored at {where!r}, outside the transcript; "
        "it cannot be shown]",
    }


class _Session:
    def __init__(self) -> None:
        self.drafts: list[Draft] = []
        self.model: str | None = None
        self.notices: list[dict[str, Any]] = []

    def _add(self, draft: Draft, record: dict[str, Any], line: int) -> Draft:
        draft.line = line
        if isinstance(record.get("id"), str):
            draft.source_id = record["id"]
        if record.get("timestamp") is not None:
            draft.meta["timestamp"] = record["timestamp"]
        if self.notices:
            draft.meta["craft_notices"] = self.notices
            self.notices = []
        self.drafts.append(draft)
        return draft

    def _assistant(self, record: dict[str, Any], line: int) -> Draft:
        last = self.drafts[-1] if self.drafts else None
        if last is not None and last.role == "assistant" and "subagent" not in last.meta:
            return last
        draft = self._add(Draft("assistant", []), record, line)
        if self.model:
            draft.meta["model"] = self.model
        return draft

    def read(self, line: int, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if "workspaceRootPath" in record and not (isinstance(kind, str) and kind in _ROLES):  # the header
            self.model = record["model"] if isinstance(record.get("model"), str) else self.model
            return
        if not isinstance(kind, str):
            raise Malformed("a stored message needs a string 'type'")
        content = record.get("content", "")
        if kind in _NOTICES:
            notice: dict[str, Any] = {
                k: record[k]
                for k in ("type", "content", "infoLevel", "statusType", "errorCode")
                if k in record
            }
            self.notices.append(notice)
            return
        if not isinstance(content, str):
            raise Malformed(f"a {kind} message needs a string 'content'")
        if kind == "user":
            attachments = record.get("attachments") or []
            if not isinstance(attachments, list):
                raise Malformed("attachments must be a list")
            blocks = text_blocks(content) + [_attachment(a, i) for i, a in enumerate(attachments)]
            self._add(Draft("user", blocks), record, line)
        elif kind in ("assistant", "plan"):
            draft = self._assistant(record, line)
            draft.content.extend(text_blocks(content))
            if kind == "plan":
                draft.meta["kind"] = "plan"
        elif kind == "tool":
            self._tool(record, line)
        else:
            raise Malformed(
                f"unknown message type {kind!r}; expected user, assistant, tool, plan or a notice"
            )

    def _tool(self, record: dict[str, Any], line: int) -> None:
        call_id, name = record.get("toolUseId"), record.get("toolName")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise Malformed("a tool message needs string 'toolUseId' and 'toolName'")
        arguments = record.get("toolInput")
        parent = record.get("parentToolUseId")
        if isinstance(parent, str):
            call = self._add(Draft("assistant", []), record, line)
            call.meta["subagent"] = parent
        else:
            call = self._assistant(record, line)
        call.content.append(tool_use(call_id, name, arguments if isinstance(arguments, dict) else {}))
        output = record.get("toolResult")
        failed = bool(record.get("isError")) or record.get("toolStatus") == "error"
        answer = self._add(
            Draft("user", [tool_result(call_id, output if isinstance(output, str) else "", failed)]),
            record,
            line,
        )
        if isinstance(parent, str):
            answer.meta["subagent"] = parent


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse a Craft Agents session into drafts."""
    session = _Session()
    for line, record in iter_jsonl(text, ctx):
        try:
            session.read(line, record)
        except Malformed as err:
            ctx.problem(str(err), line=line)
    if session.notices and session.drafts:
        session.drafts[-1].meta.setdefault("craft_notices", []).extend(session.notices)
    return session.drafts


def _is_craft(record: dict[str, Any]) -> bool:
    if "workspaceRootPath" in record and ("messageCount" in record or "createdAt" in record):
        return True
    kind = record.get("type")
    return (
        isinstance(kind, str)
        and kind in _ROLES
        and isinstance(record.get("content"), str)
        and ("toolUseId" in record or "turnId" in record or "isIntermediate" in record)
    )


def sniff(sample: Sample) -> bool:
    """Claim JSONL whose first lines hold a Craft Agents session header (``workspaceRootPath``
    with ``createdAt`` or ``messageCount``) or a stored message with ``toolUseId`` / ``turnId``."""
    return any(_is_craft(record) for record in sample.entries)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=35,
    sniff=sniff,
    parse=parse,
    holds="a Craft Agents stored message (type 'user', 'assistant' or 'tool')",
)
