"""A summarizer for the Anthropic Messages API (native: ``x-api-key``, ``anthropic-version``).

The transport -- sending the gated payload byte for byte, the key, time and size bounds,
retries and the failure ladder -- is shared (:mod:`._http`); this module supplies only what
is Anthropic's:

- the endpoint ``{base_url}/v1/messages`` (``{base_url}/messages`` when ``base_url``
  already ends in ``/v1``), the headers ``x-api-key`` (from the variable named by
  ``api_key_env``; never an ``Authorization`` header) and ``anthropic-version``;
- a request must be gated with ``format="anthropic"`` and this summarizer's model (the gate
  always writes ``max_tokens``, which the API requires);
- errors, documented at https://docs.claude.com/en/api/errors: every error body is
  ``{"type": "error", "error": {"type", "message"}, "request_id"}``.  HTTP 429
  ``rate_limit_error``, 500 ``api_error`` and 529 ``overloaded_error`` are transient (with
  ``retry-after`` when given), except a 429 whose ``error.details.error_code`` is
  ``enforced_spend_limit_reached`` (a monthly spend limit: waiting will not help); 413
  ``request_too_large`` and a 400 ``invalid_request_error`` naming the size ("prompt is too
  long: 210000 tokens > 200000 maximum") refuse the request, so the chunk is split; 401
  ``authentication_error`` and 403 ``permission_error`` are errors whose hint names the
  variable (never the key); 404 ``not_found_error`` names the model;
- the answer, documented at
  https://platform.claude.com/docs/en/build-with-claude/handling-stop-reasons: the ``text``
  blocks of ``content`` joined, accepted only with ``stop_reason`` ``"end_turn"`` or
  ``"stop_sequence"``; ``"max_tokens"`` and ``"model_context_window_exceeded"`` (truncated),
  ``"refusal"``, and any other reason (``"tool_use"``, ``"pause_turn"``) are
  :class:`~compaction.errors.SummarizerRefused`.  ``usage`` (``input_tokens``,
  ``output_tokens``, ...) goes into the provenance with ``stop_reason``.

Example:
    >>> summarizer = AnthropicMessagesSummarizer(model="claude-haiku-4-5")  # doctest: +SKIP
    >>> Compactor(store, recipe, summarizer=summarizer).tick()  # doctest: +SKIP
    >>> summarizer.close()  # doctest: +SKIP
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx

from ..errors import RecipeError, SummarizerError, SummarizerRefused
from ..tokens.encodings import DEFAULT_ENCODING
from ..types import RequestFormatName
from ._http import DEFAULT_MAX_RESPONSE_BYTES, HTTPSummarizer, ServerError

__all__ = ["AnthropicMessagesSummarizer", "ANTHROPIC_BASE_URL", "ANTHROPIC_VERSION"]

#: The API root requests go to by default.
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
#: The ``anthropic-version`` header sent by default.
ANTHROPIC_VERSION = "2023-06-01"
#: Stop reasons of a complete answer.
_FINISHED = ("end_turn", "stop_sequence")
#: Stop reasons of an answer cut off before its end.
_TRUNCATED = ("max_tokens", "model_context_window_exceeded")
#: ``error.details.error_code`` values of a 429 that waiting does not cure.
_HOPELESS_CODES = {"enforced_spend_limit_reached": "the organization's spend limit is reached"}


class AnthropicMessagesSummarizer(HTTPSummarizer):
    """Summarize with the Anthropic Messages API (or a server that speaks it).

    Args:
        base_url: the API root (default ``https://api.anthropic.com``); requests go to
            ``{base_url}/v1/messages`` (no second ``/v1`` when it already ends in one).
        model: the Claude model, e.g. ``"claude-haiku-4-5"``; requests must be gated with it.
        api_key_env: the NAME of the environment variable holding the API key (default
            ``ANTHROPIC_API_KEY``), sent as ``x-api-key``; ``None`` sends no key (a gateway
            that adds its own).
        timeout_seconds: the bound of each attempt, whole: connect, headers and body (seconds).
        max_output_tokens: the summary's output cap (tokens) the requests are gated with
            (``max_tokens`` in the body); ``None``: the recipe's ``summary_max_tokens``.
        max_retries: retries of transient failures (requests made: ``max_retries + 1``).
        anthropic_version: the ``anthropic-version`` header.
        backoff_base: the first wait (seconds); attempt ``n`` waits ``backoff_base * 2**n``.
        backoff_max: the longest wait (seconds), and the longest ``retry-after`` honoured.
        max_response_bytes: the largest response body read (bytes).
        client: an httpx client to use; by default one is created and closed by :meth:`close`.
        sleep: how to wait (seconds); tests inject a recorder.
        encoding: the encoding a summary is counted in against its bound (tokens).

    Raises:
        RecipeError: no model, a bad ``base_url`` (not http(s), or carrying credentials), a
            bad number or ``anthropic_version``, or ``api_key_env`` naming a variable that is
            not set or holds a character no API key has.

    Example:
        >>> s = AnthropicMessagesSummarizer(model="claude-haiku-4-5")  # doctest: +SKIP
        >>> gated = gate(request, settings, format=s.request_format, model=s.model)  # doctest: +SKIP
        >>> s.summarize(gated, kind="l1").provenance["stop_reason"]  # doctest: +SKIP
        'end_turn'
    """

    name = "anthropic-http"
    request_format: RequestFormatName = "anthropic"
    api_name = "Anthropic Messages"

    def __init__(
        self,
        base_url: str = ANTHROPIC_BASE_URL,
        model: str = "",
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        timeout_seconds: float = 60,
        max_output_tokens: int | None = None,
        max_retries: int = 3,
        anthropic_version: str = ANTHROPIC_VERSION,
        backoff_base: float = 0.5,
        backoff_max: float = 30,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        encoding: str = DEFAULT_ENCODING,
    ) -> None:
        if isinstance(model, str) and not model.strip():
            raise RecipeError("model: required; name the Claude model, for example 'claude-haiku-4-5'")
        if not isinstance(anthropic_version, str) or not re.fullmatch(r"[\w.-]+", anthropic_version):
            raise RecipeError(
                f"anthropic_version: expected a version such as {ANTHROPIC_VERSION!r}, found {anthropic_version!r}"
            )
        self.anthropic_version = anthropic_version
        super().__init__(
            base_url,
            model,
            api_key_env=api_key_env,
            timeout_seconds=timeout_seconds,
            max_output_tokens=max_output_tokens,
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            max_response_bytes=max_response_bytes,
            client=client,
            sleep=sleep,
            encoding=encoding,
        )

    def _endpoint(self, base: httpx.URL) -> httpx.URL:
        path = base.path.rstrip("/")
        return base.copy_with(path=path + ("/messages" if path.endswith("/v1") else "/v1/messages"))

    def _key_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def _extra_headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}

    def _hopeless(self, error: ServerError) -> str | None:
        if error.status != 429 or not isinstance(error.data, dict):
            return None
        details = error.data.get("error", {})
        details = details.get("details") if isinstance(details, dict) else None
        code = details.get("error_code") if isinstance(details, dict) else None
        return _HOPELESS_CODES.get(code) if isinstance(code, str) else None

    def _not_found_hint(self) -> str:
        return (
            f"check base_url (usually {ANTHROPIC_BASE_URL}) and the model name {self.model!r} "
            f"(not_found_error usually means an unknown model)"
        )

    def _missing_key_hint(self) -> str:
        return "the server wants a key: set summarizer.api_key_env (usually ANTHROPIC_API_KEY)"

    def _parse_answer(self, data: Any) -> tuple[str, dict[str, Any]]:
        """Return the text and ``stop_reason`` of a Messages answer, or raise.

        Raises:
            SummarizerRefused: a refusal, a truncated or unfinished answer.
            SummarizerError: no ``content`` list.
        """
        content = data.get("content")
        if not isinstance(content, list):
            raise SummarizerError(f"{self.base_url}: the response has no content list")
        stop = data.get("stop_reason")
        shown = self.shown(repr(stop), 60)
        if stop == "refusal":
            raise SummarizerRefused(f"{self.base_url}: the model refused (stop_reason 'refusal')", code=stop)
        if stop in _TRUNCATED:
            raise SummarizerRefused(
                f"{self.base_url}: the answer was cut off before its end (stop_reason {shown})",
                code=stop,
            )
        if stop not in _FINISHED:
            raise SummarizerRefused(
                f"{self.base_url}: the answer did not finish (stop_reason {shown}, expected 'end_turn')",
                code=self.shown(str(stop), 60),
            )
        text = "".join(
            block["text"]
            for block in content
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        )
        return text, {"stop_reason": stop}
