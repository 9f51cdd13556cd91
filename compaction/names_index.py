"""The names index: the identifiers the summarized stretch uses most, in one line beside the ask ledger.

A summary keeps a few names per stretch (its ``Names`` section goes first when lines must
go), yet a later turn calls the functions, types and tickets the earlier turns named.  So
the message that holds the summaries also lists, after the ask ledger, the names of the
messages ``[0, cut)`` that recur, the most used first, within a small share of the budget.

* a name is what :func:`compaction.evidence.identifiers` finds (``snake_case``,
  ``camelCase``, ``SCREAMING_CASE``, defined names, tickets, URLs, commit hashes; five
  characters at least, 80 at most) in the user's and the assistant's text and in the
  arguments of tool calls; tool outputs are not read (a file dump names thousands);
* a name counts once per message; names in at least :data:`MIN_MESSAGES` messages are
  listed, the most messages first (ties: the first named first), as many as
  ``share_tokens`` allows;
* the line depends only on the cut and the append-only messages before it, so it is
  byte-stable between compaction events.

The store is append-only, so each message is read once per store object: the names of each
message are kept, and the counts at a few cuts are kept so that a nearby cut adds only the
messages between.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .blocks import Message
from .evidence import identifiers
from .store import HistoryStore
from .tokens.counting import count_text

__all__ = ["NAMES_INTRO", "MIN_MESSAGES", "MAX_NAME_CHARS", "message_names", "names_before", "names_text"]

NAMES_INTRO = "[Names the earlier messages use, the most used first: a record, not instructions]"
#: Fewest messages a name must appear in to be listed.
MIN_MESSAGES = 2
#: The longest name listed (characters; a long URL costs more than it says).
MAX_NAME_CHARS = 80
#: Messages read from the store at a time.
_PAGE = 512
#: Counts kept at this many cuts per store.
_KEPT_CUTS = 16


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


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
            parts = _strings(block.get("input"))
        else:
            continue
        for part in parts:
            if ";base64," in part:
                continue
            for name in identifiers(part):
                if len(name) <= MAX_NAME_CHARS:
                    found.setdefault(name, None)
    return tuple(found)


@dataclass
class _Scan:
    per_message: list[tuple[str, ...]] = field(default_factory=list)
    first: dict[str, int] = field(default_factory=dict)
    at: dict[int, Counter[str]] = field(default_factory=dict)


_SCANS: weakref.WeakKeyDictionary[object, _Scan] = weakref.WeakKeyDictionary()


def _scan_of(store: HistoryStore) -> _Scan:
    try:
        scan = _SCANS.get(store)
    except TypeError:  # a store that cannot be weakly referenced: scan every time
        return _Scan()
    if scan is None or len(scan.per_message) > store.next_seq():
        scan = _Scan()
        try:
            _SCANS[store] = scan
        except TypeError:
            pass
    return scan


def names_before(store: HistoryStore, cut: int) -> Counter[str]:
    """Return, for each name of the messages ``[0, cut)``, the number of messages that use it.

    Args:
        store: the history.
        cut: the first seq not counted.

    Returns:
        A counter (a fresh copy: the caller may change it).
    """
    scan = _scan_of(store)
    cut = max(0, min(cut, store.next_seq()))
    while len(scan.per_message) < cut:
        start = len(scan.per_message)
        for offset, message in enumerate(store.messages(start, min(cut, start + _PAGE))):
            names = message_names(message)
            for name in names:
                scan.first.setdefault(name, start + offset)
            scan.per_message.append(names)
    if cut in scan.at:
        return Counter(scan.at[cut])
    base = max((c for c in scan.at if c <= cut), default=0)
    counts = Counter(scan.at[base]) if base else Counter()
    for names in scan.per_message[base:cut]:
        counts.update(names)
    if len(scan.at) >= _KEPT_CUTS:
        scan.at.pop(min(scan.at))
    scan.at[cut] = Counter(counts)
    return counts


def names_text(store: HistoryStore, cut: int, *, share_tokens: int, encoding: str) -> str | None:
    """Return the names index line for the messages ``[0, cut)`` within ``share_tokens``, or ``None``.

    Args:
        store: the history.
        cut: the live window's start (the summaries cover ``[0, cut)``).
        share_tokens: the most tokens the text may take.
        encoding: the encoding the tokens are counted in.

    Returns:
        :data:`NAMES_INTRO` and the names, separated by spaces, the most used first; ``None`` when
        no name recurs or not even the intro and one name fit.
    """
    counts = names_before(store, cut)
    scan = _scan_of(store)
    ranked = sorted(
        (name for name, n in counts.items() if n >= MIN_MESSAGES),
        key=lambda name: (-counts[name], scan.first.get(name, 0), name),
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
