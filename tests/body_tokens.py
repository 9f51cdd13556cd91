"""The strings part of an independent count of a shipped request body, shared by the counting
tests (``test_count_ships.py``, ``test_shipped_counts.py``) and ``bench/bench_count_shipped.py``.

The OpenAI cookbook ("How to count tokens with tiktoken") counts a Chat Completions request
as 3 tokens a message plus tiktoken's tokens of every string of it plus 3 priming the reply;
:func:`string_tokens` is the middle term, with the keys a caller leaves out named.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

__all__ = ["string_tokens"]


def string_tokens(value: Any, count: Callable[[str], int], aside: Collection[str] = ("type",)) -> int:
    """Return the tokens ``count`` gives every string of ``value``, a fragment of a request body
    (a message, a list of them, a content part, a tool call), in tokens.

    The values of the keys ``aside`` (by default the ``type`` tags) are not counted, nor image
    parts (a dict whose ``type`` is ``image_url``: priced from its pixels, apart from the text);
    numbers, booleans and ``None`` count nothing.
    """
    if isinstance(value, str):
        return count(value)
    if isinstance(value, dict):
        if value.get("type") == "image_url":
            return 0
        return sum(string_tokens(v, count, aside) for k, v in value.items() if k not in aside)
    if isinstance(value, list):
        return sum(string_tokens(v, count, aside) for v in value)
    return 0
