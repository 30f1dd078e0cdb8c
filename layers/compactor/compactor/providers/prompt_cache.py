"""Prompt-cache markers for providers that cache only up to an explicit marker (docs/providers.md
"Prompt caching"): the ``anthropic`` transport's ``cache_control`` and the ``bedrock`` transport's
``cachePoint`` both go where the request's :class:`~compactor.providers.base.CacheBoundary` lands.

A marker is sent when the offer allows it (its ``prompt_cache`` observation, else the transport's
default) and the prefix reaches the offer's ``cache_min_tokens`` (else :data:`DEFAULT_CACHE_MIN_TOKENS`)
by the router's token estimate. That estimate errs on the large side, which is the harmless side: a
marker before a model's real minimum is accepted and simply caches nothing.
"""

from __future__ import annotations

import math
from typing import Final

from compactor.providers.base import Offer
from compactor.providers.turns import Turns
from compactor.router import BYTES_PER_TOKEN_ESTIMATE

# The smallest prefix the common cache-capable models keep (Claude Sonnet and Opus 4 / 4.1 / 3.7: 1024;
# Amazon Nova: 1000). Models with a higher floor (Claude Haiku 3.5: 2048; Haiku 4.5, Opus 4.5: 4096) want
# their figure as the offer's ``cache_min_tokens``.
DEFAULT_CACHE_MIN_TOKENS: Final = 1024


def cache_split(offer: Offer, turns: Turns, *, default: bool) -> tuple[int, str, str] | None:
    """``(turn index, head, tail)``: the turn holding the cache boundary cut there, when a marker goes
    after ``head``; ``None`` when the request has no boundary, the offer does not cache (``default``: the
    transport's choice when the offer does not say) or the prefix is too short to be cached."""
    if turns.cache_at is None:
        return None
    enabled = offer.observations.get("prompt_cache")
    if not (default if enabled is None else enabled):
        return None
    minimum = offer.observations.get("cache_min_tokens") or DEFAULT_CACHE_MIN_TOKENS
    if math.ceil(turns.cache_prefix_bytes() / BYTES_PER_TOKEN_ESTIMATE) < minimum:
        return None
    index, chars = turns.cache_at
    text = turns.turns[index][1]
    return index, text[:chars], text[chars:]
