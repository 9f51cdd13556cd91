"""A summarizer for any OpenAI-compatible Chat Completions server.

It works with OpenAI, Ollama (``http://localhost:11434/v1``), vLLM, the llama.cpp server
and gateways that speak ``POST {base_url}/chat/completions``.  The transport -- sending the
gated payload byte for byte, the key, time and size bounds, retries and the failure
ladder -- is shared (:mod:`._http`); this module supplies only what is OpenAI's:

- the endpoint ``{base_url}/chat/completions`` and the key header ``Authorization: Bearer``
  (none without ``api_key_env``: local servers);
- a request must be gated with ``format="openai"`` and this summarizer's model;
- an exhausted quota (HTTP 429 ``insufficient_quota``) is not waited out;
- the answer: ``choices[0].message.content`` (a string or text parts) is accepted only with
  ``finish_reason`` ``"stop"`` (or ``"end_turn"``, which some gateways pass through);
  ``message.refusal``, ``finish_reason = "content_filter"`` (a refusal), ``"length"``
  (truncated) or any other finish reason is :class:`~compaction.errors.SummarizerRefused`.

Example:
    >>> summarizer = OpenAIChatSummarizer("http://localhost:11434/v1", "qwen2.5:7b")  # doctest: +SKIP
    >>> Compactor(store, recipe, summarizer=summarizer).tick()  # doctest: +SKIP
    >>> summarizer.close()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from ..errors import SummarizerError, SummarizerRefused
from ..types import RequestFormatName
from ._http import TRANSIENT_STATUSES, HTTPSummarizer, ServerError, redact_url

__all__ = ["OpenAIChatSummarizer", "TRANSIENT_STATUSES", "redact_url"]

#: Finish reasons of a complete answer.
_FINISHED = ("stop", "end_turn")


def _answer_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # a few servers answer with content parts; only text parts count
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


class OpenAIChatSummarizer(HTTPSummarizer):
    """Summarize with an OpenAI-compatible Chat Completions server.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or
            ``http://localhost:11434/v1``; requests go to ``{base_url}/chat/completions``.
            A query string (``?api-version=...``) is kept; credentials in the URL are refused.
        model: the model the server runs; requests must be gated with it.
        api_key_env: the NAME of the environment variable holding the API key; ``None``
            sends no ``Authorization`` header.
        timeout_seconds: the bound of each attempt, whole: connect, headers and body (seconds).
        max_output_tokens: the summary's output cap (tokens) the requests are gated with
            (``max_tokens`` in the body); ``None``: the recipe's ``summary_max_tokens``.
        max_retries: retries of transient failures (requests made: ``max_retries + 1``).
        backoff_base: the first wait (seconds); attempt ``n`` waits ``backoff_base * 2**n``.
        backoff_max: the longest wait (seconds), and the longest ``Retry-After`` honoured.
        max_response_bytes: the largest response body read (bytes).
        client: an httpx client to use; by default one is created and closed by :meth:`close`.
        sleep: how to wait (seconds); tests inject a recorder.
        encoding: the encoding a summary is counted in against its bound (tokens).

    Raises:
        RecipeError: a bad ``base_url`` (not http(s), or carrying credentials), a bad
            number, or ``api_key_env`` naming a variable that is not set or holds a character
            no API key has.

    Example:
        >>> s = OpenAIChatSummarizer("http://127.0.0.1:8080/v1", "llama3")  # doctest: +SKIP
        >>> gated = gate(request, settings, format=s.request_format, model=s.model)  # doctest: +SKIP
        >>> s.summarize(gated, kind="l1").text  # doctest: +SKIP
        'Asked:\\n- ...'
    """

    name = "openai-http"
    request_format: RequestFormatName = "openai"
    api_name = "OpenAI Chat"

    def _endpoint(self, base: httpx.URL) -> httpx.URL:
        return base.copy_with(path=base.path.rstrip("/") + "/chat/completions")

    def _key_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def _hopeless(self, error: ServerError) -> str | None:
        if error.status == 429 and error.code == "insufficient_quota":
            return "the quota is exhausted"
        return None

    def _not_found_hint(self) -> str:
        return f"check base_url (it usually ends in /v1) and the model name {self.model!r}"

    def _parse_answer(self, data: Any) -> tuple[str, dict[str, Any]]:
        """Return the text and ``finish_reason`` of a Chat Completions answer, or raise.

        Raises:
            SummarizerRefused: a refusal, a content filter, a truncated or unfinished answer.
            SummarizerError: no ``choices``.
        """
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise SummarizerError(f"{self.base_url}: the response has no choices")
        choice = choices[0]
        answer: Mapping[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        finish = choice.get("finish_reason")
        refusal = answer.get("refusal")
        if refusal:
            raise SummarizerRefused(
                f"{self.base_url}: the model refused: {self.shown(str(refusal))}", code="refusal"
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
                f"{self.base_url}: the answer did not finish (finish_reason "
                f"{self.shown(repr(finish), 60)}, expected 'stop')",
                code=self.shown(str(finish), 60),
            )
        return _answer_text(answer), {"finish_reason": finish}
