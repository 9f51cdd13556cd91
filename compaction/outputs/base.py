"""The request-format seam: what one provider's request shape must supply.

A request format turns gated internal messages (the Anthropic Messages block form) into one
provider's request body.  Everything that depends on the shape lives behind this one
object: rendering messages and tool definitions, counting the image inputs of a rendered
body (the gate verifies it against what it kept), the framing tokens the shape adds, the
default model a request names and how that model prices an image.  The planner and the
gate read all of it from the same object, so they price the same request.

A new format (the OpenAI Responses API, Gemini) is one module with a subclass and one line
in :mod:`compaction.outputs`' registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..blocks import DATA_URI_RE, Block
from ..tokens.counting import (
    BLOCK_SEPARATOR,
    blocks_text_tokens,
    cache_key,
    count_text,
    message_overhead,
    request_overhead,
    shipped_blocks,
)
from ..tokens.image_pricing import price_image
from ..types import RequestFormatName

__all__ = ["RequestFormat", "TurnJoins", "WireMessage", "count_body_images", "merge_turns", "message_shape"]

#: One gated message: ``(role, blocks)``.
WireMessage = tuple[str, Sequence[Block]]


def merge_turns(messages: Sequence[WireMessage], dropped_block_types: frozenset[str]) -> list[tuple[str, list[Block]]]:
    """Return the messages as turns: consecutive user (or assistant) messages joined into one.

    OpenAI's shapes need it: an assistant turn's tool outputs must follow it directly, and a
    user turn's tool outputs come before its other parts.  A message whose blocks the format
    drops entirely becomes the counted stand-in (``DROPPED_STAND_IN``), and a message with
    nothing a provider takes (no blocks, or only empty or whitespace texts) ``EMPTY_STAND_IN``
    (:func:`~compaction.tokens.counting.shipped_blocks`); each must ship so even when merged
    into a turn.  Blocks of a dropped type are left out.  System messages are never merged.

    Args:
        messages: ``(role, blocks)`` in order, as the gate left them.
        dropped_block_types: the ``type`` values the format neither sends nor counts.

    Returns:
        ``(role, blocks)`` per turn, in order; the input is not changed.
    """
    merged: list[tuple[str, list[Block]]] = []
    for role, blocks in messages:
        if role != "system":
            blocks = shipped_blocks(blocks, dropped_block_types)
        if role in ("assistant", "user") and merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, list(blocks)))
    return merged


def message_shape(role: str, blocks: Iterable[Block]) -> tuple[str, bool]:
    """Return what merging needs to know of one shown message: ``(role, framed)``.

    ``framed``: the message holds no ``tool_result`` block, so its count carries a frame of its
    own (:data:`~compaction.tokens.counting.MESSAGE_OVERHEAD`), which a merge into the message
    before it saves.  A message with tool results is never called framed, even with other
    blocks beside them (whose count does carry a frame): a store's cached facts name only its
    results (``MessageFacts.tool_results``), and the planner and the gate must agree; calling
    it unframed only forgoes a saving, so the count stays an upper bound.
    """
    return role, not any(b.get("type") == "tool_result" for b in blocks)


@dataclass(frozen=True)
class TurnJoins:
    """The tokens a request saves by shipping consecutive messages of one role as one turn.

    Each shown message is counted with its own frame (``RequestFormat.text_tokens``), but
    :func:`merge_turns` (and Anthropic's renderer) ship a run of user (or assistant) messages
    as one message: of the run's framed messages (see :func:`message_shape`) only one frame
    ships, and each join of their texts adds a separator.  So a run with ``k`` framed messages
    saves ``(k - 1) * per_join`` tokens, ``per_join`` being one message's frame minus
    :data:`~compaction.tokens.counting.BLOCK_SEPARATOR` (:meth:`RequestFormat.join_saving`).
    A message of tool results only ships as ``tool`` messages (OpenAI) and is counted without
    a frame of its own, so it saves nothing and does not end the run.  A message of any other
    role (``system``) ends the run: OpenAI ships it apart.

    The value is built newest first, one message at a time (:meth:`before`), so the planner
    extends it as it reads a store backwards and the gate folds it over a request's messages
    (:meth:`RequestFormat.merge_saving`): both get it from this one function.

    Attributes:
        saving: tokens saved by the merges in the messages seen so far (tokens).
        role: the role of the oldest message seen so far (``None``: none yet, or a system one).
        framed: whether the run that oldest message opens holds a framed message.
    """

    saving: int = 0
    role: str | None = None
    framed: bool = False

    def before(self, role: str, framed: bool, per_join: int) -> TurnJoins:
        """Return the joins of this sequence with one message ``(role, framed)`` put before it."""
        if role not in ("user", "assistant"):
            return TurnJoins(self.saving, None, False)
        if role != self.role:
            return TurnJoins(self.saving, role, framed)
        saved = per_join if framed and self.framed else 0
        return TurnJoins(self.saving + saved, role, framed or self.framed)


def count_body_images(value: Any, image_types: frozenset[str]) -> int:
    """Return the image inputs in a rendered body fragment.

    Counts objects whose ``type`` is in ``image_types`` (not looking inside them) and
    ``data:image/...;base64,`` URIs inside any string, at any depth.  A ``tool_use`` block's
    ``input`` is the call's arguments, not content: an object in it whose ``type`` says
    ``image`` (a JSON schema, an image described to a tool) is no image input, and a
    ``type`` that is not a string (``{"type": ["string", "null"]}``) is no block type; only
    the ``data:`` URIs in its strings count there.
    """
    count = 0
    stack: list[tuple[Any, bool]] = [(value, False)]  # (item, inside a tool call's arguments)
    while stack:
        item, arguments = stack.pop()
        if isinstance(item, dict):
            kind = item.get("type")
            if not arguments and isinstance(kind, str) and kind in image_types:
                count += 1
                continue
            tool_call = not arguments and kind == "tool_use"
            stack.extend((child, arguments or (tool_call and key == "input")) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, arguments) for child in item)
        elif isinstance(item, str) and ";base64," in item:
            count += len(DATA_URI_RE.findall(item))
    return count


class RequestFormat(ABC):
    """One provider's request shape.

    Attributes:
        name: the name recipes and ``--to`` use (``"openai"``, ``"anthropic"``).
        title: the provider's name for the API, for messages.
        default_model: the model a request names when neither the call nor the recipe
            names one; it also selects the image pricing.
        image_types: the ``type`` values of image inputs in a rendered body.
    """

    name: ClassVar[RequestFormatName]
    title: ClassVar[str]
    default_model: ClassVar[str]
    image_types: ClassVar[frozenset[str]]

    def render(
        self,
        system: str | None,
        messages: Sequence[WireMessage],
        *,
        model: str,
        max_output_tokens: int | None = None,
    ) -> dict[str, Any]:
        """Return the request body for gated messages: ``model``, the output cap, the conversation.

        Args:
            system: the system text, or ``None``.
            messages: ``(role, blocks)`` in order, as the gate left them (images decided,
                orphans repaired); rendering never adds or drops an image.
            model: the model the body names.
            max_output_tokens: the answer's cap (tokens), written as ``output_cap_field``; ``None``
                leaves it to the shape (see :meth:`default_output_cap`).
        """
        body: dict[str, Any] = {"model": model}
        cap = self.default_output_cap if max_output_tokens is None else max_output_tokens
        if cap is not None:
            body[self.output_cap_field] = cap
        body.update(self.render_conversation(system, messages))
        return body

    #: ``max_tokens`` written when the caller names none (``None``: the field is left out).
    default_output_cap: ClassVar[int | None] = None
    #: The body field that holds the answer's cap (tokens).
    output_cap_field: ClassVar[str] = "max_tokens"

    @abstractmethod
    def render_conversation(self, system: str | None, messages: Sequence[WireMessage]) -> dict[str, Any]:
        """Return the body's conversation fields (system text and messages) in this shape."""

    @abstractmethod
    def render_tools(self, tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Return normalized tool definitions (``name``, ``description``, ``parameters``) in this shape."""

    @abstractmethod
    def grammar_problems(self, body: dict[str, Any]) -> list[str]:
        """Return what in a rendered body the provider would refuse (empty: it is valid).

        Checks tool pairing (each call answered by the results right after it, nothing in
        between, ids unique), where images may appear (user turns only) and the turn order
        the provider requires.  The wire gate raises on any problem instead of shipping.
        """

    #: Whether the shape takes explicit prompt-cache markers on blocks (``cache_control``).
    cache_markers: ClassVar[bool] = False

    @abstractmethod
    def add_cache_hints(self, body: dict[str, Any], *, key: str | None, mark_prefix: bool) -> None:
        """Add the shape's prompt-cache hints to a rendered body, in place.

        Args:
            body: the rendered body.
            key: a cache routing key, for shapes that take one (OpenAI ``prompt_cache_key``).
            mark_prefix: mark the end of the tools and system text as a cache breakpoint, for
                shapes with explicit markers.
        """

    def count_images(self, body: dict[str, Any]) -> int:
        """Return the image inputs of a rendered body (image parts and data URIs in strings)."""
        return count_body_images(body.get("messages", []), self.image_types) + count_body_images(
            body.get("system", ""), self.image_types
        )

    def framing_tokens(self, system: str | None, first_role: str | None, encoding: str) -> int:
        """Return the tokens the shape adds around the messages (tokens).

        The reply primer, and the system text with its message framing.  ``first_role`` is
        the role of the first non-system message (``None`` when there is none); a shape that
        must open with a particular role adds the turn it inserts.  Under an ``hf:``
        encoding the framing is the local model's chat template's
        (:mod:`compaction.tokens.chat_templates`), counted with its tokenizer.
        """
        tokens = request_overhead(encoding)
        if system:
            tokens += message_overhead(encoding) + count_text(system, encoding)
        return tokens

    def join_saving(self, encoding: str) -> int:
        """Return what merging one framed message into the turn before it saves (tokens).

        One message's frame (:func:`~compaction.tokens.counting.message_overhead`) less the
        separator the renderer writes at the join (``"\\n\\n"`` between texts, counted as
        :data:`~compaction.tokens.counting.BLOCK_SEPARATOR`); never below 0.
        """
        return max(0, message_overhead(encoding) - BLOCK_SEPARATOR)

    def merge_saving(self, shapes: Sequence[tuple[str, bool]], encoding: str) -> int:
        """Return the tokens the shown messages save by merging into turns (tokens).

        Args:
            shapes: :func:`message_shape` of each message the body shows, in order (the
                summary message too, as the user message it renders as).
            encoding: the encoding counted in.

        The request's count is the messages' counts summed, less this; see :class:`TurnJoins`.
        """
        per_join = self.join_saving(encoding)
        joins = TurnJoins()
        for role, framed in reversed(shapes):
            joins = joins.before(role, framed, per_join)
        return joins.saving

    #: Block types the shape does not carry at all (rendering leaves them out, and
    #: :meth:`text_tokens` does not count them).  Any other block ships, as itself or as a
    #: loud text stand-in.
    dropped_block_types: ClassVar[frozenset[str]] = frozenset()
    #: Block types beyond :data:`~compaction.blocks.KNOWN_BLOCK_TYPES` the shape's API takes as
    #: they are at a message's top level (Anthropic's server-tool and MCP blocks); any other
    #: unknown type ships as the loud text of its JSON.
    native_block_types: ClassVar[frozenset[str]] = frozenset()
    #: The same inside a ``tool_result``'s content (Anthropic's ``search_result``, ``document``).
    native_result_block_types: ClassVar[frozenset[str]] = frozenset()

    def text_tokens(self, blocks: Sequence[Block], encoding: str) -> int:
        """Return the tokens of one message's blocks as this shape ships them, images aside (tokens).

        :func:`~compaction.tokens.counting.blocks_text_tokens` without the blocks of
        :attr:`dropped_block_types`; a store caches it under :meth:`count_key`.
        """
        return blocks_text_tokens(blocks, encoding, self.dropped_block_types)

    def count_key(self, encoding: str) -> str:
        """Return the key under which a store caches :meth:`text_tokens` of a message.

        Formats that drop the same block types share it.
        """
        return cache_key(encoding, self.dropped_block_types)

    def dropped_blocks(self, blocks: Sequence[Block]) -> list[Block]:
        """Return the blocks of one message this shape does not ship, in order."""
        return [b for b in blocks if b.get("type") in self.dropped_block_types]

    def image_tokens(self, width: int | None, height: int | None, model: str) -> int:
        """Return what one shown image costs on ``model`` (tokens), by the provider's formula.

        See :func:`compaction.tokens.image_pricing.price_image` for the formulas and their
        sources; an unknown size is charged the model's maximum.
        """
        return price_image(width, height, model).tokens

    def __repr__(self) -> str:
        return f"<request format {self.name!r} ({self.title})>"
