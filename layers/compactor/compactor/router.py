"""The router: a Σ_pol policy over the catalog's offers, then failover across the ranked offers.

Generic: it knows offers, policies, transports and costs, never what the calls are for.

Per call: the offers of the call's protocol (``chat`` or ``decisions``; docs/behaviour.md#the-policy-language) are ranked
by the policy (with the host envelope composed in), then tried in order under the policy's
FailPlan (docs/behaviour.md#fallbacks). Router state (TTL-disabled providers, circuit breakers) lives in the instance and
is visible to policies as the ``disabled`` and ``breaker_open`` observations, as the calling caller sees them: one
caller's faults act for its own calls, two callers' for everyone's (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import field, replace
from typing import Any

from compactor.budget import Deadline
from compactor.call_record import tally as call_tally
from compactor.caller import current_caller
from compactor.cost import NODE_DECIMALS, RESPONSE_DECIMALS, default_cache_prices, priced, with_failed_attempts
from compactor.cost import reported as reported_cost
from compactor.jsonutil import dense_dumps, dense_size_bound, is_finite_number
from compactor.policy import Policy, admit_policy, admit_pred, with_envelope
from compactor.policy.failplan import ABORT, DISABLE_PROVIDER, NEXT_CANDIDATE, NEXT_PROVIDER_SAME_MODEL, RETRY_SAME, Action
from compactor.policy.fields import FieldDeclarations, fields_observed_in
from compactor.policy.ranking import Ranking, Requirements, rank
from compactor.policy.trace import OPERATOR_DETAIL
from compactor.providers.base import (
    AUTH_ERROR,
    BAD_REQUEST,
    CONTEXT_OVERFLOW,
    INVALID_DECISION,
    MAX_SANE_TOKENS,
    NETWORK_ERROR,
    RATE_LIMIT,
    REASONING_EXHAUSTED,
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
from compactor.providers.reasoning import found_generation, reasoning_room
from compactor.records import record

PROVIDER_DISABLE_TTL_S = 300.0
BREAKER_FAILURE_THRESHOLD = 3  # consecutive provider faults that open a breaker
BREAKER_OPEN_S = 30.0
DEFAULT_ATTEMPT_TIMEOUT_S = 60.0  # when neither timeout_s nor a deadline bounds an attempt
# Upstream politeness (docs/reliability.md). Whatever a caller's FailPlan says: `retry_same` re-issues one
# offer at most MAX_RETRIES_PER_OFFER times per call, and one request makes at most MAX_RETRIES_PER_REQUEST
# re-issues and MAX_UPSTREAM_CALLS_PER_REQUEST calls in all (see request_call_budget). Re-issues wait the
# policy's backoff_ms, or else an exponential backoff with jitter (BACKOFF_BASE_S doubling, times a random
# factor in [0.5, 1), at most BACKOFF_MAX_S), and never less than the provider's Retry-After.
MAX_RETRIES_PER_OFFER = 3
MAX_RETRIES_PER_REQUEST = 8
MAX_UPSTREAM_CALLS_PER_REQUEST = 512
BACKOFF_BASE_S = 0.2
BACKOFF_MAX_S = 10.0
# Client errors are not retried (the same request would fail the same way), except these statuses.
RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})
# The failures a re-issue of the same request to the same offer repeats, whatever the FailPlan says: `retry_same`
# moves on at once (its then_action). The client errors, and an answer spent on reasoning (the same output limit
# is spent again, and billed again: docs/providers.md "Reasoning models"). The one list of them.
NOT_RETRIED_KINDS = frozenset({BAD_REQUEST, CONTEXT_OVERFLOW, AUTH_ERROR, REASONING_EXHAUSTED})
ERROR_MESSAGE_LIMIT = 300
# Failures that say something about the provider's health and nothing about the request's content: only
# these change state shared by every caller (breakers, and provider disables a FailPlan asks for). A
# timeout counts only when the attempt had at least SHARED_TIMEOUT_MIN_S (a caller can ask for 1 ms).
# Any other failure's `disable_provider` skips the provider for the rest of that call only.
PROVIDER_FAULT_KINDS = frozenset({TIMEOUT, RATE_LIMIT, UPSTREAM_ERROR, NETWORK_ERROR})
SHARED_TIMEOUT_MIN_S = 5.0
# Whose failures they are (docs/reliability.md#isolation-one-callers-failures-are-that-callers): any failure may
# be the request's doing (a request over a per-request token limit answered 429, content a provider answers 500,
# a transcript too long to answer within the caller's timeout), so one caller's faults open a breaker and disable
# a provider for that caller's calls only; they act for every caller once SHARED_FAULT_CALLERS callers
# (``compactor.caller.current_caller``) each reached the breaker's threshold or disabled the provider. A router remembers at most TRACKED_CALLERS callers' own
# state per provider (breaker, disable); past that the oldest is dropped.
SHARED_FAULT_CALLERS = 2
TRACKED_CALLERS = 64

# Tokens estimated from UTF-8 bytes: 3 bytes a token errs on the large side for prose, code and JSON alike.
BYTES_PER_TOKEN_ESTIMATE = 3
# What Compactor's decision prompt adds around the state and questions (system prompt + output room).
DECISION_PROMPT_TOKENS = 600
CONTEXT_REJECTION = "context_too_small"
# Admitted policies and rankings (policies × offer states) a router remembers; all are dropped when full:
# beyond 256 entries or 1,048,576 characters of the policies' texts (rankings: encodings). A policy whose text
# (encoding) is over 8,192 characters is admitted (ranked) each time and never kept: the preset's and the
# corpus's are under 200, and a caller's megabyte of action record must not stay in the container
# (docs/performance.md "The admission and policy memos' memory").
_POLICIES_KEPT = 256
_RANKINGS_KEPT = 256
_POLICY_CHARS_KEPT_MAX = 8192
_MEMO_CHARS_MAX = 1 << 20

# Compiled on first use by ``re``'s cache, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_BEARER = r"(?i)bearer\s+\S+"
Response = ChatResponse | DecisionResponse
Invoke = Callable[[Transport, Offer, float], Awaitable[Response]]


@record
class RouteResult:
    """The outcome of routing one call: the response and the offer that gave it, or the error."""

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
    # Whether failed_cost_usd is all the failed attempts cost: each reported its cost or was refused with an
    # HTTP error status or redirected (not billed). A timeout or an unpriced bad answer may have been billed: unknown.
    failed_cost_known: bool = False
    # The provider's Retry-After (seconds) of the failure that ended a failed call, if it sent one: what the answer
    # of a flow that failed on it passes on (docs/behaviour.md#retry-after).
    retry_after_s: float | None = None

    def failure_cost(self) -> float | None:
        """What the failed attempts cost, when known (0.0 when nothing was billed or no offer was called)."""
        if self.error_kind == "no_candidates":
            return 0.0
        return (self.failed_cost_usd or 0.0) if self.failed_cost_known else None


@record(frozen=True)
class AdmittedPolicy:
    """A per-call policy with the host envelope composed in (what the router executes)."""

    policy: Policy

    @property
    def encoding(self) -> str:
        return self.policy.encoding

    @property
    def fingerprint(self) -> str:
        return self.policy.fingerprint


@record(frozen=True)
class _Failure:
    """One failed attempt, as failover reads it."""

    kind: str
    message: str
    http_status: int | None = None
    cost_reported: float | None = None
    retry_after_s: float | None = None
    timeout_s: float | None = None  # the attempt's own timeout, for TIMEOUT failures
    answered: Response | None = None  # a rejected answer whose usage prices the attempt (ProviderError.answered)
    sent: bool = True  # False: failed before its request left (ProviderError.sent): no model call, nothing billed
    detail: str | None = None  # the operator's words (ProviderError.detail): the trace's OPERATOR_DETAIL

    @property
    def says_provider_is_unwell(self) -> bool:
        """Whether this failure may change state shared by every caller (see PROVIDER_FAULT_KINDS)."""
        if self.kind not in PROVIDER_FAULT_KINDS:
            return False
        return self.kind != TIMEOUT or self.timeout_s is None or self.timeout_s >= SHARED_TIMEOUT_MIN_S

    @property
    def lets_a_caller_act_for_everyone(self) -> bool:
        """Whether a caller's FailPlan may act on this failure for every caller (a TTL disable, its
        ``open_breaker_ms``): a provider fault the request could not have caused. A timeout is not one: a
        caller chooses both the attempt's timeout (up to 40 s) and how long an answer it asks for, so one
        request asking for 4,096 tokens within 5 s disabled the provider for everyone for 300 s
        (docs/reliability.md). Timeouts still count toward the router's own breaker."""
        return self.says_provider_is_unwell and self.kind != TIMEOUT

    @property
    def retryable(self) -> bool:
        """Whether a re-issue may fare otherwise: not for client errors (only 408 and 429 among them are worth a
        retry) nor any of NOT_RETRIED_KINDS."""
        if self.http_status is not None and 400 <= self.http_status < 500:
            return self.http_status in RETRYABLE_CLIENT_STATUSES
        return self.kind not in NOT_RETRIED_KINDS


@record
class CallBudget:
    """What one request may still spend upstream (see :func:`request_call_budget`)."""

    calls_left: int = MAX_UPSTREAM_CALLS_PER_REQUEST
    retries_left: int = MAX_RETRIES_PER_REQUEST


_request_budget: ContextVar[CallBudget | None] = ContextVar("compactor_request_call_budget", default=None)


@contextmanager
def request_call_budget() -> Iterator[CallBudget]:
    """Bound the upstream calls of everything run inside (one request; its tasks share the budget)."""
    token = _request_budget.set(CallBudget())
    try:
        yield _request_budget.get()  # type: ignore[misc]
    finally:
        _request_budget.reset(token)


# The traces of the routed calls started inside :func:`routed_traces`, in this task.
_started_traces: ContextVar[list[dict[str, Any]] | None] = ContextVar("compactor_routed_traces", default=None)


@contextmanager
def routed_traces() -> Iterator[list[dict[str, Any]]]:
    """The traces of the routed calls run inside, as they are made: a caller that cancels a routed call (a flow
    node's timeout) reads in its trace the attempts it sent, the one cut off included (``attempted``,
    ``error_kind: "timeout"``), which billing counts as model calls (docs/billing.md)."""
    traces: list[dict[str, Any]] = []
    token = _started_traces.set(traces)
    try:
        yield traces
    finally:
        _started_traces.reset(token)


@record
class _Breaker:
    """An offer's circuit breaker: faults in a row (by caller) and until when it stays open, for every caller
    (``open_until``) or for one (``open_for``)."""

    consecutive_faults: int = 0
    open_until: float = -math.inf
    faults_by: dict[str | None, int] = field(default_factory=dict)  # this run of faults, by caller
    open_for: dict[str | None, float] = field(default_factory=dict)

    def is_open(self, now: float, caller: str | None) -> bool:
        return now < self.open_until or bool(self.open_for) and now < self.open_for.get(caller, -math.inf)

    def fault(self, caller: str | None, open_until: float) -> None:
        """Count a provider fault of ``caller``'s; open the breaker for it at ``caller``'s threshold, and for
        every caller once SHARED_FAULT_CALLERS callers reached it in this run of faults (one caller's faults
        and another's stray one are not enough)."""
        self.consecutive_faults += 1
        faults = self.faults_by[caller] = self.faults_by.pop(caller, 0) + 1
        _drop_oldest(self.faults_by)
        if faults < BREAKER_FAILURE_THRESHOLD:
            return
        self.open_caller(caller, open_until)
        if sum(1 for count in self.faults_by.values() if count >= BREAKER_FAILURE_THRESHOLD) >= SHARED_FAULT_CALLERS:
            self.open_until = max(self.open_until, open_until)

    def open_caller(self, caller: str | None, open_until: float) -> None:
        self.open_for[caller] = max(self.open_for.pop(caller, -math.inf), open_until)
        _drop_oldest(self.open_for)

    def close(self) -> None:
        self.consecutive_faults, self.open_until = 0, -math.inf
        if self.faults_by or self.open_for:
            self.faults_by.clear()
            self.open_for.clear()


def _drop_oldest(by_caller: dict[Any, Any]) -> None:
    """Keep a by-caller map within TRACKED_CALLERS (insertion order: the least recently written goes)."""
    while len(by_caller) > TRACKED_CALLERS:
        del by_caller[next(iter(by_caller))]


def compute_cost(offer: Offer, response: Response, decimals: int) -> tuple[float | None, str | None]:
    """docs/behaviour.md#the-x_router-block-and-usage ``(cost_usd, cost_basis)`` of one response from ``offer``.

    Reported cost (finite, ≥ 0) wins; else prices × tokens with cached input and cache writes at the offer's
    cache prices (by default 10 % and 125 % of ``price_in``, ``compactor.cost.priced``); an offer priced 0/0
    costs 0.0 whatever its token counts; otherwise unknown.
    """
    cost, basis, _ = _priced(offer, response, decimals)
    return cost, basis


def _tallied_cost(result: RouteResult, decimals: int) -> float | None:
    """What one routed call cost as a record prices it (an answer's with the billed failed attempts before it, a failed
    call's attempts'), None when unknown: what a call that crashed sums (``compactor.call_record.CallTally``)."""
    if result.ok:
        return with_failed_attempts(result.cost_usd, result.failed_cost_usd, decimals,
                                    failed_known=result.failed_cost_known)
    return result.failure_cost()


def _priced(offer: Offer, response: Response, decimals: int) -> tuple[float | None, str | None, tuple[str, ...]]:
    """:func:`compute_cost`, and the cache prices it took from the defaults (``compactor.cost.default_cache_prices``)."""
    provider_cost = reported_cost(response.cost_reported)
    if provider_cost is not None:
        return round(provider_cost, decimals), "reported", ()
    price_in, price_out = offer.price_in, offer.price_out
    if not (is_finite_number(price_in) and is_finite_number(price_out)):
        return None, None, ()
    if price_in == 0 and price_out == 0 and not offer.price_cached_in and not offer.price_cache_write:
        return 0.0, "computed", ()
    tokens_in, tokens_out = response.tokens_in, response.tokens_out
    if tokens_in is None or tokens_out is None or max(tokens_in, tokens_out) > MAX_SANE_TOKENS:
        return None, None, ()
    cached, written = getattr(response, "tokens_cached", None), getattr(response, "tokens_cache_written", None)
    computed = priced(price_in, price_out, tokens_in, tokens_out, cached, written,
                      price_cached_in=offer.price_cached_in, price_cache_write=offer.price_cache_write)
    return round(computed, decimals), "computed", default_cache_prices(
        tokens_in, cached, written, price_cached_in=offer.price_cached_in, price_cache_write=offer.price_cache_write)


def estimate_tokens(value: Any) -> int:
    """A generous token estimate of ``value`` (text, or anything JSON): UTF-8 bytes / 3, rounded up."""
    text = value if isinstance(value, str) else dense_dumps(value)
    return -(-len(text.encode("utf-8", errors="replace")) // BYTES_PER_TOKEN_ESTIMATE)


def tokens_bound(value: Any) -> int | None:
    """An upper bound of :func:`estimate_tokens` found without encoding ``value`` (None: no cheap bound)."""
    size = 4 * len(value) if isinstance(value, str) else dense_size_bound(value)
    return None if size is None else -(-size // BYTES_PER_TOKEN_ESTIMATE)


def chat_request_tokens(request: ChatRequest) -> int:
    """Estimated context a chat request takes: its messages plus the output allowance."""
    return estimate_tokens(request.messages) + (request.max_tokens or 0)


def chat_request_bound(request: ChatRequest) -> int | None:
    """An upper bound of :func:`chat_request_tokens` found without encoding the request."""
    bound = tokens_bound(request.messages)
    return None if bound is None else bound + (request.max_tokens or 0)


def decision_request_tokens(request: DecisionRequest) -> int:
    """Estimated context a decision takes when a chat model answers it (the largest of the transports)."""
    return estimate_tokens({"state": request.state, "questions": request.questions}) + DECISION_PROMPT_TOKENS


def decision_request_bound(request: DecisionRequest) -> int | None:
    """An upper bound of :func:`decision_request_tokens` found without encoding the request: its measured
    ASCII wire size when it carries one (never below the dense size: the same text with wider escapes and
    separators), else a bound from the string lengths."""
    if request.wire_bytes is not None:
        return -(-request.wire_bytes // BYTES_PER_TOKEN_ESTIMATE) + DECISION_PROMPT_TOKENS
    bound = tokens_bound({"state": request.state, "questions": request.questions})
    return None if bound is None else bound + DECISION_PROMPT_TOKENS


_REQUIREMENTS: dict[frozenset[str], Requirements] = {}


def _requirements(needs: frozenset[str]) -> Requirements:
    """The (frozen) requirements of a call that needs ``needs``, made once per set of needs."""
    known = _REQUIREMENTS.get(needs)
    if known is None:
        if len(_REQUIREMENTS) >= 64:
            _REQUIREMENTS.clear()
        known = _REQUIREMENTS[needs] = Requirements(needs=needs)
    return known


def usable_context(offer: Offer) -> int | None:
    """The tokens of ``offer``'s stated ``context`` a request and its answer may take: all of it, less the room
    kept for a reasoning offer's reasoning, or a model's found to reason (``reasoning_room``; docs/providers.md
    "Reasoning models"; the catalog holds a stated room below the context); None when the offer states no positive
    integer context."""
    context = offer.observations.get("context")
    if not (isinstance(context, int) and not isinstance(context, bool) and context > 0):
        return None
    room = reasoning_room(offer)
    return max(context - room, 1) if room else context


def _fits(offer: Offer, tokens: int) -> bool:
    """Whether a request of ``tokens`` fits the offer's :func:`usable_context` (written out: it runs for each offer
    of each call when the catalog states contexts)."""
    context = offer.observations.get("context")
    if not (isinstance(context, int) and not isinstance(context, bool) and context > 0):
        return True
    room = reasoning_room(offer)
    if room:
        context = max(context - room, 1)
    return context >= tokens


def _redact(message: str, offer: Offer) -> str:
    """Strip anything that looks like a credential, then cap the length."""
    secret = os.environ.get(offer.api_key_env) if offer.api_key_env else None
    if secret and len(secret) >= 4:
        message = message.replace(secret, "***")
    return re.sub(_BEARER, "Bearer ***", message)[:ERROR_MESSAGE_LIMIT]


def _trace_score(score: float) -> float | None:
    return score if math.isfinite(score) else None  # JSON has no infinities


class Router:
    """Ranks offers with a policy and fails over across them (docs/behaviour.md#the-policy-language).

    ``transport_for`` maps an offer to its transport; ``clock`` (seconds) drives provider-disable
    TTLs, breakers and latencies; ``sleep`` waits between retries and ``random`` (in [0, 1)) jitters
    those waits. Policies may observe the core fields, every extra boolean/numeric observation the
    offers carry (``cache_hot: true`` in the catalog declares ``cache_hot``), and ``fields`` declared
    explicitly (``{"cache_hot": "Bool"}``).
    """

    def __init__(self, offers: Sequence[Offer], *, envelope: list | None = None,
                 transport_for: Callable[[Offer], Transport], clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 random: Callable[[], float] = random.random,
                 fields: FieldDeclarations | None = None) -> None:
        self._offers = tuple(offers)
        # Each protocol's offers and the contexts they state, found once: the catalog is fixed for a router (the
        # usable contexts again when a model is found to reason: reasoning.found_generation).
        self._protocol_offers: dict[str, tuple[Offer, ...]] = {}
        self._protocol_contexts: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._fields: FieldDeclarations = {**fields_observed_in(self._offers), **(fields or {})}
        self._envelope = None if envelope is None else admit_pred(envelope, fields=self._fields)
        self._transport_for = transport_for
        self._clock = clock
        self._sleep = sleep
        self._random = random
        self._disabled_until: dict[str, float] = {}  # for every caller
        self._disabled_for: dict[str, dict[str | None, float]] = {}  # for one caller, by provider
        self._breakers: dict[tuple[str, str], _Breaker] = {}
        self._observed_copies: dict[tuple[int, bool, bool], Offer] = {}
        self._admitted: dict[str, AdmittedPolicy] = {}
        self._admitted_chars = 0  # the characters of the texts _admitted holds
        self._flow_admissions: Any = None
        self._rankings: dict[tuple[str, Requirements, tuple[int, ...]], tuple[Any, Ranking]] = {}
        self._rankings_chars = 0  # the characters of the policy encodings _rankings holds
        # Per event loop: one semaphore per offer with ``max_concurrency`` (docs/providers.md).
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = \
            weakref.WeakKeyDictionary()

    @property
    def flow_admissions(self) -> Any:
        """The flows admitted with this router's policy admission, by their terms' content (a
        ``compactor.flow.AdmissionCache``, docs/performance.md); made on first use, so that a router that
        never admits a flow does not import the flow runtime (which imports this module)."""
        if self._flow_admissions is None:
            from compactor.flow.admit import AdmissionCache

            self._flow_admissions = AdmissionCache()
        return self._flow_admissions

    def admit_policy(self, term: Any) -> AdmittedPolicy:
        """Admit a per-call policy term and ∧-compose the host envelope onto its filter.

        Raises :class:`compactor.policy.PolicyAdmissionError`. A term admitted before (the same JSON text)
        is not admitted again: the router keeps the last few hundred (docs/performance.md).
        """
        try:
            text: str | None = dense_dumps(term)
        except (TypeError, ValueError):
            text = None  # not JSON: admission says why
        known = self._admitted.get(text) if text is not None else None
        if known is not None:
            return known
        admitted = AdmittedPolicy(with_envelope(admit_policy(term, fields=self._fields), self._envelope))
        # Admission is a pure function of the term's JSON: the same text, the same policy.
        if text is not None and len(text) <= _POLICY_CHARS_KEPT_MAX:
            if len(self._admitted) >= _POLICIES_KEPT or self._admitted_chars + len(text) > _MEMO_CHARS_MAX:
                self._admitted.clear()
                self._admitted_chars = 0
            self._admitted[text] = admitted
            self._admitted_chars += len(text)
        return admitted

    async def chat(self, policy: AdmittedPolicy, request: ChatRequest, *, needs: frozenset[str] = frozenset(),
                   deadline: Deadline | None = None, timeout_s: float | None = None) -> RouteResult:
        """Route a chat call over the ``chat`` offers; ``json_mode`` requests need JSON-capable offers."""
        if request.json_mode:
            needs = needs | {"json_mode"}

        async def invoke(transport: Transport, offer: Offer, timeout: float) -> Response:
            return await transport.chat(offer, request, timeout)

        tokens = self._request_tokens("chat", lambda: chat_request_tokens(request), lambda: chat_request_bound(request))
        return await self._route("chat", policy, _requirements(frozenset(needs)), invoke,
                                 deadline, timeout_s, RESPONSE_DECIMALS, tokens)

    async def decide(self, policy: AdmittedPolicy, request: DecisionRequest, *,
                     deadline: Deadline | None = None, timeout_s: float | None = None) -> RouteResult:
        """Route a native decision over the ``decisions`` offers."""

        async def invoke(transport: Transport, offer: Offer, timeout: float) -> Response:
            return await transport.decide(offer, request, timeout)

        tokens = self._request_tokens("decisions", lambda: decision_request_tokens(request),
                                      lambda: decision_request_bound(request))
        return await self._route("decisions", policy, _requirements(frozenset()), invoke,
                                 deadline, timeout_s, NODE_DECIMALS, tokens)

    def _request_tokens(self, protocol: str, exact: Callable[[], int], bound: Callable[[], int | None]) -> int:
        """The tokens the ``protocol`` offers' contexts are checked against: the estimate (``exact``), unless
        no offer states a context or the cheap upper ``bound`` fits the smallest, when the request is not
        encoded for it at all (docs/performance.md)."""
        contexts = self._stated_contexts(protocol)
        if not contexts:
            return 0
        upper = bound()
        if upper is not None and upper <= min(contexts):
            return upper
        return exact()

    def _offers_of(self, protocol: str) -> tuple[Offer, ...]:
        """The catalog's offers of ``protocol``, in catalog order."""
        offers = self._protocol_offers.get(protocol)
        if offers is None:
            offers = self._protocol_offers[protocol] = tuple(o for o in self._offers if o.protocol == protocol)
        return offers

    def _stated_contexts(self, protocol: str) -> tuple[int, ...]:
        """The usable contexts (:func:`usable_context`) of the ``protocol`` offers that state one."""
        generation = found_generation()
        known = self._protocol_contexts.get(protocol)
        if known is not None and known[0] == generation:
            return known[1]
        contexts = tuple(context for offer in self._offers_of(protocol) for context in (usable_context(offer),)
                         if context is not None)
        self._protocol_contexts[protocol] = (generation, contexts)
        return contexts

    def smallest_context(self, protocol: str, policy: AdmittedPolicy | None = None) -> int | None:
        """The smallest usable ``context`` (tokens, :func:`usable_context`) among the offers of ``protocol`` a call
        may be routed to: the
        ones ``policy`` ranks (its whole failover order, over the catalog as declared, so an offer disabled
        for now still counts), else every enabled one; None when none of them states a context."""
        offers = [offer for offer in self._offers
                  if offer.protocol == protocol and offer.observations.get("disabled") is not True]
        if policy is not None:
            offers = [entry.offer for entry in self._ranking(policy.policy, offers, Requirements()).ranked]
        contexts = [context for offer in offers for context in (usable_context(offer),) if context is not None]
        return min(contexts, default=None)

    def first_choice_context(self, protocol: str, policy: AdmittedPolicy) -> int | None:
        """The usable ``context`` (tokens, :func:`usable_context`) of the offer ``policy`` ranks first among the
        ``protocol`` offers (the
        one a call would try first); None when no offer passes or the first states no context."""
        caller = current_caller.get()
        offers = [self._observed(offer, caller) for offer in self._offers if offer.protocol == protocol]
        for entry in self._ranking(policy.policy, offers, Requirements()).ranked[:1]:
            return usable_context(entry.offer)
        return None

    # -- state visible to policies ------------------------------------------------------------

    def _provider_disabled(self, provider: str, now: float | None = None, caller: str | None = None) -> bool:
        now = self._clock() if now is None else now
        if now < self._disabled_until.get(provider, -math.inf):
            return True
        own = self._disabled_for.get(provider)
        return bool(own) and now < own.get(caller, -math.inf)

    def _disable_provider(self, provider: str, caller: str | None = None) -> bool:
        """Disable ``provider`` for ``caller``'s calls, and for every caller's when SHARED_FAULT_CALLERS callers
        disabled it within the TTL; True when it is now disabled for every caller."""
        now = self._clock()
        until = now + PROVIDER_DISABLE_TTL_S
        own = self._disabled_for.setdefault(provider, {})
        own.pop(caller, None)
        own[caller] = until
        for other in [other for other, other_until in own.items() if other_until <= now]:
            del own[other]
        _drop_oldest(own)
        if len(own) >= SHARED_FAULT_CALLERS:
            self._disabled_until[provider] = until
        return now < self._disabled_until.get(provider, -math.inf)

    def _breaker(self, offer: Offer) -> _Breaker:
        key = (offer.provider, offer.family)
        breaker = self._breakers.get(key)
        return breaker if breaker is not None else self._breakers.setdefault(key, _Breaker())

    def _observed(self, offer: Offer, caller: str | None = None) -> Offer:
        """The offer with router state overlaid on its ``disabled``/``breaker_open`` observations, as ``caller``
        sees them: one copy per offer and state, made once (docs/performance.md); read it, never change it."""
        now = self._clock()
        disabled = offer.observations.get("disabled") is True or self._provider_disabled(offer.provider, now, caller)
        breaker = self._breaker(offer)
        breaker_open = now < breaker.open_until or bool(breaker.open_for) and breaker.is_open(now, caller)
        key = (id(offer), disabled, breaker_open)  # the offer is one of self._offers, alive as long as the router
        observed = self._observed_copies.get(key)
        if observed is None:
            observations = {**offer.observations, "disabled": disabled, "breaker_open": breaker_open}
            # setdefault: threads that race here keep one copy, and copies are never dropped, so the ids
            # in the rankings' keys stay theirs
            observed = self._observed_copies.setdefault(key, replace(offer, observations=observations))
        return observed

    def _ranking(self, policy: Policy, observed: list[Offer], requirements: Requirements) -> Ranking:
        """``rank`` of the observed offers, computed once per policy, offers and state: ranking is a pure
        function of them (a ``sample`` selector draws from a fixed seed), and the batches of a request
        route the same policy over the same offers (docs/performance.md)."""
        key = (policy.encoding, requirements, tuple(id(offer) for offer in observed))
        known = self._rankings.get(key)
        if known is not None and (known[0] is policy.fields or known[0] == policy.fields):
            return known[1]
        ranking = rank(policy, observed, requirements)
        size = len(key[0])
        if size > _POLICY_CHARS_KEPT_MAX:
            return ranking
        if len(self._rankings) >= _RANKINGS_KEPT or self._rankings_chars + size > _MEMO_CHARS_MAX:
            self._rankings.clear()
            self._rankings_chars = 0
        if key not in self._rankings:  # (a key kept with other fields is replaced)
            self._rankings_chars += size
        self._rankings[key] = (policy.fields, ranking)
        return ranking

    def _record_outcome(self, offer: Offer, failure: _Failure | None, action: Action | None,
                        caller: str | None = None) -> None:
        breaker = self._breaker(offer)
        if failure is None:
            if breaker.consecutive_faults:  # (every opening follows a fault)
                breaker.close()
            return
        if not failure.says_provider_is_unwell:
            return  # the caller's request, credentials or answer: nothing to tell other callers
        breaker.fault(caller, self._clock() + BREAKER_OPEN_S)
        if action is not None and action.open_breaker_ms and failure.lets_a_caller_act_for_everyone:
            # a caller may open it for its own calls, for at most BREAKER_OPEN_S
            breaker.open_caller(caller, self._clock() + min(action.open_breaker_ms / 1000, BREAKER_OPEN_S))

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
            # Waiting on other calls says nothing about the provider (timeout_s 0: no shared state changes).
            return _Failure(TIMEOUT, f"no free slot (max_concurrency {offer.max_concurrency}) before the deadline",
                            timeout_s=0.0, sent=False)
        try:
            return await self._call(invoke, offer, deadline.cap(timeout) if deadline is not None else timeout)
        finally:
            slot.release()

    async def _call(self, invoke: Invoke, offer: Offer, timeout: float) -> Response | _Failure:
        if timeout <= 0:
            return _Failure(TIMEOUT, "no time left for the call", timeout_s=timeout, sent=False)
        try:
            # Cancelling an HTTP call on timeout closes its connection (docs/providers.md).
            async with asyncio.timeout(timeout):
                return await invoke(self._transport_for(offer), offer, timeout)
        except ProviderError as exc:
            return _Failure(exc.kind, _redact(exc.message, offer), exc.http_status, exc.cost_reported,
                            retry_after_s=exc.retry_after_s, timeout_s=timeout, answered=exc.answered, sent=exc.sent,
                            detail=None if exc.detail is None else _redact(exc.detail, offer))
        except TimeoutError:
            return _Failure(TIMEOUT, f"no answer within {round(timeout * 1000)} ms", timeout_s=timeout)
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
        offers = self._offers_of(protocol)
        # Offers whose context the request does not fit are never sent it (docs/providers.md); with no
        # stated context (tokens 0) every offer fits.
        too_small = [offer for offer in offers if not _fits(offer, tokens)] if tokens else []
        caller = current_caller.get()
        pairs = [(self._observed(offer, caller), offer) for offer in offers if not tokens or _fits(offer, tokens)]
        ranking = self._ranking(policy.policy, [observed for observed, _ in pairs], requirements)
        originals = {id(observed): offer for observed, offer in pairs}
        run = _Failover(self, policy.policy, ranking, originals, invoke, deadline, timeout_s, decimals, caller)
        run.trace["rejected"].extend({"offer": offer.id, "reason": CONTEXT_REJECTION,
                                      "estimated_tokens": tokens} for offer in too_small)
        started_traces = _started_traces.get()
        if started_traces is not None:
            started_traces.append(run.trace)
        counted = call_tally()
        if counted is not None:  # what the call is known to have done, should it crash (docs/billing.md)
            counted.begin()
        try:
            result = await run.execute()
        except BaseException:  # cancelled (a node's timeout): the attempts it sent, the one cut off included (which
            # may have been paid: its cost unknown)
            if counted is not None:
                counted.add(run.trace, None)
            raise
        result.latency_ms = round((self._clock() - started) * 1000)
        if result.ok and result.chosen is not None and result.response is not None:
            result.cost_usd, result.cost_basis, defaults = _priced(result.chosen, result.response, decimals)
            if defaults:  # priced at Claude's cache factors, whatever the provider (docs/billing.md)
                result.trace["default_cache_prices"] = list(defaults)
        if counted is not None:
            counted.add(result.trace, result.response, _tallied_cost(result, decimals))
        return result


class _Failover:
    """One routed call: walks the ranked offers under the FailPlan and records the decision path."""

    def __init__(self, router: Router, policy: Policy, ranking: Ranking, originals: dict[int, Offer],
                 invoke: Invoke, deadline: Deadline | None, timeout_s: float | None, decimals: int,
                 caller: str | None = None) -> None:
        self.router = router
        self.caller = caller  # whose call: its provider faults change its own routing first
        self.decimals = decimals  # of a rejected answer's cost priced by its usage
        self.plan = policy.fail_plan
        self.candidates = [originals[id(entry.offer)] for entry in ranking.ranked]
        self.invoke = invoke
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.path: list[dict[str, Any]] = []
        self.failed_costs: list[float] = []
        self.failed_cost_known = True
        self.skipped_providers: set[str] = set()  # disabled for this call only (see PROVIDER_FAULT_KINDS)
        self.last: _Failure | None = None
        self.invoked = False  # whether the attempt under way called its transport (past any slot wait)
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
        return RouteResult(trace=self.trace, failed_cost_usd=failed_cost, failed_cost_known=self.failed_cost_known,
                           **fields)

    def failed(self, kind: str, message: str, retry_after_s: float | None = None) -> RouteResult:
        return self.result(ok=False, response=None, chosen=None, error_kind=kind, error_message=message,
                           retry_after_s=retry_after_s)

    async def execute(self) -> RouteResult:
        if not self.candidates:
            rejected = len(self.trace["rejected"])
            return self.failed("no_candidates", f"no offer satisfies the policy ({rejected} rejected)")
        index = 0
        while index < len(self.candidates):
            offer = self.candidates[index]
            if self.router._provider_disabled(offer.provider, caller=self.caller) \
                    or offer.provider in self.skipped_providers:
                self.event("skipped", offer, reason="provider_disabled")
                index += 1
                continue
            outcome = await self.try_offer(offer)
            if isinstance(outcome, RouteResult):
                return outcome
            if outcome == ABORT:
                assert self.last is not None
                return self.failed(self.last.kind, self.last.message, self.last.retry_after_s)
            if outcome == DISABLE_PROVIDER:
                assert self.last is not None
                if self.last.lets_a_caller_act_for_everyone:
                    everyone = self.router._disable_provider(offer.provider, self.caller)
                    self.path.append({"event": "provider_disabled", "provider": offer.provider,
                                      "ttl_ms": round(PROVIDER_DISABLE_TTL_S * 1000),
                                      "scope": "all" if everyone else "caller"})
                else:  # the request's own failure: skip the provider for this call, tell no one else
                    self.skipped_providers.add(offer.provider)
                    self.path.append({"event": "provider_disabled", "provider": offer.provider, "scope": "call"})
            index = self.next_index(index, outcome)
        if self.last is None:
            return self.failed("no_candidates", "every ranked offer's provider is disabled")
        return self.failed(f"exhausted: {self.last.kind}", self.last.message, self.last.retry_after_s)

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
            budget = _request_budget.get()
            if budget is not None:
                if budget.calls_left <= 0:
                    return self.failed("call_budget", "the request's upstream call budget is spent")
                budget.calls_left -= 1
            attempt += 1
            started = self.router._clock()
            self.invoked = False
            try:
                outcome = await self.router._attempt(self.send, offer, timeout, self.deadline)
            except asyncio.CancelledError:  # the caller gave up on the call (a flow node's timeout)
                if self.invoked:  # its request may have left: a model call, maybe billed (docs/billing.md)
                    self.event("attempted", offer, attempt=attempt,
                               latency_ms=round((self.router._clock() - started) * 1000), error_kind=TIMEOUT,
                               http_status=None, error_message="cancelled by the caller before an answer")
                raise
            latency_ms = round((self.router._clock() - started) * 1000)
            if not isinstance(outcome, _Failure):
                self.router._record_outcome(offer, None, None, self.caller)
                self.event("attempted", offer, attempt=attempt, latency_ms=latency_ms, error_kind=None,
                           http_status=None, error_message=None)
                return self.result(ok=True, response=outcome, chosen=offer)
            self.last = outcome
            priced_cost, _, defaults = (None, None, ()) if outcome.answered is None \
                else _priced(offer, outcome.answered, self.decimals)
            if reported_cost(outcome.cost_reported) is not None:
                self.failed_costs.append(outcome.cost_reported)
            elif priced_cost is not None:  # a rejected answer priced by its usage (reasoning tokens as output)
                self.failed_costs.append(priced_cost)
            elif outcome.sent and (outcome.http_status is None or outcome.http_status < 300):
                self.failed_cost_known = False  # answered (or cut off) without a price: maybe billed
            # (an error status or a redirect, never followed, is no answer, and a request that never left no call:
            # nothing billed)
            self.event("attempted", offer, attempt=attempt, latency_ms=latency_ms, error_kind=outcome.kind,
                       http_status=outcome.http_status, error_message=outcome.message,
                       **({} if outcome.sent else {"sent": False}),
                       **({} if outcome.detail is None else {OPERATOR_DETAIL: outcome.detail}),
                       **({"cost_reported": outcome.cost_reported} if outcome.cost_reported is not None else {}),
                       **({"cost_computed": priced_cost} if priced_cost is not None
                          and reported_cost(outcome.cost_reported) is None else {}),
                       **({"default_cache_prices": list(defaults)} if defaults
                          and reported_cost(outcome.cost_reported) is None else {}))
            if outcome.kind == INVALID_DECISION:  # the model answered: another offer is no remedy
                self.router._record_outcome(offer, None, None, self.caller)
                return self.failed(INVALID_DECISION, outcome.message)
            action = self.plan.action_for(outcome.kind)
            self.router._record_outcome(offer, outcome, action, self.caller)
            if action.action != RETRY_SAME:
                return action.action
            if outcome.retryable and attempt <= min(action.attempts, MAX_RETRIES_PER_OFFER) \
                    and self.take_retry() and await self.backoff(offer, action, attempt, outcome):
                continue
            return NEXT_CANDIDATE if action.then_action == RETRY_SAME else action.then_action

    async def send(self, transport: Transport, offer: Offer, timeout: float) -> Response:
        """The call's ``invoke``, noting that the attempt called its transport."""
        self.invoked = True
        return await self.invoke(transport, offer, timeout)

    @staticmethod
    def take_retry() -> bool:
        """Spend one of the request's re-issues; False when none is left."""
        budget = _request_budget.get()
        if budget is None:
            return True
        if budget.retries_left <= 0:
            return False
        budget.retries_left -= 1
        return True

    async def backoff(self, offer: Offer, action: Action, retry: int, failure: _Failure) -> bool:
        """Wait before re-issue ``retry``; False when the wait would run past the deadline."""
        if action.backoff_ms:  # the policy's own waits, as written
            delay_s = action.backoff_before_retry(retry) / 1000
        else:
            delay_s = min(BACKOFF_BASE_S * 2 ** (retry - 1), BACKOFF_MAX_S) * (0.5 + self.router._random() / 2)
        delay_s = max(delay_s, failure.retry_after_s or 0.0)
        if self.deadline is not None and delay_s >= self.deadline.remaining_s():
            return False
        self.event("retry_scheduled", offer, attempt=retry + 1, backoff_ms=round(delay_s * 1000))
        await self.router._sleep(delay_s)  # even 0 s yields, so instant failures never starve other calls
        return True

    def event(self, kind: str, offer: Offer, **details: Any) -> None:
        self.path.append({"event": kind, "offer": offer.id, "provider": offer.provider,
                          "family": offer.family, **details})
