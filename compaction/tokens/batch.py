"""Count many texts at once, as a numpy array, by any of the three methods.

* ``"exact"``: tiktoken's ``encode_ordinary`` (the reference);
* ``"fast"``: the exact fast path (pre-tokenizer and per-piece count memo; equal to exact);
* ``"estimate"``: the one-pass code-pair estimator (bounded error, fastest).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import CompactionError, EncodingDataMissing
from .encodings import DEFAULT_ENCODING, get_encoding

__all__ = ["METHODS", "count_batch"]

METHODS = ("exact", "fast", "estimate")


def count_batch(texts: Iterable[str], encoding: str = DEFAULT_ENCODING, method: str = "fast") -> np.ndarray:
    """Return the token count of each text, in order.

    Args:
        texts: the texts (str).
        encoding: ``"o200k_base"``, ``"cl100k_base"`` or ``"hf:PATH"`` (a local
            ``tokenizer.json``: ``exact`` and ``fast`` are both its exact count, and there is
            no estimator for it).
        method: ``"exact"``, ``"fast"`` (default; equal to exact) or ``"estimate"``.

    Returns:
        A 1-D ``numpy.int64`` array of token counts (tokens), one per text.

    Raises:
        TypeError: ``texts`` is a single ``str`` (pass ``[text]``), or an item is not a ``str``.
        CompactionError: an unknown method.
        EncodingDataMissing: an unknown encoding.

    Example:
        >>> count_batch(["hello world", ""]).tolist()
        [2, 0]
    """
    if isinstance(texts, str):
        raise TypeError("count_batch() expected an iterable of str, got one str; pass [text] to count one text")
    items = []
    for position, text in enumerate(texts):
        if type(text) is not str:
            if not isinstance(text, str):
                raise TypeError(f"count_batch() text {position} is a {type(text).__name__}, not a str")
            text = str.__str__(text)  # a str subclass (numpy.str_...): its characters, as a plain str
        items.append(text)
    if isinstance(encoding, str) and encoding.startswith("hf:"):
        return _count_batch_hf(items, encoding, method)
    if method == "exact":
        enc = get_encoding(encoding)
        counts = [len(t) for t in enc.encode_ordinary_batch(items)] if items else []
    elif method == "fast":
        from .fast import count_tokens

        get_encoding(encoding)  # validates the name with the package's error
        counts = [count_tokens(t, encoding) for t in items]
    elif method == "estimate":
        from .estimate import estimate_tokens

        get_encoding(encoding)
        counts = [estimate_tokens(t, encoding) for t in items]
    else:
        raise CompactionError(f"method must be one of {', '.join(METHODS)}; found {method!r}")
    return np.asarray(counts, dtype=np.int64)


def _count_batch_hf(items: list[str], encoding: str, method: str) -> np.ndarray:
    from .hf import load_tokenizer

    if method not in METHODS:
        raise CompactionError(f"method must be one of {', '.join(METHODS)}; found {method!r}")
    if method == "estimate":
        raise EncodingDataMissing(
            f"no estimator table for encoding {encoding!r} (the estimator is fitted to o200k_base "
            f"and cl100k_base); count it with --method fast"
        )
    tokenizer = load_tokenizer(encoding).tokenizer
    counts = [len(e.ids) for e in tokenizer.encode_batch(items, add_special_tokens=False)] if items else []
    return np.asarray(counts, dtype=np.int64)
