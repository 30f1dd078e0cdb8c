"""An in-memory router for flow tests: real policy admission, scripted replies, recorded calls.

Handlers receive the request and return a ChatResponse/DecisionResponse (billed through the offer's
prices, or its reported cost), a ProviderError (a failed route), a RouteResult (returned as is), or
raise (the router itself failing). Handlers may be async; ``latency_s`` delays every call;
``chat_offers`` picks the serving chat offer by policy fingerprint (default :data:`CHAT_OFFER`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compactor.policy import admit_policy
from compactor.providers.base import ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError
from compactor.router import AdmittedPolicy, RouteResult, compute_cost

CHAT_OFFER = Offer(id="fake/writer", provider="fakechat", family="fake-writer", model="fake-writer-1",
                   protocol="chat", transport="builtin", price_in=1.0, price_out=2.0)
DECIDER_OFFER = Offer(id="fake/decider", provider="fakedecide", family="fake-decider", model="fake-decider-1",
                      protocol="decisions", transport="builtin", price_in=0.5, price_out=0.5)


@dataclass
class Call:
    kind: str  # "chat" | "decide"
    request: Any
    timeout_s: float | None
    policy: Any = None  # the AdmittedPolicy the call was routed with


def first_choice_answers(request: DecisionRequest) -> DecisionResponse:
    answers = {name: {"type": "choice", "choice": next(iter(q["criteria"])), "confidence": 0.9}
               for name, q in request.questions.items()}
    return DecisionResponse(model="fake-decider-1", answers=answers, tokens_in=100, tokens_out=10)


def ok_text(request: ChatRequest) -> ChatResponse:
    return ChatResponse(text="ok", finish_reason="stop", tokens_in=50, tokens_out=5)


class FakeRouter:
    """Implements the router API the flow runtime calls (``admit_policy``, ``chat``, ``decide``)."""

    def __init__(self, *, chat: Callable[[ChatRequest], Any] = ok_text,
                 decide: Callable[[DecisionRequest], Any] = first_choice_answers,
                 latency_s: float = 0.0, ranked_extra: int = 0, chat_offers: dict[str, Offer] | None = None) -> None:
        self.chat_handler = chat
        self.chat_offers = chat_offers or {}  # policy fingerprint -> the offer that serves chats routed with it
        self.decide_handler = decide
        self.latency_s = latency_s
        self.ranked_extra = ranked_extra
        self.calls: list[Call] = []
        self.cancelled: list[str] = []
        self.active = 0
        self.max_active = 0

    def admit_policy(self, term: Any) -> AdmittedPolicy:
        return AdmittedPolicy(admit_policy(term))

    async def chat(self, policy: AdmittedPolicy, request: ChatRequest, *, needs: frozenset[str] = frozenset(),
                   deadline: Any = None, timeout_s: float | None = None) -> RouteResult:
        offer = self.chat_offers.get(policy.fingerprint, CHAT_OFFER)
        return await self._route("chat", offer, self.chat_handler, policy, request, timeout_s, 6)

    async def decide(self, policy: AdmittedPolicy, request: DecisionRequest, *, deadline: Any = None,
                     timeout_s: float | None = None) -> RouteResult:
        return await self._route("decide", DECIDER_OFFER, self.decide_handler, policy, request, timeout_s, 12)

    def _trace(self, policy: AdmittedPolicy, offer: Offer) -> dict[str, Any]:
        ranked = [{"offer": offer.id, "provider": offer.provider, "family": offer.family, "score": 1.0}]
        ranked += [{"offer": f"extra/{i}", "provider": "extra", "family": "extra", "score": 0.5}
                   for i in range(self.ranked_extra)]
        rejected = [{"offer": f"rejected/{i}", "reason": "missing_capability:json_mode"}
                    for i in range(self.ranked_extra)]
        return {"policy_fingerprint": policy.fingerprint, "ranked": ranked, "rejected": rejected,
                "decision_path": [{"event": "attempted", "provider": offer.provider}]}

    async def _route(self, kind: str, offer: Offer, handler: Callable[[Any], Any], policy: AdmittedPolicy,
                     request: Any, timeout_s: float | None, decimals: int) -> RouteResult:
        self.calls.append(Call(kind, request, timeout_s, policy))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            reply = handler(request)
            if inspect.isawaitable(reply):
                reply = await reply
        except asyncio.CancelledError:
            self.cancelled.append(kind)
            raise
        finally:
            self.active -= 1
        if isinstance(reply, RouteResult):
            return reply
        trace = self._trace(policy, offer)
        if isinstance(reply, ProviderError):
            return RouteResult(ok=False, response=None, chosen=None, trace=trace,
                               error_kind=f"exhausted: {reply.kind}", error_message=reply.message, latency_ms=3)
        cost, basis = compute_cost(offer, reply, decimals)
        return RouteResult(ok=True, response=reply, chosen=offer, trace=trace, latency_ms=3,
                           cost_usd=cost, cost_basis=basis, failed_cost_known=True)  # no failed attempt
