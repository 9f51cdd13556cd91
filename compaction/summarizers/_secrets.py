"""Keep the API key out of what a server returns: check the key's characters, scrub it from text.

The key.  An API key is printable ASCII without spaces (``!`` to ``~``).  Anything else -- a
trailing CR or LF left by ``echo`` or a file, a tab, a space, a control or a non-ASCII
character -- is refused (:func:`key_problem` says what and where, never the key), because
httpx would refuse such a header with the key in its message, or fail with a traceback.

Scrubbing.  :func:`scrub_key` replaces every run of 8 or more consecutive characters of the
key -- the whole key, a prefix left by a cut, a suffix or a middle -- with ``[redacted]``.
The text is compared in a canonical form that undoes what a server may wrap the key in:
whitespace and invisible format characters (zero-width spaces, soft hyphens, direction
marks) and the escaped whitespace ``\\n``, ``\\r``, ``\\t`` between its characters are
skipped, and the escapes ``\\uXXXX``, ``\\xXX``, ``\\/``, ``\\\\``, ``%XX`` and ``&#N;`` /
``&#xN;`` count as the character they stand for; the whole stretch of the original text,
escapes and whitespace included, is replaced.  A key shorter than 8 characters is matched
whole, and one shorter than 4 is not scrubbed (it would blank ordinary words; no real API
key is that short).  Case matters: a key is case-sensitive.

Finding the runs: every 8-character piece of the key is looked for in the canonical text
(``str.find``, so the common case -- no piece found -- costs a few passes over the text);
the pieces found are merged into runs, and each run is mapped back to its span in the text.

Example:
    >>> scrub_key("the key is sk-abcd\\nefgh1234 ok", "sk-abcdefgh1234")
    'the key is [redacted] ok'
"""

from __future__ import annotations

import re
from array import array
from functools import lru_cache

__all__ = ["key_problem", "bad_key_message", "scrub_key", "clean_text", "REDACTED"]

#: What a piece of the key is replaced with.
REDACTED = "[redacted]"
#: The shortest run of the key's characters that is scrubbed (characters).
MIN_RUN = 8
#: A key shorter than this is not scrubbed at all (characters).
MIN_SCRUBBED_KEY = 4

_NAMED = {"\r": "a carriage return", "\n": "a line feed", "\t": "a tab", " ": "a space"}
# Characters skipped between the key's characters: whitespace (``str.isspace``) and invisible
# format characters a server (or a copy and paste) may slip in: zero-width spaces and joiners,
# soft hyphens, direction marks, variation selectors, the byte order mark.
_SKIPPED = "".join(
    chr(c)
    for first, last in (
        (0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0xAD, 0xAD), (0x34F, 0x34F),
        (0x61C, 0x61C), (0x115F, 0x1160), (0x1680, 0x1680), (0x17B4, 0x17B5), (0x180B, 0x180F),
        (0x2000, 0x200F), (0x2028, 0x202F), (0x205F, 0x206F), (0x3000, 0x3000), (0x3164, 0x3164),
        (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0),
    )
    for c in range(first, last + 1)
)
_SKIP_TABLE = {ord(c): None for c in _SKIPPED}
_KEPT = re.compile(f"[^{re.escape(_SKIPPED)}]+")
# One escape: groups 1 to 5 hold its code point, group 6 the escaped character; group 7 is
# escaped whitespace (a backslash and n, r or t), skipped like whitespace.
_ESCAPE = re.compile(
    r"\\u([0-9A-Fa-f]{4})|\\x([0-9A-Fa-f]{2})|%([0-9A-Fa-f]{2})|&#[xX]([0-9A-Fa-f]{1,6});"
    r"|&#([0-9]{1,7});|\\([/\\\"'])|(\\[nrt])"
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def key_problem(key: str) -> str | None:
    """Return what makes ``key`` unusable as an API key (never the key itself), or ``None``.

    Example:
        >>> key_problem("sk-abc\\r")
        'a carriage return at its end'
    """
    for index, char in enumerate(key):
        if "!" <= char <= "~":
            continue
        what = _NAMED.get(char)
        if what is None:
            what = "a non-ASCII character" if ord(char) > 0x7F else f"a control character (U+{ord(char):04X})"
        if index == len(key) - 1:
            where = "at its end"
        elif index == 0:
            where = "at its start"
        else:
            where = f"at character {index + 1} of {len(key)}"
        return f"{what} {where}"
    return None


def bad_key_message(env: str, problem: str) -> str:
    """Return why the key in the variable ``env`` is refused: the variable and the problem, never the key."""
    return (
        f"environment variable {env} holds {problem}; an API key is printable ASCII without "
        f"spaces (a trailing newline often comes from echo or a file): export it again without it"
    )


def clean_text(text: str) -> str:
    """Return ``text`` with each lone surrogate (which UTF-8 cannot store) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def _decoded(match: re.Match[str]) -> str:
    """Return the character an escape stands for, ``""`` for escaped whitespace, or the match."""
    if match.group(7) is not None:
        return ""
    if match.group(6) is not None:
        return match.group(6)
    digits = next(g for g in match.groups()[:5] if g is not None)
    value = int(digits, 10 if match.group(5) is not None else 16)
    return chr(value) if value <= 0x10FFFF else match.group(0)


def _may_escape(text: str) -> bool:
    return "\\" in text or "%" in text or "&#" in text


def _canonical(text: str) -> str:
    """Return ``text`` with skipped characters dropped, then escapes read (see the module docstring)."""
    text = text.translate(_SKIP_TABLE)
    return _ESCAPE.sub(_decoded, text) if _may_escape(text) else text


@lru_cache(maxsize=8)
def _pieces(key: str) -> tuple[int, frozenset[str]]:
    """Return the run length and the set of pieces of that length of the canonical ``key``."""
    canonical = _canonical(key)
    width = min(MIN_RUN, len(canonical))
    if len(canonical) < MIN_SCRUBBED_KEY:
        return 0, frozenset()
    return width, frozenset(canonical[i : i + width] for i in range(len(canonical) - width + 1))


def _origins(text: str) -> tuple[str, array[int], dict[int, int]]:
    """Return :func:`_canonical` of ``text``, where each of its characters starts in ``text``, and
    where each that stands for an escape ends (any other ends one character after its start)."""
    kept: list[str] = []
    position: array[int] = array("q")  # of each kept character, in ``text``
    for match in _KEPT.finditer(text):
        kept.append(match.group())
        position.extend(range(match.start(), match.end()))
    stripped = "".join(kept)
    if not _may_escape(stripped):
        return stripped, position, {}
    pieces: list[str] = []
    starts: array[int] = array("q")
    escape_ends: dict[int, int] = {}
    done = 0
    for match in _ESCAPE.finditer(stripped):
        begin, end = match.span()
        pieces.append(stripped[done:begin])
        starts.extend(position[done:begin])
        char = _decoded(match)
        if len(char) == 1:
            escape_ends[len(starts)] = position[end - 1] + 1
            pieces.append(char)
            starts.append(position[begin])
        elif char:  # not an escape after all: its characters stand for themselves
            pieces.append(char)
            starts.extend(position[begin:end])
        done = end
    pieces.append(stripped[done:])
    starts.extend(position[done:])
    return "".join(pieces), starts, escape_ends


def scrub_key(text: str, key: str | None) -> str:
    """Return ``text`` with every run of 8+ characters of ``key`` replaced by ``[redacted]``.

    Args:
        text: any text that came from a server or the transport.
        key: the API key; ``None`` (or one shorter than 4 characters) scrubs nothing.

    Returns:
        The scrubbed text; ``text`` itself when no piece of the key is in it.
    """
    if not key or not text:
        return text
    width, pieces = _pieces(key)
    if not width:
        return text
    canonical = _canonical(text)
    if not any(piece in canonical for piece in pieces):
        return text
    canonical, starts, escape_ends = _origins(text)
    runs: list[tuple[int, int]] = []
    for piece in pieces:
        found = canonical.find(piece)
        while found != -1:
            runs.append((found, found + width))
            found = canonical.find(piece, found + 1)
    merged: list[list[int]] = []
    for first, last in sorted(runs):  # runs that overlap or touch are one run
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    out: list[str] = []
    position = 0
    for first, last in merged:
        out += [text[position : starts[first]], REDACTED]
        position = escape_ends.get(last - 1, starts[last - 1] + 1)
    out.append(text[position:])
    return "".join(out)
