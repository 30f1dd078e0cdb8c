"""The router: a Σ_pol policy over the catalog's offers, then failover across the ranked offers.

Generic: it knows offers, policies, transports and costs, never what the calls are for.

Per call: the offers of the call's protocol (``chat`` or ``decisions``; docs/behaviour.md#the-policy-language) are ranked
by the policy (with the host envelope composed in), then tried in order under the policy's
FailPlan (docs/behaviour.md#fallbacks). Router state (TTL-disabled providers, circuit breakers) lives in the instance and
is visible to policies as the ``disabled`` and ``breaker_open`` observations.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from compactor.budget import Deadline
from compactor.cost import NODE_DECIMALS, RESPONSE_DECIMALS, priced
from compactor.cost import reported as reported_cost
from compactor.jsonutil import dense_dumps, is_finite_number
from compactor.policy import Policy, admit_policy, admit_pred, with_envelope
from compactor.policy.failplan import ABORT, DISABLE_PROVIDER, NEXT_CANDIDATE, NEXT_PROVIDER_SAME_MODEL, RETRY_SAME, Action
from compactor.policy.fields import FieldDeclarations, fields_observed_in
from compactor.policy.ranking import Ranking, Requirements, rank
from compactor.providers.base import (
    BAD_RESPONSE,
    NETWORK_ERROR,
    RATE_LIMIT,
    TIMEOUT,
    UPSTREAM_ERROR,
    ChatRequest,
    ChatResponse,
    DecisionRequest,
    DecisionResponse,
    Offer,
    ProviderError,
    Transport,
)

PROVIDER_DISABLE_TTL_S = 300.0
BREAKER_FAILURE_THRESHOLD = 3  # consecutive provider faults that open a breaker
BREAKER_OPEN_S = 30.0
DEFAULT_ATTEMPT_TIMEOUT_S = 60.0  # when neither timeout_s nor a deadline bounds an attempt
# `retry_same` re-issues one offer at most this often per call, whatever `attempts` says: the decision path
# stays bounded and one policy cannot spend a whole budget hammering one provider.
MAX_RETRIES_PER_OFFER = 16
ERROR_MESSAGE_LIMIT = 300
# Failures that say something about the provider's health (not the caller's request or credentials).
PROVIDER_FAULT_KINDS = frozenset({TIMEOUT, RATE_LIMIT, UPSTREAM_ERROR, NETWORK_ERROR, BAD_RESPONSE})

# Tokens estimated from UTF-8 bytes: 3 bytes a token errs on the large side for prose, code and JSON alike.
BYTES_PER_TOKEN_ESTIMATE = 3
# What Compactor's decision prompt adds around the state and questions (system prompt + output room).
DECISION_PROMPT_TOKENS = 600
CONTEXT_REJECTION = "context_too_small"

_BEARER = re.compile(r"(?i)bearer\s+\S+")
Response = ChatResponse | DecisionResponse
Invoke = Callable[[Transport, Offer, float], Awaitable[Response]]


@dataclass
class RouteResult:
    ok: bool
    response: ChatResponse | DecisionResponse | None
    chosen: Offer | None
    # {"policy_fingerprint": str, "ranked": [...], "rejected": [...], "decision_path": [...]}
    trace: dict[str, Any] = field(default_factory=dict)
    error_kind: str | None = None  # e.g. "no_candidates", "exhausted: timeout", "timeout", ProviderError kinds
    error_message: str | None = None
    latency_ms: int = 0  # the whole routed call, failover included
    cost_usd: float | None = None  # docs/behaviour.md#the-x_router-block-and-usage cost of the chosen response (None = unknown)
    cost_basis: str | None = None  # "subscription" | "reported" | "computed" | None
    # USD that providers reported for failed attempts (billed, then rejected); None when none reported.
    failed_cost_usd: float | None = None


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


@dataclass(frozen=True)
class _Failure:
    kind: str
    message: str
    http_status: int | None = None
    cost_reported: float | None = None


@dataclass
class _Breaker:
    consecutive_faults: int = 0
    open_until: float = -math.inf


def compute_cost(offer: Offer, response: Response, decimals: int) -> tuple[float | None, str | None]:
    """docs/behaviour.md#the-x_router-block-and-usage ``(cost_usd, cost_basis)`` of one response from ``offer``.

    Reported cost (finite, ≥ 0) wins; else prices × tokens with cached input at 10 % of
    ``price_in``; an offer priced 0/0 costs 0.0 whatever its token counts; otherwise unknown.
    """
    provider_cost = reported_cost(response.cost_reported)
    if provider_cost is not None:
        return round(provider_cost, decimals), "reported"
    price_in, price_out = offer.price_in, offer.price_out
    if not (is_finite_number(price_in) and is_finite_number(price_out)):
        return None, None
    if price_in == 0 and price_out == 0:
        return 0.0, "computed"
    tokens_in, tokens_out = response.tokens_in, response.tokens_out
    if tokens_in is None or tokens_out is None:
        return None, None
    computed = priced(price_in, price_out, tokens_in, tokens_out, getattr(response, "tokens_cached", None))
    return round(computed, decimals), "computed"


def estimate_tokens(value: Any) -> int:
    """A generous token estimate of ``value`` (text, or anything JSON): UTF-8 bytes / 3, rounded up."""
    text = value if isinstance(value, str) else dense_dumps(value)
    return -(-len(text.encode("utf-8", errors="replace")) // BYTES_PER_TOKEN_ESTIMATE)


def chat_request_tokens(request: ChatRequest) -> int:
    """Estimated context a chat request takes: its messages plus the output allowance."""
    return estimate_tokens(request.messages) + (request.max_tokens or 0)


def decision_request_tokens(request: DecisionRequest) -> int:
    """Estimated context a decision takes when a chat model answers it (the largest of the transports)."""
    return estimate_tokens({"state": request.state, "questions": request.questions}) + DECISION_PROMPT_TOKENS


def _fits(offer: Offer, tokens: int) -> bool:
    context = offer.observations.get("context")
    return not (isinstance(context, int) and not isinstance(context, bool) and 0 < context < tokens)


def _redact(message: str, offer: Offer) -> str:
    """Strip anything that looks like a credential, then cap the length."""
    secret = os.environ.get(offer.api_key_env) if offer.api_key_env else None
    if secret and len(secret) >= 4:
        message = message.replace(secret, "***")
    return _BEARER.sub("Bearer ***", message)[:ERROR_MESSAGE_LIMIT]


def _trace_score(score: float) -> float | None:
    return score if math.isfinite(score) else None  # JSON has no infinities


class Router:
    """Ranks offers with a policy and fails over across them (docs/behaviour.md#the-policy-language).

    ``transport_for`` maps an offer to its transport; ``clock`` (seconds) drives provider-disable
    TTLs, breakers and latencies; ``sleep`` waits between retries. Policies may observe the core
    fields, every extra boolean/numeric observation the offers carry (``cache_hot: true`` in the
    catalog declares ``cache_hot``), and ``fields`` declared explicitly (``{"cache_hot": "Bool"}``).
    """

    def __init__(self, offers: Sequence[Offer], *, envelope: list | None = None,
                 transport_for: Callable[[Offer], Transport], clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 fields: FieldDeclarations | None = None) -> None:
        self._offers = tuple(offers)
        self._fields: FieldDeclarations = {**fields_observed_in(self._offers), **(fields or {})}
        self._envelope = None if envelope is None else admit_pred(envelope, fields=self._fields)
        self._transport_for = transport_for
        self._clock = clock
        self._sleep = sleep
        self._disabled_until: dict[str, float] = {}
        self._breakers: dict[tuple[str, str], _Breaker] = {}
        # Per event loop: one semaphore per offer with ``max_concurrency`` (docs/providers.md).
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = \
            weakref.WeakKeyDictionary()

    def admit_policy(self, term: Any) -> AdmittedPolicy:
        """Admit a per-call policy term and ∧-compose the host envelope onto its filter.

        Raises :class:`compactor.policy.PolicyAdmissionError`.
        """
        return AdmittedPolicy(with_envelope(admit_policy(term, fields=self._fields), self._envelope))

    async def chat(self, policy: AdmittedPolicy, request: ChatRequest, *, needs: frozenset[str] = frozenset(),
                   deadline: Deadline | None = None, timeout_s: float | None = None) -> RouteResult:
        """Route a chat call over the ``chat`` offers; ``json_mode`` requests need JSON-capable offers."""
        if request.json_mode:
            needs = needs | {"json_mode"}

        async def invoke(transport: Transport, offer: Offer, timeout: float) -> Response:
            return await transport.chat(offer, request, timeout)

        return await self._route("chat", policy, Requirements(needs=frozenset(needs)), invoke,
                                 deadline, timeout_s, RESPONSE_DECIMALS, chat_request_tokens(request))

    async def decide(self, policy: AdmittedPolicy, request: DecisionRequest, *,
                     deadline: Deadline | None = None, timeout_s: float | None = None) -> RouteResult:
        """Route a native decision over the ``decisions`` offers."""

        async def invoke(transport: Transport, offer: Offer, timeout: float) -> Response:
            return await transport.decide(offer, request, timeout)

        return await self._route("decisions", policy, Requirements(), invoke,
                                 deadline, timeout_s, NODE_DECIMALS, decision_request_tokens(request))

    def smallest_context(self, protocol: str) -> int | None:
        """The smallest ``context`` (tokens) among the enabled offers of ``protocol``; None when none says."""
        contexts = [offer.observations["context"] for offer in self._offers
                    if offer.protocol == protocol and offer.observations.get("disabled") is not True
                    and type(offer.observations.get("context")) is int and offer.observations["context"] > 0]
        return min(contexts, default=None)

    # -- state visible to policies ------------------------------------------------------------

    def _provider_disabled(self, provider: str) -> bool:
        return self._clock() < self._disabled_until.get(provider, -math.inf)

    def _disable_provider(self, provider: str) -> None:
        self._disabled_until[provider] = self._clock() + PROVIDER_DISABLE_TTL_S

    def _breaker(self, offer: Offer) -> _Breaker:
        return self._breakers.setdefault((offer.provider, offer.family), _Breaker())

    def _observed(self, offer: Offer) -> Offer:
        """The offer with router state overlaid on its ``disabled``/``breaker_open`` observations."""
        observations = dict(offer.observations)
        observations["disabled"] = observations.get("disabled") is True or self._provider_disabled(offer.provider)
        observations["breaker_open"] = self._clock() < self._breaker(offer).open_until
        return replace(offer, observations=observations)

    def _record_outcome(self, offer: Offer, failure: _Failure | None, action: Action | None) -> None:
        breaker = self._breaker(offer)
        if failure is None:
            breaker.consecutive_faults, breaker.open_until = 0, -math.inf
            return
        if failure.kind in PROVIDER_FAULT_KINDS:
            breaker.consecutive_faults += 1
            if breaker.consecutive_faults >= BREAKER_FAILURE_THRESHOLD:
                breaker.open_until = self._clock() + BREAKER_OPEN_S
        if action is not None and action.open_breaker_ms:
            breaker.open_until = max(breaker.open_until, self._clock() + action.open_breaker_ms / 1000)

    # -- one call -----------------------------------------------------------------------------

    def _slot(self, offer: Offer) -> asyncio.Semaphore | None:
        """The offer's concurrency semaphore on the running loop (None: unbounded)."""
        if not offer.max_concurrency:
            return None
        slots = self._slots.setdefault(asyncio.get_running_loop(), {})
        return slots.setdefault(offer.id, asyncio.Semaphore(offer.max_concurrency))

    async def _attempt(self, invoke: Invoke, offer: Offer, timeout: float,
                       deadline: Deadline | None = None) -> Response | _Failure:
        slot = self._slot(offer)
        if slot is None:
            return await self._call(invoke, offer, timeout)
        # Waiting for a free slot is bounded by the request's deadline, not charged to the attempt:
        # a busy offer is not a slow one.
        wait_s = deadline.remaining_s() if deadline is not None else None
        try:
            async with asyncio.timeout(wait_s):
                await slot.acquire()
        except TimeoutError:
            return _Failure(TIMEOUT, f"no free slot (max_concurrency {offer.max_concurrency}) before the deadline")
        try:
            return await self._call(invoke, offer, deadline.cap(timeout) if deadline is not None else timeout)
        finally:
            slot.release()

    async def _call(self, invoke: Invoke, offer: Offer, timeout: float) -> Response | _Failure:
        if timeout <= 0:
            return _Failure(TIMEOUT, "no time left for the call")
        try:
            # Cancelling an HTTP call on timeout closes its connection (docs/providers.md).
            async with asyncio.timeout(timeout):
                return await invoke(self._transport_for(offer), offer, timeout)
        except ProviderError as exc:
            return _Failure(exc.kind, _redact(exc.message, offer), exc.http_status, exc.cost_reported)
        except TimeoutError:
            return _Failure(TIMEOUT, f"no answer within {round(timeout * 1000)} ms")
        except Exception as exc:  # any transport defect is a failed attempt, never a crash
            return _Failure(UPSTREAM_ERROR, _redact(f"{type(exc).__name__}: {exc}", offer))

    @staticmethod
    def _attempt_timeout(timeout_s: float | None, deadline: Deadline | None) -> float:
        if deadline is not None:
            return deadline.cap(timeout_s)
        return DEFAULT_ATTEMPT_TIMEOUT_S if timeout_s is None else timeout_s

    async def _route(self, protocol: str, policy: AdmittedPolicy, requirements: Requirements, invoke: Invoke,
                     deadline: Deadline | None, timeout_s: float | None, decimals: int,
                     tokens: int = 0) -> RouteResult:
        started = self._clock()
        offers = [offer for offer in self._offers if offer.protocol == protocol]
        # Offers whose context the request does not fit are never sent it (docs/providers.md).
        too_small = [offer for offer in offers if not _fits(offer, tokens)]
        pairs = [(self._observed(offer), offer) for offer in offers if _fits(offer, tokens)]
        ranking = rank(policy.policy, [observed for observed, _ in pairs], requirements)
        originals = {id(observed): offer for observed, offer in pairs}
        run = _Failover(self, policy.policy, ranking, originals, invoke, deadline, timeout_s)
        run.trace["rejected"].extend({"offer": offer.id, "reason": CONTEXT_REJECTION,
                                      "estimated_tokens": tokens} for offer in too_small)
        result = await run.execute()
        result.latency_ms = round((self._clock() - started) * 1000)
        if result.ok and result.chosen is not None and result.response is not None:
            result.cost_usd, result.cost_basis = compute_cost(result.chosen, result.response, decimals)
        return result


class _Failover:
    """One routed call: walks the ranked offers under the FailPlan and records the decision path."""

    def __init__(self, router: Router, policy: Policy, ranking: Ranking, originals: dict[int, Offer],
                 invoke: Invoke, deadline: Deadline | None, timeout_s: float | None) -> None:
        self.router = router
        self.plan = policy.fail_plan
        self.candidates = [originals[id(entry.offer)] for entry in ranking.ranked]
        self.invoke = invoke
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.path: list[dict[str, Any]] = []
        self.failed_costs: list[float] = []
        self.last: _Failure | None = None
        self.trace: dict[str, Any] = {
            "policy_fingerprint": policy.fingerprint,
            "ranked": [
                {"offer": offer.id, "provider": offer.provider, "family": offer.family,
                 "score": _trace_score(entry.score)}
                for offer, entry in zip(self.candidates, ranking.ranked)
            ],
            "rejected": [
                {"offer": originals[id(r.offer)].id, "reason": r.reason} for r in ranking.rejected
            ],
            "decision_path": self.path,
        }

    def result(self, **fields: Any) -> RouteResult:
        failed_cost = math.fsum(self.failed_costs) if self.failed_costs else None
        return RouteResult(trace=self.trace, failed_cost_usd=failed_cost, **fields)

    def failed(self, kind: str, message: str) -> RouteResult:
        return self.result(ok=False, response=None, chosen=None, error_kind=kind, error_message=message)

    async def execute(self) -> RouteResult:
        if not self.candidates:
            rejected = len(self.trace["rejected"])
            return self.failed("no_candidates", f"no offer satisfies the policy ({rejected} rejected)")
        index = 0
        while index < len(self.candidates):
            offer = self.candidates[index]
            if self.router._provider_disabled(offer.provider):
                self.event("skipped", offer, reason="provider_disabled")
                index += 1
                continue
            outcome = await self.try_offer(offer)
            if isinstance(outcome, RouteResult):
                return outcome
            if outcome == ABORT:
                assert self.last is not None
                return self.failed(self.last.kind, self.last.message)
            if outcome == DISABLE_PROVIDER:
                self.router._disable_provider(offer.provider)
                self.path.append({"event": "provider_disabled", "provider": offer.provider,
                                  "ttl_ms": round(PROVIDER_DISABLE_TTL_S * 1000)})
            index = self.next_index(index, outcome)
        if self.last is None:
            return self.failed("no_candidates", "every ranked offer's provider is disabled")
        return self.failed(f"exhausted: {self.last.kind}", self.last.message)

    def next_index(self, index: int, verb: str) -> int:
        if verb != NEXT_PROVIDER_SAME_MODEL:
            return index + 1
        current = self.candidates[index]
        for later in range(index + 1, len(self.candidates)):
            offer = self.candidates[later]
            if offer.family == current.family and offer.provider != current.provider:
                return later
        return len(self.candidates)

    async def try_offer(self, offer: Offer) -> RouteResult | str:
        """Call one offer, retrying as the FailPlan says; a result, or the verb to continue with."""
        attempt = 0
        while True:
            timeout = self.router._attempt_timeout(self.timeout_s, self.deadline)
            if timeout <= 0:
                return self.failed(TIMEOUT, "deadline exhausted before the next attempt")
            attempt += 1
            started = self.router._clock()
            outcome = await self.router._attempt(self.invoke, offer, timeout, self.deadline)
            latency_ms = round((self.router._clock() - started) * 1000)
            if not isinstance(outcome, _Failure):
                self.router._record_outcome(offer, None, None)
                self.event("attempted", offer, attempt=attempt, latency_ms=latency_ms, error_kind=None,
                           http_status=None, error_message=None)
                return self.result(ok=True, response=outcome, chosen=offer)
            self.last = outcome
            if reported_cost(outcome.cost_reported) is not None:
                self.failed_costs.append(outcome.cost_reported)
            self.event("attempted", offer, attempt=attempt, latency_ms=latency_ms, error_kind=outcome.kind,
                       http_status=outcome.http_status, error_message=outcome.message,
                       **({"cost_reported": outcome.cost_reported} if outcome.cost_reported is not None else {}))
            action = self.plan.action_for(outcome.kind)
            self.router._record_outcome(offer, outcome, action)
            if action.action != RETRY_SAME:
                return action.action
            if attempt <= min(action.attempts, MAX_RETRIES_PER_OFFER) and await self.backoff(offer, action, attempt):
                continue
            return NEXT_CANDIDATE if action.then_action == RETRY_SAME else action.then_action

    async def backoff(self, offer: Offer, action: Action, retry: int) -> bool:
        """Wait before re-issue ``retry``; False when the wait would run past the deadline."""
        delay_s = action.backoff_before_retry(retry) / 1000
        if self.deadline is not None and delay_s >= self.deadline.remaining_s():
            return False
        self.event("retry_scheduled", offer, attempt=retry + 1, backoff_ms=round(delay_s * 1000))
        await self.router._sleep(delay_s)  # even 0 s yields, so instant failures never starve other calls
        return True

    def event(self, kind: str, offer: Offer, **details: Any) -> None:
        self.path.append({"event": kind, "offer": offer.id, "provider": offer.provider,
                          "family": offer.family, **details})
