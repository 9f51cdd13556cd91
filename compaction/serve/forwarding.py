"""Talking to the upstream: which headers pass, how long it may take, how much it may send.

The proxy forwards the client's own credentials (``Authorization``, ``x-api-key``,
``api-key``) and API headers (``anthropic-version``, ``anthropic-beta``, ``openai-*``)
and nothing else of the client's request headers; it sends ``Accept-Encoding: identity`` so
the bytes it relays are the bytes the upstream sent.  Back to the client go the upstream's
status, ``Content-Type``, request id, ``Retry-After`` and rate-limit headers.

Bounds (:class:`Limits`): connecting, the whole of a non-streamed answer and the headers of a
streamed one each have a deadline; a stream may pause at most ``stream_idle_seconds`` between
chunks and last at most ``stream_max_seconds``; no answer may exceed ``max_response_bytes``.
The HTTP client ignores proxy settings in the environment (``trust_env=False``): the only
network the proxy uses is the configured upstream.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx

from ..credentials import CREDENTIAL_TOKENS, QUERY_CREDENTIAL_NAMES
from ..errors import InvalidArgument
from ._errors import UpstreamError, UpstreamTimeout

__all__ = [
    "Limits",
    "Upstream",
    "check_upstream_url",
    "credentials",
    "query_credentials",
    "redact_query_credentials",
    "shown_url",
    "request_headers",
    "response_headers",
]

_PASSED_REQUEST = frozenset(
    {"authorization", "x-api-key", "api-key", "anthropic-version", "anthropic-beta", "user-agent"}
)
_PASSED_RESPONSE = frozenset({"content-type", "request-id", "x-request-id", "retry-after", "openai-processing-ms"})
_PASSED_RESPONSE_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "openai-")


@dataclass(frozen=True)
class Limits:
    """Bounds on the client's request and the upstream's answer.

    Attributes:
        timeout_seconds: a non-streamed answer, whole, and a stream's status and headers.
        connect_seconds: opening the connection.
        stream_idle_seconds: the longest pause between two chunks of a stream.
        stream_max_seconds: the longest a stream may last.
        max_response_bytes: the largest answer (bytes, streamed or not).
        max_request_bytes: the largest client request body (bytes).
    """

    timeout_seconds: float = 600.0
    connect_seconds: float = 10.0
    stream_idle_seconds: float = 300.0
    stream_max_seconds: float = 3600.0
    max_response_bytes: int = 32 * 1024 * 1024
    max_request_bytes: int = 64 * 1024 * 1024


def check_upstream_url(url: str) -> str:
    """Return the upstream base URL without a trailing slash.

    Raises:
        InvalidArgument: not an ``http`` or ``https`` URL with a host (one line, says which).

    Example:
        >>> check_upstream_url("http://localhost:11434/v1/")
        'http://localhost:11434/v1'
    """
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        shown = shown_url(url) if isinstance(url, str) else url
    except ValueError:  # a port that is not a number, a bracket left open
        parts, shown = None, "an unreadable URL"
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(
            f"--upstream must be an http(s) base URL such as https://api.openai.com/v1; found {shown!r}"
        )
    if parts.query or parts.fragment:
        raise InvalidArgument(f"--upstream must be a base URL without a query or fragment; found {shown!r}")
    return url.rstrip("/")


def shown_url(url: str) -> str:
    """Return ``url`` as it may be logged or shown: a password in it replaced by ``***``.

    A gateway may take basic credentials in the upstream URL (``https://user:KEY@host/v1``);
    the key never reaches a log line or an error message.

    Example:
        >>> shown_url("https://me:sk-abc123@gw.example/v1")
        'https://me:***@gw.example/v1'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()


_CREDENTIAL_SHAPE = re.compile(CREDENTIAL_TOKENS)


def query_credentials(query: str) -> list[str]:
    """Return the credentials in a request's query string (``key=``, ``api-key=``, ``access_token=``...).

    A parameter counts when its name, lower-cased with ``-`` read as ``_``, is one of
    :data:`compaction.credentials.QUERY_CREDENTIAL_NAMES`, or when its value holds a
    credential-shaped token (:data:`compaction.credentials.CREDENTIAL_TOKENS`).  Each value is
    given both percent-decoded and as sent, so either spelling is scrubbed.

    Example:
        >>> query_credentials("alt=sse&key=AIzaSECRET0123456789")
        ['AIzaSECRET0123456789']
    """
    found: list[str] = []
    for piece in query.split("&"):
        raw_name, _, raw_value = piece.partition("=")
        pairs = parse_qsl(piece, keep_blank_values=True)
        name, value = pairs[0] if pairs else (raw_name, raw_value)
        if not value.strip():
            continue
        if name.strip().lower().replace("-", "_") in QUERY_CREDENTIAL_NAMES or _CREDENTIAL_SHAPE.search(value):
            found.extend(v for v in dict.fromkeys((value.strip(), raw_value.strip())) if v)
    return found


# a credential parameter in a URL's query: ``?key=VALUE`` / ``&api-key=VALUE`` (group 1 kept)
_QUERY_PARAMETER = re.compile(
    r"([?&](?:" + "|".join(sorted((re.escape(n).replace("_", "[-_]") for n in QUERY_CREDENTIAL_NAMES),
                                  key=len, reverse=True)) + r")=)[^&#\s\"'<>]+",
    re.IGNORECASE,
)


def redact_query_credentials(text: str) -> str:
    """Return ``text`` with every query-string credential in it replaced by ``[redacted]``.

    The value of each credential parameter (``?key=``, ``&api-key=``...) of any URL in the
    text, and any credential-shaped token, are replaced; the rest is kept.

    Example:
        >>> redact_query_credentials("POST https://g.example/v1/x?alt=sse&key=abc123 200")
        'POST https://g.example/v1/x?alt=sse&key=[redacted] 200'
    """
    return _CREDENTIAL_SHAPE.sub("[redacted]", _QUERY_PARAMETER.sub(r"\1[redacted]", text))


class _RedactQueryCredentials(logging.Filter):
    """Redact query-string credentials from httpx's request log lines (it logs each URL at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = redact_query_credentials(message)
        if shown != message:
            record.msg, record.args = shown, None
        return True


def _guard_http_log() -> None:
    """Put :class:`_RedactQueryCredentials` on the ``httpx`` logger once."""
    log = logging.getLogger("httpx")
    if not any(isinstance(f, _RedactQueryCredentials) for f in log.filters):
        log.addFilter(_RedactQueryCredentials())


def credentials(headers: Mapping[str, str], query: str = "") -> list[str]:
    """Return the credentials a request carries: the bearer token, ``x-api-key``, ``api-key``,
    and any in the query string (:func:`query_credentials`)."""
    found = []
    auth = headers.get("authorization", "")
    if auth:
        scheme, _, token = auth.partition(" ")
        found.append(token.strip() if scheme.lower() == "bearer" and token.strip() else auth.strip())
    for name in ("x-api-key", "api-key"):
        if headers.get(name, "").strip():
            found.append(headers[name].strip())
    return found + [key for key in query_credentials(query) if key not in found]


def request_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Return the client's headers that go upstream (credentials and API headers only)."""
    passed = {
        name: value
        for name, value in headers.items()
        if name.lower() in _PASSED_REQUEST or name.lower().startswith("openai-")
    }
    passed["content-type"] = "application/json"
    passed["accept-encoding"] = "identity"
    return passed


def response_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Return the upstream's headers that go back to the client."""
    return {
        name: value
        for name, value in headers.items()
        if name.lower() in _PASSED_RESPONSE or name.lower().startswith(_PASSED_RESPONSE_PREFIXES)
    }


def _describe(err: httpx.HTTPError) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


class Upstream:
    """The upstream API: one pooled HTTP client, bounded calls.

    Args:
        base_url: the base URL the SDKs take, ending in ``/v1`` (checked by
            :func:`check_upstream_url`).
        limits: time and size bounds.
        transport: an httpx transport (tests); default: the network.
    """

    def __init__(self, base_url: str, limits: Limits | None = None, *, transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = check_upstream_url(base_url)
        self.limits = limits or Limits()
        lim = self.limits
        _guard_http_log()  # httpx logs each request's URL, a client's ?key= included
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                connect=lim.connect_seconds, read=lim.stream_idle_seconds, write=lim.timeout_seconds,
                pool=lim.timeout_seconds,
            ),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=32),
            follow_redirects=False,
            trust_env=False,
            transport=transport,
        )

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()

    async def open(self, path: str, query: str, body: bytes, headers: Mapping[str, str]) -> httpx.Response:
        """Send ``body`` to ``{base_url}{path}`` and return once the status and headers arrived.

        The caller reads the body (:meth:`read` or :meth:`relay`) and closes the response.

        Raises:
            UpstreamTimeout: no status and headers within ``timeout_seconds``.
            UpstreamError: the upstream could not be reached (connection refused, TLS, DNS...),
                or it answered a redirect (3xx with a ``Location``), which is not followed.
        """
        url = self.base_url + path + (f"?{query}" if query else "")
        request = self._client.build_request("POST", url, content=body, headers=request_headers(headers))
        try:
            with anyio.fail_after(self.limits.timeout_seconds):
                response = await self._client.send(request, stream=True)
        except TimeoutError as err:
            raise UpstreamTimeout(
                f"the upstream sent no answer within {self.limits.timeout_seconds:g} s"
            ) from err
        except httpx.TimeoutException as err:
            raise UpstreamTimeout(f"the upstream timed out ({_describe(err)})") from err
        except httpx.HTTPError as err:
            raise UpstreamError(f"cannot reach the upstream: {_describe(err)}") from err
        if response.is_redirect:  # never followed: the client's credentials would go with it
            await response.aclose()
            target = urlsplit(response.headers.get("location", "")).hostname
            where = f"to host {target}" if target else "elsewhere"
            raise UpstreamError(
                f"the upstream answered {response.status_code} redirecting {where}; redirects are not "
                "followed (the client's credentials would go with them): give --upstream the URL that answers",
                code="upstream_redirect",
            )
        return response

    async def read(self, response: httpx.Response, started: float) -> bytes:
        """Read a whole answer within the size cap and what is left of ``timeout_seconds``.

        Args:
            response: from :meth:`open` (closed here).
            started: ``time.monotonic()`` when the request was sent.

        Raises:
            UpstreamTimeout: the answer did not finish in time.
            UpstreamError: the answer exceeded ``max_response_bytes``, or the connection broke.
        """
        cap = self.limits.max_response_bytes
        left = max(0.0, self.limits.timeout_seconds - (time.monotonic() - started))
        data = bytearray()
        try:
            with anyio.fail_after(left):
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > cap:
                        raise UpstreamError(
                            f"the upstream's answer exceeds {cap:,} bytes; refused", code="upstream_too_large"
                        )
        except TimeoutError as err:
            raise UpstreamTimeout(
                f"the upstream's answer did not finish within {self.limits.timeout_seconds:g} s"
            ) from err
        except httpx.TimeoutException as err:
            raise UpstreamTimeout(f"the upstream stalled mid-answer ({_describe(err)})") from err
        except httpx.HTTPError as err:
            raise UpstreamError(f"the upstream's answer broke off: {_describe(err)}") from err
        finally:
            await response.aclose()
        return bytes(data)

    async def relay(self, response: httpx.Response, started: float) -> AsyncIterator[bytes]:
        """Yield a streamed answer's chunks as they arrive, unchanged, within the bounds.

        Raises:
            UpstreamTimeout: a pause longer than ``stream_idle_seconds``, or the stream outlasted
                ``stream_max_seconds``.
            UpstreamError: the stream exceeded ``max_response_bytes``, or the connection broke.
        """
        cap, total = self.limits.max_response_bytes, 0
        try:
            async for chunk in response.aiter_bytes():
                total += len(chunk)
                if total > cap:
                    raise UpstreamError(f"the upstream's stream exceeds {cap:,} bytes; cut", code="upstream_too_large")
                if time.monotonic() - started > self.limits.stream_max_seconds:
                    raise UpstreamTimeout(f"the upstream's stream outlasted {self.limits.stream_max_seconds:g} s; cut")
                yield chunk
        except httpx.TimeoutException as err:
            raise UpstreamTimeout(
                f"the upstream's stream paused longer than {self.limits.stream_idle_seconds:g} s ({_describe(err)})"
            ) from err
        except httpx.HTTPError as err:
            raise UpstreamError(f"the upstream's stream broke off: {_describe(err)}") from err
        finally:
            await response.aclose()
