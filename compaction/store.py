"""The append-only SQLite store of an agent history.

Tables (schema version 1):

* ``messages``: one row per message, ``seq`` 0-based and dense.  Content blocks are kept as
  JSON; an inline base64 image is replaced by a reference ``{"type": "blob", "sha256": ...}``
  and its bytes live once in ``blobs``.  ``import_key`` is a hash chain over the messages of
  the transcript they came from, so importing the same transcript twice adds nothing and
  importing a grown transcript adds only its new tail.
* ``blobs``: content-addressed image bytes with media type, byte size and pixel size (read
  from the image header).
* ``token_counts``: cached non-image token counts per (message, encoding), so compiling never
  re-tokenizes history.
* ``summaries``: text standing for a contiguous range ``[start_seq, end_seq)`` of messages at a
  level (1 covers raw messages, 2 covers level-1 summaries, ...), with provenance.
* ``failures``: chunks that could not be summarized and stay raw.

Compaction never edits ``messages``: summaries are added beside them.  The store runs in WAL
mode; each append or summary is one transaction, so a crash loses nothing committed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .blocks import DATA_URI_RE, Block, Message, canonical_json
from .errors import ImageError, StoreError
from .imageinfo import ImageInfo, image_size
from .tokens.counting import cache_key, message_text_tokens
from .tokens.encodings import DEFAULT_ENCODING

__all__ = ["Store", "StoredSummary", "MessageFacts", "ImageFact", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    source_id TEXT,
    meta TEXT NOT NULL DEFAULT '{}',
    import_key TEXT NOT NULL UNIQUE,
    tool_uses TEXT NOT NULL DEFAULT '[]',
    tool_results TEXT NOT NULL DEFAULT '[]',
    images TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT PRIMARY KEY,
    media_type TEXT,
    byte_size INTEGER NOT NULL,
    width INTEGER,
    height INTEGER,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS token_counts (
    seq INTEGER NOT NULL,
    encoding TEXT NOT NULL,
    text_tokens INTEGER NOT NULL,
    PRIMARY KEY (seq, encoding)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS summaries (
    id INTEGER PRIMARY KEY,
    level INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    end_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    provenance TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    UNIQUE (level, start_seq, end_seq)
);
CREATE INDEX IF NOT EXISTS summaries_by_start ON summaries (start_seq, level);
CREATE INDEX IF NOT EXISTS summaries_by_level_end ON summaries (level, end_seq);
CREATE INDEX IF NOT EXISTS messages_pinned ON messages (seq) WHERE role = 'system';
CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY,
    level INTEGER NOT NULL,
    start_seq INTEGER NOT NULL,
    end_seq INTEGER NOT NULL,
    reason TEXT NOT NULL,
    created_at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class ImageFact:
    """What the store knows of one image in a message (top-level, nested or a data URI).

    Attributes:
        sha256: hex digest of the decoded bytes (``None`` for a URL image).
        media_type: e.g. ``"image/png"``, ``None`` when unknown.
        width, height: pixel size read from the header, ``None`` when unknown.
        byte_size: decoded size in bytes, ``None`` for a URL image.
        source: ``"base64"``, ``"url"`` or ``"data-uri"``.
        url: the URL of a URL image.
    """

    sha256: str | None
    media_type: str | None
    width: int | None
    height: int | None
    byte_size: int | None
    source: str
    url: str | None = None

    @property
    def short_hash(self) -> str:
        return self.sha256[:12] if self.sha256 else "unknown"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_info(cls, info: ImageInfo) -> ImageFact:
        return cls(
            info.sha256, info.media_type, info.width, info.height, info.byte_size, info.source, info.url
        )


#: ``ImageFact.to_json`` leaves out ``None`` fields (a URL image has no hash, size or bytes);
#: reading a row back restores them.
_IMAGE_FACT_DEFAULTS: dict[str, Any] = {
    "sha256": None,
    "media_type": None,
    "width": None,
    "height": None,
    "byte_size": None,
    "url": None,
}


#: ``meta["kind"]`` values of user-role messages that are output, not something the user wrote.
_OUTPUT_KINDS = frozenset({"bash_execution", "tool_output", "command_output", "observation"})


@dataclass(frozen=True)
class MessageFacts:
    """The facts compile and chunking need about a message, without its content.

    Attributes:
        seq: store position.
        role: message role.
        text_tokens: non-image tokens with framing, in the encoding asked for (tokens).
        tool_uses: ids of its ``tool_use`` blocks.
        tool_results: ``tool_use_id`` of its ``tool_result`` blocks.
        images: its images, in document order (nested ones included).
        kind: the source's kind of message when it is not a plain turn (``meta["kind"]``,
            e.g. ``"bash_execution"`` for command output a user ran).
    """

    seq: int
    role: str
    text_tokens: int
    tool_uses: tuple[str, ...]
    tool_results: tuple[str, ...]
    images: tuple[ImageFact, ...] = field(default=())
    kind: str | None = None

    @property
    def is_prompt(self) -> bool:
        """True for a user turn written by the user (not tool or command output)."""
        return self.role == "user" and not self.tool_results and self.kind not in _OUTPUT_KINDS


@dataclass(frozen=True)
class StoredSummary:
    """A summary row: ``text`` stands for messages ``[start_seq, end_seq)`` at ``level``."""

    id: int
    level: int
    start_seq: int
    end_seq: int
    text: str
    provenance: dict[str, Any]


def _image_facts(blocks: Sequence[Block]) -> list[ImageFact]:
    """Return the image facts of ``blocks`` in document order (nested and data URIs included)."""
    from .imageinfo import info_from_block, info_from_data_uri

    facts: list[ImageFact] = []

    def scan_text(text: str) -> None:
        if ";base64," in text:
            for match in DATA_URI_RE.finditer(text):
                try:
                    facts.append(ImageFact.from_info(info_from_data_uri(match.group(0))))
                except ImageError:  # cut short (truncated output): kept as text, shown as a placeholder
                    facts.append(
                        ImageFact(None, f"image/{match.group(1).lower()}", None, None, None, "data-uri")
                    )

    def walk(items: Sequence[Block]) -> None:
        for block in items:
            kind = block.get("type")
            if kind == "image":
                facts.append(ImageFact.from_info(info_from_block(block)))
            elif kind == "text":
                scan_text(block["text"])
            elif kind == "tool_result":
                content = block.get("content", "")
                if isinstance(content, str):
                    scan_text(content)
                else:
                    walk(content)
            elif kind == "tool_use":
                scan_text(canonical_json(block.get("input", {})))

    walk(blocks)
    return facts


class Store:
    """An append-only SQLite store of messages, image blobs, token counts and summaries.

    Args:
        path: a file path, or ``":memory:"``.
        encoding: the default encoding whose token counts are cached at append.
        create: create the file if it does not exist (``False``: a missing file is an error,
            so a mistyped path is not silently a new, empty store).

    Raises:
        StoreError: the file is not a compaction store, or its schema is newer than this code.

    Example:
        >>> store = Store(":memory:")
        >>> store.append([Message("user", ({"type": "text", "text": "hi"},))])
        1
    """

    def __init__(
        self, path: str | Path = ":memory:", *, encoding: str = DEFAULT_ENCODING, create: bool = True
    ) -> None:
        self.path = str(path)
        self.encoding = encoding
        if not create and self.path != ":memory:" and not Path(self.path).is_file():
            raise StoreError(
                f"{self.path}: no store there; create one with `compaction import TRANSCRIPT --store {self.path}`"
            )
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._db.execute("PRAGMA busy_timeout = 30000")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: cannot open as a compaction store: {err}") from err
        if row is None:
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        elif not str(row[0]).strip().isdigit():
            raise StoreError(
                f"{self.path}: cannot open as a compaction store: its schema version {row[0]!r} is not a number"
            )
        elif int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: store schema version {row[0]} is newer than this compaction "
                f"({SCHEMA_VERSION}); upgrade compaction"
            )

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- messages --------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])

    def append(self, messages: Iterable[Message], *, chain_seed: str = "") -> int:
        """Append messages not already stored; return how many were added.

        Each message's identity is a hash chain over ``chain_seed`` and the fingerprints of
        the messages before it in this call, so re-importing a transcript adds nothing and
        a transcript that grew adds its tail.  All messages of one call commit together.

        Raises:
            ImageError: an image block holds invalid base64 (nothing of the call is stored).
            StoreError: the database refused the write.
        """
        key = hashlib.sha256(chain_seed.encode("utf-8")).hexdigest()
        rows = []
        for message in messages:
            key = hashlib.sha256((key + message.fingerprint()).encode("ascii")).hexdigest()
            rows.append((key, message))
        if not rows:
            return 0
        added = 0
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                next_seq = int(
                    self._db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM messages").fetchone()[0]
                )
                for import_key, message in rows:
                    exists = self._db.execute(
                        "SELECT 1 FROM messages WHERE import_key = ?", (import_key,)
                    ).fetchone()
                    if exists:
                        continue
                    self._insert(next_seq, import_key, message)
                    next_seq += 1
                    added += 1
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: append failed: {err}") from err
        return added

    def _insert(self, seq: int, import_key: str, message: Message) -> None:
        content = [self._blobify(block) for block in message.content]
        facts = _image_facts(message.content)
        tool_uses = [b["id"] for b in message.content if b.get("type") == "tool_use"]
        tool_results = [b["tool_use_id"] for b in message.content if b.get("type") == "tool_result"]
        self._db.execute(
            "INSERT INTO messages (seq, role, content, source_id, meta, import_key, tool_uses, tool_results, images)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                seq,
                message.role,
                canonical_json(content),
                message.source_id,
                canonical_json(message.meta),
                import_key,
                json.dumps(tool_uses),
                json.dumps(tool_results),
                json.dumps([f.to_json() for f in facts]),
            ),
        )
        self._db.execute(
            "INSERT OR REPLACE INTO token_counts (seq, encoding, text_tokens) VALUES (?, ?, ?)",
            (seq, cache_key(self.encoding), message_text_tokens(message, self.encoding)),
        )

    def _blobify(self, block: Block) -> Block:
        kind = block.get("type")
        if kind == "image" and block["source"].get("type") == "base64":
            source = block["source"]
            try:
                data = base64.b64decode(source["data"], altchars=b"-_", validate=False)  # URL-safe too
            except (binascii.Error, ValueError) as err:
                raise ImageError(f"image block has invalid base64 data: {err}") from err
            digest = hashlib.sha256(data).hexdigest()
            try:
                media_type, width, height = image_size(data)
            except ImageError:
                media_type, width, height = source.get("media_type"), None, None
            self._db.execute(
                "INSERT OR IGNORE INTO blobs (sha256, media_type, byte_size, width, height, data)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (digest, source.get("media_type") or media_type, len(data), width, height, data),
            )
            ref = {"type": "blob", "sha256": digest, "media_type": source.get("media_type")}
            return {**block, "source": ref}
        if kind == "tool_result" and isinstance(block.get("content"), list):
            return {**block, "content": [self._blobify(b) for b in block["content"]]}
        return block

    def _hydrate(self, block: Block) -> Block:
        kind = block.get("type")
        if kind == "image" and block["source"].get("type") == "blob":
            ref = block["source"]
            row = self._db.execute("SELECT data FROM blobs WHERE sha256 = ?", (ref["sha256"],)).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: image blob {ref['sha256']} is missing")
            source = {
                "type": "base64",
                "media_type": ref.get("media_type"),
                "data": base64.b64encode(row[0]).decode(),
            }
            return {**block, "source": source}
        if kind == "tool_result" and isinstance(block.get("content"), list):
            return {**block, "content": [self._hydrate(b) for b in block["content"]]}
        return block

    def messages(self, start: int = 0, end: int | None = None) -> list[Message]:
        """Return messages with ``start <= seq < end`` (images rehydrated), in order."""
        end = self.next_seq() if end is None else end
        rows = self._db.execute(
            "SELECT seq, role, content, source_id, meta FROM messages WHERE seq >= ? AND seq < ? ORDER BY seq",
            (start, end),
        ).fetchall()
        return [
            Message(
                role, tuple(self._hydrate(b) for b in json.loads(content)), seq, source_id, json.loads(meta)
            )
            for seq, role, content, source_id, meta in rows
        ]

    def iter_messages(self, batch: int = 512) -> Iterator[Message]:
        """Yield every message in order, reading ``batch`` at a time."""
        start, end = 0, self.next_seq()
        while start < end:
            yield from self.messages(start, min(end, start + batch))
            start += batch

    def next_seq(self) -> int:
        """Return the seq the next appended message will get (= the number of messages)."""
        return int(self._db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM messages").fetchone()[0])

    def facts(
        self, start: int = 0, end: int | None = None, *, encoding: str | None = None
    ) -> list[MessageFacts]:
        """Return :class:`MessageFacts` for ``start <= seq < end``; counts missing tokens once.

        Args:
            encoding: the encoding of ``text_tokens`` (default: the store's).
        """
        encoding = encoding or self.encoding
        end = self.next_seq() if end is None else end
        rows = self._db.execute(
            "SELECT m.seq, m.role, m.tool_uses, m.tool_results, m.images, t.text_tokens,"
            " json_extract(m.meta, '$.kind') FROM messages m"
            " LEFT JOIN token_counts t ON t.seq = m.seq AND t.encoding = ?"
            " WHERE m.seq >= ? AND m.seq < ? ORDER BY m.seq",
            (cache_key(encoding), start, end),
        ).fetchall()
        missing = [r[0] for r in rows if r[5] is None]
        counted: dict[int, int] = {}
        if missing:
            for message in self._messages_by_seq(missing):
                assert message.seq is not None
                counted[message.seq] = message_text_tokens(message, encoding)
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO token_counts (seq, encoding, text_tokens) VALUES (?, ?, ?)",
                    [(seq, cache_key(encoding), tokens) for seq, tokens in counted.items()],
                )
            except sqlite3.OperationalError:  # a read-only store: the counts are a cache, use them uncached
                pass
        return [
            MessageFacts(
                seq,
                role,
                counted[seq] if tokens is None else tokens,
                tuple(json.loads(uses)),
                tuple(json.loads(results)),
                tuple(ImageFact(**{**_IMAGE_FACT_DEFAULTS, **f}) for f in json.loads(images)),
                kind if isinstance(kind, str) else None,
            )
            for seq, role, uses, results, images, tokens, kind in rows
        ]

    def _messages_by_seq(self, seqs: list[int]) -> list[Message]:
        out: list[Message] = []
        for seq in seqs:
            out.extend(self.messages(seq, seq + 1))
        return out

    def blob(self, sha256: str) -> bytes:
        """Return the stored bytes of the image blob ``sha256``.

        Raises:
            StoreError: no such blob.
        """
        row = self._db.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no image blob {sha256}")
        return bytes(row[0])

    def blob_hashes(self) -> list[str]:
        """Return the sha256 of every stored blob, sorted."""
        return [r[0] for r in self._db.execute("SELECT sha256 FROM blobs ORDER BY sha256")]

    # -- summaries -------------------------------------------------------------------------
    def add_summary(
        self, level: int, start_seq: int, end_seq: int, text: str, provenance: dict[str, Any]
    ) -> int:
        """Store a summary of ``[start_seq, end_seq)`` at ``level``; return its id.

        Raises:
            StoreError: empty text, a bad range, or a write failure.
        """
        if not text.strip():
            raise StoreError(f"refusing to store an empty level-{level} summary of [{start_seq}, {end_seq})")
        if not 0 <= start_seq < end_seq:
            raise StoreError(f"bad summary range [{start_seq}, {end_seq})")
        try:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO summaries (level, start_seq, end_seq, text, provenance, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (level, start_seq, end_seq, text, canonical_json(provenance), time.time()),
            )
        except sqlite3.DatabaseError as err:
            raise StoreError(f"{self.path}: storing a summary failed: {err}") from err
        if cur.rowcount == 0:
            row = self._db.execute(
                "SELECT id FROM summaries WHERE level = ? AND start_seq = ? AND end_seq = ?",
                (level, start_seq, end_seq),
            ).fetchone()
            return int(row[0])
        return int(cur.lastrowid or 0)

    def summaries(self, level: int | None = None) -> list[StoredSummary]:
        """Return summaries (of one level, or all) ordered by level then start."""
        query = "SELECT id, level, start_seq, end_seq, text, provenance FROM summaries"
        args: tuple[Any, ...] = ()
        if level is not None:
            query += " WHERE level = ?"
            args = (level,)
        query += " ORDER BY level, start_seq"
        return [
            StoredSummary(i, lv, s, e, text, json.loads(prov))
            for i, lv, s, e, text, prov in self._db.execute(query, args).fetchall()
        ]

    def summary_frontier(self, level: int = 1) -> int:
        """Return the end of the newest summary of ``level`` (0 if none).

        Level-1 summaries are added contiguously from seq 0 (the compactor only closes
        chunks at the frontier), so for level 1 this is where unsummarized history starts.
        """
        row = self._db.execute("SELECT MAX(end_seq) FROM summaries WHERE level = ?", (level,)).fetchone()
        return int(row[0] or 0)

    def coarsest_summary_at(self, start_seq: int, max_end_seq: int) -> StoredSummary | None:
        """Return the highest-level summary starting at ``start_seq`` and ending by ``max_end_seq``."""
        row = self._db.execute(
            "SELECT id, level, start_seq, end_seq, text, provenance FROM summaries"
            " WHERE start_seq = ? AND end_seq <= ? ORDER BY level DESC, end_seq DESC LIMIT 1",
            (start_seq, max_end_seq),
        ).fetchone()
        if row is None:
            return None
        return StoredSummary(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]))

    def summaries_within(self, level: int, start_seq: int, end_seq: int) -> list[StoredSummary]:
        """Return the summaries of ``level`` inside ``[start_seq, end_seq)``, by start."""
        rows = self._db.execute(
            "SELECT id, level, start_seq, end_seq, text, provenance FROM summaries"
            " WHERE level = ? AND start_seq >= ? AND start_seq < ? AND end_seq <= ? ORDER BY start_seq",
            (level, start_seq, end_seq, end_seq),
        ).fetchall()
        return [StoredSummary(i, lv, s, e, text, json.loads(prov)) for i, lv, s, e, text, prov in rows]

    def level_starts_before(self, level: int, before_seq: int, limit: int = 64) -> list[int]:
        """Return up to ``limit`` start seqs of ``level`` summaries below ``before_seq``, newest first."""
        rows = self._db.execute(
            "SELECT start_seq FROM summaries WHERE level = ? AND start_seq < ? ORDER BY start_seq DESC LIMIT ?",
            (level, before_seq, limit),
        )
        return [int(r[0]) for r in rows]

    def pinned_seqs(self) -> list[int]:
        """Return the seqs of the system messages (pinned: always shown raw), in order."""
        return [
            int(r[0]) for r in self._db.execute("SELECT seq FROM messages WHERE role = 'system' ORDER BY seq")
        ]

    def record_failure(self, level: int, start_seq: int, end_seq: int, reason: str) -> None:
        """Record that ``[start_seq, end_seq)`` could not be summarized at ``level`` (it stays raw)."""
        self._db.execute(
            "INSERT INTO failures (level, start_seq, end_seq, reason, created_at) VALUES (?, ?, ?, ?, ?)",
            (level, start_seq, end_seq, reason, time.time()),
        )

    def failures(self) -> list[dict[str, Any]]:
        """Return the recorded summarizer failures, oldest first."""
        rows = self._db.execute(
            "SELECT level, start_seq, end_seq, reason FROM failures ORDER BY id"
        ).fetchall()
        return [{"level": lv, "start_seq": s, "end_seq": e, "reason": r} for lv, s, e, r in rows]

    def image_count(self) -> int:
        """Return the number of distinct stored image blobs."""
        return int(self._db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0])
