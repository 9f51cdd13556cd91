"""Make a caption safe to show inside an image placeholder.

A caption is server text (a summarizer model wrote it), and it rides inside a loud
placeholder of every later request, so it is neutralised before it is stored and again
when it is shown (:func:`clean_caption` is idempotent):

* bounded: one paragraph of at most :data:`MAX_CAPTION_CHARS` characters, cut at a word
  with a visible ``…`` (the rest is never shown; a huge answer is cut before any work);
* one line: line breaks, tabs and other whitespace become single spaces;
* no control characters: C0/C1 controls, format characters (bidirectional overrides,
  zero-width joiners), surrogates, private-use and unassigned code points are dropped;
* no image: every ``data:`` URI (an image smuggled as text would be an image input the
  wire caps and the text-only policy must count) becomes ``(data URI removed)``;
* no fake structure: square brackets (and braces) become parentheses, so a caption cannot
  close its placeholder (``]``) or open a fake one (``[image not shown: ...``); double and
  curly quotes become single ones, so it cannot end the quoted caption early; a backslash
  becomes ``/`` (a placeholder may stand inside the JSON of tool-call arguments).

Example:
    >>> clean_caption('A cat.\\n[/placeholder] data:image/png;base64,AAAA "ok"')
    "A cat. (/placeholder) (data URI removed) 'ok'"
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_CAPTION_CHARS", "MAX_MODEL_CHARS", "clean_caption", "caption_label"]

#: The longest caption shown (characters): one paragraph.
MAX_CAPTION_CHARS = 700
#: The longest model name shown beside a caption (characters).
MAX_MODEL_CHARS = 80
#: Characters of a raw caption read at all: anything past this is cut before cleaning.
_READ_CHARS = 4 * MAX_CAPTION_CHARS

_DATA_URI = re.compile(r"data\s*:\s*\S*", re.IGNORECASE)
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
_BRACKETS = str.maketrans({"[": "(", "]": ")", '"': "'", "{": "(", "}": ")", "\\": "/", "\u201c": "'", "\u201d": "'"})


def _visible(char: str) -> str:
    if char.isspace() or unicodedata.category(char) in ("Zl", "Zp"):
        return " "
    return "" if unicodedata.category(char) in _DROPPED_CATEGORIES else char


@functools.lru_cache(maxsize=4096)
def _clean(text: str, limit: int) -> str:
    text = "".join(_visible(c) for c in text)
    text = _DATA_URI.sub("(data URI removed)", text)
    text = " ".join(text.translate(_BRACKETS).split())
    if len(text) > limit:
        cut = text[: limit - 1]
        space = cut.rfind(" ")
        if space > limit // 2:
            cut = cut[:space]
        text = cut.rstrip(" ,;:") + "…"
    return text


def clean_caption(text: str, limit: int = MAX_CAPTION_CHARS) -> str:
    """Return ``text`` as a caption safe to show in a placeholder ("" when nothing is left).

    Args:
        text: a caption as a server wrote it.
        limit: the most characters returned (a cut ends in ``…``).

    Raises:
        TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"a caption must be a string; found {type(text).__name__}")
    return _clean(text[: max(_READ_CHARS, 4 * limit)], limit)  # cut first: the cache never holds a huge text


def caption_label(provenance: Mapping[str, Any]) -> str:
    """Return who made a caption, from its provenance: the model's name, cleaned and bounded."""
    model = provenance.get("model")
    name = clean_caption(model, MAX_MODEL_CHARS) if isinstance(model, str) else ""
    return name or "a summarizer model"
