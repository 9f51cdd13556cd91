"""Models' context windows, and the largest token budget a command takes.

The windows are the providers' documented context lengths (input plus output, tokens) for
model families, matched by the longest prefix of the model's name, lower-cased (a gateway's
``provider/`` prefix is dropped).  Sources: the OpenAI model pages (platform.openai.com/docs/models),
Anthropic's models overview (docs.anthropic.com/en/docs/about-claude/models) and Google's
Gemini models page (ai.google.dev/gemini-api/docs/models).

Neutral on purpose: no HTTP client, no CLI framework, so both ``compaction serve``
(:mod:`compaction.serve.budget`) and the CLI's ``--budget`` checks import it cheaply.
"""

from __future__ import annotations

__all__ = ["WINDOWS", "DEFAULT_WINDOW", "MAX_BUDGET_TOKENS", "known_window", "model_window"]

#: Context windows by model-name prefix (tokens).
WINDOWS: dict[str, int] = {
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
    "claude": 200_000,
    "gemini": 1_048_576,
}
#: The window assumed for a model not in :data:`WINDOWS` (tokens): small, so an unknown local
#: model is never overrun.
DEFAULT_WINDOW = 8_192
#: The largest token budget a command takes (tokens): about 100 times the largest window above,
#: so a typo's extra digits are refused, not compiled against.
MAX_BUDGET_TOKENS = 100_000_000


def known_window(model: str | None) -> int | None:
    """Return the context window of ``model`` in tokens, or ``None`` when the table does not know it.

    Example:
        >>> known_window("openai/gpt-4o-mini"), known_window("qwen2.5:7b")
        (128000, None)
    """
    if not isinstance(model, str):
        return None
    name = model.rsplit("/", 1)[-1].lower()
    best = ""
    for prefix in WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return WINDOWS[best] if best else None


def model_window(model: str | None) -> int:
    """Return the context window of ``model`` in tokens (:data:`DEFAULT_WINDOW` when unknown).

    Example:
        >>> model_window("openai/gpt-4o-mini")
        128000
        >>> model_window("qwen2.5:7b")
        8192
    """
    window = known_window(model)
    return DEFAULT_WINDOW if window is None else window
