"""The router: a Σ_pol policy over the catalog's offers, then failover across the ranked offers.

Generic: it knows offers, policies, transports and costs, never what the calls are for.
(Interface fixed here; implementation owned by the policy work.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .providers.base import ChatResponse, DecisionResponse, Offer


@dataclass
class RouteResult:
    ok: bool
    response: ChatResponse | DecisionResponse | None
    chosen: Offer | None
    # {"policy_fingerprint": str, "ranked": [...], "rejected": [...], "decision_path": [...]}
    trace: dict[str, Any] = field(default_factory=dict)
    error_kind: str | None = None  # e.g. "no_candidates", "exhausted: timeout", "timeout", ProviderError kinds
    error_message: str | None = None
    latency_ms: int = 0
    cost_usd: float | None = None  # REFERENCE §2.4 cost of the chosen response (None = unknown)
    cost_basis: str | None = None  # "subscription" | "reported" | "computed" | None
