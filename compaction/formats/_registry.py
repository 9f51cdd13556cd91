"""The registry of transcript formats: lookup by name and detection from the content.

Each format module offers a :class:`~compaction.formats._sniff.TranscriptFormat` named
``FORMAT``; :data:`_MODULES` lists the modules, one a line, so adding a format is a new module
and one line here.  Everything else comes from that list: the names users may pass as
``--format`` (in the listed order), the lookup of a name and detection.

Detection never looks at the file name.  Binary content and empty files are no transcript.
Otherwise the formats are asked in priority order (:data:`REGISTRY`) whether a sample of the
content is theirs, first with the head of the file alone (64 KiB, and on to the end of the
first line when that line opens a JSON object, so a JSONL record is never cut); only when none
claims it and the head starts like a JSON document is the whole file read, parsed and offered
to them again (a JSON array pretty-printed past the head).  A document that then does not
parse, and that no format claims, is reported as damaged JSON (where, and which format the part
before the damage looks like), not as an unknown format.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import import_module

from ..errors import InvalidTranscript, UnknownFormat
from ._common import MAX_RECORD_DEPTH
from ._json_damage import describe, repaired_prefix
from ._sniff import Sample, TranscriptFormat, looks_binary, wide_encoding

__all__ = ["FORMATS", "REGISTRY", "detect", "format_named"]

#: The modules of the transcript formats, in the order their names are listed to users.
_MODULES = (
    "openai",
    "anthropic",
    "pi",
    "claude_code",
    "codex",
    "agent_tars",
    "swe_agent",
    "openhands",
    "aider",
    "trajectory",
    "gemini_cli",
    "inspect_ai",
    "craft_agents",
    "openai_responses",
    "langchain",
    "cline",
)


def _offered_by(module_name: str) -> TranscriptFormat:
    offered = getattr(import_module(f"{__package__}.{module_name}"), "FORMAT", None)
    if not isinstance(offered, TranscriptFormat):
        raise TypeError(f"{__package__}.{module_name} must define FORMAT, a TranscriptFormat")
    return offered


_LISTED = tuple(_offered_by(name) for name in _MODULES)

#: The formats in the order detection asks them: highest priority first.
REGISTRY: tuple[TranscriptFormat, ...] = tuple(sorted(_LISTED, key=lambda fmt: -fmt.priority))

#: The names of the formats :func:`~compaction.formats.load_transcript` reads.
FORMATS: tuple[str, ...] = tuple(fmt.name for fmt in _LISTED)

_BY_NAME = {fmt.name: fmt for fmt in _LISTED}


def format_named(name: str, path: str | None = None) -> TranscriptFormat:
    """Return the registered format called ``name``.

    Args:
        name: a format name, as given to ``--format``.
        path: the file it is meant for, named in the error.

    Returns:
        The format.

    Raises:
        UnknownFormat: no format has that name; the message lists the names.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownFormat(
            f"unknown format {name!r}; expected one of: {', '.join(FORMATS)}", path=path
        ) from None


def _unknown(path: str | None, why: str) -> UnknownFormat:
    return UnknownFormat(
        f"cannot tell the transcript format ({why}); expected one of: {', '.join(FORMATS)}; "
        "name the format with --format (format= in Python) if the file is one of them",
        path=path,
    )


def _damaged(path: str | None, err: json.JSONDecodeError) -> InvalidTranscript:
    """Return the error for a file that starts like one JSON document and is not valid JSON.

    It names the file, the line and column where the JSON breaks (and whether the file just ends
    early) and, when the part before the damage is claimed by a format, that format: nothing
    else claims a damaged document, so without this the user would hear only that the format is
    unknown.
    """
    repaired = repaired_prefix(err.doc, err.pos)
    looks = _claimant(Sample(repaired, lambda: repaired)) if repaired is not None else None
    guess = f"; up to there it reads as {looks.name!r}" if looks is not None else ""
    return InvalidTranscript(
        f"{describe(err)}{guess}; the whole file is one JSON document, so nothing can be skipped: "
        "repair the file",
        path=path,
        line=err.lineno,
    )


def wide_text(encoding: str) -> str:
    """Say that a file is ``encoding`` (UTF-16 or UTF-32) text and how to make it UTF-8."""
    return f"the file is {encoding} text, not UTF-8: convert it with iconv -f {encoding} -t UTF-8"


def _unreadable_text(why: str) -> str:
    """Say why a JSON document could not be parsed (``why``: :attr:`Sample.unreadable`)."""
    if why == "nested too deeply":
        return f"it is one JSON document nested too deeply to parse: more than {MAX_RECORD_DEPTH} levels are refused"
    return f"it is one JSON document that cannot be parsed: {why}"


def _more_than_one(path: str | None, err: json.JSONDecodeError) -> InvalidTranscript:
    """Return the error for a file holding a complete JSON value and then more (``Extra data``:
    another document, or garbage after the first), naming where the extra starts and the format
    the first value reads as, when one claims it: it was called an unknown format."""
    first = err.doc[: err.pos]
    looks = _claimant(Sample(first, lambda: first))
    guess = f"; the first reads as {looks.name!r}" if looks is not None else ""
    return InvalidTranscript(
        f"invalid JSON: more than one JSON value (after the first, more starts at line {err.lineno}, "
        f"column {err.colno}){guess}; a transcript is one JSON document, or JSONL with one object a line: "
        "repair the file",
        path=path,
        line=err.lineno,
    )


def _claimant(sample: Sample) -> TranscriptFormat | None:
    return next((fmt for fmt in REGISTRY if fmt.sniff(sample)), None)


def detect(head: bytes, path: str | None, whole: Callable[[], str] | None = None) -> TranscriptFormat:
    """Return the format whose sniffer claims the content, asking in priority order.

    Args:
        head: the first bytes of the file (64 KiB, through the end of a first line that opens a
            JSON object).
        path: the file, named in errors (``None`` for in-memory content).
        whole: reads the whole file as text, for when the head alone does not tell; ``None``
            decides from the head alone.

    Returns:
        The first format in :data:`REGISTRY` that claims the content.

    Raises:
        UnknownFormat: the content is empty or binary, or no format claims it; the message
            names the file and lists the formats.
        UnknownFormat: (an :class:`InvalidTranscript`) also when the content is UTF-16 or
            UTF-32 text (the message says so and how to convert it), or one JSON document that
            cannot be parsed (nested too deeply, a number too long; the message says which).
        InvalidTranscript: ``whole`` could not read the file (it is not UTF-8); or the content
            starts like one JSON document, no format claims it and it is not valid JSON (cut
            short, or broken in the middle): the message names the file, the line and column,
            and the format the part before the damage looks like, when one claims it.
    """
    if not head.strip():
        raise _unknown(path, "the file is empty")
    wide = wide_encoding(head)
    if wide is not None:
        raise _unknown(path, wide_text(wide))
    if looks_binary(head):
        raise _unknown(path, "the content is binary, not text")
    sample = Sample(head.decode("utf-8-sig", errors="replace"))
    found = _claimant(sample)
    if found is None and whole is not None and sample.looks_json:
        read = Sample(sample.head, whole)
        found = _claimant(read)
        if found is None and read.damage is not None and not read.records:
            if read.damage.msg == "Extra data":
                raise _more_than_one(path, read.damage)
            raise _damaged(path, read.damage)
        if found is None and read.unreadable is not None and not read.records:
            raise _unknown(path, _unreadable_text(read.unreadable))
    if found is None:
        raise _unknown(path, "the content matches none of them")
    return found
