"""The token budget of a proxied request: ``--budget``, or the model's window minus its output.

The windows are the providers' documented context lengths (input plus output, tokens) for
model families, matched by the longest prefix of the model's name (a gateway's
``provider/`` prefix is dropped): :mod:`compaction.model_windows`, shared with the CLI.  A
model not in the table gets :data:`DEFAULT_WINDOW`, a small window, so an unknown local model
is never overrun: pass ``--budget`` for it.
"""

from __future__ import annotations

from typing import Any

from ..model_windows import DEFAULT_WINDOW, WINDOWS, model_window
from ._errors import BadRequest

__all__ = ["WINDOWS", "DEFAULT_WINDOW", "DEFAULT_OUTPUT_RESERVE", "MIN_BUDGET", "model_window", "request_budget"]

#: Output reserved when the request names no ``max_tokens`` (tokens; at most a quarter of the window).
DEFAULT_OUTPUT_RESERVE = 4_096
#: The smallest budget a request may be compiled under (tokens).
MIN_BUDGET = 256


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
