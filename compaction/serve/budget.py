"""The token budget of a proxied request: ``--budget``, or the model's window minus its output.

The windows are the providers' documented context lengths (input plus output, tokens) for
model families, matched by the longest prefix of the model's name (a gateway's
``provider/`` prefix is dropped).  A model not in the table gets :data:`DEFAULT_WINDOW`, a
small window, so an unknown local model is never overrun: pass ``--budget`` for it.
"""

from __future__ import annotations

from typing import Any

from ._errors import BadRequest

__all__ = ["WINDOWS", "DEFAULT_WINDOW", "DEFAULT_OUTPUT_RESERVE", "MIN_BUDGET", "model_window", "request_budget"]

#: Context windows by model-name prefix (tokens).
WINDOWS: dict[str, int] = {
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
    "claude": 200_000,
    "gemini": 1_048_576,
}
#: The window assumed for a model not in :data:`WINDOWS` (tokens).
DEFAULT_WINDOW = 8_192
#: Output reserved when the request names no ``max_tokens`` (tokens; at most a quarter of the window).
DEFAULT_OUTPUT_RESERVE = 4_096
#: The smallest budget a request may be compiled under (tokens).
MIN_BUDGET = 256


def model_window(model: str | None) -> int:
    """Return the context window of ``model`` in tokens (:data:`DEFAULT_WINDOW` when unknown).

    Example:
        >>> model_window("openai/gpt-4o-mini")
        128000
        >>> model_window("qwen2.5:7b")
        8192
    """
    if not isinstance(model, str):
        return DEFAULT_WINDOW
    name = model.rsplit("/", 1)[-1].lower()
    best = ""
    for prefix in WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return WINDOWS[best] if best else DEFAULT_WINDOW


def _max_output(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BadRequest(f"{key} must be a positive integer; found {value!r}")
        return value
    return None


def request_budget(body: dict[str, Any], fixed: int | None) -> int:
    """Return the input budget for a request body (tokens).

    Args:
        body: the client's JSON body (``model``, ``max_tokens`` / ``max_completion_tokens`` /
            ``max_output_tokens``).
        fixed: ``--budget``: used as it is when given.

    Raises:
        BadRequest: ``max_tokens`` is not a positive integer, or leaves less than
            :data:`MIN_BUDGET` tokens of the model's window.
    """
    output = _max_output(body)
    if fixed is not None:
        return fixed
    window = model_window(body.get("model"))
    reserve = output if output is not None else min(DEFAULT_OUTPUT_RESERVE, window // 4)
    budget = window - reserve
    if budget < MIN_BUDGET:
        raise BadRequest(
            f"max_tokens {reserve:,} leaves {budget:,} tokens of {body.get('model')!r}'s {window:,}-token "
            f"window for the prompt (at least {MIN_BUDGET} needed); lower it or start the proxy with --budget"
        )
    return budget
