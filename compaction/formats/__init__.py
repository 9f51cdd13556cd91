"""Transcript formats: detect a transcript's format and parse it into messages.

Each format lives in its own module whose docstring describes the source format and the
mapping to :class:`~compaction.blocks.Message`:

======================  ============================================================
``openai``              OpenAI Chat Completions messages (JSON array, ``{"messages"}``, JSONL)
``anthropic``           Anthropic Messages (same containers; top-level ``system``)
``pi``                  pi coding-agent session JSONL (tree-shaped; active branch)
``claude-code``         Claude Code session JSONL (split assistant lines joined)
``codex``               Codex CLI rollout JSONL (``response_item`` records)
``agent-tars``          Agent TARS event stream (JSON array of events)
``swe-agent``           SWE-agent ``.traj`` (``history`` of Chat Completions messages)
``openhands``           OpenHands evaluation ``output.jsonl`` (runs concatenated)
``aider``               aider ``.aider.chat.history.md``
``openai-responses``    OpenAI Responses API input items (array, request body, JSONL)
``langchain``           LangChain / LangGraph message dumps (three serialized shapes)
``cline``               Cline / Roo Code ``api_conversation_history.json``
======================  ============================================================

Each module also offers ``FORMAT``, a :class:`TranscriptFormat`: its name, a priority and a
sniffer that recognises the format from the content.  ``_registry`` lists the modules;
detection asks their sniffers in priority order (:data:`REGISTRY`), specific formats before
the generic chat-message ones, and ``--format`` names come from the same list.  A new format
is a new module and one line in that list.

Rules every format shares (``_common.finish``): unknown block types are kept verbatim;
messages with no content are dropped, tool results never; consecutive user messages made only
of ``tool_result`` blocks merge into one; tool ids are unique within a transcript (reused ids
are renamed ``<id>_2`` ... consistently on both sides); messages come out in order with
``seq=None``, ``source_id`` from the source and small ``meta`` (timestamp, model).

Limits every format shares: a line or document nested deeper than
``_common.MAX_RECORD_DEPTH`` (256) levels of JSON is refused as it is parsed, a message whose
tool results nest deeper than :data:`~compaction.blocks.MAX_BLOCK_DEPTH` (64) or whose blocks
carry JSON deeper than :data:`~compaction.blocks.MAX_JSON_DEPTH` (100) is malformed (reported at
its line; skipped under ``lenient``); a JSONL first line longer than the 64 KiB detection head
is read whole; and a ``format`` given by the caller that yields no message is an error saying
what the format reads and what the content looks like, never an import of nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from .._files import special_file_kind
from ..blocks import Message
from ..errors import InvalidArgument, InvalidTranscript, TranscriptUnreadable, UnknownFormat, found
from . import anthropic, openai
from ._common import Context, Draft, Item, LenientLoss, NothingRead, ReadTally, finish, unknown_block_counts
from ._registry import FORMATS, REGISTRY, detect, format_named
from ._sniff import TranscriptFormat, wide_encoding

__all__ = [
    "FORMATS",
    "REGISTRY",
    "LenientLoss",
    "NothingRead",
    "ParsedTranscript",
    "TranscriptFormat",
    "detect_format",
    "load_transcript",
    "parse_messages",
    "parse_text",
    "unknown_block_counts",
]

#: The UTF-8 byte order mark a file may open with (``utf-8-sig`` drops it).
_BOM = b"\xef\xbb\xbf"
_HEAD_BYTES = 64 * 1024
_READ_BYTES = 1 << 20


def _record_goes_on(head: bytes) -> bool:
    """Return whether the first line of ``head`` opens a JSON object (a JSONL record, or a
    one-line document) and does not end within ``head``."""
    content = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return content.startswith(b"{") and b"\n" not in content


def _head_of(data: bytes) -> bytes:
    """Return what detection reads of ``data``: the first 64 KiB, and on to the end of the first
    line when that line opens a JSON object, so a JSONL record longer than 64 KiB is read whole."""
    head = data[:_HEAD_BYTES]
    if len(head) < len(data) and _record_goes_on(head):
        newline = data.find(b"\n", len(head))
        return data if newline < 0 else data[: newline + 1]
    return head


def _read_head(path: str | Path) -> bytes:
    """Read the head of the file ``path`` as :func:`_head_of` cuts it, and no more."""
    with open(path, "rb") as handle:
        head = handle.read(_HEAD_BYTES)
        if len(head) < _HEAD_BYTES or not _record_goes_on(head):
            return head
        parts = [head]
        while True:
            chunk = handle.read(_READ_BYTES)
            newline = chunk.find(b"\n")
            if newline >= 0:
                parts.append(chunk[: newline + 1])
                return b"".join(parts)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)


@dataclass(frozen=True)
class ParsedTranscript:
    """The messages of one transcript and what parsing them skipped.

    Attributes:
        messages: the messages, in order, with ``seq=None``.
        format: the format name used (one of :data:`FORMATS`).
        skipped: malformed lines or messages skipped (only under ``lenient=True``).
        problems: one ``"path:line: what is wrong"`` line per skipped item, and one per way
            the parse worked around a skipped line (a chain re-linked in file order) or left
            something out on purpose (a pi branch the session left, Claude Code sidechain
            events), so nothing is lost silently.
        unknown_blocks: how many blocks of each type no request format knows were imported
            (kept verbatim, rendered by the loud default rule), largest count first; empty
            when there are none.
        read: how the file's lines (or records) became ``messages``, every one accounted for
            (skipped, tool results joined to the turn before, empty messages left out, lines
            with no message of their own): :class:`~compaction.formats._common.ReadTally`.
    """

    messages: list[Message]
    format: str
    skipped: int = 0
    problems: list[str] = field(default_factory=list)
    unknown_blocks: dict[str, int] = field(default_factory=dict)
    read: ReadTally = field(default_factory=ReadTally)


def _read_all(path: str | Path, name: str) -> bytes:
    """Return the bytes of the file ``path``.

    Raises:
        TranscriptUnreadable: the file cannot be read (missing, a directory, no permission).
    """
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise TranscriptUnreadable(f"cannot read the transcript: {err.strerror or err}", path=name) from err


def _lines_of(handle: BinaryIO) -> Iterator[bytes]:
    """Yield the lines of a binary file without their ``\\n`` (as ``split(b"\\n")`` would), a
    leading UTF-8 BOM dropped; one line is held at a time."""
    first = True
    for line in handle:
        if first:
            first = False
            if line.startswith(_BOM):
                line = line[len(_BOM) :]
        yield line[:-1] if line.endswith(b"\n") else line
    if first or line.endswith(b"\n"):
        yield b""  # split() gives an empty last piece after a final newline (and for an empty file)


def _decode(data: bytes, path: str | None) -> str:
    wide = wide_encoding(data[:8])
    if wide is not None:  # UTF-16 read as a format the caller chose: its NUL bytes may even decode
        raise InvalidTranscript(
            f"not UTF-8 text but {wide}: convert it with iconv -f {wide} -t UTF-8; "
            "transcripts are UTF-8 JSON, JSONL or Markdown",
            path=path,
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InvalidTranscript(
            f"not UTF-8 text (byte {err.start}: {err.reason}); transcripts are UTF-8 JSON, JSONL or Markdown",
            path=path,
        ) from err


def detect_format(path: str | Path, head: bytes | None = None) -> str:
    """Return the format of a transcript, told from its content, not its file name.

    Args:
        path: the transcript file (read for its head when ``head`` is not given; also named
            in errors).
        head: the first bytes of the file, if already read; detection then decides from them
            alone.  64 KiB is plenty, except that a JSONL file's first line must be whole
            (read from ``path``, the head goes on to the end of that line).

    Returns:
        One of :data:`FORMATS`.

    Raises:
        UnknownFormat: the content matches no format (binary data, random text); the message
            names the file and lists the formats.
        InvalidTranscript: the content starts like one JSON document that no format claims and
            does not parse (cut short, or broken in the middle): the message names the file, the
            line and column, and the format the part before the damage reads as, if one does.

    Example:
        >>> detect_format("examples/pi__pi-mono__before-compaction.jsonl")  # doctest: +SKIP
        'pi'
    """
    name = str(path)
    if head is None:
        head = _read_head(path)
        return detect(head, name, lambda: Path(path).read_text("utf-8-sig", errors="replace")).name
    return detect(head, name).name


def load_transcript(path: str | Path, format: str | None = None, lenient: bool = False) -> ParsedTranscript:
    """Read a transcript file into messages.

    Args:
        path: the transcript file.
        format: one of :data:`FORMATS`; ``None`` detects it from the content.
        lenient: skip malformed lines or messages (counted in ``skipped``, described in
            ``problems``) instead of raising.

    Returns:
        The messages, the format used and what was skipped.

    Raises:
        InvalidArgument: ``path`` is not a path, or ``format`` not a string.
        UnknownFormat: ``format`` is not a known name, or detection found none.  A detected
            file that starts like one JSON document and does not parse is an
            :class:`InvalidTranscript` naming the damage (line, column, cut short) instead.
        TranscriptUnreadable: the file cannot be read (missing, a directory, no permission,
            a pipe or a device, refused before it is opened); an :class:`InvalidTranscript`
            and an ``OSError`` both.
        InvalidTranscript: a malformed line or message (strict mode), naming the file, the
            1-based line and what is wrong; or a whole-document JSON file that does not parse.
            When the format was detected rather than given, the message names the format
            detected, since the guess may be what is wrong.  When ``format`` is given and the
            file gives no message in it (nothing it reads, or everything skipped), the message
            says what the format reads and which format the content looks like.
        LenientLoss: (an :class:`InvalidTranscript`) the import would lose messages beyond
            the lines it skips: a tree-shaped session whose chain runs through a skipped line
            leaves messages that cannot be placed; it names the file and both counts, and
            nothing is imported.

    Example:
        >>> parsed = load_transcript("session.jsonl")  # doctest: +SKIP
        >>> parsed.format, len(parsed.messages)  # doctest: +SKIP
        ('pi', 977)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"load_transcript reads a file path (str or Path); found {found(path)}")
    if format is not None and not isinstance(format, str):
        raise InvalidArgument(f"format must be a format name (str) or None; found {found(format)}")
    name = str(path)
    chosen = format_named(format, name) if format is not None else None
    special = special_file_kind(path)
    if special is not None:  # a pipe loses what the head read took; a device never ends
        raise TranscriptUnreadable(
            f"cannot read the transcript: it is {special}, not a regular file (a transcript is read "
            "twice, its head and then the whole); save it to a file first",
            path=name,
        )
    try:
        head = _read_head(path)
    except OSError as err:  # missing, a directory, unreadable: one typed error naming the file
        raise TranscriptUnreadable(f"cannot read the transcript: {err.strerror or err}", path=name) from err
    transcript_format = chosen or detect(head, name, lambda: _decode(_read_all(path, name), name))
    ctx = Context(name, lenient, detected=None if chosen else transcript_format.name)
    try:
        if transcript_format.reads_bytes:  # a line at a time from the file: never the whole file at once
            parse = cast(Callable[[Iterable[bytes], Context], list[Draft]], transcript_format.parse)
            try:
                with open(path, "rb") as handle:
                    messages = finish(parse(_lines_of(handle), ctx), ctx)
            except OSError as err:
                raise TranscriptUnreadable(
                    f"cannot read the transcript: {err.strerror or err}", path=name
                ) from err
        else:
            messages = finish(transcript_format.parse(_decode(_read_all(path, name), name), ctx), ctx)
    except InvalidTranscript as err:
        if chosen is None or isinstance(err, (TranscriptUnreadable, LenientLoss)):
            raise
        said = _when_every_line_fails(err, path, chosen) if not lenient and err.line is not None else err
        raise _with_detected_hint(
            said, chosen, head, name, lambda: _decode(_read_all(path, name), name)
        ) from err

    def nothing_read(given: TranscriptFormat) -> InvalidTranscript:
        return _nothing_read(given, head, _decode(_read_all(path, name), name), ctx)

    return _parsed(messages, transcript_format.name, ctx, name, chosen, nothing_read)


def parse_text(text: str, format: str, *, name: str, lenient: bool = False) -> ParsedTranscript:
    """Parse ``text``, a transcript's content, as ``format``: what :func:`load_transcript` gives for a
    file holding it, named ``name`` in notes and errors, without writing or reading a file.

    ``compaction import --branches`` parses each path of a pi session this way, and a Claude
    Code path that cannot resume from the parse of the path it continues
    (:mod:`compaction.formats._claude_code_paths`) (the session's text with the lines of
    other paths blank, so line numbers stay): blank lines cost one regex match a run, so a
    path costs its own lines rather than the file's.

    Raises:
        UnknownFormat: ``format`` names no format.
        InvalidTranscript: as :func:`load_transcript` (malformed content, nothing read, and
            :class:`LenientLoss`).
    """
    chosen = format_named(format, name)
    ctx = Context(name, lenient, detected=None)
    text = (
        text[1:] if text.startswith("\ufeff") else text
    )  # a leading byte order mark, as a file read drops it
    messages = finish(chosen.parse(text, ctx), ctx)

    def nothing_read(given: TranscriptFormat) -> InvalidTranscript:
        return _nothing_read(given, text[:_HEAD_BYTES].encode("utf-8", "surrogatepass"), text, ctx)

    return _parsed(messages, chosen.name, ctx, name, chosen, nothing_read)


def _parsed(
    messages: list[Message],
    format_name: str,
    ctx: Context,
    name: str,
    chosen: TranscriptFormat | None,
    nothing_read: Callable[[TranscriptFormat], InvalidTranscript],
) -> ParsedTranscript:
    """Return what parsing ``name`` as ``format_name`` read: ``messages`` and ``ctx``'s notes.

    Raises:
        LenientLoss: ``ctx`` holds messages that could not be placed (a chain through a
            skipped line); nothing is returned.
        InvalidTranscript: ``chosen`` (the format the caller named, ``None`` when detected)
            read no message; the error is ``nothing_read(chosen)``, made only then (it may read
            the file again).
    """
    if ctx.unplaced:
        raise LenientLoss(name, ctx.skipped, ctx.unplaced, ctx.problems, ctx.skipped_lines)
    if chosen is not None and not messages:
        raise nothing_read(chosen)
    return ParsedTranscript(
        messages=messages,
        format=format_name,
        skipped=ctx.skipped,
        problems=ctx.problems,
        unknown_blocks=unknown_block_counts(messages),
        read=ReadTally.of(ctx, len(messages)),
    )


#: What a strict parse's error adds after what is wrong with the line (``Context.problem``).
_LENIENT_HINT = "; fix it, or skip such lines with --lenient (lenient=True in Python)"


def _when_every_line_fails(
    err: InvalidTranscript, path: str | Path, chosen: TranscriptFormat
) -> InvalidTranscript:
    """Return ``err`` (a strict parse's first malformed line under a format the caller named), or,
    when no line of the file reads as that format (a lenient parse of it reads nothing), the same
    error saying so: all N lines fail, so skipping them with ``--lenient`` would import nothing.

    The file is parsed again, leniently, only when the strict parse has already failed."""
    try:
        load_transcript(path, format=chosen.name, lenient=True)
    except NothingRead as nothing:
        if not nothing.skipped:
            return err
        text = str(err)
        where = f"{err.path}:{err.line}: " if err.path is not None else ""
        what = text[len(where) :] if text.startswith(where) else text
        what = what.replace(_LENIENT_HINT, "")
        every = InvalidTranscript(
            f"{what}; all {nothing.skipped:,} lines that might hold {chosen.holds} fail as {chosen.name!r} "
            "(the first is said here), so --lenient would import nothing",
            path=err.path,
            line=err.line,
        )
        return every
    except InvalidTranscript:
        return err
    return err


def _with_detected_hint(
    err: InvalidTranscript, chosen: TranscriptFormat, head: bytes, name: str, read_all: Callable[[], str]
) -> InvalidTranscript:
    """Return ``err`` (a malformed line under a format the caller named) with the format its
    content looks like, when detection says another: the named format may be what is wrong.
    """
    try:
        detected = detect(head, name, read_all).name
    except InvalidTranscript:
        return err
    if detected == chosen.name:
        return err
    hinted = InvalidTranscript(
        f"{err} (read as {chosen.name!r}; detected from its content it would be {detected!r}: "
        f"pass --format {detected} (format={detected!r} in Python) or leave the format out)"
    )
    hinted.path, hinted.line = err.path, err.line
    return hinted


def _nothing_read(chosen: TranscriptFormat, head: bytes, text: str, ctx: Context) -> InvalidTranscript:
    """Return the error for a file that, read as the format the caller chose, gave no message.

    It says what the format reads messages from, what the file held instead (lines none of
    which is such a record, or records that were all malformed and skipped) and, when its
    content tells, the format detection would have chosen.
    """
    lines = sum(1 for line in text.split("\n") if line.strip())
    found = f"its {lines:,} line{'s' if lines != 1 else ''}" if lines else "the file (it is empty)"
    if ctx.skipped:
        first = ctx.problems[0]
        if ctx.path is not None and first.startswith(f"{ctx.shown_path}:"):
            first = first[len(ctx.shown_path) + 1 :].lstrip()
            first = f"line {first}" if first[:1].isdigit() else first
        why = (
            f"nothing in {found} holds {chosen.holds}: the {ctx.skipped:,} item"
            f"{'s' if ctx.skipped != 1 else ''} that might were malformed and skipped (the first: {first})"
        )
    else:
        why = f"none of {found} holds {chosen.holds}"
    try:
        detected = detect(head, ctx.path, lambda: text).name
    except InvalidTranscript:
        detected = None
    if detected is None:
        hint = "its content matches none of the formats either"
    elif detected == chosen.name:
        hint = f"its content does look like {chosen.name!r}, so it holds no message yet"
    else:
        hint = (
            f"is it another format? Detected from its content it would be {detected!r}: "
            f"pass --format {detected} (format={detected!r} in Python) or leave the format out"
        )
    return NothingRead(
        f"read as {chosen.name!r}, nothing was imported: {why}; {hint}",
        path=ctx.path,
        skipped=ctx.skipped,
        problems=ctx.problems,
    )


def parse_messages(data: list[dict[str, Any]], format: str = "openai") -> list[Message]:
    """Convert in-memory OpenAI Chat Completions or Anthropic Messages dicts into messages.

    Args:
        data: the message dicts, in order.
        format: ``"openai"`` or ``"anthropic"``.

    Returns:
        The messages, with the shared rules applied (tool-result runs merged, ids unique).

    Raises:
        UnknownFormat: ``format`` is neither.
        InvalidTranscript: a malformed message, named by its index (``messages[3]``).

    Example:
        >>> parse_messages([{"role": "user", "content": "hi"}])[0].role
        'user'
    """
    if format not in ("openai", "anthropic"):
        raise UnknownFormat(f"parse_messages reads 'openai' or 'anthropic' messages, not {format!r}")
    if not isinstance(data, list):
        raise InvalidTranscript(f"expected a list of message dicts, found {type(data).__name__}")
    ctx = Context(None, lenient=False)
    items: list[Item] = [(message, None, f"messages[{index}]") for index, message in enumerate(data)]
    convert: Callable[[list[Item], Context], list[Draft]]
    convert = openai.convert_all if format == "openai" else anthropic.convert_all
    return finish(convert(items, ctx), ctx)
