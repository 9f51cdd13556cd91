"""OpenAI Responses API input items (the ``input`` list of ``POST /v1/responses``).

The file holds a JSON array of items, a request body ``{"instructions": ..., "input": [...]}``
(``instructions`` becomes a system message first), or JSONL with one item a line.  The items
an agent sends back each turn (its stored ``input`` plus the ``output`` of the last response)
map as follows; the Codex CLI's rollout format carries the same items and shares the
converters (:mod:`compaction.formats.codex`):

* ``message`` (also an item with a ``role`` and no ``type``, the SDKs' "easy" input message):
  ``user``; ``system`` / ``developer`` become role ``system``; ``assistant`` joins the model's
  turn.  ``content`` is a string or a list of parts: ``input_text`` / ``output_text`` /
  ``refusal`` become text, ``input_image`` with an ``image_url`` an image; an ``input_image``
  given only by ``file_id`` becomes an image reference naming the file id (its bytes are not
  in the file: kept, shown as a loud placeholder); other parts (``input_file``, ``input_audio``) are kept verbatim;
* ``reasoning``: ``summary`` and ``content`` texts become ``thinking`` blocks (no signature),
  ``encrypted_content`` an opaque ``{"type": "encrypted_reasoning", "provider": "openai",
  "encrypted_content": ...}`` block that both request formats drop, exactly as for Codex;
* ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` become ``tool_use`` blocks
  (``id`` = ``call_id``), their ``*_output`` items ``tool_result`` blocks;
* ``compaction`` (what ``POST /v1/responses/compact`` returns: an ``encrypted_content`` that
  stands for the items it replaced) is a prior compaction, never an ask: it is kept as
  ``meta["openai_compaction"]`` (``id``, ``encrypted_content``) of the next message, or of the
  last one when nothing follows;
* any other item is kept verbatim as an opaque block: one whose type ends in ``_call`` (a
  hosted tool such as ``web_search_call``) or is ``mcp_list_tools`` / ``mcp_approval_request``
  in the model's turn, any other (``computer_call_output``, ``item_reference`` ...) in a user
  message.  It is priced, rendered by the loud default rule and counted among the unknown
  blocks of the import.

Consecutive model-side items (reasoning, assistant text, calls) form one assistant message;
consecutive outputs form one user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..blocks import Block, image_reference_block
from ._common import (
    Context,
    Draft,
    Item,
    Malformed,
    first_line_is_object,
    iter_jsonl,
    load_json_document,
    text_blocks,
)
from ._sniff import Sample, TranscriptFormat
from .codex import CALLS, OUTPUTS, call_block, output_block, reasoning_blocks
from .openai import content_parts

__all__ = ["FORMAT", "NAME", "convert_all", "parse", "sniff"]

NAME = "openai-responses"

#: Item types of the model's side of a turn besides the known ones.
_MODEL_SIDE = frozenset({"mcp_list_tools", "mcp_approval_request"})
#: Item types that only the Responses API writes (a list holding one is this format).
_RESPONSES_ITEMS = CALLS | OUTPUTS | {"reasoning", "compaction", "item_reference"}
_ROLES = ("user", "assistant", "system", "developer")
#: Keys of event streams whose ``message`` events look like message items (Gemini CLI).
_EVENT_KEYS = frozenset({"timestamp", "delta", "session_id"})


def _parts(content: Any) -> list[Block]:
    """Convert a message's ``content``, keeping an ``input_image`` given by ``file_id`` loud."""
    if isinstance(content, list):
        content = [
            image_reference_block(str(part["file_id"]))
            if isinstance(part, dict)
            and part.get("type") == "input_image"
            and not part.get("image_url")
            and part.get("file_id")
            else part
            for part in content
        ]
    return content_parts(content)


class _Turns:
    """Group items into drafts: model-side items into one assistant draft, compactions into meta."""

    def __init__(self) -> None:
        self.drafts: list[Draft] = []
        self.open: Draft | None = None
        self.pending: list[dict[str, Any]] = []

    def _add(self, draft: Draft) -> None:
        if self.pending:
            draft.meta["openai_compaction"] = (
                self.pending[0] if len(self.pending) == 1 else list(self.pending)
            )
            self.pending = []
        self.drafts.append(draft)

    def _assistant(self, blocks: list[Block], line: int | None, where: str | None) -> None:
        if self.open is None:
            self.open = Draft("assistant", [], line=line, where=where)
            self._add(self.open)
        self.open.content.extend(blocks)

    def read(self, item: Any, line: int | None, where: str | None) -> None:
        """Convert one item.

        Raises:
            Malformed: the item is no object, or a known item lacks a field it needs.
        """
        if not isinstance(item, dict):
            raise Malformed(f"an item must be an object, found {type(item).__name__}")
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            raise Malformed("an item needs a string 'type' (or a 'role', for a message)")
        draft: Draft | None = None
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise Malformed(
                    f"a message item has role {role!r}; expected user, assistant, system or developer"
                )
            if role == "assistant":
                self._assistant(_parts(item.get("content")), line, where)
                if isinstance(item.get("id"), str) and self.open is not None and self.open.source_id is None:
                    self.open.source_id = item["id"]
                return
            draft = Draft("user" if role == "user" else "system", _parts(item.get("content")))
        elif kind == "reasoning":
            self._assistant(reasoning_blocks(item), line, where)
            return
        elif kind in CALLS:
            self._assistant([call_block(item)], line, where)
            return
        elif kind in OUTPUTS:
            draft = Draft("user", [output_block(item)])
        elif kind == "compaction":
            encrypted = item.get("encrypted_content")
            if not isinstance(encrypted, str):
                raise Malformed("a compaction item needs a string 'encrypted_content'")
            self.pending.append({k: item[k] for k in ("id", "encrypted_content", "created_by") if k in item})
            return
        elif kind.endswith("_call") or kind in _MODEL_SIDE:
            self._assistant([item], line, where)
            return
        else:
            draft = Draft("user", [item])
        self.open = None
        draft.line, draft.where = line, where
        if isinstance(item.get("id"), str):
            draft.source_id = item["id"]
        self._add(draft)

    def close(self) -> list[Draft]:
        """Return the drafts, a compaction with no message after it kept on the last one."""
        if self.pending and self.drafts:
            meta = self.drafts[-1].meta
            meta["openai_compaction"] = self.pending[0] if len(self.pending) == 1 else list(self.pending)
            self.pending = []
        return self.drafts


def convert_all(items: Sequence[Item], ctx: Context) -> list[Draft]:
    """Convert Responses items, reporting malformed ones through ``ctx``.

    A ``compaction`` item that no message follows or precedes (a list of nothing else) is
    reported, since there is no message to keep it with.
    """
    turns = _Turns()
    for item, line, where in items:
        try:
            turns.read(item, line, where)
        except Malformed as err:
            ctx.problem(str(err), line=line, where=where)
    drafts = turns.close()
    if turns.pending:
        ctx.problem(
            "a compaction item needs a message beside it to be kept with (it is a prior "
            "compaction, never a message of its own); give it with the items that follow it",
            where=items[-1][2] if items else None,
        )
    return drafts


def _container(document: Any, ctx: Context) -> tuple[list[Any], Any]:
    """Return ``(items, instructions)`` from a JSON array or a request body with ``input``."""
    if isinstance(document, list):
        return document, None
    if isinstance(document, dict) and isinstance(document.get("input"), list):
        return document["input"], document.get("instructions")
    raise ctx.error(
        "expected a JSON array of Responses input items or an object with an 'input' list; "
        f"found {type(document).__name__}"
    )


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse Responses API input items (a JSON array, a request body or JSONL) into drafts."""
    instructions = None
    if first_line_is_object(text) and text.strip().count("\n") > 0:
        items: list[Item] = [(value, line, None) for line, value in iter_jsonl(text, ctx)]
    else:
        values, instructions = _container(load_json_document(text, ctx), ctx)
        items = [(value, None, f"input[{index}]") for index, value in enumerate(values)]
    drafts = convert_all(items, ctx)
    if isinstance(instructions, str) and instructions:
        drafts.insert(0, Draft("system", text_blocks(instructions), where="instructions"))
    return drafts


def _is_responses_item(value: Any) -> bool:
    if not isinstance(value, dict) or "payload" in value:  # a Codex rollout record
        return False
    kind = value.get("type")
    if not isinstance(kind, str):
        return False
    if kind in _RESPONSES_ITEMS:
        return "call_id" in value or kind in ("reasoning", "compaction", "item_reference")
    return (
        kind == "message"
        and value.get("role") in _ROLES
        and "content" in value
        and not (_EVENT_KEYS & value.keys())  # a Gemini CLI stream-json message event
    )


def sniff(sample: Sample) -> bool:
    """Claim a list of Responses items: one with a ``type`` only the Responses API has
    (``function_call`` / ``function_call_output`` with a ``call_id``, ``reasoning``,
    ``compaction``) or a ``message`` item with a ``role`` (JSONL lines, a JSON array or a
    request body's ``input``)."""
    if any(_is_responses_item(entry) for entry in sample.entries):
        return True
    document = sample.document
    if isinstance(document, dict) and isinstance(document.get("input"), list):
        document = document["input"]
    return isinstance(document, list) and any(_is_responses_item(item) for item in document[:50])


FORMAT = TranscriptFormat(
    name=NAME,
    priority=28,
    sniff=sniff,
    parse=parse,
    holds="a Responses API input item (a 'message', 'function_call', 'function_call_output' or 'reasoning')",
)
