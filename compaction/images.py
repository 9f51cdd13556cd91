"""One image walk, one decider, one price: what the planner prices is what the gate ships.

Images hide in many places of a message: top-level ``image`` blocks, image blocks nested
in a ``tool_result``, URL images, and ``data:image/...;base64,`` URIs inside text, string
tool results and tool-call arguments.  This module is the only code that finds them
(:func:`find_image_sites`, in document order), the only code that decides each one
(:class:`ImageDecider`, newest first under :class:`~compaction.policy.ImageSettings`), the
only code that prices a decision (:func:`site_tokens`) and the only code that rewrites
blocks after the decisions (:func:`apply_decisions`).  The store records the sites of each
message at append, the compile planner decides and prices them from those records, and the
wire gate walks, decides and prices the messages it ships with the same functions, so the
planner's price of a request equals the gate's count.

Depth.  The depth of an image is the tokens of the non-system messages newer than its
message in the request, as priced: their text and their images as decided (a screenshot
shown counts its price, one replaced its placeholder).  Decisions go newest first, so a
depth only ever depends on decisions already made, and the planner and the gate, walking
the same messages in the same order through :func:`decide_and_price`, reach the same ones.

Captions.  A replaced image whose caption the settings' lookup holds
(:attr:`~compaction.policy.ImageSettings.captions`, recipe ``caption_images``) carries it on
its :class:`~compaction.policy.Decision`, and :func:`placeholder_for` shows it, cleaned by
:func:`~compaction.caption_text.clean_caption`; the price and the rewrite both read the
decision, so a caption never makes the plan and the gate differ.

Costs.  A message costs its text tokens plus, per site, the image's price when shown or
its placeholder's tokens when not.  The text count already carries the framing an image
may need (the note before a tool result's images, the joins around a data URI), so the sum
is an upper bound of the rendered body's tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from .blocks import DATA_URI_RE, Block, canonical_json
from .caption_text import caption_label, clean_caption
from .errors import ImageError
from .imageinfo import ImageInfo, canonical_base64, info_from_block, info_from_data_uri
from .policy import Decision, ImageBudget, ImageSettings
from .tokens.counting import count_text

if TYPE_CHECKING:
    from .store.model import Caption

__all__ = [
    "ImageLocation",
    "ImageSite",
    "ImageDecider",
    "find_image_sites",
    "image_locations",
    "site_tokens",
    "decide_and_price",
    "placeholder_for",
    "caption_note",
    "apply_decisions",
    "DAMAGED_DATA_URI",
    "DAMAGED_IMAGE",
    "IN_TOOL_ARGUMENTS",
    "NOT_IN_TRANSCRIPT",
]

#: Where an image sits in a message: a top-level image block, an image block inside a
#: ``tool_result``, a data URI in text (a text block or a string tool result), or a data URI
#: in a tool call's arguments.
ImageLocation = Literal["block", "tool_result", "text", "tool_arguments"]

#: Why a ``data:`` image URI that holds no readable image (cut short in a truncated output,
#: damaged, or of a type without a pixel size) is never shipped as an image.
DAMAGED_DATA_URI = "the data: URI does not hold a readable image (cut, damaged or of an unsupported type)"
#: Why an image block whose bytes hold no readable image (no pixel size) is never shipped.
DAMAGED_IMAGE = "the image data is damaged or of an unknown format"
#: Why an image inside tool-call arguments is never shipped as an image.
IN_TOOL_ARGUMENTS = "inside tool call arguments, which cannot carry images"
#: Why an image reference (``blob:sha256:...``, an ``attachment://`` the log lacks, a file
#: path) is never shipped as an image, whatever the policy.
NOT_IN_TRANSCRIPT = "its bytes are not in the transcript, only a reference to them, so it cannot be shown"
#: The longest reference a placeholder quotes whole (characters); longer ones are cut.
_REFERENCE_SHOWN = 200


@dataclass(frozen=True)
class ImageSite(ImageInfo):
    """One image found in a message: what it is (:class:`ImageInfo`) and where it sits.

    Attributes:
        location: see :data:`ImageLocation`.
    """

    location: ImageLocation = "block"

    @classmethod
    def at(cls, info: ImageInfo, location: ImageLocation) -> ImageSite:
        """Return the site of ``info`` at ``location``."""
        return cls(**{**asdict(info), "location": location})

    @property
    def forced_reason(self) -> str | None:
        """Return why this image can never ship as an image whatever the policy, or ``None``."""
        if self.source == "reference":
            return NOT_IN_TRANSCRIPT
        if self.source == "data-uri" and not self.has_size:
            return DAMAGED_DATA_URI
        if self.location == "tool_arguments":
            return IN_TOOL_ARGUMENTS
        if self.source != "url" and not self.has_size:
            return DAMAGED_IMAGE  # a provider rejects the whole request for an image it cannot decode
        return None

    def to_json(self) -> dict[str, Any]:
        """Return the site as a JSON object (``None`` fields left out), as the store keeps it."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageSite:
        """Return the site a :meth:`to_json` object describes (missing fields are ``None``)."""
        return cls(
            media_type=data.get("media_type"),
            width=data.get("width"),
            height=data.get("height"),
            byte_size=data.get("byte_size"),
            sha256=data.get("sha256"),
            source=data["source"],
            url=data.get("url"),
            reference=data.get("reference"),
            location=data.get("location", "block"),
        )


def _data_uri_site(match: re.Match[str], location: ImageLocation) -> ImageSite:
    try:
        info = info_from_data_uri(match.group(0))
    except ImageError:  # cut short (a truncated output): kept as text, never shipped as an image
        info = ImageInfo(f"image/{match.group(1).lower()}", None, None, None, None, "data-uri")
    return ImageSite.at(info, location)


def _text_uris(text: str, location: ImageLocation) -> Iterator[tuple[ImageLocation, re.Match[str]]]:
    if ";base64," in text:
        for match in DATA_URI_RE.finditer(text):
            yield location, match


def _walk(
    blocks: Sequence[Block], nested: bool = False
) -> Iterator[tuple[ImageLocation, Block | re.Match[str]]]:
    """Yield each image of ``blocks`` in document order: its location and its block or data URI."""
    for block in blocks:
        kind = block.get("type")
        if kind == "image":
            yield ("tool_result" if nested else "block"), block
        elif kind == "text":
            yield from _text_uris(block["text"], "text")
        elif kind == "tool_result" and not nested:
            content = block.get("content", "")
            if isinstance(content, str):
                yield from _text_uris(content, "text")
            else:
                yield from _walk(content, nested=True)
        elif kind == "tool_use" and not nested:
            yield from _text_uris(canonical_json(block.get("input", {})), "tool_arguments")


def find_image_sites(blocks: Sequence[Block]) -> list[ImageSite]:
    """Return every image of a message's blocks, in document order.

    Args:
        blocks: content blocks (the Anthropic Messages form).

    Returns:
        One :class:`ImageSite` per image: image blocks (top level or nested in a
        ``tool_result``), and ``data:image/...;base64,`` URIs in text blocks, string tool
        results and tool-call arguments.  :func:`apply_decisions` visits them in this order.

    Raises:
        ImageError: an image block's base64 is invalid.
    """
    return [
        _data_uri_site(found, location)
        if isinstance(found, re.Match)
        else ImageSite.at(info_from_block(found), location)
        for location, found in _walk(blocks)
    ]


def image_locations(blocks: Sequence[Block]) -> list[ImageLocation]:
    """Return where each image of ``blocks`` sits, in :func:`find_image_sites` order.

    Reads no image data, so it works on blocks whose images are references (a store's rows).
    """
    return [location for location, _found in _walk(blocks)]


class ImageDecider:
    """Decide images newest first: forced replacements, then the policy and caps.

    Call :meth:`decide` for each image in reverse document order across the request.

    Args:
        settings: the policy and caps of this kind of request.
    """

    def __init__(self, settings: ImageSettings) -> None:
        self.settings = settings
        self._budget = ImageBudget(settings)

    def decide(self, site: ImageSite, depth_tokens: int, role: str = "user") -> Decision:
        """Return whether ``site`` ships, and why not when it does not.

        Args:
            site: the next (older) image.
            depth_tokens: tokens of the messages newer than the image's message, as priced.
            role: the role of the image's message; only user turns carry images (both
                OpenAI Chat and Anthropic Messages refuse an image in an assistant turn).
        """
        if site.source == "reference":  # never shown, under any policy: say why it cannot be
            return Decision(False, NOT_IN_TRANSCRIPT)
        if self.settings.policy != "placeholders":
            forced = site.forced_reason
            limit = self.settings.max_side_pixels
            if forced is None and limit is not None and max(site.width or 0, site.height or 0) > limit:
                forced = (
                    f"larger than the request format takes ({site.width}x{site.height} px; "
                    f"at most {limit} px a side)"
                )
            if forced is None and role != "user":
                forced = (
                    f"in an {role} turn, which cannot carry images"
                    if role == "assistant"
                    else (f"in a {role} message, which cannot carry images")
                )
            if forced is not None:
                return self._captioned(site, Decision(False, forced))
        return self._captioned(site, self._budget.decide(site.byte_size, depth_tokens))

    def _captioned(self, site: ImageSite, decision: Decision) -> Decision:
        """Return ``decision`` with the image's caption on it when it is replaced and has one."""
        lookup = self.settings.captions
        if decision.keep or lookup is None or not site.sha256:
            return decision
        caption = lookup.get(site.sha256)
        if caption is None or not caption.made:
            return decision
        return Decision(False, decision.reason, caption)


def caption_note(caption: Caption) -> str:
    """Return the sentence a placeholder shows for ``caption`` ("" when nothing is left to show)."""
    text = clean_caption(caption.text or "")
    if not text:
        return ""
    return (
        f" Caption by {caption_label(caption.provenance)}, made while the image was shown"
        f" (a description, not the image): \u201c{text}\u201d"
    )


def placeholder_for(image: ImageInfo, reason: str, caption: Caption | None = None) -> str:
    """Return the loud text that stands for an image that is not shown (never empty).

    It names the media type, pixel size, bytes, a short content hash (or the URL, or the
    reference of an image the transcript does not hold, cut to 200 characters) and
    ``reason``, then the image's caption when one is given (cleaned and bounded:
    :func:`~compaction.caption_text.clean_caption`), and says the image (for a reference:
    the reference) is kept in the store.
    """
    size = f"{image.width}x{image.height} px" if image.width and image.height else "size unknown"
    media_type = image.media_type
    if image.source == "reference":
        reference = image.reference or ""
        if len(reference) > _REFERENCE_SHOWN:
            reference = reference[: _REFERENCE_SHOWN - 3] + "..."
        what = f"image given by reference {reference!r} ({media_type or 'media type unknown'}, {size})"
        return f"[image not shown: {what}; reason: {reason}. The reference is kept in the store.]"
    if image.source == "url":
        what = f"image from URL {image.url} ({media_type or 'media type unknown'}, {size})"
    else:
        nbytes = f"{image.byte_size:,} bytes" if image.byte_size is not None else "bytes unknown"
        what = f"{media_type or 'image of unknown type'}, {size}, {nbytes}, sha256 {image.short_hash}"
    note = caption_note(caption) if caption is not None and caption.made else ""
    return f"[image not shown: {what}; reason: {reason}.{note} The image is kept in the store.]"


def site_tokens(site: ImageSite, decision: Decision, *, model: str, encoding: str, format: Any) -> int:
    """Return what one decided image adds to its message's text tokens (tokens).

    Args:
        site: the image.
        decision: the decider's verdict.
        model: the model whose formula prices a shown image.
        encoding: the encoding a placeholder is counted in.
        format: the :class:`~compaction.outputs.RequestFormat` (its image pricing).
    """
    if decision.keep:
        return int(format.image_tokens(site.width, site.height, model))
    return count_text(placeholder_for(site, decision.reason, decision.caption), encoding)


def decide_and_price(
    sites: Sequence[ImageSite],
    decider: ImageDecider,
    depth_tokens: int,
    *,
    role: str,
    model: str,
    encoding: str,
    format: Any,
) -> tuple[list[Decision], int]:
    """Decide one message's images (newest first) and price them.

    Args:
        sites: the message's images in document order.
        decider: the request's decider (it carries the caps' running totals).
        depth_tokens: tokens of the messages newer than this one, as priced.
        role: the message's role (see :meth:`ImageDecider.decide`).
        model, encoding, format: as in :func:`site_tokens`.

    Returns:
        The decisions in document order, and the tokens the images add to the message's
        text tokens (tokens).
    """
    decisions: list[Decision] = []
    tokens = 0
    for site in reversed(sites):
        decision = decider.decide(site, depth_tokens, role)
        decisions.append(decision)
        tokens += site_tokens(site, decision, model=model, encoding=encoding, format=format)
    decisions.reverse()
    return decisions, tokens


def _with_sniffed_media_type(block: Block, site: ImageSite) -> Block:
    """Return a kept image block as the providers take it: inline bytes under the media type
    they have.

    A transcript may declare ``image/jpeg`` for PNG bytes; the providers check the bytes
    against the declared type and refuse the whole request (Anthropic: "Image does not match
    the provided media type").  The bytes' own type (:func:`~compaction.imageinfo.sniff_media_type`,
    from their magic number) ships instead.  A ``url`` source holding a ``data:`` URI ships
    as the base64 source it is (Anthropic fetches a URL source and takes no ``data:`` URI).
    The store keeps the block as it came.
    """
    source = block.get("source")
    if not isinstance(source, dict) or site.media_type is None:
        return block
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        match = DATA_URI_RE.fullmatch(source["url"])
        if match is None:
            return block
        inline = {"type": "base64", "media_type": site.media_type, "data": canonical_base64(match.group(2))}
        return {**block, "source": inline}
    if source.get("type") != "base64" or source.get("media_type") == site.media_type:
        return block
    return {**block, "source": {**source, "media_type": site.media_type}}


class _Rebuild:
    """Rewrite blocks in :func:`find_image_sites` order, one decision per site."""

    def __init__(self, sites: Sequence[ImageSite], decisions: Sequence[Decision]) -> None:
        self.pairs = list(zip(sites, decisions, strict=True))
        self.position = 0

    def next(self) -> tuple[ImageSite, Decision]:
        pair = self.pairs[self.position]
        self.position += 1
        return pair

    def text_pieces(self, text: str) -> list[Block]:
        """Split a text at its data URIs: kept ones become image blocks, others placeholders."""
        if ";base64," not in text:
            return [{"type": "text", "text": text}]
        pieces: list[Block] = []
        buffer: list[str] = []
        last = 0
        for match in DATA_URI_RE.finditer(text):
            site, decision = self.next()
            buffer.append(text[last : match.start()])
            last = match.end()
            if decision.keep:
                if "".join(buffer):
                    pieces.append({"type": "text", "text": "".join(buffer)})
                buffer = []
                source = {
                    "type": "base64",
                    "media_type": site.media_type or f"image/{match.group(1).lower()}",
                    "data": canonical_base64(match.group(2)),
                }
                pieces.append({"type": "image", "source": source})
            else:
                buffer.append(placeholder_for(site, decision.reason, decision.caption))
        buffer.append(text[last:])
        if "".join(buffer) or not pieces:
            pieces.append({"type": "text", "text": "".join(buffer)})
        return pieces

    def inline_placeholder(self, _match: Any) -> str:
        site, decision = self.next()
        return placeholder_for(site, decision.reason, decision.caption)

    def image_block(self, block: Block) -> Block:
        site, decision = self.next()
        if not decision.keep:
            return {"type": "text", "text": placeholder_for(site, decision.reason, decision.caption)}
        return _with_sniffed_media_type(block, site)

    def blocks(self, blocks: Sequence[Block]) -> list[Block]:
        out: list[Block] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "image":
                out.append(self.image_block(block))
            elif kind == "text":
                out.extend(self.text_pieces(block["text"]))
            elif kind == "tool_result":
                out.append({**block, "content": self.tool_result_content(block.get("content", ""))})
            elif kind == "tool_use":
                raw = canonical_json(block.get("input", {}))
                if ";base64," in raw:
                    out.append({**block, "input": json.loads(DATA_URI_RE.sub(self.inline_placeholder, raw))})
                else:
                    out.append(block)
            else:
                out.append(block)
        return out

    def tool_result_content(self, content: Any) -> Any:
        if isinstance(content, str):
            pieces = self.text_pieces(content)
            return pieces[0]["text"] if len(pieces) == 1 and pieces[0]["type"] == "text" else pieces
        out: list[Block] = []
        for inner in content:
            kind = inner.get("type")
            if kind == "image":
                out.append(self.image_block(inner))
            elif kind == "text":
                out.extend(self.text_pieces(inner["text"]))
            else:
                out.append(inner)
        return out


def apply_decisions(
    blocks: Sequence[Block], sites: Sequence[ImageSite], decisions: Sequence[Decision]
) -> list[Block]:
    """Return ``blocks`` with each image shipped or replaced by its placeholder.

    A kept data URI is lifted out of its text into a real image block (priced and shipped as
    an image, never as base64 text); a data URI in tool-call arguments is always replaced
    inline.  ``sites`` and ``decisions`` are in :func:`find_image_sites` order.

    Raises:
        ValueError: ``decisions`` does not match ``sites`` one for one.
    """
    return _Rebuild(sites, decisions).blocks(blocks)
