"""The former name of :mod:`compaction.summarizers.openai_chat`, kept so old imports work."""

from __future__ import annotations

from ._http import retry_after_seconds as _retry_after_seconds  # noqa: F401  (old private name)
from .openai_chat import TRANSIENT_STATUSES, OpenAIChatSummarizer, redact_url

__all__ = ["OpenAIChatSummarizer", "TRANSIENT_STATUSES", "redact_url"]
