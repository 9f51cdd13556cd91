"""Conversations and branches in one store: which rows a conversation sees, as SQL.

A store holds many conversations (table ``conversations``: id, unique name, parent id, fork
seq, created).  A **branch** forks a conversation at seq ``F``: it shares the parent's messages
``[0, F)`` (no row is copied) and its own messages are numbered from ``F``, so the seqs a
branch shows stay dense from 0 over its lineage and compile, coverage and pairing see one
ordinary history.

A conversation's **lineage** is a list of :class:`Segment` from itself up to its root: the
conversation itself holds ``[fork, ∞)``, its parent ``[parent's fork, F)``, the grandparent
``[its fork, min(F, parent's fork))`` and so on.  Messages, their cached token counts and
everything numbered by seq are read through :meth:`Lineage.rows`.

Summaries (and summarizer failures) are numbered by seq ranges: a summary stored with
conversation ``c`` is visible to a descendant when its range ends at or before the point where
the descendant's lineage leaves ``c`` and no summary of the same or a lower level from a
conversation nearer in the lineage overlaps it (:meth:`Lineage.summaries`: a merge whose
children are hidden is hidden with them).  A new summary is stored with the most ancestral
conversation that shares its whole range (:meth:`Lineage.homes`), sees no overlapping summary
of its level and, for a merge, sees the same children
(``ConversationScope._fits_home``), so a summary of the shared prefix is made once and
every branch that shows that prefix reuses it, and no conversation sees two summaries of
one level overlap or a merge over children it does not see (a parent compressed past the
fork point keeps its own summaries; a branch's summaries across the fork point hide the
parent's later ones they overlap, and the parent's merges of those).

Nothing here runs SQL; both backends build their ``WHERE`` clauses from it (``mark`` is the
driver's placeholder: ``?`` for sqlite3, ``%s`` for psycopg).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from ..errors import InvalidArgument, found

__all__ = [
    "ANY_CONVERSATION",
    "CURRENT_REVISION",
    "DEFAULT_CONVERSATION",
    "Lineage",
    "Segment",
    "check_conversation_name",
    "lineage_from_walk",
    "lineage_of",
]

#: The name of the conversation a store opened without one uses when it holds none yet (and
#: of the conversation a store from before conversations existed migrates into).
DEFAULT_CONVERSATION = "default"

#: Passed as the conversation by :func:`~compaction.store.factory.list_conversations`: open
#: the store without choosing one (it reads no conversation's rows; not a valid name).
ANY_CONVERSATION = "\x00any"

#: Joins ``messages m`` to its newest revision ``r`` (none: ``r.*`` is NULL): an edit appends a
#: revision of the message (its row stays), and every read shows the newest, so a read takes
#: ``COALESCE(r.content, m.content)`` (and likewise ``tool_uses``, ``tool_results``, ``images``).
#: A revision is keyed as its message is, so a branch sharing the message sees it too.
CURRENT_REVISION = (
    "LEFT JOIN revisions r ON r.conversation_id = m.conversation_id AND r.seq = m.seq"
    " AND r.revision = (SELECT MAX(x.revision) FROM revisions x"
    " WHERE x.conversation_id = m.conversation_id AND x.seq = m.seq)"
)

#: The stop of the conversation a lineage is of, in the SQL of :meth:`Lineage.summaries`: past
#: every seq (its summaries all count; 2**62 fits a BIGINT and an SQLite integer).
_OPEN_STOP = 2**62

#: The most conditions a lineage keeps built (:meth:`Lineage._memo`); past it they are built again.
_MEMO_SIZE = 256

#: The longest conversation name (characters).
MAX_NAME = 200


def check_conversation_name(name: object) -> str:
    """Return ``name`` when it can name a conversation: 1 to 200 characters, no control characters.

    Raises:
        InvalidArgument: ``name`` is not a string, is empty or blank, too long, or holds a
            control character (a newline, a NUL...).
    """
    if not isinstance(name, str):
        raise InvalidArgument(f"a conversation's name must be a string; found {found(name)}")
    if not name.strip():
        raise InvalidArgument("a conversation's name must not be empty")
    if len(name) > MAX_NAME:
        raise InvalidArgument(f"a conversation's name is at most {MAX_NAME} characters; found {len(name)}")
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        raise InvalidArgument(f"a conversation's name must hold no control character; found {name!r}")
    return name


@dataclass(frozen=True)
class Segment:
    """The part of a lineage one conversation holds.

    Attributes:
        conversation_id: the conversation whose rows these are.
        start: the first seq it holds (its fork seq; 0 for a root).
        end: the seq its rows stop being seen at (a descendant's fork), ``None`` for the
            conversation the lineage is of (open-ended).
    """

    conversation_id: int
    start: int
    end: int | None


@dataclass(frozen=True)
class Lineage:
    """What one conversation sees: its :class:`Segment` first, then its ancestors' up to the root.

    An empty lineage (no segments) is a conversation not created yet: it sees nothing.
    """

    segments: tuple[Segment, ...]

    @property
    def own(self) -> int | None:
        """The conversation's own id (``None`` before it is created)."""
        return self.segments[0].conversation_id if self.segments else None

    def rows(
        self, alias: str = "", mark: str = "?", start: int | None = None, end: int | None = None
    ) -> tuple[str, list[int]]:
        """Return a SQL condition selecting the rows (keyed by conversation and seq) it sees, and its arguments.

        Written with the store's own integer ids and seqs as literals (the arguments are
        empty), as :meth:`summaries`: psycopg converts a query's placeholders in time linear
        in their number on every execution (three per conversation: about 7 ms a read 300
        deep), and a deep branch reads many times.

        Args:
            alias: the table's alias with its dot (``"m."``), or ``""``.
            mark: the driver's placeholder (unused: kept so every condition here is asked for alike).
            start: when given with ``end``, the caller reads seqs ``[start, end)`` only: the
                condition names only the conversations holding some of them (one for a read
                of one message, however deep the lineage; PostgreSQL plans an ``OR`` of 300
                terms in about 14 ms).  Rows outside the range may or may not be selected.
            end: see ``start``.
        """
        kept = self._kept(start, end)
        # the kept segments are a run of the lineage (their seq ranges are disjoint and
        # descending), so its ends name the condition; a store object reading many ranges
        # keeps at most _MEMO_SIZE of them
        key = ("rows", alias, str(kept[0]) if kept else "", str(kept[-1]) if kept else "")
        memo = self._memo()
        text = memo.get(key)
        if text is None:
            parts: list[str] = []
            for index in kept:
                seg = self.segments[index]
                # seq >= 0 holds for every row; saying it anyway makes SQLite's planner take it as
                # the index range's lower bound over a caller's own (a scan from seq 0 on each read).
                part = f"{alias}conversation_id = {int(seg.conversation_id)}"
                if seg.start > 0:
                    part += f" AND {alias}seq >= {int(seg.start)}"
                if seg.end is not None:
                    part += f" AND {alias}seq < {int(seg.end)}"
                parts.append(f"({part})")
            text = _joined(parts, "OR") if parts else "(1 = 0)"
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[key] = text
        return text, []

    def rows_join(self, alias: str = "m.", start: int | None = None, end: int | None = None) -> str:
        """Return a ``JOIN`` selecting the rows (keyed by conversation and seq) it sees, the rows :meth:`rows` selects.

        The lineage as a table of ``(cid, lo, hi)`` (each conversation's seqs ``[lo, hi)``),
        written as a ``VALUES`` list of the store's own integers, joined to the table at
        ``alias`` on its conversation and seq range: one index range per conversation, and
        a statement SQLite prepares in time linear in the depth.  :meth:`rows`'s ``OR`` of
        one range per conversation costs SQLite's planner more than the square of the depth
        to prepare (a full read of a chain of branches 1,600 deep: 566 ms the first time
        against 15 ms so), and a fresh store object prepares each read once.  A conversation
        appears once in a lineage, so each row is joined at most once.

        Args:
            alias: the table's alias with its dot (``"m."``).
            start: when given with ``end``, only the conversations holding some of
                ``[start, end)`` are listed, as :meth:`rows` does.
            end: see ``start``.
        """
        kept = self._kept(start, end)
        key = ("join", alias, str(kept[0]) if kept else "", str(kept[-1]) if kept else "")
        memo = self._memo()
        text = memo.get(key)
        if text is None:
            values = ", ".join(
                f"({int(seg.conversation_id)}, {int(seg.start)}, {_OPEN_STOP if seg.end is None else int(seg.end)})"
                for seg in (self.segments[index] for index in kept)
            )
            table = (
                f"SELECT v.column1 AS cid, v.column2 AS lo, v.column3 AS hi FROM (VALUES {values}) AS v"
                if values
                else "SELECT 0 AS cid, 0 AS lo, 0 AS hi WHERE 1 = 0"
            )
            text = (
                f"JOIN ({table}) AS lin ON {alias}conversation_id = lin.cid"
                f" AND {alias}seq >= lin.lo AND {alias}seq < lin.hi"
            )
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[key] = text
        return text

    def _kept(self, start: int | None, end: int | None) -> list[int]:
        """Return the indexes of the segments holding rows (of ``[start, end)`` when both are given)."""
        return [
            index
            for index, seg in enumerate(self.segments)
            if (seg.end is None or seg.end > seg.start)  # else a descendant forked below its own rows
            and (start is None or end is None or (seg.start < end and (seg.end is None or seg.end > start)))
        ]

    def child(self, conversation_id: int, fork: int) -> Lineage:
        """Return the lineage of a branch ``conversation_id`` forked from this conversation at seq ``fork``.

        What :func:`lineage_of` gives once the branch is stored, without reading the
        ``conversations`` table: the branch's own segment ``[fork, ∞)``, then this lineage with
        each end capped at ``fork`` (where the branch leaves it).  The ends grow no larger
        going up a lineage (each is the smallest fork below it), so only the segments before
        the first ending at or before ``fork`` change, and the rest are this lineage's own
        objects: a branch of a branch nested ``d`` deep costs what changes (one segment when
        each fork lies past the one before), not ``d``.

        Raises:
            InvalidArgument: this lineage is empty (its conversation is not created yet), or
                ``fork`` is not a seq (a negative or non-integer value).
        """
        if not self.segments:
            raise InvalidArgument("a conversation not created yet has no branch; append to it first")
        if isinstance(fork, bool) or not isinstance(fork, int) or fork < 0:
            raise InvalidArgument(f"a branch's fork is a message's seq (an integer >= 0); found {found(fork)}")
        changed = [Segment(int(conversation_id), fork, None)]
        kept = len(self.segments)
        for index, seg in enumerate(self.segments):
            if seg.end is not None and seg.end <= fork:
                kept = index
                break
            changed.append(Segment(seg.conversation_id, seg.start, fork))
        return Lineage((*changed, *self.segments[kept:]))

    def _memo(self) -> dict[tuple[str, ...], str]:
        """Return this lineage's conditions built so far, by what was asked (built once each).

        A store object asks for the same condition on every read, and building one costs
        time linear in the depth (about 1 ms 400 deep); the segments are frozen, so the text
        never changes.  Kept outside the dataclass's fields (it is frozen), so equality and
        hashing still compare the segments only.
        """
        memo: dict[tuple[str, ...], str] = self.__dict__.setdefault("_conditions", {})
        return memo

    def keyed(self, alias: str = "", after: int | None = None) -> str:
        """Return a SQL condition selecting the rows of the conversations of this lineage (any seq).

        ``conversation_id IN (...)`` with the store's own integer ids as literals: a superset
        of :meth:`rows` that a driver prepares in time linear in the depth.  A lookup by a
        unique key (``import_key = ? AND`` this) reads at most one row per conversation, and
        :meth:`sees` tells which of them the lineage shows.  :meth:`rows` in its place made
        SQLite's planner work quadratically in the depth (its ``OR`` of one range per
        conversation beside another indexed term: about 29 ms a lookup 800 deep against
        0.5 ms), and an import or a chain of branches makes a lookup per message.

        Args:
            alias: the table's alias with its dot (``"m."``), or ``""``.
            after: when given, name only the conversations holding some seq past ``after``
                (a prefix of the lineage: its segments' seq ranges descend), for a caller
                that knows the row it looks for lies there; one or two conversations for a
                lookup at a branch's end, however deep the lineage.
        """
        count = len(self.segments)
        if after is not None:
            count = 0  # the segments holding a seq past `after`: ends fall going up the lineage
            while count < len(self.segments):
                end = self.segments[count].end
                if end is not None and end <= after + 1:
                    break
                count += 1
        memo, key = self._memo(), ("keyed", alias, str(count))
        text = memo.get(key)
        if text is None:  # built once a lineage: a lookup per appended message asks for it
            ids = [
                str(int(seg.conversation_id))
                for seg in self.segments[:count]
                if seg.end is None or seg.end > seg.start
            ]
            text = f"({alias}conversation_id IN ({', '.join(ids)}))" if ids else "(1 = 0)"
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[key] = text
        return text

    def sees(self, conversation_id: int, seq: int) -> bool:
        """Return whether the row ``(conversation_id, seq)`` is one this lineage shows (see :meth:`rows`).

        A dictionary lookup (built once per lineage), so filtering the rows :meth:`keyed`
        selected costs no walk of the lineage per row.
        """
        spans = self.__dict__.get("_spans")
        if spans is None:
            spans = {seg.conversation_id: (seg.start, seg.end) for seg in self.segments}
            self.__dict__["_spans"] = spans  # a frozen dataclass: a cache outside its fields
        span = spans.get(conversation_id)
        if span is None:
            return False
        start, end = span
        return seq >= start and (end is None or seq < end)

    def summaries(self, alias: str = "", mark: str = "?", *, shadowed: bool = True) -> tuple[str, list[int]]:
        """Return a SQL condition selecting the summaries it sees, and its arguments.

        A summary kept with an ancestor is seen when its ``end_seq`` is at or before the seq
        where this lineage leaves that ancestor, and (with ``shadowed``) no summary of the
        same or a lower level from a conversation nearer in the lineage overlaps it: the
        branch's own summaries win, so the ones it sees never overlap within a level, and an
        ancestor's merge is hidden with the children it covers (a lower-level overlap), so
        each merge it sees lies over children it sees.  A nearer summary of a higher level
        hides nothing: its children may be the ancestor's.  Its own summaries are all seen.

        Args:
            alias: the ``summaries`` table's alias with its dot (default ``"summaries."``
                when ``shadowed``; the condition has a subquery of its own).
            mark: the driver's placeholder (unused: the condition is written with literals
                and its arguments are empty; kept so every condition here is asked for alike).
            shadowed: hide ancestors' summaries overlapped by nearer ones (``False`` for
                the ``failures`` table, which has the same range columns).
        """
        if shadowed and not alias:
            alias = "summaries."
        memo, key = self._memo(), ("summaries", alias, "shadowed" if shadowed else "all")
        if key in memo:
            return memo[key], []
        # The ids and seqs are the store's own integers, written as literals: a deep lineage
        # needs no placeholders (psycopg spends ~30 ms a query on 800 of them, 400 deep).
        # The ancestors' part is one IN list and one CASE of their stops, not an OR of one
        # term per ancestor: SQLite plans an OR of n terms in time growing with n squared
        # (a summary count took 11 ms 700 deep, once per branch made).
        own: list[str] = []
        ids: list[str] = []
        stops: list[str] = []
        args: list[int] = []
        for seg in self.segments:
            if seg.end is None:
                own.append(f"({alias}conversation_id = {int(seg.conversation_id)})")
            else:
                ids.append(str(int(seg.conversation_id)))
                stops.append(f"WHEN {int(seg.conversation_id)} THEN {int(seg.end)}")
        if not ids:
            memo[key] = own[0] if own else "(1 = 0)"
            return memo[key], args
        ancestral = (
            f"({alias}conversation_id IN ({', '.join(ids)})"
            f" AND {alias}end_seq <= CASE {alias}conversation_id {' '.join(stops)} END)"
        )
        if shadowed:
            ancestral = f"({ancestral} AND NOT EXISTS {self._nearer_overlap(alias)})"
        memo[key] = _joined([*own, ancestral], "OR")
        return memo[key], args

    def _nearer_overlap(self, alias: str) -> str:
        """Return a subquery finding a summary nearer in the lineage that hides the one at ``alias``.

        The lineage is written once into the SQL as a ``VALUES`` table (``WITH lineage``) of (conversation id,
        depth, stop) rows: 0 is the conversation itself (stop: no limit), its parent 1, and so
        on, with the seq where this lineage leaves each as its stop.  A summary ``o`` hides the
        summary at ``alias`` when ``o`` is kept with a conversation of lower depth, ends by that
        conversation's stop, is of the same or a lower level and overlaps it.  One table and
        one probe of ``summaries`` per row of it: the query grows linearly with depth (one
        ``NOT EXISTS`` per pair of conversations grew with its square, past SQLite's 65,535
        references to a table near 360 deep).  The values are the store's own integer ids
        and seqs written as literals, so a deep lineage needs no placeholders (SQLite allows
        32,766).
        """
        rows = ", ".join(
            f"({int(seg.conversation_id)}, {depth}, {_OPEN_STOP if seg.end is None else int(seg.end)})"
            for depth, seg in enumerate(self.segments)
        )
        return (
            f"(WITH lineage (conversation_id, depth, stop) AS (VALUES {rows})"
            " SELECT 1 FROM lineage here, lineage near, summaries o"
            f" WHERE here.conversation_id = {alias}conversation_id AND near.depth < here.depth"
            " AND o.conversation_id = near.conversation_id AND o.end_seq <= near.stop"
            f" AND o.level <= {alias}level AND o.start_seq < {alias}end_seq AND o.end_seq > {alias}start_seq)"
        )

    def points(self, alias: str = "", mark: str = "?") -> tuple[str, list[int]]:
        """Return a SQL condition selecting the per-message marks (pins) it sees, and its arguments.

        Its own are all seen; an ancestor's when the message lies before the seq where this
        lineage leaves that ancestor (a pin made in the shared part before the fork).
        """
        parts: list[str] = []
        args: list[int] = []
        for seg in self.segments:
            if seg.end is None:
                parts.append(f"({alias}conversation_id = {mark})")
                args.append(seg.conversation_id)
            else:
                parts.append(f"({alias}conversation_id = {mark} AND {alias}seq < {mark})")
                args += [seg.conversation_id, seg.end]
        return (_joined(parts, "OR") if parts else "(1 = 0)"), args

    def ancestors(self) -> tuple[tuple[int, int], ...]:
        """Return ``(conversation id, stop)`` of each conversation this one branches from, nearest first.

        ``stop`` is the seq where this lineage leaves that conversation: this conversation
        shares its messages (and the requests it compiled) below ``stop`` only.  Empty for
        a root and before the conversation is created.
        """
        return tuple((seg.conversation_id, seg.end) for seg in self.segments if seg.end is not None)

    def ancestral_events(self, alias: str = "") -> str:
        """Return a SQL condition selecting the compaction events of the conversations it branches from.

        Written with the store's own integer ids as literals (no placeholders, as
        :meth:`summaries`), so a deep lineage costs the driver nothing to convert.

        Args:
            alias: the ``compaction_events`` table's alias with its dot, or ``""``.
        """
        ids = [str(int(cid)) for cid, _stop in self.ancestors()]
        return f"({alias}conversation_id IN ({', '.join(ids)}))" if ids else "(1 = 0)"

    def owner(self, seq: int) -> int | None:
        """Return the id of the conversation whose row is message ``seq`` of this lineage (else ``None``)."""
        for seg in self.segments:
            if seq >= seg.start and (seg.end is None or seq < seg.end):
                return seg.conversation_id
        return None

    def homes(self, end_seq: int) -> list[int]:
        """Return the conversations a summary ending at ``end_seq`` may be kept with, most ancestral first.

        Those whose shared part holds the whole range (``end_seq`` at or before where this
        lineage leaves them), down to the conversation itself: every branch that shows the
        range sees a summary kept with the first.  Empty before the conversation is created.
        """
        return [
            seg.conversation_id for seg in reversed(self.segments) if seg.end is None or end_seq <= seg.end
        ]


def _joined(parts: list[str], operator: str) -> str:
    """Join SQL conditions with ``operator`` as a balanced tree of parentheses, in order.

    SQLite parses ``a OR b OR c ...`` as a chain as deep as it is long and refuses an
    expression deeper than 1,000 (``SQLITE_MAX_EXPR_DEPTH``), so a branch nested 1,000
    deep could not be read at all; halves nest only ``log2(n)`` deep, and the planner
    splits nested ``OR`` terms as it does a flat list (the arguments keep their order).
    """
    if len(parts) == 1:
        return f"({parts[0]})"
    middle = len(parts) // 2
    return f"({_joined(parts[:middle], operator)} {operator} {_joined(parts[middle:], operator)})"


def lineage_of(conversation_id: int | None, tree: dict[int, tuple[int | None, int | None]]) -> Lineage:
    """Return the lineage of ``conversation_id`` given every conversation's ``(parent id, fork seq)``.

    Args:
        conversation_id: the conversation (``None``: one not created yet, an empty lineage).
        tree: ``{id: (parent_id, fork_seq)}`` of the store's conversations (a root has
            ``(None, None)``).

    Raises:
        InvalidArgument: the parents form a cycle or name a conversation not in ``tree``
            (a damaged ``conversations`` table).
    """
    if conversation_id is None:
        return Lineage(())
    segments: list[Segment] = []
    end: int | None = None
    current: int | None = conversation_id
    seen: set[int] = set()
    while current is not None:
        if current in seen or current not in tree:
            raise InvalidArgument(
                f"conversation {conversation_id}: its parents form a cycle or name a missing one"
            )
        seen.add(current)
        parent, fork = tree[current]
        start = 0 if parent is None else int(fork or 0)
        segments.append(Segment(current, start, end))
        if parent is not None:
            end = start if end is None else min(end, start)
        current = parent
    return Lineage(tuple(segments))


#: The recursive query :func:`lineage_from_walk` reads (``{mark}``: the driver's placeholder for the
#: conversation's id).  It walks up the ``parent_id`` links from the conversation, carrying each
#: row's depth and the seq where the lineage leaves it (the smallest fork below it), so each row
#: is a :class:`Segment` as it comes.  The walk stops at a root, or (a damaged table whose
#: parents form a cycle) once it is as long as the table holds conversations.
LINEAGE_WALK = (
    "WITH RECURSIVE up(id, parent_id, fork_seq, depth, stop) AS ("
    "SELECT id, parent_id, CAST(fork_seq AS BIGINT), 0, CAST(NULL AS BIGINT) FROM conversations WHERE id = {mark}"
    " UNION ALL SELECT c.id, c.parent_id, CAST(c.fork_seq AS BIGINT), up.depth + 1,"
    " CASE WHEN up.stop IS NULL OR COALESCE(up.fork_seq, 0) < up.stop THEN COALESCE(up.fork_seq, 0) ELSE up.stop END"
    " FROM conversations c JOIN up ON c.id = up.parent_id"
    " WHERE up.depth < (SELECT COUNT(*) FROM conversations))"
    " SELECT id, parent_id, CASE WHEN parent_id IS NULL THEN 0 ELSE COALESCE(fork_seq, 0) END, stop"
    " FROM up ORDER BY depth"
)


def lineage_from_walk(conversation_id: int, walk: list[tuple[int, int | None, int, int | None]]) -> Lineage:
    """Return the lineage of ``conversation_id`` from the rows of :data:`LINEAGE_WALK`.

    What :func:`lineage_of` gives from the whole ``conversations`` table, with the ends worked
    out by the query: one :class:`Segment` a row, no dictionary of the tree and no walk in
    Python (a fresh store object opening a branch spent 2.9 ms building its lineage that way,
    400 ancestors on average, in a chain 800 deep: cProfile, about 40% of each open).

    Args:
        conversation_id: the conversation the walk started from.
        walk: ``(id, parent id, first seq, end seq or None)`` per conversation, from it up to
            its root (depth order).

    Raises:
        InvalidArgument: the walk is empty (no such conversation), or its last row has a parent
            (the parents form a cycle or name a missing conversation): a damaged table.
    """
    if not walk or walk[-1][1] is not None:
        raise InvalidArgument(
            f"conversation {conversation_id}: its parents form a cycle or name a missing one"
        )
    return Lineage(
        tuple(
            [
                Segment(int(cid), int(start), None if stop is None else int(stop))
                for cid, _p, start, stop in walk
            ]
        )
    )
