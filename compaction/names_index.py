"""The names index: the identifiers the summarized stretch uses most, in one line beside the ask ledger.

A summary keeps a few names per stretch (its ``Names`` section goes first when lines must
go), yet a later turn calls the functions, types and tickets the earlier turns named.  So
the message that holds the summaries also lists, after the ask ledger, the names of the
messages ``[0, cut)`` that recur, the most used first, within a small share of the budget.

* a name is what :func:`compaction.evidence.identifiers` finds (``snake_case``,
  ``camelCase``, ``SCREAMING_CASE``, defined names, tickets, URLs, commit hashes; five
  characters at least, :data:`MAX_NAME_CHARS` at most, a URL :data:`MAX_URL_CHARS`) in the
  user's and the assistant's text and in the arguments of tool calls; tool outputs are not
  read (a file dump names thousands).  A URL is an address that works only whole, so it has
  the longer limit and is never shortened; a longer one (a signed or query-laden link) is
  left out;
* a name counts once per message; names in at least :data:`MIN_MESSAGES` of the newest
  :data:`WINDOW` messages before the cut are listed, the most messages first (ties: the
  first named first), as many as ``share_tokens`` allows;
* a name the text above the index already shows (the ask ledger's, passed as ``shown``) is
  not listed again: the request holds it, and its room goes to the next name;
* the line depends only on the cut and the append-only messages before it, so it is
  byte-stable between compaction events.

Only the newest :data:`WINDOW` messages before the cut are read (a long history's first
compile stays quick, and recent names matter most).  The store is append-only, so each
message is read once per store object and its names kept; the counts at a few cuts are kept
too, so every turn between two events reads nothing.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from .blocks import Message, iter_strings
from .evidence import identifiers
from .store import HistoryStore
from .tokens.counting import count_text

__all__ = [
    "NAMES_INTRO",
    "MIN_MESSAGES",
    "MAX_NAME_CHARS",
    "MAX_URL_CHARS",
    "name_limit",
    "WINDOW",
    "message_names",
    "names_before",
    "names_text",
]

NAMES_INTRO = "[Names the earlier messages use, the most used first: a record, not instructions]"
#: Fewest messages a name must appear in to be listed.
MIN_MESSAGES = 2
#: The longest name listed (characters; a long name costs more than it says).
MAX_NAME_CHARS = 80
#: The longest URL listed (characters): a URL only works whole, so it is kept whole up to this.
MAX_URL_CHARS = 256
#: Messages read from the store at a time.
_PAGE = 512
#: Counts kept at this many cuts per store.
_KEPT_CUTS = 16
#: Messages before the cut the index reads, the newest: the names the recent turns use, and a
#: first compile of a long store reads no more than this many messages.
WINDOW = 2000


def message_names(message: Message) -> tuple[str, ...]:
    """Return the distinct names of one message (text, thinking, tool-call arguments), in order.

    System messages and tool outputs give none.
    """
    if message.role == "system" or message.meta.get("kind") == "tool_output":
        return ()
    found: dict[str, None] = {}
    for block in message.content:
        kind = block.get("type")
        if kind in ("text", "thinking"):
            text = block.get("text") or block.get("thinking") or ""
            parts: Iterator[str] = iter((text,)) if isinstance(text, str) else iter(())
        elif kind == "tool_use":
            parts = iter_strings(block.get("input"))
        else:
            continue
        for part in parts:
            if ";base64," in part:
                continue
            for name in identifiers(part):
                if len(name) <= name_limit(name):
                    found.setdefault(name, None)
    return tuple(found)


def name_limit(name: str) -> int:
    """Return the most characters ``name`` may have to be listed: :data:`MAX_URL_CHARS` for a URL, else :data:`MAX_NAME_CHARS`."""
    return MAX_URL_CHARS if name.startswith(("http://", "https://")) else MAX_NAME_CHARS


@dataclass
class _Scan:
    per_message: dict[int, tuple[str, ...]] = field(default_factory=dict)
    upto: int = 0  # the store's next seq when last read (a smaller one means another history)
    at: dict[int, tuple[Counter[str], dict[str, int]]] = field(default_factory=dict)
    shown: dict[str, frozenset[str]] = field(default_factory=dict)  # names of each paragraph of a ledger


_SCANS: weakref.WeakKeyDictionary[object, _Scan] = weakref.WeakKeyDictionary()


def _scan_of(store: HistoryStore) -> _Scan:
    n = store.next_seq()
    try:
        scan = _SCANS.get(store)
    except TypeError:  # a store that cannot be weakly referenced: scan every time
        return _Scan(upto=n)
    if scan is None or scan.upto > n:
        scan = _Scan()
        try:
            _SCANS[store] = scan
        except TypeError:
            pass
    scan.upto = n
    return scan


#: Paragraphs whose names are kept per store (the asks of a ledger, its notes).
_KEPT_PARAGRAPHS = 4096


def _shown_names(scan: _Scan, shown: str) -> frozenset[str]:
    """Return the names :func:`compaction.evidence.identifiers` finds in ``shown``, each paragraph scanned once per store.

    No name spans a line break (none of the patterns matches one, and a break is no word
    character), so the names of ``shown`` are those of its paragraphs (split at blank lines).
    The ledger above the index repeats its asks' paragraphs from cut to cut, so each is read
    once instead of once per candidate cut.
    """
    kept = scan.shown
    if len(kept) > _KEPT_PARAGRAPHS:
        kept.clear()
    names: set[str] = set()
    for paragraph in shown.split("\n\n"):
        found = kept.get(paragraph)
        if found is None:
            found = kept[paragraph] = frozenset(identifiers(paragraph))
        names |= found
    return frozenset(names)


def _missing_runs(per_message: dict[int, tuple[str, ...]], start: int, end: int) -> list[tuple[int, int]]:
    """Return the runs ``[low, high)`` of seqs in ``[start, end)`` whose names are not kept yet, in order.

    Each message is read and scanned for names once per store object (messages are
    append-only, so a seq's names never change); a later cut reads only the seqs it adds.
    """
    runs: list[tuple[int, int]] = []
    low = None
    for seq in range(start, end):
        if seq in per_message:
            if low is not None:
                runs.append((low, seq))
                low = None
        elif low is None:
            low = seq
    if low is not None:
        runs.append((low, end))
    return runs


def _window(store: HistoryStore, cut: int) -> tuple[Counter[str], dict[str, int]]:
    """Return the names of ``[cut - WINDOW, cut)`` with how many messages use each, and where each is first."""
    scan = _scan_of(store)
    cut = max(0, min(cut, store.next_seq()))
    if cut in scan.at:
        return scan.at[cut]
    start = max(0, cut - WINDOW)
    per_message = scan.per_message
    for low, high in _missing_runs(per_message, start, cut):
        for page in range(low, high, _PAGE):
            end = min(high, page + _PAGE)
            for offset, message in enumerate(store.messages(page, end)):
                per_message[page + offset] = message_names(message)
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    for seq in range(start, cut):
        names = per_message[seq]
        if names:
            counts.update(names)
            for name in names:
                if name not in first:
                    first[name] = seq
    if len(scan.at) >= _KEPT_CUTS:
        scan.at.pop(min(scan.at))
    scan.at[cut] = (counts, first)
    return counts, first


def names_before(store: HistoryStore, cut: int) -> Counter[str]:
    """Return, for each name of the newest :data:`WINDOW` messages before ``cut``, how many messages use it.

    Args:
        store: the history.
        cut: the first seq not counted.

    Returns:
        A counter of the messages ``[max(0, cut - WINDOW), cut)`` (a fresh copy: the caller
        may change it).
    """
    return Counter(_window(store, cut)[0])


#: The least room the index is given (tokens): below it (a budget under about 770 tokens at the
#: default shares) it would hold a handful of names, and its tokens could turn a request that
#: fits into one that does not, so small budgets show no index.
MIN_SHARE_TOKENS = 48


def names_text(
    store: HistoryStore, cut: int, *, share_tokens: int, encoding: str, shown: str | None = None
) -> str | None:
    """Return the names index line for the messages ``[0, cut)`` within ``share_tokens``, or ``None``.

    Args:
        store: the history.
        cut: the live window's start (the summaries cover ``[0, cut)``).
        share_tokens: the most tokens the text may take.
        encoding: the encoding the tokens are counted in.
        shown: text the request shows above the index (the ask ledger); a name
            :func:`compaction.evidence.identifiers` finds in it is not listed again.  It must
            depend only on ``cut`` (as the ledger does), so the line stays byte-stable.

    Returns:
        :data:`NAMES_INTRO` and the names, separated by spaces, the most used first; ``None`` when
        no name recurs, not even the intro and one name fit, or ``share_tokens`` is below
        :data:`MIN_SHARE_TOKENS` (a budget that small needs every token for the history).
    """
    if share_tokens < MIN_SHARE_TOKENS:
        return None
    counts, first = _window(store, cut)
    already = _shown_names(_scan_of(store), shown) if shown else frozenset()
    ranked = sorted(
        (name for name, n in counts.items() if n >= MIN_MESSAGES and name not in already),
        key=lambda name: (-counts[name], first[name], name),
    )
    if not ranked:
        return None

    def render(n: int) -> str:
        return f"{NAMES_INTRO}\n{' '.join(ranked[:n])}"

    low, high = 0, len(ranked)
    while low < high:  # the most names whose line fits
        mid = (low + high + 1) // 2
        if count_text(render(mid), encoding) <= share_tokens:
            low = mid
        else:
            high = mid - 1
    return render(low) if low else None
