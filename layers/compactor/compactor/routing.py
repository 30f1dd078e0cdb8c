"""The router: a Σ_pol policy over the catalog's offers, then failover across the ranked offers.

Generic: it knows offers, policies, transports and costs, never what the calls are for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .budget import Deadline
from .policy import Policy, admit_policy, admit_pred, with_envelope
from .policy.fields import FieldDeclarations
from .providers.base import ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, Transport


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


@dataclass(frozen=True)
class AdmittedPolicy:
    """A per-call policy with the host envelope composed in (what the router executes)."""

    policy: Policy

    @property
    def encoding(self) -> str:
        return self.policy.encoding

    @property
    def fingerprint(self) -> str:
        return self.policy.fingerprint


class Router:
    """Ranks offers with a policy and fails over across them (REFERENCE §5.3–5.4)."""

    def __init__(self, offers: Sequence[Offer], *, envelope: list | None = None,
                 transport_for: Callable[[Offer], Transport], clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 fields: FieldDeclarations | None = None) -> None:
        self._offers = tuple(offers)
        self._fields = fields
        self._envelope = None if envelope is None else admit_pred(envelope, fields=fields)
        self._transport_for = transport_for
        self._clock = clock
        self._sleep = sleep

    def admit_policy(self, term: Any) -> AdmittedPolicy:
        """Admit a per-call policy term and ∧-compose the host envelope onto its filter.

        Raises :class:`compactor.policy.PolicyAdmissionError`.
        """
        return AdmittedPolicy(with_envelope(admit_policy(term, fields=self._fields), self._envelope))

    async def chat(self, policy: AdmittedPolicy, request: ChatRequest, *, needs: frozenset[str] = frozenset(),
                   deadline: Deadline | None = None, timeout_s: float | None = None) -> RouteResult:
        raise NotImplementedError  # in progress

    async def decide(self, policy: AdmittedPolicy, request: DecisionRequest, *,
                     deadline: Deadline | None = None, timeout_s: float | None = None) -> RouteResult:
        raise NotImplementedError  # in progress
