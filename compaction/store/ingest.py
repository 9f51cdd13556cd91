"""The backend-neutral half of a store: a message's stored form, and how appending names it.

A backend stores what this module computes and reads back through it:

* **Identity.**  :func:`import_keys` chains a hash over ``chain_seed`` and each message's
  fingerprint, so re-importing a transcript adds nothing and a grown transcript adds its tail.
* **Stored form.**  :func:`prepare` turns a :class:`~compaction.blocks.Message` into a
  :class:`PreparedMessage`: its content as canonical JSON with every inline base64 image
  replaced by a ``{"type": "blob", "sha256": ...}`` reference (:func:`blobify`), the
  :class:`Blob` rows those references need, its tool ids, its image facts and its cached
  non-image token count.
* **Reading back.**  :func:`hydrate` turns blob references back into base64 image blocks
  (byte-exact), and the ``*_from_row`` helpers rebuild messages, facts and summaries from
  the stored columns.

Nothing here runs SQL; the backends (:mod:`.sqlite`, later PostgreSQL) only move these
values in and out of tables.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ..blocks import Block, Message, canonical_json
from ..errors import ImageError, InvalidArgument, InvalidMessage, StoreError, found
from ..imageinfo import decode_base64, image_size
from ..images import ImageSite, find_image_sites
from ..tokens.counting import cache_key, message_text_tokens
from .model import MessageFacts, PromptTurn, StoredSummary

__all__ = [
    "Blob",
    "PreparedMessage",
    "blobify",
    "chain_key",
    "chain_step",
    "check_summary",
    "checked_messages",
    "count_text_tokens",
    "facts_from_row",
    "prompt_from_row",
    "hydrate",
    "import_keys",
    "message_from_row",
    "prefix_keys",
    "prepare",
    "seed_key",
    "sql_text",
    "summary_from_row",
    "text_from_sql",
    "token_key",
]

#: A function returning the bytes of the blob with the given sha256 (raising StoreError if absent).
BlobLoader = Callable[[str], bytes]


@dataclass(frozen=True)
class Blob:
    """An image's bytes with what the store records of them (content-addressed by ``sha256``).

    Attributes:
        sha256: hex digest of ``data``.
        media_type: the block's declared media type, else the one read from the header.
        byte_size: ``len(data)`` (bytes).
        width, height: pixel size read from the header, ``None`` when unreadable (pixels).
        data: the decoded image bytes.
    """

    sha256: str
    media_type: str | None
    byte_size: int
    width: int | None
    height: int | None
    data: bytes


@dataclass(frozen=True)
class PreparedMessage:
    """A message in the form a backend stores it: every column computed, JSON encoded.

    Attributes:
        role, source_id: as on the message.
        content: canonical JSON of the blocks, inline base64 images replaced by blob references.
        meta: canonical JSON of ``message.meta``.
        tool_uses, tool_results: JSON lists of the ``tool_use`` ids and ``tool_use_id`` values.
        images: JSON list of the :class:`~compaction.images.ImageSite` of every image, in document order.
        token_key: the token-count cache key of the encoding counted in.
        text_tokens: non-image tokens with framing in that encoding (tokens).
        blobs: the image bytes the references point at, one per distinct hash.
    """

    role: str
    content: str
    source_id: str | None
    meta: str
    tool_uses: str
    tool_results: str
    images: str
    token_key: str
    text_tokens: int
    blobs: tuple[Blob, ...]


def seed_key(chain_seed: str = "") -> str:
    """Return the start of an import-key chain: the hash of ``chain_seed`` (64 hex digits)."""
    return hashlib.sha256(chain_seed.encode("utf-8")).hexdigest()


def chain_key(previous: str, message: Message) -> str:
    """Return the import key of ``message`` following the key ``previous`` in its chain."""
    return _chain(previous, message.fingerprint())


def chain_step(previous: str, fingerprint: str) -> str:
    """Return the import key of the message whose :meth:`~compaction.blocks.Message.fingerprint` is
    ``fingerprint``, following the key ``previous``: sha256 of the two hex digests joined (64 hex digits)."""
    return hashlib.sha256((previous + fingerprint).encode("ascii")).hexdigest()


_chain = chain_step


def import_keys(messages: Iterable[Message], chain_seed: str = "") -> list[tuple[str, Message]]:
    """Return each message with its import key: a hash chain over ``chain_seed`` and fingerprints.

    Args:
        messages: the messages of one transcript (or of one append), in order.
        chain_seed: names the transcript's source (its format), so equal messages from
            different sources are different messages.

    Returns:
        ``(key, message)`` pairs in order; a key is 64 hex digits (SHA-256).

    Example:
        >>> [k for k, _ in import_keys([])]
        []
    """
    key = seed_key(chain_seed)
    keyed: list[tuple[str, Message]] = []
    for message in messages:
        key = chain_key(key, message)
        keyed.append((key, message))
    return keyed


def prefix_keys(previous: str, message: Message) -> list[str]:
    """Return the import keys ``message`` would have had with only its first 1, 2, ... blocks.

    A transcript read while it was being written can end inside a message that a parser
    builds from several source lines: the answers to parallel tool calls (one line each,
    merged into one message) or one assistant response written a block a line.  The
    snapshot's last message is then a *prefix* of the grown file's message, with a
    different fingerprint, so its key differs.  These keys find that stored prefix, so the
    store can complete it instead of storing the blocks again (see
    :meth:`~compaction.store.sqlite.SQLiteStore.append`).

    Args:
        previous: the key of the message before ``message`` (or the chain's seed key).
        message: the message as the grown transcript has it.

    Returns:
        One key per proper prefix (``len(message.content) - 1`` keys, shortest first); empty
        when the message has one block, or when its fingerprint is not the canonical JSON
        this function builds incrementally (then no prefix is looked for).

    Example:
        >>> prefix_keys(seed_key(), Message("user", ({"type": "text", "text": "a"},)))
        []
    """
    blocks = message.content
    if len(blocks) < 2:
        return []
    # The fingerprint hashes canonical_json({"content": [...], "role": ...}); keys are
    # sorted, so the content comes first and each prefix's payload shares its start.
    try:
        parts = [canonical_json(block).encode("utf-8") for block in blocks]
        tail = ("],\"role\":" + canonical_json(message.role) + "}").encode("utf-8")
        running = hashlib.sha256(b'{"content":[')
        fingerprints = []
        for index, part in enumerate(parts):
            if index:
                running.update(b",")
            running.update(part)
            done = running.copy()
            done.update(tail)
            fingerprints.append(done.hexdigest())
        if fingerprints[-1] != message.fingerprint():
            return []  # the fingerprint changed shape: no prefix can be recognised
    except (UnicodeEncodeError, ValueError):
        return []
    return [_chain(previous, fingerprint) for fingerprint in fingerprints[:-1]]


def checked_messages(messages: object) -> list[Message]:
    """Return ``messages`` as a list, refusing anything that is not an iterable of :class:`Message`.

    Raises:
        InvalidMessage: ``messages`` is a string, a mapping or not iterable, or an item is
            not a :class:`Message` (a plain dict, a string...).
    """
    if isinstance(messages, (str, bytes, bytearray, dict, Message)) or not isinstance(messages, Iterable):
        raise InvalidMessage(
            f"append takes an iterable of Message (e.g. a list); found {found(messages)}; "
            "build messages with Message(role, content) or read them with load_transcript()"
        )
    batch = list(messages)
    for index, message in enumerate(batch):
        if not isinstance(message, Message):
            raise InvalidMessage(
                f"message {index} of the {len(batch)} appended is not a Message; found {found(message)}; "
                "build it with Message(role, content) or read a transcript with load_transcript()"
            )
    return batch


def token_key(encoding: str, dropped: frozenset[str] = frozenset()) -> str:
    """Return the key under which token counts in ``encoding`` are cached (encoding, counter
    version, and the block types the counts leave out)."""
    return cache_key(encoding, dropped)


def count_text_tokens(message: Message, encoding: str, dropped: frozenset[str] = frozenset()) -> int:
    """Return the non-image tokens of ``message`` with its framing in ``encoding``, ``dropped`` block types left out (tokens)."""
    return message_text_tokens(message, encoding, dropped)


def _blob_of(block: Block) -> tuple[Block, Blob]:
    source = block["source"]
    data_b64 = source.get("data")
    if not isinstance(data_b64, str):
        raise ImageError(f"an image block's base64 data must be a string; found {type(data_b64).__name__}")
    # The decoder validation uses (imageinfo): whitespace, missing padding and the URL-safe
    # alphabet are accepted, anything else is refused; every decoded byte is kept.
    data = decode_base64(data_b64)
    digest = hashlib.sha256(data).hexdigest()
    try:
        media_type, width, height = image_size(data)
    except ImageError:
        media_type, width, height = source.get("media_type"), None, None
    blob = Blob(digest, source.get("media_type") or media_type, len(data), width, height, data)
    ref = {"type": "blob", "sha256": digest, "media_type": source.get("media_type")}
    return {**block, "source": ref}, blob


def blobify(blocks: Sequence[Block]) -> tuple[list[Block], list[Blob]]:
    """Replace inline base64 images (top-level or in tool results) by blob references.

    Args:
        blocks: a message's content blocks.

    Returns:
        The rewritten blocks and the blobs they reference (one per distinct sha256, first
        occurrence kept, in document order).

    Raises:
        ImageError: an image block holds invalid base64.
    """
    blobs: dict[str, Blob] = {}

    def rewrite(block: Block) -> Block:
        kind = block.get("type")
        if kind == "image" and block["source"].get("type") == "base64":
            ref, blob = _blob_of(block)
            blobs.setdefault(blob.sha256, blob)
            return ref
        if kind == "tool_result" and isinstance(block.get("content"), list):
            return {**block, "content": [rewrite(b) for b in block["content"]]}
        return block

    return [rewrite(block) for block in blocks], list(blobs.values())


def hydrate(blocks: Sequence[Block], load: BlobLoader) -> tuple[Block, ...]:
    """Turn blob references back into base64 image blocks, byte for byte as appended.

    Args:
        blocks: stored content blocks.
        load: returns a blob's bytes by sha256 (and raises :class:`StoreError` if missing).

    Returns:
        The blocks as they were appended.

    Raises:
        StoreError: from ``load``, for a missing blob.
    """

    def restore(block: Block) -> Block:
        kind = block.get("type")
        if kind == "image" and block["source"].get("type") == "blob":
            ref = block["source"]
            source = {
                "type": "base64",
                "media_type": ref.get("media_type"),
                "data": base64.b64encode(load(ref["sha256"])).decode(),
            }
            return {**block, "source": source}
        if kind == "tool_result" and isinstance(block.get("content"), list):
            return {**block, "content": [restore(b) for b in block["content"]]}
        return block

    return tuple(restore(block) for block in blocks)


def prepare(message: Message, encoding: str) -> PreparedMessage:
    """Return ``message`` in its stored form, token-counted in ``encoding``.

    Args:
        message: the message to store.
        encoding: the encoding whose token count is cached with it.

    Returns:
        Every column of the message row and the blobs it references.

    Raises:
        ImageError: an image block holds invalid base64.
    """
    content, blobs = blobify(message.content)
    facts = find_image_sites(message.content)
    tool_uses = [b["id"] for b in message.content if b.get("type") == "tool_use"]
    tool_results = [b["tool_use_id"] for b in message.content if b.get("type") == "tool_result"]
    return PreparedMessage(
        role=message.role,
        content=canonical_json(content),
        source_id=message.source_id,
        meta=canonical_json(message.meta),
        tool_uses=json.dumps(tool_uses),
        tool_results=json.dumps(tool_results),
        images=json.dumps([f.to_json() for f in facts]),
        token_key=token_key(encoding),
        text_tokens=count_text_tokens(message, encoding),
        blobs=tuple(blobs),
    )


def sql_text(value: str | None) -> str | bytes | None:
    """Return text as SQLite can bind it, every code point kept.

    Text holding a lone surrogate (``"a\\ud800b"`` from a JSON transcript, copied into a
    summary) has no UTF-8 form, so SQLite cannot take it as TEXT; it is stored as its bytes
    with the surrogate kept (UTF-8, ``surrogatepass``) and :func:`text_from_sql` reads it
    back as the same string.  Any other text is stored as it is.

    Example:
        >>> text_from_sql(sql_text("a\\ud800b")) == "a\\ud800b"
        True
    """
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")
    return value


def text_from_sql(value: str | bytes | None) -> str | None:
    """Return the text :func:`sql_text` stored (bytes hold text with a lone surrogate)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return value


@contextmanager
def _row(what: str) -> Iterator[None]:
    """Turn a stored row that cannot be read back (damaged JSON, a wrong shape) into one clear StoreError."""
    try:
        yield
    except StoreError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, InvalidMessage) as err:
        raise StoreError(
            f"{what}: the stored row is damaged and cannot be read back ({type(err).__name__}: "
            f"{str(err)[:200]}); nothing was changed: restore the store from a copy, or import the transcript "
            f"into a new store"
        ) from err


def message_from_row(
    seq: int, role: str, content: str, source_id: str | bytes | None, meta: str, load: BlobLoader
) -> Message:
    """Rebuild a stored message (images rehydrated through ``load``).

    Raises:
        StoreError: the row is damaged (its JSON does not parse or is not a message).
    """
    with _row(f"message {seq}"):
        return Message(role, hydrate(json.loads(content), load), seq, text_from_sql(source_id), json.loads(meta))


def prompt_from_row(seq: int, content: str, meta: str) -> PromptTurn:
    """Return a user turn's text blocks and ``meta["kind"]`` from its stored columns, images not loaded.

    What the ask ledger reads of every user turn: decoding only this, not the whole message
    (blocks checked, images rehydrated), keeps a first scan of a long history cheap.

    Raises:
        StoreError: the row is damaged (its JSON does not parse or is not a list of blocks).
    """
    with _row(f"message {seq}"):
        blocks = json.loads(content)
        if not isinstance(blocks, list):
            raise ValueError("its content is not a list of blocks")
        texts = tuple(
            b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        kind = json.loads(meta).get("kind") if meta else None
        return PromptTurn(seq, texts, kind if isinstance(kind, str) else None)


def facts_from_row(
    seq: int,
    role: str,
    tool_uses: str,
    tool_results: str,
    images: str,
    text_tokens: int,
    kind: object,
) -> MessageFacts:
    """Rebuild :class:`MessageFacts` from the stored columns (``kind``: ``meta["kind"]`` or None).

    Raises:
        StoreError: the row is damaged.
    """
    with _row(f"message {seq}"):
        return MessageFacts(
            seq,
            role,
            text_tokens,
            tuple(json.loads(tool_uses)),
            tuple(json.loads(tool_results)),
            tuple(ImageSite.from_json(f) for f in json.loads(images)),
            kind if isinstance(kind, str) else None,
        )


def summary_from_row(
    id: int, level: int, start_seq: int, end_seq: int, text: str | bytes, provenance: str
) -> StoredSummary:
    """Rebuild a :class:`StoredSummary` from its stored columns (provenance as JSON; see :func:`sql_text`).

    Raises:
        StoreError: the row is damaged.
    """
    with _row(f"summary {id} (level {level}, messages {start_seq}–{end_seq - 1})"):
        provenance_value = json.loads(provenance)
        if not isinstance(provenance_value, dict):
            raise TypeError(f"provenance is a {type(provenance_value).__name__}, not an object")
        return StoredSummary(id, level, start_seq, end_seq, text_from_sql(text) or "", provenance_value)


def check_summary(level: int, start_seq: int, end_seq: int, text: str) -> None:
    """Refuse a summary no backend may store.

    Raises:
        InvalidArgument: a level or seq that is not an integer, or text that is not a string.
        StoreError: the text is blank, or ``[start_seq, end_seq)`` is empty or negative.
    """
    for name, value in (("level", level), ("start_seq", start_seq), ("end_seq", end_seq)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"a summary's {name} must be an integer; found {found(value)}")
    if not isinstance(text, str):
        raise InvalidArgument(f"a summary's text must be a string; found {found(text)}")
    if level < 1:
        raise StoreError(f"a summary's level must be 1 or more; found {level}")
    if not text.strip():
        raise StoreError(f"refusing to store an empty level-{level} summary of [{start_seq}, {end_seq})")
    if not 0 <= start_seq < end_seq:
        raise StoreError(f"bad summary range [{start_seq}, {end_seq})")
