"""Import a package's public names on first use (PEP 562), so importing the package is cheap."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, homes: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """Return a module ``__getattr__`` that imports each name of ``homes`` from its module when first used.

    Args:
        package: the package's ``__name__``; error messages name it.
        homes: public name -> the module that defines it, relative to ``package`` (``".store"``).
        namespace: the package's ``globals()``; a name, once imported, is kept there, so later
            uses are plain attribute reads.

    Returns:
        The function to bind as the package's ``__getattr__``; it raises ``AttributeError``
        for a name not in ``homes``, as a module without it would.
    """

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home, package), name)
        namespace[name] = value
        return value

    return __getattr__
