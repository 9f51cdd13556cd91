"""What a model name may hold: the check ``--model`` and a recipe's ``model`` share.

A model name ships as it is in every compiled request's ``model`` field (and picks the image
pricing family and the prefill policy), so a name no provider's model has is refused where it
is given: one with a character that does not print (a line break, a tab, a terminal escape, a
zero-width space or another invisible one), or one longer than :data:`MAX_MODEL_NAME_CHARS`.
"""

from __future__ import annotations

__all__ = ["MAX_MODEL_NAME_CHARS", "model_name_problem", "shown_model_name"]

#: The longest model name taken (characters).  Provider model ids are far shorter (a dated id
#: such as ``us.anthropic.claude-3-7-sonnet-20250219-v1:0`` is 45; a whole Bedrock inference
#: profile ARN about 110); 256 leaves room for a local server's path-like name.
MAX_MODEL_NAME_CHARS = 256

#: How many characters of a refused name an error message shows.
_SHOWN = 80


def model_name_problem(name: str) -> str | None:
    """Return what is wrong with model name ``name`` as a phrase, or ``None`` when it may be used.

    Checks, in order: at most :data:`MAX_MODEL_NAME_CHARS` characters; every character prints
    (``str.isprintable``, which the space passes).  A blank name is the caller's check (each
    says it in its own words).

    Args:
        name: the model name.

    Returns:
        ``"a name of 10,240 characters; at most 256 are taken"`` or ``"a character that does not
        print ('\\n') at position 6"`` (0-based), or ``None``.
    """
    if len(name) > MAX_MODEL_NAME_CHARS:
        return f"a name of {len(name):,} characters; at most {MAX_MODEL_NAME_CHARS} are taken"
    if not name.isprintable():
        where = next(index for index, char in enumerate(name) if not char.isprintable())
        return f"a character that does not print ({name[where]!r}) at position {where}"
    return None


def shown_model_name(name: str) -> str:
    """Return ``name`` as an error message shows it: its ``repr``, cut to 80 characters and ``...``."""
    return f"{name[:_SHOWN]!r}{'...' if len(name) > _SHOWN else ''}"
