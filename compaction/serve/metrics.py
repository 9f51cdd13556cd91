"""The proxy's counters in the Prometheus text exposition format (``GET /metrics``).

Counted per request once it ends (:meth:`Metrics.observe`): requests by API and status,
upstream errors by code (the proxy's own 502 / 504 and the upstream's 4xx / 5xx), compaction
events, tokens appended to the stores (what clients brought that was new), tokens shipped
upstream, the input tokens the provider reported, and two latency histograms: the proxy's own
time before the upstream call (parsing, storing, compiling) and the upstream's answer time.
No label holds a conversation id, a model name or anything a client chose freely, so the
series stay few.  Thread-safe.
"""

from __future__ import annotations

import threading
from collections import Counter

from .ledger import RequestRecord

__all__ = ["Metrics", "BUCKETS"]

#: Histogram bucket upper bounds (seconds).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.count = 0
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[index] += 1

    def lines(self, name: str) -> list[str]:
        out = [f'{name}_bucket{{le="{bound:g}"}} {count}' for bound, count in zip(BUCKETS, self.counts, strict=True)]
        out += [f'{name}_bucket{{le="+Inf"}} {self.count}', f"{name}_sum {self.total:.6f}", f"{name}_count {self.count}"]
        return out


class Metrics:
    """Counters of one proxy process (they start at zero when it starts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._upstream_errors: Counter[str] = Counter()
        self._totals: Counter[str] = Counter()
        self._overhead = _Histogram()
        self._upstream = _Histogram()

    def observe(self, record: RequestRecord) -> None:
        """Count one finished request (its ``overhead_ms`` is ``None`` when it never reached the upstream)."""
        with self._lock:
            self._requests[(record.api, record.status)] += 1
            if record.error is not None and (record.error.startswith("upstream") or record.error == "bad_upstream"):
                self._upstream_errors[record.error] += 1
            elif record.upstream_ms is not None and record.status >= 400:
                self._upstream_errors[f"http_{record.status}"] += 1
            self._totals["events"] += record.events or 0
            self._totals["tokens_appended"] += record.tokens_in or 0
            self._totals["tokens_shipped"] += record.tokens_shipped or 0
            self._totals["input_tokens"] += record.input_tokens or 0
            if record.overhead_ms is not None:
                self._overhead.add(record.overhead_ms / 1000)
            if record.upstream_ms is not None:
                self._upstream.add(record.upstream_ms / 1000)

    def render(self) -> str:
        """Return the text exposition (``text/plain; version=0.0.4``)."""
        with self._lock:
            lines = ["# HELP compaction_serve_requests_total Requests answered, by API and HTTP status.",
                     "# TYPE compaction_serve_requests_total counter"]
            lines += [f'compaction_serve_requests_total{{api="{api}",status="{status}"}} {count}'
                      for (api, status), count in sorted(self._requests.items())]
            lines += ["# HELP compaction_serve_upstream_errors_total Upstream failures, by code "
                      "(upstream_timeout, upstream_too_large, bad_upstream, http_<status>).",
                      "# TYPE compaction_serve_upstream_errors_total counter"]
            lines += [f'compaction_serve_upstream_errors_total{{code="{code}"}} {count}'
                      for code, count in sorted(self._upstream_errors.items())]
            for name, key, text in (
                ("compaction_serve_compaction_events_total", "events", "Compaction events the requests ran."),
                ("compaction_serve_tokens_in_total", "tokens_appended",
                 "Tokens of the messages the requests appended to the stores (new input)."),
                ("compaction_serve_tokens_shipped_total", "tokens_shipped", "Tokens of the compiled requests sent upstream."),
                ("compaction_serve_upstream_input_tokens_total", "input_tokens", "Input tokens the provider reported."),
            ):
                lines += [f"# HELP {name} {text}", f"# TYPE {name} counter", f"{name} {self._totals[key]}"]
            for name, histogram, text in (
                ("compaction_serve_overhead_seconds", self._overhead,
                 "The proxy's time per request before the upstream call (parse, store, compile)."),
                ("compaction_serve_upstream_seconds", self._upstream, "The upstream's time to a complete answer."),
            ):
                lines += [f"# HELP {name} {text}", f"# TYPE {name} histogram"] + histogram.lines(name)
        return "\n".join(lines) + "\n"
