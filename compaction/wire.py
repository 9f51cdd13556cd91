"""The wire gate: the one function every outbound request passes through last.

Live compiles, L1 prompts, merge prompts and split-fallback prompts all become an
:class:`OutboundRequest` and go through :func:`gate`, which

1. finds every image with :func:`~compaction.images.find_image_sites` (top-level ``image``
   blocks, images nested in ``tool_result`` content, URL images, and
   ``data:image/...;base64,`` URIs inside text, string tool results and tool arguments);
2. decides each newest first with the :class:`~compaction.images.ImageDecider` the compile
   planner uses too (policy, depth, count and byte caps, forced replacements), prices each
   decision with :func:`~compaction.images.site_tokens`, and replaces the ones not shown by
   a loud placeholder; a kept data URI is lifted out of its text into a real image block,
   so it is priced and shipped as an image, never as base64 text;
3. repairs tool pairing (:mod:`compaction.pairing`): a ``tool_use`` with no ``tool_result``
   in the next turn, or the reverse, becomes loud text, and a reused tool id, or one outside
   the format's id grammar, is sent under a fresh valid one;
4. renders the body with the request format (:mod:`compaction.outputs`), model and output
   cap included, verifies the rendered body against the provider's request grammar (tool
   pairing, images only in user turns, turn order), that its image parts equal the kept
   images and respect the caps, checks the budget, and returns immutable serialized bytes
   plus a report of everything it replaced.

Nothing may edit a request after the gate: transports send :attr:`GatedRequest.payload`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .blocks import KNOWN_BLOCK_TYPES, Block, escape_lone_surrogates
from .errors import InvalidArgument, InvariantViolation, OverBudget, found
from .images import ImageDecider, apply_decisions, decide_and_price, find_image_sites
from .outputs import RequestFormat, request_format
from .outputs.anthropic_messages import ANTHROPIC_BLOCK_TYPES, CACHE_CONTROL, final_assistant_content
from .outputs.base import message_shape
from .pairing import repair_tool_pairing
from .policy import Decision, ImageSettings
from .tokens.counting import UNSIGNED_THINKING, block_text_tokens, shipped_blocks
from .tools import tools_tokens
from .types import Purpose, RequestFormatName

__all__ = [
    "OutboundRequest",
    "GatedRequest",
    "Replacement",
    "gate",
    "count_wire_images",
    "unknown_blocks_shipped",
    "repaired_message_tokens",
    "final_message_blocks",
]


@dataclass(frozen=True)
class OutboundRequest:
    """A request before the gate, in the internal block form.

    Attributes:
        purpose: ``"live"`` (the next model turn), or a summarizer request: ``"l1"``,
            ``"merge"``, ``"split"`` or ``"stitch"``.
        system: the system text (instructions, pinned system messages), or ``None``.
        messages: ``(role, blocks)`` pairs in order.
        token_hints: optional, per message: its text tokens as the request format ships
            them (``RequestFormat.text_tokens``) already known (the store's cached count),
            so the gate need not re-tokenize a message it ships unchanged; ``None`` where
            unknown.
        tools: normalized tool definitions offered to the model (see :mod:`compaction.tools`).
        cache_points: indices of messages whose end is a stable prefix boundary (the summary
            stack, the newest message); a format with explicit prompt-cache markers
            (Anthropic ``cache_control``) marks them, with the system text or the tools.
    """

    purpose: Purpose
    system: str | None
    messages: tuple[tuple[str, tuple[Block, ...]], ...]
    token_hints: tuple[int | None, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    cache_points: tuple[int, ...] = ()


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
        format: the request format's name (``"openai"`` or ``"anthropic"``).
        payload: the serialized JSON body (UTF-8 bytes), exactly what is sent or written,
            byte for byte: model and output cap included.
        tokens: the request's tokens (text by the encoding, shown images by pixel pricing,
            framing per message, less what merging consecutive messages of one role saves:
            ``RequestFormat.merge_saving``) (tokens).
        images_shown: image parts in the body.
        replacements: every image or orphan replaced, and why.
        messages: the gated internal messages (role, blocks), for summarizers that read blocks.
        system: the system text.
        model: the model the body names.
        max_output_tokens: the answer's cap written in the body (tokens), or ``None``.
        dropped: ``(message index, block type)`` of each block the request format does not
            ship (OpenAI Chat carries no ``thinking``), neither counted nor sent.
    """

    purpose: Purpose
    format: RequestFormatName
    payload: bytes
    tokens: int
    images_shown: int
    replacements: tuple[Replacement, ...]
    messages: tuple[tuple[str, tuple[Block, ...]], ...] = field(repr=False)
    system: str | None = None
    model: str = ""
    max_output_tokens: int | None = None
    dropped: tuple[tuple[int, str], ...] = ()

    def body(self) -> dict[str, Any]:
        """Return a fresh copy of the JSON body (editing it does not change :attr:`payload`)."""
        result: dict[str, Any] = json.loads(self.payload)
        return result

    @property
    def images_replaced(self) -> int:
        return sum(1 for r in self.replacements if r.kind == "image")


#: Blocks that cannot carry a cache marker (Anthropic refuses it on thinking blocks).
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _mark_cache_points(
    messages: list[tuple[str, list[Block]]], points: Sequence[int]
) -> list[tuple[str, list[Block]]]:
    """Return ``messages`` with a ``cache_control`` marker on the last markable block of each point."""
    out = list(messages)
    for index in points:
        if not 0 <= index < len(out):
            continue
        role, blocks = out[index]
        for position in range(len(blocks) - 1, -1, -1):
            block = blocks[position]
            blank = block.get("type") == "text" and not str(block.get("text", "")).strip()
            if block.get("type") in _UNMARKABLE or blank:  # a blank text is not shipped
                continue
            marked = list(blocks)
            marked[position] = {**block, "cache_control": dict(CACHE_CONTROL)}
            out[index] = (role, marked)
            break
    return out


def unknown_blocks_shipped(request: GatedRequest, encoding: str) -> dict[str, tuple[int, int]]:
    """Return ``{block type: (count, tokens)}`` of the blocks of unknown type a gated request ships as text.

    An unknown type (none of :data:`~compaction.blocks.KNOWN_BLOCK_TYPES`) is kept verbatim in
    the store and shipped by the request format's loud default rule (its JSON as text), which
    costs budget without telling the model much; ``compaction run`` reports the share and warns
    past 1%.  Blocks the format drops are not shipped and not counted; blocks the format's API
    takes as they are (its ``native_block_types`` at a message's top level: Anthropic's
    server-tool and MCP blocks; ``native_result_block_types`` inside a ``tool_result``) are
    not shipped as text and not counted; blocks inside a
    ``tool_result`` count too.  Tokens are each block's own (:func:`block_text_tokens`).
    """
    fmt = request_format(request.format)
    found: dict[str, tuple[int, int]] = {}
    pending = [(block, True) for _role, blocks in request.messages for block in blocks]
    while pending:
        block, top = pending.pop()
        kind = str(block.get("type"))
        if kind == "tool_result" and isinstance(block.get("content"), list):
            pending.extend((b, False) for b in block["content"] if isinstance(b, dict))
        native = fmt.native_block_types if top else fmt.native_result_block_types
        if kind in KNOWN_BLOCK_TYPES or kind in fmt.dropped_block_types or kind in native:
            continue
        count, tokens = found.get(kind, (0, 0))
        found[kind] = (count + 1, tokens + block_text_tokens(block, encoding))
    return dict(sorted(found.items()))


def count_wire_images(body: dict[str, Any], format: RequestFormatName | RequestFormat = "openai") -> int:
    """Return the image inputs in a rendered body: image parts, image blocks and data URIs in strings."""
    return request_format(format).count_images(body)


def _image_tokens_of(blocks: Sequence[Block], fmt: RequestFormat, model: str) -> int:
    """Return the price of the image blocks (top level and nested) of gated blocks (tokens)."""
    images = 0
    stack = list(blocks)
    while stack:
        block = stack.pop()
        if block.get("type") == "image":
            site = find_image_sites([block])[0]
            images += fmt.image_tokens(site.width, site.height, model)
        elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            stack.extend(block["content"])
    return images


def repaired_message_tokens(blocks: Sequence[Block], fmt: RequestFormat, model: str, encoding: str) -> int:
    """Return what the gate counts for a message its tool-pairing repair changed (tokens).

    Such a message is counted as it now reads: its text as ``fmt`` ships it
    (``RequestFormat.text_tokens``) plus each image block it still holds (top level or nested
    in a ``tool_result``), priced for ``model``.  ``blocks`` are after the image decisions
    (a replaced image is its placeholder text) and after the repair; the compile planner
    prices a window's renamed tool ids with this too, so plan and gate agree.
    """
    return fmt.text_tokens(blocks, encoding) + _image_tokens_of(blocks, fmt, model)


#: What :func:`final_message_blocks` puts in place of a block the Anthropic renderer ships as
#: text of its own before it strips the turn (a block of a type Anthropic does not take, an
#: unanswered call, an assistant's image placeholder): that text ends in no whitespace, and the
#: strip stops at it.
_SHIPPED_AS_TEXT: Block = {"type": "text", "text": "[stand-in]"}


def final_message_blocks(role: str, blocks: Sequence[Block], fmt: RequestFormat) -> list[Block] | None:
    """Return the blocks a request's last message ships as when its format changes them there.

    Anthropic ships a final assistant turn through
    :func:`~compaction.outputs.anthropic_messages.final_assistant_content`: each signed
    ``thinking`` block and each ``redacted_thinking`` block as loud text, and the turn's last text right-stripped (a stored
    ``"ok"`` and 2,000 line breaks ships as ``"ok"``).  A store caches each message's count
    as stored, so the planner and the gate both recount the request's last message from
    these blocks (only that one: a strip reaching back into an earlier message of the turn,
    when the last holds no text, stays counted as stored, over what ships, never under).  An
    unsigned thinking block, which the renderer sends as text already, is given its thinking
    as it ships (right-stripped when it is last).  Blocks of a type Anthropic does not take,
    calls (unanswered in a final turn, shipped as text by the repair) and images (an
    assistant's ship as placeholders) ship as text the strip cannot shorten, so it stops at
    them, in the planner's stored blocks as in the gate's repaired ones.

    Args:
        role: the role of the request's last message other than a system one.
        blocks: its blocks (stored, or as the gate left them).
        fmt: the request format.

    Returns:
        The blocks as they ship (blank texts left out, see
        :func:`~compaction.tokens.counting.shipped_blocks`), or ``None`` when the format
        ships them as counted (any format but Anthropic, a user turn, nothing stripped).
    """
    if role != "assistant" or fmt.name != "anthropic":
        return None
    shipped = shipped_blocks(blocks, fmt.dropped_block_types)
    probe: list[Block] = []
    for block in shipped:
        kind = block.get("type")
        if kind == "thinking" and not block.get("signature"):
            probe.append({"type": "text", "text": UNSIGNED_THINKING + str(block.get("thinking", ""))})
        elif kind in ("tool_use", "image") or kind not in ANTHROPIC_BLOCK_TYPES:
            probe.append(_SHIPPED_AS_TEXT)
        else:
            probe.append(block)
    final = final_assistant_content(probe)
    out: list[Block] = []
    changed = False
    for block, before, after in zip(shipped, probe, final, strict=True):
        if after is before:
            out.append(block)
            continue
        changed = True
        if block.get("type") == "thinking" and not block.get("signature"):
            out.append({**block, "thinking": str(after.get("text", ""))[len(UNSIGNED_THINKING) :]})
        else:
            out.append(after)
    return out if changed else None


def gate(
    request: OutboundRequest,
    settings: ImageSettings,
    *,
    format: RequestFormatName | RequestFormat = "openai",
    model: str | None = None,
    encoding: str = "o200k_base",
    budget: int | None = None,
    max_output_tokens: int | None = None,
    cache_key: str | None = None,
    cache_breakpoints: bool = True,
) -> GatedRequest:
    """Apply the image policy and caps, repair orphans, render, verify and freeze a request.

    Args:
        request: the request in internal form.
        settings: the image policy and caps for this kind of request.
        format: the request format (a name from :data:`compaction.outputs.REQUEST_FORMATS`
            or a :class:`~compaction.outputs.RequestFormat`).
        model: the model named in the body; it also selects the image pricing.  Default:
            the format's default model.
        encoding: the encoding text is counted in.
        budget: if given, the request must not exceed this many tokens.
        max_output_tokens: the answer's cap written into the body (tokens); ``None`` leaves
            it out where the format allows (OpenAI) or writes the format's default (Anthropic).
        cache_key: a prompt-cache routing key for formats that take one (OpenAI
            ``prompt_cache_key``); summarizer requests pass none.
        cache_breakpoints: mark ``request.cache_points`` (and the system text or tools) as
            prompt-cache breakpoints in formats with explicit markers (Anthropic).

    Returns:
        The :class:`GatedRequest`; its ``tokens`` are the planner's price of the same
        messages (text tokens plus each image's decided cost, see :mod:`compaction.images`,
        less the merge saving of :meth:`~compaction.outputs.RequestFormat.merge_saving`).

    Raises:
        OverBudget: ``budget`` is given and the request exceeds it (stage ``"request"``).
        InvariantViolation: the rendered body breaks the policy or a cap (an engine bug).
        RecipeError: an unknown format name.
        InvalidArgument: ``request`` or ``settings`` of the wrong type.
    """
    if not isinstance(request, OutboundRequest):
        raise InvalidArgument(f"request must be an OutboundRequest; found {found(request)}")
    if not isinstance(settings, ImageSettings):
        raise InvalidArgument(f"settings must be ImageSettings; found {found(settings)}")
    fmt = request_format(format)
    model = model or fmt.default_model
    hints = request.token_hints
    text_tokens: list[int] = []
    for index, (_role, blocks) in enumerate(request.messages):
        hint = hints[index] if index < len(hints) else None
        text_tokens.append(fmt.text_tokens(blocks, encoding) if hint is None else hint)
    sites = [find_image_sites(blocks) for _role, blocks in request.messages]
    decider = ImageDecider(settings)
    decisions: list[list[Decision]] = [[] for _ in sites]
    message_tokens = [0] * len(sites)
    depth = 0
    for index in range(len(sites) - 1, -1, -1):  # newest first, as the planner decides
        decisions[index], images = decide_and_price(
            sites[index], decider, depth, role=request.messages[index][0], model=model, encoding=encoding, format=fmt
        )
        message_tokens[index] = text_tokens[index] + images
        depth += message_tokens[index]
    report: list[Replacement] = []
    rebuilt: list[tuple[str, list[Block]]] = []
    kept = 0
    for index, (role, blocks) in enumerate(request.messages):
        for site, decision in zip(sites[index], decisions[index], strict=True):
            if decision.keep:
                kept += 1
            else:
                report.append(
                    Replacement(
                        "image",
                        decision.reason,
                        index,
                        site.media_type,
                        site.width,
                        site.height,
                        site.byte_size,
                        site.short_hash,
                    )
                )
        rebuilt.append((role, apply_decisions(blocks, sites[index], decisions[index]) if sites[index] else list(blocks)))
    unpaired = rebuilt
    rebuilt = repair_tool_pairing(
        rebuilt, lambda kind, reason, index: report.append(Replacement(kind, reason, index)), fmt.name
    )
    # a repaired message is priced as it now reads: each one the repair changed (a renamed id
    # is reported at its call's message, but the result in the next one carries it too)
    repaired = [i for i, (_role, blocks) in enumerate(rebuilt) if blocks != unpaired[i][1]]
    for index in repaired:
        message_tokens[index] = repaired_message_tokens(rebuilt[index][1], fmt, model, encoding)
    # the last message as the format ships it there (Anthropic strips a final assistant turn)
    last = next((i for i in range(len(rebuilt) - 1, -1, -1) if rebuilt[i][0] != "system"), None)
    final = final_message_blocks(*rebuilt[last], fmt) if last is not None else None
    if last is not None and final is not None:
        message_tokens[last] = repaired_message_tokens(final, fmt, model, encoding)

    marking = cache_breakpoints and request.purpose == "live"  # a summarizer's request never writes the agent's cache
    if marking and fmt.cache_markers:
        rebuilt = _mark_cache_points(rebuilt, request.cache_points)
    body = fmt.render(request.system, rebuilt, model=model, max_output_tokens=max_output_tokens)
    if request.tools:
        body["tools"] = fmt.render_tools(request.tools)
    fmt.add_cache_hints(body, key=cache_key, mark_prefix=marking)
    problems = fmt.grammar_problems(body)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InvariantViolation(
            f"{request.purpose} request: the body breaks the {fmt.title} request grammar: {problems[0]}{more}"
        )
    shipped = fmt.count_images(body)
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
    first_role = next((role for role, _blocks in rebuilt if role != "system"), None)
    tokens = (
        fmt.framing_tokens(request.system, first_role, encoding)
        + tools_tokens(request.tools, fmt.name, encoding)
        + sum(message_tokens)
        - fmt.merge_saving([message_shape(role, blocks) for role, blocks in rebuilt], encoding)
    )
    if budget is not None and tokens > budget:
        raise OverBudget(
            f"the {request.purpose} request needs {tokens} tokens, over the budget of {budget}",
            stage="request",
            budget=budget,
            needed=tokens,
        )
    frozen = tuple((role, tuple(blocks)) for role, blocks in rebuilt)
    # A lone surrogate in the history (valid JSON, no UTF-8 form) ships as its JSON escape.
    payload = escape_lone_surrogates(json.dumps(body, ensure_ascii=False, separators=(",", ":"))).encode("utf-8")
    return GatedRequest(
        request.purpose,
        fmt.name,
        payload,
        tokens,
        shipped,
        tuple(report),
        frozen,
        request.system,
        model,
        body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else None,
        tuple((index, str(b.get("type"))) for index, (_role, blocks) in enumerate(rebuilt) for b in fmt.dropped_blocks(blocks)),
    )
