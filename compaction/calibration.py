"""Calibration of closed models: a per-model correction fitted from the provider's reported usage.

Our counts are exact for OpenAI encodings and local ``hf:`` tokenizers; for a model whose
tokenizer is not public (Claude, Gemini) the count of a request is an o200k count, off by a
model-dependent factor.  Each request we ship and the provider answers gives one sample: the
``usage`` it returned beside the tokens we counted (``store.record_usage``, recorded by the
compactor for summarizer calls and by the proxy for the calls it forwards).

The fit, per model (:func:`fit_correction`):

* a sample's ratio is ``provider input tokens / compiled tokens``; records without a usage or
  with a count of 0 are left out;
* only the newest :data:`WINDOW` records count (a provider that changes its tokenizer is
  followed within that many requests);
* the correction is the **median** of the ratios (robust: a few requests the provider padded,
  e.g. with a hidden system prompt or tool definitions we did not see, move it little), clamped
  to :data:`CLAMP` = [0.5, 2.0];
* below :data:`MIN_SAMPLES` (5) samples there is no correction;
* it carries its sample count, the ratios' p10 / p90 (nearest-rank) and :data:`FIT_VERSION`
  (the algorithm's version) with the id of the newest record it used, so a fit is named exactly.

The fit compile applies is kept per store object and model (:func:`correction_for`) until a new
usage record of the model arrives (the store's newest record id, one index probe, changes), so an
ordinary turn does not read the :data:`WINDOW` records again.

Applied in compile (:func:`calibrated_budget`): a correction ``c > 1`` (the provider counts
more than we do) makes the effective budget ``floor(budget / c)``, so the request the
provider counts stays within the user's budget.  A correction below 1 leaves the budget as the
user gave it unless the recipe sets ``calibrate_raise_budget = true``: a fit that says we
over-count is no reason to exceed what the user asked for, and a stale or noisy fit that
raised it could overflow the model's window, while not raising costs only a slightly smaller
request.

Example:
    >>> fit_correction([1.10, 1.12, 1.2, 1.11, 1.13], model="claude-sonnet-4-5").factor
    1.12
"""

from __future__ import annotations

import math
import sqlite3
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidArgument, StoreError, found

__all__ = [
    "CLAMP",
    "FIT_VERSION",
    "MIN_SAMPLES",
    "WINDOW",
    "Correction",
    "UsageCounts",
    "calibrated_budget",
    "correction_for",
    "fit_correction",
    "fits_from_ledger",
    "fits_from_store",
    "record_proxy_usage",
    "record_request_usage",
    "usage_counts",
]

#: The fit's algorithm version (median of the newest ratios, clamped); bump when it changes.
FIT_VERSION = "1"
#: Fewest samples that give a correction.
MIN_SAMPLES = 5
#: The range a correction is clamped to.
CLAMP = (0.5, 2.0)
#: The newest samples a fit uses.
WINDOW = 500


@dataclass(frozen=True)
class UsageCounts:
    """A provider's usage, normalized: ``input_tokens`` counts every prompt token, cached ones included (tokens)."""

    input_tokens: int | None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class Correction:
    """A per-model correction: the provider counts ``factor`` times the tokens we count.

    Attributes:
        model: the model it was fitted for.
        factor: the clamped median of the ratios (provider input tokens / our tokens).
        samples: the ratios it was fitted from.
        p10: the 10th percentile of the ratios (nearest rank, unclamped).
        p90: the 90th percentile of the ratios (nearest rank, unclamped).
        version: :data:`FIT_VERSION`, then ``@`` and the newest record id used (``"1@42"``).
        clamped: whether the median fell outside :data:`CLAMP`.
    """

    model: str
    factor: float
    samples: int
    p10: float
    p90: float
    version: str
    clamped: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return the correction as a JSON-ready mapping."""
        return {
            "model": self.model,
            "factor": self.factor,
            "samples": self.samples,
            "p10": self.p10,
            "p90": self.p90,
            "version": self.version,
            "clamped": self.clamped,
        }


def _count(value: Any) -> int | None:
    """Return a non-negative integer count, else ``None`` (a provider's field may be anything)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_counts(request_format: str, usage: Mapping[str, Any] | None) -> UsageCounts | None:
    """Normalize a provider's ``usage`` object so that ``input_tokens`` counts every prompt token.

    * OpenAI Chat: ``prompt_tokens`` (cached ones included), ``prompt_tokens_details.cached_tokens``,
      ``completion_tokens``.
    * OpenAI Responses: ``input_tokens`` (cached included), ``input_tokens_details.cached_tokens``,
      ``output_tokens``.
    * Anthropic Messages (``request_format == "anthropic"``): ``input_tokens`` counts only the
      uncached part, so the total is ``input_tokens + cache_read_input_tokens +
      cache_creation_input_tokens`` (Anthropic's prompt-caching documentation).

    Args:
        request_format: ``"openai"``, ``"anthropic"``, ``"openai-responses"``...
        usage: the ``usage`` object of the answer, or ``None``.

    Returns:
        The counts (tokens), or ``None`` when ``usage`` holds no prompt token count.
    """
    if not isinstance(usage, Mapping):
        return None
    if "prompt_tokens" in usage:
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else None
        prompt = _count(usage.get("prompt_tokens"))
        return (
            None
            if prompt is None
            else UsageCounts(prompt, cached, None, _count(usage.get("completion_tokens")))
        )
    uncached = _count(usage.get("input_tokens"))
    if uncached is None:
        return None
    output = _count(usage.get("output_tokens"))
    if request_format == "anthropic":
        read = _count(usage.get("cache_read_input_tokens"))
        write = _count(usage.get("cache_creation_input_tokens"))
        return UsageCounts(uncached + (read or 0) + (write or 0), read, write, output)
    details = usage.get("input_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    return UsageCounts(uncached, cached, None, output)


def record_request_usage(
    store: object,
    request_format: str,
    model: str,
    compiled_tokens: int,
    usage: Mapping[str, Any] | None,
    *,
    source: str,
) -> int | None:
    """Record a shipped request's count beside the provider's ``usage`` in ``store``, if it keeps usage.

    Nothing is recorded when the provider returned no usable ``usage`` (there is nothing to
    fit) or the store has no ``record_usage``.

    Returns:
        The record's id, or ``None`` when nothing was recorded.

    Raises:
        StoreError: the store refused the write.
    """
    counts = usage_counts(request_format, usage)
    record = getattr(store, "record_usage", None)
    if counts is None or record is None or not model:
        return None
    return int(
        record(
            model,
            request_format,
            compiled_tokens,
            input_tokens=counts.input_tokens,
            cache_read_tokens=counts.cache_read_tokens,
            cache_write_tokens=counts.cache_write_tokens,
            output_tokens=counts.output_tokens,
            source=source,
        )
    )


#: The request format of each API the proxy serves (as :mod:`compaction.serve.app` maps them).
_PROXY_FORMATS = {"openai": "openai", "anthropic": "anthropic", "responses": "openai-responses"}


def record_proxy_usage(store: object, record: Any) -> int | None:
    """Record a proxied request's usage in its conversation's store (bookkeeping: never raises).

    ``record`` is the proxy ledger's :class:`~compaction.serve.ledger.RequestRecord`: its
    ``tokens_shipped`` (our count of the compiled request) and the usage the upstream
    reported, which keeps Anthropic's uncached ``input_tokens`` apart from cache reads and
    writes (summed here, as :func:`usage_counts` does).

    Returns:
        The record's id, or ``None`` when there was nothing to record (no usage, nothing
        shipped, no model) or the store refused the write (the request is not failed over it).
    """
    api, model, shipped, uncached = record.api, record.model, record.tokens_shipped, record.input_tokens
    if not (
        isinstance(model, str) and model and isinstance(shipped, int) and shipped > 0 and uncached is not None
    ):
        return None
    request_format = _PROXY_FORMATS.get(api, str(api))
    read, write = record.cache_read_tokens, record.cache_write_tokens
    total = uncached + ((read or 0) + (write or 0) if request_format == "anthropic" else 0)
    write_usage = getattr(store, "record_usage", None)
    if write_usage is None:
        return None
    try:
        return int(
            write_usage(
                model,
                request_format,
                shipped,
                input_tokens=total,
                cache_read_tokens=read,
                cache_write_tokens=write,
                output_tokens=record.output_tokens,
                source="proxy",
            )
        )
    except (StoreError, InvalidArgument):
        return None


def _nearest_rank(ordered: Sequence[float], share: float) -> float:
    """Return the nearest-rank percentile ``share`` (0 to 1) of the sorted ``ordered``."""
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def fit_correction(
    ratios: Iterable[float],
    *,
    model: str,
    newest_id: int = 0,
    min_samples: int = MIN_SAMPLES,
    clamp: tuple[float, float] = CLAMP,
) -> Correction | None:
    """Fit a correction from per-request ratios (provider input tokens / our compiled tokens).

    Args:
        ratios: one positive, finite ratio per request (others are left out).
        model: the model they were measured on.
        newest_id: the id of the newest record used (part of :attr:`Correction.version`).
        min_samples: fewest ratios that give a correction.
        clamp: the range the correction is clamped to (low <= high, both positive).

    Returns:
        The median, clamped, with the sample count, p10 / p90 and version; ``None`` below
        ``min_samples`` ratios.

    Raises:
        InvalidArgument: a clamp that is not two positive numbers in order, a ``min_samples`` below 1.
    """
    low, high = clamp
    if not (0 < low <= high and math.isfinite(high)):
        raise InvalidArgument(
            f"a calibration clamp must be two positive numbers, low <= high; found {clamp!r}"
        )
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise InvalidArgument(f"min_samples must be an integer of 1 or more; found {found(min_samples)}")
    ordered = sorted(r for r in ratios if isinstance(r, (int, float)) and math.isfinite(r) and r > 0)
    if len(ordered) < min_samples:
        return None
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    factor = min(high, max(low, median))
    return Correction(
        model=model,
        factor=round(factor, 6),
        samples=len(ordered),
        p10=round(_nearest_rank(ordered, 0.10), 6),
        p90=round(_nearest_rank(ordered, 0.90), 6),
        version=f"{FIT_VERSION}@{newest_id}",
        clamped=factor != median,
    )


#: Per store object (held weakly), per model: (newest usage record id when fitted, the fit).
_FITS: weakref.WeakKeyDictionary[object, dict[str, tuple[int, Correction | None]]] = (
    weakref.WeakKeyDictionary()
)
_FITS_LOCK = threading.Lock()


def _fit_newest(read: Any, model: str) -> Correction | None:
    """Fit ``model``'s correction from the newest :data:`WINDOW` records ``read`` returns."""
    records = [r for r in read(model, WINDOW) if r.ratio is not None]
    if not records:
        return None
    return fit_correction([r.ratio for r in records], model=model, newest_id=records[-1].id)


def correction_for(store: object, model: str) -> Correction | None:
    """Return the correction fitted from ``store``'s usage records of ``model`` (``None``: too few).

    The fit reads the newest :data:`WINDOW` records of ``model``.  It is kept for this store
    object and model until the store's newest record id of ``model`` (``newest_usage_id``,
    one index probe) changes, so a turn with no new usage record reads no records.  A record
    another process makes in the same database changes that id too.  A store without
    ``newest_usage_id`` is fitted on every call; one without usage records
    (no ``usage_records``) has no correction.

    Raises:
        StoreError: the store could not be read.

    Example:
        >>> from compaction.store import SQLiteStore
        >>> store = SQLiteStore()
        >>> for _ in range(5):
        ...     _ = store.record_usage("m", "anthropic", 1000, input_tokens=1100)
        >>> correction_for(store, "m").factor
        1.1
    """
    read = getattr(store, "usage_records", None)
    if read is None:
        return None
    newest_id = getattr(store, "newest_usage_id", None)
    if newest_id is None:
        return _fit_newest(read, model)
    newest = int(newest_id(model))
    if newest == 0:
        return None
    try:
        with _FITS_LOCK:
            kept = _FITS.get(store, {}).get(model)
    except TypeError:  # an object that cannot be held weakly or hashed: fitted every call
        return _fit_newest(read, model)
    if kept is not None and kept[0] == newest:
        return kept[1]
    fit = _fit_newest(read, model)
    with _FITS_LOCK:
        _FITS.setdefault(store, {})[model] = (newest, fit)
    return fit


def fits_from_store(
    store: object, conversation: str | None = None
) -> list[tuple[str, Correction | None, int]]:
    """Return, per model in ``store``'s usage records (by name), its fit and its samples.

    Args:
        store: a store with ``usage_records``.
        conversation: only the records made under this conversation (``None``: every one).

    Returns:
        ``(model, correction or None below the minimum, samples with a usage)`` per model.

    Raises:
        StoreError: the store could not be read.
    """
    read = getattr(store, "usage_records", None)
    if read is None:
        return []
    by_model: dict[str, list[tuple[int, float | None]]] = {}
    for r in read(None):
        if conversation is None or r.conversation == conversation:
            by_model.setdefault(r.model, []).append((r.id, r.ratio))
    return [_fit_of(model, records) for model, records in sorted(by_model.items())]


def _fit_of(model: str, records: Sequence[tuple[int, float | None]]) -> tuple[str, Correction | None, int]:
    """Fit the newest :data:`WINDOW` of ``records`` (id, ratio or ``None``); return (model, fit, samples)."""
    newest = [(i, r) for i, r in records[-WINDOW:] if r is not None]
    fit = fit_correction([r for _i, r in newest], model=model, newest_id=newest[-1][0] if newest else 0)
    return model, fit, len(newest)


def fits_from_ledger(
    path: str | Path, conversation: str | None = None
) -> list[tuple[str, Correction | None, int]]:
    """Return, per model in a proxy ledger (``<store_dir>/requests.sqlite``), its fit and samples.

    A row is a sample when the upstream answered (status 2xx) with a usage and the proxy
    shipped a compiled request (``tokens_shipped > 0``).  The ledger keeps Anthropic's
    uncached ``input_tokens`` apart from the cache reads and writes, so their sum is the
    provider's prompt count there; OpenAI's ``prompt_tokens`` include cached tokens already.

    Raises:
        StoreError: the file is missing or not a ledger.
    """
    target = Path(path)
    if not target.is_file():
        raise StoreError(
            f"{target}: no proxy ledger there (compaction serve writes <store_dir>/requests.sqlite)"
        )
    query = (
        "SELECT id, api, model, tokens_shipped, input_tokens, cache_read_tokens, cache_write_tokens FROM requests"
        " WHERE status BETWEEN 200 AND 299 AND tokens_shipped > 0 AND input_tokens IS NOT NULL AND model IS NOT NULL"
    )
    args: tuple[str, ...] = ()
    if conversation is not None:
        query += " AND conversation = ?"
        args = (conversation,)
    try:
        db = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
        try:
            rows = db.execute(query + " ORDER BY id", args).fetchall()
        finally:
            db.close()
    except sqlite3.Error as err:
        raise StoreError(f"{target}: cannot read as a proxy ledger: {err}") from err
    by_model: dict[str, list[tuple[int, float | None]]] = {}
    for i, api, model, shipped, uncached, read, write in rows:
        total = int(uncached) + ((int(read or 0) + int(write or 0)) if api == "anthropic" else 0)
        by_model.setdefault(str(model), []).append((int(i), total / int(shipped)))
    return [_fit_of(model, samples) for model, samples in sorted(by_model.items())]


def calibrated_budget(budget: int, correction: Correction | None, *, raise_budget: bool = False) -> int:
    """Return the budget to compile for so that the provider's count stays within ``budget``.

    ``floor(budget / factor)`` for a factor above 1; for a factor below 1, ``budget`` itself
    unless ``raise_budget`` (then ``floor(budget / factor)`` too); ``budget`` without a correction.

    Args:
        budget: the user's budget (tokens, at least 1).
        correction: the model's correction, or ``None``.
        raise_budget: let a correction below 1 raise the budget.

    Returns:
        The effective budget (tokens, at least 1).

    Example:
        >>> calibrated_budget(10_000, fit_correction([1.25] * 5, model="m"))
        8000
    """
    if correction is None or (correction.factor <= 1 and not raise_budget):
        return budget
    return max(1, math.floor(budget / correction.factor))
