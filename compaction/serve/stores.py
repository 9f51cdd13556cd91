"""Conversation stores kept open between requests: a bounded, least-recently-used set.

The engine keeps caches per store object (decoded window messages and masked renderings in
:mod:`compaction.planning`, the ask ledger in :mod:`compaction.ledger`); a store reopened on
every request starts them cold, so the proxy keeps each conversation's stores open.

A :class:`Slot` holds everything of one base conversation id (the base and its forks share
it): an asyncio lock (one request of a conversation at a time, as before), the open stores,
and the one worker thread that uses them.  SQLite connections refuse to be used from a thread
other than the one that opened them, and a store's caches are not thread-safe, so each slot
runs its blocking work (append, compile, record the answer) on its own thread; slots of
different conversations run in parallel.

:class:`StorePool` keeps at most ``size`` slots.  Past that, the least recently used slot that
no request holds or waits for is closed (its stores closed on its thread, the thread ended);
a slot in use (or with a call still running on its thread, its caller gone) is never
evicted, so the bound may be passed while more than ``size`` conversations are in flight.  Before a kept store is reused, ``check_location()``
asks whether its file was deleted or replaced on disk meanwhile; such a store is closed and
opened again from the path.  :meth:`StorePool.close` closes every slot (at shutdown).

All methods of :class:`StorePool` run on the event loop's thread; :class:`OpenStores` is used
only from its slot's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InvalidArgument, StoreError
from ..store import Store

__all__ = ["DEFAULT_OPEN_CONVERSATIONS", "OpenStores", "Slot", "StorePool"]

logger = logging.getLogger("compaction.serve")

#: Conversations (base ids) whose stores stay open by default: each holds a thread and, per
#: store, an SQLite connection (three file descriptors in WAL mode).
DEFAULT_OPEN_CONVERSATIONS = 64

T = TypeVar("T")


class OpenStores:
    """The open stores of one slot, by file path; used only from the slot's thread.

    Example:
        >>> import tempfile, pathlib
        >>> stores = OpenStores()
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "c.sqlite"
        >>> stores.get(path) is stores.get(path)
        True
        >>> stores.close()
    """

    def __init__(self) -> None:
        self._stores: dict[Path, Store] = {}
        #: stores opened (or reopened) so far; a kept store reused does not count.
        self.opened = 0
        #: kept stores found deleted or replaced on disk and opened again.
        self.reopened = 0

    def get(self, path: Path, *, create: bool = True) -> Store:
        """Return the open store of ``path``, opening it (or again, if its file changed) as needed.

        Raises:
            StoreError: the store cannot be opened (``create=False`` and no store at ``path``,
                or not a compaction store).
        """
        store = self._stores.get(path)
        if store is not None:
            try:
                store.check_location()
                return store
            except StoreError as err:
                logger.info("%s: reopening a kept store (%s)", path.name, str(err).split(";", 1)[0])
                self._drop(path)
                self.reopened += 1
        store = Store(path, create=create)
        self._stores[path] = store
        self.opened += 1
        return store

    def _drop(self, path: Path) -> None:
        store = self._stores.pop(path, None)
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()

    def __len__(self) -> int:
        return len(self._stores)

    def close(self) -> None:
        """Close every store (errors on close are ignored: nothing is written by closing)."""
        for path in list(self._stores):
            self._drop(path)


class Slot:
    """One base conversation's lock, open stores and worker thread."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.lock = asyncio.Lock()
        self.users = 0  # requests holding or waiting for the lock
        self.pending = 0  # calls queued or running on the thread (one whose caller left runs on)
        self.stores = OpenStores()
        #: what the app keeps of this conversation between requests (used on the slot's thread)
        self.memo: dict[str, Any] = {}
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"compaction-serve-{base[:24]}")

    async def run(self, function: Callable[..., T], *args: object) -> T:
        """Run ``function(*args)`` on this slot's thread and return its result (or raise its error).

        Cancelling the caller (a client that hung up) does not cancel the work: a queued call
        still runs, in order, as a worker thread call started by ``anyio.to_thread`` would.
        """
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._thread, functools.partial(function, *args))
        self.pending += 1
        future.add_done_callback(self._done)  # called on the loop's thread
        return await asyncio.shield(future)

    def _done(self, _future: object) -> None:
        self.pending -= 1

    def close(self, *, wait: bool) -> None:
        """Close the stores on the slot's thread (after any work still queued there), end the thread."""
        with contextlib.suppress(RuntimeError):  # already shut down
            self._thread.submit(self.stores.close)
        self._thread.shutdown(wait=wait)


class StorePool:
    """At most ``size`` conversations' stores kept open, least recently used closed first.

    Args:
        size: conversations (base ids) kept open; at least 1.

    Raises:
        InvalidArgument: ``size`` is not a positive integer.
    """

    def __init__(self, size: int = DEFAULT_OPEN_CONVERSATIONS) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgument(f"open conversations must be a positive integer; found {size!r}")
        self.size = size
        self._slots: OrderedDict[str, Slot] = OrderedDict()
        self._guard = threading.Lock()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, base: object) -> bool:
        return base in self._slots

    @contextlib.asynccontextmanager
    async def hold(self, base: str) -> AsyncIterator[Slot]:
        """Hold ``base``'s slot (its lock) for the block; run blocking work with ``slot.run``."""
        with self._guard:
            slot = self._slots.get(base)
            if slot is None:
                slot = self._slots[base] = Slot(base)
            self._slots.move_to_end(base)
            slot.users += 1
        try:
            async with slot.lock:
                yield slot
        finally:
            with self._guard:
                slot.users -= 1
                if slot.users == 0:  # a fresh lock: an asyncio lock binds to the loop it first waits in
                    slot.lock = asyncio.Lock()
                evicted = self._evict()
            for old in evicted:
                old.close(wait=False)

    def _evict(self) -> list[Slot]:
        """Remove idle slots past the bound, oldest first (the caller closes them)."""
        evicted: list[Slot] = []
        if len(self._slots) <= self.size:
            return evicted
        for base in list(self._slots):
            if len(self._slots) <= self.size:
                break
            slot = self._slots[base]
            if slot.users == 0 and slot.pending == 0:  # a call left running keeps its slot
                del self._slots[base]
                evicted.append(slot)
        self.evicted += len(evicted)
        return evicted

    def close(self) -> None:
        """Close every slot's stores and end its thread (waits for work in progress)."""
        with self._guard:
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            slot.close(wait=True)
