"""What is wrong with a JSON text that does not parse, said for a user, and what it held up to there.

A transcript that is one JSON document (an OpenAI or Anthropic request body, an inspect-ai log, a
LangChain dump ...) is useless once damaged: nothing in it can be skipped.  The user still needs
to hear *where* it broke (line and column, as :class:`json.JSONDecodeError` counts them, 1-based),
whether the file simply *ends early* (a copy or a download cut short, the commonest damage), and,
when it can be told, which format the part before the damage looked like.

* :func:`describe` turns a decode error into that one line;
* :func:`cut_short` tells whether the text is a prefix of some valid JSON (it ends inside a
  string, a literal or an open container) rather than wrong somewhere in the middle;
* :func:`repaired_prefix` closes what is still open at a point, dropping the element that point
  cuts, so the sniffers can be shown a valid document made of what came before the damage.
"""

from __future__ import annotations

import json
import re

__all__ = ["cut_short", "describe", "repaired_prefix"]

#: The text up to the next token (``gap``: no string, bracket or brace in it: numbers, literals,
#: blanks, colons and commas), then the token, if any before the end: a complete string (escapes
#: included), an unterminated one (a lone quote: the text ends in it), or a character that opens
#: or closes a container.  The gap is one greedy run of a character class (C speed), and of its
#: commas only the last matters (the cut of the container open there), found with ``str.rfind``.
#: Before, every comma was a token of its own, and the search tried the token's alternatives at
#: every character: a 20 MB array of numbers cost 3.3 million Python steps (5 to 17 s).
_TOKEN = re.compile(r'(?P<gap>[^"\[\]{}]*)(?P<token>"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{}])?', re.DOTALL)
_CLOSER = {"[": "]", "{": "}"}
#: The literals a JSON text may be cut in: JSON's, and the ones Python's :mod:`json` writes for
#: floats JSON has no number for (``json.dumps(float("inf"))``) and reads back.
_LITERALS = ("true", "false", "null", "Infinity", "-Infinity", "NaN")
#: What the decoder leaves of a number cut in its fraction or exponent (``1.``, ``1.5e-``).
_NUMBER_CUT = re.compile(r"(?=.)(\.[0-9]*)?([eE][-+]?)?")
#: What it leaves of a ``\uXXXX`` escape (or a surrogate pair of them) cut short.
_ESCAPE_CUT = re.compile(r"u[0-9a-fA-F]{0,4}(\\u?[0-9a-fA-F]{0,3})?")


def cut_short(err: json.JSONDecodeError) -> bool:
    """Return whether the text ``err`` was raised for ends before its JSON value does.

    True when the decoder ran out of text: inside a string (``Unterminated string``) or one of
    its ``\\uXXXX`` escapes, after a complete element of a container still open (the error sits
    at the end, trailing blanks aside), inside a literal or a lone minus sign (``tr``, ``nul``,
    ``-``, and ``Inf``, ``-Infin``, ``Na``: Python writes them for floats JSON has no number
    for), or in a number's fraction or exponent (``1.``, ``2e-``).
    """
    if err.msg.startswith("Unterminated string"):
        return True
    rest = err.doc[err.pos :].rstrip()
    if err.msg.startswith("Invalid \\uXXXX escape"):
        return _ESCAPE_CUT.fullmatch(rest) is not None
    after_digit = err.doc[err.pos - 1 : err.pos].isdigit()
    return (
        rest in ("", "-")
        or any(word.startswith(rest) for word in _LITERALS)
        or (after_digit and _NUMBER_CUT.fullmatch(rest) is not None)
    )


def describe(err: json.JSONDecodeError, unit: str = "file") -> str:
    """Return ``"invalid JSON: what at line L, column C"`` for ``err``, and when the text is cut
    short (:func:`cut_short`), that the file ends before its JSON does.

    The line and column are 1-based, as :class:`json.JSONDecodeError` counts them; ``what`` is
    the decoder's message (``Unterminated string starting at`` names where the string opened).
    For ``unit="line"`` (one line of a JSONL file, whose number the caller gives) only the column
    is said, as the lenient import's problems always said it: ``"invalid JSON: what at column
    C"``; a JSONL file cut short is one whose last line is named so.
    """
    what = err.msg[: -len(" at")] if err.msg.endswith(" at") else err.msg
    if unit == "line":
        return f"invalid JSON: {what} at column {err.colno}"
    said = f"invalid JSON: {what} at line {err.lineno}, column {err.colno}"
    if cut_short(err):
        said += " (the file ends before its JSON does: cut short?)"
    return said


def repaired_prefix(text: str, upto: int) -> str | None:
    """Return ``text[:upto]`` made a valid JSON document, or ``None`` if it cannot be.

    The containers still open at ``upto`` are closed, and the element each one was in the middle
    of is dropped (the text is cut back to that container's last comma, or to its opening
    bracket); a container with no complete element is dropped whole from the one it is in.  A
    string, literal or number cut at ``upto`` is so dropped with its element.  When ``upto``
    falls right after a complete element (a closed container or string, blanks aside: a file
    cut between two messages), that element is kept.

    Args:
        text: a JSON text that does not parse.
        upto: the offset (in characters) where it stops being valid, as
            :attr:`json.JSONDecodeError.pos` gives it.

    Returns:
        A text that :func:`json.loads` parses, holding the elements complete before ``upto``;
        ``None`` when ``text[:upto]`` opens no container, closes one it did not open, or holds
        more than one value.

    Example:
        >>> repaired_prefix('[{"role": "user"}, {"role": "assi', 33)
        '[{"role": "user"}]'
    """
    brackets: list[str] = []  # the containers open at this point, outermost first
    opened: list[int] = []  # for each, the offset just past its opening bracket
    cuts: list[int] = []  # for each, the offset to cut back to: its last comma, or its opening
    closed_top = False
    string_cut = False
    for match in _TOKEN.finditer(text, 0, upto):
        if cuts:  # the last comma before this token separates the open container's elements
            comma = text.rfind(",", match.start(), match.end("gap"))
            if comma >= 0:
                cuts[-1] = comma
        token = match.group("token")
        if token is None:
            break  # the end (``upto``): the gap before it was the last
        if token[0] == '"':
            if len(token) == 1:
                string_cut = True
                break  # a string that runs past ``upto``: its element is dropped
            continue
        if token in _CLOSER:
            if closed_top:
                return None  # a second top-level value
            brackets.append(token)
            opened.append(match.end())
            cuts.append(match.end())
        elif not brackets or _CLOSER[brackets[-1]] != token:
            return None
        else:
            brackets.pop()
            opened.pop()
            cuts.pop()
            closed_top = not brackets
    if brackets and not string_cut and text[:upto].rstrip().endswith(("}", "]", '"')):
        # the text stops right after a complete element (a closed container or string: the
        # commonest cut, between two messages): it is kept, when closing there makes valid JSON
        whole = text[:upto].rstrip() + "".join(_CLOSER[bracket] for bracket in reversed(brackets))
        if _parses(whole):
            return whole
    while len(brackets) > 1 and cuts[-1] == opened[-1]:  # nothing complete in it: drop it whole
        brackets.pop()
        opened.pop()
        cuts.pop()
    if not brackets:
        return None
    repaired = text[: cuts[-1]] + "".join(_CLOSER[bracket] for bracket in reversed(brackets))
    return repaired if _parses(repaired) else None


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True
