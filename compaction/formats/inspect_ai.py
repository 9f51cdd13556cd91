"""Inspect AI eval logs (``inspect eval --log-format json``; one JSON document).

The log holds ``version``, ``eval``, ``plan``, ``results`` and ``samples``; each sample has an
``id``, an ``epoch``, its ``messages`` (Inspect's ``ChatMessage`` list) and ``attachments``:
a map from a hash to the text or ``data:`` URI that the log wrote as ``attachment://<hash>``
to save space.  References are resolved from the sample's own attachments.

**Samples.**  A store holds one conversation, an eval log many.  The choice made here: the
samples are imported one after the other, in the log's order, each message carrying
``meta["inspect_sample"]`` (``"<id>"`` or ``"<id>#<epoch>"`` past the first epoch) so they
stay apart in the store; import a one-sample log (``inspect log dump`` / ``jq``) for one
store per sample.  The binary ``.eval`` log format (a zip) is not read: convert it with
``inspect log convert --to json`` first.

Messages (``role`` ``system`` / ``user`` / ``assistant`` / ``tool``):

* ``content`` is a string or a list of content: ``text`` -> text; ``reasoning`` -> a
  ``thinking`` block with its ``signature`` (``redacted`` -> ``redacted_thinking``);
  ``image`` (``image`` a ``data:`` URI, a URL or an ``attachment://`` reference) -> an
  image block; ``tool_use`` (a server-side tool the provider ran: web search, MCP, code
  execution) -> text naming the call and its result; ``audio`` / ``video`` / ``document`` /
  ``data`` are kept verbatim;
* an assistant's ``tool_calls`` (``id``, ``function`` the tool's name, ``arguments`` an
  object) -> ``tool_use`` blocks;
* a ``tool`` message (``tool_call_id``, ``content``, ``error`` with ``type`` and
  ``message``) -> a user message holding a ``tool_result`` (``is_error`` with the error
  appended to its text).

**References, not rejections.**  An image whose reference cannot be resolved (an
``attachment://`` missing from the log, a file path) becomes an image reference block
(:func:`~compaction.blocks.image_reference_block`): kept in the store, priced as the model's
maximum, shown as a loud placeholder naming the reference; the rest of the message is kept.
"""

from __future__ import annotations

from typing import Any

from ..blocks import Block, image_reference_block
from ._common import (
    Context,
    Draft,
    Malformed,
    image_from_url,
    load_json_document,
    parse_arguments,
    text_blocks,
    tool_result,
    tool_use,
    typed_parts,
)
from ._sniff import Sample, TranscriptFormat

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "inspect-ai"

_ATTACHMENT = "attachment://"
_KEPT_VERBATIM = frozenset({"audio", "video", "document", "data"})


class _Sample:
    """Convert the messages of one sample, resolving its attachment references."""

    def __init__(self, attachments: Any) -> None:
        self.attachments = attachments if isinstance(attachments, dict) else {}

    def resolve(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith(_ATTACHMENT):
            return self.attachments.get(value[len(_ATTACHMENT) :], value)
        return value

    def image(self, part: dict[str, Any]) -> Block:
        reference = part.get("image")
        value = self.resolve(reference)
        if not isinstance(value, str) or not value:
            raise Malformed(
                "an image needs a string 'image' (a data: URI, a URL or an attachment:// reference)"
            )
        if value.startswith("data:") or value.startswith(("http://", "https://")):
            block = image_from_url(value)
            if block["source"]["type"] == "base64" or value.startswith("http"):
                return block
        # an attachment:// the log does not hold, a file path, an unknown scheme
        return image_reference_block(value)

    def content(self, content: Any) -> list[Block]:
        content = self.resolve(content)
        blocks: list[Block] = []
        for part in typed_parts(content, strings=False):
            kind = part["type"]
            if kind == "text":
                blocks.extend(text_blocks(self.resolve(part.get("text"))))
            elif kind == "reasoning":
                signature = part.get("signature") if isinstance(part.get("signature"), str) else ""
                reasoning = self.resolve(part.get("reasoning"))
                if part.get("redacted"):
                    blocks.append({"type": "redacted_thinking", "data": signature or reasoning or ""})
                elif isinstance(reasoning, str) and reasoning:
                    blocks.append({"type": "thinking", "thinking": reasoning, "signature": signature})
            elif kind == "image":
                blocks.append(self.image(part))
            elif kind == "tool_use":
                call = f"[{part.get('tool_type', 'server')} tool {part.get('name')}({part.get('arguments', '')})]"
                result = self.resolve(part.get("result"))
                error = part.get("error")
                text = "\n".join(str(t) for t in (call, result, f"Error: {error}" if error else None) if t)
                blocks.append({"type": "text", "text": text})
            else:
                blocks.append(
                    {k: self.resolve(v) for k, v in part.items()} if kind in _KEPT_VERBATIM else part
                )
        return blocks

    def message(self, message: Any) -> Draft:
        if not isinstance(message, dict):
            raise Malformed(f"a message must be an object, found {type(message).__name__}")
        role = message.get("role")
        if role in ("system", "user"):
            draft = Draft(role, self.content(message.get("content")))
        elif role == "assistant":
            draft = Draft("assistant", self.content(message.get("content")))
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list):
                raise Malformed("tool_calls must be a list")
            for index, call in enumerate(calls):
                if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                    raise Malformed(f"tool_calls[{index}] needs a string 'id'")
                name = call.get("function")
                if not isinstance(name, str):
                    raise Malformed(f"tool_calls[{index}] needs a string 'function' (the tool's name)")
                draft.content.append(
                    tool_use(call["id"], name, parse_arguments(self.resolve(call.get("arguments"))))
                )
            if isinstance(message.get("model"), str):
                draft.meta["model"] = message["model"]
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise Malformed("a tool message needs a string 'tool_call_id'")
            parts = self.content(message.get("content"))
            error = message.get("error")
            if isinstance(error, dict) and error:
                parts += text_blocks(f"Error ({error.get('type')}): {self.resolve(error.get('message'))}")
            body: str | list[Block] = parts
            if all(block["type"] == "text" for block in parts):
                body = "\n".join(block["text"] for block in parts)
            draft = Draft("user", [tool_result(call_id, body, bool(error))])
        else:
            raise Malformed(f"unknown role {role!r}; expected system, user, assistant or tool")
        if isinstance(message.get("id"), str):
            draft.source_id = message["id"]
        return draft


def parse(text: str, ctx: Context) -> list[Draft]:
    """Parse an Inspect AI JSON eval log into drafts (every sample, in order)."""
    document = load_json_document(text, ctx)
    samples = document.get("samples") if isinstance(document, dict) else None
    if not isinstance(samples, list):
        raise ctx.error("expected an Inspect eval log: a JSON object with a 'samples' list")
    drafts: list[Draft] = []
    for number, sample in enumerate(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("messages"), list):
            ctx.problem("a sample needs a 'messages' list", where=f"samples[{number}]")
            continue
        label = str(sample.get("id", number))
        if sample.get("epoch") not in (None, 1):
            label += f"#{sample['epoch']}"
        reader = _Sample(sample.get("attachments"))
        for index, message in enumerate(sample["messages"]):
            where = f"samples[{number}].messages[{index}]"
            try:
                draft = reader.message(message)
            except Malformed as err:
                ctx.problem(str(err), where=where)
                continue
            draft.where = where
            draft.meta["inspect_sample"] = label
            drafts.append(draft)
    return drafts


def _is_eval_log(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and isinstance(document.get("samples"), list)
        and ("eval" in document or "version" in document)
        and all(isinstance(s, dict) and "messages" in s for s in document["samples"][:5])
    )


def sniff(sample: Sample) -> bool:
    """Claim a JSON document with ``eval`` (or ``version``) and a ``samples`` list whose
    samples hold ``messages``; the head alone never tells (a pretty-printed log)."""
    return sample.text.startswith("{") and _is_eval_log(sample.document)


FORMAT = TranscriptFormat(
    name=NAME,
    priority=55,
    sniff=sniff,
    parse=parse,
    holds="an Inspect eval log sample message (samples[].messages)",
)
