"""What the store records of a message's images: :class:`ImageFact` and the walk that finds them.

This is the one place the store walks a message's blocks for images (top-level image blocks,
images nested in tool results, and base64 ``data:`` URIs inside text, tool-result text and
tool-use input).  The facts are computed once at append and kept with the message, so compile
and chunking never decode an image again.  Replacing this walk (for a shared image walk)
changes only this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..blocks import DATA_URI_RE, Block, canonical_json
from ..errors import ImageError
from ..imageinfo import ImageInfo

__all__ = ["ImageFact", "image_fact_from_json"]


@dataclass(frozen=True)
class ImageFact:
    """What the store knows of one image in a message (top-level, nested or a data URI).

    Attributes:
        sha256: hex digest of the decoded bytes (``None`` for a URL image).
        media_type: e.g. ``"image/png"``, ``None`` when unknown.
        width, height: pixel size read from the header, ``None`` when unknown.
        byte_size: decoded size in bytes, ``None`` for a URL image.
        source: ``"base64"``, ``"url"`` or ``"data-uri"``.
        url: the URL of a URL image.
    """

    sha256: str | None
    media_type: str | None
    width: int | None
    height: int | None
    byte_size: int | None
    source: str
    url: str | None = None

    @property
    def short_hash(self) -> str:
        return self.sha256[:12] if self.sha256 else "unknown"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_info(cls, info: ImageInfo) -> ImageFact:
        return cls(
            info.sha256, info.media_type, info.width, info.height, info.byte_size, info.source, info.url
        )


#: ``ImageFact.to_json`` leaves out ``None`` fields (a URL image has no hash, size or bytes);
#: reading a row back restores them.
_IMAGE_FACT_DEFAULTS: dict[str, Any] = {
    "sha256": None,
    "media_type": None,
    "width": None,
    "height": None,
    "byte_size": None,
    "url": None,
}


def image_fact_from_json(stored: Mapping[str, Any]) -> ImageFact:
    """Return the :class:`ImageFact` that :meth:`ImageFact.to_json` wrote as ``stored``."""
    return ImageFact(**{**_IMAGE_FACT_DEFAULTS, **stored})


def _image_facts(blocks: Sequence[Block]) -> list[ImageFact]:
    """Return the image facts of ``blocks`` in document order (nested and data URIs included)."""
    from ..imageinfo import info_from_block, info_from_data_uri

    facts: list[ImageFact] = []

    def scan_text(text: str) -> None:
        if ";base64," in text:
            for match in DATA_URI_RE.finditer(text):
                try:
                    facts.append(ImageFact.from_info(info_from_data_uri(match.group(0))))
                except ImageError:  # cut short (truncated output): kept as text, shown as a placeholder
                    facts.append(
                        ImageFact(None, f"image/{match.group(1).lower()}", None, None, None, "data-uri")
                    )

    def walk(items: Sequence[Block]) -> None:
        for block in items:
            kind = block.get("type")
            if kind == "image":
                facts.append(ImageFact.from_info(info_from_block(block)))
            elif kind == "text":
                scan_text(block["text"])
            elif kind == "tool_result":
                content = block.get("content", "")
                if isinstance(content, str):
                    scan_text(content)
                else:
                    walk(content)
            elif kind == "tool_use":
                scan_text(canonical_json(block.get("input", {})))

    walk(blocks)
    return facts
