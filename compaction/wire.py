"""The wire gate: the one function every outbound request passes through last.

Live compiles, L1 prompts, merge prompts and split-fallback prompts all become an
:class:`OutboundRequest` and go through :func:`gate`, which

1. finds every image: top-level ``image`` blocks, images nested in ``tool_result`` content,
   URL images, and ``data:image/...;base64,`` URIs inside text, string tool results and tool
   arguments;
2. decides each newest first with :class:`~compaction.policy.ImageBudget` (policy, depth,
   count and byte caps) and replaces the ones not shown by a loud placeholder; a kept data
   URI is lifted out of its text into a real image block, so it is priced and shipped as an
   image, never as base64 text;
3. repairs source orphans (a ``tool_use`` with no ``tool_result`` in the request or the
   reverse) into loud text, and reports them;
4. renders the OpenAI or Anthropic body, verifies on the rendered body that image parts
   equal the kept images and respect the caps, counts tokens, checks the budget, and
   returns immutable serialized bytes plus a report of everything it replaced.

Nothing may edit a request after the gate: transports send :attr:`GatedRequest.payload`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .blocks import DATA_URI_RE, Block, canonical_json
from .errors import ImageError, InvariantViolation, OverBudget
from .imageinfo import ImageInfo, canonical_base64, info_from_block, info_from_data_uri
from .policy import Decision, ImageBudget, ImageSettings, placeholder_text
from .render import render_anthropic, render_openai
from .tokens.counting import MESSAGE_OVERHEAD, REQUEST_OVERHEAD, blocks_text_tokens, count_text
from .tokens.image_pricing import price_image
from .tools import render_tools, tools_tokens

__all__ = ["OutboundRequest", "GatedRequest", "Replacement", "gate", "count_wire_images"]


#: Why a ``data:`` image URI in text that holds no readable image (cut short in a truncated
#: output, damaged, or of a type without a pixel size) is never shipped as an image.
DAMAGED_DATA_URI = "the data: URI does not hold a readable image (cut, damaged or of an unsupported type)"


#: Why an image block whose bytes hold no readable image (no pixel size) is never shipped.
DAMAGED_IMAGE = "the image data is damaged or of an unknown format"


@dataclass(frozen=True)
class OutboundRequest:
    """A request before the gate, in the internal block form.

    Attributes:
        purpose: ``"compile"``, ``"l1"``, ``"merge"`` or ``"split"``.
        system: the system text (instructions, pinned system messages), or ``None``.
        messages: ``(role, blocks)`` pairs in order.
        token_hints: optional, per message: its ``blocks_text_tokens`` already known (the
            store's cached count), so the gate need not re-tokenize a message it ships
            unchanged; ``None`` where unknown.
        tools: normalized tool definitions offered to the model (see :mod:`compaction.tools`).
    """

    purpose: str
    system: str | None
    messages: tuple[tuple[str, tuple[Block, ...]], ...]
    token_hints: tuple[int | None, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Replacement:
    """One thing the gate replaced: an image (with its facts) or an orphaned tool block."""

    kind: str
    reason: str
    message_index: int
    media_type: str | None = None
    width: int | None = None
    height: int | None = None
    byte_size: int | None = None
    short_hash: str | None = None


@dataclass(frozen=True)
class GatedRequest:
    """An immutable request that passed the gate.

    Attributes:
        purpose: as in :class:`OutboundRequest`.
        format: ``"openai"`` or ``"anthropic"``.
        payload: the serialized JSON body (UTF-8 bytes), exactly what is sent or written.
        tokens: the request's tokens (text by the encoding, shown images by pixel pricing,
            framing per message) (tokens).
        images_shown: image parts in the body.
        replacements: every image or orphan replaced, and why.
        messages: the gated internal messages (role, blocks), for summarizers that read blocks.
    """

    purpose: str
    format: str
    payload: bytes
    tokens: int
    images_shown: int
    replacements: tuple[Replacement, ...]
    messages: tuple[tuple[str, tuple[Block, ...]], ...] = field(repr=False)
    system: str | None = None

    def body(self) -> dict[str, Any]:
        """Return a fresh copy of the JSON body (editing it does not change :attr:`payload`)."""
        result: dict[str, Any] = json.loads(self.payload)
        return result

    @property
    def images_replaced(self) -> int:
        return sum(1 for r in self.replacements if r.kind == "image")


@dataclass
class _Occurrence:
    message_index: int
    facts: Any
    forced: str | None = None
    decision: Decision | None = None


def _walk_images(blocks: Sequence[Block], index: int, sink: list[_Occurrence]) -> None:
    for block in blocks:
        kind = block.get("type")
        if kind == "image":
            sink.append(_Occurrence(index, info_from_block(block)))
        elif kind == "text":
            _walk_text(block["text"], index, sink, None)
        elif kind == "tool_result":
            content = block.get("content", "")
            if isinstance(content, str):
                _walk_text(content, index, sink, None)
            else:
                _walk_images(content, index, sink)
        elif kind == "tool_use":
            _walk_text(
                canonical_json(block.get("input", {})),
                index,
                sink,
                "inside tool call arguments, which cannot carry images",
            )


def _walk_text(text: str, index: int, sink: list[_Occurrence], forced: str | None) -> None:
    if ";base64," in text:
        for match in DATA_URI_RE.finditer(text):
            try:
                info = info_from_data_uri(match.group(0))
            except ImageError:  # a data: URI cut short (truncated output): never ship it as an image
                info = ImageInfo(f"image/{match.group(1).lower()}", None, None, None, None, "data-uri")
            sink.append(_Occurrence(index, info, forced if info.has_size else DAMAGED_DATA_URI))


class _Rebuilder:
    """Rebuild blocks in the same traversal order as :func:`_walk_images`."""

    def __init__(self, occurrences: list[_Occurrence]) -> None:
        self.occurrences = occurrences
        self.position = 0

    def _next(self) -> _Occurrence:
        occurrence = self.occurrences[self.position]
        self.position += 1
        return occurrence

    @staticmethod
    def placeholder(occ: _Occurrence) -> str:
        f = occ.facts
        assert occ.decision is not None
        return placeholder_text(
            media_type=f.media_type,
            width=f.width,
            height=f.height,
            byte_size=f.byte_size,
            short_hash=f.short_hash,
            source=f.source,
            url=f.url,
            reason=occ.decision.reason,
        )

    def text_pieces(self, text: str) -> list[Block]:
        """Split a text at its data URIs: kept ones become image blocks, others placeholders."""
        if ";base64," not in text:
            return [{"type": "text", "text": text}]
        pieces: list[Block] = []
        buffer: list[str] = []
        last = 0
        for match in DATA_URI_RE.finditer(text):
            occ = self._next()
            buffer.append(text[last : match.start()])
            last = match.end()
            assert occ.decision is not None
            if occ.decision.keep:
                if "".join(buffer):
                    pieces.append({"type": "text", "text": "".join(buffer)})
                buffer = []
                media = f"image/{match.group(1).lower()}"
                pieces.append(
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": media,
                            "data": canonical_base64(match.group(2)),
                        },
                    }
                )
            else:
                buffer.append(self.placeholder(occ))
        buffer.append(text[last:])
        if "".join(buffer) or not pieces:
            pieces.append({"type": "text", "text": "".join(buffer)})
        return pieces

    def text_inline(self, text: str) -> str:
        """Replace every data URI of ``text`` by its placeholder (for tool arguments)."""
        if ";base64," not in text:
            return text

        def sub(_match: Any) -> str:
            return self.placeholder(self._next())

        return DATA_URI_RE.sub(sub, text)

    def blocks(self, blocks: Sequence[Block]) -> list[Block]:
        out: list[Block] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "image":
                occ = self._next()
                assert occ.decision is not None
                out.append(block if occ.decision.keep else {"type": "text", "text": self.placeholder(occ)})
            elif kind == "text":
                out.extend(self.text_pieces(block["text"]))
            elif kind == "tool_result":
                content = block.get("content", "")
                if isinstance(content, str):
                    pieces = self.text_pieces(content)
                    new: Any = (
                        pieces[0]["text"] if len(pieces) == 1 and pieces[0]["type"] == "text" else pieces
                    )
                else:
                    new = self.blocks(content)
                out.append({**block, "content": new})
            elif kind == "tool_use":
                raw = canonical_json(block.get("input", {}))
                if ";base64," in raw:
                    out.append({**block, "input": json.loads(self.text_inline(raw))})
                else:
                    out.append(block)
            else:
                out.append(block)
        return out


def _repair_orphans(
    messages: list[tuple[str, list[Block]]], report: list[Replacement]
) -> list[tuple[str, list[Block]]]:
    # Both APIs want each call answered in the very next turn: consecutive messages of one
    # role form a turn (renderers merge them), and an assistant turn's calls must be answered
    # by the user turn right after it, once each.
    turn_of: list[int] = []
    for index, (role, _blocks) in enumerate(messages):
        same = index > 0 and messages[index - 1][0] == role
        turn_of.append(turn_of[-1] if same else (turn_of[-1] + 1 if turn_of else 0))
    calls_in_turn: dict[int, set[str]] = {}
    for index, (role, blocks) in enumerate(messages):
        if role == "assistant":
            for block in blocks:
                if block.get("type") == "tool_use":
                    calls_in_turn.setdefault(turn_of[index], set()).add(block["id"])
    answered: set[str] = set()
    kept_results: set[tuple[int, int]] = set()
    for index, (role, blocks) in enumerate(messages):
        if role != "user":
            continue
        previous = calls_in_turn.get(turn_of[index] - 1, set())
        for position, block in enumerate(blocks):
            if block.get("type") == "tool_result":
                tool_id = block["tool_use_id"]
                if tool_id in previous and tool_id not in answered:
                    answered.add(tool_id)
                    kept_results.add((index, position))
    out: list[tuple[str, list[Block]]] = []
    for index, (role, blocks) in enumerate(messages):
        new_blocks: list[Block] = []
        for position, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "tool_result" and (index, position) not in kept_results:
                kind = "orphan_tool_result"
            if kind == "tool_use" and block["id"] not in answered:
                report.append(
                    Replacement("orphan_tool_use", "its tool_result is not in the turn after it", index)
                )
                new_blocks.append(
                    {
                        "type": "text",
                        "text": (
                            f"[tool call {block['name']} (id {block['id']}) with input "
                            f"{canonical_json(block.get('input', {}))}; no result was recorded for it]"
                        ),
                    }
                )
            elif kind == "orphan_tool_result":
                report.append(
                    Replacement("orphan_tool_result", "its tool_use is not in the turn before it", index)
                )
                content = block.get("content", "")
                text = (
                    content
                    if isinstance(content, str)
                    else "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
                )
                new_blocks.append(
                    {
                        "type": "text",
                        "text": f"[result of tool call {block['tool_use_id']}, whose call is not in this request]\n{text}",
                    }
                )
                if isinstance(content, list):
                    new_blocks.extend(b for b in content if b.get("type") == "image")
            else:
                new_blocks.append(block)
        out.append((role, new_blocks))
    return out


def count_wire_images(body: dict[str, Any]) -> int:
    """Return the image inputs in a rendered body: image parts, image blocks and data URIs in strings."""
    count = 0

    def walk(value: Any) -> None:
        nonlocal count
        if isinstance(value, dict):
            kind = value.get("type")
            if kind in ("image", "image_url", "input_image"):
                count += 1
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and ";base64," in value and DATA_URI_RE.search(value):
            count += len(DATA_URI_RE.findall(value))

    walk(body.get("messages", []))
    walk(body.get("system", ""))
    return count


def _message_tokens(blocks: Sequence[Block], encoding: str, model: str) -> tuple[int, int]:
    """Return (text tokens with framing, image tokens) of gated blocks."""
    text = blocks_text_tokens(blocks, encoding)
    images = 0
    stack = list(blocks)
    while stack:
        block = stack.pop()
        if block.get("type") == "image":
            info = info_from_block(block)
            images += price_image(info.width, info.height, model).tokens
        elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            stack.extend(block["content"])
    return text, images


def gate(
    request: OutboundRequest,
    settings: ImageSettings,
    *,
    format: str = "openai",
    model: str = "gpt-4o",
    encoding: str = "o200k_base",
    budget: int | None = None,
    max_tokens: int = 4096,
) -> GatedRequest:
    """Apply the image policy and caps, repair orphans, render, verify and freeze a request.

    Args:
        request: the request in internal form.
        settings: the image policy and caps for this kind of request.
        format: ``"openai"`` (Chat Completions) or ``"anthropic"`` (Messages).
        model: the model named in the body; it also selects the image pricing family.
        encoding: the encoding text is counted in.
        budget: if given, the request must not exceed this many tokens.
        max_tokens: the Anthropic body's ``max_tokens``.

    Returns:
        The :class:`GatedRequest`.

    Raises:
        OverBudget: ``budget`` is given and the request exceeds it (stage ``"request"``).
        InvariantViolation: the rendered body breaks the policy or a cap (an engine bug).
    """
    occurrences: list[_Occurrence] = []
    per_message_text: list[int] = []
    hints = request.token_hints
    for index, (_role, blocks) in enumerate(request.messages):
        _walk_images(blocks, index, occurrences)
        hint = hints[index] if index < len(hints) else None
        per_message_text.append(blocks_text_tokens(blocks, encoding) if hint is None else hint)
    # depth of message i = tokens of the messages after it
    depth_after = [0] * len(request.messages)
    running = 0
    for index in range(len(request.messages) - 1, -1, -1):
        depth_after[index] = running
        running += per_message_text[index]
    budgeter = ImageBudget(settings)
    for occ in reversed(occurrences):
        if occ.forced and settings.policy != "placeholders":
            occ.decision = Decision(False, occ.forced)
        elif occ.facts.source != "url" and not occ.facts.width and settings.policy != "placeholders":
            # A provider rejects the whole request for an image it cannot decode.
            occ.decision = Decision(False, DAMAGED_IMAGE)
        else:
            occ.decision = budgeter.decide(occ.facts.byte_size, depth_after[occ.message_index])
    report: list[Replacement] = []
    for occ in occurrences:
        assert occ.decision is not None
        if not occ.decision.keep:
            f = occ.facts
            report.append(
                Replacement(
                    "image",
                    occ.decision.reason,
                    occ.message_index,
                    f.media_type,
                    f.width,
                    f.height,
                    f.byte_size,
                    f.short_hash,
                )
            )
    rebuilder = _Rebuilder(occurrences)
    rebuilt = [(role, rebuilder.blocks(blocks)) for role, blocks in request.messages]
    rebuilt = _repair_orphans(rebuilt, report)
    kept = sum(1 for o in occurrences if o.decision is not None and o.decision.keep)

    if format == "openai":
        body = render_openai(request.system, rebuilt, model)
    elif format == "anthropic":
        body = render_anthropic(request.system, rebuilt, model, max_tokens)
    else:
        raise ValueError(f"format must be 'openai' or 'anthropic'; found {format!r}")
    if request.tools:
        body["tools"] = render_tools(request.tools, format)
    shipped = count_wire_images(body)
    if shipped != kept:
        raise InvariantViolation(
            f"{request.purpose} request: the body carries {shipped} image inputs, the gate kept {kept}"
        )
    if settings.policy == "placeholders" and shipped:
        raise InvariantViolation(
            f"{request.purpose} request: {shipped} image inputs under image_policy = placeholders"
        )
    if settings.max_images is not None and shipped > settings.max_images:
        raise InvariantViolation(
            f"{request.purpose} request: {shipped} images over the cap {settings.max_images}"
        )

    tokens = REQUEST_OVERHEAD + tools_tokens(request.tools, format, encoding)
    if request.system:
        tokens += MESSAGE_OVERHEAD + count_text(request.system, encoding)
    # A message the gate left as it was (no image, no repair) costs what it cost before.
    changed = {occ.message_index for occ in occurrences} | {r.message_index for r in report}
    for index, (_role, gated_blocks) in enumerate(rebuilt):
        if index not in changed:
            tokens += per_message_text[index]
            continue
        text_tokens, image_tokens = _message_tokens(gated_blocks, encoding, model)
        tokens += text_tokens + image_tokens
    first_role = next((role for role, _blocks in rebuilt if role != "system"), None)
    if format == "anthropic" and first_role == "assistant":
        # render_anthropic opens the conversation with a user turn of its own
        tokens += blocks_text_tokens(body["messages"][0]["content"], encoding)
    if budget is not None and tokens > budget:
        raise OverBudget(
            f"the {request.purpose} request needs {tokens} tokens, over the budget of {budget}",
            stage="request",
            budget=budget,
            needed=tokens,
        )
    frozen = tuple((role, tuple(blocks)) for role, blocks in rebuilt)
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return GatedRequest(
        request.purpose, format, payload, tokens, shipped, tuple(report), frozen, request.system
    )
