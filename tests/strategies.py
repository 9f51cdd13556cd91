"""Hypothesis strategies for agent histories and recipes, and the checks the property tests share.

They live in the package, where ``compaction fuzz`` runs them on a user's own recipe:
:mod:`compaction.fuzz_strategies` (the generators) and :mod:`compaction.fuzz_checks` (checks
that read only what leaves the engine: the serialized request bytes, the store, the raised
errors).  This module re-exports them under the names the tests import.
"""

from __future__ import annotations

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
]
