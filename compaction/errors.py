"""One exceptions module for the whole package.

Every error the library raises derives from :class:`CompactionError`; each leaf also
inherits the natural built-in (``ValueError``, ``LookupError``, ``RuntimeError``) so that
callers can catch either kind.  Messages say what was expected, what was found and what
to do about it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .types import Stage

__all__ = [
    "CompactionError",
    "InvalidTranscript",
    "TranscriptUnreadable",
    "UnknownFormat",
    "InvalidMessage",
    "StoreError",
    "EncodingDataMissing",
    "OverBudget",
    "InvariantViolation",
    "RecipeError",
    "SummarizerError",
    "ImageError",
    "SummarizerUnavailable",
    "SummarizerRefused",
    "InvalidArgument",
    "AssistantPrefillRefused",
]


class CompactionError(Exception):
    """Base of every error raised by :mod:`compaction`."""


class InvalidTranscript(ValueError, CompactionError):
    """A transcript file, line or message could not be parsed.

    Attributes:
        path: the file, or ``None`` for in-memory input.
        line: the 1-based line number (JSONL) or message index, if known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class TranscriptUnreadable(InvalidTranscript, OSError):
    """The transcript file cannot be read at all (missing, a directory, no permission).

    Both an :class:`InvalidTranscript` (so a :class:`CompactionError`) and an ``OSError``,
    so either kind of ``except`` catches it.
    """


class UnknownFormat(InvalidTranscript):
    """The transcript format could not be detected; pass ``--format`` explicitly."""


class InvalidArgument(TypeError, CompactionError):
    """A public function was called with an argument of the wrong type.

    The message names the argument, the type expected and the value found, e.g.
    ``budget must be an integer number of tokens; found str '100'``.
    """


class InvalidMessage(ValueError, CompactionError):
    """A message or content block does not have the expected shape."""


class StoreError(RuntimeError, CompactionError):
    """The SQLite store could not be opened, read or written."""


class EncodingDataMissing(LookupError, CompactionError):
    """The BPE rank file of an encoding is missing from the package or fails its sha256 check."""


class OverBudget(ValueError, CompactionError):
    """Even the smallest rendering allowed does not fit the token budget.

    Attributes:
        stage: which part could not shrink: ``"live window"`` (the newest message), ``"unsummarized tail"``,
            ``"summaries"`` (pinned messages and the coarsest summaries alone), ``"request"``, ``"settings"``.
        budget: the token budget asked for (tokens).
        needed: the tokens the part that cannot shrink needs on its own.
    """

    def __init__(self, message: str, *, stage: Stage, budget: int, needed: int) -> None:
        super().__init__(message)
        self.stage = stage
        self.budget = budget
        self.needed = needed


class InvariantViolation(AssertionError, CompactionError):
    """A request about to ship breaks coverage, tool pairing, the budget or an image cap.

    This is a bug in the engine, never a user error: it is raised instead of shipping.
    """


class AssistantPrefillRefused(ValueError, CompactionError):
    """The request would end on an assistant turn, which its model (or the recipe) refuses.

    A request whose last message is the assistant's asks the model to continue that turn (a
    prefill); Claude 4.6 models refuse it with HTTP 400 ("This model does not support
    assistant message prefill. The conversation must end with a user message.").  Compile
    never invents a user turn: it raises this instead (see :mod:`compaction.prefill`).

    Attributes:
        model: the model the request names.
        seq: the store seq of the assistant message the request would end on.
    """

    def __init__(self, message: str, *, model: str, seq: int) -> None:
        super().__init__(message)
        self.model = model
        self.seq = seq


class RecipeError(ValueError, CompactionError):
    """A recipe (configuration) file or setting is invalid; the message names file and key."""


class SummarizerError(RuntimeError, CompactionError):
    """A summarizer failed to produce an acceptable summary."""


class ImageError(ValueError, CompactionError):
    """An image block is malformed (bad base64, unknown media type, unreadable header)."""


class SummarizerUnavailable(SummarizerError):
    """The summarizer could not be reached or kept failing transiently after every retry.

    Timeouts, connection errors, HTTP 429 and 5xx were retried with backoff (honouring
    ``Retry-After``) until the retries ran out; the chunk stays raw and a later tick tries
    again.

    Attributes:
        attempts: the requests made, the first one included.
    """

    def __init__(self, message: str, *, attempts: int = 0) -> None:
        super().__init__(message)
        self.attempts = attempts


class SummarizerRefused(SummarizerError):
    """The summarizer refused this request: too long, unsupported content, or no usable answer.

    Raised for a context-length or unsupported-content error (HTTP 400/413/422), a refusal
    (``message.refusal`` or ``finish_reason = "content_filter"``), an empty answer or a
    truncated one (``finish_reason = "length"``).  The compactor answers by splitting the
    chunk in halves and stitching; it never stores the reason as a summary.

    Attributes:
        code: the server's error code or the finish reason (``"context_length_exceeded"``,
            ``"image_input_not_supported"``, ``"length"``, ...), if known.
        status: the HTTP status, if the refusal came as an HTTP error.
    """

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def found(value: object, limit: int = 40) -> str:
    """Return ``value`` described for an error message: its type and a clipped repr.

    Example:
        >>> found("100")
        "str '100'"
    """
    shown = repr(value)
    if len(shown) > limit:
        shown = shown[: limit - 3] + "..."
    return f"{type(value).__name__} {shown}"
