"""Summarizers: the offline extractive default and HTTP summarizers (OpenAI Chat, Anthropic Messages).

The HTTP summarizers share one transport (:mod:`._http`) and are imported on first use, so
``import compaction`` does not import the HTTP client (httpx) until a summarizer needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Summarizer, SummaryResult
from .extractive import ExtractiveSummarizer

if TYPE_CHECKING:
    from .anthropic import AnthropicMessagesSummarizer
    from .openai_chat import OpenAIChatSummarizer

__all__ = [
    "Summarizer",
    "SummaryResult",
    "ExtractiveSummarizer",
    "OpenAIChatSummarizer",
    "AnthropicMessagesSummarizer",
]

#: Names imported on first access (PEP 562), with the module that defines each.
_LAZY = {
    "OpenAIChatSummarizer": ".openai_chat",
    "AnthropicMessagesSummarizer": ".anthropic",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
