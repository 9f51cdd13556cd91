"""What a path names when it is no regular file: a pipe, a device or a socket.

A transcript, recipe, tool list or content file is read to its end, and a transcript more
than once (its head to detect the format, then the whole), so a named pipe loses what the
first read took and blocks when its writer is gone, and a device such as ``/dev/zero`` never
ends: each is refused before it is opened, in one line that says what it is.
"""

from __future__ import annotations

import os
import stat

__all__ = ["special_file_kind", "special_file_problem"]

_KINDS = (
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file_kind(path: str | os.PathLike[str]) -> str | None:
    """Return what ``path`` is when it exists and is neither a regular file nor a directory.

    Returns:
        ``"a pipe (FIFO)"``, ``"a character device"``, ``"a block device"`` or ``"a socket"``;
        ``None`` for a regular file, a directory, or a path ``os.stat`` cannot read (missing,
        no permission): opening it then fails with the usual error.

    Example:
        >>> special_file_kind("/dev/zero"), special_file_kind("/")
        ('a character device', None)
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), None)


def special_file_problem(path: str | os.PathLike[str], what: str) -> str | None:
    """Return the one-line refusal of ``path`` as ``what`` (a transcript, a recipe...), or ``None``.

    Example:
        >>> special_file_problem("/dev/zero", "a recipe")
        '/dev/zero is a character device, not a regular file: a recipe is read from a file; save it to one first'
    """
    kind = special_file_kind(path)
    if kind is None:
        return None
    return (
        f"{os.fspath(path)} is {kind}, not a regular file: {what} is read from a file; save it to one first"
    )
