"""What a model name may hold: the check ``--model`` and a recipe's ``model`` share.

A model name ships as it is in every compiled request's ``model`` field (and picks the image
pricing family and the prefill policy), so a name no provider's model has is refused where it
is given: one with a character that does not print (a line break, a tab, a terminal escape, a
zero-width space or another invisible one).
"""

from __future__ import annotations

__all__ = ["model_name_problem", "shown_model_name"]

#: How many characters of a refused name an error message shows.
_SHOWN = 80


def model_name_problem(name: str) -> str | None:
    """Return what is wrong with model name ``name`` as a phrase, or ``None`` when it may be used.

    Checks that every character prints (``str.isprintable``, which the space passes).  A blank
    name is the caller's check (each says it in its own words).

    Args:
        name: the model name.

    Returns:
        ``"a character that does not print ('\\n') at position 6"`` (0-based), or ``None``.
    """
    if not name.isprintable():
        where = next(index for index, char in enumerate(name) if not char.isprintable())
        return f"a character that does not print ({name[where]!r}) at position {where}"
    return None


def shown_model_name(name: str) -> str:
    """Return ``name`` as an error message shows it: its ``repr``, cut to 80 characters and ``...``."""
    return f"{name[:_SHOWN]!r}{'...' if len(name) > _SHOWN else ''}"
