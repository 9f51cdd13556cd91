"""Build the Cython extensions under ``_speedups/``; all metadata lives in ``pyproject.toml``.

``COMPACTION_NO_EXTENSIONS=1 pip install .`` skips the extensions and installs the pure-Python
package (the dispatchers then select the ``_py`` twins).  Otherwise a failed compile fails the
build: there is no silent fallback at build time.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent

# Directives for every extension, in one place.  boundscheck/wraparound are off: every index in
# the kernels is a loop counter below the length of the buffer it indexes, or a pair of codes
# ``previous * N_CODES + current`` with both codes below N_CODES (187).
COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
    "embedsignature": True,
    # annotations are documentation, as in the pure-Python twins (same errors for wrong types)
    "annotation_typing": False,
}

# _speedups/<name>.pyx -> compaction.tokens.<name>
EXTENSION_PACKAGE = "compaction.tokens"


def _no_extensions() -> bool:
    value = os.environ.get("COMPACTION_NO_EXTENSIONS", "")
    return value not in ("", "0")


def _extensions() -> list:
    if _no_extensions():
        return []
    from Cython.Build import cythonize
    from setuptools import Extension

    sources = sorted((HERE / "_speedups").glob("*.pyx"))
    extensions = [
        Extension(
            f"{EXTENSION_PACKAGE}.{path.stem}",
            [str(path.relative_to(HERE))],
            extra_compile_args=["-O3"] if os.name != "nt" else ["/O2"],
        )
        for path in sources
    ]
    return cythonize(extensions, compiler_directives=COMPILER_DIRECTIVES, quiet=True)


setup(ext_modules=_extensions())
