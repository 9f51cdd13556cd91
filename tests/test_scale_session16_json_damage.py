"""``repaired_prefix`` finds commas between its tokens instead of one token a comma (session 16).

Before, every comma of a damaged document was a token of its own (a Python step per element of
an array: a 20 MB array of numbers took 5 to 17 s); now the text between two tokens is one
run of a character class and its last comma is found with ``str.rfind``.  The answers must be
the same: :func:`reference` is the per-comma walk as it was (commit 4a7276f), and the property
tests compare the two on damaged documents of every shape.
"""

from __future__ import annotations

import json
import re

from hypothesis import assume, given
from hypothesis import strategies as st

from compaction.formats._json_damage import repaired_prefix

_OLD_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{},]', re.DOTALL)
_CLOSER = {"[": "]", "{": "}"}


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def reference(text: str, upto: int) -> str | None:
    """``repaired_prefix`` as it was: one token per comma, bracket and string."""
    brackets: list[str] = []
    opened: list[int] = []
    cuts: list[int] = []
    closed_top = False
    string_cut = False
    for match in _OLD_TOKEN.finditer(text, 0, upto):
        token = match.group()
        if token[0] == '"':
            if len(token) == 1:
                string_cut = True
                break
            continue
        if token in _CLOSER:
            if closed_top:
                return None
            brackets.append(token)
            opened.append(match.end())
            cuts.append(match.end())
        elif token == ",":
            if cuts:
                cuts[-1] = match.start()
        elif not brackets or _CLOSER[brackets[-1]] != token:
            return None
        else:
            brackets.pop()
            opened.pop()
            cuts.pop()
            closed_top = not brackets
    if brackets and not string_cut and text[:upto].rstrip().endswith(("}", "]", '"')):
        whole = text[:upto].rstrip() + "".join(_CLOSER[b] for b in reversed(brackets))
        if _parses(whole):
            return whole
    while len(brackets) > 1 and cuts[-1] == opened[-1]:
        brackets.pop()
        opened.pop()
        cuts.pop()
    if not brackets:
        return None
    repaired = text[: cuts[-1]] + "".join(_CLOSER[b] for b in reversed(brackets))
    return repaired if _parses(repaired) else None


# JSON values whose strings hold the characters the walk looks for (commas, brackets, quotes)
STRINGS = st.text(alphabet=',[]{}"\\: ab\n\u00e9', max_size=8)
SCALARS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    STRINGS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(STRINGS, inner, max_size=4)),
    max_leaves=20,
)
DAMAGE = st.sampled_from(["", "x", ",", ",,", "]", "}", ":", '"', "1 2", "tru", "-", "1.", "\x01", "[", "{"])


def _decode_error(text: str) -> json.JSONDecodeError | None:
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        return err
    except (ValueError, RecursionError):
        return None
    return None


@given(VALUES, st.sampled_from([None, 1]), st.data(), DAMAGE)
def test_the_answer_is_the_per_comma_walks_wherever_a_document_breaks(
    value: object, indent: int | None, data: st.DataObject, damage: str
) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    at = data.draw(st.integers(0, len(text)))
    damaged = text[:at] + damage + (text[at:] if data.draw(st.booleans()) else "")
    err = _decode_error(damaged)
    assume(err is not None)  # the damage may leave valid JSON (or none the decoder positions)
    assert err is not None and repaired_prefix(err.doc, err.pos) == reference(err.doc, err.pos)


@given(st.text(alphabet='[]{},"\\: 0123abtrue-.\n', max_size=60), st.data())
def test_the_answer_is_the_per_comma_walks_at_any_offset_of_any_text(text: str, data: st.DataObject) -> None:
    upto = data.draw(st.integers(0, len(text)))
    assert repaired_prefix(text, upto) == reference(text, upto)


def test_a_long_array_of_numbers_cut_short_keeps_its_complete_elements() -> None:
    numbers = list(range(200_000))
    text = '{"messages": [{"role": "user", "content": "hi"}], "data": ' + json.dumps(numbers)[:-1] + ", 12x"
    err = _decode_error(text)
    assert err is not None
    repaired = repaired_prefix(err.doc, err.pos)
    assert repaired is not None
    assert json.loads(repaired) == {"messages": [{"role": "user", "content": "hi"}], "data": numbers}
    assert repaired == reference(err.doc, err.pos)
