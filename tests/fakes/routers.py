"""Routers for tests: the bundled offline offers with a frozen clock (answers compared byte for byte), and offers on
a fake provider's real transports."""

from __future__ import annotations

from typing import Any

from compactor.catalog import get_catalog
from compactor.providers.base import Offer
from compactor.providers.registry import transport_for
from compactor.router import Router


def frozen_router() -> Router:
    """The bundled catalog's offline offers with a clock that never moves (every ``latency_ms`` is 0):
    equal inputs, equal bytes out."""
    catalog = get_catalog()
    return Router(catalog.offers, envelope=catalog.policy_envelope, transport_for=transport_for,
                  clock=lambda: 0.0)


def provider_router(fake: Any, decider_transport: str = "decisions") -> Router:
    """A decider (``decider_transport``: ``decisions`` or ``chat-decisions``) and a summarizer (``openai``) on the fake
    provider ``fake`` (a ``fakes.provider_server.FakeProviderServer``), priced, with room for any request: the real
    transports, the provider's answers the test's."""
    common = {"base_url": fake.base_url, "price_in": 1.0, "price_out": 1.0,
              "observations": {"supports_json_mode": True, "context": 1_000_000}}
    return Router([Offer(id="p/dec", provider="p", family="dec", model="dec", protocol="decisions",
                         transport=decider_transport, **common),
                   Offer(id="p/chat", provider="p", family="chat", model="chat", protocol="chat",
                         transport="openai", **common)], transport_for=transport_for)
