"""Shared machinery of the transcript parsers: drafts, error policy, JSON helpers, tool pairing.

Every parser turns source text into a list of :class:`Draft` (a mutable message under
construction that remembers the source line it came from).  :func:`finish` then applies the
rules every format shares, in this order:

1. each draft's blocks are validated; a malformed one is reported at its line;
2. drafts with no content at all are dropped (they carry nothing);
3. consecutive user drafts made only of ``tool_result`` blocks merge into one message, so the
   answer to a parallel fan-out is one message, as the Messages API wants it;
4. reused tool ids are made unique (see :func:`uniquify_tool_ids`);
5. the drafts become immutable :class:`~compaction.blocks.Message` values.

The error policy lives in :class:`Context`: strict parsing raises
:class:`~compaction.errors.InvalidTranscript` naming the file and line; lenient parsing skips
the item, counts it and records one ``"path:line: what"`` line.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..blocks import (
    KNOWN_BLOCK_TYPES,
    MAX_BLOCK_DEPTH,
    MAX_JSON_DEPTH,
    Block,
    Message,
    image_reference_block,
    json_depth,
    validate_block,
)
from ..errors import ImageError, InvalidMessage, InvalidTranscript
from ..imageinfo import info_from_block
from ._json_damage import describe as describe_json_error
from ._shown import printable, shown

__all__ = [
    "line_list",
    "MAX_RECORD_DEPTH",
    "Context",
    "LenientLoss",
    "NothingRead",
    "Draft",
    "ReadTally",
    "Item",
    "Malformed",
    "FinishMemo",
    "convert_items",
    "copy_draft",
    "finish",
    "iter_jsonl",
    "load_json_document",
    "read_jsonl_line",
    "first_line_is_object",
    "image_from_url",
    "parse_arguments",
    "text_blocks",
    "tool_result",
    "tool_use",
    "typed_parts",
    "uniquify_tool_ids",
    "unknown_block_counts",
]


class Malformed(Exception):
    """Raised inside a parser for one malformed line or message; the caller reports it."""


class LenientLoss(InvalidTranscript):
    """An import would lose messages beyond the malformed lines it skips; nothing is imported.

    Raised when a tree-shaped session (pi ``parentId``) broken by skipped lines leaves
    messages that cannot be placed in the conversation: their chain to the root runs through
    a skipped line and the re-linked active branch does not reach them.

    Attributes:
        path: the file.
        skipped: malformed lines or messages skipped.
        unplaced: messages that could not be placed (lost beyond the skipped lines).
        problems: one ``"path:line: what"`` line per skipped line and per re-link or loss.
        skipped_lines: the 1-based numbers of the skipped lines.
    """

    def __init__(
        self, path: str | None, skipped: int, unplaced: int, problems: list[str], skipped_lines: list[int]
    ) -> None:
        first_loss = next((p for p in problems if "could not be placed" in p), "")
        where = f"{printable(path)}:" if path is not None else "<memory>:"
        detail = first_loss[len(where) :] if first_loss.startswith(where) else first_loss
        number, colon, rest = detail.partition(": ")
        detail = rest if colon and number.isdigit() else detail  # "12: what" -> "what"
        super().__init__(
            f"a lenient import would lose {unplaced} message{'s' if unplaced != 1 else ''} beyond the "
            f"{skipped} skipped line{'s' if skipped != 1 else ''} ({detail}); nothing was imported: "
            f"repair the skipped line{'s' if len(skipped_lines) != 1 else ''} "
            f"({', '.join(map(str, skipped_lines)) or 'none known'}) and import again",
            path=path,
        )
        self.skipped = skipped
        self.unplaced = unplaced
        self.problems = list(problems)
        self.skipped_lines = list(skipped_lines)


class NothingRead(InvalidTranscript):
    """A transcript read as the format the caller named gave no message: its lines hold no
    record of that format, or every one that might was malformed and skipped (``lenient``).

    Attributes:
        skipped: the malformed lines or messages skipped (0 when no line was such a record).
        problems: one ``"path:line: what is wrong"`` line per skipped item, in file order, and
            the notes beside them, as :attr:`~compaction.formats.ParsedTranscript.problems`
            holds them; the command line lists the first five before the error's line.
    """

    def __init__(
        self, message: str, *, path: str | None, skipped: int = 0, problems: Sequence[str] = ()
    ) -> None:
        super().__init__(message, path=path)
        self.skipped = skipped
        self.problems = list(problems)


@dataclass
class Draft:
    """A message under construction.

    Attributes:
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        content: the content blocks, in order.
        source_id: the id the source gave the message or event, if any.
        meta: small facts for inspection (timestamp, model).
        line: where the draft came from (1-based line, or ``None``), for error messages.
        where: a description of the location when there is no line (``"messages[3]"``).
    """

    role: str
    content: list[Block]
    source_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    line: int | None = None
    where: str | None = None


def copy_draft(draft: Draft) -> Draft:
    """Return a copy of ``draft`` that can be changed without changing it: its content list,
    its meta and the lists in its meta (``source_ids``, kept sidechain records) are new; the
    blocks and other values are shared (nothing changes them in place)."""
    meta = {key: list(value) if isinstance(value, list) else value for key, value in draft.meta.items()}
    return Draft(draft.role, list(draft.content), draft.source_id, meta, draft.line, draft.where)


class Context:
    """The error policy and bookkeeping of one parse.

    Args:
        path: the file being parsed, or ``None`` for in-memory input.
        lenient: skip malformed items (and record them) instead of raising.
        detected: the format's name when it was detected from the content rather than
            chosen; errors then say so, since the guess may be what is wrong.
    """

    def __init__(self, path: str | None, lenient: bool = False, detected: str | None = None) -> None:
        self.path = path
        self.lenient = lenient
        self.detected = detected
        self.skipped = 0
        self.skipped_lines: list[int] = []
        self.unplaced = 0
        self.problems: list[str] = []
        self.lines = 0  # non-blank JSONL lines read (read_jsonl_line)
        self.records = 0  # drafts given to finish: what the parser read as messages
        self.joined = 0  # tool-result-only drafts joined to the user turn before them
        self.left_out = 0  # drafts with no content, left out
        self.draft_skipped = 0  # drafts finish found malformed (counted in skipped too)
        self.line_each = True  # every draft came from a line of its own

    @property
    def shown_path(self) -> str:
        """The file as ``problems`` name it: each character of its name that does not print
        escaped (:func:`~compaction.formats._shown.printable`), ``<memory>`` for in-memory input."""
        return printable(self.path) if self.path is not None else "<memory>"

    def error(self, what: str, *, line: int | None = None) -> InvalidTranscript:
        """Return the error for ``what`` at ``line``, naming the detected format if there is one.

        ``what`` is made fit to print (:func:`~compaction.formats._shown.shown`: credentials
        redacted, characters that do not print escaped): it may quote the transcript."""
        what = shown(what, limit=None)
        if self.detected is not None:
            what += (
                f"; read as {self.detected!r}, detected from its content: "
                "pass --format (format= in Python) to choose another format"
            )
        return InvalidTranscript(what, path=self.path, line=line)

    def note(self, what: str, *, line: int | None = None) -> None:
        """Record how the parse worked around a skipped item (a re-linked chain): one more
        ``"path:line: what"`` line in ``problems``, not counted as a skipped item; ``what`` is
        made fit to print (:func:`~compaction.formats._shown.shown`), as a problem's is."""
        what = shown(what)
        prefix = self.shown_path
        if line is not None:
            prefix += f":{line}"
        self._record(f"{prefix}: {what}", line)

    def _line_of(self, entry: str) -> float:
        """Return the line an entry of ``problems`` names (``inf`` for one that names none)."""
        prefix = self.shown_path + ":"
        number = entry[len(prefix) :].partition(":")[0] if entry.startswith(prefix) else ""
        return int(number) if number.isdigit() else math.inf

    def _record(self, entry: str, line: int | None) -> None:
        """Put ``entry`` in ``problems`` in file order: the lines a parse reports late (a
        message found malformed once the file is read, a chain re-linked at its end) go
        before those of later lines; an entry naming no line goes after every one that does,
        in the order they came.  Entries mostly come in order: one comparison each then."""
        key = math.inf if line is None else line
        if not self.problems or self._line_of(self.problems[-1]) <= key:
            self.problems.append(entry)
            return
        self.problems.insert(bisect.bisect_right(self.problems, key, key=self._line_of), entry)

    def lose(self, count: int, what: str, *, line: int | None = None) -> None:
        """Record ``count`` messages that could not be placed (a note saying so; see
        :class:`LenientLoss`, which the import then raises)."""
        self.unplaced += count
        self.note(what, line=line)

    def problem(self, what: str, *, line: int | None = None, where: str | None = None) -> None:
        """Report one malformed item: raise under strict parsing, record it under lenient.

        What is said of it quotes the transcript, so it is made fit to print first
        (:func:`~compaction.formats._shown.shown`): credentials redacted, characters that do not
        print escaped, cut after :data:`~compaction.formats._shown.LIMIT` characters."""
        text = shown(f"{where}: {what}" if where else what)
        if not self.lenient:
            hint = "; fix it, or skip such lines with --lenient (lenient=True in Python)"
            raise self.error(text + hint, line=line)
        self.skipped += 1
        if line is not None:
            bisect.insort(self.skipped_lines, line)
        prefix = self.shown_path
        if line is not None:
            prefix += f":{line}"
        self._record(f"{prefix}: {text}", line)


@dataclass(frozen=True)
class ReadTally:
    """How the lines (or records) of a transcript became its messages, every one accounted for.

    ``records`` (what the parser read as messages) is ``messages + joined + left_out`` and the
    skipped messages among them; a JSONL file's ``lines`` are those records, the lines skipped
    before they became one, and the lines that hold no message of their own (a format's
    metadata records, a message's later parts): :attr:`other_lines`.

    Attributes:
        lines: the non-blank lines of a JSONL transcript (0 for a JSON document or Markdown).
        records: the messages the parser read, before the rules every format shares.
        messages: the messages kept.
        skipped: malformed lines or messages skipped (``lenient``).
        joined: tool results joined to the user turn before them: a user message holding
            only tool results right after another is one turn (the answers of a fan-out), as
            the Messages API wants it.
        left_out: messages with no content, left out (nothing to show a model).
        line_each: every record came from a line of its own, so ``lines`` can be accounted for.
    """

    lines: int = 0
    records: int = 0
    messages: int = 0
    skipped: int = 0
    joined: int = 0
    left_out: int = 0
    line_each: bool = False

    @classmethod
    def of(cls, ctx: Context, messages: int) -> ReadTally:
        """Return the tally of the parse ``ctx`` recorded, which kept ``messages`` messages."""
        return cls(
            lines=ctx.lines,
            records=ctx.records,
            messages=messages,
            skipped=ctx.skipped,
            joined=ctx.joined,
            left_out=ctx.left_out,
            line_each=ctx.line_each and ctx.records > 0,
        )

    @property
    def other_lines(self) -> int | None:
        """The lines that hold no message of their own, or ``None`` when the lines cannot be
        accounted for (no JSONL lines, or a line that gave more than one record)."""
        if not self.lines or not self.line_each:
            return None
        other = self.lines - self.records - (self.skipped - self._record_skips)
        return other if other >= 0 else None

    @property
    def _record_skips(self) -> int:
        """The skipped messages that were records (found malformed once read)."""
        return self.records - self.messages - self.joined - self.left_out

    def to_json(self) -> dict[str, int | None]:
        """Return the tally as ``run --json`` and ``import --json`` give it (``read``)."""
        return {
            "lines": self.lines or None,
            "records": self.records,
            "messages": self.messages,
            "skipped": self.skipped,
            "tool_results_joined": self.joined,
            "empty_left_out": self.left_out,
            "lines_without_a_message": self.other_lines,
        }

    def describe(self) -> str:
        """Say how the input became the messages, e.g. ``"962 lines: 960 messages, 1 line skipped,
        1 tool result joined to the turn before"``; each figure said only when it is not 0."""

        def many(count: int, one: str, more: str) -> str:
            return f"{count:,} {one if count == 1 else more}"

        other = self.other_lines
        unit = ("line", "lines") if other is not None else ("record", "records")
        total = self.lines if other is not None else self.records + self.skipped - self._record_skips
        parts = [many(self.messages, "message", "messages")]
        if self.skipped:
            parts.append(many(self.skipped, f"{unit[0]} skipped", f"{unit[1]} skipped"))
        if self.joined:
            parts.append(
                many(
                    self.joined,
                    "tool result joined to the turn before",
                    "tool results joined to the turn before",
                )
            )
        if self.left_out:
            parts.append(many(self.left_out, "empty message left out", "empty messages left out"))
        if other:
            parts.append(many(other, "line with no message of its own", "lines with no message of their own"))
        return f"{many(total, *unit)}: {', '.join(parts)}"


#: One source value to convert, with where it came from: ``(value, line, where)``.
Item = tuple[Any, int | None, str | None]


def convert_items(
    items: Iterable[Item], ctx: Context, convert: Callable[[Any], Draft | None]
) -> Iterator[tuple[Any, Draft]]:
    """Yield ``(value, draft)`` for each item that ``convert`` turns into a draft.

    A :class:`Malformed` item is reported through ``ctx`` at its line or place and skipped, and
    so is an item ``convert`` returns ``None`` for; each draft remembers where it came from.
    """
    for value, line, where in items:
        try:
            draft = convert(value)
        except Malformed as err:
            ctx.problem(str(err), line=line, where=where)
            continue
        if draft is not None:
            draft.line, draft.where = line, where
            yield value, draft


# -- JSON helpers ---------------------------------------------------------------------------

#: The deepest a JSONL line or a JSON document may nest (levels of objects and arrays): room
#: for a message whose tool results nest :data:`~compaction.blocks.MAX_BLOCK_DEPTH` deep with
#: blocks of :data:`~compaction.blocks.MAX_JSON_DEPTH`, inside any format's envelope.  Deeper
#: input is refused as it is parsed, so no converter ever walks it.
MAX_RECORD_DEPTH = 2 * MAX_BLOCK_DEPTH + MAX_JSON_DEPTH + 28


#: The deepest a ``tool_use`` block's ``input`` may nest: the block is one level of its JSON.
_INPUT_DEPTH = MAX_JSON_DEPTH - 1


def _too_deep(text: str, value: Any) -> str | None:
    """Return why a parsed JSON ``value`` (from ``text``) nests too deeply, or ``None``."""
    if text.count("{") + text.count("[") <= MAX_RECORD_DEPTH:
        return None  # cannot nest deeper than it has brackets
    if json_depth(value, MAX_RECORD_DEPTH) <= MAX_RECORD_DEPTH:
        return None
    return (
        f"JSON nested more than {MAX_RECORD_DEPTH} levels deep (objects and arrays); at most "
        f"{MAX_RECORD_DEPTH} are read (tool results may nest {MAX_BLOCK_DEPTH} deep, a block's "
        f"JSON {MAX_JSON_DEPTH} levels)"
    )


def _split_lines(text: str | bytes | Iterable[bytes]) -> Iterator[tuple[int, int, str | bytes]]:
    """Yield ``(number, offset, line)`` for each non-empty line of ``text`` as ``text.split("\\n")``
    would number it (from 1), one at a time; ``text`` may also be the lines themselves (bytes
    without their newline).  Empty lines are passed over in C (a run of them costs one
    regex match), so a path of a session cut from it with the other lines blank (``import
    --branches``) costs its own lines, not the file's."""
    if not isinstance(text, (str, bytes)):
        offset = 0
        for number, piece in enumerate(text, 1):
            if piece:
                yield number, offset, piece
            offset += len(piece) + 1
        return
    newline = "\n" if isinstance(text, str) else b"\n"
    newlines: Any = _NEWLINES if isinstance(text, str) else _NEWLINES_BYTES
    start, number = 0, 1
    size = len(text)
    while start <= size:
        run = newlines.match(text, start)
        if run is not None:  # a run of empty lines: passed over at once
            number += run.end() - start
            start = run.end()
            continue
        end = text.find(newline, start)  # type: ignore[arg-type]
        if end < 0:
            if start < size:
                yield number, start, text[start:]
            return
        yield number, start, text[start:end]
        start, number = end + 1, number + 1


_NEWLINES = re.compile("\n+")
_NEWLINES_BYTES = re.compile(b"\n+")


def iter_jsonl(text: str | bytes | Iterable[bytes], ctx: Context) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL text.

    ``text`` is the decoded text, the file's UTF-8 bytes (a leading BOM removed), or its
    lines as bytes without their newline: then each line is decoded on its own, so the
    whole file is never held as one ``str`` (nor, for lines, at all).  A
    line that is not valid JSON, or not a JSON object, is reported through ``ctx``.

    Raises:
        InvalidTranscript: ``text`` is bytes that are not UTF-8 (even when lenient: the
            whole file is refused, as a text that does not decode is), naming the byte.
    """
    loads = json.loads
    for number, offset, raw in _split_lines(text):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InvalidTranscript(
                    f"not UTF-8 text (byte {offset + err.start}: {err.reason}); "
                    "transcripts are UTF-8 JSON, JSONL or Markdown",
                    path=ctx.path,
                ) from err
        else:
            line = raw
        value = read_jsonl_line(number, line, ctx, loads)
        if value is not None:
            yield number, value


def read_jsonl_line(
    number: int, line: str, ctx: Context, loads: Callable[[str], Any] = json.loads
) -> dict[str, Any] | None:
    """Return the JSON object of line ``number`` of a JSONL text, as :func:`iter_jsonl` reads it.

    ``None`` for a blank line, and for one that is not a JSON object (invalid JSON, another
    value, nested past :data:`MAX_RECORD_DEPTH`), which is reported through ``ctx``.

    Raises:
        InvalidTranscript: the line is malformed and ``ctx`` is strict.
    """
    if not line.strip():
        return None
    ctx.lines += 1
    try:
        value = loads(line)
    except json.JSONDecodeError as err:
        ctx.problem(describe_json_error(err, unit="line"), line=number)
        return None
    except RecursionError:
        ctx.problem(
            f"invalid JSON: nested too deeply to parse (more than {MAX_RECORD_DEPTH} levels are refused)",
            line=number,
        )
        return None
    except ValueError as err:  # an integer longer than Python converts
        ctx.problem(f"invalid JSON: {err}", line=number)
        return None
    if not isinstance(value, dict):
        ctx.problem(f"expected a JSON object, found {type(value).__name__} {_clip(value)}", line=number)
        return None
    deep = _too_deep(line, value)
    if deep is not None:
        ctx.problem(deep, line=number)
        return None
    return value


def load_json_document(text: str, ctx: Context) -> Any:
    """Parse a whole-file JSON document; a syntax error is fatal even under lenient parsing."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ctx.error(
            f"{describe_json_error(err)}; the whole file is one JSON document, "
            "so nothing can be skipped: repair the file",
            line=err.lineno,
        ) from err
    except RecursionError as err:
        raise ctx.error(
            f"invalid JSON: nested too deeply to parse (more than {MAX_RECORD_DEPTH} levels are refused)"
        ) from err
    except ValueError as err:  # an integer longer than Python converts
        raise ctx.error(f"invalid JSON: {err}") from err
    deep = _too_deep(text, value)
    if deep is not None:
        raise ctx.error(f"{deep}; the whole file is one JSON document, so nothing can be skipped")
    return value


def first_line_is_object(text: str) -> bool:
    """Return whether the first non-blank line is a complete JSON object (JSONL, not a document)."""
    for line in text.split("\n", 50)[:50]:
        if line.strip():
            try:
                return isinstance(json.loads(line), dict)
            except (ValueError, RecursionError):
                return False
    return False


def _clip(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- block helpers -----------------------------------------------------------------------------


def line_list(lines: Sequence[int], shown: int = 5) -> str:
    """Return where a skipped kind of record was: ``"line 4"``, ``"lines 4, 9, 12"``, or the
    first ``shown`` and a count of the rest (``"lines 1, 2, 3, 4, 5 and 7 more"``)."""
    listed = ", ".join(map(str, lines[:shown]))
    more = f" and {len(lines) - shown} more" if len(lines) > shown else ""
    return f"line{'' if len(lines) == 1 else 's'} {listed}{more}"


def text_blocks(text: Any) -> list[Block]:
    """Return ``[text block]`` for a non-empty string, ``[]`` for an empty one or ``None``."""
    if text is None or text == "":
        return []
    if not isinstance(text, str):
        raise Malformed(f"expected text, found {type(text).__name__} {_clip(text)}")
    return [{"type": "text", "text": text}]


def typed_parts(content: Any, where: str = "content", *, strings: bool = True) -> list[dict[str, Any]]:
    """Return a message's content field as its list of typed parts, for a parser to convert.

    Most transcript formats write content as a string, ``None``, or a list of objects with a
    string ``type`` (some also allow bare strings in the list).  A string is one ``text``
    part (none when empty), ``None`` no part; the parts of a list are returned one for one,
    so a caller's index into the result is the index into ``content``.

    Args:
        content: the content field as read from the transcript.
        where: how errors name the field (``"content"``, ``"messages[3].content"``).
        strings: whether a bare string in the list is a text part (otherwise an error).

    Returns:
        The parts, each a ``dict`` with a string ``type``; the input is not changed.

    Raises:
        Malformed: ``content`` is not a string, ``None`` or a list, or an item is not a part.
    """
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise Malformed(f"{where} must be a string or a list of parts, found {type(content).__name__}")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        if strings and isinstance(part, str):
            parts.append({"type": "text", "text": part})
        elif isinstance(part, dict) and isinstance(part.get("type"), str):
            parts.append(part)
        else:
            expected = "a string or an object" if strings else "an object"
            raise Malformed(
                f"{where}[{index}] must be {expected} with a string 'type', found {type(part).__name__}"
            )
    return parts


def tool_use(call_id: str, name: str, tool_input: dict[str, Any]) -> Block:
    """Return a ``tool_use`` block: a call of the tool ``name`` with ``tool_input``."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def tool_result(call_id: str, content: str | list[Block], is_error: bool = False) -> Block:
    """Return a ``tool_result`` block: the answer to the call ``call_id``."""
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}


def image_from_url(url: Any) -> Block:
    """Return an image block for an image URL.

    A base64 ``data:`` URI becomes inline bytes; an ``http(s)://`` URL (or another ``data:``
    URI) a URL image; anything else (a file path, ``file://``, ``blob:``, ``attachment://``,
    a bucket URI) names an image whose bytes are not in the transcript and that no provider
    can fetch: an image reference (:func:`~compaction.blocks.image_reference_block`), kept
    and shown as a placeholder, never sent as a URL.
    """
    if not isinstance(url, str) or not url:
        raise Malformed(f"an image needs a URL string, found {_clip(url)}")
    if url.startswith("data:"):
        header, sep, payload = url[5:].partition(",")
        if sep and header.endswith(";base64"):
            media_type = header[: -len(";base64")] or "application/octet-stream"
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": payload}}
    elif not url[:8].lower().startswith(("http://", "https://")):
        return image_reference_block(url)
    return {"type": "image", "source": {"type": "url", "url": url}}


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Return tool-call arguments as a dict: JSON text parsed, or ``{"_raw_arguments": text}``.

    The text is kept raw when it is no JSON object, and when it nests deeper than a
    ``tool_use`` block's ``input`` may (:data:`~compaction.blocks.MAX_JSON_DEPTH`, the block
    and its ``input`` key included): the call is kept, its arguments as the text they were.
    """
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            return {"_raw_arguments": arguments}
        if isinstance(value, dict) and json_depth(value, _INPUT_DEPTH) <= _INPUT_DEPTH:
            return value
        return {"_raw_arguments": arguments}
    return {"_raw_arguments": json.dumps(arguments, ensure_ascii=False)}


# -- the shared post-processing ------------------------------------------------------------------


def _is_tool_results_only(draft: Draft) -> bool:
    return (
        draft.role == "user"
        and bool(draft.content)
        and all(block.get("type") == "tool_result" for block in draft.content)
    )


def _merge_tool_result_runs(
    drafts: list[Draft], memo: FinishMemo | None = None, *, in_place: bool = True
) -> list[Draft]:
    """Return ``drafts`` with each run of tool-result-only user drafts merged into one.

    A merged draft is the run's first, changed (``in_place``, a parse's own drafts), or a copy
    of it (:func:`copy_draft`), so the drafts given are left as they are; with ``memo`` (drafts
    that parses share), a run merged before gives the same copy as then."""
    if memo is not None:
        return _merge_remembered(drafts, memo)
    merged: list[Draft] = []
    fresh: set[int] = set()  # the indexes in merged of copies made here (changed in place after)
    for draft in drafts:
        previous = merged[-1] if merged else None
        if previous is not None and _is_tool_results_only(previous) and _is_tool_results_only(draft):
            if not in_place and len(merged) - 1 not in fresh:
                previous = merged[-1] = copy_draft(previous)
                fresh.add(len(merged) - 1)
            previous.content = previous.content + draft.content
            ids = previous.meta.setdefault("source_ids", [previous.source_id])
            ids.append(draft.source_id)
            continue
        merged.append(draft)
    for index, draft in enumerate(merged):
        ids = draft.meta.get("source_ids")
        if ids is not None and not any(ids):
            if not in_place and index not in fresh:
                draft = merged[index] = copy_draft(draft)
            del draft.meta["source_ids"]
    return merged


def _merge_remembered(drafts: list[Draft], memo: FinishMemo) -> list[Draft]:
    """:func:`_merge_tool_result_runs` of ``drafts``, each run merged once: the drafts a run is
    made of (their identities) name its merge in ``memo``."""
    out: list[Draft] = []
    run: list[Draft] = []

    def flush() -> None:
        if len(run) == 1:
            single = run[0]
            ids = single.meta.get("source_ids")
            if ids is not None and not any(ids):
                out.extend(_merge_tool_result_runs(run, in_place=False))  # its copy without source_ids
            else:
                out.append(single)
        elif run:
            key = tuple(id(d) for d in run)
            done = memo.merged.get(key)
            if done is None:
                done = memo.merged[key] = _merge_tool_result_runs(run, in_place=False)[0]
            out.append(done)
        run.clear()

    for draft in drafts:
        if run and not (_is_tool_results_only(run[-1]) and _is_tool_results_only(draft)):
            flush()
        run.append(draft)
    flush()
    return out


def uniquify_tool_ids(drafts: list[Draft], renamed: dict[tuple[Any, ...], Draft] | None = None) -> None:
    """Make tool ids unique within a transcript, consistently on both sides of each pair.

    The first ``tool_use`` with an id keeps it; a later ``tool_use`` reusing it gets
    ``"<id>_2"``, ``"<id>_3"`` ... (skipping any id the transcript already has): the
    separator is inside every request format's id characters, so a valid id stays valid
    (stores imported before hold ``"<id>#2"``; the request's pairing repair sends those
    under a valid id, see :func:`compaction.pairing.renamed_tool_ids`).  A
    ``tool_result`` answers an unanswered use of its id from the latest message that has one,
    the first such use in that message: a sequential reuse (``use, result, use, result``), a
    parallel one (``use, use, result, result``) and a reuse after a call that was never
    answered (an aborted turn, a run's final ``finish``) all pair up the way the source meant.
    Blocks are replaced, never mutated.  With ``renamed`` (drafts that parses share), a draft
    whose blocks change is replaced in ``drafts`` by a copy, the same one as before when it was
    renamed the same way (its identity and new ids); without, it is changed.
    """
    taken = {
        block["id"]
        for draft in drafts
        for block in draft.content
        if block.get("type") == "tool_use" and isinstance(block.get("id"), str)
    }
    uses: dict[str, int] = {}
    unanswered: dict[str, list[tuple[int, str]]] = {}  # original id -> [(draft index, new id)]
    latest: dict[str, str] = {}
    for position, draft in enumerate(drafts):
        changed = False
        content = list(draft.content)
        for index, block in enumerate(content):
            kind = block.get("type")
            if kind == "tool_use":
                original = block["id"]
                count = uses.get(original, 0) + 1
                uses[original] = count
                new_id = original
                if count > 1:
                    suffix = count
                    new_id = f"{original}_{suffix}"
                    while new_id in taken:
                        suffix += 1
                        new_id = f"{original}_{suffix}"
                    taken.add(new_id)
                    content[index] = {**block, "id": new_id}
                    changed = True
                unanswered.setdefault(original, []).append((position, new_id))
                latest[original] = new_id
            elif kind == "tool_result":
                original = block["tool_use_id"]
                waiting = unanswered.get(original)
                if waiting:
                    newest = waiting[-1][0]
                    first = len(waiting) - 1
                    while first > 0 and waiting[first - 1][0] == newest:
                        first -= 1
                    target: str = waiting.pop(first)[1]
                else:
                    target = latest[original] if original in latest else str(original)
                if target != original:
                    content[index] = {**block, "tool_use_id": target}
                    changed = True
        if changed:
            if renamed is None:
                draft.content = content  # a parse's own draft
                continue
            key = (
                id(draft),
                *(
                    (block.get("id"), block.get("tool_use_id")) if block is not original_block else None
                    for block, original_block in zip(content, draft.content, strict=True)
                ),
            )
            copy = renamed.get(key)
            if copy is None:
                copy = renamed[key] = dataclasses.replace(draft, content=content)
            drafts[position] = copy


def _check_images(blocks: list[Block], where: str) -> None:
    """Raise :class:`InvalidMessage` for an image block (nested ones included) whose data is not base64."""
    for index, block in enumerate(blocks):
        if block.get("type") == "image":
            try:
                info_from_block(block)
            except ImageError as err:
                raise InvalidMessage(f"{where}[{index}]: {err}") from err
        elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            _check_images(block["content"], f"{where}[{index}].content")


class FinishMemo:
    """What :func:`finish` worked out for drafts it has seen, for parses that share drafts.

    ``compaction import --branches`` finishes each path of a session from drafts most of
    which an earlier path shared (:class:`~compaction.formats.claude_code.SessionReader`
    forks): a draft seen before is not validated again, and one that comes out unchanged
    (not merged, no tool id renamed) is the same :class:`~compaction.blocks.Message` as
    before, not a new one.  Drafts are known by identity, and the memo holds each one it
    knows, so an identity is never reused while it lives; a draft must not change after
    it is first finished (the reader copies one before changing it).
    """

    def __init__(self) -> None:
        self.checked: dict[int, tuple[Draft, str | None]] = {}  # id -> (draft, why it is malformed)
        self.made: dict[int, tuple[Draft, Message]] = {}  # id -> (draft, its message)
        self.merged: dict[tuple[int, ...], Draft] = {}  # the ids of a run's drafts -> their merge
        self.renamed: dict[tuple[Any, ...], Draft] = {}  # a draft's id and its renamed tool ids -> the copy

    def problem(self, draft: Draft) -> str | None:
        """Return why ``draft``'s blocks are malformed (``None``: they are not), checked once."""
        known = self.checked.get(id(draft))
        if known is not None:
            return known[1]
        why = _malformed(draft)
        self.checked[id(draft)] = (draft, why)
        return why

    def message(self, draft: Draft) -> Message:
        """Return the message of ``draft``, made once."""
        known = self.made.get(id(draft))
        if known is not None:
            return known[1]
        message = _message(draft)
        self.made[id(draft)] = (draft, message)
        return message


def _malformed(draft: Draft) -> str | None:
    """Why a draft's blocks are malformed (as :func:`finish` reports it), or ``None``."""
    try:
        for index, block in enumerate(draft.content):
            validate_block(block, where=f"content[{index}]")
        _check_images(draft.content, "content")
    except InvalidMessage as err:
        return f"malformed {draft.role} message: {err}"
    return None


def _message(draft: Draft) -> Message:
    return Message(role=draft.role, content=tuple(draft.content), source_id=draft.source_id, meta=draft.meta)


def finish(drafts: list[Draft], ctx: Context, memo: FinishMemo | None = None) -> list[Message]:
    """Validate, drop empty drafts (with a note saying so), merge tool-result runs, uniquify tool ids, build messages.

    With ``memo`` (drafts that parses share), the drafts given are not changed (one that
    changes is copied), and a draft seen before is not checked or made into a message again
    (see :class:`FinishMemo`); without, a merged or renamed draft is changed in place.

    Raises:
        InvalidTranscript: a draft is malformed and ``ctx`` is strict.
    """
    valid: list[Draft] = []
    empty: list[Draft] = []
    for draft in drafts:
        if not draft.content:
            empty.append(draft)
            continue
        why = memo.problem(draft) if memo is not None else _malformed(draft)
        if why is not None:
            ctx.problem(why, line=draft.line, where=draft.where)
            ctx.draft_skipped += 1
            continue
        valid.append(draft)
    if empty:
        ctx.note(empty_note(empty))
    lines = {draft.line for draft in drafts}
    ctx.line_each = ctx.line_each and None not in lines and len(lines) == len(drafts)
    ctx.records += len(drafts)
    ctx.left_out += len(empty)
    before = len(valid)
    valid = _merge_tool_result_runs(valid, memo)
    ctx.joined += before - len(valid)
    uniquify_tool_ids(valid, memo.renamed if memo is not None else None)
    if memo is None:
        return [_message(draft) for draft in valid]
    return [memo.message(draft) for draft in valid]


def empty_note(empty: Sequence[Draft]) -> str:
    """Say which messages were left out for holding nothing (one note for them all).

    A message with no content block (an assistant's ``content`` null or empty and no tool
    call, an empty user turn) has nothing a model could be shown, and a request format
    refuses an empty message, so it is not stored; the note counts them by role and names
    where they were (up to 10), so nothing is dropped without a word.
    """
    roles: dict[str, int] = {}
    for draft in empty:
        roles[draft.role] = roles.get(draft.role, 0) + 1
    kinds = ", ".join(f"{count} {role}" for role, count in roles.items())
    places = [f"line {d.line}" if d.line is not None else (d.where or "?") for d in empty[:10]]
    more = ", ..." if len(empty) > 10 else ""
    plural = "s" if len(empty) != 1 else ""
    return (
        f"{len(empty)} message{plural} with no content left out ({kinds}: content null or empty and no tool "
        f"calls, nothing to show a model; {', '.join(places)}{more})"
    )


#: Block types the parsers make on purpose beside the known ones: the request formats drop
#: them by rule (``dropped_block_types``), so they are no unknown content.
_HANDLED_BLOCK_TYPES = KNOWN_BLOCK_TYPES | {"encrypted_reasoning"}


def unknown_block_counts(messages: Iterable[Message]) -> dict[str, int]:
    """Return how many blocks of each unknown type ``messages`` hold, tool-result contents included.

    An unknown block is one whose type is none of :data:`~compaction.blocks.KNOWN_BLOCK_TYPES`
    (nor ``encrypted_reasoning``, which every request format drops by rule): it is kept
    verbatim and rendered by the loud default rule, so the import reports it.  The counts are
    ordered by count (largest first), then type.
    """
    counts: dict[str, int] = {}
    stack: list[Any] = [block for message in messages for block in message.content]
    while stack:
        block = stack.pop()
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result" and isinstance(block.get("content"), list):
            stack.extend(block["content"])
        elif kind not in _HANDLED_BLOCK_TYPES:
            name = kind if isinstance(kind, str) else repr(kind)
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda pair: (-pair[1], pair[0])))
