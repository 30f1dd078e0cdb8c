"""Prompt-cache markers for providers that cache only up to an explicit marker (docs/providers.md
"Prompt caching"): the ``anthropic`` transport's ``cache_control`` and the ``bedrock`` transport's
``cachePoint`` both go where the request's :class:`~compactor.providers.base.CacheBoundary` lands.

A marker is sent when the offer allows it (its ``prompt_cache`` observation, else the transport's
default) and the prefix reaches the offer's ``cache_min_tokens`` (else :data:`DEFAULT_CACHE_MIN_TOKENS`)
by the router's token estimate. That estimate errs on the large side, which is the harmless side: a
marker before a model's real minimum is accepted and simply caches nothing.

A provider can read a prefix only once a call has written it, and concurrent calls that all miss all pay
the write. So the first call with a marked prefix goes alone (:func:`written_first`): calls with the same
prefix wait for it within the container, then read what it wrote. Only a caller's own calls wait on each other: one
caller's slow or failing call never holds another caller's back (docs/providers.md "Prompt caching").
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final, NamedTuple

from compactor.caller import current_caller
from compactor.providers.base import Offer
from compactor.providers.turns import Turns
from compactor.router import BYTES_PER_TOKEN_ESTIMATE

# The smallest prefix the common cache-capable models keep (Claude Sonnet and Opus 4 / 4.1 / 3.7: 1024;
# Amazon Nova: 1000). Models with a higher floor (Claude Haiku 3.5: 2048; Haiku 4.5, Opus 4.5: 4096) want
# their figure as the offer's ``cache_min_tokens``.
DEFAULT_CACHE_MIN_TOKENS: Final = 1024


# How long a provider keeps a prefix after its last use (Anthropic's and Bedrock's default cache), and how
# many written prefixes a container remembers.
CACHE_TTL_S: Final = 300.0
_WARM_MAX: Final = 1024


class CacheSplit(NamedTuple):
    """The turn holding the cache boundary, cut there: the marker goes between ``head`` and ``tail``.
    ``key`` names the whole prefix (offer, system prompt, turns, head) for :func:`written_first`."""

    index: int
    head: str
    tail: str
    key: str


def cache_split(offer: Offer, turns: Turns, *, default: bool) -> CacheSplit | None:
    """Where the marker goes, or ``None`` when the request has no boundary, the offer does not cache
    (``default``: the transport's choice when the offer does not say) or the prefix is too short to be
    cached."""
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
    digest = hashlib.sha256()
    for part in (offer.id, turns.system, *(f"{role}:{turn}" for role, turn in turns.turns[:index]), text[:chars]):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return CacheSplit(index, text[:chars], text[chars:], digest.hexdigest())


class _Gate:
    """The prefixes being written (one call each) and those written recently, in one event loop, by caller and
    prefix."""

    def __init__(self) -> None:
        self.writing: dict[tuple[str | None, str], asyncio.Event] = {}
        self.written: OrderedDict[tuple[str | None, str], float] = OrderedDict()

    def warm(self, key: tuple[str | None, str], now: float) -> bool:
        at = self.written.get(key)
        return at is not None and now - at < CACHE_TTL_S

    def mark(self, key: tuple[str | None, str], now: float) -> None:
        self.written[key] = now
        self.written.move_to_end(key)
        while len(self.written) > _WARM_MAX:
            self.written.popitem(last=False)


_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gate] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def written_first(key: str | None, clock: Callable[[], float] = time.monotonic) -> AsyncIterator[None]:
    """Around one call with a marked prefix (``key``; ``None``: no marker, no wait): the first call with
    that prefix runs alone; the others wait until it has answered, then run together and read the
    cache. A failed first call lets the next one write. A prefix written within :data:`CACHE_TTL_S` is
    not waited for. The wait is part of the call's own time (its timeout covers it). The gate is the
    caller's own (:data:`~compactor.caller.current_caller`): another caller's calls with the same prefix
    neither wait for these nor hold them back."""
    if key is None:
        yield
        return
    gate = _gates.setdefault(asyncio.get_running_loop(), _Gate())
    slot = (current_caller.get(), key)
    while not gate.warm(slot, clock()) and slot in gate.writing:
        await gate.writing[slot].wait()
    if gate.warm(slot, clock()):
        gate.mark(slot, clock())  # a read keeps the provider's entry alive
        yield
        return
    done = gate.writing[slot] = asyncio.Event()
    try:
        yield
        gate.mark(slot, clock())
    finally:
        del gate.writing[slot]
        done.set()
