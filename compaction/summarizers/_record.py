"""The offline summary as a structure: its sections, their text form, merging, and the bound.

A record has the sections of :data:`~.base.SUMMARY_HEADINGS`, rendered as ``Heading:`` lines
followed by ``- item`` lines::

    Goal:
    - port the importer to the new store API
    Asks:
    - message 3: port the importer to the new store API and keep the old…
    Done:
    - ran `pytest tests/test_import.py` → ok: 12 passed
    Files:
    - src/importer.py — read, edited ×2
    Errors:
    - [resolved] run `pytest tests/test_import.py`, message 7: E   KeyError: 'seq'
    Decisions:
    - I'll keep the old reader behind a flag until the migration lands.
    Open threads:
    - todo: document the flag
    Names:
    - fetch_rows ×6, StoreReader ×4, LEGACY_SEQ ×2, migrate_v3

Items keep a parseable shape, so records merge without a model: an error line names its
status, the action and its subject (``run `cmd```: the command's head identifies it;
``edit `path```), and the message it happened in.  :func:`merge_records` unions the
sections of consecutive records, oldest first: asks by message, files by path (one file under
two spellings is one entry), errors by what failed, with the newest status winning -- an
error open in an older record is resolved when a newer one shows the same action on the same
subject succeed (a ``Done`` line ``ran `…` → ok``, or a ``Files`` entry).  Open threads come
from the newest record that has them.  Names carry how often the stretch named them (``×N``;
none: once), so a merge adds the counts up and keeps the most frequent.

:func:`render` writes a record within a token bound, dropping the least important lines
first (see :func:`_priority`), then putting back the dropped lines that fit in the room the
last drops left, and saying how many it left out, per section; left-out counts
of merged records add up, so a record at any level says how much its stretch lost.  Asks go
early (the ask ledger carries each one whole); a dropped file line leaves its basename on an
``Also touched:`` line (the busiest files first, at most a quarter of the bound).  Names
are the first to go, the least frequent first, one name at a time; at most
:data:`MAX_NAMES` are shown, on one or two lines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..evidence import command_head, identifiers, same_file
from ..tokens.counting import count_text
from .base import SUMMARY_HEADINGS

__all__ = [
    "Record",
    "ErrorItem",
    "parse_record",
    "merge_records",
    "render",
    "focus_words",
    "clip",
    "clip_words",
    "range_label",
    "ACTION_PAST",
    "MAX_NAMES",
]

GOAL, ASKS, DONE, FILES, ERRORS, DECISIONS, OPEN, NAMES = SUMMARY_HEADINGS
#: Headings of records written by earlier versions (and often by models), read as today's.
_LEGACY = {"Asked": ASKS, "Open": OPEN, "Open threads": OPEN, "Goal": GOAL, "Identifiers": NAMES}

#: The action of a call (its key's verb) and how a file entry says it happened.
ACTION_PAST = {
    "read": "read",
    "edit": "edited",
    "create": "created",
    "write": "wrote",
    "delete": "deleted",
    "run": "ran",
    "call": "called",
    "use": "used",
}
_ACTION_OF = {past: verb for verb, past in ACTION_PAST.items()}

_ERROR_ITEM = re.compile(r"^\[(open|resolved)\] (\w+) `([^`]*)`, message (\d+): (.*)$")
_DONE_CALL = re.compile(r"^(?:user )?(ran|called) `([^`]*)` → (.*)$")
_FILE_ITEM = re.compile(r"^(.+?) — ((?:\w+(?: ×\d+)?)(?:, \w+(?: ×\d+)?)*)$")
_ASK_ITEM = re.compile(r"^message (\d+): ")
_LEFT_OUT = re.compile(r"^… (\d+) more left out$")
_LEFT_OUT_LINE = re.compile(r"^Left out: (.*)\.$")
_NAME_ITEM = re.compile(r"^(\S+?)(?: ×(\d+))?$")
#: The most names a record shows, and how many go on one line.
MAX_NAMES = 24
NAMES_PER_LINE = 12
#: Starts the line naming files whose lines were left out, and the most names it holds.
ALSO_TOUCHED = "Also touched: "
MAX_ALSO_TOUCHED = 24
#: A word of a focus or of a line: letters, digits, ``_`` and ``-``, starting with a letter (``module_3``).
_WORD = re.compile(r"[^\W\d][\w-]{3,}")
_FOCUS_STOP = frozenset(
    "about also anything detail details especially everything focus from have important into keep kept "
    "more most only over please should summaries summary that their them then there these they this "
    "those what when where which while with would".split()
)


_ESCAPES = {"\\n": " ", "\\t": " ", "\\r": " ", '\\"': '"'}
_ESCAPE = re.compile(r'\\[ntr"]')


def clip(text: str, limit: int) -> str:
    """Return ``text`` on one line, JSON escapes (``\\n``, ``\\"``) undone, cut to ``limit`` characters."""
    if "\\" in text:
        text = _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def clip_words(text: str, words: int, limit: int = 400) -> str:
    """Return the first ``words`` words of ``text`` on one line (an ellipsis when cut)."""
    parts = text.split()
    if len(parts) <= words:
        return clip(" ".join(parts), limit)
    return clip(" ".join(parts[:words]), limit - 1).rstrip("…") + "…"


def range_label(start: int, end: int) -> str:
    """Return how a summary names messages ``start``..``end`` inclusive: "Message 9" or "Messages 3–9"."""
    return f"Message {start}" if start == end else f"Messages {start}–{end}"


def focus_words(focus: str | None) -> frozenset[str]:
    """Return the lowercased words (4+ letters, not filler) of a focus instruction."""
    if not focus:
        return frozenset()
    return frozenset(w for w in (m.lower() for m in _WORD.findall(focus)) if w not in _FOCUS_STOP)


#: File actions that say least: dropped once a file has another.
_WEAK = frozenset({"used", "touched", "named"})


@dataclass
class ErrorItem:
    """One failed call: its status, action verb, subject (a command head or a path), message and line."""

    status: str
    verb: str
    subject: str
    seq: int
    text: str

    @property
    def key(self) -> tuple[str, str]:
        """What a later success of the same call matches: the verb and the subject (a command's head)."""
        return self.verb, command_head(self.subject) if self.verb == "run" else self.subject

    def line(self) -> str:
        if not self.verb:  # read from a record in another shape: shown as it was
            return self.text
        return f"[{self.status}] {self.verb} `{self.subject}`, message {self.seq}: {self.text}"


@dataclass
class Record:
    """The sections of one summary (see the module docstring)."""

    goal: str = ""
    asks: dict[int, str] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)
    files: dict[str, Counter[str]] = field(default_factory=dict)
    errors: list[ErrorItem] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    open: list[str] = field(default_factory=list)
    names: Counter[str] = field(default_factory=Counter)
    omitted: Counter[str] = field(default_factory=Counter)

    def add_file(self, path: str, action: str, count: int = 1) -> None:
        """Note ``action`` (past tense: read, edited, ...) on ``path``; one file under two spellings is one entry."""
        path = path.replace("`", "'").strip()
        known = path if path in self.files else next((p for p in self.files if same_file(p, path)), None)
        if known is None:
            self.files[path] = Counter({action: count})
            return
        if action in _WEAK and set(self.files[known]) - _WEAK:
            return  # "used" by a command, "touched" says least; any other action says more
        if action not in _WEAK:
            for weak in _WEAK:
                self.files[known].pop(weak, None)
        if len(path) > len(known):  # keep the most precise spelling, in the same place
            self.files = {(path if p == known else p): acts for p, acts in self.files.items()}
            known = path
        self.files[known][action] += count

    def add_done(self, line: str) -> None:
        if line not in self.done:
            self.done.append(line)

    def add_decision(self, line: str) -> None:
        if line not in self.decisions:
            self.decisions.append(line)

    def add_error(self, error: ErrorItem) -> None:
        """Note ``error``; the same failure seen again replaces the older one (the newest decides)."""
        self.errors = [e for e in self.errors if (e.key, e.text) != (error.key, error.text)]
        self.errors.append(error)

    def ranked_names(self) -> list[tuple[str, int]]:
        """Return ``(name, count)`` of every name, the most frequent first (ties: first seen)."""
        return sorted(self.names.items(), key=lambda item: -item[1])

    def successes(self) -> set[tuple[str, str]]:
        """Return the keys of calls this record shows succeeding (``Done`` and ``Files``)."""
        keys: set[tuple[str, str]] = set()
        for line in self.done:
            match = _DONE_CALL.match(line.removeprefix("user "))
            if match and match.group(3).startswith("ok"):
                verb = _ACTION_OF[match.group(1)]
                keys.add((verb, command_head(match.group(2)) if verb == "run" else match.group(2)))
        for path, actions in self.files.items():
            keys.update((_ACTION_OF[a], path) for a in actions if a in _ACTION_OF)
        return keys

    def sections(self) -> dict[str, list[str]]:
        """Return the item lines of each section, in heading order."""
        return {
            GOAL: [self.goal] if self.goal else [],
            ASKS: [f"message {seq}: {text}" for seq, text in sorted(self.asks.items())],
            DONE: list(self.done),
            FILES: [f"{path} — {_actions(acts)}" for path, acts in self.files.items()],
            ERRORS: [e.line() for e in self.errors],
            DECISIONS: list(self.decisions),
            OPEN: list(self.open),
            NAMES: [name if n == 1 else f"{name} ×{n}" for name, n in self.ranked_names()[:MAX_NAMES]],
        }

    def has_facts(self) -> bool:
        """Return whether any section but the names holds something."""
        return any(items for heading, items in self.sections().items() if heading != NAMES)


def _actions(actions: Counter[str]) -> str:
    return ", ".join(a if n == 1 else f"{a} ×{n}" for a, n in actions.items())


def parse_record(text: str) -> Record:
    """Read a record's text back (headings of earlier versions too); lines it cannot place go to ``Done``.

    A text with no heading at all (a model's free prose) is kept as ``Done`` lines, so a merge
    never silently drops a child.
    """
    record = Record()
    heading: str | None = None
    headed = False
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("[Record of "):
            continue
        name = stripped[:-1] if stripped.endswith(":") else None
        if name is not None and (name in SUMMARY_HEADINGS or name in _LEGACY):
            heading, headed = _LEGACY.get(name, name), True
            continue
        if stripped.startswith(ALSO_TOUCHED):
            for name in stripped[len(ALSO_TOUCHED) :].rstrip(".").split(", "):
                if name:
                    record.add_file(name, "touched")
            continue
        left = _LEFT_OUT_LINE.match(stripped)
        if left:
            for part in left.group(1).split(", "):
                section, _, count = part.rpartition(" ")
                if section in SUMMARY_HEADINGS and count.isdigit():
                    record.omitted[section] += int(count)
            continue
        if not stripped.startswith("- "):
            if not headed:
                record.add_done(clip(stripped, 200))
            continue
        item = stripped[2:].strip()
        more = _LEFT_OUT.match(item)
        if more:
            if heading:
                record.omitted[heading] += int(more.group(1))
            continue
        if heading is None:
            if not headed:
                record.add_done(clip(item, 200))
            continue
        _place(record, heading, item)
    return record


def _place(record: Record, heading: str, item: str) -> None:
    if heading == GOAL:
        record.goal = record.goal or item
    elif heading == ASKS:
        match = _ASK_ITEM.match(item)
        seq = int(match.group(1)) if match else -1 - len(record.asks)
        record.asks.setdefault(seq, item[match.end() :] if match else item)
    elif heading == FILES:
        match = _FILE_ITEM.match(item)
        if not match:
            record.add_file(item, "named")
            return
        for action in match.group(2).split(", "):
            name, _, times = action.partition(" ×")
            record.add_file(match.group(1), name, int(times) if times.isdigit() else 1)
    elif heading == ERRORS:
        match = _ERROR_ITEM.match(item)
        if match:
            status, verb, subject, at, text = match.groups()
            record.add_error(ErrorItem(status, verb, subject, int(at), text))
        else:  # an error line in another shape (a model's): kept as it is
            record.add_error(ErrorItem("open" if "[resolved]" not in item else "resolved", "", "", -1, item))
    elif heading == DONE:
        record.add_done(item)
    elif heading == DECISIONS:
        record.add_decision(item)
    elif heading == OPEN and item not in record.open:
        record.open.append(item)
    elif heading == NAMES:
        for part in item.split(", "):
            match = _NAME_ITEM.match(part.strip().strip("`"))
            name = match.group(1) if match else ""
            if match and (name.isidentifier() or [name] == list(identifiers(name))):
                record.names[name] += int(match.group(2) or 1)
            else:  # a line in another shape (a model's, or an older record's paths): its names, once each
                record.names.update(identifiers(part))


def merge_records(records: Sequence[Record]) -> Record:
    """Combine consecutive records (oldest first) into one; see the module docstring."""
    merged = Record()
    origin: dict[int, int] = {}  # id(error) -> the record it came from
    for index, record in enumerate(records):
        merged.goal = merged.goal or record.goal
        for seq, text in record.asks.items():
            merged.asks.setdefault(seq, text)
        for line in record.done:
            merged.add_done(line)
        for path, actions in record.files.items():
            for action, count in actions.items():
                merged.add_file(path, action, count)
        for error in record.errors:
            merged.add_error(error)
            origin[id(error)] = index
        for line in record.decisions:
            merged.add_decision(line)
        merged.names.update(record.names)
        merged.omitted.update(record.omitted)
    successes = [r.successes() for r in records]
    for error in merged.errors:
        later = successes[origin[id(error)] + 1 :]
        if error.status == "open" and any(error.key in keys for keys in later):
            error.status = "resolved"
    newest_open = next((r.open for r in reversed(records) if r.open), [])
    still_open = {e.key[1] for e in merged.errors if e.status == "open" and e.verb == "run"}
    merged.open = [line for line in newest_open if _still_failing(line, still_open)]
    return merged


def _still_failing(line: str, still_open: set[str]) -> bool:
    """Return whether an open-thread line is kept: any line but a ``failing:`` one whose run no longer fails."""
    if not line.startswith("failing: "):
        return True
    match = re.search(r"`([^`]*)`", line)
    return match is not None and command_head(match.group(1)) in still_open


# -- the bound --------------------------------------------------------------------------------

#: Tokens a line put back may save besides its own (a ``- … 1 more left out`` line it ends):
#: a dropped line costing up to this much more than the room left is still tried.
REFILL_SLACK = 8
#: How much each section matters when lines must go (higher stays longer).
_WEIGHT = {GOAL: 1000, OPEN: 90, FILES: 60, ASKS: 30, DECISIONS: 50, DONE: 35, ERRORS: 40, NAMES: 0}


def _priority(heading: str, item: str, position: int, count: int, focus: frozenset[str]) -> float:
    """Return how much a line matters: its section, open errors over resolved, newer over older, focus."""
    if heading == NAMES:  # below every other line; the least frequent (the last) go first
        return 10 * (1 - position / count)
    weight = float(_WEIGHT[heading])
    if heading == ERRORS and item.startswith("[open]"):
        weight = 80 if " `?`, " not in item else 58  # output with no command: never known to be resolved
    elif heading == FILES and {a.split(" ×")[0] for a in item.rsplit(" — ", 1)[-1].split(", ")} <= {
        "read",
        "named",
        "touched",
    }:
        weight = 45  # only read
    weight += 10 * (position + 1) / count
    if focus and focus.intersection(w.lower() for w in _WORD.findall(item)):
        weight += 40
    return weight


def _basename(item: str) -> str:
    return item.rsplit(" — ", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def render(record: Record, max_tokens: int, encoding: str, focus: frozenset[str] = frozenset()) -> str:
    """Return the record's text within ``max_tokens`` tokens (counted in ``encoding``).

    The least important lines go first (:func:`_priority`); once the record fits, dropped
    lines that fit in the room left go back, the most important first (names and file lines
    excepted); each section that lost lines ends with ``- … N more left out``, and sections
    left empty are named on a last ``Left out: Done 4, Files 2.`` line.  The goal is never
    dropped, only shortened.
    """
    sections = record.sections()
    omitted = Counter(record.omitted)
    omitted[NAMES] += max(0, len(record.names) - MAX_NAMES)
    kept: dict[str, list[str]] = {h: list(items) for h, items in sections.items()}
    costs = {h: [count_text(f"- {i}\n", encoding) for i in items] for h, items in kept.items()}
    costs[NAMES] = [count_text(f"{i}, ", encoding) for i in kept[NAMES]]
    order = sorted(
        (
            (_priority(h, item, n, len(items), focus), h, n)
            for h, items in kept.items()
            if h != GOAL
            for n, item in enumerate(items)
        ),
        key=lambda entry: (entry[0], SUMMARY_HEADINGS.index(entry[1]), entry[2]),
    )
    dropped: set[tuple[str, int]] = set()

    def text() -> str:
        out: list[str] = []
        lost: list[str] = []
        for heading in SUMMARY_HEADINGS:
            items = [item for n, item in enumerate(kept[heading]) if (heading, n) not in dropped]
            gone = omitted[heading] + sum(1 for h, _n in dropped if h == heading)
            if not items:
                if gone:
                    lost.append(f"{heading} {gone}")
                continue
            out.append(f"{heading}:")
            if heading == NAMES:
                lines = (items[at : at + NAMES_PER_LINE] for at in range(0, len(items), NAMES_PER_LINE))
                out.extend(f"- {', '.join(line)}" for line in lines)
            else:
                out.extend(f"- {item}" for item in items)
            if gone:
                out.append(f"- … {gone} more left out")
        touched = also()
        if touched:
            out.append(f"{ALSO_TOUCHED}{', '.join(touched)}.")
        if lost:
            out.append(f"Left out: {', '.join(lost)}.")
        return "\n".join(out)

    def also() -> list[str]:
        """Return the basenames the Also-touched line keeps of the dropped file lines, the busiest first."""
        shown = sorted(also_shown, key=lambda n: (-busy[n], n))
        return list(dict.fromkeys(names[n] for n in shown if names[n]))

    def approx() -> int:
        kept_cost = sum(c for h, cs in costs.items() for n, c in enumerate(cs) if (h, n) not in dropped)
        return kept_cost + sum(name_costs[n] for n in also_shown) + 3 * len(SUMMARY_HEADINGS) + 8

    def refill(out: str, exact: int) -> str:
        """Put back the dropped lines that fit in the room the last drops left, the most important first.

        Lines go in priority order, so the last one dropped is often longer than what was
        over: the room it leaves takes back lines dropped before it (a Done line dropped
        before a 100-token error entry).  Names and file lines are not put back (the
        Also-touched line carries a dropped file's basename).
        """
        for _score, heading, n in reversed(order[:cursor]):
            if heading in (NAMES, FILES) or costs[heading][n] - REFILL_SLACK > max_tokens - exact:
                continue
            dropped.discard((heading, n))
            again = text()
            tokens = count_text(again, encoding)
            if tokens <= max_tokens:
                out, exact = again, tokens
            else:
                dropped.add((heading, n))
        return out

    names = [_basename(item) for item in kept[FILES]]
    busy = [
        sum(int(t) if t.isdigit() else 1 for t in re.findall(r"×(\d+)|,", item)) + 1 for item in kept[FILES]
    ]
    name_costs = [count_text(f"{name}, ", encoding) for name in names]
    also_shown: set[int] = set()  # dropped file lines whose basename the Also-touched line carries
    also_cost, also_room = 0, max_tokens // 4  # the line takes at most a quarter of the bound
    target = max_tokens
    cursor = 0
    current = approx()
    while True:
        while current > target and cursor < len(order):
            _score, heading, n = order[cursor]
            dropped.add((heading, n))
            current -= costs[heading][n]
            if (
                heading == FILES
                and len(also_shown) < MAX_ALSO_TOUCHED
                and also_cost + name_costs[n] <= also_room
            ):
                also_shown.add(n)  # the line goes, its basename stays
                also_cost += name_costs[n]
                current += name_costs[n]
            cursor += 1
        out = text()
        exact = count_text(out, encoding)
        if exact <= max_tokens:
            return refill(out, exact)
        if cursor >= len(order):
            break
        target -= max(1, exact - max_tokens)
    # only the goal (and the left-out line) remain and still do not fit: shorten the goal
    goal = kept[GOAL][0] if kept[GOAL] else ""
    while goal and count_text(out, encoding) > max_tokens:
        goal = clip(goal, max(8, len(goal) * 2 // 3)) if len(goal) > 8 else ""
        kept[GOAL] = [goal] if goal else []
        out = text()
    return out
