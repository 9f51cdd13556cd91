"""Estimate token counts without tokenizing: picks the compiled estimator or its pure-Python twin.

``COMPACTION_NO_EXTENSIONS`` set to anything but ``""`` or ``"0"``, or an interpreter other
than CPython, selects the pure-Python twin; otherwise the compiled module is used, falling
back to pure Python only when it is not built.  ``IMPLEMENTATION`` says which one is active.
"""

from __future__ import annotations

import os
import platform

__all__ = ["estimate_tokens", "pair_counts", "IMPLEMENTATION"]

if os.environ.get("COMPACTION_NO_EXTENSIONS", "") not in ("", "0") or (
    platform.python_implementation() != "CPython"
):
    from ._estimate_py import estimate_tokens, pair_counts

    IMPLEMENTATION = "py"
else:
    try:
        from ._estimate_c import estimate_tokens, pair_counts  # type: ignore[no-redef, import-not-found, unused-ignore]

        IMPLEMENTATION = "c"
    except ImportError:
        from ._estimate_py import estimate_tokens, pair_counts

        IMPLEMENTATION = "py"
