"""The proxy's request ledger: one row per request, for calibration and ``stats``.

A small SQLite file of its own (``<store_dir>/requests.sqlite``), beside the conversation
stores and apart from their schema: the conversation, what was appended and shipped, the
budget, compaction events, the upstream's status and latency, and the usage the provider
reported.  Never a header, a credential or message text.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["RequestRecord", "Ledger"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    conversation TEXT,
    api TEXT NOT NULL,
    model TEXT,
    stream INTEGER NOT NULL,
    status INTEGER NOT NULL,
    error TEXT,
    messages_in INTEGER,
    appended INTEGER,
    stored INTEGER,
    budget INTEGER,
    tokens_shipped INTEGER,
    events INTEGER,
    upstream_ms REAL,
    answer_recorded INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cache_read_tokens INTEGER,
    cache_write_tokens INTEGER
);
CREATE INDEX IF NOT EXISTS requests_conversation ON requests (conversation);
"""


_NOT_STORED = ("tokens_in", "overhead_ms")


@dataclass
class RequestRecord:
    """One request as the ledger keeps it (``None``: not known, e.g. refused before compiling)."""

    api: str
    stream: bool = False
    status: int = 0
    conversation: str | None = None
    model: str | None = None
    error: str | None = None
    messages_in: int | None = None
    appended: int | None = None
    stored: int | None = None
    budget: int | None = None
    tokens_shipped: int | None = None
    events: int | None = None
    upstream_ms: float | None = None
    answer_recorded: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    #: Not in the ledger (metrics only): tokens of the appended messages, the proxy's own time.
    tokens_in: int | None = None
    overhead_ms: float | None = None

    def log_line(self) -> str:
        """Return the one log line of this request (no text, no credentials)."""
        parts = [f"{self.api}", f"status={self.status}", f"conversation={self.conversation or '-'}"]
        for name in ("messages_in", "appended", "tokens_in", "tokens_shipped", "budget", "events", "input_tokens", "output_tokens"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value}")
        if self.upstream_ms is not None:
            parts.append(f"upstream_ms={self.upstream_ms:.0f}")
        if self.stream:
            parts.append("stream")
        if self.error:
            parts.append(f"error={self.error}")
        return " ".join(parts)


class Ledger:
    """The ledger file; thread-safe (one connection, a lock).

    Raises:
        sqlite3.Error: the file cannot be opened or created.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 30000")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()

    def add(self, record: RequestRecord) -> None:
        """Append one request's row."""
        row = asdict(record)
        for name in _NOT_STORED:
            del row[name]
        row["stream"] = int(record.stream)
        row["answer_recorded"] = int(record.answer_recorded)
        row["at"] = time.time()
        names = ", ".join(row)
        marks = ", ".join(f":{name}" for name in row)
        with self._lock:
            self._db.execute(f"INSERT INTO requests ({names}) VALUES ({marks})", row)

    def rows(self, conversation: str | None = None) -> list[dict[str, Any]]:
        """Return the rows, oldest first (of one conversation when given)."""
        query = "SELECT * FROM requests"
        args: tuple[Any, ...] = ()
        if conversation is not None:
            query += " WHERE conversation = ?"
            args = (conversation,)
        with self._lock:
            cursor = self._db.execute(query + " ORDER BY id", args)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
