"""A summary record put back, once it fits its bound, the dropped lines that fit the room left.

:func:`compaction.summarizers._record.render` drops the least important lines first; the last
one dropped is often much longer than what was over (a 100-token error entry), and the room
it leaves takes back lines dropped before it.  Over generated records: every line is shown
or counted as left out, the text never exceeds the bound, and no dropped Done, Errors or
Decisions line that would fit stays out.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.summarizers._record import DECISIONS, DONE, ERRORS, ErrorItem, Record, parse_record, render
from compaction.tokens.counting import count_text

ENCODING = "o200k_base"

LONG_ERROR = ErrorItem(
    "resolved",
    "run",
    "npm run check",
    7,
    "src/mode.ts(585,39): error TS2345: Argument of type '(c: { text: string; }) => string' is not "
    "assignable ⟩ Types of parameters 'c' and 'value' are incompatible ⟩ Type 'ImageContent | TextContent' "
    "is not assignable to type '{ text: string; }'",
)


def test_a_line_dropped_before_a_longer_one_comes_back_when_it_fits() -> None:
    record = Record(goal="port the store")
    record.add_done("ran `npm run build` → ok")
    record.errors.append(LONG_ERROR)
    want = "Goal:\n- port the store\nDone:\n- ran `npm run build` → ok\nLeft out: Errors 1."
    # the Done line (priority 45) goes first, the resolved error (50) next; then the Done line fits again
    out = render(record, count_text(want, ENCODING) + 2, ENCODING)
    assert out == want


def test_a_record_that_fits_is_rendered_whole() -> None:
    record = Record(goal="port the store")
    record.add_done("ran `npm run build` → ok")
    record.errors.append(LONG_ERROR)
    out = render(record, 400, ENCODING)
    assert (
        out == f"Goal:\n- port the store\nDone:\n- ran `npm run build` → ok\nErrors:\n- {LONG_ERROR.line()}"
    )


_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=4, max_size=12)
_LINE = st.lists(_WORDS, min_size=1, max_size=25).map(" ".join)


def _record(done: list[str], errors: list[tuple[bool, str]], decisions: list[str]) -> Record:
    record = Record(goal="port the store")
    for line in done:
        record.add_done(f"ran `make {line.split()[0]}` → ok: {line}")
    for n, (resolved, line) in enumerate(errors):
        record.errors.append(
            ErrorItem("resolved" if resolved else "open", "run", "make", n, f"error {n}: {line}")
        )
    for line in decisions:
        record.add_decision(f"I'll {line}.")
    return record


def _with_one_back(record: Record, shown: Record, heading: str, index: int) -> str:
    """Return the text ``shown`` would have with the record's dropped line ``(heading, index)`` put back.

    Rendered without a bound, so nothing more is dropped; the line keeps its place among the
    shown lines and the section's left-out count falls by one.
    """
    done, errors, decisions = list(record.done), list(record.errors), list(record.decisions)
    keep = {
        DONE: [d for n, d in enumerate(done) if d in shown.done or (heading, n) == (DONE, index)],
        ERRORS: [
            e
            for n, e in enumerate(errors)
            if e.line() in {s.line() for s in shown.errors} or (heading, n) == (ERRORS, index)
        ],
        DECISIONS: [
            d for n, d in enumerate(decisions) if d in shown.decisions or (heading, n) == (DECISIONS, index)
        ],
    }
    omitted = Counter(shown.omitted)
    omitted[heading] -= 1
    back = Record(
        goal=record.goal, done=keep[DONE], errors=keep[ERRORS], decisions=keep[DECISIONS], omitted=+omitted
    )
    return render(back, 10**6, ENCODING)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(_LINE, max_size=6, unique=True),
    st.lists(st.tuples(st.booleans(), _LINE), max_size=6),
    st.lists(_LINE, max_size=6, unique=True),
    st.integers(24, 300),
)
def test_every_line_is_kept_or_counted_and_no_dropped_line_that_fits_stays_out(
    done: list[str], errors: list[tuple[bool, str]], decisions: list[str], bound: int
) -> None:
    record = _record(done, errors, decisions)
    out = render(record, bound, ENCODING)
    assert count_text(out, ENCODING) <= bound
    shown = parse_record(out)
    counts = {DONE: (len(shown.done), len(record.done)), ERRORS: (len(shown.errors), len(record.errors))}
    counts[DECISIONS] = (len(shown.decisions), len(record.decisions))
    for heading, (kept, total) in counts.items():
        # each line is shown (an item of the record, not invented) or counted as left out, once
        assert kept + shown.omitted[heading] == total, heading
    assert {e.line() for e in shown.errors} <= {e.line() for e in record.errors}
    assert set(shown.done) <= set(record.done) and set(shown.decisions) <= set(record.decisions)
    if not shown.goal or shown.goal != record.goal:
        return  # the goal was shortened: not even the goal and the left-out line fit
    dropped = [(DONE, n) for n, d in enumerate(record.done) if d not in shown.done]
    dropped += [
        (ERRORS, n) for n, e in enumerate(record.errors) if e.line() not in {s.line() for s in shown.errors}
    ]
    dropped += [(DECISIONS, n) for n, d in enumerate(record.decisions) if d not in shown.decisions]
    for heading, index in dropped:
        # putting any one dropped line back would go over the bound
        assert count_text(_with_one_back(record, shown, heading, index), ENCODING) > bound, (heading, index)
