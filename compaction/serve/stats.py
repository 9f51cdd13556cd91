"""What a ``compaction serve`` store directory holds, one row per conversation (``serve-stats``).

For each ``<store_dir>/conversations/<id>.sqlite``: its messages, summaries and compaction
events (from the store), and its requests and last use (from the request ledger; the store
file's modification time when the ledger has no row for it).  Read only: the stores and the
ledger are opened without creating anything, so this can run beside a live proxy.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument
from ..store import Store

__all__ = ["ConversationStats", "conversation_stats", "format_stats", "as_json"]


@dataclass(frozen=True)
class ConversationStats:
    """One conversation of a proxy's store directory.

    Attributes:
        conversation: its id (a fork is ``<base>.<n>``).
        messages: messages the store holds.
        summaries: summaries at every level.
        events: compaction events recorded.
        requests: requests the ledger holds for it.
        last_used: when it was last used, an ISO 8601 UTC time (seconds).
    """

    conversation: str
    messages: int
    summaries: int
    events: int
    requests: int
    last_used: str


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ledger(path: Path) -> dict[str, tuple[int, float]]:
    """Requests and the newest request time per conversation (empty when there is no ledger)."""
    if not path.exists():
        return {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
    try:
        rows = db.execute(
            "SELECT conversation, COUNT(*), MAX(at) FROM requests WHERE conversation IS NOT NULL GROUP BY conversation"
        ).fetchall()
    except sqlite3.OperationalError:  # a ledger from before its table was made
        return {}
    finally:
        db.close()
    return {str(name): (int(count), float(at)) for name, count, at in rows}


def conversation_stats(store_dir: str | Path) -> list[ConversationStats]:
    """Return one row per conversation under ``store_dir``, sorted by id.

    Raises:
        InvalidArgument: ``store_dir`` is not a directory.
        StoreError: a conversation's store cannot be opened.
    """
    root = Path(store_dir)
    if not root.is_dir():
        raise InvalidArgument(f"no such store directory: {root}")
    ledger = _ledger(root / "requests.sqlite")
    rows = []
    for path in sorted((root / "conversations").glob("*.sqlite")):
        with Store(path, create=False) as store:
            messages, summaries, events = len(store), len(store.summaries()), len(store.events())
        requests, at = ledger.get(path.stem, (0, path.stat().st_mtime))
        rows.append(ConversationStats(path.stem, messages, summaries, events, requests, _iso(at)))
    return rows


def format_stats(rows: list[ConversationStats]) -> str:
    """Return the rows as an aligned text table with a header line."""
    header = ("conversation", "messages", "summaries", "events", "requests", "last used")
    table = [header] + [
        (r.conversation, str(r.messages), str(r.summaries), str(r.events), str(r.requests), r.last_used) for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = []
    for line in table:
        cells = [line[0].ljust(widths[0])] + [cell.rjust(widths[i]) for i, cell in enumerate(line[1:-1], 1)]
        lines.append("  ".join(cells + [line[-1]]))
    return "\n".join(lines)


def as_json(rows: list[ConversationStats]) -> list[dict[str, Any]]:
    """Return the rows as JSON-ready dicts."""
    return [asdict(r) for r in rows]
