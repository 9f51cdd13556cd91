"""The estimator's code space and its per-encoding weight tables, shipped as package data.

A weight table is ``N_CODES * N_CODES`` signed 32-bit integers, ``W[previous * N_CODES +
current]``, the cost in units of ``2 ** -SCALE_BITS`` tokens of the code ``current`` following
the code ``previous`` (see :mod:`compaction.tokens._estimate_py` for the codes).  Each table is
stored little-endian and gzipped as ``compaction/tokens/data/estimator-<encoding>.i32.gz``; its
sha256 (of the un-gzipped bytes) is recorded in the generated module
:mod:`compaction.tokens.estimator_fit`, beside the error measured when it was fitted.
Both are written by ``scripts/fit_estimator.py``.
"""

from __future__ import annotations

import array
import gzip
import hashlib
import sys
import threading
import zlib
from importlib import resources

from ..errors import EncodingDataMissing
from .estimator_fit import FORMAT, TABLE_SHA256

__all__ = ["N_CODES", "BOUNDARY", "CLASS_BASE", "REPEAT_BASE", "SCALE_BITS", "LETTER_CODES", "weight_table",
           "table_filename"]

CLASS_BASE = 128  # a non-ASCII character: CLASS_BASE + its class
REPEAT_BASE = 144  # a non-ASCII character repeating the one before it: REPEAT_BASE + its class
BOUNDARY = 160  # before the first and after the last character
N_CODES = 161
SCALE_BITS = 16  # weights are in units of 2 ** -16 tokens
LATIN = 8  # the class of two-byte letters (Latin accents, Greek, Cyrillic, Hebrew, Arabic...)
#: The codes of letters: a run of them is at least one token (a piece of its own to both
#: pre-tokenizers), whatever the weights say.
LETTER_CODES = frozenset([*range(65, 91), *range(97, 123), CLASS_BASE + LATIN, REPEAT_BASE + LATIN])
FORMAT_NAME = f"pairs-{N_CODES}-i32le-q{SCALE_BITS}"

_lock = threading.Lock()
_tables: dict[str, array.array[int]] = {}


def table_filename(encoding: str) -> str:
    """Return the file name of ``encoding``'s weight table under ``compaction/tokens/data``."""
    return f"estimator-{encoding}.i32.gz"


def weight_table(encoding: str) -> array.array[int]:
    """Return the weight table of ``encoding``: an ``array('i')`` of ``N_CODES ** 2`` weights.

    The array is shared and cached for the process; do not modify it.

    Raises:
        EncodingDataMissing: no table for ``encoding``, its file is missing from the installed
            package, or it does not match the recorded size, format or sha256.
    """
    table = _tables.get(encoding)
    if table is not None:
        return table
    with _lock:
        if encoding in _tables:
            return _tables[encoding]
        if FORMAT != FORMAT_NAME:
            raise EncodingDataMissing(
                f"compaction.tokens.estimator_fit describes tables of format {FORMAT!r}, "
                f"this code reads {FORMAT_NAME!r}; run scripts/fit_estimator.py to refit them"
            )
        expected = TABLE_SHA256.get(encoding)
        if expected is None:
            known = ", ".join(sorted(TABLE_SHA256))
            raise EncodingDataMissing(f"no estimator table for encoding {encoding!r}; expected one of: {known}")
        name = table_filename(encoding)
        try:
            packed = resources.files(__package__).joinpath("data").joinpath(name).read_bytes()
        except (FileNotFoundError, OSError) as err:
            raise EncodingDataMissing(
                f"the estimator table {name} of encoding {encoding!r} is missing from the installed "
                f"package (compaction/tokens/data/); reinstall compaction"
            ) from err
        try:
            raw = gzip.decompress(packed)
        except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
            raise EncodingDataMissing(
                f"the estimator table {name} of encoding {encoding!r} is not a readable gzip file "
                f"({err}); the package data is corrupt, reinstall compaction"
            ) from err
        digest = hashlib.sha256(raw).hexdigest()
        if digest != expected or len(raw) != 4 * N_CODES * N_CODES:
            raise EncodingDataMissing(
                f"the estimator table {name} of encoding {encoding!r} has sha256 {digest} and "
                f"{len(raw)} bytes, expected {expected} and {4 * N_CODES * N_CODES}; "
                f"the package data is corrupt, reinstall compaction"
            )
        table = array.array("i")
        if table.itemsize != 4:  # pragma: no cover - every CPython platform has a 32-bit C int
            raise EncodingDataMissing("this platform has no 32-bit array type for the estimator tables")
        table.frombytes(raw)
        if sys.byteorder == "big":  # pragma: no cover - stored little-endian
            table.byteswap()
        _tables[encoding] = table
        return table
