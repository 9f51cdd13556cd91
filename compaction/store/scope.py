"""A store object scoped to one conversation: what SQLite and PostgreSQL share of it.

:class:`ConversationScope` is mixed into both backends.  It binds a store object to one
conversation of its database (see :mod:`.lineage` for what a conversation and a branch see),
creates that conversation at the first write, lists the store's conversations with their
counts and forks branches.  The SQL it runs is the same on both backends but for the
placeholder (``_mark``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..blocks import Message, canonical_json
from ..errors import InvalidArgument, InvalidMessage, StoreError, found
from . import ingest
from .lineage import (
    ANY_CONVERSATION,
    DEFAULT_CONVERSATION,
    LINEAGE_WALK,
    Lineage,
    check_conversation_name,
    lineage_from_walk,
    lineage_of,
)
from .model import ConversationInfo

__all__ = ["ConversationScope"]

_Tree = dict[int, tuple[int | None, int | None]]

#: The most lineages a store object keeps (:meth:`ConversationScope._remember`), most recently used.
_KEPT_LINEAGES = 16


class ConversationScope:
    """Conversation scoping for a store class with ``_db``, ``path``, ``_reading`` and ``_write``.

    Attributes:
        conversation: the name of the conversation this object reads and writes.
    """

    path: str
    encoding: str
    conversation: str
    _db: Any
    _lineage: Lineage
    #: The database driver's placeholder.
    _mark = "?"

    def _reading(self, doing: str) -> AbstractContextManager[None]:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[None]:  # pragma: no cover - the backend's
        raise NotImplementedError

    def next_seq(self) -> int:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _tree(self) -> _Tree:
        rows = self._db.execute("SELECT id, parent_id, fork_seq FROM conversations").fetchall()
        return {int(i): (None if p is None else int(p), None if f is None else int(f)) for i, p, f in rows}

    def _lineage_of(self, conversation_id: int | None) -> Lineage:
        """Return the lineage of ``conversation_id``, reading only it and its ancestors' rows.

        One recursive query up the ``parent_id`` links (:data:`.LINEAGE_WALK`), instead of
        every conversation of the store: opening a branch costs its depth, not the store's
        size.  The query works out each segment's seqs, so its rows become the lineage as
        they come (:func:`.lineage_from_walk`; a damaged table whose parents form a cycle
        ends the walk at the table's size, and is named).
        """
        if conversation_id is None:
            return Lineage(())
        known = self._known_lineages()
        lineage = known.get(conversation_id)
        if lineage is not None:
            known.move_to_end(conversation_id)
            return lineage
        walk = self._db.execute(LINEAGE_WALK.format(mark=self._mark), (conversation_id,)).fetchall()
        lineage = lineage_from_walk(conversation_id, walk)
        self._remember(lineage)
        return lineage

    def _known_lineages(self) -> OrderedDict[int, Lineage]:
        """Return the lineages this store object has read or made, by conversation id, newest used last.

        A conversation's parent and fork never change once it is stored (no statement updates
        or deletes a ``conversations`` row), so a lineage read once holds for the object's
        life, and a branch's is its parent's plus one segment (:meth:`.Lineage.child`).
        """
        known: OrderedDict[int, Lineage] | None = self.__dict__.get("_lineages")
        if known is None:
            known = self.__dict__["_lineages"] = OrderedDict()
        return known

    def _remember(self, lineage: Lineage) -> None:
        """Keep ``lineage`` among the :data:`_KEPT_LINEAGES` most recently used (each may hold its
        built conditions: tens of kilobytes a thousand deep)."""
        own = lineage.own
        if own is None:
            return
        known = self._known_lineages()
        known[own] = lineage
        known.move_to_end(own)
        while len(known) > _KEPT_LINEAGES:
            known.popitem(last=False)

    def scope_to(self, conversation: str, *, create: bool = True) -> None:
        """Scope this store object to ``conversation`` of the same store, as opening it with that name does.

        The connection stays open and the lineages already read are reused (an import of many
        branches opens one store object, not one per branch: each open checks the file and its
        schema, and reads the branch's lineage anew, one row per ancestor).

        Args:
            conversation: the conversation (or branch) to read and write from now on.
            create: as :func:`~compaction.store.factory.open_store`'s: a name not in the store
                is created at the first write; when false it must exist.

        Raises:
            InvalidArgument: ``conversation`` is not a valid name.
            StoreError: ``create`` is false and the store holds no conversation ``conversation``,
                or the store could not be read.
        """
        check_conversation_name(conversation)
        before = self.conversation, self._lineage
        try:
            with self._reading(f"opening the conversation {conversation!r}"):
                self._bind(conversation, create)
        except BaseException:
            self.conversation, self._lineage = before  # still scoped as it was
            raise

    def _bind(self, conversation: str | None, create: bool) -> None:
        """Scope this object to ``conversation`` (``None``: the only one, or ``"default"`` while there is none).

        Raises:
            StoreError: no name given and the store holds several conversations (named in the
                message), or the named one does not exist and ``create`` is false.
        """
        self._lineage = Lineage(())
        if conversation == ANY_CONVERSATION:
            self.conversation = conversation  # listing only: it sees no conversation's rows
            return
        named = conversation is not None
        if conversation is None:
            rows = self._db.execute("SELECT id, name FROM conversations ORDER BY id").fetchall()
            if len(rows) > 1:
                names = ", ".join(str(name) for _id, name in rows)
                raise StoreError(
                    f"{self.path}: the store holds {len(rows)} conversations ({names}); name one (--conversation NAME)"
                )
            conversation = str(rows[0][1]) if rows else DEFAULT_CONVERSATION
        self.conversation = conversation
        row = self._db.execute(f"SELECT id FROM conversations WHERE name = {self._mark}", (conversation,)).fetchone()
        if row is None and not create and named:  # unnamed: the default one, empty until its first write
            rows = self._db.execute("SELECT id, name FROM conversations ORDER BY id").fetchall()
            names = ", ".join(str(name) for _id, name in rows) or "none"
            raise StoreError(f"{self.path}: no conversation {conversation!r} in the store (it holds: {names})")
        self._lineage = self._lineage_of(None if row is None else int(row[0]))

    def _own(self) -> int:
        """Return this conversation's id, creating it (inside the caller's write) when it is not stored yet."""
        own = self._lineage.own
        if own is not None:
            return own
        if self.conversation == ANY_CONVERSATION:
            raise StoreError(f"{self.path}: this store object was opened to list conversations; it writes nothing")
        m = self._mark
        self._db.execute(
            f"INSERT INTO conversations (name, parent_id, fork_seq, created_at) VALUES ({m}, NULL, NULL, {m})"
            " ON CONFLICT (name) DO NOTHING",
            (self.conversation, time.time()),
        )
        row = self._db.execute(f"SELECT id FROM conversations WHERE name = {m}", (self.conversation,)).fetchone()
        self._lineage = self._lineage_of(int(row[0]))
        return int(row[0])

    def _refresh(self) -> None:
        """Pick up this conversation when another process created it since this object was opened."""
        if self._lineage.own is not None or self.conversation == ANY_CONVERSATION:
            return
        row = self._db.execute(f"SELECT id FROM conversations WHERE name = {self._mark}", (self.conversation,)).fetchone()
        if row is not None:
            self._lineage = self._lineage_of(int(row[0]))

    def _rows(self, alias: str = "") -> tuple[str, list[int]]:
        """The SQL condition (and its arguments) selecting the message rows this conversation shows."""
        self._refresh()
        return self._lineage.rows(alias, self._mark)

    def _seen_summaries(self, alias: str = "") -> tuple[str, list[int]]:
        """The SQL condition (and its arguments) selecting the summaries it shows (see :meth:`.Lineage.summaries`)."""
        self._refresh()
        return self._lineage.summaries(alias, self._mark)

    def _seen_failures(self) -> tuple[str, list[int]]:
        """The SQL condition (and its arguments) selecting the summarizer failures it shows."""
        self._refresh()
        return self._lineage.summaries("", self._mark, shadowed=False)

    def _summary_home(self, level: int, start_seq: int, end_seq: int) -> int:
        """Return the conversation a new summary of ``[start_seq, end_seq)`` at ``level`` is kept with.

        The most ancestral one sharing the whole range (so every branch showing it reuses it)
        that sees what this conversation sees there (:meth:`_fits_home`); else this
        conversation.  Call it inside the write.
        """
        own = self._own()
        tree: _Tree | None = None
        for candidate in self._lineage.homes(end_seq):
            if candidate == own:
                break
            tree = self._tree() if tree is None else tree
            if self._fits_home(lineage_of(candidate, tree), level, start_seq, end_seq):
                return candidate
        return own

    def _fits_home(self, home: Lineage, level: int, start_seq: int, end_seq: int) -> bool:
        """Return whether the ancestor of lineage ``home`` may keep a summary of ``[start_seq, end_seq)``.

        It may when it sees no summary of ``level`` overlapping the range (not only among
        its own rows: also one it shows from its own ancestors), and, above level 1, when
        the summaries of ``level - 1`` it sees inside the range are the ones this
        conversation sees there (the merge's children).  Otherwise the ancestor would show
        a merge over children it does not show: its chain of ``level - 1`` would stop inside
        the merge, and its next compression would summarize again what the merge already
        covers (level-1 summaries overlapping in the ancestor).
        """
        m = self._mark
        where, args = home.summaries(mark=m)
        clash = self._db.execute(
            f"SELECT 1 FROM summaries WHERE {where} AND level = {m} AND start_seq < {m} AND {m} < end_seq"
            " LIMIT 1",
            (*args, level, end_seq, start_seq),
        ).fetchone()
        if clash is not None:
            return False
        if level == 1:
            return True

        def children(view: Lineage) -> list[int]:
            seen, seen_args = view.summaries(mark=m)
            rows = self._db.execute(
                f"SELECT id FROM summaries WHERE {seen} AND level = {m}"
                f" AND start_seq >= {m} AND end_seq <= {m} ORDER BY start_seq, id",
                (*seen_args, level - 1, start_seq, end_seq),
            ).fetchall()
            return [int(r[0]) for r in rows]

        return children(home) == children(self._lineage)

    def holding(self, first: Message, chain_seed: str) -> str | None:
        """Return the conversation whose message 0 is ``first`` imported with ``chain_seed`` (else ``None``).

        ``compaction import`` without ``--conversation`` appends a transcript to the
        conversation that already holds it, so importing a file again adds nothing (also one
        imported before conversations existed, into ``default``).
        """
        key = ingest.chain_key(ingest.seed_key(chain_seed), first)
        m = self._mark
        with self._reading("looking up a transcript's conversation"):
            row = self._db.execute(
                "SELECT c.name FROM messages m JOIN conversations c ON c.id = m.conversation_id"
                f" WHERE m.seq = 0 AND m.import_key = {m} ORDER BY c.id LIMIT 1",
                (key,),
            ).fetchone()
        return None if row is None else str(row[0])

    def conversations(self) -> list[ConversationInfo]:
        """Return every conversation of the store with its counts, by id (creation order).

        ``messages`` and ``summaries`` count what each shows (a branch's shared prefix
        included); ``own_messages`` the rows stored with it.

        Raises:
            StoreError: the database could not be read.
        """
        with self._reading("listing conversations"):
            rows = self._db.execute(
                "SELECT id, name, parent_id, fork_seq, created_at FROM conversations ORDER BY id"
            ).fetchall()
            grouped = self._db.execute(
                "SELECT conversation_id, MAX(seq) + 1, COUNT(*) FROM messages GROUP BY conversation_id"
            ).fetchall()
            own_next = {int(c): int(n) for c, n, _count in grouped}
            counts = {int(c): int(count) for c, _n, count in grouped}
            tree = self._tree()
            names = {int(r[0]): str(r[1]) for r in rows}
            out = []
            for cid, name, parent, fork, created in rows:
                summaries = self._summary_count(lineage_of(int(cid), tree))
                out.append(
                    ConversationInfo(
                        name=str(name),
                        id=int(cid),
                        parent=None if parent is None else names.get(int(parent)),
                        fork_seq=None if fork is None else int(fork),
                        messages=_shown(int(cid), tree, own_next),
                        own_messages=counts.get(int(cid), 0),
                        summaries=summaries,
                        created_at=float(created),
                    )
                )
        return out

    def _summary_count(self, lineage: Lineage) -> int:
        """Return how many summaries ``lineage`` shows (inside the caller's read).

        Counted over the lineage's conversations that keep a summary only (read first, in the
        same read): one keeping none shows none and hides none, so leaving it out changes
        nothing, and the shadowing condition (a probe per ancestor for each summary) runs
        over those few instead of every ancestor (a chain of branches summarized every 50th
        level: 5.2 of its 12.7 s 800 deep went to the count of each new branch).
        """
        if self._db.execute("SELECT 1 FROM summaries LIMIT 1").fetchone() is None:
            return 0
        ids = ", ".join(str(int(seg.conversation_id)) for seg in lineage.segments)
        if not ids:
            return 0
        keeping = {
            int(row[0])
            for row in self._db.execute(
                f"SELECT DISTINCT conversation_id FROM summaries WHERE conversation_id IN ({ids})"
            ).fetchall()
        }
        if not keeping:
            return 0
        kept = Lineage(tuple(seg for seg in lineage.segments if seg.conversation_id in keeping))
        where, args = kept.summaries(mark=self._mark)
        return int(self._db.execute(f"SELECT COUNT(*) FROM summaries WHERE {where}", args).fetchone()[0])

    def _holds_summaries(self, lineage: Lineage) -> bool:
        """Return whether any conversation of ``lineage`` keeps a summary (inside the caller's read).

        One plain probe per 500 conversations of the lineage: when it says no, the lineage
        shows no summary, and the shadowing condition of :meth:`.Lineage.summaries` (a probe
        of ``summaries`` per ancestor for each row) need not run at all.
        """
        if self._db.execute("SELECT 1 FROM summaries LIMIT 1").fetchone() is None:
            return False  # a store without summaries (an import's): no probe per 500 ancestors
        ids = [seg.conversation_id for seg in lineage.segments]
        m = self._mark
        for start in range(0, len(ids), 500):  # under every driver's limit of placeholders
            chunk = ids[start : start + 500]
            marks = ", ".join([m] * len(chunk))
            row = self._db.execute(f"SELECT 1 FROM summaries WHERE conversation_id IN ({marks}) LIMIT 1", chunk)
            if row.fetchone() is not None:
                return True
        return False

    def branch(self, name: str, at: int) -> ConversationInfo:
        """Fork this conversation at seq ``at``: a new conversation ``name`` that shares ``[0, at)``.

        No message is copied: the branch reads the shared messages (and the summaries that
        lie entirely before ``at``) from this conversation, and its own messages are numbered
        from ``at``.  Open it with ``open_store(location, conversation=name)``.

        Args:
            name: the new conversation's name (unique in the store).
            at: the seq of the first message the branch does not share, ``0 <= at <= len(self)``.

        Returns:
            The branch's :class:`ConversationInfo`.

        Raises:
            StoreError: a conversation ``name`` exists, ``at`` is out of range, or the write failed.
            InvalidArgument: ``at`` is not an integer, or ``name`` is not a valid name.
        """
        check_conversation_name(name)
        if not isinstance(at, int) or isinstance(at, bool):
            raise InvalidArgument(f"at must be a message's seq (an integer); found {found(at)}")
        m = self._mark
        with self._reading(f"creating the branch {name!r}"), self._write():
            total = self.next_seq()
            if not 0 <= at <= total:
                holds = f"it holds messages 0 to {total - 1}" if total else "it holds no message"
                raise StoreError(f"{self.path}: cannot branch {self.conversation!r} at message {at}: {holds}")
            if self._db.execute(f"SELECT 1 FROM conversations WHERE name = {m}", (name,)).fetchone() is not None:
                raise StoreError(f"{self.path}: a conversation named {name!r} exists already")
            parent = self._own()
            created = time.time()
            self._db.execute(
                f"INSERT INTO conversations (name, parent_id, fork_seq, created_at) VALUES ({m}, {m}, {m}, {m})",
                (name, parent, at, created),
            )
            row = self._db.execute(f"SELECT id FROM conversations WHERE name = {m}", (name,)).fetchone()
            # its lineage is this one's plus its own segment: made here, not read back (one row
            # per ancestor), and kept for opening it with scope_to
            made = self._lineage.child(int(row[0]), at)
            self._remember(made)
            # the new branch's own counts, not every conversation's (conversations() per branch made
            # importing n branches quadratic): it shows [0, at) and the summaries seen there
            summaries = self._summary_count(made)
        return ConversationInfo(
            name=name,
            id=int(row[0]),
            parent=self.conversation,
            fork_seq=at,
            messages=at,
            own_messages=0,
            summaries=summaries,
            created_at=created,
        )

    # -- pins ------------------------------------------------------------------------------
    def _pins(self) -> tuple[str, list[int]]:
        """The SQL condition (and its arguments) selecting the pins this conversation sees."""
        self._refresh()
        return self._lineage.points("", self._mark)

    def pin(self, seq: int) -> bool:
        """Pin message ``seq``: compile keeps its text verbatim in every request of this conversation.

        A pinned message's text (its text blocks; images as placeholders, as for a system
        message) joins the system text of every compile while the message lies before the
        live window, wherever the rest of the history is summarized, and the message is shown
        in its place once the window reaches it (once either way, counted once in the budget);
        compile raises :class:`~compaction.errors.OverBudget` when the pinned text alone does
        not fit.  A branch sees the pins its parent made on
        the messages it shares.  The messages stay as they are (append-only).

        Returns:
            True when pinned now, False when it was pinned already (here or in a parent).

        Raises:
            StoreError: no message ``seq`` in this conversation, or it holds no text block to
                keep (e.g. a tool result alone), or the write failed.
            InvalidArgument: ``seq`` is not an integer.
        """
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidArgument(f"a message's seq must be an integer; found {found(seq)}")
        m = self._mark
        with self._reading(f"pinning message {seq}"), self._write():
            total = self.next_seq()
            if not 0 <= seq < total:
                holds = f"it holds messages 0 to {total - 1}" if total else "it holds no message"
                raise StoreError(f"{self.path}: no message {seq} in conversation {self.conversation!r}: {holds}")
            if seq in self.pinned_seqs():
                return False
            message = self.messages(seq, seq + 1)[0]
            if not any(block.get("type") == "text" and block.get("text") for block in message.content):
                raise StoreError(
                    f"{self.path}: message {seq} ({message.role}) holds no text block to keep; pin a message with text"
                )
            self._db.execute(
                f"INSERT INTO pins (conversation_id, seq, created_at) VALUES ({m}, {m}, {m})",
                (self._own(), seq, time.time()),
            )
        return True

    def unpin(self, seq: int) -> bool:
        """Unpin message ``seq`` (a pin this conversation made); return whether it was pinned here.

        Raises:
            StoreError: the pin was made by a conversation this one branches from (unpin it
                there, or it stays), or the write failed.
            InvalidArgument: ``seq`` is not an integer.
        """
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidArgument(f"a message's seq must be an integer; found {found(seq)}")
        m = self._mark
        with self._reading(f"unpinning message {seq}"), self._write():
            own = self._own()
            removed = self._db.execute(
                f"DELETE FROM pins WHERE conversation_id = {m} AND seq = {m}", (own, seq)
            ).rowcount
            if not removed:
                pins, args = self._pins()
                if self._db.execute(f"SELECT 1 FROM pins WHERE seq = {m} AND {pins}", (seq, *args)).fetchone():
                    raise StoreError(
                        f"{self.path}: message {seq} was pinned by a conversation {self.conversation!r} branches from;"
                        " unpin it there"
                    )
        return bool(removed)

    # -- edits -----------------------------------------------------------------------------
    def edit(self, seq: int, content: Sequence[dict[str, Any]]) -> int:
        """Edit message ``seq``: append a revision with ``content``; every read then shows it.

        The store stays append-only: the message row and earlier revisions are kept, and
        :meth:`messages`, :meth:`facts` and compile show the newest revision.  The summaries
        this conversation (or a branch sharing the message) shows that cover the message or
        come after it are marked stale: moved to ``stale_summaries`` (kept, with when and why),
        so the next compression makes them anew from the edited history.  A compaction event
        records the edit with an empty frame, so the next compile plans afresh.  On PostgreSQL
        the edit holds the conversation's compaction claim, so a compression under way (which
        may be summarizing the old revision) ends first and its summaries are made stale too.

        Args:
            seq: the message to edit; one this conversation holds (not one shared from the
                conversation it branches from: branch there instead).
            content: the new content blocks (the role stays the message's).

        Returns:
            The revision number (1 for the first edit of the message).

        Raises:
            StoreError: no message ``seq``, a message shared from a parent, or the write failed.
            InvalidMessage: ``content`` is not a list of blocks.
            ImageError: an image block holds invalid base64.
            InvalidArgument: ``seq`` is not an integer.
        """
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidArgument(f"a message's seq must be an integer; found {found(seq)}")
        if isinstance(content, (str, bytes, dict)) or not isinstance(content, Sequence) or not content:
            raise InvalidMessage(f"an edit's content must be a non-empty list of content blocks; found {found(content)}")
        if all(isinstance(b, dict) and b.get("type") == "text" and not str(b.get("text", "")).strip() for b in content):
            # a turn of blank text is one no request format can send (it would break every later compile)
            raise InvalidMessage("an edit's content holds only empty text; give the corrected text")
        m = self._mark
        claim = getattr(self, "compaction_claim", None)  # PostgreSQL: wait for a compression of this tree to end
        with claim() if claim is not None else nullcontext(), self._reading(f"editing message {seq}"), self._write():
            total = self.next_seq()
            if not 0 <= seq < total:
                holds = f"it holds messages 0 to {total - 1}" if total else "it holds no message"
                raise StoreError(f"{self.path}: no message {seq} in conversation {self.conversation!r}: {holds}")
            own = self._own()
            if self._lineage.owner(seq) != own:
                raise StoreError(
                    f"{self.path}: message {seq} of {self.conversation!r} is shared with the conversation it branches"
                    f" from; branch at {seq} (compaction branch --at {seq}) and append the corrected message there"
                )
            old = self.messages(seq, seq + 1)[0]
            edited = ingest.checked_messages([Message(old.role, tuple(content), None, old.source_id, old.meta)])[0]
            row = ingest.prepare(edited, self.encoding)
            self._store_blobs(row)
            now = time.time()
            revision = int(
                self._db.execute(
                    f"SELECT COALESCE(MAX(revision), 0) + 1 FROM revisions WHERE conversation_id = {m} AND seq = {m}",
                    (own, seq),
                ).fetchone()[0]
            )
            self._db.execute(
                "INSERT INTO revisions (conversation_id, seq, revision, content, tool_uses, tool_results, images,"
                f" created_at) VALUES ({m}, {m}, {m}, {m}, {m}, {m}, {m}, {m})",
                (own, seq, revision, row.content, row.tool_uses, row.tool_results, row.images, now),
            )
            self._db.execute(f"DELETE FROM token_counts WHERE conversation_id = {m} AND seq = {m}", (own, seq))
            self._db.execute(
                f"INSERT INTO token_counts (conversation_id, seq, encoding, text_tokens) VALUES ({m}, {m}, {m}, {m})",
                (own, seq, row.token_key, row.text_tokens),
            )
            stale = self._stale_from(own, seq, f"message {seq} edited (revision {revision})", now)
            detail = {"frame": {"cut": 0, "cover": []}, "edit": {"seq": seq, "revision": revision, "stale_summaries": stale}}
            self._db.execute(
                "INSERT INTO compaction_events (conversation_id, created_at, tokens_before, tokens_after, budget, detail)"
                f" VALUES ({m}, {m}, 0, 0, NULL, {m})",
                (own, now, canonical_json(detail)),
            )
        return revision

    def _stale_from(self, owner: int, seq: int, reason: str, now: float) -> int:
        """Move every summary that shows message ``seq`` of ``owner`` or what follows it to ``stale_summaries``.

        That is, in ``owner`` and in every conversation whose lineage holds ``owner``'s message
        ``seq``, the summaries kept there ending after ``seq``.  Returns how many.
        """
        m = self._mark
        tree = self._tree()
        moved = 0
        for cid in sorted(tree):
            segment = next((g for g in lineage_of(cid, tree).segments if g.conversation_id == owner), None)
            if segment is None or (segment.end is not None and segment.end <= seq):
                continue
            self._db.execute(
                "INSERT INTO stale_summaries (id, conversation_id, level, start_seq, end_seq, text, provenance,"
                f" created_at, stale_at, reason) SELECT id, conversation_id, level, start_seq, end_seq, text,"
                f" provenance, created_at, {m}, {m} FROM summaries WHERE conversation_id = {m} AND end_seq > {m}",
                (now, reason, cid, seq),
            )
            moved += self._db.execute(
                f"DELETE FROM summaries WHERE conversation_id = {m} AND end_seq > {m}", (cid, seq)
            ).rowcount
        return int(moved)

    def stale_summaries(self) -> list[dict[str, Any]]:
        """Return the summaries edits made stale in this conversation's lineage, oldest first.

        Each is a dict of ``id``, ``level``, ``start_seq``, ``end_seq``, ``reason`` and ``stale_at``.
        """
        ids = [seg.conversation_id for seg in self._lineage.segments]
        if not ids:
            return []
        m = self._mark
        marks = ", ".join(m for _ in ids)
        with self._reading("reading stale summaries"):
            rows = self._db.execute(
                f"SELECT id, level, start_seq, end_seq, reason, stale_at FROM stale_summaries"
                f" WHERE conversation_id IN ({marks}) ORDER BY stale_at, id",
                ids,
            ).fetchall()
        return [
            {"id": int(i), "level": int(lv), "start_seq": int(s), "end_seq": int(e), "reason": str(r), "stale_at": float(at)}
            for i, lv, s, e, r, at in rows
        ]

    def revisions(self, seq: int) -> int:
        """Return how many times message ``seq`` was edited (0: never), as this conversation sees it."""
        owner = self._lineage.owner(seq) if isinstance(seq, int) else None
        if owner is None:
            return 0
        with self._reading("reading revisions"):
            row = self._db.execute(
                f"SELECT COUNT(*) FROM revisions WHERE conversation_id = {self._mark} AND seq = {self._mark}", (owner, seq)
            ).fetchone()
        return int(row[0])

    def _store_blobs(self, row: Any) -> None:  # pragma: no cover - the backend's
        raise NotImplementedError

    def pinned_seqs(self) -> list[int]:  # pragma: no cover - the backend's
        raise NotImplementedError

    def messages(self, start: int = 0, end: int | None = None) -> list[Message]:  # pragma: no cover - the backend's
        raise NotImplementedError

    def lineage(self) -> Iterator[tuple[int, int, int | None]]:
        """Yield ``(conversation id, first seq, end seq or None)`` of each part of what this conversation shows."""
        for seg in self._lineage.segments:
            yield seg.conversation_id, seg.start, seg.end


def _shown(cid: int, tree: _Tree, own_next: dict[int, int]) -> int:
    """Return how many messages conversation ``cid`` shows: its own next seq, else what it shares."""
    if cid in own_next:
        return own_next[cid]
    parent, fork = tree[cid]
    if parent is None:
        return 0
    return min(int(fork or 0), _shown(parent, tree, own_next))
