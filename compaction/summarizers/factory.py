"""The summarizer registry: build the summarizer a recipe's ``[summarizer]`` table asks for.

Each ``[summarizer] kind`` maps to one builder in :data:`SUMMARIZER_BUILDERS`; adding a
provider is one new module and one entry here (and its name in
:data:`compaction.recipe.SUMMARIZER_KINDS`, which the recipe checks without importing this
module).  A builder imports its module when called, so the HTTP client (httpx) is imported
only when an HTTP summarizer is built.

Example:
    >>> summarizer_from_recipe(Recipe()).name  # doctest: +SKIP
    'extractive'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import RecipeError
from .base import Summarizer
from .extractive import ExtractiveSummarizer

if TYPE_CHECKING:
    from ..recipe import Recipe, SummarizerSettings

__all__ = ["summarizer_from_recipe", "SUMMARIZER_BUILDERS", "SummarizerBuilder"]

#: Builds a summarizer from a recipe; raises :class:`RecipeError` naming the key at fault.
SummarizerBuilder = Callable[["Recipe"], Summarizer]


def _build_extractive(recipe: Recipe) -> Summarizer:
    return ExtractiveSummarizer(recipe.encoding, focus=recipe.summary_focus)


def _fail(settings: SummarizerSettings, key: str, problem: str) -> RecipeError:
    return RecipeError(f"{settings.source}: key 'summarizer.{key}': {problem}")


def _translate(settings: SummarizerSettings, err: RecipeError) -> RecipeError:
    """Prefix a constructor's ``key: problem`` message with the recipe file and table."""
    key, _, problem = str(err).partition(": ")
    return _fail(settings, key, problem)


def _build_http(recipe: Recipe, cls: Any, base_url: str, api_key_env: str | None) -> Summarizer:
    """Build an HTTP summarizer from the recipe's table; a constructor's error names the key."""
    settings = recipe.summarizer
    try:
        summarizer: Summarizer = cls(
            base_url,
            settings.model,
            api_key_env=api_key_env,
            timeout_seconds=settings.timeout_seconds,
            max_output_tokens=settings.max_output_tokens,
            max_retries=settings.max_retries,
            encoding=recipe.encoding,
        )
    except RecipeError as err:
        raise _translate(settings, err) from err
    return summarizer


def _build_openai(recipe: Recipe) -> Summarizer:
    from .openai_chat import OpenAIChatSummarizer

    settings = recipe.summarizer
    if not settings.base_url:
        raise _fail(
            settings,
            "base_url",
            "required when summarizer.kind = 'openai' "
            "(for example 'http://localhost:11434/v1' or 'https://api.openai.com/v1')",
        )
    if not settings.model:
        raise _fail(settings, "model", "required when summarizer.kind = 'openai'")
    return _build_http(recipe, OpenAIChatSummarizer, settings.base_url, settings.api_key_env)


def _build_anthropic(recipe: Recipe) -> Summarizer:
    from .anthropic import ANTHROPIC_BASE_URL, AnthropicMessagesSummarizer

    settings = recipe.summarizer
    if not settings.model:
        raise _fail(
            settings, "model", "required when summarizer.kind = 'anthropic' (for example 'claude-haiku-4-5')"
        )
    base_url = settings.base_url or ANTHROPIC_BASE_URL
    return _build_http(recipe, AnthropicMessagesSummarizer, base_url, settings.api_key_env or "ANTHROPIC_API_KEY")


#: Every ``[summarizer] kind`` and its builder.
SUMMARIZER_BUILDERS: dict[str, SummarizerBuilder] = {
    "extractive": _build_extractive,
    "openai": _build_openai,
    "anthropic": _build_anthropic,
}


def summarizer_from_recipe(recipe: Recipe) -> Summarizer:
    """Return the summarizer of ``recipe.summarizer``; the caller closes it when done.

    Args:
        recipe: the recipe; ``summarizer.kind`` picks the builder.

    Returns:
        ``"extractive"``: an :class:`~compaction.summarizers.ExtractiveSummarizer` counting in
        ``recipe.encoding``, keeping lines about ``recipe.summary_focus`` first.  ``"openai"``: an
        :class:`~compaction.summarizers.openai_chat.OpenAIChatSummarizer` for
        ``summarizer.base_url`` and ``summarizer.model``.  ``"anthropic"``: an
        :class:`~compaction.summarizers.anthropic.AnthropicMessagesSummarizer` for
        ``summarizer.model`` at ``summarizer.base_url`` (default
        ``https://api.anthropic.com``), the key in ``summarizer.api_key_env`` (default
        ``ANTHROPIC_API_KEY``).  An HTTP summarizer takes the recipe's timeout, output cap,
        retries and encoding (summaries are counted in it against their bound), and reads its
        key from the environment when built and at each request, never from the recipe.

    Raises:
        RecipeError: an unknown kind, a missing ``model`` (or ``base_url`` for ``"openai"``),
            a bad ``base_url``, or ``api_key_env`` naming a variable that is not set or holds
            a character no API key has (each message names the recipe file and the key, and
            never the API key itself).

    Example:
        >>> summarizer_from_recipe(Recipe()).name  # doctest: +SKIP
        'extractive'
    """
    settings = recipe.summarizer
    builder = SUMMARIZER_BUILDERS.get(settings.kind)
    if builder is None:
        known = ", ".join(repr(k) for k in SUMMARIZER_BUILDERS)
        raise _fail(settings, "kind", f"unknown summarizer {settings.kind!r}; expected one of {known}")
    return builder(recipe)
