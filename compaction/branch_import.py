"""Import the branches a session left as branches of a store, instead of flattening or dropping them.

``compaction import FILE --branches`` imports the transcript's main conversation as usual and
then, with :func:`import_branches`, each other path of the session as a branch of it
(:meth:`~compaction.store.scope.ConversationScope.branch`): forked where it leaves the
conversation (or an earlier branch) it shares the longest prefix with, so nothing shared is
stored twice.  Each path is read by the format's own parser from the file's lines on that
path, so a branch's messages are exactly what importing that path alone would give; a
Claude Code path resumes from the parse of the path it continues, where it leaves it
(:mod:`compaction.formats._claude_code_paths`), so each event is parsed once however
deeply rewinds nest, and the trie of stored paths is walked from there too.

* **pi** session trees (entries with ``id`` / ``parentId``): the parser returns the active
  branch (root to the last entry); each other leaf's path is a branch ``CONVERSATION@LEAF_ID``.
* **Claude Code** sessions (:mod:`compaction.formats._claude_code_tree`): under ``--branches``
  the main conversation leaves out the abandoned events of each rewind (an event with two or
  more prompts as children: the user went back and asked again), instead of flattening them
  in (:func:`session_main`); each rewind is a branch ``CONVERSATION@UUID`` forked where the
  user went back (``UUID``: the abandoned prompt), and each sub-agent's sidechain a branch ``CONVERSATION@sidechain-UUID``
  (``UUID``: its first event) forked at the event it continues.  A sidechain whose first event
  continues nothing (``parentUuid: null``: Claude Code starts a sub-agent from a fresh
  context, so it shares no history with the main conversation) is a conversation of its own
  with that name, and the report says so and why.

Names are derived from the data, so importing again adds nothing; one that would not be a
valid conversation name (a newline in an id, over 200 characters) is made valid by
:func:`branch_name`.  Other formats hold no branches: :func:`import_branches` says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .blocks import Message
from .errors import CompactionError, InvalidTranscript, StoreError
from .formats import ParsedTranscript, parse_text
from .formats._claude_code_paths import ThreadParse, holds_messages, thread_messages
from .formats._claude_code_tree import Thread, json_lines, path_lines, session_tree, split_lines
from .store import ingest
from .store.factory import open_store
from .store.lineage import ANY_CONVERSATION, MAX_NAME

if TYPE_CHECKING:
    from .store.postgres import PostgresStore
    from .store.sqlite import SQLiteStore

    _Store = SQLiteStore | PostgresStore  # one store object, scoped to each path in turn

__all__ = [
    "BRANCHING_FORMATS",
    "BranchPlan",
    "ImportedBranch",
    "branch_name",
    "import_branches",
    "import_session_branches",
    "plan_branches",
    "session_leaves",
    "session_main",
    "store_branches",
]

#: The transcript formats whose sessions hold branches ``--branches`` imports.
BRANCHING_FORMATS = ("pi", "claude-code")


@dataclass(frozen=True)
class ImportedBranch:
    """One branch a session tree left, as imported.

    Attributes:
        name: the branch's conversation name (see :func:`branch_name`).
        parent: the conversation it forks from (``None``: a conversation of its own).
        fork_seq: where it forks (it shares the parent's messages before it; ``None``
            for a conversation of its own).
        messages: the messages on its path (shared ones included).
        added: the messages this import added to it (0 when imported before).
        kind: ``"branch"`` (a pi branch), ``"rewind"`` or ``"sidechain"`` (Claude Code).
        note: why it is what it is, when that needs saying (a sidechain imported as a
            conversation of its own), else ``""``.
    """

    name: str
    parent: str | None
    fork_seq: int | None
    messages: int
    added: int
    kind: str = "branch"
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the branch as a JSON object (the fields by name)."""
        return dataclasses.asdict(self)


def session_leaves(text: str) -> list[list[int]]:
    """Return, for each leaf of a pi session tree but the last entry's, the line indexes of its path.

    A path is the session line(s) and the entries from the root to the leaf, in file order.
    A session that is not a tree (no ``parentId``) has none.
    """
    entries = json_lines(text)
    nodes = {
        e["id"]: (i, e) for i, e in entries if isinstance(e.get("id"), str) and e.get("type") != "session"
    }
    if not any("parentId" in e for _i, e in nodes.values()):
        return []
    sessions = [i for i, e in entries if e.get("type") == "session"]
    has_child = {e.get("parentId") for _i, e in nodes.values()}
    leaves = [node for node in nodes if node not in has_child]
    last = max(nodes, key=lambda node: nodes[node][0]) if nodes else None
    paths = []
    for leaf in sorted(leaves, key=lambda node: nodes[node][0]):
        if leaf == last:
            continue
        path: list[int] = []
        node: Any = leaf
        seen: set[str] = set()
        while isinstance(node, str) and node in nodes and node not in seen:
            seen.add(node)
            path.append(nodes[node][0])
            node = nodes[node][1].get("parentId")
        if isinstance(node, str) and node not in seen:  # a parent not in the file: the path is broken
            continue
        paths.append(sorted(sessions + path))
    return paths


class _Node:
    """A prefix of one or more paths: its last message, the chain key over it, the paths through it."""

    __slots__ = ("children", "depth", "fingerprint", "key", "message", "names", "parent")

    def __init__(
        self, fingerprint: str, message: Message | None, key: str, parent: _Node | None = None
    ) -> None:
        self.children: dict[str, _Node] = {}
        self.parent = parent
        self.depth: int = parent.depth + 1 if parent is not None else 0
        self.fingerprint = fingerprint
        self.message = message
        self.key = key  # the import key of the prefix's last message (ingest.chain_step over it)
        self.names: list[tuple[int, str]] = []  # the two first-stored paths through it: (order, name)


@dataclass(frozen=True)
class _Interned:
    """A path as :meth:`_PrefixTree.intern` returns it: its messages as given (``raw``), as kept
    (equal ones held once), their fingerprints, and the trie node of its last message."""

    raw: list[Message]
    kept: list[Message]
    prints: list[str]
    leaf: _Node
    shared: int = 0  # how many messages were taken from the earlier path given


class _PrefixTree:
    """The message paths of a session as a trie of fingerprints, so each shared prefix is held once.

    Finding the stored path that shares the longest prefix with a new one walks the new path
    once (its length), instead of comparing it with every stored path (the number of paths
    times their length: quadratic in the branches of a session, cubic in nested rewinds).
    Each node also keeps the import key of the prefix ending there (the hash chain
    ``append(..., chain_seed=format)`` stores), so a branch's shared prefix can be checked with
    one read instead of walking it in the store.
    """

    def __init__(self, chain_seed: str) -> None:
        self.root = _Node("", None, ingest.seed_key(chain_seed))
        self._order: dict[str, int] = {}
        self._prints: dict[int, tuple[Message, str]] = {}  # id -> (message, its fingerprint), held

    def intern(self, messages: list[Message], after: _Interned | None = None, shared: int = 0) -> _Interned:
        """Return ``messages`` and their fingerprints, each message equal (meta too) to one on an
        earlier path at the same place replaced by that one, so equal prefixes are held once.

        ``after``: an earlier path whose first ``shared`` messages (before interning) are the
        first ``shared`` of ``messages``, the same objects: those are taken from it (walking
        up from its end), so a path costs what it adds, not its length."""
        node, kept, prints = self.root, [], []
        if (
            after is not None
            and 0 < shared <= min(len(after.raw), len(messages))
            and all(map(operator.is_, messages[:shared], after.raw[:shared]))
        ):
            node = after.leaf
            while node.depth > shared:
                assert node.parent is not None
                node = node.parent
            kept, prints = after.kept[:shared], after.prints[:shared]
        else:
            shared = 0
        for message in messages[shared:]:
            fingerprint = self._fingerprint(message)
            child = self._child(node, fingerprint, message)
            held = child.message
            kept.append(
                held
                if held is message or (held is not None and held == message and held.meta == message.meta)
                else message
            )
            prints.append(child.fingerprint)
            node = child
        return _Interned(messages, kept, prints, node, shared)

    def _fingerprint(self, message: Message) -> str:
        """``message.fingerprint()``, worked out once a message (paths parsed together share them)."""
        known = self._prints.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        fingerprint = message.fingerprint()
        self._prints[id(message)] = (message, fingerprint)
        return fingerprint

    def add(self, name: str, prints: list[str], start: _Node | None = None) -> _Node:
        """Record that conversation ``name`` shows the messages ``prints`` (an earlier record of it is a
        prefix); return the node of its last message.

        ``start``: the node of ``prints[:start.depth]`` (on a recorded path), to walk from.  The
        names are marked from the last node up, stopping at a node the name would not change:
        each node holds the first two names of the paths through it, so its ancestors, whose
        paths include its own, would not change either."""
        order = self._order.setdefault(name, len(self._order))
        node = start if start is not None else self.root
        for fingerprint in prints[node.depth :]:
            node = self._child(node, fingerprint)
        leaf = node
        walk: _Node | None = node
        while walk is not None and self._mark(walk, order, name):
            walk = walk.parent
        return leaf

    @staticmethod
    def _child(node: _Node, fingerprint: str, message: Message | None = None) -> _Node:
        """Return the child of ``node`` for ``fingerprint``, made (holding ``message``) when missing."""
        child = node.children.get(fingerprint)
        if child is None:
            child = node.children[fingerprint] = _Node(
                fingerprint, message, ingest.chain_step(node.key, fingerprint), node
            )
        return child

    @staticmethod
    def _mark(node: _Node, order: int, name: str) -> bool:
        """Mark ``node`` as on a path of ``name``; return whether that changed it."""
        if (order, name) in node.names or (len(node.names) == 2 and node.names[1] < (order, name)):
            return False
        node.names = sorted([*node.names, (order, name)])[:2]
        return True

    def holds(self, name: str) -> bool:
        """Whether a path of ``name`` is recorded."""
        return name in self._order

    def covers(self, prints: list[str], start: _Node | None = None) -> bool:
        """Whether a recorded path starts with all of ``prints`` (``start``: as :meth:`add`'s)."""
        node = start if start is not None and start.names else self.root
        for fingerprint in prints[node.depth :]:
            child = node.children.get(fingerprint)
            if child is None or not child.names:
                return False
            node = child
        return bool(node.names)

    def longest(
        self, prints: list[str], other_than: str, start: _Node | None = None
    ) -> tuple[str, int] | None:
        """Return the first-recorded path other than ``other_than`` sharing the longest prefix with
        ``prints``, and the prefix's length (``None`` when no other path is recorded).

        ``start``: as :meth:`add`'s; when a path other than ``other_than`` goes through it, so
        do they all through its ancestors, and the walk starts there."""
        node, best = self.root, None
        if start is not None and any(name != other_than for _order, name in start.names):
            node = start
        for depth in range(node.depth, len(prints) + 1):
            candidate = next((name for _order, name in node.names if name != other_than), None)
            if candidate is None:
                break  # the paths through deeper nodes are among these
            best = (candidate, depth)
            if depth == len(prints):
                break
            child = node.children.get(prints[depth])
            if child is None:
                break
            node = child
        return best

    def key_at(self, prints: list[str], depth: int, start: _Node | None = None) -> str:
        """Return the import key of ``prints[depth - 1]``: the chain over the seed and the first
        ``depth`` fingerprints, as a seeded append stores it (``start`` as :meth:`add`'s)."""
        node = start if start is not None and start.depth <= depth else self.root
        for fingerprint in prints[node.depth : depth]:
            node = self._child(node, fingerprint)
        return node.key


def branch_name(conversation: str, tag: str) -> str:
    """Return the name of the branch ``tag`` of ``conversation``: ``CONVERSATION@TAG``, made valid.

    Stable: the same arguments give the same name.  When ``CONVERSATION@TAG`` is not a valid
    conversation name (:func:`~compaction.store.lineage.check_conversation_name`), control
    characters become ``_`` and a name over 200 characters keeps its head and ends with
    ``~`` and the first 12 hex digits of the sha256 of the whole, so two long tags stay apart.
    """
    name = f"{conversation}@{tag}"
    clean = "".join("_" if unicodedata.category(c) in ("Cc", "Cs") else c for c in name)
    if clean == name and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return clean[: MAX_NAME - 13] + "~" + digest


def session_main(
    location: str | Path,
    transcript: str | Path,
    conversation: str,
    parsed: ParsedTranscript,
    lenient: bool = False,
) -> tuple[ParsedTranscript, list[str]]:
    """Return what ``compaction import --branches`` appends to ``conversation``, and notes to print.

    For a Claude Code session with rewinds, the parse of its main conversation with the
    rewound branches left out (:func:`import_branches` imports them as branches); for any
    other transcript, ``parsed`` itself.  When ``conversation`` already holds messages that
    the new main conversation does not start with (imported before without ``--branches``,
    flattened, or the session was rewound since), nothing is appended to it and the note
    says so: the main conversation imports as a branch ``CONVERSATION@active-UUID`` instead.

    Raises:
        InvalidTranscript: the main conversation could not be parsed.
        StoreError: the store could not be read.
    """
    if parsed.format != "claude-code":
        return parsed, []
    text = Path(transcript).read_text(encoding="utf-8")
    tree = session_tree(text)
    main = (
        parsed
        if not tree.abandoned
        else _parse_text(transcript, path_lines(text, tree.main), parsed.format, lenient)
    )
    held = _held(location, conversation)
    prints = [m.fingerprint() for m in main.messages]
    if held and prints[: len(held)] != held:
        return dataclasses.replace(main, messages=[]), [
            f"conversation {conversation!r} holds messages this session's main conversation does not start with "
            "(imported before without --branches, or the session was rewound since): nothing is appended to it; "
            f"the main conversation's {len(main.messages)} messages import as a branch of it"
        ]
    return main, []


def _held(location: str | Path, conversation: str) -> list[str]:
    """The fingerprints of the messages ``conversation`` shows (none when it, or the store, does not exist yet)."""
    try:
        store = open_store(location, create=False, conversation=conversation)
    except StoreError:
        return []
    with store:
        return [m.fingerprint() for m in store.messages()]


@dataclass(frozen=True)
class _Path:
    """One path to import: its parsed messages, the name it goes to, and how."""

    name: str
    kind: str
    messages: list[Message]
    own: bool = False  # a conversation of its own (shares nothing)
    note: str = ""
    prints: list[str] = dataclasses.field(default_factory=list)  # the messages' fingerprints
    after: int | None = None  # an earlier path (its index) whose first `shared` messages are its first
    shared: int = 0


def _interned(tree: _PrefixTree, path: _Path) -> _Path:
    """``path`` with the messages it shares with an earlier path held once (see :meth:`_PrefixTree.intern`)."""
    done = tree.intern(path.messages)
    return dataclasses.replace(path, messages=done.kept, prints=done.prints)


def import_branches(
    location: str | Path, transcript: str | Path, conversation: str, format: str, lenient: bool = False
) -> tuple[list[ImportedBranch], list[str]]:
    """Import every branch the session in ``transcript`` left, as branches of ``conversation``.

    Call it after importing the transcript's main conversation (:func:`session_main`) into
    ``conversation`` of the store at ``location``.  Importing again adds nothing.

    Args:
        location: the store (a path or ``postgresql://`` URL).
        transcript: the session file.
        conversation: the conversation its main path went to.
        format: the transcript's format (one of :data:`BRANCHING_FORMATS`; others hold no
            branches and give none, with a note saying so).
        lenient: parse each path leniently, as the main import did.

    Returns:
        The branches (and conversations of their own) in file order of their leaves, and
        notes to print (one line each).

    Raises:
        InvalidTranscript: a path could not be parsed.
        StoreError: as the store's ``branch`` and ``append``.  Raised mid-way, the message
            says which branches were stored before (they stay; importing again adds only
            what is missing).
    """
    return store_branches(location, plan_branches(location, transcript, conversation, format, lenient))


@dataclass(frozen=True)
class BranchPlan:
    """The branches of a session, parsed and named, before anything is stored (:func:`plan_branches`).

    Attributes:
        conversation: the conversation the session's main path goes to.
        format: the transcript's format.
        paths: each branch's name, kind and messages, in file order.
        notes: what to print about the session (one line each).
    """

    conversation: str
    format: str
    paths: list[_Path]
    notes: list[str]


def plan_branches(
    location: str | Path, transcript: str | Path, conversation: str, format: str, lenient: bool = False
) -> BranchPlan:
    """Parse and name every branch the session in ``transcript`` left, storing nothing.

    Call it before appending the main conversation, so a branch that cannot be parsed fails
    the import before anything is stored; then :func:`store_branches`.  Under ``lenient``, a
    branch with nothing parseable left is skipped and a note says so.

    Raises:
        InvalidTranscript: a path could not be parsed (not ``lenient``).
        StoreError: the store could not be read.
    """
    if format not in BRANCHING_FORMATS:
        return BranchPlan(conversation, format, [], [])
    text = Path(transcript).read_text(encoding="utf-8")
    notes: list[str] = []
    if format == "pi":
        paths = _pi_paths(transcript, text, conversation, lenient)
        notes = _pi_unreached(transcript, text)
    else:
        paths = _claude_code_paths(location, transcript, text, conversation, lenient, notes)
    return BranchPlan(conversation, format, paths, notes)


def store_branches(location: str | Path, plan: BranchPlan) -> tuple[list[ImportedBranch], list[str]]:
    """Store the branches of ``plan`` (see :func:`import_branches`, whose return and errors it has)."""
    if plan.format not in BRANCHING_FORMATS:
        return [], [
            f"--branches: a {plan.format} transcript holds no branches (only pi session trees and Claude Code "
            "rewinds and sidechains do); it was imported as one conversation"
        ]
    conversation = plan.conversation
    made: list[ImportedBranch] = []
    known = _PrefixTree(plan.format)  # what each stored path shows
    known.add(conversation, _held(location, conversation))
    existing = _existing(location)
    try:
        # one connection held open meanwhile, so closing each path's store does not checkpoint
        # SQLite's write-ahead log every time (a few ms a branch)
        # and one store object scoped to each path in turn (scope_to), so the lineages it
        # reads or makes are reused: a branch's is its parent's plus one segment, and opening
        # each anew read it whole, one row per ancestor (quadratic in nested rewinds)
        with open_store(location, create=False, conversation=ANY_CONVERSATION) as store:
            leaves: dict[int, _Node] = {}  # a path -> the node of its last message in known
            for index, path in enumerate(plan.paths):
                start = leaves.get(path.after) if path.after is not None else None
                while start is not None and start.depth > path.shared:
                    start = start.parent
                branch, leaf = _store_path(store, path, known, existing, plan.format, start)
                if branch is not None:
                    made.append(branch)
                if leaf is not None:
                    leaves[index] = leaf
    except CompactionError as err:
        stored = ", ".join(f"{b.name!r} ({b.added} added)" for b in made) or "no branch"
        message = (
            f"{err} [the import stopped there: conversation {conversation!r} is stored, and of its branches "
            f"{stored}; importing again adds only what is missing]"
        )
        try:
            failure = type(err)(message)
        except TypeError:
            failure = StoreError(message)
        raise failure from err
    return made, list(plan.notes)


def _pi_unreached(transcript: str | Path, text: str) -> list[str]:
    """Say which message entries of a pi session tree lie on no path from a root (so no branch
    holds them): a ``parentId`` cycle, a parent not in the file, an ``id`` that is no string."""
    entries = json_lines(text)
    if not any("parentId" in e for _i, e in entries):
        return []
    nodes = {
        e["id"]: (i, e) for i, e in entries if isinstance(e.get("id"), str) and e.get("type") != "session"
    }
    covered = {i for path in session_leaves(text) for i in path}
    last = max(nodes, key=lambda node: nodes[node][0]) if nodes else None
    node: Any = last
    seen: set[str] = set()
    while isinstance(node, str) and node in nodes and node not in seen:  # the active branch
        seen.add(node)
        covered.add(nodes[node][0])
        node = nodes[node][1].get("parentId")
    lost = [i for i, e in entries if e.get("type") == "message" and i not in covered]
    if not lost:
        return []
    shown = ", ".join(str(i + 1) for i in lost[:10]) + (", ..." if len(lost) > 10 else "")
    return [
        f"{transcript}: {len(lost)} message entries lie on no path from the session's root (a parentId cycle, "
        f"a parent not in the file, or an id that is not a string; lines {shown}): no branch holds them, "
        "so they are not imported"
    ]


def _pi_paths(transcript: str | Path, text: str, conversation: str, lenient: bool) -> list[_Path]:
    lines = split_lines(text)
    entries = dict(json_lines(text))
    out = []
    shared = _PrefixTree("pi")
    for path in session_leaves(text):
        leaf_id = str(entries[path[-1]].get("id"))
        parsed = _parse_text(transcript, "\n".join(lines[i] for i in path) + "\n", "pi", lenient)
        out.append(_interned(shared, _Path(branch_name(conversation, leaf_id), "branch", parsed.messages)))
    return out


def _claude_code_paths(
    location: str | Path,
    transcript: str | Path,
    text: str,
    conversation: str,
    lenient: bool,
    notes: list[str],
) -> list[_Path]:
    tree = session_tree(text)
    all_lines = split_lines(text)  # split once: each path is cut from these
    out: list[_Path] = []
    shared = _PrefixTree("claude-code")
    taken: set[str] = set()

    def unique(tag: str) -> str:
        """The branch name of ``tag``, made distinct from the names given before (a prompt's uuid
        may read ``sidechain-X`` or ``active-X``): a repeat ends with ``~2``, ``~3``..., in file order."""
        name, count = branch_name(conversation, tag), 1
        while name in taken:
            count += 1
            name = branch_name(conversation, f"{tag}~{count}")
        taken.add(name)
        return name

    held = _held(location, conversation)
    if held:
        active = _parse_text(transcript, path_lines(all_lines, tree.main), "claude-code", lenient).messages
        if [m.fingerprint() for m in active[: len(held)]] != held:
            # session_main appended nothing: the main path is a branch like the others
            out.append(
                _interned(shared, _Path(unique(f"active-{_uuid_at(text, tree.main)}"), "rewind", active))
            )
    # each event read once: a thread continuing another resumes from that one's parse at its fork
    read: list[ThreadParse | None] = list(
        thread_messages(text, tree, f"{transcript} (a branch of it)", lenient)
    )
    wanted: dict[int, int] = {}  # a thread -> how many later threads share its first messages
    for parse in read:
        if parse is not None and parse.shares is not None:
            wanted[parse.shares[0]] = wanted.get(parse.shares[0], 0) + 1
    bases: dict[int, _Interned] = {}  # the interned paths later threads share messages with
    placed: dict[int, int] = {}  # a thread -> the index of its path in out
    for index, thread in enumerate(tree.threads):
        done = read[index]
        read[index] = None  # its messages are let go once interned, unless a later thread shares them
        assert done is not None
        after, count = None, 0
        if done.shares is not None:
            base, count = done.shares
            after = bases.get(base)
            wanted[base] -= 1
            if not wanted[base]:
                bases.pop(base, None)
        if done.messages is not None:
            messages = done.messages
        else:
            if not done.holds:
                continue  # no event of it is a message (a sub-agent's system events): nothing to import
            lines = path_lines(all_lines, thread.lines, thread.sidechain_lines, thread.carried_lines)
            if not holds_messages(lines):
                continue  # likewise
            try:
                messages = _parse_text(transcript, lines, "claude-code", lenient).messages
            except InvalidTranscript as err:
                if not lenient:
                    raise
                notes.append(
                    f"--lenient: the {thread.kind} starting at event {thread.start!r} is skipped: {err}"
                )
                continue
        if thread.kind == "rewind":
            path = _Path(unique(thread.start), "rewind", messages)
        else:
            name = unique(f"sidechain-{thread.start}")
            path = _Path(
                name, "sidechain", messages, own=not thread.shares_history, note=_why(thread, conversation)
            )
        interned = shared.intern(path.messages, after, count)
        earlier = placed.get(done.shares[0]) if done.shares is not None and interned.shared else None
        kept = dataclasses.replace(path, messages=interned.kept, prints=interned.prints)
        out.append(
            kept if earlier is None else dataclasses.replace(kept, after=earlier, shared=interned.shared)
        )
        placed[index] = len(out) - 1
        if wanted.get(index):
            bases[index] = interned
    return out


def _uuid_at(text: str, lines: tuple[int, ...]) -> str | None:
    """The uuid of the last main-chain event among ``lines`` (the main conversation's newest)."""
    all_lines = split_lines(text)
    for index in reversed(lines):
        try:
            event = json.loads(all_lines[index])
        except ValueError:
            continue
        if (
            isinstance(event, dict)
            and isinstance(event.get("uuid"), str)
            and event.get("isSidechain") is not True
        ):
            return str(event["uuid"])
    return None


def _why(thread: Thread, conversation: str) -> str:
    """Say why a sidechain is a conversation of its own (empty for one that is a branch)."""
    if thread.shares_history:
        return ""
    task = f"; it answers the Task call whose result is line {thread.task_line}" if thread.task_line else ""
    agent = f" (agent {thread.agent_id})" if thread.agent_id else ""
    if thread.carried_lines:
        lines = sorted(thread.carried_lines)
        return (
            f"sub-agent{agent} whose messages {len(lines)} progress events carry (lines {lines[0] + 1} to "
            f"{lines[-1] + 1}): a sub-agent starts from a fresh context, so it shares no history with "
            f"{conversation!r} and is a conversation of its own named after it{task}"
        )
    return (
        f"sub-agent sidechain{agent} starting at event {thread.start}: its first event continues no event of the "
        f"main chain (a sub-agent starts from a fresh context), so it shares no history with {conversation!r} and "
        f"is a conversation of its own named after it{task}"
    )


def _existing(location: str | Path) -> dict[str, tuple[str | None, int | None]]:
    """The store's conversations: name -> (parent, fork seq); none when there is no store yet."""
    from .store.factory import list_conversations

    try:
        return {info.name: (info.parent, info.fork_seq) for info in list_conversations(location)}
    except StoreError:
        return {}


def _free_name(
    store: _Store, path: _Path, prints: list[str], existing: dict[str, tuple[str | None, int | None]]
) -> _Path:
    """Return ``path`` under a name that is free or holds what it imported before (a prefix of it).

    A conversation of that name holding other messages (one the user named so, or imported
    from another file) is left alone: the path goes to ``NAME~2`` (``~3``...), and its note
    says why, so nothing is appended to a conversation it does not belong to.
    """
    name, count = path.name, 1
    while name in existing:
        store.scope_to(name, create=False)
        held = [m.fingerprint() for m in store.messages()]
        if prints[: len(held)] == held:
            break
        count += 1
        name = path.name[: MAX_NAME - len(f"~{count}")] + f"~{count}"
    if name == path.name:
        return path
    why = f"a conversation {path.name!r} holding other messages exists, so this one is named {name!r}"
    return dataclasses.replace(path, name=name, note=f"{path.note}; {why}" if path.note else why)


def _store_path(
    store: _Store,
    path: _Path,
    known: _PrefixTree,
    existing: dict[str, tuple[str | None, int | None]],
    format: str,
    start: _Node | None = None,
) -> tuple[ImportedBranch | None, _Node | None]:
    """Store one path as a branch (or conversation of its own) and return it (``None``: nothing
    of its own) and the node of its last message in ``known`` when recorded with its own
    fingerprints (``None`` otherwise).

    ``known`` (what each stored path shows) and ``existing`` (the store's conversations, read
    once) are updated with what is stored.  A branch is forked from the stored path sharing
    the longest prefix with it, where they part, and only what follows is appended (its
    shared messages are its parent's rows), so a session's branches cost what they add.
    ``start``: the node in ``known`` of the path's first ``start.depth`` messages, so the
    walks in ``known`` start there (a path costs what it adds, not its length).  ``store``:
    the import's one store object, scoped here to each conversation read or written
    (:meth:`~compaction.store.scope.ConversationScope.scope_to`); left scoped to the last.
    """
    prints = path.prints or [m.fingerprint() for m in path.messages]
    if not prints:
        return None, None
    path = _free_name(store, path, prints, existing)
    if path.own:
        store.scope_to(path.name)
        added = store.append(path.messages, chain_seed=format)
        known.add(path.name, [m.fingerprint() for m in store.messages()])
        existing.setdefault(path.name, (None, None))
        return ImportedBranch(path.name, None, None, len(prints), added, path.kind, path.note), None
    name = path.name
    if not known.holds(name) and known.covers(prints, start):
        return None, None  # nothing of its own: a leaf that adds no message
    longest = known.longest(prints, name, start)
    assert longest is not None  # the conversation the session went to is always known
    parent, fork = longest
    if name not in existing:
        store.scope_to(parent, create=False)
        store.branch(name, fork)  # keeps the branch's lineage, made from its parent's
        existing[name] = (parent, fork)
    else:
        parent, fork = existing[name][0] or parent, existing[name][1] or 0
    store.scope_to(name)
    shown = store.next_seq()
    leaf: _Node | None = None
    if 0 < shown <= len(prints) and store.import_key(shown - 1) == known.key_at(prints, shown, start):
        # it shows the path's first `shown` messages, chained as a seeded append stores them
        # (same key, so the same messages): append the rest without walking what it holds
        added = store.append(path.messages[shown:]) if shown < len(prints) else 0
        leaf = known.add(name, prints, start)
    else:
        added = store.append(path.messages, chain_seed=format)
        known.add(name, [m.fingerprint() for m in store.messages()])
    return ImportedBranch(name, parent, fork, len(prints), added, path.kind, path.note), leaf


def import_session_branches(
    location: str | Path, transcript: str | Path, conversation: str
) -> list[ImportedBranch]:
    """Import every branch a pi session tree left as a branch of ``conversation`` (see :func:`import_branches`).

    Returns:
        The branches, in file order of their leaves.

    Raises:
        InvalidTranscript: a path could not be parsed.
        StoreError: as the store's ``branch`` and ``append``.
    """
    return import_branches(location, transcript, conversation, "pi")[0]


def _parse_text(transcript: str | Path, text: str, format: str, lenient: bool) -> ParsedTranscript:
    """Parse ``text`` (a path of the session in ``transcript``) as a transcript of ``format``.

    Errors name it ``TRANSCRIPT (a branch of it)``; notes name the user's file.
    """
    name = f"{transcript} (a branch of it)"
    try:
        parsed = parse_text(text, format, name=name, lenient=lenient)
    except InvalidTranscript as err:
        raise InvalidTranscript(str(err), line=None) from err
    return dataclasses.replace(parsed, problems=[p.replace(name, str(transcript)) for p in parsed.problems])
