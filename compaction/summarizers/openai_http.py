"""A summarizer for any OpenAI-compatible Chat Completions server, over HTTP with httpx.

It works with OpenAI, Ollama (``http://localhost:11434/v1``), vLLM, the llama.cpp server
and gateways that speak ``POST {base_url}/chat/completions``.

What is sent.  The request already passed the wire gate, so its
:attr:`~compaction.wire.GatedRequest.payload` is the body to send.  Exactly two top-level
fields are set on it: ``model`` (this summarizer's model) and ``max_tokens``
(``max_output_tokens``, else the ``max_tokens`` the compactor asks for).  That is done by
parsing the payload, setting those two keys and re-serializing the same way the gate
serializes (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``; key order is
kept, a new key goes last), so the same request always gives the same bytes and the
messages -- text, image parts and placeholders -- are byte for byte what the gate froze.
Nothing else is edited after the gate.  ``request_sha256`` in the provenance is the hash
of the bytes actually sent.

The key.  ``api_key_env`` names the environment variable holding the API key; the key is
read from the environment at each request, sent only as ``Authorization: Bearer``, and
never stored on the object, logged, put in an error message or in the provenance.  With
no ``api_key_env`` no ``Authorization`` header is sent (local servers).

The failure ladder (DESIGN.md, "When the summarizer fails"):

1. Transient -- an httpx timeout or network error, HTTP 408, 429, 500, 502, 503, 504: retry
   up to ``max_retries`` times, waiting ``min(backoff_max, backoff_base * 2**attempt)``
   seconds (no jitter, so runs are reproducible) or the server's ``Retry-After``
   (``retry-after-ms``, seconds or an HTTP date) when it gives one.  A ``Retry-After``
   longer than ``backoff_max``, or an exhausted quota (429 ``insufficient_quota``), is not
   waited out.  When the retries run out: :class:`~compaction.errors.SummarizerUnavailable`.
2. Refused -- HTTP 400/413/422 whose error names the context length (too long, maximum
   context) or unsupported content (``image_input_not_supported``), a refusal
   (``message.refusal`` or ``finish_reason = "content_filter"``), a truncated answer
   (``finish_reason = "length"``), an answer that is not a finished text, or an empty one:
   :class:`~compaction.errors.SummarizerRefused`, with the server's code and message
   (shortened to 300 characters), so the compactor splits the chunk.
3. Anything else -- 401, 403, 404, other 4xx, a redirect, a malformed response:
   :class:`~compaction.errors.SummarizerError` naming the status and the base URL.

An error text is never returned as a summary: a summary is accepted only with
``finish_reason`` ``"stop"`` (or ``"end_turn"``) and non-empty text, stripped.

Example:
    >>> summarizer = OpenAIChatSummarizer("http://localhost:11434/v1", "qwen2.5:7b")  # doctest: +SKIP
    >>> Compactor(store, recipe, summarizer=summarizer).tick()  # doctest: +SKIP
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import RecipeError, SummarizerError, SummarizerRefused, SummarizerUnavailable
from ..wire import GatedRequest
from .base import SummaryResult

__all__ = ["OpenAIChatSummarizer", "TRANSIENT_STATUSES", "redact_url"]

#: HTTP statuses retried with backoff.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: HTTP statuses whose error body may say the request itself is refused (too long, unsupported).
_REFUSABLE_STATUSES = frozenset({400, 413, 422})
#: Finish reasons of a complete answer.
_FINISHED = ("stop", "end_turn")
_REFUSAL_RE = re.compile(
    r"context[ _-]?length|context[ _-]?window|maximum context|too long|too large|too many tokens|"
    r"exceeds? the (?:model'?s? )?(?:maximum|limit|context)|prompt is too long|"
    r"image_input_not_supported|unsupported[ _-]?content|unsupported (?:image|input|content)|"
    r"(?:does not|doesn't|cannot) (?:support|accept|process) (?:image|vision|multimodal)|"
    r"image inputs? (?:is|are) not supported|not a multimodal model|content_policy|content_filter",
    re.I,
)
_REASON_LIMIT = 300


def redact_url(url: str) -> str:
    """Return ``url`` without credentials, query or fragment (for provenance and errors)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<invalid URL>"
    host = parsed.host
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{host}{port}{parsed.path}".rstrip("/")


def _shorten(text: str, limit: int = _REASON_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _retry_after_seconds(headers: Mapping[str, str], now: float) -> float | None:
    """Return the wait a response asks for (``retry-after-ms``, ``Retry-After``), or ``None``."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)


def _error_fields(response: httpx.Response) -> tuple[str | None, str]:
    """Return (code, message) of an error response, whatever shape the server uses."""
    try:
        data: Any = response.json()
    except (ValueError, UnicodeDecodeError):
        return None, response.text
    return _error_fields_of(data)


def _error_fields_of(data: Any) -> tuple[str | None, str]:
    if not isinstance(data, dict):
        return None, str(data)
    error = data.get("error", data)
    if isinstance(error, str):  # Ollama: {"error": "..."}
        return None, error
    if not isinstance(error, dict):
        return None, json.dumps(data, ensure_ascii=False)
    code = error.get("code") or error.get("type")
    message = error.get("message") or error.get("detail") or ""
    if not isinstance(message, str):
        message = json.dumps(message, ensure_ascii=False)
    return (str(code) if code is not None else None), message


@dataclass(frozen=True)
class _Transient:
    """A failure worth retrying: why, and the wait the server asked for (seconds), if any."""

    cause: str
    retry_after: float | None = None
    hopeless: bool = False  # waiting cannot help (quota exhausted, Retry-After too long)


def _answer_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # a few servers answer with content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


class OpenAIChatSummarizer:
    """Summarize with an OpenAI-compatible Chat Completions server.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or
            ``http://localhost:11434/v1``; requests go to ``{base_url}/chat/completions``.
            A query string (``?api-version=...``) is kept; credentials in the URL are refused.
        model: the model the server runs; written into each request's ``model``.
        api_key_env: the NAME of the environment variable holding the API key; ``None``
            sends no ``Authorization`` header.
        timeout_seconds: per-request timeout (seconds).
        max_output_tokens: the summary's output cap (tokens) sent as ``max_tokens``;
            ``None`` sends the ``max_tokens`` the compactor asks for.
        max_retries: retries of transient failures (requests made: ``max_retries + 1``).
        backoff_base: the first wait (seconds); attempt ``n`` waits ``backoff_base * 2**n``.
        backoff_max: the longest wait (seconds), and the longest ``Retry-After`` honoured.
        client: an httpx client to use (tests, connection pools); by default one is
            created and closed by :meth:`close`.
        sleep: how to wait (seconds); tests inject a recorder.

    Raises:
        RecipeError: a bad ``base_url`` (not http(s), or carrying credentials), a bad
            number, or ``api_key_env`` naming a variable that is not set.

    Example:
        >>> s = OpenAIChatSummarizer("http://127.0.0.1:8080/v1", "llama3")  # doctest: +SKIP
        >>> s.summarize(gated, kind="l1", max_tokens=400).text  # doctest: +SKIP
        'Asked:\\n- ...'
    """

    name = "openai-http"

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
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
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
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise RecipeError(f"max_retries: expected an integer >= 0, found {max_retries!r}")
        for label, value in (("timeout_seconds", timeout_seconds), ("backoff_max", backoff_max)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise RecipeError(f"{label}: expected a number > 0 (seconds), found {value!r}")
        if isinstance(backoff_base, bool) or not isinstance(backoff_base, (int, float)) or backoff_base < 0:
            raise RecipeError(f"backoff_base: expected a number >= 0 (seconds), found {backoff_base!r}")
        if max_output_tokens is not None and (
            isinstance(max_output_tokens, bool)
            or not isinstance(max_output_tokens, int)
            or max_output_tokens < 1
        ):
            raise RecipeError(f"max_output_tokens: expected an integer >= 1, found {max_output_tokens!r}")
        if api_key_env is not None and not os.environ.get(api_key_env):
            raise RecipeError(
                f"api_key_env: environment variable {api_key_env} is not set; export it or leave "
                f"api_key_env out for a server that needs no key"
            )
        self.endpoint = url.copy_with(path=url.path.rstrip("/") + "/chat/completions")
        self.base_url = redact_url(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_seconds = float(timeout_seconds)
        self.max_output_tokens = max_output_tokens
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self._sleep = sleep
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=self.timeout_seconds)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Close the HTTP client if this summarizer created it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> OpenAIChatSummarizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"OpenAIChatSummarizer(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    # -- the request ---------------------------------------------------------------------
    def request_bytes(self, request: GatedRequest, max_tokens: int) -> bytes:
        """Return the body sent for ``request``: its payload with ``model`` and ``max_tokens`` set.

        Raises:
            SummarizerError: the request is not an OpenAI Chat body.
        """
        if request.format != "openai":
            raise SummarizerError(
                f"{self.name} sends OpenAI Chat bodies; the gated {request.purpose} request is "
                f"{request.format!r}; gate it with format='openai'"
            )
        body = json.loads(request.payload)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise SummarizerError(f"the gated {request.purpose} request has no 'messages' list")
        body["model"] = self.model
        body["max_tokens"] = self.max_output_tokens or max_tokens
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise SummarizerError(
                    f"environment variable {self.api_key_env} (api_key_env) is no longer set; "
                    f"export it to reach {self.base_url}"
                )
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _scrub(self, text: str) -> str:
        """Remove the API key from a text that came from the server or the transport."""
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if key and len(key) >= 4:
                text = text.replace(key, "[redacted]")
        return text

    # -- the ladder ----------------------------------------------------------------------
    def summarize(self, request: GatedRequest, *, kind: str, max_tokens: int) -> SummaryResult:
        """Send ``request`` and return the summary the server wrote.

        Args:
            request: the gated request; its payload is sent as is but for ``model`` and
                ``max_tokens``.
            kind: ``"l1"``, ``"merge"``, ``"split"`` or ``"stitch"`` (recorded in the provenance).
            max_tokens: the summary's bound (tokens), sent as ``max_tokens`` unless
                ``max_output_tokens`` is set.

        Returns:
            The stripped summary text and its provenance: ``summarizer``, ``model``,
            ``base_url`` (no credentials, no query), ``request_sha256`` of the bytes sent,
            ``usage`` (the server's token counts), ``finish_reason``, ``kind``, ``attempts``.

        Raises:
            SummarizerUnavailable: transient failures outlasted the retries.
            SummarizerRefused: the request was refused (too long, unsupported content) or the
                answer is a refusal, truncated, unfinished or empty.
            SummarizerError: any other failure (401, 403, 404, a malformed response).
        """
        payload = self.request_bytes(request, max_tokens)
        digest = hashlib.sha256(payload).hexdigest()
        attempts = 0
        while True:
            attempts += 1
            outcome = self._attempt(payload)
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

    def _attempt(self, payload: bytes) -> SummaryResult | _Transient:
        """Make one request: the summary, a transient failure, or raise for any other failure."""
        try:
            response = self._client.post(
                self.endpoint, content=payload, headers=self._headers(), timeout=self.timeout_seconds
            )
        except httpx.TimeoutException as err:
            return _Transient(f"timed out after {self.timeout_seconds:g} s ({type(err).__name__})")
        except (httpx.NetworkError, httpx.RemoteProtocolError) as err:
            return _Transient(self._scrub(f"connection failed ({type(err).__name__}: {_shorten(str(err))})"))
        except httpx.HTTPError as err:
            raise SummarizerError(
                self._scrub(f"{self.base_url}: request failed ({type(err).__name__}: {_shorten(str(err))})")
            ) from None
        status = response.status_code
        if status == 200:
            return self._accept(response)
        code, message = _error_fields(response)
        detail = self._scrub(_shorten(f"{code}: {message}" if code else message))
        if status in TRANSIENT_STATUSES:
            if status == 429 and code == "insufficient_quota":
                return _Transient(
                    f"HTTP 429 {detail} (the quota is exhausted; waiting will not help)", hopeless=True
                )
            after = _retry_after_seconds(response.headers, time.time())
            if after is not None and after > self.backoff_max:
                return _Transient(
                    f"HTTP {status}; the server asks to retry after {after:g} s, more than "
                    f"backoff_max ({self.backoff_max:g} s)",
                    hopeless=True,
                )
            return _Transient(f"HTTP {status} {detail}".rstrip(), retry_after=after)
        if status in _REFUSABLE_STATUSES and (status == 413 or _REFUSAL_RE.search(f"{code} {message}")):
            raise SummarizerRefused(
                f"{self.base_url} refused the request (HTTP {status}): {detail}; the chunk will be split",
                code=code,
                status=status,
            )
        if status in (401, 403):
            hint = (
                f"check the key in ${self.api_key_env}"
                if self.api_key_env
                else "the server wants a key: set summarizer.api_key_env"
            )
            what = "unauthorized" if status == 401 else "forbidden"
            raise SummarizerError(f"{self.base_url}: HTTP {status} ({what}); {hint}")
        if status == 404:
            raise SummarizerError(
                f"{self.base_url}: HTTP 404 for /chat/completions ({detail or 'not found'}); check base_url "
                f"(it usually ends in /v1) and the model name {self.model!r}"
            )
        if 300 <= status < 400:
            raise SummarizerError(
                f"{self.base_url}: HTTP {status} redirect (not followed); set base_url to the final address"
            )
        raise SummarizerError(f"{self.base_url}: HTTP {status}: {detail or 'no error message'}")

    def _accept(self, response: httpx.Response) -> SummaryResult:
        """Return the summary of a 200 response, or raise if it is not a finished, non-empty text."""
        try:
            data = response.json()
        except (ValueError, UnicodeDecodeError) as err:
            raise SummarizerError(
                f"{self.base_url}: the response is not JSON ({_shorten(str(err), 120)})"
            ) from None
        if isinstance(data, dict) and "error" in data and not data.get("choices"):
            code, message = _error_fields_of(data)
            detail = self._scrub(_shorten(f"{code}: {message}" if code else message))
            if _REFUSAL_RE.search(f"{code} {message}"):
                raise SummarizerRefused(f"{self.base_url} refused the request: {detail}", code=code)
            raise SummarizerError(f"{self.base_url}: the server answered with an error: {detail}")
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise SummarizerError(f"{self.base_url}: the response has no choices")
        choice = choices[0]
        answer: Mapping[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        finish = choice.get("finish_reason")
        refusal = answer.get("refusal")
        if refusal:
            raise SummarizerRefused(
                f"{self.base_url}: the model refused: {self._scrub(_shorten(str(refusal)))}", code="refusal"
            )
        if finish == "content_filter":
            raise SummarizerRefused(
                f"{self.base_url}: the answer was stopped by a content filter", code=finish
            )
        if finish == "length":
            raise SummarizerRefused(
                f"{self.base_url}: the answer was cut off at the output limit (finish_reason 'length')",
                code=finish,
            )
        if finish not in _FINISHED:
            raise SummarizerRefused(
                f"{self.base_url}: the answer did not finish (finish_reason {finish!r}, expected 'stop')",
                code=str(finish),
            )
        text = _answer_text(answer).strip()
        if not text:
            raise SummarizerRefused(f"{self.base_url}: the model answered with no text", code="empty")
        usage = data.get("usage")
        provenance: dict[str, Any] = {
            "summarizer": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "usage": usage if isinstance(usage, dict) else None,
            "finish_reason": finish,
        }
        served = data.get("model")
        if isinstance(served, str) and served and served != self.model:
            provenance["served_model"] = served
        return SummaryResult(text, provenance)
