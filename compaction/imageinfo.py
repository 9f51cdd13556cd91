"""Read an image's media type and pixel size from its header bytes, without decoding it.

Images are priced by their pixel size (see :mod:`compaction.tokens.image_pricing`) and
described by placeholders (media type, pixel size, bytes, a short content hash), so the
engine needs those facts for every image it sees, cheaply and without an imaging library.
Each supported format stores its size near the start of the file:

* **PNG**: the ``IHDR`` chunk, which must come first (after an Apple ``CgBI`` chunk in
  iOS-optimised files): big-endian ``uint32`` width and height.
* **JPEG**: a chain of marker segments (``FF xx`` + big-endian length) before the frame
  header.  The size is in the first *start of frame* segment, ``SOF0`` .. ``SOF15``
  (``C0`` .. ``CF``) except ``C4`` (DHT), ``C8`` (JPG) and ``CC`` (DAC), which share the
  range but are not frames.  APPn segments (JFIF, EXIF, ICC, XMP) and tables come
  before it and are skipped by their length; a marker may be preceded by any number of
  ``FF`` fill bytes (ITU T.81, B.1.1.2).
* **GIF**: the logical screen descriptor, little-endian ``uint16`` width and height.
* **WebP**: a RIFF container whose first chunk is ``VP8`` (lossy: 14-bit sizes after the
  key-frame start code), ``VP8L`` (lossless: 14-bit ``size - 1`` fields after the ``0x2F``
  signature) or ``VP8X`` (extended: 24-bit ``canvas size - 1``).
* **BMP**: the ``BITMAPINFOHEADER`` (little-endian ``int32``; a negative height means
  top-down rows).

Base64 payloads are decoded once per process: results are kept in a small LRU cache keyed
by the sha256 of the base64 string, so a 300 KB screenshot seen on every compile costs a
hash, not a decode.

Example:
    >>> from compaction.imageinfo import image_size
    >>> png = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + (640).to_bytes(4, "big") + (
    ...     480).to_bytes(4, "big")
    >>> image_size(png)
    ('image/png', 640, 480)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
import threading
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .errors import ImageError

__all__ = [
    "ImageInfo",
    "image_size",
    "sniff_media_type",
    "info_from_base64",
    "info_from_block",
    "info_from_data_uri",
    "decode_base64",
]

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: JPEG markers in C0..CF that are not start-of-frame headers: DHT, JPG (reserved), DAC.
_JPEG_NOT_SOF = frozenset({0xC4, 0xC8, 0xCC})
#: JPEG markers that stand alone (no length field): TEM, RST0..RST7, SOI.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8), 0xD8})

_URL_EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".svg": "image/svg+xml",
}

_BASE64_JUNK = re.compile(r"\s+")
_CACHE_SIZE = 1024


@dataclass(frozen=True)
class ImageInfo:
    """What is known about one image without decoding its pixels.

    Attributes:
        media_type: the type sniffed from the magic bytes (``"image/png"``); the declared
            type when the bytes match no known format; for URL images, a guess from the
            path's extension; ``None`` when nothing is known.
        width: pixels, ``None`` when the header is unknown, truncated or absent (URLs).
        height: pixels, ``None`` likewise.
        byte_size: bytes of the decoded image; ``None`` for URL images.
        sha256: hex digest of the decoded bytes; ``None`` for URL images.
        source: ``"base64"``, ``"url"``, ``"data-uri"`` or ``"reference"`` (an image the
            transcript names but does not hold: no bytes, no size).
        url: the URL of a ``"url"`` image, else ``None``.
        reference: how a ``"reference"`` image is named (``blob:sha256:...``, an
            ``attachment://`` id, a file path), else ``None``.
    """

    media_type: str | None
    width: int | None
    height: int | None
    byte_size: int | None
    sha256: str | None
    source: str
    url: str | None = None
    reference: str | None = None

    @property
    def short_hash(self) -> str:
        """Return the first 12 hex characters of :attr:`sha256`, or ``"unknown"``."""
        return self.sha256[:12] if self.sha256 else "unknown"

    @property
    def has_size(self) -> bool:
        """Return whether both pixel dimensions are known."""
        return self.width is not None and self.height is not None


def sniff_media_type(data: bytes) -> str | None:
    """Return the media type named by the magic bytes at the start of ``data``, or ``None``."""
    if data.startswith(_PNG_MAGIC):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:2] == b"BM" and len(data) >= 14:
        return "image/bmp"
    head = data[:1024].lstrip()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head):
        return "image/svg+xml"
    return None


def image_size(data: bytes) -> tuple[str, int, int]:
    """Read the media type and pixel size from an image's header.

    Args:
        data: the image bytes; only the header is read (a JPEG's frame header may come
            after EXIF or ICC segments, so pass the whole file when you have it).

    Returns:
        ``(media_type, width, height)``, the size in pixels.

    Raises:
        ImageError: the bytes are not PNG, JPEG, GIF, WebP or BMP, or the header is
            truncated or inconsistent; the message names the format and what is wrong.

    Example:
        >>> image_size(b"GIF89a" + bytes([64, 0, 32, 0]) + bytes(3))
        ('image/gif', 64, 32)
    """
    media_type = sniff_media_type(data)
    if media_type == "image/png":
        width, height = _png_size(data)
    elif media_type == "image/jpeg":
        width, height = _jpeg_size(data)
    elif media_type == "image/gif":
        width, height = _gif_size(data)
    elif media_type == "image/webp":
        width, height = _webp_size(data)
    elif media_type == "image/bmp":
        width, height = _bmp_size(data)
    elif media_type == "image/svg+xml":
        raise ImageError("SVG images have no pixel size in their header; rasterize them first")
    else:
        raise ImageError(
            f"not a PNG, JPEG, GIF, WebP or BMP image: the first bytes are {data[:8].hex(' ') or 'empty'}"
        )
    if width <= 0 or height <= 0:
        raise ImageError(f"{media_type} header gives a size of {width}x{height} pixels; expected both > 0")
    return media_type, width, height


def _need(data: bytes, size: int, what: str) -> None:
    if len(data) < size:
        raise ImageError(f"truncated {what}: {len(data)} bytes, the header needs {size}")


def _png_size(data: bytes) -> tuple[int, int]:
    offset = 8
    for _ in range(2):  # IHDR first, or second after Apple's CgBI chunk
        _need(data, offset + 16, "PNG header")
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        if kind == b"IHDR":
            width, height = struct.unpack(">II", data[offset + 8 : offset + 16])
            return width, height
        if kind != b"CgBI":
            break
        offset += 12 + length
    raise ImageError("PNG without an IHDR chunk at its start: the file is damaged")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    index = 2  # after SOI (FF D8)
    end = len(data)
    while index < end:
        if data[index] != 0xFF:
            raise ImageError(f"JPEG marker expected at byte {index}, found 0x{data[index]:02X}")
        while index < end and data[index] == 0xFF:  # fill bytes
            index += 1
        if index >= end:
            break
        marker = data[index]
        index += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker == 0xD9:
            raise ImageError("JPEG ends (EOI) before any start-of-frame segment")
        if marker == 0xDA:
            raise ImageError("JPEG scan data (SOS) starts before any start-of-frame segment")
        _need(data, index + 2, "JPEG segment length")
        (length,) = struct.unpack(">H", data[index : index + 2])
        if length < 2:
            raise ImageError(f"JPEG segment 0x{marker:02X} at byte {index - 1} has length {length}")
        if 0xC0 <= marker <= 0xCF and marker not in _JPEG_NOT_SOF:
            _need(data, index + 7, "JPEG start-of-frame segment")
            height, width = struct.unpack(">HH", data[index + 3 : index + 7])
            if height == 0:
                raise ImageError("JPEG frame height is 0 (defined later by a DNL marker); size unknown")
            return width, height
        index += length
    raise ImageError(f"truncated JPEG: {len(data)} bytes and no start-of-frame segment yet")


def _gif_size(data: bytes) -> tuple[int, int]:
    _need(data, 10, "GIF header")
    width, height = struct.unpack("<HH", data[6:10])
    return width, height


def _webp_size(data: bytes) -> tuple[int, int]:
    _need(data, 16, "WebP header")
    chunk = data[12:16]
    if chunk == b"VP8 ":
        _need(data, 30, "WebP VP8 header")
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageError("WebP VP8 chunk lacks the key-frame start code 9D 01 2A")
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        _need(data, 25, "WebP VP8L header")
        if data[20] != 0x2F:
            raise ImageError(f"WebP VP8L chunk lacks the 0x2F signature (found 0x{data[20]:02X})")
        (bits,) = struct.unpack("<I", data[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        _need(data, 30, "WebP VP8X header")
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    raise ImageError(f"WebP with an unknown first chunk {chunk!r}; expected VP8, VP8L or VP8X")


def _bmp_size(data: bytes) -> tuple[int, int]:
    _need(data, 26, "BMP header")
    (header_size,) = struct.unpack("<I", data[14:18])
    if header_size == 12:  # OS/2 BITMAPCOREHEADER: uint16 sizes
        width, height = struct.unpack("<HH", data[18:22])
        return width, height
    width, height = struct.unpack("<ii", data[18:26])
    return abs(width), abs(height)


def canonical_base64(data_b64: str) -> str:
    """Return ``data_b64`` as standard, padded base64 with no whitespace (what providers accept).

    Returns the input unchanged when it is already canonical (the common case: no copy).

    Raises:
        ImageError: the text is not base64.
    """
    if (
        len(data_b64) % 4 == 0
        and not _BASE64_JUNK.search(data_b64)
        and "-" not in data_b64
        and "_" not in data_b64
    ):
        return data_b64
    return base64.b64encode(decode_base64(data_b64)).decode("ascii")


def decode_base64(data_b64: str) -> bytes:
    """Decode a base64 string, tolerating whitespace, missing padding and the URL-safe alphabet.

    Raises:
        ImageError: the text is not base64 (names the first bad character or the length).
    """
    text = _BASE64_JUNK.sub("", data_b64)
    if "-" in text or "_" in text:
        text = text.replace("-", "+").replace("_", "/")
    text = text.rstrip("=")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as err:
        bad = next((c for c in text if not (c.isascii() and (c.isalnum() or c in "+/"))), None)
        if bad is not None:
            detail = f"unexpected character {bad!r}"
            if text[:5].lower() == "data:":
                detail += " (this is a data: URI; read it with info_from_data_uri)"
        elif len(text) % 4 == 1:
            detail = (
                f"{len(text)} characters without padding cannot be base64 "
                "(one character too many or too few: the data is cut or damaged)"
            )
        else:
            detail = str(err)
        raise ImageError(f"invalid base64 image data: {detail}") from err


@dataclass(frozen=True)
class _Facts:
    media_type: str | None
    width: int | None
    height: int | None
    byte_size: int
    sha256: str


_cache: OrderedDict[bytes, _Facts] = OrderedDict()
_cache_lock = threading.Lock()


def _facts_from_bytes(raw: bytes) -> _Facts:
    media_type = sniff_media_type(raw)
    width: int | None = None
    height: int | None = None
    if media_type is not None:
        try:
            _, width, height = image_size(raw)
        except ImageError:
            width = height = None
    return _Facts(media_type, width, height, len(raw), hashlib.sha256(raw).hexdigest())


def _facts_from_base64(data_b64: str) -> _Facts:
    key = hashlib.sha256(data_b64.encode("utf-8", "surrogatepass")).digest()
    with _cache_lock:
        facts = _cache.get(key)
        if facts is not None:
            _cache.move_to_end(key)
            return facts
    facts = _facts_from_bytes(decode_base64(data_b64))
    with _cache_lock:
        _cache[key] = facts
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return facts


def _info(facts: _Facts, declared: str | None, source: str) -> ImageInfo:
    return ImageInfo(
        media_type=facts.media_type or declared,
        width=facts.width,
        height=facts.height,
        byte_size=facts.byte_size,
        sha256=facts.sha256,
        source=source,
    )


def info_from_base64(data_b64: str, declared_media_type: str | None = None) -> ImageInfo:
    """Describe a base64-encoded image (an Anthropic ``base64`` image source).

    Args:
        data_b64: the base64 payload (whitespace and missing padding are tolerated).
        declared_media_type: the type the message claims; used only when the bytes match
            no known format (the sniffed type wins when they disagree).

    Returns:
        An :class:`ImageInfo` with ``source="base64"``; ``width``/``height`` are ``None``
        when the header is unknown or truncated.

    Raises:
        ImageError: ``data_b64`` is not valid base64.

    Example:
        >>> info_from_base64("R0lGODlhAQABAAAAACw=").width
        1
    """
    if not isinstance(data_b64, str):
        raise ImageError(f"base64 image data must be a string; found {type(data_b64).__name__}")
    return _info(_facts_from_base64(data_b64), declared_media_type, "base64")


_DATA_URI = re.compile(r"^data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*),(?P<data>.*)$", re.DOTALL)


def info_from_data_uri(uri: str) -> ImageInfo:
    """Describe the image in a ``data:`` URI (``data:image/png;base64,...``).

    Non-base64 URIs (percent-encoded, as SVGs often are) are decoded as such.

    Raises:
        ImageError: the text is not a ``data:`` URI, or its base64 payload is invalid.
    """
    match = _DATA_URI.match(uri.strip()) if isinstance(uri, str) else None
    if match is None:
        shown = uri[:40] if isinstance(uri, str) else type(uri).__name__
        raise ImageError(f"not a data: URI (expected 'data:<type>;base64,<data>'); found {shown!r}")
    declared = match["type"].strip().lower() or None
    params = [p.strip().lower() for p in match["params"].split(";") if p.strip()]
    if "base64" in params:
        facts = _facts_from_base64(match["data"])
    else:
        facts = _facts_from_bytes(urllib.parse.unquote_to_bytes(match["data"]))
    return _info(facts, declared, "data-uri")


def _guess_from_url(url: str) -> str | None:
    path = urllib.parse.urlsplit(url).path.lower()
    for extension, media_type in _URL_EXTENSIONS.items():
        if path.endswith(extension):
            return media_type
    return None


def info_from_block(block: dict[str, Any]) -> ImageInfo:
    """Describe the image of an image content block.

    Accepts the Anthropic shape (``{"type": "image", "source": {"type": "base64" | "url",
    ...}}``), an image reference (``"source": {"type": "reference", "reference": ...}``) and,
    for convenience, the OpenAI Chat shape (``{"type": "image_url",
    "image_url": {"url": ...}}``).  A ``url`` that is a ``data:`` URI is read as one.

    Returns:
        An :class:`ImageInfo`; for remote URLs only ``url`` and a media type guessed from
        the path's extension are known (no bytes are fetched); for a reference only the
        reference and its declared media type (nothing is read from it).

    Raises:
        ImageError: the block is not an image block, its source is malformed, or its
            base64 payload is invalid.
    """
    if not isinstance(block, dict):
        raise ImageError(f"an image block must be an object; found {type(block).__name__}")
    kind = block.get("type")
    if kind == "image_url":
        image_url = block.get("image_url")
        url = image_url.get("url") if isinstance(image_url, dict) else image_url
        if not isinstance(url, str):
            raise ImageError("an image_url block needs a string 'image_url.url'")
        return _info_from_url(url)
    if kind != "image":
        raise ImageError(f"expected an image block (type 'image'); found type {kind!r}")
    source = block.get("source")
    if not isinstance(source, dict):
        raise ImageError("an image block needs a 'source' object")
    source_type = source.get("type")
    if source_type == "base64":
        data = source.get("data")
        if not isinstance(data, str):
            raise ImageError("a base64 image source needs a string 'data'")
        declared = source.get("media_type")
        return info_from_base64(data, declared if isinstance(declared, str) else None)
    if source_type == "url":
        url = source.get("url")
        if not isinstance(url, str):
            raise ImageError("a url image source needs a string 'url'")
        return _info_from_url(url)
    if source_type == "reference":
        reference = source.get("reference")
        declared = source.get("media_type")
        if not isinstance(reference, str) or not reference:
            raise ImageError("a reference image source needs a non-empty string 'reference'")
        return ImageInfo(
            media_type=declared if isinstance(declared, str) else None,
            width=None,
            height=None,
            byte_size=None,
            sha256=None,
            source="reference",
            reference=reference,
        )
    raise ImageError(f"an image source must be of type 'base64', 'url' or 'reference'; found {source_type!r}")


def _info_from_url(url: str) -> ImageInfo:
    if url.lstrip()[:5].lower() == "data:":
        return info_from_data_uri(url)
    return ImageInfo(
        media_type=_guess_from_url(url),
        width=None,
        height=None,
        byte_size=None,
        sha256=None,
        source="url",
        url=url,
    )
