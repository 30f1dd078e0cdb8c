"""The provider port: offers, requests, responses, error kinds and the transport protocol.

Everything that talks to a model (HTTP or built-in) implements :class:`Transport`. The router
(``compactor.router``) picks offers with a policy and calls ``transport.chat`` / ``transport.decide``.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Protocol

from compactor.records import record

# Error kinds a transport may raise (ProviderError.kind). FailPlans key on these.
TIMEOUT = "timeout"
RATE_LIMIT = "rate_limit"
AUTH_ERROR = "auth_error"
BAD_REQUEST = "bad_request"
CONTEXT_OVERFLOW = "context_overflow"
UPSTREAM_ERROR = "upstream_error"
BAD_RESPONSE = "bad_response"
NETWORK_ERROR = "network_error"
# A decision answer that breaks the decision rules (invented label, id, score ...): the call was made and may
# be billed, but it says nothing about the provider's health and another offer is not tried.
INVALID_DECISION = "invalid_decision"
# A reasoning model that spent its whole output budget on reasoning and answered nothing (finish_reason
# ``length``, reasoning tokens and no answer text; docs/providers.md "Reasoning models"): billed, no answer,
# and no fault of the provider's health. Another offer (or a larger reasoning budget) may answer.
REASONING_EXHAUSTED = "reasoning_exhausted"

# The most characters of a model name a provider's answer may put in traces and answers (docs/reliability.md
# "Bounded answers"): the catalog's names are far shorter; a longer one is cut by ``bounded_model``.
MAX_MODEL_CHARS = 256

# A token count a provider reports beyond this is junk: unknown, never a huge number (docs/reliability.md);
# reported costs are checked by ``compactor.cost.reported``.
MAX_SANE_TOKENS = 100_000_000


def sane_tokens(value: Any) -> int | None:
    """A reported token count when it is a JSON integer in [0, MAX_SANE_TOKENS], else None (unknown)."""
    return value if type(value) is int and 0 <= value <= MAX_SANE_TOKENS else None



class ProviderError(Exception):
    """A failed model call. ``message`` never contains credentials; it reaches the caller (``x_router``, a flow's
    error). ``detail``, when given, is the operator's own words for it (a key's variable or secret name,
    ``compactor.providers.keys``): kept in the routing trace the operator's tools read, never in an answer."""

    def __init__(self, kind: str, message: str, *, http_status: int | None = None,
                 cost_reported: float | None = None, retry_after_s: float | None = None,
                 answered: ChatResponse | DecisionResponse | None = None, sent: bool = True,
                 detail: str | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.detail = detail
        self.http_status = http_status
        # A provider may bill a call whose answer is then rejected (e.g. bad JSON).
        self.cost_reported = cost_reported
        self.retry_after_s = retry_after_s  # the provider's Retry-After, in seconds
        # The rejected answer, whose usage prices the attempt when no cost is reported (the router's
        # compute_cost): a reasoning model's answer spent on reasoning (REASONING_EXHAUSTED) is billed in full,
        # and so is a decision reply refused as bad JSON or an invalid decision (docs/behaviour.md "Cost rules").
        self.answered = answered
        # False when the call failed before its request left (no key, nothing to send, no connection made): no
        # provider saw it, so it is no model call and billed nothing (docs/behaviour.md "Cost rules").
        self.sent = sent


@record(frozen=True)
class Offer:
    """One catalog entry (docs/behaviour.md#catalog-and-transports). ``observations`` holds every policy-visible field."""

    id: str
    provider: str
    family: str
    model: str
    protocol: str  # "chat" | "decisions"
    # a name of compactor.providers.registry.TRANSPORTS (docs/providers.md)
    transport: str
    base_url: str | None = None
    api_key_env: str | None = None
    api_key_secret: str | None = None  # a secret's name or ARN, read at run time (compactor.providers.keys)
    region: str | None = None  # bedrock: the region of the model (default: the function's)
    max_concurrency: int | None = None  # calls in flight to this offer per container (None: unbounded)
    price_in: float | None = None  # USD per million input tokens
    price_out: float | None = None  # USD per million output tokens
    # USD per million input tokens read from / written to the provider's prompt cache; None: price_in times
    # compactor.cost's default factors (Anthropic's five-minute cache prices), docs/providers.md "Prompt caching"
    price_cached_in: float | None = None
    price_cache_write: float | None = None
    # Reasoning models (docs/providers.md "Reasoning models"): the effort (OpenAI's ``reasoning_effort``, or
    # Claude's adaptive thinking), and the tokens of output kept for reasoning (alone, Claude's extended-thinking
    # budget), both checked against the transport when the catalog is loaded (compactor.providers.reasoning).
    reasoning_effort: str | None = None
    reasoning_budget_tokens: int | None = None
    observations: dict[str, Any] = field(default_factory=dict)


@record(frozen=True)
class CacheBoundary:
    """Where a request's cacheable prefix ends: after the first ``chars`` characters of the text of
    message ``message`` (a string content), every message before it included. Related requests repeat
    that prefix byte for byte, so a provider's prompt cache may keep it. Transports whose provider needs
    a marker put it there when the offer allows (``compactor.providers.prompt_cache``); the others send
    the request as it is (docs/providers.md "Prompt caching")."""

    message: int
    chars: int


@record
class ChatRequest:
    """One chat call: the messages and what the reply may be."""

    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    json_mode: bool = False
    # JSON mode: each string value of the reply at most this many UTF-8 bytes, all of them together at
    # most the total (an llm node's options, docs/behaviour.md#the-flow-ir). A transport that cannot
    # pass them on relies on the prompt, which states them in words.
    max_string_bytes: int | None = None
    max_total_string_bytes: int | None = None
    # JSON mode: names the reply should keep where its input mentions them (an llm node's ``keep_names``);
    # likewise stated in the prompt for transports that cannot pass them on.
    keep_names: tuple[str, ...] = ()
    cache_boundary: CacheBoundary | None = None


@record
class ChatResponse:
    """A chat call's reply and the usage the provider reported."""

    text: str | None
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    served_model_id: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    tokens_total: int | None = None
    tokens_cached: int | None = None  # input tokens read from the provider's prompt cache
    tokens_cache_written: int | None = None  # input tokens written to it (billed above price_in, compactor.cost)
    # output tokens the model spent reasoning, part of ``tokens_out``, read for an answer stopped at its limit
    # (OpenAI's reasoning_tokens) or without text (Anthropic and Bedrock, which do not count them apart: all of
    # ``tokens_out`` when the answer is thinking and no text); None otherwise
    tokens_reasoning: int | None = None
    cost_reported: float | None = None  # provider-reported USD, wins over prices
    # the answer reports reasoning (openai: reasoning tokens, or a reasoning_content / reasoning text), whatever
    # its finish: how a model that takes max_tokens is found to reason (compactor.providers.reasoning)
    reasoned: bool = False


def bounded_model(value: Any) -> Any:
    """The ``model`` a provider's answer names, as traces and answers may carry it: a string of more than
    :data:`MAX_MODEL_CHARS` characters is cut to that many, its last one ``…``; anything else as it is (the
    transport's own checks decide about it). Every transport reading a provider's model name passes it here."""
    if type(value) is str and len(value) > MAX_MODEL_CHARS:
        return value[:MAX_MODEL_CHARS - 1] + "…"
    return value


# The finish_reason of an answer the model refused or a filter stopped: OpenAI's own (and its message ``refusal``),
# Anthropic's ``stop_reason: "refusal"``, Bedrock's guardrails all read as this.
REFUSED = "content_filter"


def unfinished(response: ChatResponse) -> str | None:
    """Why ``response`` is not an answer its model finished, in words for a failure message, or ``None`` when it is.

    One rule for every caller that takes a chat answer as its result: the seal's summary, a JSON-mode llm
    node's reply and a decision asked through a chat model (docs/reliability.md "Legacy seal never grows the
    transcript"). An answer cut off at ``max_tokens`` (``finish_reason: "length"``), refused or filtered
    (``"content_filter"``: OpenAI's, Anthropic's ``stop_reason: "refusal"``, Bedrock's guardrails), or tool calls
    instead of the answer (a ``"tool_calls"`` / ``"function_call"`` finish, or calls proposed) is not finished."""
    reason = response.finish_reason
    if reason == "length":
        if spent_on_reasoning(response):
            return (f"spent its whole output budget on reasoning ({response.tokens_reasoning} reasoning tokens, "
                    "no answer text; finish_reason length)")
        return "cut off (finish_reason length)"
    if reason == REFUSED:
        return "refused or filtered (finish_reason content_filter)"
    if response.tool_calls or reason in ("tool_calls", "function_call"):
        return "tool calls instead of an answer"
    return None


def spent_on_reasoning(response: ChatResponse) -> bool:
    """Whether ``response`` is a reasoning model's answer cut off at its output limit before any answer text:
    ``finish_reason: "length"``, reasoning tokens and no text (docs/providers.md "Reasoning models"). The
    failure is :data:`REASONING_EXHAUSTED`, which says so, rather than an empty or cut-off answer."""
    return response.finish_reason == "length" and bool(response.tokens_reasoning) \
        and not (response.text and response.text.strip())


@record
class DecisionRequest:
    """One decision call: the shared state and the questions to answer."""

    state: Any
    questions: dict[str, Any]
    # Names of the state's leading members that related requests repeat unchanged: a transport that
    # writes a prompt marks its cacheable prefix after them (docs/providers.md "Prompt caching").
    cache_prefix: tuple[str, ...] = ()
    # The ASCII wire size of ``{"state": …, "questions": …}``, set only by a caller that checked the payload
    # with ``decision_validation`` (the flow runtime, which measures it for the 32 000-byte bound): the
    # router's context check takes it as its bound instead of walking the state, and the transports do not
    # check the payload again (docs/performance.md).
    wire_bytes: int | None = None


@record
class DecisionResponse:
    """A decision call's answers and the usage the provider reported."""

    model: str
    answers: dict[str, Any]
    usage: dict[str, Any] | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    tokens_total: int | None = None
    tokens_cached: int | None = None
    tokens_cache_written: int | None = None
    cost_reported: float | None = None


class Transport(Protocol):
    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse: ...

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse: ...
