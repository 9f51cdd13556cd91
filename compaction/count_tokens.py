"""Anthropic's ``count_tokens`` endpoint as an optional exact source of calibration samples.

``POST {base_url}/messages/count_tokens`` takes a Messages body (``model``, ``messages``,
``system``, ``tools``, ``tool_choice``, ``thinking``) and answers ``{"input_tokens": N}``: the
count Claude's tokenizer gives it, without running the model (Anthropic's token-counting
documentation).  :func:`probe_with_count_tokens` compiles a store's conversation as Anthropic
Messages at a few budgets, asks the endpoint for each request's count and records each as a
usage sample (``source = "count_tokens"``) beside our count, so :mod:`compaction.calibration`
can fit Claude's correction before any real call was made.

It reaches the network only at the ``base_url`` the user configures, and only when the key's
environment variable is set; the key goes in the ``x-api-key`` header only, never in an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import httpx

from .errors import CompactionError, InvalidArgument, OverBudget, found
from .summarizers._http import redact_url
from .summarizers._secrets import scrub_key

__all__ = ["COUNT_TOKENS_FIELDS", "CountTokensError", "anthropic_count_tokens", "probe_with_count_tokens"]

#: The body fields the endpoint takes; the rest of a Messages body (``max_tokens``, ``stream``,
#: ``temperature``, ``metadata``...) is left out.
COUNT_TOKENS_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking")
#: The largest answer read (bytes): a count or an error is well under it; a server sending
#: more is refused before its body can fill memory.
MAX_ANSWER_BYTES = 1 << 20


class CountTokensError(RuntimeError, CompactionError):
    """The count_tokens endpoint could not be reached, refused the request or answered no count."""


def anthropic_count_tokens(
    payload: bytes,
    *,
    base_url: str,
    api_key_env: str = "ANTHROPIC_API_KEY",
    anthropic_version: str = "2023-06-01",
    timeout_seconds: float = 30.0,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Return Anthropic's count of the prompt of a Messages request body (tokens).

    Args:
        payload: a serialized Anthropic Messages body (a compiled request's ``payload``).
        base_url: the API's base URL, e.g. ``https://api.anthropic.com/v1``.
        api_key_env: the environment variable holding the key (sent as ``x-api-key``).
        anthropic_version: the ``anthropic-version`` header.
        timeout_seconds: the whole exchange's timeout (seconds).
        transport: an httpx transport (tests); default the network.

    Returns:
        ``input_tokens`` of the answer (tokens).

    Raises:
        CountTokensError: no key in ``api_key_env``, the server unreachable, an HTTP error, or
            an answer without a whole ``input_tokens``.
        InvalidArgument: ``payload`` is not a JSON object.
    """
    try:
        body = json.loads(payload)
    except (ValueError, TypeError) as err:
        raise InvalidArgument(f"payload must be a serialized Messages body; found {found(payload)}") from err
    if not isinstance(body, dict):
        raise InvalidArgument(f"payload must be a JSON object (a Messages body); found {found(body)}")
    key = os.environ.get(api_key_env, "").strip()
    if not key:
        raise CountTokensError(f"count_tokens needs an Anthropic key: set {api_key_env} (nothing was sent)")
    sent = {name: body[name] for name in COUNT_TOKENS_FIELDS if name in body}
    target = base_url.rstrip("/") + "/messages/count_tokens"
    url = redact_url(target)  # what messages show: no user:password@, no query
    headers = {"x-api-key": key, "anthropic-version": anthropic_version, "content-type": "application/json"}
    try:
        with httpx.Client(timeout=timeout_seconds, transport=transport, follow_redirects=False) as client:
            with client.stream("POST", target, content=json.dumps(sent).encode(), headers=headers) as answer:
                status = answer.status_code
                raw = _bounded(answer, url)
    except httpx.HTTPError as err:
        raise CountTokensError(f"{url}: cannot reach the count_tokens endpoint: {type(err).__name__}") from err
    if status != 200:
        raise CountTokensError(f"{url}: HTTP {status}: {scrub_key(_error_message(raw), key)}")
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise CountTokensError(f"{url}: the answer is not JSON") from err
    count = data.get("input_tokens") if isinstance(data, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise CountTokensError(f"{url}: the answer holds no input_tokens count (found {found(count)})")
    return count


def _bounded(answer: httpx.Response, url: str) -> bytes:
    """Return the answer's body, refused past :data:`MAX_ANSWER_BYTES` (a count is a few bytes)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in answer.iter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise CountTokensError(f"{url}: the answer is over {MAX_ANSWER_BYTES:,} bytes; nothing was recorded")
        chunks.append(chunk)
    return b"".join(chunks)


def _error_message(raw: bytes) -> str:
    """Return the error message of an Anthropic error body, shortened (never a header)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return "no error message"
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message)[:200] if message else "no error message"


def probe_with_count_tokens(
    store: Any,
    recipe: Any,
    *,
    base_url: str,
    api_key_env: str = "ANTHROPIC_API_KEY",
    shares: Sequence[float] = (1.0, 0.5, 0.25),
    transport: httpx.BaseTransport | None = None,
) -> list[int]:
    """Record calibration samples for ``recipe``'s Anthropic model from the count_tokens endpoint.

    The conversation is compiled as Anthropic Messages (no correction applied) at each share
    of its whole raw size that fits with the summaries it has (a share that does not fit is
    left out); each distinct request is counted by the endpoint and recorded with
    ``store.record_usage(..., source="count_tokens")``.

    Args:
        store: the history (usage records are added to it).
        recipe: settings (encoding, model; the output format is taken as ``"anthropic"``).
        base_url: the Anthropic API's base URL.
        api_key_env: the environment variable holding the key.
        shares: budgets as shares of the whole history's raw request (each in (0, 1]).
        transport: an httpx transport (tests).

    Returns:
        The ids of the usage records made, one per distinct request counted.

    Raises:
        CountTokensError: as :func:`anthropic_count_tokens` (nothing further is recorded).
        StoreError: the store refused a write.
    """
    from .compile import compile_request, raw_history_tokens

    # counted, not answered: a store ending on the assistant's turn is counted too (the count
    # endpoint takes it or says why not, compaction.prefill)
    target = recipe.replace(output_format="anthropic", calibrate=False, assistant_prefill="allow")
    whole = raw_history_tokens(store, target) + 4096  # room for framing and the system text
    made: list[int] = []
    seen: set[bytes] = set()
    for share in shares:
        try:
            compiled = compile_request(store, target, budget=max(1, int(whole * share)))
        except OverBudget:
            continue
        payload = compiled.request.payload
        if payload in seen:
            continue
        seen.add(payload)
        count = anthropic_count_tokens(payload, base_url=base_url, api_key_env=api_key_env, transport=transport)
        made.append(
            store.record_usage(
                compiled.request.model, "anthropic", compiled.tokens, input_tokens=count, source="count_tokens"
            )
        )
    return made
