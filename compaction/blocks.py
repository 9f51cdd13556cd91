"""The vocabulary: messages made of content blocks, in the Anthropic Messages shape.

A content block is a plain ``dict`` (JSON-compatible) with a ``"type"`` key:

* ``{"type": "text", "text": str}``
* ``{"type": "image", "source": {"type": "base64", "media_type": str, "data": str}}`` or
  ``{"type": "image", "source": {"type": "url", "url": str}}`` or, for an image the
  transcript names but does not hold (``blob:sha256:...``, an ``attachment://`` the log
  lacks, a file path, a provider file id), an **image reference**
  ``{"type": "image", "source": {"type": "reference", "reference": str, "media_type": str}}``
  (``media_type`` optional): kept in the store, priced as the model's documented maximum,
  never shipped as an image (see :mod:`compaction.images`)
* ``{"type": "tool_use", "id": str, "name": str, "input": dict}``
* ``{"type": "tool_result", "tool_use_id": str, "content": str | list[block], "is_error": bool}``
* ``{"type": "thinking", "thinking": str, "signature": str}``
* ``{"type": "redacted_thinking", "data": str}``
* any other ``type`` is kept verbatim as an opaque block: priced, rendered by a default
  rule, never dropped.

A :class:`Message` is a role plus a tuple of blocks.  Messages are immutable values; the
store assigns ``seq`` when it appends them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import InvalidArgument, InvalidMessage, found

__all__ = [
    "Block",
    "Message",
    "ROLES",
    "KNOWN_BLOCK_TYPES",
    "text_block",
    "image_block",
    "image_reference_block",
    "IMAGE_SOURCE_TYPES",
    "validate_block",
    "iter_blocks_deep",
    "iter_strings",
    "tool_use_ids",
    "tool_result_ids",
    "canonical_json",
    "escape_lone_surrogates",
    "json_depth",
    "MAX_BLOCK_DEPTH",
    "MAX_JSON_DEPTH",
    "DATA_URI_RE",
    "unknown_block_text",
    "data_uri_stand_in",
    "replace_data_uris",
]

Block = dict[str, Any]

ROLES = ("system", "user", "assistant")
KNOWN_BLOCK_TYPES = frozenset({"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"})
#: The source types an ``image`` block may have: inline bytes, a URL the provider fetches, or
#: a reference to bytes the transcript does not hold (never shipped as an image).
IMAGE_SOURCE_TYPES = ("base64", "url", "reference")

#: A base64 ``data:`` URI of an image inside text.  Group 1 is the media subtype,
#: group 2 the base64 payload.
DATA_URI_RE = re.compile(r"data:image/([A-Za-z0-9.+-]{1,32});base64,([A-Za-z0-9+/]+={0,2})")


#: The deepest a ``tool_result`` may nest in another (levels): a tool result holding a tool
#: result ... at most 64 in all.  Deeper content is refused with :class:`InvalidMessage`.
MAX_BLOCK_DEPTH = 64
#: The deepest JSON a block may carry apart from its nested blocks, and a tool definition in
#: all (levels of objects and arrays, the block or definition itself included): a tool call's
#: ``input``, an opaque block's fields.  Deeper content is refused with :class:`InvalidMessage`.
MAX_JSON_DEPTH = 100

#: The JSON containers (a tuple is an array) :func:`json_depth` descends into.
_CONTAINERS = (dict, list, tuple)

#: A lone surrogate code point: text can hold one (JSON's ``"\\ud800"`` decodes to it), UTF-8 cannot.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_lone_surrogates(json_text: str) -> str:
    """Return JSON text with each lone surrogate written as its JSON escape (``\\ud800``).

    A lone surrogate (``"a\\ud800b"`` in a JSON transcript) is a code point of the text with
    no UTF-8 form; escaped, the JSON encodes as UTF-8 (hashing, SQLite, a request body) and
    parses back to the same value.  JSON text is ASCII outside its strings, so every
    surrogate is inside a string, where the escape means the same code point.

    Example:
        >>> escape_lone_surrogates(json.dumps("a\\ud800b", ensure_ascii=False))
        '"a\\\\ud800b"'
    """
    if json_text.isascii() or _LONE_SURROGATE.search(json_text) is None:
        return json_text
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", json_text)


def canonical_json(value: Any) -> str:
    """Serialize ``value`` deterministically (sorted keys, no spaces, UTF-8 kept).

    Text is kept as its characters, except a lone surrogate, which is written as its JSON
    escape (:func:`escape_lone_surrogates`): the result always encodes as UTF-8 and parses
    back to ``value``.  A value nested deeper than Python's recursion allows is written by a
    loop instead (:func:`_canonical_json_deep`), to the same text.
    """
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        text = _canonical_json_deep(value)
    return escape_lone_surrogates(text)


def _canonical_json_deep(value: Any) -> str:
    """Return ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
    without recursion: objects and arrays are walked with an explicit stack.

    Raises:
        TypeError: a value JSON cannot hold (as ``json.dumps`` would).
    """
    out: list[str] = []
    stack: list[Any] = [value]
    close = object()  # a marker: the string under it on the stack is written as it is
    while stack:
        item = stack.pop()
        if item is close:
            out.append(stack.pop())
        elif isinstance(item, dict):
            parts: list[Any] = []
            for index, key in enumerate(sorted(item)):
                if not isinstance(key, str):
                    raise TypeError(f"keys must be str, found {type(key).__name__}")
                parts += [close, ("," if index else "") + json.dumps(key, ensure_ascii=False) + ":", item[key]]
            stack += ["}", close]
            stack += reversed(parts)
            out.append("{")
        elif isinstance(item, (list, tuple)):
            parts = []
            for index, element in enumerate(item):
                if index:
                    parts += [close, ","]
                parts.append(element)
            stack += ["]", close]
            stack += reversed(parts)
            out.append("[")
        else:
            out.append(json.dumps(item, ensure_ascii=False))
    return "".join(out)


def json_depth(value: Any, limit: int) -> int:
    """Return how deep ``value``'s objects and arrays nest, looking no deeper than ``limit + 1``.

    A string, number, boolean or ``None`` is depth 0, ``[]`` and ``{"a": 1}`` depth 1,
    ``{"a": [1]}`` depth 2.  The walk is iterative, so no depth reaches Python's recursion
    limit, and it stops at the first path deeper than ``limit`` (a value that contains itself
    is such a path).

    Returns:
        The depth (levels) when it is at most ``limit``; otherwise ``limit + 1``.

    Example:
        >>> json_depth({"a": [1, {"b": 2}]}, limit=100), json_depth([[[[]]]], limit=2)
        (3, 3)
    """
    if not isinstance(value, _CONTAINERS):
        return 0
    deepest = 1
    pending: list[tuple[Any, int]] = [(value, 1)]  # depth first: a cycle is found at once
    # the deepest level each container was walked at: one met again no deeper (a value shared
    # by several keys, not parsed JSON) has nothing new below it, so the walk stays within
    # containers x limit steps, where walking every path was exponential in the depth
    walked: dict[int, int] = {}
    while pending:
        current, depth = pending.pop()
        if walked.get(id(current), 0) >= depth:
            continue
        walked[id(current)] = depth
        if depth > deepest:
            if depth > limit:
                return limit + 1
            deepest = depth
        for child in current.values() if isinstance(current, dict) else current:
            if isinstance(child, _CONTAINERS):
                pending.append((child, depth + 1))
    return deepest


def data_uri_stand_in(match: re.Match[str]) -> str:
    """Return the loud text that replaces one ``data:`` image URI a block of unknown type holds.

    Such a block ships as text (:func:`unknown_block_text`), where an image cannot be shown,
    so the URI's base64 never ships: the line names the media type and the base64 length
    (characters) and says the block is kept in the store.  It holds no ``;base64,``, so no
    request format reads it as an image input.
    """
    return (
        f"[data:image/{match.group(1).lower()} URI of {len(match.group(2)):,} base64 characters not shown:"
        " it is inside a block this format cannot carry; the block is kept in the store]"
    )


def replace_data_uris(text: str) -> str:
    """Return ``text`` with each ``data:`` image URI replaced by :func:`data_uri_stand_in`."""
    if ";base64," not in text:
        return text
    return DATA_URI_RE.sub(data_uri_stand_in, text)


#: A base64 source object as :func:`canonical_json` writes it (keys sorted): an image's or a
#: document's inline bytes.  Group 1 is the base64 text, group 2 the declared media type.
_BASE64_SOURCE_RE = re.compile(
    r'\{"data":"((?:[A-Za-z0-9+/_=-]|\\[nr])*)","media_type":"([^"\\]{0,100})","type":"base64"\}'
)
#: A JSON string that is the base64 of an image file, told by the file's first bytes (PNG,
#: JPEG, GIF, WebP/RIFF; standard or URL-safe alphabet), whatever key or media type names it.
_BASE64_IMAGE_RE = re.compile(r'"((?:iVBORw0KGgo|/9j/|_9j_|R0lGOD[dl]h|UklGR)(?:[A-Za-z0-9+/_=-]|\\[nr])*)"')
_MAGIC_TYPES = {"i": "image/png", "/": "image/jpeg", "_": "image/jpeg", "R": "image/gif", "U": "image/webp"}
_BYTES_NOT_SHOWN = "not shown: it is inside a block this format cannot carry; the block is kept in the store"


def _base64_stand_ins(json_text: str) -> str:
    """Return canonical JSON with the inline base64 bytes it carries replaced by loud stand-ins.

    A base64 source object keeps its shape and media type, its ``data`` replaced by a line
    naming the media type and the base64 length (characters); any other string that is the
    base64 of an image file (a nested ``tool_result``'s image, an image under a key of an
    unknown block, a media type that lies) becomes one such line too.  The stand-ins hold no
    base64 and no quote, so the text stays JSON and no image byte ships as text.
    """
    if len(json_text) < 64:
        return json_text

    def source(match: re.Match[str]) -> str:
        media = match.group(2)
        line = f"[base64 data ({media}) of {len(match.group(1)):,} characters {_BYTES_NOT_SHOWN}]"
        return f'{{"data":"{line}","media_type":"{media}","type":"base64"}}'

    def image(match: re.Match[str]) -> str:
        media = _MAGIC_TYPES[match.group(1)[0]]
        return f'"[base64 {media} data of {len(match.group(1)):,} characters {_BYTES_NOT_SHOWN}]"'

    return _BASE64_IMAGE_RE.sub(image, _BASE64_SOURCE_RE.sub(source, json_text))


def unknown_block_text(block: Block) -> str:
    """Return the loud text stand-in for a block a request format cannot carry (never empty).

    The block's canonical JSON, named by its type; a ``data:`` image URI inside it is replaced
    by :func:`data_uri_stand_in`, and inline base64 bytes (a base64 source, a string that is
    the base64 of an image file) by a line naming their media type and length
    (:func:`_base64_stand_ins`): a text stand-in carries no image input and no image byte, and
    the gate decides only the images of text, image and tool blocks.
    """
    return replace_data_uris(
        f"[content block of type {block.get('type')!r} not supported by this format: "
        f"{_base64_stand_ins(canonical_json(block))}]"
    )


@dataclass(frozen=True)
class Message:
    """One message of an agent history.

    Attributes:
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        content: the content blocks, in order (a tuple of dicts; do not mutate them).
        seq: the store-assigned position (0-based), ``None`` before the message is stored.
        source_id: the id the source transcript gave the message, if any.
        meta: small source facts kept for inspection (timestamps, model); not rendered.

    Raises:
        InvalidArgument: ``content`` is not a sequence of blocks.
        InvalidMessage: an unknown role, a malformed block (see :func:`validate_block`: tool
            results nest at most :data:`MAX_BLOCK_DEPTH` deep, a block's JSON at most
            :data:`MAX_JSON_DEPTH` levels), or ``meta`` nested deeper than :data:`MAX_JSON_DEPTH`.
    """

    role: str
    content: tuple[Block, ...]
    seq: int | None = None
    source_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidMessage(f"message role must be one of {', '.join(ROLES)}; found {self.role!r}")
        if not isinstance(self.content, tuple):
            try:
                object.__setattr__(self, "content", tuple(self.content))
            except TypeError:
                raise InvalidArgument(
                    f"a message's content must be a tuple or list of content blocks; found {found(self.content)}"
                ) from None
        for index, block in enumerate(self.content):
            validate_block(block, where=f"content[{index}]")
        if json_depth(self.meta, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise InvalidMessage(
                f"meta: nests more than {MAX_JSON_DEPTH} levels deep; at most {MAX_JSON_DEPTH} are allowed"
            )

    def with_seq(self, seq: int) -> Message:
        """Return a copy of this message carrying the store position ``seq``."""
        return replace(self, seq=seq)

    def fingerprint(self) -> str:
        """Return the sha256 hex digest of the role and content (the identity used for dedup)."""
        payload = canonical_json({"role": self.role, "content": list(self.content)})
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def text(self) -> str:
        """Return the concatenated ``text`` blocks (for display and summaries)."""
        return "\n".join(b["text"] for b in self.content if b.get("type") == "text")

    @property
    def has_tool_use(self) -> bool:
        return any(b.get("type") == "tool_use" for b in self.content)


def text_block(text: str) -> Block:
    """Return a ``text`` content block."""
    return {"type": "text", "text": text}


def image_block(media_type: str, data_b64: str) -> Block:
    """Return an ``image`` content block with an inline base64 source."""
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data_b64}}


def image_reference_block(reference: str, media_type: str | None = None) -> Block:
    """Return an ``image`` block that names an image whose bytes the transcript does not hold.

    Args:
        reference: how the source names the image: ``blob:sha256:<hex>``, an
            ``attachment://<hash>`` the log lacks, a file path, a provider file id.
        media_type: the media type the source declares, if any.

    Example:
        >>> image_reference_block("blob:sha256:ab12", "image/png")["source"]["type"]
        'reference'
    """
    source: dict[str, Any] = {"type": "reference", "reference": reference}
    if media_type is not None:
        source["media_type"] = media_type
    return {"type": "image", "source": source}


def validate_block(block: Any, *, where: str = "block") -> None:
    """Check the shape of one content block and of the blocks nested in it.

    The walk is iterative and bounded: a ``tool_result`` may hold blocks, including tool
    results, at most :data:`MAX_BLOCK_DEPTH` tool results deep, and each block's own JSON (its
    nested blocks aside) at most :data:`MAX_JSON_DEPTH` levels deep, so that nothing that
    walks, prices, stores or renders a message can reach Python's recursion limit.

    Raises:
        InvalidMessage: the block is not a dict with a string ``type``, a known type lacks a
            required field, it nests too deeply, or it holds a number JSON cannot carry
            (``inf``, ``-inf``, ``nan``: what ``1e999``, ``Infinity`` and ``NaN`` parse to); the
            message names the block (``content[2].content[0]``), the field or depth, and what
            was found.
    """
    pending: list[tuple[Any, str, int]] = [(block, where, 1)]
    while pending:
        current, place, level = pending.pop()
        inner = _check_one_block(current, place)
        if inner is None:
            continue
        if level > MAX_BLOCK_DEPTH:
            raise InvalidMessage(
                f"{where}: tool_result blocks nest more than {MAX_BLOCK_DEPTH} deep (a tool result "
                f"holding a tool result ...); at most {MAX_BLOCK_DEPTH} are allowed: flatten the "
                "inner results or keep them as text"
            )
        children = [(child, f"{place}.content[{index}]", level + 1) for index, child in enumerate(inner)]
        pending.extend(reversed(children))  # popped in order


def _check_one_block(block: Any, where: str) -> list[Any] | None:
    """Check one block but not the blocks it holds.

    Returns:
        For a ``tool_result``, the blocks it holds (``[]`` for string content); ``None`` for
        any other block.
    """
    if not isinstance(block, dict):
        raise InvalidMessage(f"{where}: a content block must be an object; found {type(block).__name__}")
    kind = block.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidMessage(f"{where}: a content block needs a string 'type'; found {kind!r}")
    inner: list[Any] | None = None
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise InvalidMessage(f"{where}: a text block needs a string 'text'")
    elif kind == "image":
        source = block.get("source")
        if not isinstance(source, dict) or source.get("type") not in IMAGE_SOURCE_TYPES:
            raise InvalidMessage(
                f"{where}: an image block needs a source of type 'base64', 'url' or 'reference'"
            )
        if source["type"] == "base64" and not (
            isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str)
        ):
            raise InvalidMessage(f"{where}: a base64 image source needs 'media_type' and 'data' strings")
        if source["type"] == "url" and not isinstance(source.get("url"), str):
            raise InvalidMessage(f"{where}: a url image source needs a string 'url'")
        if source["type"] == "reference" and not (
            isinstance(source.get("reference"), str)
            and source["reference"]
            and isinstance(source.get("media_type", ""), str)
        ):
            raise InvalidMessage(
                f"{where}: a reference image source needs a non-empty string 'reference' (and a string 'media_type' if any)"
            )
    elif kind == "tool_use":
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise InvalidMessage(f"{where}: a tool_use block needs string 'id' and 'name'")
    elif kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            raise InvalidMessage(f"{where}: a tool_result block needs a string 'tool_use_id'")
        content = block.get("content", "")
        if isinstance(content, list):
            inner = content
        elif isinstance(content, str):
            inner = []  # a tool result all the same, for the depth it nests at
        else:
            raise InvalidMessage(f"{where}: tool_result content must be a string or a list of blocks")
    for value in block.values():
        if value is inner:
            continue  # the blocks a tool result holds are checked as blocks
        # the depth first: it refuses a value that holds itself, which no walk may follow
        if isinstance(value, _CONTAINERS) and json_depth(value, MAX_JSON_DEPTH - 1) > MAX_JSON_DEPTH - 1:
            raise InvalidMessage(  # the block is a level
                f"{where}: the {kind} block's JSON nests more than {MAX_JSON_DEPTH} levels deep "
                f"(objects and arrays, the block included); at most {MAX_JSON_DEPTH} are allowed"
            )
        number = _non_finite_number(value)
        if number is not None:
            raise InvalidMessage(
                f"{where}: the {kind} block holds the number {number!r}, which JSON cannot carry "
                "(1e999 overflows to it, and NaN and Infinity are no JSON): a provider refuses the "
                "request; write the value as a string"
            )
    return inner


def _non_finite_number(value: Any) -> float | None:
    """Return the first infinite or NaN float inside a JSON value (a block's field), else ``None``.

    Python's :mod:`json` reads ``1e999`` as ``inf`` and the non-JSON literals ``NaN`` and
    ``Infinity``; written back they give a body no JSON parser (nor any provider) accepts.
    The walk is iterative; the blocks a tool result holds are checked as blocks of their own.
    """
    pending = [value]
    seen: set[int] = set()  # a container met again (one value shared by several keys) is walked once
    while pending:
        current = pending.pop()
        if isinstance(current, float):
            if not math.isfinite(current):
                return current
        elif isinstance(current, (dict, list, tuple)):
            if id(current) in seen:
                continue
            seen.add(id(current))
            pending.extend(current.values() if isinstance(current, dict) else current)
    return None


def iter_strings(value: Any) -> Iterator[str]:
    """Yield every string inside a JSON value (a tool input, a request body), depth first, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from iter_strings(item)


def iter_blocks_deep(blocks: Sequence[Block]) -> Iterator[Block]:
    """Yield every block, descending into ``tool_result`` content lists (depth first, in order)."""
    pending: list[Iterator[Block]] = [iter(blocks)]
    while pending:
        block = next(pending[-1], None)
        if block is None:
            pending.pop()
            continue
        yield block
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            pending.append(iter(block["content"]))


def tool_use_ids(message: Message) -> list[str]:
    """Return the ids of the ``tool_use`` blocks of ``message``, in order."""
    return [b["id"] for b in message.content if b.get("type") == "tool_use"]


def tool_result_ids(message: Message) -> list[str]:
    """Return the ``tool_use_id`` of each ``tool_result`` block of ``message``, in order."""
    return [b["tool_use_id"] for b in message.content if b.get("type") == "tool_result"]
