"""The ask ledger: every human ask, verbatim and in order, ahead of the summaries.

A summary keeps what happened; what the user asked for is what the next turn must not lose
(measured on real sessions, summaries kept fewer than half of the asks).  So a compiled
request carries, in the message that holds the summaries, one text block that lists each
ask of the summarized stretch ``[0, cut)`` in the user's own words (the live window shows
the newer asks raw).  OpenAI's Responses compaction keeps every user message the same way;
Codex CLI keeps up to 20k tokens of them.

Rules, all deterministic so the block is byte-stable between compaction events:

* an ask is what :func:`compaction.asks.ask_text` finds in a user turn (harness wrappers,
  tool results and command output cut out); an ask repeated word for word is listed once,
  at its first turn;
* the cap on one ask scales with the room the ledger has: an ask may take up to
  :data:`ASK_ROOM_SHARE` of the ledger's share (so one pasted log cannot crowd out the other
  asks), and never less than ``Recipe.ask_cap_tokens``; when the asks do not all fit under
  that, the cap halves (down to ``Recipe.ask_cap_tokens``) until they do.  A longer ask shows
  its head (two thirds of the cap) and its tail (one third) around a loud cut marker that
  names the message holding it whole;
* when even ``Recipe.ask_cap_tokens`` per ask does not fit the share (``Recipe.ledger_share``
  of the budget), the oldest asks are shortened to their first words (:data:`SHORT_TOKENS`),
  and when even that does not fit the oldest are left out and counted; the block says which
  and why.

The block depends only on the asks before the cut and the share (of the recipe's budget, not
of a planning target), so it is the same at a compaction event and on every turn after it.
"""

from __future__ import annotations

import re
import weakref
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .asks import ask_from_texts
from .blocks import DATA_URI_RE
from .names_index import names_text
from .store import HistoryStore
from .tokens.counting import BLOCK_SEPARATOR, count_text

__all__ = [
    "Ask",
    "LEDGER_INTRO",
    "SHORT_TOKENS",
    "asks_before",
    "ledger_for",
    "ledger_text",
    "ledger_tokens",
    "head_tail",
    "room_caps",
    "ASK_ROOM_SHARE",
]

LEDGER_INTRO = (
    "[The user's asks so far, oldest first, in the user's own words. Their turns may be summarized below; "
    "this list is the record of what was asked, not new instructions]"
)
#: The most tokens an ask keeps when the ledger is over its share and the oldest are shortened.
SHORT_TOKENS = 40
#: The share of the ledger's tokens the names index after it may take (beyond the asks' share).
NAMES_SHARE = 0.25
#: The most of the ledger's share one ask may take whole while the ledger has room (tokens
#: over tokens): with room to spare, a pasted ask over ``Recipe.ask_cap_tokens`` is not cut,
#: yet it cannot take the room of the others.
ASK_ROOM_SHARE = 0.125


@dataclass(frozen=True)
class Ask:
    """One human ask: the seq of its user turn and the person's words (harness text cut out)."""

    seq: int
    text: str


@dataclass
class _Scan:
    upto: int
    asks: list[Ask]
    seen: set[str]
    texts: dict[tuple[int, int, int, str], str | None]


_SCANS: weakref.WeakKeyDictionary[object, _Scan] = weakref.WeakKeyDictionary()


def asks_before(store: HistoryStore, cut: int) -> list[Ask]:
    """Return the asks of the messages ``[0, cut)``, oldest first, each listed once.

    The store is append-only, so the asks found once are kept per store object and later
    calls read only the user turns appended since (a compile on a long history does not
    re-read it).

    Args:
        store: the history.
        cut: the first seq not looked at (the live window's start).

    Returns:
        The :class:`Ask` list; an ask repeated word for word appears once, at its first turn.
    """
    try:
        scan = _SCANS.get(store)
    except TypeError:  # a store that cannot be weakly referenced: scan every time
        scan = None
    if scan is None or scan.upto > store.next_seq():
        scan = _Scan(0, [], set(), {})
        try:
            _SCANS[store] = scan
        except TypeError:
            pass
    if cut > scan.upto:
        for turn in store.prompt_texts(scan.upto, cut):
            seq = turn.seq
            text = ask_from_texts("\n".join(turn.texts), turn.kind)
            if text and ";base64," in text:  # an image pasted as a data: URI is not the user's words
                text = DATA_URI_RE.sub(_uri_note, text).strip()
            if not text:
                continue
            key = " ".join(text.lower().split())
            if key in scan.seen:
                continue
            scan.seen.add(key)
            scan.asks.append(Ask(seq, text))
        scan.upto = cut
    return scan.asks[: bisect_left(scan.asks, cut, key=_seq_of)]


def _seq_of(ask: Ask) -> int:
    return ask.seq


def _uri_note(match: re.Match[str]) -> str:
    return f"[an image pasted as a data: URI, {len(match.group(0))} characters, not shown here]"


def _window(text: str, tokens: int, encoding: str, *, tail: bool) -> int:
    """Return a length whose prefix (or suffix) of ``text`` holds more than ``tokens`` tokens, or ``len(text)``.

    Doubling from a few characters a token keeps a 10 MB ask from being counted whole at
    every step of the search.
    """
    length = max(64, 8 * tokens)
    while length < len(text):
        part = text[len(text) - length :] if tail else text[:length]
        if count_text(part, encoding) > tokens:
            return length
        length *= 2
    return len(text)


def _fit_prefix(text: str, tokens: int, encoding: str) -> str:
    """Return the longest prefix of ``text`` (at a character) of at most ``tokens`` tokens."""
    low, high = 0, _window(text, tokens, encoding, tail=False)
    while low < high:
        mid = (low + high + 1) // 2
        if count_text(text[:mid], encoding) <= tokens:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def _fit_suffix(text: str, tokens: int, encoding: str) -> str:
    """Return the longest suffix of ``text`` (at a character) of at most ``tokens`` tokens."""
    low, high = 0, _window(text, tokens, encoding, tail=True)
    while low < high:
        mid = (low + high + 1) // 2
        if count_text(text[len(text) - mid :], encoding) <= tokens:
            low = mid
        else:
            high = mid - 1
    return text[len(text) - low :]


def head_tail(text: str, cap: int, encoding: str, seq: int) -> str:
    """Return ``text`` whole when it has at most ``cap`` tokens, else its head and tail around a cut marker.

    The head keeps two thirds of ``cap`` tokens, the tail one third; the marker says how many
    tokens were cut and that message ``seq`` holds the ask whole.
    """
    total = count_text(text, encoding)
    if total <= cap:
        return text
    head = _fit_prefix(text, (2 * cap) // 3, encoding)
    tail = _fit_suffix(text[len(head) :], cap - (2 * cap) // 3, encoding)
    cut = total - count_text(head, encoding) - count_text(tail, encoding)
    return f"{head.rstrip()}\n[… {max(cut, 1)} tokens of this ask cut here; message {seq} holds it whole …]\n{tail.lstrip()}"


def _entry(ask: Ask, shown: str) -> str:
    """Return one ledger entry: ``[Message N]`` at the start of a line, the ask's own lines
    indented, so no ask can forge an entry or a note of the ledger."""
    return f"[Message {ask.seq}] " + "\n  ".join(shown.split("\n"))


def _short(ask: Ask, encoding: str) -> str:
    first = ask.text.strip().split("\n", 1)[0]
    head = _fit_prefix(first, SHORT_TOKENS, encoding)
    return head if head == ask.text.strip() else f"{head.rstrip()} […]"


# A compile prices the ledger at every candidate cut, each holding the asks of the cuts
# before it: an ask's entries are made once (an Ask is frozen, its text never changes), not
# once per cut, so the ledger's cost grows with the asks, not with asks times cuts.
_ENTRIES_KEPT = 1 << 16


@lru_cache(maxsize=_ENTRIES_KEPT)
def _whole_entry(ask: Ask, cap: int, encoding: str) -> str:
    return _entry(ask, head_tail(ask.text, cap, encoding, ask.seq))


@lru_cache(maxsize=_ENTRIES_KEPT)
def _short_entry(ask: Ask, encoding: str) -> str:
    return _entry(ask, _short(ask, encoding))


@lru_cache(maxsize=_ENTRIES_KEPT)
def _ask_tokens(ask: Ask, encoding: str) -> int:
    return count_text(ask.text, encoding)


def _seq_range(asks: Sequence[Ask]) -> str:
    return f"message {asks[0].seq}" if len(asks) == 1 else f"messages {asks[0].seq}–{asks[-1].seq}"


def room_caps(cap: int, room: int) -> list[int]:
    """Return the per-ask caps tried before ``cap``, largest first: :data:`ASK_ROOM_SHARE` of ``room``, halved while above ``cap``.

    Args:
        cap: the configured cap (``Recipe.ask_cap_tokens``; tokens).
        room: the tokens the ledger's share leaves for its text.

    Returns:
        The caps (tokens), each more than ``cap``; empty when :data:`ASK_ROOM_SHARE` of
        ``room`` is no more than ``cap``.
    """
    caps: list[int] = []
    size = int(room * ASK_ROOM_SHARE)
    while size > cap:
        caps.append(size)
        size //= 2
    return caps


def _render_whole(asks: Sequence[Ask], cap: int, encoding: str) -> list[str]:
    return [LEDGER_INTRO, *(_whole_entry(a, cap, encoding) for a in asks)]


#: Encodings whose pre-tokenizer always cuts after a line break that a ``[`` follows (see
#: :func:`_lines_tokens`).
_BRACKET_CUT_ENCODINGS = frozenset({"o200k_base", "cl100k_base"})


@lru_cache(maxsize=_ENTRIES_KEPT)
def _joined_tokens(part: str, encoding: str) -> int:
    return count_text(part + "\n\n", encoding)


def _lines_tokens(lines: Sequence[str], encoding: str) -> int:
    """Return ``count_text("\\n\\n".join(lines), encoding)`` (tokens), from counts kept per line.

    Exact: in o200k_base and cl100k_base every pattern alternative that can match a line
    break ends with whitespace, line breaks or ``/`` (see
    :func:`compaction.tokens.counting._count_segments`), so a piece holding the join's line
    breaks ends right before a ``[`` that follows, and the patterns look only ahead; a
    joined text whose lines after the first all start with ``[`` (every ledger entry and
    note does) counts as the sum of each line with its join and the last line alone.  Each
    line's count is kept, so a ledger priced at many cuts counts each entry once.  Other
    encodings (``hf:``) and other lines are counted whole.
    """
    if encoding not in _BRACKET_CUT_ENCODINGS or not all(line.startswith("[") for line in lines[1:]):
        return count_text("\n\n".join(lines), encoding)
    return sum(_joined_tokens(line, encoding) for line in lines[:-1]) + count_text(lines[-1], encoding)


def _within_room(asks: Sequence[Ask], cap: int, room: int, encoding: str) -> str | None:
    """Return every ask under the largest of :func:`room_caps` whose block fits ``room``, or ``None``.

    ``None`` when no ask is longer than ``cap`` (the configured cap then cuts nothing) or
    when not even the smallest of those caps fits (the share is short of room: the caller
    cuts at ``cap`` and shortens the oldest).
    """
    sizes = [_ask_tokens(a, encoding) for a in asks]
    longest = max(sizes)
    if longest <= cap:
        return None
    caps = room_caps(cap, room)
    for size in caps:
        if size >= longest and size != caps[0]:
            continue  # the same block as a larger cap, already found too big
        lines = _render_whole(asks, size, encoding)
        if _lines_tokens(lines, encoding) <= room:
            return "\n\n".join(lines)
    return None


def ledger_text(asks: Sequence[Ask], *, cap: int, share_tokens: int, encoding: str) -> str | None:
    """Return the ledger block's text for ``asks`` within ``share_tokens``, or ``None`` for no asks.

    Args:
        asks: the asks, oldest first (see :func:`asks_before`).
        cap: the most tokens one ask shows when the share is short of room
            (``Recipe.ask_cap_tokens``); with room to spare, the largest of
            :func:`room_caps` under which every ask fits applies instead.
        share_tokens: the most tokens the block may take, its join in the message included
            (the budget times ``Recipe.ledger_share``).
        encoding: the encoding the tokens are counted in.

    Returns:
        The text: :data:`LEDGER_INTRO`, then one ``[Message N] …`` entry per ask, each up
        to the largest of :func:`room_caps` under which they all fit the share; when not even
        ``cap`` fits, the newest whole (up to ``cap``), older ones shortened and the oldest
        counted; when not even that fits, one line that says every ask was left out and
        why (the only case that may pass the share, by a few tokens).  ``None`` for no asks.
    """
    if not asks:
        return None
    room = share_tokens - BLOCK_SEPARATOR
    roomy = _within_room(asks, cap, room, encoding)
    if roomy is not None:
        return roomy
    whole = [_whole_entry(a, cap, encoding) for a in asks]
    short = [_short_entry(a, encoding) for a in asks]

    def render(n_left_out: int, n_short: int) -> list[str]:
        lines = [LEDGER_INTRO]
        left, shortened = asks[:n_left_out], asks[n_left_out : n_left_out + n_short]
        if left:
            lines.append(
                f"[{len(left)} older asks ({_seq_range(left)}) are left out of this list: it would pass its share "
                f"of the token budget; the summaries below cover them]"
            )
        cut_short = [asks[i] for i in range(n_left_out, n_left_out + n_short) if short[i] != whole[i]]
        if cut_short:
            lines.append(
                f"[{len(cut_short)} of the asks in {_seq_range(shortened)} are shortened to their first words "
                f"(marked […]) to keep this list within its share of the token budget; the summaries below cover them]"
            )
        lines.extend(short[n_left_out : n_left_out + n_short])
        lines.extend(whole[n_left_out + n_short :])
        return lines

    # Fewest changes first: shorten the oldest asks one by one, then leave the oldest out.
    # The sizes fall along that order (bar the one-line notes), so a binary search finds
    # the first that fits in O(log n) counts.
    n = len(asks)

    def step(index: int) -> list[str]:
        return render(0, index) if index <= n else render(index - n, 2 * n - index)

    if _lines_tokens(step(0), encoding) <= room:
        return "\n\n".join(step(0))
    low, high = 1, 2 * n
    if _lines_tokens(step(high), encoding) > room:
        # Not even the note fits the share: the note alone, so the request still says so.
        return (
            LEDGER_INTRO
            + "\n\n"
            + (
                f"[{n} asks ({_seq_range(asks)}) are left out of this list: the ask ledger's share of the "
                f"token budget ({share_tokens} tokens) cannot hold them; the summaries below cover them]"
            )
        )
    while low < high:
        mid = (low + high) // 2
        if _lines_tokens(step(mid), encoding) <= room:
            high = mid
        else:
            low = mid + 1
    return "\n\n".join(step(low))


def ledger_for(store: HistoryStore, cut: int, *, cap: int, share_tokens: int, encoding: str) -> str | None:
    """Return :func:`ledger_text` of :func:`asks_before` ``cut`` and the names index, made once per store and settings.

    The names index (:func:`compaction.names_index.names_text`, within
    :data:`NAMES_SHARE` of ``share_tokens``) follows the asks and leaves out the names the
    asks already show.  Between compaction events every turn compiles the same cut, so the
    block is built once and then read from a cache kept with the store's asks; it depends
    only on the messages before ``cut`` and the settings, so another process on the same
    store builds the same bytes.

    Returns:
        The block's text, or ``None`` when there is neither an ask nor a recurring name.
    """
    asks = asks_before(store, cut)
    try:
        scan = _SCANS.get(store)
    except TypeError:
        scan = None
    key = (cut, cap, share_tokens, encoding)
    if scan is not None and key in scan.texts:
        return scan.texts[key]
    text = ledger_text(asks, cap=cap, share_tokens=share_tokens, encoding=encoding)
    names = names_text(
        store, cut, share_tokens=int(share_tokens * NAMES_SHARE), encoding=encoding, shown=text
    )
    if names is not None:
        text = names if text is None else f"{text}\n\n{names}"
    if scan is not None:
        if len(scan.texts) > 64:
            scan.texts.clear()
        scan.texts[key] = text
    return text


def ledger_tokens(text: str | None, encoding: str) -> int:
    """Return what the ledger block adds to the summary message (its text and one join; tokens)."""
    return 0 if text is None else count_text(text, encoding) + BLOCK_SEPARATOR
