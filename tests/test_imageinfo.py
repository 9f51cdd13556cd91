"""Header parsing of PNG, JPEG, GIF, WebP and BMP images, built by hand (no imaging library)."""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction import imageinfo
from compaction.errors import CompactionError, ImageError
from compaction.imageinfo import (
    ImageInfo,
    image_size,
    info_from_base64,
    info_from_block,
    info_from_data_uri,
    sniff_media_type,
)

ROOT = Path(__file__).resolve().parent.parent
AGENT_TARS = ROOT / "examples" / "agent-tars__browser__event-stream-with-many-images.json"

sizes = st.integers(min_value=1, max_value=16383)


# --- hand-built headers ------------------------------------------------------------------


def png(width: int, height: int, *, cgbi: bool = False) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
    prefix = chunk(b"CgBI", b"\x50\x00\x20\x06") if cgbi else b""
    return b"\x89PNG\r\n\x1a\n" + prefix + ihdr + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def jpeg(width: int, height: int, *, sof: int = 0xC0, exif: bool = True, fill: int = 0) -> bytes:
    """A JPEG whose frame header follows JFIF, EXIF (with a decoy SOF inside), DQT and DHT."""
    out = b"\xff\xd8"
    out += segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    if exif:
        decoy = b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x10\x00\x10"  # an embedded thumbnail's SOF0
        tiff = b"MM\x00\x2a\x00\x00\x00\x08" + b"\x00" * 20 + decoy + b"\x00" * 10
        out += segment(0xE1, b"Exif\x00\x00" + tiff)
    out += segment(0xDB, b"\x00" + bytes(range(64)))  # DQT
    out += segment(0xC4, b"\x00" + bytes(16) + b"")  # DHT before the frame: C4 is not a SOF
    out += segment(0xCC, b"\x00\x01")  # DAC: also in C0..CF, also not a SOF
    out += b"\xff" * fill  # fill bytes before the marker
    out += segment(sof, struct.pack(">BHHB", 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01")
    out += segment(0xDA, b"\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00") + b"\x12\x34\xff\x00\x56" + b"\xff\xd9"
    return out


def gif(width: int, height: int, version: bytes = b"89a") -> bytes:
    return b"GIF" + version + struct.pack("<HHBBB", width, height, 0xF7, 0, 0) + bytes(8) + b";"


def riff(chunk: bytes, body: bytes) -> bytes:
    payload = b"WEBP" + chunk + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


def webp_vp8(width: int, height: int) -> bytes:
    # frame tag (3 bytes), start code, 14-bit sizes whose top 2 bits are the scale
    body = b"\x50\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width | 0x4000, height | 0x8000)
    return riff(b"VP8 ", body + bytes(10))


def webp_vp8l(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14) | (1 << 28)  # alpha_is_used, version 0
    return riff(b"VP8L", b"\x2f" + struct.pack("<I", bits) + bytes(8))


def webp_vp8x(width: int, height: int) -> bytes:
    body = b"\x10\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return riff(b"VP8X", body)


def bmp(width: int, height: int) -> bytes:
    header = struct.pack("<IiiHHII", 40, width, -height, 1, 24, 0, 0) + bytes(16)
    return b"BM" + struct.pack("<IHHI", 14 + len(header), 0, 0, 54) + header


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- each format -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (png(640, 480), ("image/png", 640, 480)),
        (png(3, 70000), ("image/png", 3, 70000)),
        (png(17, 9, cgbi=True), ("image/png", 17, 9)),
        (jpeg(2560, 1600), ("image/jpeg", 2560, 1600)),
        (jpeg(800, 600, sof=0xC2), ("image/jpeg", 800, 600)),  # progressive
        (jpeg(801, 601, sof=0xC1, exif=False), ("image/jpeg", 801, 601)),  # extended sequential
        (jpeg(33, 44, sof=0xCF, fill=5), ("image/jpeg", 33, 44)),  # SOF15 after fill bytes
        (gif(320, 200), ("image/gif", 320, 200)),
        (gif(1, 65535, b"87a"), ("image/gif", 1, 65535)),
        (webp_vp8(1024, 768), ("image/webp", 1024, 768)),
        (webp_vp8l(300, 16384), ("image/webp", 300, 16384)),
        (webp_vp8x(5000, 3), ("image/webp", 5000, 3)),
        (bmp(123, 45), ("image/bmp", 123, 45)),
    ],
    ids=[
        "png",
        "png-tall",
        "png-cgbi",
        "jpeg-baseline-exif",
        "jpeg-progressive-exif",
        "jpeg-sof1",
        "jpeg-sof15-fill",
        "gif89a",
        "gif87a",
        "webp-vp8",
        "webp-vp8l",
        "webp-vp8x",
        "bmp-top-down",
    ],
)
def test_image_size_reads_each_format(data: bytes, expected: tuple[str, int, int]) -> None:
    assert image_size(data) == expected


def test_jpeg_dht_and_dac_markers_are_not_frames() -> None:
    # a file whose only C0..CF markers are DHT/DAC has no frame header before its scan
    data = b"\xff\xd8" + segment(0xC4, bytes(17)) + segment(0xCC, b"\x00\x01") + segment(0xDA, bytes(6))
    with pytest.raises(ImageError, match=r"SOS\) starts before any start-of-frame"):
        image_size(data)


def test_jpeg_skips_standalone_markers_and_exif_decoy() -> None:
    data = jpeg(640, 360)
    # the EXIF segment holds a decoy 16x16 SOF0; the real frame says 640x360
    assert b"\xff\xc0\x00\x11\x08\x00\x10\x00\x10" in data
    assert image_size(data)[1:] == (640, 360)
    with_rst = data[:2] + b"\xff\xd0" + data[2:]
    assert image_size(with_rst)[1:] == (640, 360)


@given(sizes, sizes)
def test_sizes_round_trip_through_every_header(width: int, height: int) -> None:
    assert image_size(png(width, height)) == ("image/png", width, height)
    assert image_size(jpeg(width, height)) == ("image/jpeg", width, height)
    assert image_size(jpeg(width, height, sof=0xC2)) == ("image/jpeg", width, height)
    assert image_size(gif(width, height)) == ("image/gif", width, height)
    assert image_size(webp_vp8(width, height)) == ("image/webp", width, height)
    assert image_size(webp_vp8l(width, height)) == ("image/webp", width, height)
    assert image_size(webp_vp8x(width, height)) == ("image/webp", width, height)


# --- truncated and garbage data ----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (png(10, 10)[:20], "truncated PNG header: 20 bytes"),
        (jpeg(10, 10)[:30], "truncated JPEG"),
        (gif(10, 10)[:8], "truncated GIF header: 8 bytes"),
        (webp_vp8(10, 10)[:25], "truncated WebP VP8 header"),
        (webp_vp8l(10, 10)[:22], "truncated WebP VP8L header"),
        (riff(b"ABCD", bytes(20)), "unknown first chunk b'ABCD'"),
        (b"\xff\xd8\xff\xd9", "EOI) before any start-of-frame"),
        (b"hello world, not an image", "not a PNG, JPEG, GIF, WebP or BMP image: the first bytes are 68 65"),
        (b"", "first bytes are empty"),
        (gif(0, 10), "size of 0x10 pixels"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "SVG images have no pixel size"),
    ],
)
def test_image_size_names_what_is_wrong(data: bytes, fragment: str) -> None:
    with pytest.raises(ImageError) as caught:
        image_size(data)
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CompactionError)


@pytest.mark.parametrize("cut", [8, 12, 20, 23])
def test_truncated_png_keeps_type_bytes_and_hash(cut: int) -> None:
    data = png(640, 480)[:cut]
    info = info_from_base64(b64(data), "image/png")
    assert info == ImageInfo(
        media_type="image/png",
        width=None,
        height=None,
        byte_size=cut,
        sha256=hashlib.sha256(data).hexdigest(),
        source="base64",
    )
    assert info.short_hash == hashlib.sha256(data).hexdigest()[:12]
    assert not info.has_size


def test_garbage_bytes_fall_back_to_the_declared_type() -> None:
    info = info_from_base64(b64(b"\x00\x01garbage" * 10), "image/png")
    assert (info.media_type, info.width, info.height, info.byte_size) == ("image/png", None, None, 90)
    assert info_from_base64(b64(b"\x00\x01garbage")).media_type is None


def test_sniffed_type_wins_over_a_wrong_declared_type() -> None:
    info = info_from_base64(b64(jpeg(20, 10)), "image/png")
    assert (info.media_type, info.width, info.height) == ("image/jpeg", 20, 10)


@given(st.binary(max_size=300))
def test_weird_bytes_never_crash(data: bytes) -> None:
    try:
        media_type, width, height = image_size(data)
    except ImageError:
        pass
    else:
        assert media_type.startswith("image/") and width > 0 and height > 0
    info = info_from_base64(b64(data))
    assert info.byte_size == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()


@given(st.sampled_from([png(9, 9), jpeg(9, 9), gif(9, 9), webp_vp8(9, 9), webp_vp8x(9, 9)]), st.data())
def test_any_prefix_of_a_real_header_never_crashes(data: bytes, draw: st.DataObject) -> None:
    cut = draw.draw(st.integers(min_value=0, max_value=len(data)))
    info = info_from_base64(b64(data[:cut]))
    assert info.byte_size == cut
    assert info.width in (None, 9)


# --- base64 ------------------------------------------------------------------------------


def test_base64_tolerates_whitespace_missing_padding_and_urlsafe() -> None:
    data = png(7, 5) + b"\xfb\xff"
    text = b64(data)
    assert text.endswith("=")
    wrapped = "\n".join(text[i : i + 20] for i in range(0, len(text), 20))
    for variant in (
        text,
        text.rstrip("="),
        wrapped,
        " " + wrapped + "\n",
        base64.urlsafe_b64encode(data).decode(),
    ):
        info = info_from_base64(variant)
        assert (info.width, info.height, info.byte_size) == (7, 5, len(data))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("iVBOR*w0KGgo", "unexpected character '*'"),
        ("abcde", "5 characters without padding cannot be base64"),
        ("data:image/png;base64,iVBORw0KGgo=", "unexpected character ':'"),
        ("ünïcode", "unexpected character 'ü'"),
    ],
)
def test_bad_base64_raises_image_error(text: str, fragment: str) -> None:
    with pytest.raises(ImageError, match="invalid base64 image data") as caught:
        info_from_base64(text)
    assert fragment in str(caught.value)


def test_non_string_base64_is_an_image_error() -> None:
    with pytest.raises(ImageError, match="must be a string; found bytes"):
        info_from_base64(b"abcd")  # type: ignore[arg-type]


def test_each_base64_string_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = imageinfo.decode_base64

    def counting(text: str) -> bytes:
        calls.append(len(text))
        return real(text)

    monkeypatch.setattr(imageinfo, "decode_base64", counting)
    text = b64(png(1234, 567) + bytes(300_000))
    first = info_from_base64(text, "image/png")
    for _ in range(50):
        assert info_from_base64(text, "image/png") == first
    assert info_from_base64("".join(list(text))).width == 1234  # an equal, distinct string
    assert len(calls) == 1


# --- blocks and data URIs -----------------------------------------------------------------


def test_info_from_anthropic_base64_block() -> None:
    block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/webp", "data": b64(webp_vp8x(40, 30))},
    }
    info = info_from_block(block)
    assert (info.media_type, info.width, info.height, info.source, info.url) == (
        "image/webp",
        40,
        30,
        "base64",
        None,
    )


def test_info_from_url_block_knows_only_the_url() -> None:
    url = "https://example.com/shots/page.JPG?x=1"
    info = info_from_block({"type": "image", "source": {"type": "url", "url": url}})
    assert info == ImageInfo("image/jpeg", None, None, None, None, "url", url)
    assert info.short_hash == "unknown"
    assert (
        info_from_block({"type": "image", "source": {"type": "url", "url": "https://x/y"}}).media_type is None
    )


def test_url_block_holding_a_data_uri_is_read() -> None:
    uri = "data:image/gif;base64," + b64(gif(12, 34))
    info = info_from_block({"type": "image", "source": {"type": "url", "url": uri}})
    assert (info.source, info.width, info.height, info.byte_size) == ("data-uri", 12, 34, len(gif(12, 34)))
    openai_style = info_from_block({"type": "image_url", "image_url": {"url": uri, "detail": "low"}})
    assert openai_style == info


@pytest.mark.parametrize(
    ("block", "fragment"),
    [
        ({"type": "text", "text": "hi"}, "expected an image block (type 'image'); found type 'text'"),
        ({"type": "image"}, "needs a 'source' object"),
        ({"type": "image", "source": {"type": "file", "file_id": "f"}}, "found 'file'"),
        ({"type": "image", "source": {"type": "base64", "media_type": "image/png"}}, "needs a string 'data'"),
        ({"type": "image", "source": {"type": "url"}}, "needs a string 'url'"),
        ({"type": "image", "source": {"type": "base64", "data": "%%%%"}}, "invalid base64"),
        ("image", "must be an object; found str"),
    ],
)
def test_malformed_blocks_raise_image_error(block: object, fragment: str) -> None:
    with pytest.raises(ImageError) as caught:
        info_from_block(block)  # type: ignore[arg-type]
    assert fragment in str(caught.value)


def test_data_uri_variants() -> None:
    info = info_from_data_uri("data:image/png;charset=utf-8;base64," + b64(png(2, 3)))
    assert (info.media_type, info.width, info.height, info.source) == ("image/png", 2, 3, "data-uri")
    svg = info_from_data_uri(
        "data:image/svg+xml,%3Csvg%20xmlns%3D%22http%3A%2F%2Fwww.w3.org%2F2000%2Fsvg%22%2F%3E"
    )
    assert (svg.media_type, svg.width, svg.byte_size) == (
        "image/svg+xml",
        None,
        len(b'<svg xmlns="http://www.w3.org/2000/svg"/>'),
    )
    with pytest.raises(ImageError, match="not a data: URI"):
        info_from_data_uri("https://example.com/a.png")
    with pytest.raises(ImageError, match="invalid base64"):
        info_from_data_uri("data:image/png;base64,@@@@")


def test_sniff_media_type() -> None:
    assert sniff_media_type(png(1, 1)) == "image/png"
    assert sniff_media_type(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert sniff_media_type(b"RIFF\0\0\0\0WAVE") is None
    assert sniff_media_type(b"  <?xml version='1.0'?><svg/>") == "image/svg+xml"


# --- real screenshots ----------------------------------------------------------------------


def test_agent_tars_screenshots_are_2560x1600_jpegs() -> None:
    text = AGENT_TARS.read_text(encoding="utf-8")
    uris = re.findall(r"data:image/[a-z]+;base64,[A-Za-z0-9+/]+=*", text)
    assert len(uris) == 7
    hashes = set()
    for uri in uris:
        info = info_from_data_uri(uri)
        assert (info.media_type, info.width, info.height) == ("image/jpeg", 2560, 1600)
        assert image_size(base64.b64decode(uri.split(",", 1)[1])) == ("image/jpeg", 2560, 1600)
        assert info.byte_size is not None and info.byte_size > 50_000
        hashes.add(info.sha256)
    assert len(hashes) == 7


# --- image references ------------------------------------------------------------------------


def test_a_reference_source_is_described_without_reading_anything() -> None:
    block = {
        "type": "image",
        "source": {"type": "reference", "reference": "blob:sha256:ab12", "media_type": "image/png"},
    }
    info = info_from_block(block)
    assert (info.source, info.reference, info.media_type) == ("reference", "blob:sha256:ab12", "image/png")
    assert (info.width, info.height, info.byte_size, info.sha256, info.url) == (None, None, None, None, None)
    assert not info.has_size and info.short_hash == "unknown"
    bare = info_from_block({"type": "image", "source": {"type": "reference", "reference": "/tmp/a.png"}})
    assert bare.media_type is None and bare.reference == "/tmp/a.png"


@pytest.mark.parametrize("reference", ["", None, 7])
def test_a_reference_source_without_a_reference_is_an_image_error(reference: object) -> None:
    with pytest.raises(ImageError, match="a reference image source needs a non-empty string 'reference'"):
        info_from_block({"type": "image", "source": {"type": "reference", "reference": reference}})


def test_an_unknown_source_type_names_the_three_known_ones() -> None:
    with pytest.raises(ImageError, match="must be of type 'base64', 'url' or 'reference'; found 'file'"):
        info_from_block({"type": "image", "source": {"type": "file", "file_id": "file-1"}})
