"""Hypothesis strategies for agent histories and recipes, and the checks the property tests share.

They live in the package, where ``compaction fuzz`` runs them on a user's own recipe:
:mod:`compaction.fuzz_strategies` (the generators) and :mod:`compaction.fuzz_checks` (checks
that read only what leaves the engine: the serialized request bytes, the store, the raised
errors).  This module re-exports them under the names the tests import.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from compaction import Message
from compaction.fuzz_checks import (
    DATA_URI,
    PLACEHOLDER,
    CapturingSummarizer,
    WireImage,
    b64_tolerant,
    check_provider_grammar,
    check_tool_pairing,
    independent_tokens,
    iter_strings,
    payload_json,
    placeholders_in,
    png_b64,
    png_bytes,
    store_snapshot,
    wire_images,
)
from compaction.fuzz_strategies import WORDS, histories, recipes

__all__ = [
    "png_bytes",
    "png_b64",
    "histories",
    "recipes",
    "CapturingSummarizer",
    "payload_json",
    "iter_strings",
    "wire_images",
    "check_tool_pairing",
    "check_provider_grammar",
    "independent_tokens",
    "placeholders_in",
    "store_snapshot",
    "DATA_URI",
    "PLACEHOLDER",
    "WireImage",
    "WORDS",
    "b64_tolerant",
    "BLANKS",
    "TRAILING",
    "blank_histories",
]


# -- blank texts in tool results and a final assistant turn ending in whitespace -----------------
# Anthropic refuses both: "text content blocks must contain non-whitespace text" (inside a
# tool_result too) and "final assistant content cannot end with trailing whitespace".

#: Texts that are empty or whitespace only (``str.strip`` leaves nothing of them).
BLANKS = ("", " ", "\n", "\t \n ", "\u00a0", "\u3000\n")
#: Whitespace a final assistant text may end with.
TRAILING = (" ", "\n", " \n\n", "\t", "\u00a0", "\r\n")


def _blank_result(draw: Any, result: dict[str, Any]) -> dict[str, Any]:
    """Return ``result`` with blank texts put into its content, or its content blank or gone."""
    shape = draw(st.sampled_from(["blank-string", "empty-list", "blank-texts", "blank-beside", "no-content"]))
    blank = {"type": "text", "text": draw(st.sampled_from(BLANKS))}
    out = {**result, "is_error": draw(st.booleans())}
    if shape == "blank-string":
        out["content"] = draw(st.sampled_from(BLANKS))
    elif shape == "empty-list":
        out["content"] = []
    elif shape == "blank-texts":
        out["content"] = [
            {"type": "text", "text": t}
            for t in draw(st.lists(st.sampled_from(BLANKS), min_size=1, max_size=3))
        ]
    elif shape == "blank-beside":
        content = result.get("content", "")
        parts = list(content) if isinstance(content, list) else [{"type": "text", "text": content}]
        parts.insert(draw(st.integers(min_value=0, max_value=len(parts))), blank)
        out["content"] = parts
    else:
        out.pop("content", None)
    return out


@st.composite
def blank_histories(draw: Any, max_turns: int = 6) -> list[Message]:
    """Return a generated history (:func:`histories`) with blanks where Anthropic refuses them.

    About half of its tool results get blank texts (:data:`BLANKS`) put into their content,
    or an empty or whitespace string, an empty list or no content at all, each marked as an
    error or not; a user message of results may get a blank text beside them; and three times
    in four the history ends with an assistant message (a prefill on the Anthropic wire) of one
    or two texts, each ending in whitespace (:data:`TRAILING`).
    """
    messages: list[Message] = []
    for message in draw(histories(max_turns=max_turns)):
        blocks = [
            _blank_result(draw, b) if b.get("type") == "tool_result" and draw(st.booleans()) else b
            for b in message.content
        ]
        if any(b.get("type") == "tool_result" for b in blocks) and draw(st.integers(0, 3)) == 0:
            blocks.append({"type": "text", "text": draw(st.sampled_from(BLANKS))})
        messages.append(Message(message.role, tuple(blocks)))
    if draw(st.integers(0, 3)):
        texts = draw(
            st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=1, max_size=2)
        )
        messages.append(
            Message(
                "assistant",
                tuple({"type": "text", "text": " ".join(t) + draw(st.sampled_from(TRAILING))} for t in texts),
            )
        )
    return messages
