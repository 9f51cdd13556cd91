"""Conversations of the proxy: which store a request belongs to, and what is new in it.

A client of ``compaction serve`` sends its whole history with every request.  This module
turns that history into the internal block form, finds the conversation's store and appends
only what the store does not hold yet:

* **Identity.** An explicit ``X-Compaction-Conversation`` header names the conversation;
  without one it is a hash of the API, the system prompt and the first user message.
* **Prefix match.** The stored messages must be a prefix of the incoming ones (compared by
  the canonical JSON of role and content); the rest is appended.  An answer the proxy
  recorded from the upstream is compared loosely (role, text, tool calls; thinking left out),
  because a client echoes it back in its own shape.
* **Rewrites fork.** A client that edited, dropped or regenerated a message no longer extends
  the store; its history goes to the next fork (``<id>.2``, ``<id>.3``, ...), the first one
  it extends or a new one.  A store is never rewritten.

Stores live at ``<store_dir>/conversations/<id>.sqlite``.  Every function here blocks (SQLite,
compiling); the app runs them in worker threads, one conversation at a time.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..blocks import Block, Message, canonical_json
from ..errors import InvalidTranscript
from ..formats import parse_messages
from ..formats._common import Malformed
from ..formats.anthropic import content_blocks
from ..loop import from_responses
from ..store import Store
from ..summarizers._secrets import scrub_key
from ._errors import BadRequest, ConversationConflict
from .stores import OpenStores

__all__ = [
    "Api",
    "ANSWER_META",
    "MAX_FORKS",
    "ConversationBook",
    "IncomingMemo",
    "Resolved",
    "conversation_start",
    "conversation_id",
    "incoming_messages",
    "scrub_messages",
    "header_conversation",
]

Api = Literal["openai", "anthropic", "responses"]

#: ``Message.meta`` of an answer the proxy recorded from the upstream.
ANSWER_META = {"serve": "answer"}
#: The most forks one conversation may have (a client rewriting history in a loop is refused).
MAX_FORKS = 200
#: Conversation ids the header may carry: letters, digits, ``.``, ``_`` and ``-``, 1 to 128.
_HEADER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: Keys whose string values are opaque (base64 images, thinking signatures): never scrubbed.
_OPAQUE_KEYS = frozenset({"data", "signature"})


def header_conversation(value: str | None) -> str | None:
    """Return the conversation id an ``X-Compaction-Conversation`` header names, or ``None``.

    Raises:
        BadRequest: the value is not 1 to 128 letters, digits, ``.``, ``_`` or ``-`` (starting
            with a letter or digit).
    """
    if value is None:
        return None
    if not _HEADER_ID.fullmatch(value):
        raise BadRequest(
            "X-Compaction-Conversation must be 1 to 128 letters, digits, '.', '_' or '-' "
            f"starting with a letter or digit; found {value[:40]!r}"
        )
    return value


def _strip_cache_control(value: Any) -> Any:
    """Return ``value`` without ``cache_control`` keys (the compiler places its own breakpoints)."""
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


def incoming_messages(api: Api, body: dict[str, Any], *, strip_cache_control: bool = True) -> list[Message]:
    """Return a request body's history in the internal block form.

    OpenAI Chat bodies carry the system prompt among ``messages``; Anthropic bodies carry it
    as a top-level ``system`` (a string or text blocks), which becomes the first message.
    ``cache_control`` marks are dropped: the compiled request carries its own.  OpenAI
    Responses bodies (``api="responses"``) carry ``instructions`` and ``input`` items.

    Raises:
        BadRequest: no non-empty ``messages`` list (``input`` for Responses), or a malformed
            message (named by index).
    """
    if api == "responses":
        return _responses_messages(body)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("the request body needs a non-empty 'messages' list")
    if strip_cache_control:  # False: the caller knows the body holds none (a scan of its bytes)
        raw = _strip_cache_control(raw)
    try:
        messages = parse_messages(raw, api)
        system = body.get("system") if api == "anthropic" else None
        if system:
            blocks = content_blocks(_strip_cache_control(system) if strip_cache_control else system)
            messages.insert(0, Message("system", tuple(blocks)))
    except (InvalidTranscript, Malformed) as err:
        raise BadRequest(f"malformed messages: {_without_cli_hint(str(err))}") from err
    except ValueError as err:  # InvalidMessage, ImageError: a block the store cannot hold
        raise BadRequest(f"malformed messages: {err}") from err
    return messages


def _responses_messages(body: dict[str, Any]) -> list[Message]:
    """A Responses body's ``instructions`` (a system message first) and ``input`` items as messages.

    ``input`` is a string (one user message) or a list of items, read by the Responses parser
    (:func:`compaction.loop.from_responses`).
    """
    raw = body.get("input")
    if isinstance(raw, str) and raw:
        raw = [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise BadRequest("the request body needs an 'input': a non-empty string or list of items")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest(f"instructions must be a string; found {type(instructions).__name__}")
    try:
        messages = from_responses(raw)
    except ValueError as err:  # InvalidArgument, InvalidMessage: named by the item's index
        raise BadRequest(f"malformed input items: {err}") from err
    if instructions:
        messages.insert(0, Message("system", ({"type": "text", "text": instructions},)))
    return messages


def _without_cli_hint(text: str) -> str:
    """Drop the command-line hint (``--lenient``) the transcript parser appends."""
    return text.split("; fix it, or skip such lines", 1)[0]


def _scrub_value(value: Any, keys: Sequence[str]) -> Any:
    if isinstance(value, str):
        for key in keys:
            value = scrub_key(value, key)
        return value
    if isinstance(value, dict):
        return {k: (v if k in _OPAQUE_KEYS else _scrub_value(v, keys)) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_value(v, keys) for v in value]
    return value


def scrub_messages(messages: Sequence[Message], keys: Sequence[str]) -> list[Message]:
    """Return ``messages`` with every run of 8+ characters of each credential in ``keys`` redacted.

    Image data and thinking signatures are left alone (opaque, and a false match would
    corrupt them).  Deterministic, so the same history scrubs to the same messages.
    """
    keys = [k for k in keys if k]
    if not keys:
        return list(messages)
    return [
        Message(m.role, tuple(_scrub_value(b, keys) for b in m.content), None, m.source_id, m.meta)
        for m in messages
    ]


def conversation_start(messages: Sequence[Message]) -> list[Message]:
    """Return the messages :func:`conversation_id` hashes: the leading ones up to the first user message."""
    start: list[Message] = []
    for message in messages:
        start.append(message)
        if message.role == "user":
            break
    return start


def conversation_id(api: Api, messages: Sequence[Message], header: str | None = None) -> str:
    """Return the conversation's base id: the header's, else a hash of its start.

    The hash covers the API, every leading system message and the first user message, so a
    conversation keeps its id as it grows.

    Example:
        >>> conversation_id("openai", [Message("user", ({"type": "text", "text": "hi"},))])[:7]
        'openai-'
    """
    if header is not None:
        return header
    start: list[Any] = []
    for message in messages:
        start.append({"role": message.role, "content": list(message.content)})
        if message.role == "user":
            break
    digest = hashlib.sha256(canonical_json(start).encode("utf-8")).hexdigest()[:32]
    return f"{api}-{digest}"


def _exact(message: Message) -> str:
    payload = canonical_json({"role": message.role, "content": list(message.content)})
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _loose_blocks(blocks: Sequence[Block]) -> list[Any]:
    """The parts of an answer a client echoes back in any shape: text, tool calls, others whole."""
    parts: list[Any] = []
    text: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            text.append(str(block.get("text", "")))
        elif kind in ("thinking", "redacted_thinking"):
            continue
        elif kind == "tool_use":
            parts.append(["tool_use", block.get("id"), block.get("name"), block.get("input")])
        else:
            parts.append(block)
    joined = "".join(text).strip()
    return ([["text", joined]] if joined else []) + parts


def _loose(message: Message) -> str:
    payload = canonical_json({"role": message.role, "parts": _loose_blocks(message.content)})
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class IncomingMemo:
    """The history one conversation's client sent last, scrubbed and fingerprinted.

    A client resends its whole history with every request; scrubbing credentials out of
    every message and hashing each one's canonical JSON again would cost the proxy time in
    proportion to the history.  :meth:`prepare` compares each incoming message with the one
    at the same position last time (object equality, no serialization) and reuses its scrubbed
    form and fingerprint when they are equal and the credentials are the same; only the rest
    is scrubbed and hashed.  The result is the same as scrubbing and hashing everything.

    Holds about one parsed copy of the history (a scrubbed message equal to its original is
    the same object).  Used by one request at a time (the conversation's lock).
    """

    def __init__(self) -> None:
        self._keys: tuple[str, ...] = ()
        self._raw: list[Message] = []
        self._scrubbed: list[Message] = []
        self._exact: list[str] = []
        #: messages scrubbed and hashed by the last :meth:`prepare` (the rest were reused).
        self.computed = 0

    def prepare(self, messages: Sequence[Message], keys: Sequence[str]) -> tuple[list[Message], list[str]]:
        """Return ``messages`` scrubbed of ``keys`` (:func:`scrub_messages`) and their fingerprints."""
        wanted = tuple(k for k in keys if k)
        reuse = wanted == self._keys
        held = len(self._raw)
        scrubbed: list[Message] = []
        exact: list[str] = []
        computed = 0
        for index, message in enumerate(messages):
            if reuse and index < held and self._raw[index] == message:
                scrubbed.append(self._scrubbed[index])
                exact.append(self._exact[index])
                continue
            (clean,) = scrub_messages([message], wanted)
            if clean == message:
                clean = message  # one object, not two copies
            scrubbed.append(clean)
            exact.append(_exact(clean))
            computed += 1
        self._keys, self._raw, self._scrubbed, self._exact = wanted, list(messages), scrubbed, exact
        self.computed = computed
        return scrubbed, exact


@dataclass(frozen=True)
class _Stored:
    """What the prefix match needs of one stored message."""

    exact: str
    loose: str | None  # set for an answer the proxy recorded


def _stored_form(message: Message) -> _Stored:
    answer = message.meta.get("serve") == ANSWER_META["serve"]
    return _Stored(_exact(message), _loose(message) if answer else None)


@dataclass(frozen=True)
class Resolved:
    """The conversation a request belongs to, after its new messages were appended.

    Attributes:
        base: the base id (a fork shares its base's lock).
        conversation: the id (the base id, or a fork ``<base>.<n>``).
        path: the store file.
        appended: messages this request added.
        stored: messages the store holds now.
        forked_from: the id this conversation was forked from when this request created it.
    """

    base: str
    conversation: str
    path: Path
    appended: int
    stored: int
    forked_from: str | None = None


class ConversationBook:
    """The proxy's conversations under one directory, with a small cache of stored fingerprints.

    Thread-safe only per base id: the caller runs one request of a base id at a time (the
    app holds a lock per base id); different base ids may run in parallel.

    Args:
        store_dir: the directory (created if missing); stores go in ``conversations/``.
        cache_size: conversations whose fingerprints are kept in memory.
    """

    def __init__(self, store_dir: str | os.PathLike[str], *, cache_size: int = 256) -> None:
        self.root = Path(store_dir)
        self.dir = self.root / "conversations"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._cache: OrderedDict[str, list[_Stored]] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    def path_of(self, conversation: str) -> Path:
        """Return the store file of ``conversation``."""
        return self.dir / f"{conversation}.sqlite"

    def open(self, conversation: str) -> Store:
        """Open ``conversation``'s store (created when missing); the caller closes it."""
        return Store(self.path_of(conversation))

    # -- fingerprints -----------------------------------------------------------------------
    def _fingerprints(self, conversation: str, stores: OpenStores) -> list[_Stored]:
        with self._cache_lock:
            cached = self._cache.get(conversation)
            if cached is not None:
                self._cache.move_to_end(conversation)
                return cached
        store = stores.get(self.path_of(conversation), create=False)
        stored = [_stored_form(m) for m in store.iter_messages()]
        self._remember(conversation, stored)
        return stored

    def _remember(self, conversation: str, stored: list[_Stored]) -> None:
        with self._cache_lock:
            self._cache[conversation] = stored
            self._cache.move_to_end(conversation)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _forget(self, conversation: str) -> None:
        with self._cache_lock:
            self._cache.pop(conversation, None)

    @staticmethod
    def _extends(stored: list[_Stored], incoming: Sequence[Message], exact: Sequence[str]) -> bool:
        """Whether the stored messages are a prefix of ``incoming`` (answers compared loosely)."""
        if len(stored) > len(incoming):
            return False
        for index, held in enumerate(stored):
            if held.exact == exact[index]:
                continue
            if held.loose is None or held.loose != _loose(incoming[index]):
                return False
        return True

    # -- the request ------------------------------------------------------------------------
    def _name(self, base: str, index: int) -> str:
        return base if index == 1 else f"{base}.{index}"

    def candidates(self, base: str) -> list[str]:
        """Return ``base`` and its forks that exist, oldest first (they are numbered densely)."""
        names = []
        for index in range(1, MAX_FORKS + 1):
            name = self._name(base, index)
            if not self.path_of(name).exists():
                break
            names.append(name)
        return names

    def resolve(
        self, base: str, incoming: Sequence[Message], stores: OpenStores | None = None,
        exact: Sequence[str] | None = None,
    ) -> Resolved:
        """Find (or create) the conversation ``incoming`` extends and append what is new.

        Args:
            base: the base id (:func:`conversation_id`).
            incoming: the client's whole history.
            stores: the open stores to use and keep (the proxy's, kept between requests);
                ``None``: stores opened for this call and closed at its end.
            exact: the fingerprints of ``incoming`` (:class:`IncomingMemo`), or ``None``
                to compute them here.

        Returns:
            The conversation and what was appended.

        Raises:
            ConversationConflict: ``base`` already has :data:`MAX_FORKS` forks and none matches.
            StoreError: a store could not be opened or written.
        """
        if stores is None:
            own = OpenStores()
            try:
                return self.resolve(base, incoming, own, exact)
            finally:
                own.close()
        if exact is None:
            exact = [_exact(m) for m in incoming]
        elif len(exact) != len(incoming):
            raise ValueError(f"{len(exact)} fingerprints for {len(incoming)} messages")
        for _attempt in range(3):
            existing = self.candidates(base)
            for name in existing:
                stored = self._fingerprints(name, stores)
                if self._extends(stored, incoming, exact):
                    resolved = self._append(base, name, stored, incoming, None, stores)
                    if resolved is not None:
                        return resolved
                    break
            else:
                if len(existing) >= MAX_FORKS:
                    raise ConversationConflict(
                        f"conversation {base!r} was rewritten {MAX_FORKS} times; send a new "
                        "X-Compaction-Conversation header to start afresh"
                    )
                name = self._name(base, len(existing) + 1)
                resolved = self._append(base, name, [], incoming, base if existing else None, stores)
                if resolved is not None:
                    return resolved
        raise ConversationConflict(
            f"conversation {base!r} kept changing under this request (another process writes it); retry"
        )

    def _append(
        self, base: str, name: str, stored: list[_Stored], incoming: Sequence[Message], forked_from: str | None,
        stores: OpenStores,
    ) -> Resolved | None:
        """Append ``incoming`` past ``stored`` to ``name``; ``None`` if the store changed meanwhile."""
        new = list(incoming[len(stored):])
        store = stores.get(self.path_of(name))
        if len(store) != len(stored):  # changed under the cache (another process)
            self._forget(name)
            return None
        added = store.append(new) if new else 0
        grown = stored + [_stored_form(m) for m in new]
        self._remember(name, grown)
        return Resolved(base, name, self.path_of(name), added, len(grown), forked_from)

    def record_answer(
        self, conversation: str, expected: int, answer: Message, stores: OpenStores | None = None
    ) -> bool:
        """Append the upstream's answer if the store still holds ``expected`` messages.

        ``stores``: the open stores to use (``None``: the store is opened and closed here).

        Returns:
            Whether it was appended (``False``: another request of the conversation got there
            first; the client's next request carries the answer anyway).
        """
        if stores is None:
            own = OpenStores()
            try:
                return self.record_answer(conversation, expected, answer, own)
            finally:
                own.close()
        answer = Message("assistant", answer.content, None, None, dict(ANSWER_META))
        store = stores.get(self.path_of(conversation))
        if len(store) != expected:
            self._forget(conversation)
            return False
        store.append([answer])
        stored = self._fingerprints_if_cached(conversation)
        if stored is not None and len(stored) == expected:
            self._remember(conversation, stored + [_stored_form(answer)])
        else:
            self._forget(conversation)
        return True

    def _fingerprints_if_cached(self, conversation: str) -> list[_Stored] | None:
        with self._cache_lock:
            return self._cache.get(conversation)

    def list(self) -> list[dict[str, Any]]:
        """Return each stored conversation's id, file and size in bytes, sorted by id."""
        rows = []
        for path in sorted(self.dir.glob("*.sqlite")):
            rows.append({"conversation": path.stem, "path": str(path), "bytes": path.stat().st_size})
        return rows
