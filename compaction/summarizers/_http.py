"""The HTTP transport every summarizer provider shares: one request, bounded, retried, classified.

A provider (:mod:`.openai_chat`, :mod:`.anthropic`) subclasses :class:`HTTPSummarizer` and
supplies only what differs between APIs: the endpoint path, the key header, the check of a
gated request, the answer parsing and a few classification hooks.  Everything else is here,
once:

What is sent.  The request already passed the wire gate with this summarizer's format,
model and output cap (DESIGN.md, "The wire gate"), so :attr:`GatedRequest.payload
<compaction.wire.GatedRequest.payload>` is sent as it is, byte for byte: no field is set, no
JSON is re-serialized.  A request gated for another format, model or cap is refused before
anything is sent.  ``request_sha256`` in the provenance is the hash of those bytes.

The key.  ``api_key_env`` names the environment variable holding the API key; the key is
read from the environment when the summarizer is built and at each request, sent only in the
provider's key header, and never stored on the object, logged, put in an error message or in
the provenance.  A key that is not printable ASCII without spaces (a trailing CR or LF, a
control or non-ASCII character) is refused, naming the variable, never the key
(:mod:`._secrets`).  Everything that came from the server or the transport -- the summary
text, every provenance field, every error text -- is scrubbed of every run of 8 or more of the
key's characters, even split by whitespace or escaped (JSON, URL, HTML), before it is
shortened, stored or shown.

Never trust a server.  Each attempt has one deadline, ``timeout_seconds`` after it starts:
connecting, sending, the status line, the headers and the body must all be done by then, so
a server trickling its head or its body one byte a second is cut off like a silent one
(:mod:`._deadline`; the same ``timeout_seconds`` bounds each operation too).  The body is
bounded in size (over ``max_response_bytes``, decoded, it is refused with
:class:`SummarizerError` without reading the rest; a compressed body is inflated in bounded
steps: :mod:`._body`); the head by the HTTP parser (httpcore refuses one over about 100 KB).  Redirects
are never followed, even by a client that would.  The answer must be a JSON object (invalid
UTF-8, deep nesting, a list: :class:`SummarizerError`); a 200 that carries an error (an
``error`` field, or ``"type": "error"``) is an error, classified by its content like any
other.  Text in the answer is cleaned of lone surrogates; the provenance keeps only the
server's token counts (``usage``: numbers and short strings, bounded) and a shortened
``served_model``.

The summary's length.  A summary longer than :func:`summary_token_bound` of the request's
output cap -- ``1.5 x max_output_tokens + 50`` tokens, counted in ``encoding`` -- is refused
(:class:`SummarizerRefused`, code ``"summary_too_long"``) so the compactor splits the chunk
rather than store it.  A summary longer than 128 characters a token of the bound is refused
without counting (no token of o200k_base or cl100k_base is longer than 128 bytes).

The failure ladder (DESIGN.md, "When the summarizer fails"):

1. Transient -- an httpx timeout or network error, a response past its deadline, HTTP 408,
   429, 500, 502, 503, 504 or 529 (Anthropic's ``overloaded_error``), or a 200 carrying an
   overload, rate-limit or server error: retry up to
   ``max_retries`` times, waiting ``min(backoff_max, backoff_base * 2**attempt)`` seconds
   (no jitter, so runs are reproducible) or the server's ``retry-after-ms`` /
   ``Retry-After`` (seconds or an HTTP date) when it gives one.  A ``Retry-After`` longer
   than ``backoff_max``, or a failure the provider calls hopeless (an exhausted quota or
   spend limit), is not waited out.  When the retries run out:
   :class:`~compaction.errors.SummarizerUnavailable`.
2. Refused -- HTTP 413, or 400/413/422 whose error names the context length (too long,
   maximum context) or unsupported content (``image_input_not_supported``), or an answer
   the provider calls a refusal, truncated, unfinished or empty, or a summary over its bound:
   :class:`~compaction.errors.SummarizerRefused`, with the server's code and message
   (shortened to 300 characters), so the compactor splits the chunk.
3. Anything else -- 401, 403, 404, other 4xx, a redirect, a malformed or oversized
   response, a closed summarizer: :class:`~compaction.errors.SummarizerError` naming the
   status and the base URL.

An error text is never returned as a summary: a provider accepts only a finished answer, and
an empty one is refused.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import math
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import (
    EncodingDataMissing,
    RecipeError,
    SummarizerError,
    SummarizerRefused,
    SummarizerUnavailable,
)
from ..tokens.counting import count_text
from ..tokens.encodings import DEFAULT_ENCODING, check_encoding
from ..types import RequestFormatName, SummaryKind
from ..wire import GatedRequest
from ._body import ACCEPT_ENCODING, read_body
from ._deadline import PastDeadline, bound_client, deadline
from ._secrets import bad_key_message, clean_text, key_problem, scrub_key
from .base import SummaryResult

__all__ = [
    "HTTPSummarizer",
    "ServerError",
    "Transient",
    "TRANSIENT_STATUSES",
    "REFUSAL_RE",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "redact_url",
    "shorten",
    "summary_token_bound",
]

#: HTTP statuses retried with backoff (529: Anthropic's ``overloaded_error``).
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
#: HTTP statuses whose error body may say the request itself is refused (too long, unsupported).
REFUSABLE_STATUSES = frozenset({400, 413, 422})
#: Error texts that say the request is refused for its size or content, not for a bad parameter.
REFUSAL_RE = re.compile(
    r"context[ _-]?length|context[ _-]?window|maximum context|too long|too large|too many tokens|"
    r"exceeds? the (?:model'?s? )?(?:maximum|limit|context)|prompt is too long|request_too_large|"
    r"image_input_not_supported|unsupported[ _-]?content|unsupported (?:image|input|content)|"
    r"(?:does not|doesn't|cannot) (?:support|accept|process) (?:image|vision|multimodal)|"
    r"image inputs? (?:is|are) not supported|not a multimodal model|content_policy|content_filter",
    re.I,
)
#: Error codes of a 200 carrying an error that are worth retrying (an overload, a rate limit).
TRANSIENT_ERROR_CODES = frozenset({
    "overloaded_error", "rate_limit_error", "rate_limit_exceeded", "api_error", "server_error", "timeout",
})
#: The largest response body read (bytes, after decompression): a summary is a few KB.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: A summary may exceed its output cap by this factor plus :data:`SUMMARY_SLACK_TOKENS`.
SUMMARY_FACTOR = 1.5
SUMMARY_SLACK_TOKENS = 50
#: The longest token of o200k_base and cl100k_base (bytes): a text of n tokens has at most
#: 128 n characters.
_MAX_TOKEN_CHARS = 128
_REASON_LIMIT = 300
#: Bounds of what the provenance keeps of the server's ``usage`` and model name.
_USAGE_FIELDS = 32
_USAGE_TEXT = 64
_MODEL_NAME = 200
#: The most characters of a caption's answer kept (the captioner cuts it further).
_CAPTION_CHARS = 2000


def summary_token_bound(max_output_tokens: int | None) -> int | None:
    """Return the most tokens a summary may have: ``ceil(1.5 x max_output_tokens) + 50``.

    A model asked for at most ``max_output_tokens`` may run a little over in another
    tokenizer; half again plus 50 tokens allows for that, not for a runaway answer.
    ``None`` (no cap): no bound.

    Example:
        >>> summary_token_bound(300)
        500
    """
    if max_output_tokens is None:
        return None
    return math.ceil(SUMMARY_FACTOR * max_output_tokens) + SUMMARY_SLACK_TOKENS


def redact_url(url: str) -> str:
    """Return ``url`` without credentials, query or fragment (for provenance and errors).

    Example:
        >>> redact_url("https://user:pw@example.com:8443/v1?key=abc#x")
        'https://example.com:8443/v1'
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<invalid URL>"
    host = parsed.host
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{host}{port}{parsed.path}".rstrip("/")


def shorten(text: str, limit: int = _REASON_LIMIT) -> str:
    """Return ``text`` on one line, cut to ``limit`` characters with ``...``."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def retry_after_seconds(headers: Mapping[str, str], now: float) -> float | None:
    """Return the wait a response asks for (seconds), or ``None`` when it asks for none.

    ``retry-after-ms`` (OpenAI) wins over ``Retry-After``, which is seconds or an HTTP date
    (RFC 9110, section 10.2.3); a date in the past is 0.
    """
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
            if value >= 0:  # not negative, not NaN
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return None if math.isnan(seconds) else max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(raw)
        return max(0.0, when.timestamp() - now) if when is not None else None
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None


def error_fields(data: Any) -> tuple[str | None, str]:
    """Return (code, message) of a parsed error body, whatever shape the server uses.

    OpenAI: ``{"error": {"code", "type", "message"}}``; Anthropic: ``{"type": "error",
    "error": {"type", "message"}}``; Ollama: ``{"error": "..."}``.  The code is the error's
    ``code``, else its ``type``.
    """
    if not isinstance(data, dict):
        return None, _as_text(data)
    error = data.get("error", data)
    if isinstance(error, str):
        return None, error
    if not isinstance(error, dict):
        return None, _as_text(data)
    code = error.get("code") or error.get("type")
    message = error.get("message") or error.get("detail") or ""
    return (_as_text(code) if code is not None else None), _as_text(message)


def _as_text(value: Any) -> str:
    """Return a parsed JSON value as text; a value too deep to print is named, not printed."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError, TypeError):
        return f"<a JSON {type(value).__name__} too deep to show>"


def _parse_json(body: bytes, base_url: str) -> Any:
    """Return the parsed body, or raise :class:`SummarizerError` saying why it is not JSON."""
    try:
        return json.loads(body)
    except UnicodeDecodeError as err:
        raise SummarizerError(
            f"{base_url}: the response is not valid UTF-8 (byte {err.start} of {len(body)}), so not JSON"
        ) from None
    except RecursionError:
        raise SummarizerError(f"{base_url}: the response is JSON nested too deeply to read") from None
    except ValueError as err:
        raise SummarizerError(f"{base_url}: the response is not JSON ({shorten(str(err), 120)})") from None


@dataclass(frozen=True)
class ServerError:
    """A non-200 response, read and parsed once for the classification hooks.

    Attributes:
        status: the HTTP status.
        code: the error's code or type (``"context_length_exceeded"``, ``"overloaded_error"``).
        message: the error's message (raw: scrub it before showing it).
        data: the parsed JSON body, or ``None`` when it is not JSON.
        headers: the response headers.
    """

    status: int
    code: str | None
    message: str
    data: Any
    headers: httpx.Headers


@dataclass(frozen=True)
class Transient:
    """A failure worth retrying: why, and the wait the server asked for (seconds), if any."""

    cause: str
    retry_after: float | None = None
    hopeless: bool = False  # waiting cannot help (quota exhausted, Retry-After too long)


def _positive_int(label: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecipeError(f"{label}: expected an integer >= {minimum}, found {value!r}")


class HTTPSummarizer(ABC):
    """The shared transport of HTTP summarizers; a provider subclasses it (see the module docstring).

    A subclass sets :attr:`name`, :attr:`request_format` and :attr:`api_name`, and
    implements :meth:`_endpoint`, :meth:`_key_headers` and :meth:`_parse_answer`; it may
    override :meth:`_extra_headers`, :meth:`_hopeless`, :meth:`_refused`,
    :meth:`_not_found_hint` and :meth:`_missing_key_hint`.

    Args:
        base_url: the API root (``http://`` or ``https://``); a query string is kept,
            credentials in the URL are refused.
        model: the model written into each request; a request gated for another is refused.
        api_key_env: the NAME of the environment variable holding the API key; ``None``
            sends no key header.
        timeout_seconds: the bound of each attempt, whole (seconds): connecting, sending,
            the status line, headers and body; also of each operation.
        max_output_tokens: the summary's output cap (tokens) the requests must be gated
            with; ``None``: the recipe's ``summary_max_tokens``.
        max_retries: retries of transient failures (requests made: ``max_retries + 1``).
        backoff_base: the first wait (seconds); attempt ``n`` waits ``backoff_base * 2**n``.
        backoff_max: the longest wait (seconds), and the longest ``Retry-After`` honoured.
        max_response_bytes: the largest response body read (bytes, decoded).
        client: an httpx client to use (tests, connection pools); by default one is
            created and closed by :meth:`close`.  Its connections opened from now on are
            bounded by the attempt's deadline (:mod:`._deadline`).
        sleep: how to wait (seconds); tests inject a recorder.
        encoding: the encoding summaries are counted in against their bound (tokens);
            the recipe's ``encoding``: any name the counting layer takes
            (:func:`compaction.tokens.encodings.check_encoding`: a tiktoken encoding, or
            ``hf:/path/to/tokenizer.json`` of a local model).

    Raises:
        RecipeError: a bad ``base_url`` (not http(s), or carrying credentials), an empty
            model, a bad number or encoding, or ``api_key_env`` naming a variable that is
            not set or holds a character no API key has (the message names the variable,
            never the key).
    """

    name: str = "http"
    request_format: RequestFormatName = "openai"
    #: The API's name in messages (``"OpenAI Chat"``).
    api_name: str = "HTTP"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout_seconds: float = 60,
        max_output_tokens: int | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 30,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        encoding: str = DEFAULT_ENCODING,
    ) -> None:
        if not isinstance(base_url, str) or not re.match(r"^https?://[^\s/]+", base_url):
            raise RecipeError(f"base_url: expected an http:// or https:// URL, found {base_url!r}")
        try:
            url = httpx.URL(base_url)
        except httpx.InvalidURL as err:
            raise RecipeError(f"base_url: not a valid URL ({err})") from err
        if url.userinfo:
            raise RecipeError(
                "base_url: holds credentials (user:password@); remove them and put the key in the "
                "environment variable named by api_key_env"
            )
        if not isinstance(model, str) or not model.strip():
            raise RecipeError(f"model: expected a non-empty model name, found {model!r}")
        _positive_int("max_retries", max_retries, 0)
        _positive_int("max_response_bytes", max_response_bytes, 1)
        if max_output_tokens is not None:
            _positive_int("max_output_tokens", max_output_tokens, 1)
        for label, value in (("timeout_seconds", timeout_seconds), ("backoff_max", backoff_max)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise RecipeError(f"{label}: expected a number > 0 (seconds), found {value!r}")
        if isinstance(backoff_base, bool) or not isinstance(backoff_base, (int, float)) or backoff_base < 0:
            raise RecipeError(f"backoff_base: expected a number >= 0 (seconds), found {backoff_base!r}")
        try:
            check_encoding(encoding)  # the counting layer's own check: a tiktoken name or hf:PATH
        except EncodingDataMissing as err:
            raise RecipeError(f"encoding: {err}") from err
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise RecipeError(
                    f"api_key_env: environment variable {api_key_env} is not set; export it or leave "
                    f"api_key_env out for a server that needs no key"
                )
            problem = key_problem(key)
            if problem:
                raise RecipeError(f"api_key_env: {bad_key_message(api_key_env, problem)}")
        self.endpoint = self._endpoint(url)
        self.base_url = redact_url(base_url)
        self.model: str = model
        self.api_key_env = api_key_env
        self.timeout_seconds = float(timeout_seconds)
        self.max_output_tokens: int | None = max_output_tokens
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_response_bytes = max_response_bytes
        self.encoding = encoding
        self._sleep = sleep
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=self.timeout_seconds)
        #: whether each attempt's deadline bounds the head too (see :mod:`._deadline`)
        self.deadline_bound = bound_client(self._client)
        self._closed = False

    # -- provider hooks ------------------------------------------------------------------
    @abstractmethod
    def _endpoint(self, base: httpx.URL) -> httpx.URL:
        """Return the URL requests are posted to, from the parsed ``base_url``."""

    @abstractmethod
    def _key_headers(self, key: str) -> dict[str, str]:
        """Return the headers that carry ``key``."""

    def _extra_headers(self) -> dict[str, str]:
        """Return headers sent with every request besides the key and the content type."""
        return {}

    @abstractmethod
    def _parse_answer(self, data: Any) -> tuple[str, dict[str, Any]]:
        """Return (text, provider provenance) of a 200 answer, or raise.

        Raises:
            SummarizerRefused: a refusal, a truncated or unfinished answer.
            SummarizerError: a malformed answer.
        """

    def _hopeless(self, error: ServerError) -> str | None:
        """Return why waiting cannot help a transient ``error`` (an exhausted quota), or ``None``."""
        return None

    def _refused(self, error: ServerError) -> bool:
        """Return whether ``error`` refuses the request itself (too long, unsupported content)."""
        if error.status == 413:
            return True
        return error.status in REFUSABLE_STATUSES and bool(REFUSAL_RE.search(f"{error.code} {error.message}"))

    def _not_found_hint(self) -> str:
        """Return what to check after an HTTP 404."""
        return f"check base_url and the model name {self.model!r}"

    def _missing_key_hint(self) -> str:
        """Return what to do after an HTTP 401 or 403 when no key was sent."""
        return "the server wants a key: set summarizer.api_key_env"

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Close the HTTP client if this summarizer created it; later requests raise."""
        self._closed = True
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> HTTPSummarizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    # -- the request ---------------------------------------------------------------------
    def check(self, request: GatedRequest, *, output_cap: bool = True) -> None:
        """Refuse a request gated for another format, model or output cap than this summarizer's.

        ``output_cap=False`` checks the format and model only (a caption request has its own cap).

        Raises:
            SummarizerError: the format, model or cap differs (the message names both).
        """
        if request.format != self.request_format:
            raise SummarizerError(
                f"{self.name} sends {self.api_name} bodies ({self.request_format!r}); the gated "
                f"{request.purpose} request is {request.format!r}; gate it with "
                f"format={self.request_format!r} (summarizer.request_format)"
            )
        if request.model != self.model:
            raise SummarizerError(
                f"{self.name} runs model {self.model!r}; the gated {request.purpose} request names "
                f"{request.model!r}; gate it with model={self.model!r} (summarizer.model)"
            )
        if output_cap and self.max_output_tokens is not None and request.max_output_tokens != self.max_output_tokens:
            raise SummarizerError(
                f"{self.name} caps answers at {self.max_output_tokens} tokens; the gated "
                f"{request.purpose} request carries {request.max_output_tokens!r}; gate it with "
                f"max_output_tokens={self.max_output_tokens} (summarizer.max_output_tokens)"
            )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Accept-Encoding": ACCEPT_ENCODING}
        headers.update(self._extra_headers())
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise SummarizerError(
                    f"environment variable {self.api_key_env} (api_key_env) is no longer set; "
                    f"export it to reach {self.base_url}"
                )
            problem = key_problem(key)
            if problem:
                raise SummarizerError(bad_key_message(self.api_key_env, problem))
            headers.update(self._key_headers(key))
        return headers

    def scrub(self, text: str) -> str:
        """Return ``text`` (from the server or the transport) without the API key or any
        run of 8+ of its characters (:func:`~._secrets.scrub_key`), lone surrogates replaced."""
        key = os.environ.get(self.api_key_env) if self.api_key_env is not None else None
        return scrub_key(clean_text(text), key)

    def shown(self, text: str, limit: int = _REASON_LIMIT) -> str:
        """Return a server's ``text`` safe to show: scrubbed, then on one line cut to ``limit``
        characters, then scrubbed again (a cut never leaves 8 characters of the key)."""
        text = " ".join(text[: 4 * limit + 4096].split())  # the cut below never reaches past this
        return self.scrub(shorten(self.scrub(text), limit))

    # -- the ladder ----------------------------------------------------------------------
    def summarize(self, request: GatedRequest, *, kind: SummaryKind) -> SummaryResult:
        """Send ``request.payload`` as it is and return the summary the server wrote.

        Args:
            request: the request, gated with this summarizer's format, model and output cap.
            kind: ``"l1"``, ``"merge"``, ``"split"`` or ``"stitch"`` (recorded in the provenance).

        Returns:
            The stripped summary text and its provenance: ``summarizer``, ``model``,
            ``base_url`` (no credentials, no query), ``request_sha256`` of the bytes sent,
            ``usage`` (the server's token counts), the provider's finish field, ``kind``,
            ``attempts``, and ``served_model`` when the server names another model.

        Raises:
            SummarizerUnavailable: transient failures outlasted the retries.
            SummarizerRefused: the request was refused (too long, unsupported content), or the
                answer is a refusal, truncated, unfinished, empty, or over
                :func:`summary_token_bound` of the request's output cap.
            SummarizerError: the request was gated for another format, model or cap, the
                summarizer is closed, the key in ``api_key_env`` is gone or unusable, or any
                other failure (401, 403, 404, a redirect, a malformed or oversized response,
                a 200 carrying an error).
        """
        if self._closed:
            raise SummarizerError(f"{self.name} for {self.base_url} is closed; build a new one")
        self.check(request)
        cap = request.max_output_tokens if request.max_output_tokens is not None else self.max_output_tokens
        return self._exchange(request, kind, summary_token_bound(cap))

    def caption(self, request: GatedRequest) -> SummaryResult:
        """Send a gated caption request (one image and the ask) and return the caption the server wrote.

        The same transport, bounds, key scrubbing and failure ladder as :meth:`summarize`,
        but the request carries its own small output cap (a caption is one paragraph, not a
        summary), so only its format and model are checked against this summarizer.  The
        answer is read within ``max_response_bytes`` like a summary's, but a long one is
        cut rather than refused: it is returned scrubbed of the key, on one line, cut to
        2,000 characters; the caller cleans it further
        (:func:`compaction.caption_text.clean_caption`).

        Returns:
            The caption and its provenance (as :meth:`summarize`'s, ``kind`` ``"caption"``).

        Raises:
            SummarizerUnavailable: transient failures outlasted the retries.
            SummarizerRefused: the request was refused (an image the model cannot take, too
                long), or the answer is a refusal, truncated or empty.
            SummarizerError: the request was gated for another format or model, the
                summarizer is closed, or any other failure.
        """
        if self._closed:
            raise SummarizerError(f"{self.name} for {self.base_url} is closed; build a new one")
        self.check(request, output_cap=False)
        result = self._exchange(request, "caption", None)
        return SummaryResult(self.shown(result.text, _CAPTION_CHARS), result.provenance)

    def _exchange(self, request: GatedRequest, kind: str, bound: int | None) -> SummaryResult:
        """Send ``request.payload`` through the failure ladder; return the answer's text and provenance."""
        if self._closed:
            raise SummarizerError(f"{self.name} for {self.base_url} is closed; build a new one")
        payload = request.payload
        digest = hashlib.sha256(payload).hexdigest()
        attempts = 0
        while True:
            attempts += 1
            outcome = self._attempt(payload, bound)
            if isinstance(outcome, SummaryResult):
                provenance = {**outcome.provenance, "request_sha256": digest}
                provenance.update(kind=kind, attempts=attempts)
                return SummaryResult(outcome.text, provenance)
            retry = attempts - 1
            if outcome.hopeless or retry >= self.max_retries:
                hint = "" if outcome.hopeless else "; raise summarizer.max_retries or try again later"
                raise SummarizerUnavailable(
                    f"{self.base_url}: no summary after {attempts} attempt(s): {outcome.cause}{hint}",
                    attempts=attempts,
                )
            backoff = min(self.backoff_max, self.backoff_base * 2**retry)
            self._sleep(outcome.retry_after if outcome.retry_after is not None else backoff)

    def _attempt(self, payload: bytes, bound: int | None) -> SummaryResult | Transient:
        """Make one request: the summary, a transient failure, or raise for any other failure."""
        headers = self._headers()
        at = time.monotonic() + self.timeout_seconds
        try:
            with deadline(at), self._client.stream(
                "POST",
                self.endpoint,
                content=payload,
                headers=headers,
                timeout=self.timeout_seconds,
                follow_redirects=False,
            ) as response:
                body = read_body(
                    response, limit=self.max_response_bytes, deadline=at, base_url=self.base_url, show=self.shown
                )
        except (httpx.TimeoutException, PastDeadline) as err:
            return Transient(f"timed out after {self.timeout_seconds:g} s ({type(err).__name__})")
        except (httpx.NetworkError, httpx.RemoteProtocolError) as err:
            return Transient(f"connection failed ({type(err).__name__}: {self.shown(str(err))})")
        except httpx.HTTPError as err:
            raise SummarizerError(
                f"{self.base_url}: request failed ({type(err).__name__}: {self.shown(str(err))})"
            ) from None
        status = response.status_code
        if status == 200:
            return self._accept(body, response.headers, bound)
        try:
            data: Any = _parse_json(body, self.base_url)
        except SummarizerError:
            data = None
        code, message = error_fields(data) if data is not None else (None, body.decode("utf-8", "replace"))
        return self._classify(ServerError(status, code, message, data, response.headers))

    def _classify(self, error: ServerError) -> Transient:
        """Return a transient failure for ``error``, or raise the error it is (refused or not)."""
        status, code = error.status, error.code
        detail = self.shown(f"{code}: {error.message}" if code else error.message)
        shown_code = self.shown(code, 60) if code else None
        if status in TRANSIENT_STATUSES or (status == 200 and code in TRANSIENT_ERROR_CODES):
            hopeless = self._hopeless(error)
            if hopeless:
                return Transient(f"HTTP {status} {detail} ({hopeless}; waiting will not help)", hopeless=True)
            after = retry_after_seconds(error.headers, time.time())
            if after is not None and after > self.backoff_max:
                return Transient(
                    f"HTTP {status}; the server asks to retry after {after:g} s, more than "
                    f"backoff_max ({self.backoff_max:g} s)",
                    hopeless=True,
                )
            return Transient(f"HTTP {status} {detail}".rstrip(), retry_after=after)
        if self._refused(error) or (status == 200 and REFUSAL_RE.search(f"{code} {error.message}")):
            raise SummarizerRefused(
                f"{self.base_url} refused the request (HTTP {status}): {detail}; the chunk will be split",
                code=shown_code,
                status=status,
            )
        if status == 200:
            raise SummarizerError(f"{self.base_url}: the server answered with an error (HTTP 200): {detail}")
        if status in (401, 403):
            hint = f"check the key in ${self.api_key_env}" if self.api_key_env else self._missing_key_hint()
            what = "unauthorized" if status == 401 else "forbidden"
            named = f", {shown_code}" if shown_code else ""
            raise SummarizerError(f"{self.base_url}: HTTP {status} ({what}{named}); {hint}")
        if status == 404:
            raise SummarizerError(
                f"{self.base_url}: HTTP 404 for {self.endpoint.path} ({detail or 'not found'}); "
                f"{self._not_found_hint()}"
            )
        if 300 <= status < 400:
            raise SummarizerError(
                f"{self.base_url}: HTTP {status} redirect (not followed); set base_url to the final address"
            )
        raise SummarizerError(f"{self.base_url}: HTTP {status}: {detail or 'no error message'}")

    def _accept(self, body: bytes, headers: httpx.Headers, bound: int | None) -> SummaryResult | Transient:
        """Return the summary of a 200 body, or raise if it is not a finished text within ``bound`` tokens."""
        data = _parse_json(body, self.base_url)
        if not isinstance(data, dict):
            raise SummarizerError(f"{self.base_url}: the response is not a JSON object")
        if data.get("type") == "error" or data.get("error") not in (None, False, "", {}, []):
            code, message = error_fields(data)
            return self._classify(ServerError(200, code, message, data, headers))
        text, fields = self._parse_answer(data)
        text = text.strip()
        if not text:
            raise SummarizerRefused(f"{self.base_url}: the model answered with no text", code="empty")
        if bound is not None and len(text) > _MAX_TOKEN_CHARS * bound:
            self._refuse_length(f"{len(text):,} characters", bound)
        text = self.scrub(text)
        if bound is not None and (tokens := count_text(text, self.encoding)) > bound:
            self._refuse_length(f"{tokens:,} tokens ({self.encoding})", bound)
        provenance: dict[str, Any] = {
            "summarizer": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "usage": self._usage(data.get("usage")),
            **fields,
        }
        served = data.get("model")
        if isinstance(served, str) and served and served != self.model:
            provenance["served_model"] = self.shown(served, _MODEL_NAME)
        # a server may echo anything into the fields the provider kept: the key never goes on
        return SummaryResult(text, self._scrubbed(provenance))

    def _refuse_length(self, size: str, bound: int) -> None:
        """Refuse a summary of ``size`` over ``bound`` tokens, so the compactor splits the chunk."""
        raise SummarizerRefused(
            f"{self.base_url}: the summary is {size}, over the bound of {bound} tokens (1.5 x the output "
            f"cap + {SUMMARY_SLACK_TOKENS}: summary_max_tokens or summarizer.max_output_tokens); the chunk "
            f"will be split",
            code="summary_too_long",
        )

    def _usage(self, usage: Any) -> dict[str, Any] | None:
        """Return the server's token counts: numbers and short texts, one level of nesting, bounded."""

        def kept(value: Any, depth: int) -> Any:
            if value is None or isinstance(value, bool):
                return value
            if isinstance(value, int):
                return value if abs(value) < 2**63 else None
            if isinstance(value, float):
                return value if math.isfinite(value) else None
            if isinstance(value, str):
                return self.shown(value, _USAGE_TEXT)
            if isinstance(value, dict) and depth == 0:
                return fields(value, 1)
            return None

        def fields(value: dict[Any, Any], depth: int) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name, item in value.items():
                if len(out) >= _USAGE_FIELDS:
                    break
                if isinstance(name, str) and len(name) <= _USAGE_TEXT:
                    item = kept(item, depth)
                    if item is not None or value[name] is None:
                        out[self.shown(name, _USAGE_TEXT)] = item
            return out

        return fields(usage, 0) if isinstance(usage, dict) else None

    def _scrubbed(self, value: Any) -> Any:
        """Return ``value`` (JSON-like) with the API key removed from every string in it."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {self.scrub(str(k)): self._scrubbed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrubbed(v) for v in value]
        return value
