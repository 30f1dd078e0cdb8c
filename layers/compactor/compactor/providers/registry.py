"""The transports: what each name means in a catalog, and which
:class:`~compactor.providers.base.Transport` serves an offer (its ``transport`` field).

:data:`TRANSPORTS` is the one list of transport names (docs/providers.md "``protocol`` and
``transport`` values"); the catalog's schema and checks are derived from it. The core's own
transports are built in; adapters plug theirs in with :func:`register_transport`
(``compactor_aws.providers`` registers ``bedrock``, so the core never imports an AWS library).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType
from typing import Final, Literal

from compactor.providers.base import Offer, Transport
from compactor.records import record


@record(frozen=True, slots=True)
class TransportKind:
    """What a catalog offer with this transport may and must carry."""

    protocols: frozenset[str]  # the protocols it serves: "chat", "decisions"
    base_url: Literal["required", "optional", "none"]
    keys: bool  # takes api_key_env / api_key_secret
    regional: bool = False  # takes a region
    http: bool = False  # served over HTTP with httpx (the transports _http_transports builds)
    # the reasoning settings it sends (docs/providers.md "Reasoning models"): the Chat Completions wire takes
    # both (the budget as room only), Anthropic's Messages and Bedrock's Converse both as Claude's ``thinking``
    # (the effort adaptive, the budget alone extended: compactor.providers.reasoning.claude_thinking)
    reasoning: frozenset[str] = frozenset()
    # the cache prices its answers' usage can call for (compactor.cost.priced): cache reads on the Chat Completions
    # wire, reads and writes on Anthropic's and Bedrock's; none where an answer reports no cache tokens
    cache_prices: frozenset[str] = frozenset()


_BOTH = frozenset({"chat", "decisions"})
_EFFORT_AND_BUDGET = frozenset({"reasoning_effort", "reasoning_budget_tokens"})
_READS = frozenset({"price_cached_in"})
_READS_AND_WRITES = frozenset({"price_cached_in", "price_cache_write"})
TRANSPORTS: Final[Mapping[str, TransportKind]] = MappingProxyType({
    "openai": TransportKind(frozenset({"chat"}), "required", keys=True, http=True, reasoning=_EFFORT_AND_BUDGET,
                            cache_prices=_READS),
    "anthropic": TransportKind(_BOTH, "required", keys=True, http=True, reasoning=_EFFORT_AND_BUDGET,
                               cache_prices=_READS_AND_WRITES),
    "bedrock": TransportKind(_BOTH, "optional", keys=False, regional=True, reasoning=_EFFORT_AND_BUDGET,
                             cache_prices=_READS_AND_WRITES),
    "decisions": TransportKind(frozenset({"decisions"}), "required", keys=True, http=True),
    "chat-decisions": TransportKind(frozenset({"decisions"}), "required", keys=True, http=True,
                                    reasoning=_EFFORT_AND_BUDGET, cache_prices=_READS),
    "builtin": TransportKind(_BOTH, "none", keys=False),
})
BUILTIN: Final = "builtin"


@cache
def _http_transports() -> dict[str, Transport]:
    # Imported on first use: registering an adapter stays cheap (cold starts).
    from compactor.providers.anthropic import AnthropicTransport
    from compactor.providers.chat_decisions import ChatDecisionsTransport
    from compactor.providers.native_decisions import DecisionsTransport
    from compactor.providers.openai import OpenAITransport

    return {
        "openai": OpenAITransport(),
        "anthropic": AnthropicTransport(),
        "decisions": DecisionsTransport(),
        "chat-decisions": ChatDecisionsTransport(),
    }


# Transports built on first use by a registered factory (adapters).
_factories: dict[str, Callable[[], Transport]] = {}
_built: dict[str, Transport] = {}


def register_transport(name: str, factory: Callable[[], Transport]) -> None:
    """Serve offers whose ``transport`` is ``name`` (one of :data:`TRANSPORTS`) with ``factory()``
    (built once, on first use)."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown transport {name!r}: add it to TRANSPORTS first")
    _factories[name] = factory
    _built.pop(name, None)


@cache
def _builtin_transport() -> Transport:
    # Imported lazily: the built-in models are only loaded when an offer uses them.
    from compactor.offline.transport import BuiltinTransport

    return BuiltinTransport()


def transport_for(offer: Offer) -> Transport:
    """The shared, stateless transport for ``offer``; unknown names raise ``ValueError``."""
    if offer.transport == BUILTIN:
        return _builtin_transport()
    known = _http_transports().get(offer.transport) or _built.get(offer.transport)
    if known is not None:
        return known
    factory = _factories.get(offer.transport)
    if factory is None:
        raise ValueError(f"offer {offer.id}: transport {offer.transport!r} is not available here")
    return _built.setdefault(offer.transport, factory())
