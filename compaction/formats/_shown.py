"""Make what a parse says about a transcript's content safe to print: no secret, no escape, bounded.

A malformed line is reported with a piece of what it held (``expected a JSON object, found str
"..."``, ``a <type> message needs ...``, a ``parentUuid`` the file names), and that report is
printed on a terminal (``run --lenient``, ``import --lenient``, the strict error) and kept in
``--json`` reports.  The content is the transcript's, so it may hold anything:

* a credential (an agent's transcript often quotes one): each token that looks like an API key
  (``sk-...``, ``AIza...``, GitHub, Slack, Hugging Face, AWS access keys, the patterns of
  :mod:`compaction.credentials`) or follows ``Bearer`` is replaced by ``[redacted]``;
* terminal control sequences (``ESC [ 2 J`` clears the screen, ``ESC ] 0 ;`` retitles the
  window, a bidirectional override reorders what is shown): each character that does not print
  (:meth:`str.isprintable`; the space prints) is written as its Python escape (``\\x1b``,
  ``\\u202e``), so the report stays one line of plain text;
* a megabyte on one line: the text keeps :data:`LIMIT` characters, its start and its end (where
  what is wrong is said), and says how many were cut between them.
"""

from __future__ import annotations

import re

from ..credentials import CREDENTIAL_TOKENS

__all__ = ["LIMIT", "REDACTED", "printable", "shown"]

#: The most characters of a problem's text that are kept (a cut says how many it left out).
LIMIT = 1000
#: What a credential-like token is replaced with.
REDACTED = "[redacted]"

#: Tokens that look like credentials, as :mod:`compaction.recipe` refuses them as settings, here
#: found anywhere in a text (not preceded by a character a token could go on with).
_SECRET = re.compile(rf"(?<![A-Za-z0-9_\-])(?:{CREDENTIAL_TOKENS})")
#: An ``Authorization: Bearer`` value (the word kept, the token redacted).
_BEARER = re.compile(r"(?i)(\bBearer\s+)[^\s\"',;]{8,}")
_UNPRINTABLE = re.compile(r"[^ -~]")  # only ASCII that prints passes without a look


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return char if char.isprintable() else repr(char)[1:-1]


def printable(text: str) -> str:
    """Return ``text`` with each character that does not print (:meth:`str.isprintable`; the
    space prints) written as its Python escape: a line break as ``\\n``, ESC as ``\\x1b``, a
    bidirectional override as ``\\u202e``; nothing redacted, nothing cut.

    For what the command line prints that is not a transcript's content but may hold such a
    character all the same: a file name (``compaction run $'a\\nb.jsonl'``), and an error's
    whole line, so each message stays one line of plain text.

    Example:
        >>> printable("chat\\n\\x1b[2J.jsonl")
        'chat\\\\n\\\\x1b[2J.jsonl'
    """
    if text.isprintable():
        return text
    return _UNPRINTABLE.sub(_escaped, text)


def shown(text: str, limit: int | None = LIMIT) -> str:
    """Return ``text`` fit to print in a problem line: credentials redacted, characters that do not
    print escaped, cut to ``limit`` characters (``None``: not cut): its first three quarters and
    its last quarter, with how many characters were cut between them.

    Args:
        text: a problem's text, holding pieces of the transcript's content.
        limit: the most characters kept (counted after redacting and before escaping, so a
            cut text is at most ``limit`` characters plus the escapes and the note of the cut).

    Returns:
        The text, one line, safe to print; unchanged when it held nothing of the above.

    Example:
        >>> shown('found str "sk-proj-ABCDEFGHIJKLMNOP" and \\x1b[2J')
        'found str "[redacted]" and \\\\x1b[2J'
    """
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _SECRET.sub(REDACTED, text)  # before the cut, so no cut leaves a piece of a key unmatched
    if limit is not None and len(text) > limit:  # the middle goes: what is wrong is said at the end
        tail = limit // 4
        text = f"{text[: limit - tail]} ... ({len(text) - limit:,} characters cut) ... {text[-tail:]}"
    return printable(text)
