"""A router for tests that compare answers byte for byte."""

from __future__ import annotations

from compactor.catalog import get_catalog
from compactor.providers.registry import transport_for
from compactor.router import Router


def frozen_router() -> Router:
    """The bundled catalog's offline offers with a clock that never moves (every ``latency_ms`` is 0):
    equal inputs, equal bytes out."""
    catalog = get_catalog()
    return Router(catalog.offers, envelope=catalog.policy_envelope, transport_for=transport_for,
                  clock=lambda: 0.0)
