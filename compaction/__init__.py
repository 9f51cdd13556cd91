"""compaction: keep long-running LLM agents inside their context window without losing what they said.

The store keeps every message; compaction is a render decision.  Before each model call,
:func:`compile_request` builds a request within a token budget from the pinned system
messages, summaries of older history (a hierarchy: L1 summaries of chunks, L2 merges of
L1s, ...) and the newest messages verbatim.

Example:
    >>> from compaction import Recipe, Store, compress_and_compile, load_transcript
    >>> store = Store(":memory:")
    >>> store.append(load_transcript("examples/pi__pi-mono__before-compaction.jsonl").messages)  # doctest: +SKIP
    >>> compiled, _ = compress_and_compile(store, Recipe(budget_tokens=16000))  # doctest: +SKIP
    >>> compiled.tokens <= 16000  # doctest: +SKIP
    True
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

if TYPE_CHECKING:  # what type checkers see; at run time each name is imported when first used
    from .blocks import Message
    from .compactor import Compactor, TickReport
    from .compile import CompiledRequest, compile_request
    from .errors import (
        AssistantPrefillRefused,
        CompactionError,
        EncodingDataMissing,
        ImageError,
        InvalidArgument,
        InvalidMessage,
        InvalidTranscript,
        InvariantViolation,
        OverBudget,
        RecipeError,
        StoreError,
        SummarizerError,
        TranscriptUnreadable,
        UnknownFormat,
    )
    from .formats import load_transcript
    from .loop import append_anthropic, append_openai, append_responses
    from .pipeline import RunResult, compress_and_compile, run_pipeline
    from .policy import ImageSettings
    from .recipe import Recipe, load_recipe
    from .store import ConversationInfo, Store, list_conversations, open_store
    from .summarizers import ExtractiveSummarizer
    from .tokens.counting import count_text
    from .wire import GatedRequest, gate

#: Where each public name lives: ``import compaction`` imports none of them, so a process pays
#: only for what it uses (the store, the counter, the HTTP client of a summarizer, ...).
_LAZY: dict[str, str] = {
    "Message": ".blocks",
    "Compactor": ".compactor",
    "TickReport": ".compactor",
    "CompiledRequest": ".compile",
    "compile_request": ".compile",
    "AssistantPrefillRefused": ".errors",
    "CompactionError": ".errors",
    "EncodingDataMissing": ".errors",
    "ImageError": ".errors",
    "InvalidArgument": ".errors",
    "InvalidMessage": ".errors",
    "InvalidTranscript": ".errors",
    "InvariantViolation": ".errors",
    "OverBudget": ".errors",
    "RecipeError": ".errors",
    "StoreError": ".errors",
    "SummarizerError": ".errors",
    "TranscriptUnreadable": ".errors",
    "UnknownFormat": ".errors",
    "load_transcript": ".formats",
    "append_anthropic": ".loop",
    "append_openai": ".loop",
    "append_responses": ".loop",
    "RunResult": ".pipeline",
    "compress_and_compile": ".pipeline",
    "run_pipeline": ".pipeline",
    "ImageSettings": ".policy",
    "Recipe": ".recipe",
    "load_recipe": ".recipe",
    "ConversationInfo": ".store",
    "Store": ".store",
    "list_conversations": ".store",
    "open_store": ".store",
    "ExtractiveSummarizer": ".summarizers",
    "count_text": ".tokens.counting",
    "GatedRequest": ".wire",
    "gate": ".wire",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "__version__",
    "Message",
    "Store",
    "open_store",
    "list_conversations",
    "ConversationInfo",
    "Recipe",
    "load_recipe",
    "Compactor",
    "TickReport",
    "compile_request",
    "CompiledRequest",
    "run_pipeline",
    "compress_and_compile",
    "RunResult",
    "load_transcript",
    "append_openai",
    "append_anthropic",
    "append_responses",
    "ImageSettings",
    "ExtractiveSummarizer",
    "GatedRequest",
    "gate",
    "count_text",
    "AssistantPrefillRefused",
    "CompactionError",
    "EncodingDataMissing",
    "ImageError",
    "InvalidArgument",
    "InvalidMessage",
    "InvalidTranscript",
    "TranscriptUnreadable",
    "InvariantViolation",
    "OverBudget",
    "RecipeError",
    "StoreError",
    "SummarizerError",
    "UnknownFormat",
]
