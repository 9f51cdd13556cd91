"""The cached prefix of a request: the part a provider's prompt cache can serve from the previous one.

A replay (:mod:`compaction.replay`) measures, for each request, how much of it begins the
same way as the previous request.  The measure is taken on the gated request (what the body
is rendered from), message by message:

* the *header* (request format, model, system text, output cap; the tool definitions are
  the same for every turn of a replay) must equal the previous request's, otherwise
  nothing is cached: a changed system prompt or model invalidates the whole cache;
* then come the leading messages equal, role and content blocks after the gate
  (placeholders and repairs included), to the previous request's messages at the same
  positions, compared by their canonical JSON with any ``cache_control`` key left out (a
  breakpoint that moves to the newest message does not change what is cached);
* the cached tokens are the request's tokens (:attr:`GatedRequest.tokens`) less the tokens
  of the messages after that common prefix, each counted as the gate counts it (text in the
  encoding with its framing, each shown image by its pixel price).  So the system prompt,
  the tool definitions and the request framing count as cached whenever the header
  repeats, and a request that is the previous one plus new messages has exactly the
  previous request's tokens cached.

Whole messages are the unit because that is where a match can end in practice.  Anthropic
matches the prefix, in the order tools, system, messages, up to a ``cache_control``
breakpoint on a content block (looking back at most 20 blocks from each breakpoint);
OpenAI and Gemini match the longest identical token prefix (OpenAI in 128-token steps past
1,024 tokens).  The tokens after the first changed message belong to no earlier request; a
byte-level match inside the changed message would credit a few tokens more, which
providers do not reliably bill.  Minimum lengths and steps are applied when pricing
(:mod:`compaction.replay_prices`), not to the share.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from .blocks import Block, canonical_json
from .images import find_image_sites
from .outputs import request_format
from .wire import GatedRequest

__all__ = ["PrefixMeter", "message_fingerprint"]


def message_fingerprint(role: str, blocks: Sequence[Block]) -> str:
    """Return a digest of a gated message's role and blocks, ``cache_control`` keys left out."""
    plain = [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]
    return hashlib.sha1(canonical_json([role, plain]).encode("utf-8")).hexdigest()


class PrefixMeter:
    """Measure each request's prefix shared with the previous request (see the module docstring).

    Args:
        encoding: the encoding the requests' tokens are counted in.

    Example:
        >>> meter = PrefixMeter("o200k_base")
        >>> meter.measure(first_request)  # doctest: +SKIP
        (0, False)
    """

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.header: tuple[Any, ...] | None = None
        self.prints: list[str] = []
        self.counts: dict[str, int] = {}  # fingerprint -> tokens (messages recur turn after turn)

    def _tokens(self, request: GatedRequest, fingerprint: str, blocks: Sequence[Block]) -> int:
        if fingerprint not in self.counts:
            fmt = request_format(request.format)
            sites = find_image_sites(blocks)
            images = sum(int(fmt.image_tokens(s.width, s.height, request.model)) for s in sites)
            self.counts[fingerprint] = fmt.text_tokens(blocks, self.encoding) + images
        return self.counts[fingerprint]

    def measure(self, request: GatedRequest) -> tuple[int, bool]:
        """Return (cached tokens, whether the previous request's messages all open this one).

        The first request measured has nothing cached.
        """
        header = (request.format, request.model, request.system, request.max_output_tokens)
        prints = [message_fingerprint(role, blocks) for role, blocks in request.messages]
        cached, kept = 0, False
        if self.header == header:
            common = 0
            for old, new in zip(self.prints, prints, strict=False):
                if old != new:
                    break
                common += 1
            rest = sum(
                self._tokens(request, fingerprint, blocks)
                for fingerprint, (_role, blocks) in zip(prints[common:], request.messages[common:], strict=True)
            )
            cached = max(0, min(request.tokens, request.tokens - rest))
            kept = common == len(self.prints)
        self.header, self.prints = header, prints
        return cached, kept
