"""Cache-adjusted input prices: what a request costs when part of it is served from the prompt cache.

Every provider bills a repeated request prefix below the base input price, each by its own
rules.  :class:`CachePrice` holds one model's documented figures (USD per 1M input tokens)
and :meth:`CachePrice.turn_cost` applies them to one request, given its tokens and the
tokens of its prefix shared with the previous request (see :mod:`compaction.replay`):

* **Anthropic Messages** caches explicitly: a ``cache_control`` breakpoint writes everything
  before it to the cache at 1.25x the base price (5-minute lifetime) and a later request
  whose prefix matches reads it at 0.1x.  We assume what an agent with breakpoints on the
  newest message does (issue 12, item 2): each request reads its shared prefix and writes
  the rest.  A request below the model's minimum cacheable length is neither read nor
  written.  Anthropic looks for a hit at most 20 blocks before a breakpoint; an agent turn
  adds fewer, and the breakpoints at the end of the system prompt and of the summary stack
  cover the rest, so the model ignores the limit.
* **OpenAI** caches automatically: requests of at least 1,024 tokens are matched on their
  exact prefix, and hits count in steps of 128 tokens (1,024, 1,152, ...); there is no
  write premium.
* **Gemini** caches implicitly on 2.5 models: a hit on a prefix of at least the model's
  minimum is billed at the context-caching price; no write premium and no storage fee for
  implicit caching.

The prices are the short-prompt tier (Gemini 2.5 Pro charges more above 200k-token prompts,
beyond the budgets replayed here).  Token counts are ours (the recipe's encoding), not the
provider's tokenizer, so figures compare strategies rather than predict an invoice.
Figures were read from the pages named in :data:`PRICES` (``source``); update them there.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CachePrice", "PRICES", "DEFAULT_PRICES", "TurnCost"]


@dataclass(frozen=True)
class TurnCost:
    """What one request costs (USD) and how its input tokens are billed.

    Attributes:
        usd: the cache-adjusted input cost (USD).
        read: tokens billed as cache reads.
        written: tokens billed as cache writes (Anthropic; 0 elsewhere).
    """

    usd: float
    read: int
    written: int


@dataclass(frozen=True)
class CachePrice:
    """One model's documented input prices with prompt caching (USD per 1M tokens).

    Attributes:
        provider: ``"anthropic"``, ``"openai"`` or ``"google"``.
        model: the model the figures are for.
        input_usd: base input price (USD per 1M tokens).
        cache_read_usd: price of input tokens served from the cache.
        cache_write_usd: price of input tokens written to the cache; equal to ``input_usd``
            where writing costs nothing extra (OpenAI, Gemini implicit caching).
        min_cached_tokens: the shortest prefix the provider caches (tokens).
        step_tokens: cache hits count in multiples of this past the minimum (OpenAI: 128).
        source: the page(s) the figures come from.
    """

    provider: str
    model: str
    input_usd: float
    cache_read_usd: float
    cache_write_usd: float
    min_cached_tokens: int
    step_tokens: int
    source: str

    @property
    def explicit(self) -> bool:
        """Return whether the provider charges for cache writes (explicit caching)."""
        return self.cache_write_usd != self.input_usd

    def turn_cost(self, tokens: int, cached: int) -> TurnCost:
        """Return the cost of one request of ``tokens`` whose first ``cached`` tokens repeat the last one.

        Args:
            tokens: the request's input tokens.
            cached: the tokens of its prefix shared with the previous request (<= ``tokens``).

        Returns:
            The :class:`TurnCost`: a hit below ``min_cached_tokens`` is a miss, a hit is
            rounded down to ``step_tokens`` past the minimum, and under explicit caching the
            rest is written at ``cache_write_usd`` (a request below the minimum is billed at
            the base price, neither read nor written).

        Example:
            >>> PRICES["gpt-5"].turn_cost(2000, 1500).read
            1408
        """
        cached = max(0, min(cached, tokens))
        if tokens < self.min_cached_tokens:
            return TurnCost(tokens * self.input_usd / 1e6, 0, 0)
        read = 0
        if cached >= self.min_cached_tokens:
            read = cached - (cached - self.min_cached_tokens) % self.step_tokens
        rest = tokens - read
        written = rest if self.explicit else 0
        rest_usd = self.cache_write_usd if self.explicit else self.input_usd
        return TurnCost((read * self.cache_read_usd + rest * rest_usd) / 1e6, read, written)

    def uncached_cost(self, tokens: int) -> float:
        """Return the cost of ``tokens`` input tokens at the base price, no cache (USD)."""
        return tokens * self.input_usd / 1e6


_ANTHROPIC = (
    "https://docs.claude.com/en/docs/build-with-claude/prompt-caching (pricing table: base input, "
    "5m cache writes 1.25x, cache hits 0.1x; minimum cacheable length 1,024 tokens for Sonnet 4.5); "
    "https://docs.claude.com/en/docs/about-claude/pricing"
)
_OPENAI = (
    "https://platform.openai.com/docs/pricing (input and cached input per model); "
    "https://platform.openai.com/docs/guides/prompt-caching (prompts of 1,024 tokens or more, "
    "exact prefix match, hits in 128-token increments)"
)
_GEMINI = (
    "https://ai.google.dev/gemini-api/docs/pricing (Gemini 2.5 Pro, prompts <= 200k tokens: input "
    "$1.25, context caching $0.125); https://ai.google.dev/gemini-api/docs/caching (implicit caching "
    "on 2.5 models; minimum 2,048 input tokens for 2.5 Pro, 4,096 in earlier versions of the page)"
)

#: Documented prices by model (USD per 1M input tokens).
PRICES: dict[str, CachePrice] = {
    p.model: p
    for p in (
        CachePrice("anthropic", "claude-sonnet-4-5", 3.00, 0.30, 3.75, 1024, 1, _ANTHROPIC),
        CachePrice("openai", "gpt-5", 1.25, 0.125, 1.25, 1024, 128, _OPENAI),
        CachePrice("openai", "gpt-4.1", 2.00, 0.50, 2.00, 1024, 128, _OPENAI),
        CachePrice("openai", "gpt-4o", 2.50, 1.25, 2.50, 1024, 128, _OPENAI),
        CachePrice("google", "gemini-2.5-pro", 1.25, 0.125, 1.25, 2048, 1, _GEMINI),
    )
}

#: The models a replay reports costs for: one per provider.
DEFAULT_PRICES: tuple[CachePrice, ...] = (
    PRICES["claude-sonnet-4-5"],
    PRICES["gpt-5"],
    PRICES["gemini-2.5-pro"],
)
