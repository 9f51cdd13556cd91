"""What a transcript format offers the registry, and the sample of content its sniffer judges.

Every format module defines one :class:`TranscriptFormat`: its name, a priority, a sniffer
and a parser.  A sniffer is shown a :class:`Sample` of the file and answers whether the
content is its format; it never looks at the file name.  The registry (``_registry``) asks
the formats in priority order, so a sniffer only has to recognise its own format, never to
rule out the others: the specific formats (pi, Claude Code ...) are asked before the generic
chat-message ones, which then claim whatever messages are left.

A sample offers three views of the content, all computed on first use:

* ``head`` / ``text``: the first bytes of the file (64 KiB, and on to the end of the first line
  when that line opens a JSON object, so a JSONL record is never cut), decoded, as read and
  without a leading BOM and whitespace;
* ``entries``: the JSON objects of the first 40 lines, when the content reads as JSONL (its
  first line is a complete object, or the whole file was read and is no JSON document);
* ``document``: the content as one JSON value: the first line's object for JSONL, otherwise
  the whole file parsed, which detection reads only when no format claimed the head alone.

Two more views serve the document formats: ``items`` (the first 50 objects of a document that
is a list, or of its ``events`` list) and ``chat`` (the chat messages the content holds).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ._common import Context, Draft

__all__ = ["Chat", "Sample", "TranscriptFormat", "looks_binary", "wide_encoding"]

_BINARY_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"%PDF", b"PK\x03\x04", b"\x1f\x8b", b"RIFF")
_HEAD_LINES = 40
_DOCUMENT_ITEMS = 50


def looks_binary(head: bytes) -> bool:
    """Return whether ``head`` is binary content (NUL bytes or a known magic number)."""
    return head.startswith(_BINARY_MAGIC) or b"\x00" in head[:4096]


#: Byte order marks of the encodings wider than UTF-8 (UTF-32's first: it starts like UTF-16's).
_WIDE_MARKS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def wide_encoding(head: bytes) -> str | None:
    """Return ``"UTF-16"`` or ``"UTF-32"`` when ``head`` is text in that encoding, else ``None``.

    Told from a byte order mark, or from a JSON text's first character (``{`` or ``[``) with the
    NUL bytes that encoding puts beside it (``{\x00``, ``\x00{``, ``{\x00\x00\x00`` ...):
    Windows tools (PowerShell's ``>`` and ``Out-File``) write UTF-16, and without this the file
    would be called binary for its NUL bytes.
    """
    for mark, name in _WIDE_MARKS:
        if head.startswith(mark):
            return name
    for first in (b"{", b"["):
        if head.startswith((first + b"\x00\x00\x00", b"\x00\x00\x00" + first)):
            return "UTF-32"
        if head.startswith((first + b"\x00", b"\x00" + first)):
            return "UTF-16"
    return None


def _loads(text: str) -> Any:
    """Parse JSON text; raise ``ValueError`` for anything that does not parse (too deep included)."""
    try:
        return json.loads(text)
    except RecursionError as err:
        raise ValueError("nested too deeply") from err


class _Unread:
    """The document of a sample whose whole content was not (or could not be) read as JSON."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<document {self.reason}>"


#: The whole content was not read: detection is still looking at the head alone.
NOT_READ = _Unread("not read")
#: The whole content was read and is no single JSON document (JSONL with a damaged first line).
NOT_JSON = _Unread("not JSON")


@dataclass(frozen=True)
class Chat:
    """Chat messages found in a sample, for the generic OpenAI and Anthropic sniffers.

    Attributes:
        messages: the message objects (other values are ignored by the sniffers).
        system: a top-level ``system`` beside them (Anthropic request bodies), or ``None``.
        declared: a top-level ``"format"`` the file gives itself, or ``None``.
    """

    messages: list[Any]
    system: Any = None
    declared: Any = None

    @property
    def has_roles(self) -> bool:
        """Whether any of the messages is an object with a ``role``."""
        return any(isinstance(m, dict) and "role" in m for m in self.messages)


@dataclass(frozen=True)
class Sample:
    """The content a sniffer judges: the head of a file and, once read, the whole of it.

    Args:
        head: the first bytes of the file (64 KiB, through the end of a first line that opens a
            JSON object), decoded as UTF-8 (undecodable bytes replaced).
        whole: reads the whole file as text, or ``None`` when only the head is known.

    Example:
        >>> Sample('{"role": "user", "content": "hi"}').entries[0]["role"]
        'user'
    """

    head: str
    whole: Callable[[], str] | None = field(default=None, repr=False)

    @cached_property
    def text(self) -> str:
        """The head without a leading BOM and whitespace."""
        return self.head.lstrip("\ufeff \t\r\n")

    @cached_property
    def looks_json(self) -> bool:
        """Whether the content starts like JSON (``{`` or ``[``)."""
        return self.text.startswith(("{", "["))

    @cached_property
    def _lines(self) -> list[tuple[str, Any]]:
        """The first non-blank lines of a JSON-looking head, each with its value (or ``None``)."""
        if not self.looks_json:
            return []
        lines = [line for line in self.text.split("\n", _HEAD_LINES)[:_HEAD_LINES] if line.strip()]
        parsed: list[tuple[str, Any]] = []
        for line in lines:
            try:
                parsed.append((line, _loads(line)))
            except ValueError:
                parsed.append((line, None))
        return parsed

    @cached_property
    def records(self) -> tuple[dict[str, Any], ...]:
        """The JSON objects among the head's first 40 lines (complete lines only)."""
        return tuple(value for _, value in self._lines if isinstance(value, dict))

    @cached_property
    def jsonl(self) -> bool:
        """Whether the first line is a complete JSON object (JSONL rather than one document)."""
        return bool(self._lines) and isinstance(self._lines[0][1], dict)

    @cached_property
    def document(self) -> Any:
        """The content as one JSON value.

        The first line's object for JSONL; otherwise the whole file parsed, :data:`NOT_JSON`
        when it does not parse, and :data:`NOT_READ` while only the head is known.
        """
        if self.jsonl:
            return self.records[0]
        return self._whole_parsed[0]

    @cached_property
    def damage(self) -> json.JSONDecodeError | None:
        """Why the whole content, read as one JSON document, does not parse (its line and column
        among them); ``None`` when it parses, was not read, or failed for another reason (nested
        too deeply, a number too long: :attr:`unreadable`)."""
        return None if self.jsonl else self._whole_parsed[1]

    @cached_property
    def unreadable(self) -> str | None:
        """Why the whole content, read as one JSON document, could not be parsed though it may be
        valid JSON (``"nested too deeply"``, a number longer than Python converts); ``None`` when
        it parses, was not read, or is damaged (:attr:`damage`)."""
        return None if self.jsonl else self._whole_parsed[2]

    @cached_property
    def _whole_parsed(self) -> tuple[Any, json.JSONDecodeError | None, str | None]:
        """The whole content parsed (or :data:`NOT_READ` / :data:`NOT_JSON`), the decode error and
        why else it could not be parsed."""
        if self.whole is None or not self.looks_json:
            return NOT_READ, None, None
        whole = self.whole()  # outside the try: an error reading the file is no parse error
        try:
            return _loads(whole), None, None
        except json.JSONDecodeError as err:
            return NOT_JSON, err, None
        except ValueError as err:
            return NOT_JSON, None, str(err)

    @cached_property
    def entries(self) -> tuple[dict[str, Any], ...]:
        """The JSONL records that speak for the file: :attr:`records` when it reads as JSONL."""
        if self.jsonl or (self.records and self.document is NOT_JSON):
            return self.records
        return ()

    @cached_property
    def items(self) -> list[dict[str, Any]] | None:
        """The first 50 objects of a document that is a list (or an object's ``events`` list)."""
        document = self.document
        if isinstance(document, dict) and not isinstance(document.get("messages"), list):
            document = document.get("events")
        if not isinstance(document, list):
            return None
        return [item for item in document[:_DOCUMENT_ITEMS] if isinstance(item, dict)]

    @cached_property
    def chat(self) -> Chat | None:
        """The chat messages the content holds: JSONL messages, a ``messages`` list or a list."""
        if any("role" in entry for entry in self.entries):
            return Chat(list(self.entries))
        document = self.document
        if isinstance(document, dict) and isinstance(document.get("messages"), list):
            return Chat(document["messages"], document.get("system"), document.get("format"))
        items = self.items
        return Chat(list(items)) if items is not None else None


@dataclass(frozen=True)
class TranscriptFormat:
    """One transcript format, as its module offers it to the registry.

    Attributes:
        name: the name users pass as ``--format`` (``"claude-code"``).
        priority: the order in which detection asks the formats, highest first: specific
            formats above the generic chat-message ones they could be mistaken for.
        sniff: tells whether a :class:`Sample` of a file's content is this format.
        parse: turns the whole text into drafts, reporting problems through the context.
        holds: what the format reads a message from, in its users' words and with its
            article (``"a pi session entry with a conversation message (type 'message')"``),
            for the error that says why a file read as this format gave no message.
        reads_bytes: ``parse`` takes the file's bytes (UTF-8, a leading BOM removed) and
            reads them a line at a time (:func:`~compaction.formats._common.iter_jsonl`), so
            the whole file is never decoded into one ``str`` (up to 4 bytes a character
            when one line holds an emoji); JSONL formats set it.

    Example:
        >>> from compaction.formats import pi
        >>> pi.FORMAT.name, pi.FORMAT.sniff(Sample('{"type": "session", "cwd": "/w"}'))
        ('pi', True)
    """

    name: str
    priority: int
    sniff: Callable[[Sample], bool]
    parse: Callable[[str, Context], list[Draft]]
    holds: str = "a message"
    reads_bytes: bool = False
