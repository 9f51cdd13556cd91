"""Build the summarizer a recipe's ``[summarizer]`` table asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import RecipeError
from .base import Summarizer
from .extractive import ExtractiveSummarizer

if TYPE_CHECKING:
    from ..recipe import Recipe

__all__ = ["summarizer_from_recipe"]


def summarizer_from_recipe(recipe: Recipe) -> Summarizer:
    """Return the summarizer of ``recipe.summarizer``.

    Args:
        recipe: the recipe; ``summarizer.kind`` picks the summarizer.

    Returns:
        ``"extractive"``: an :class:`~compaction.summarizers.ExtractiveSummarizer` counting in
        ``recipe.encoding``.  ``"openai"``: an
        :class:`~compaction.summarizers.openai_http.OpenAIChatSummarizer` for
        ``summarizer.base_url`` and ``summarizer.model``, with the recipe's timeout,
        output cap and retries; the key is read from ``summarizer.api_key_env`` at each
        request, never from the recipe.

    Raises:
        RecipeError: ``kind = "openai"`` without ``base_url`` or ``model``, a bad
            ``base_url``, or ``api_key_env`` naming a variable that is not set (each message
            names the recipe file and the key).

    Example:
        >>> summarizer_from_recipe(Recipe()).name  # doctest: +SKIP
        'extractive'
    """
    settings = recipe.summarizer
    if settings.kind == "extractive":
        return ExtractiveSummarizer(recipe.encoding)
    if settings.kind == "openai":
        from .openai_http import OpenAIChatSummarizer

        if not settings.base_url:
            raise RecipeError(
                f"{settings.source}: key 'summarizer.base_url': required when summarizer.kind = 'openai' "
                f"(for example 'http://localhost:11434/v1' or 'https://api.openai.com/v1')"
            )
        if not settings.model:
            raise RecipeError(
                f"{settings.source}: key 'summarizer.model': required when summarizer.kind = 'openai'"
            )
        try:
            return OpenAIChatSummarizer(
                settings.base_url,
                settings.model,
                api_key_env=settings.api_key_env,
                timeout_seconds=settings.timeout_seconds,
                max_output_tokens=settings.max_output_tokens,
                max_retries=settings.max_retries,
            )
        except RecipeError as err:
            key, _, problem = str(err).partition(": ")
            raise RecipeError(f"{settings.source}: key 'summarizer.{key}': {problem}") from err
    raise RecipeError(
        f"{settings.source}: key 'summarizer.kind': unknown summarizer {settings.kind!r}; "
        f"expected 'extractive' or 'openai'"
    )
