"""The focus instruction of a compaction: checked, bounded, scrubbed, then added to every prompt.

A focus (recipe ``summary_focus``, ``compaction compress --focus``) says what summaries
should keep first, as pi's ``/compact [instructions]`` and Anthropic's ``instructions`` do.
It is sent to the summarizer in every L1 and merge prompt (``Focus: …``), so it is held to
:data:`MAX_FOCUS_CHARS` characters, put on one line, and scrubbed like everything else that
leaves the machine: a word that looks like an API key or token is replaced by ``[redacted]``,
and so is any run of 8+ characters of the key ``api_key`` (:func:`~._secrets.scrub_key`).
"""

from __future__ import annotations

from ..errors import RecipeError
from ..recipe import _looks_like_secret
from ._secrets import REDACTED, clean_text, scrub_key

__all__ = ["MAX_FOCUS_CHARS", "focus_text"]

#: The longest focus instruction accepted (characters): an instruction, not a document.
MAX_FOCUS_CHARS = 2000


def focus_text(focus: str | None, api_key: str | None = None) -> str | None:
    """Return ``focus`` ready to send: one line, secrets redacted; ``None`` when empty.

    Args:
        focus: the instruction (``None`` or blank: no focus).
        api_key: a key to scrub from it (the summarizer's), if any.

    Returns:
        The instruction on one line (whitespace collapsed), with every word that looks like
        an API key or token, and every run of 8+ characters of ``api_key``, replaced by
        ``[redacted]``; ``None`` for no focus.

    Raises:
        RecipeError: ``focus`` is not a string, or is longer than :data:`MAX_FOCUS_CHARS`
            characters.

    Example:
        >>> focus_text("  keep the   migration plan ")
        'keep the migration plan'
    """
    if focus is None:
        return None
    if not isinstance(focus, str):
        raise RecipeError(f"summary_focus: expected a string, found {type(focus).__name__}")
    if len(focus) > MAX_FOCUS_CHARS:
        raise RecipeError(
            f"summary_focus: the focus is {len(focus):,} characters, over the limit of "
            f"{MAX_FOCUS_CHARS:,}; say in a sentence or two what summaries should keep"
        )
    words = [REDACTED if _looks_like_secret(word.strip("\"'`.,;:()[]{}")) else word for word in focus.split()]
    text = scrub_key(clean_text(" ".join(words)), api_key)
    return text or None
