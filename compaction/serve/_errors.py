"""The proxy's errors: each carries the HTTP status the client gets and a short error code.

They derive from :class:`~compaction.errors.CompactionError` (and the natural built-in), so
``except CompactionError`` catches them as it catches the library's.
"""

from __future__ import annotations

from ..errors import CompactionError

__all__ = ["ServeError", "BadRequest", "ConversationConflict", "UpstreamError", "UpstreamTimeout"]


class ServeError(CompactionError):
    """A request the proxy answers with an error of its own (not the upstream's).

    Attributes:
        status: the HTTP status sent to the client.
        code: a short machine-readable code (``bad_request``, ``upstream_timeout``...).
    """

    status = 500
    code = "proxy_error"


class BadRequest(ValueError, ServeError):
    """The client's request is malformed or too large (HTTP 400, or 413 when ``status`` says so)."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, status: int = 400, code: str = "bad_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class ConversationConflict(RuntimeError, ServeError):
    """The conversation cannot take the request (too many forks, changing under it): HTTP 409."""

    status = 409
    code = "conversation_conflict"


class UpstreamError(RuntimeError, ServeError):
    """The upstream could not be reached or answered something unusable: HTTP 502."""

    status = 502
    code = "bad_upstream"

    def __init__(self, message: str, *, code: str = "bad_upstream") -> None:
        super().__init__(message)
        self.code = code


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer in time: HTTP 504."""

    status = 504

    def __init__(self, message: str) -> None:
        super().__init__(message, code="upstream_timeout")
