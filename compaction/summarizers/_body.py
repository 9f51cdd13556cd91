"""Read a response body within a size bound and a deadline, inflating it in bounded steps.

The bound is on the body as decoded (bytes).  A declared ``Content-Length`` over the bound
is refused before reading; otherwise the body is read as it arrives -- sized, until the
connection closes, or chunked alike -- and refused as soon as it passes the bound.

Compression.  The client asks for ``gzip, deflate`` (:data:`ACCEPT_ENCODING`) and inflates
the raw bytes itself, never more than the bound plus one byte per step: a small gzip bomb
(64 MB of spaces in 64 KB) is refused after the bound, without 64 MB in memory.  ``gzip``
(several members too), ``x-gzip`` and ``deflate`` (zlib-wrapped, or raw as some servers send
it) are read; any other ``Content-Encoding``, or more than one, is an error, as is a corrupt
compressed body.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable

import httpx

from ..errors import SummarizerError
from ._deadline import PastDeadline

__all__ = ["ACCEPT_ENCODING", "read_body"]

#: The ``Accept-Encoding`` every request sends: only what :func:`read_body` inflates.
ACCEPT_ENCODING = "gzip, deflate"
_CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}


class _Inflater:
    """Inflate a gzip or deflate body in steps that never produce more than asked."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._raw_fallback = coding == "deflate"  # zlib-wrapped first, raw deflate if that fails
        self._inflate = zlib.decompressobj(31 if coding == "gzip" else 15)

    def feed(self, data: bytes, room: int) -> bytes:
        """Return the bytes ``data`` inflates to, at most ``room + 1`` of them (more: over the bound)."""
        out = b""
        while data and len(out) <= room:
            try:
                piece = self._inflate.decompress(data, room + 1 - len(out))
            except zlib.error:
                if not self._raw_fallback:
                    raise
                self._raw_fallback = False
                self._inflate = zlib.decompressobj(-15)
                continue
            self._raw_fallback = False
            out += piece
            if self._inflate.unconsumed_tail:
                data = self._inflate.unconsumed_tail
            elif self._inflate.eof and self._inflate.unused_data and self.coding == "gzip":
                data = self._inflate.unused_data  # the next gzip member
                self._inflate = zlib.decompressobj(31)
            else:
                data = b""
        return out


def read_body(
    response: httpx.Response,
    *,
    limit: int,
    deadline: float,
    base_url: str,
    show: Callable[[str, int], str],
) -> bytes:
    """Return the decoded body of ``response``, at most ``limit`` bytes, read before ``deadline``.

    Args:
        response: a streamed response, not read yet.
        limit: the largest body accepted (bytes, decoded).
        deadline: when reading must be done (``time.monotonic()``).
        base_url: the server, for messages.
        show: makes a server's text safe to show (scrubbed, shortened to a length).

    Raises:
        SummarizerError: the body is over ``limit``, compressed in a way this client does not
            read, or corrupt.
        PastDeadline: the deadline passed while reading.
    """
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise SummarizerError(
            f"{base_url}: the response declares {int(declared)} bytes, over the bound of "
            f"{limit} bytes (max_response_bytes); a summary is a few KB"
        )
    if response.is_stream_consumed:  # built in memory (httpx.MockTransport): already decoded
        chunks: Iterable[bytes] = [response.content]
        coding = ""
    else:
        chunks = response.iter_raw()
        coding = response.headers.get("content-encoding", "").strip().lower()
    inflater = None
    if coding not in ("", "identity"):
        if coding not in _CODINGS:
            raise SummarizerError(
                f"{base_url}: the response's Content-Encoding {show(coding, 60)!r} is not one this "
                f"client reads ({ACCEPT_ENCODING}, one coding); the server ignored Accept-Encoding"
            )
        inflater = _Inflater(_CODINGS[coding])
    parts: list[bytes] = []
    size = 0
    for raw in chunks:
        try:
            part = inflater.feed(raw, limit - size) if inflater is not None else raw
        except zlib.error as err:
            raise SummarizerError(
                f"{base_url}: the response's {coding} body is corrupt ({show(str(err), 120)})"
            ) from None
        size += len(part)
        if size > limit:
            raise SummarizerError(
                f"{base_url}: the response exceeds the bound of {limit} bytes (max_response_bytes); "
                f"a summary is a few KB"
            )
        parts.append(part)
        if time.monotonic() > deadline:
            raise PastDeadline
    return b"".join(parts)
