"""Router: protocol partition, failover actions, deadlines, breakers, costs and traces."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.policy import DEFAULT_CHAT_POLICY, DEFAULT_DECISIONS_POLICY, PolicyAdmissionError
from compactor.providers.base import ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError
from compactor.router import MAX_RETRIES_PER_OFFER, PROVIDER_DISABLE_TTL_S, Router, compute_cost

Behaviour = Callable[[Offer, int], Any]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTransport:
    """Answers per offer id from a behaviour: a response, an exception to raise, or a coroutine."""

    def __init__(self, behaviours: dict[str, Behaviour]) -> None:
        self.behaviours = behaviours
        self.calls: list[tuple[str, float]] = []

    async def _run(self, offer: Offer, timeout_s: float) -> Any:
        self.calls.append((offer.id, timeout_s))
        outcome = self.behaviours[offer.id](offer, sum(1 for c in self.calls if c[0] == offer.id))
        if asyncio.iscoroutine(outcome):
            outcome = await outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        return await self._run(offer, timeout_s)

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        return await self._run(offer, timeout_s)


def offer(offer_id: str, *, provider: str | None = None, family: str = "fam", protocol: str = "chat",
          price_in: float | None = 1.0, price_out: float | None = 2.0, **observations: Any) -> Offer:
    return Offer(id=offer_id, provider=provider or offer_id, family=family, model=family, protocol=protocol,
                 transport="openai", price_in=price_in, price_out=price_out, observations=observations)


def ok(text: str = "hi", **fields: Any) -> Callable[[Offer, int], ChatResponse]:
    return lambda o, n: ChatResponse(text=text, tokens_in=fields.pop("tokens_in", 1000), tokens_out=500, **fields)


def fail(kind: str, **kwargs: Any) -> Callable[[Offer, int], ProviderError]:
    return lambda o, n: ProviderError(kind, f"{kind} from {o.id}", **kwargs)


def policy_with(failplan: list[Any], selector: list[Any] | None = None) -> list[Any]:
    return ["policy", ["top"], ["neg", ["field", "price_in"]], selector or ["argmax"], ["id"], failplan]


def make_router(offers: list[Offer], behaviours: dict[str, Behaviour], **kwargs: Any
                ) -> tuple[Router, FakeTransport, FakeClock, list[float]]:
    transport = FakeTransport(behaviours)
    clock = FakeClock()
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds

    router = Router(offers, transport_for=lambda o: transport, clock=clock, sleep=sleep, **kwargs)
    return router, transport, clock, sleeps


def events(result: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in result.trace["decision_path"] if e["event"] == kind]


async def test_cheapest_first_and_trace_shape() -> None:
    offers = [offer("dear", price_in=5), offer("cheap", price_in=1), offer("none", price_in=None)]
    router, transport, _, _ = make_router(offers, {o.id: ok(o.id) for o in offers})
    policy = router.admit_policy(DEFAULT_CHAT_POLICY)
    result = await router.chat(policy, ChatRequest(messages=[]))
    assert result.ok and result.chosen is offers[1] and result.response.text == "cheap"
    assert [r["offer"] for r in result.trace["ranked"]] == ["cheap", "dear", "none"]
    assert result.trace["ranked"][2]["score"] is None  # −inf is not JSON
    assert result.trace["policy_fingerprint"] == policy.fingerprint
    assert result.trace["rejected"] == []
    (attempt,) = events(result, "attempted")
    assert attempt == {"event": "attempted", "offer": "cheap", "provider": "cheap", "family": "fam", "attempt": 1,
                       "latency_ms": 0, "error_kind": None, "http_status": None, "error_message": None}
    json.dumps(result.trace, allow_nan=False)


async def test_protocol_partition_never_crosses() -> None:
    offers = [offer("chat1"), offer("dec1", protocol="decisions")]
    router, transport, _, _ = make_router(
        offers, {"chat1": ok(), "dec1": lambda o, n: DecisionResponse(model="d", answers={})})
    chat = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    decision = await router.decide(router.admit_policy(DEFAULT_DECISIONS_POLICY), DecisionRequest(state="s", questions={}))
    assert chat.chosen.id == "chat1" and decision.chosen.id == "dec1"
    assert [r["offer"] for r in chat.trace["ranked"]] == ["chat1"]
    assert [r["offer"] for r in decision.trace["ranked"]] == ["dec1"]


async def test_json_mode_needs_capable_offer() -> None:
    offers = [offer("plain", price_in=0.1), offer("json", price_in=9, supports_json_mode=True)]
    router, _, _, _ = make_router(offers, {o.id: ok() for o in offers})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[], json_mode=True))
    assert result.chosen.id == "json"
    assert result.trace["rejected"] == [{"offer": "plain", "reason": "missing_capability:json_mode"}]


async def test_no_candidates() -> None:
    router, _, _, _ = make_router([offer("a", disabled=True)], {})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert not result.ok and result.error_kind == "no_candidates"
    assert result.trace["rejected"] == [{"offer": "a", "reason": "not"}]


async def test_next_candidate_then_exhausted_with_last_kind() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, _, _ = make_router(offers, {"a": fail("rate_limit", http_status=429), "b": fail("timeout")})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert not result.ok and result.error_kind == "exhausted: timeout"
    assert result.error_message == "timeout from b"
    attempts = events(result, "attempted")
    assert [(e["offer"], e["error_kind"], e["http_status"]) for e in attempts] == [
        ("a", "rate_limit", 429), ("b", "timeout", None)]


async def test_failover_succeeds_on_second() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, _, _, _ = make_router(offers, {"a": fail("upstream_error", http_status=502), "b": ok("from b")})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert result.ok and result.chosen.id == "b" and result.error_kind is None


async def test_retry_same_with_backoff_array_then_next() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, _, sleeps = make_router(offers, {"a": fail("rate_limit"), "b": ok()})
    plan = ["always", {"action": "retry_same", "attempts": 3, "backoff_ms": [100, 250]}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert result.ok and result.chosen.id == "b"
    assert [c[0] for c in transport.calls] == ["a", "a", "a", "a", "b"]
    assert sleeps == [0.1, 0.25, 0.25]
    assert [e["backoff_ms"] for e in events(result, "retry_scheduled")] == [100, 250, 250]
    assert [e["attempt"] for e in events(result, "attempted")] == [1, 2, 3, 4, 1]


async def test_retry_same_succeeds_on_retry() -> None:
    offers = [offer("a")]
    flaky = lambda o, n: ProviderError("network_error", "reset") if n == 1 else ChatResponse(text="ok")  # noqa: E731
    router, transport, _, _ = make_router(offers, {"a": flaky})
    plan = ["always", {"action": "retry_same", "attempts": 1, "backoff_ms": 0}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert result.ok and len(transport.calls) == 2


async def test_retry_then_abort() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, _, _ = make_router(offers, {"a": fail("upstream_error"), "b": ok()})
    plan = ["always", {"action": "retry_same", "attempts": 1, "then_action": "abort"}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert not result.ok and result.error_kind == "upstream_error"
    assert [c[0] for c in transport.calls] == ["a", "a"]


async def test_retry_never_sleeps_past_deadline() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, _, sleeps = make_router(offers, {"a": fail("rate_limit"), "b": ok()})
    plan = ["always", {"action": "retry_same", "attempts": 5, "backoff_ms": 60_000}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]),
                               deadline=Deadline.after_ms(30_000))
    assert sleeps == [] and result.ok and result.chosen.id == "b"


async def test_abort_by_override() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, _, _ = make_router(offers, {"a": fail("auth_error", http_status=401), "b": ok()})
    plan = ["override", ["always", {"action": "next_candidate"}], "auth_error", {"action": "abort"}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert not result.ok and result.error_kind == "auth_error" and len(transport.calls) == 1


async def test_unknown_override_applies_to_unlisted_kinds() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, _, _ = make_router(offers, {"a": fail("bad_response"), "b": ok()})
    plan = ["override", ["always", {"action": "next_candidate"}], "unknown", {"action": "abort"}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert result.error_kind == "bad_response"


async def test_next_provider_same_model_skips_other_families() -> None:
    offers = [offer("a1", provider="pa", family="x", price_in=1), offer("b1", provider="pb", family="y", price_in=2),
              offer("a2", provider="pa", family="x", price_in=3), offer("c1", provider="pc", family="x", price_in=4)]
    router, transport, _, _ = make_router(offers, {o.id: (fail("timeout") if o.id == "a1" else ok(o.id)) for o in offers})
    plan = ["always", {"action": "next_provider_same_model"}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert result.chosen.id == "c1" and [c[0] for c in transport.calls] == ["a1", "c1"]


async def test_next_provider_same_model_exhausts_when_none() -> None:
    offers = [offer("a1", provider="pa", family="x", price_in=1), offer("b1", provider="pb", family="y", price_in=2)]
    router, transport, _, _ = make_router(offers, {"a1": fail("timeout"), "b1": ok()})
    result = await router.chat(router.admit_policy(policy_with(["always", {"action": "next_provider_same_model"}])),
                               ChatRequest(messages=[]))
    assert result.error_kind == "exhausted: timeout"


async def test_disable_provider_ttl() -> None:
    offers = [offer("a1", provider="pa", price_in=1), offer("a2", provider="pa", price_in=2),
              offer("b", provider="pb", price_in=3)]
    # A provider fault (429): disabling is shared state, so only such faults may set it (docs/reliability.md).
    router, transport, clock, _ = make_router(offers, {"a1": fail("rate_limit"), "a2": ok(), "b": ok()})
    plan = ["override", ["always", {"action": "next_candidate"}], "rate_limit", {"action": "disable_provider"}]
    policy = router.admit_policy(["policy", ["top"], ["neg", ["field", "price_in"]], ["argmax"], ["id"], plan])
    first = await router.chat(policy, ChatRequest(messages=[]))
    assert first.chosen.id == "b"
    assert events(first, "provider_disabled") == [{"event": "provider_disabled", "provider": "pa", "ttl_ms": 300000,
                                                   "scope": "caller"}]  # one caller: its own calls (see below)
    assert [e["offer"] for e in events(first, "skipped")] == ["a2"]
    # While disabled the `disabled` observation is set, so the default policy filters them out.
    second = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert {r["offer"]: r["reason"] for r in second.trace["rejected"]} == {"a1": "not", "a2": "not"}
    clock.now += PROVIDER_DISABLE_TTL_S + 1
    third = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert third.trace["rejected"] == [] and [c[0] for c in transport.calls][-2:] == ["a1", "a2"]


async def test_disabled_providers_are_per_router_instance() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    plan = ["always", {"action": "disable_provider"}]
    first, _, _, _ = make_router(offers, {"a": fail("timeout"), "b": ok()})
    await first.chat(first.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    other, transport, _, _ = make_router(offers, {"a": ok(), "b": ok()})
    result = await other.chat(other.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert result.chosen.id == "a"


async def test_all_skipped_is_no_candidates() -> None:
    offers = [offer("a")]
    router, _, _, _ = make_router(offers, {"a": fail("upstream_error")})
    policy = router.admit_policy(policy_with(["always", {"action": "disable_provider"}]))
    await router.chat(policy, ChatRequest(messages=[]))
    result = await router.chat(policy, ChatRequest(messages=[]))
    assert result.error_kind == "no_candidates" and events(result, "skipped")


async def test_breaker_opens_after_repeated_provider_faults() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, clock, _ = make_router(offers, {"a": fail("network_error"), "b": ok()})
    policy = router.admit_policy(DEFAULT_DECISIONS_POLICY)  # prefer(not breaker_open, argmax)
    for _ in range(3):
        await router.chat(policy, ChatRequest(messages=[]))
    result = await router.chat(policy, ChatRequest(messages=[]))
    assert [r["offer"] for r in result.trace["ranked"]] == ["b", "a"]
    clock.now += 31
    result = await router.chat(policy, ChatRequest(messages=[]))
    assert [r["offer"] for r in result.trace["ranked"]] == ["a", "b"]


async def test_caller_faults_do_not_open_breaker() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, _, _, _ = make_router(offers, {"a": fail("bad_request"), "b": ok()})
    policy = router.admit_policy(policy_with(["always", {"action": "next_candidate"}]))
    for _ in range(4):
        await router.chat(policy, ChatRequest(messages=[]))
    assert all(not router._observed(o).observations["breaker_open"] for o in offers)


async def test_open_breaker_ms_opens_immediately() -> None:
    offers = [offer("a", price_in=1)]
    router, _, _, _ = make_router(offers, {"a": fail("upstream_error")})  # a provider fault: shared state may change
    plan = ["always", {"action": "next_candidate", "open_breaker_ms": 5000}]
    await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert router._observed(offers[0]).observations["breaker_open"] is True


def test_a_policy_term_is_admitted_once_per_router() -> None:
    router, _, _, _ = make_router([offer("a")], {"a": ok()})
    first = router.admit_policy(DEFAULT_CHAT_POLICY)
    assert router.admit_policy(json.loads(json.dumps(DEFAULT_CHAT_POLICY))) is first
    assert router.admit_policy(DEFAULT_DECISIONS_POLICY) is not first
    with pytest.raises(PolicyAdmissionError):
        router.admit_policy(["policy", "not a term"])
    other, _, _, _ = make_router([offer("a")], {"a": ok()})
    assert other.admit_policy(DEFAULT_CHAT_POLICY) is not first


async def test_rankings_are_reused_until_the_router_state_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor import router as routing

    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, _, clock, _ = make_router(offers, {"a": fail("network_error"), "b": ok()})
    ranked: list[int] = []
    real_rank = routing.rank
    monkeypatch.setattr(routing, "rank", lambda *args, **kwargs: ranked.append(1) or real_rank(*args, **kwargs))
    policy = router.admit_policy(DEFAULT_DECISIONS_POLICY)  # prefer(not breaker_open, argmax)
    orders = []
    for _ in range(5):  # the third fault opens a's breaker: the last two calls rank b first
        orders.append([r["offer"] for r in (await router.chat(policy, ChatRequest(messages=[]))).trace["ranked"]])
    assert orders == [["a", "b"]] * 3 + [["b", "a"]] * 2
    assert len(ranked) == 2  # once per breaker state
    clock.now += 31
    result = await router.chat(router.admit_policy(DEFAULT_DECISIONS_POLICY), ChatRequest(messages=[]))
    assert [r["offer"] for r in result.trace["ranked"]] == ["a", "b"] and len(ranked) == 2  # known state again


async def test_attempt_timeout_is_min_of_timeout_and_deadline() -> None:
    offers = [offer("a")]
    router, transport, _, _ = make_router(offers, {"a": ok()})
    policy = router.admit_policy(DEFAULT_CHAT_POLICY)
    await router.chat(policy, ChatRequest(messages=[]), timeout_s=5.0, deadline=Deadline.after_ms(60_000))
    await router.chat(policy, ChatRequest(messages=[]), timeout_s=50.0, deadline=Deadline.after_ms(2_000))
    assert transport.calls[0][1] == 5.0
    assert 0 < transport.calls[1][1] <= 2.0


async def test_slow_transport_times_out_and_fails_over() -> None:
    offers = [offer("slow", price_in=1), offer("fast", price_in=2)]

    async def hang() -> ChatResponse:
        await asyncio.sleep(30)
        return ChatResponse(text="late")

    router, _, _, _ = make_router(offers, {"slow": lambda o, n: hang(), "fast": ok()})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]), timeout_s=0.05)
    assert result.ok and result.chosen.id == "fast"
    assert events(result, "attempted")[0]["error_kind"] == "timeout"


async def test_expired_deadline_stops_with_timeout() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]

    async def hang() -> ChatResponse:
        await asyncio.sleep(30)
        return ChatResponse(text="late")

    router, transport, _, _ = make_router(offers, {"a": lambda o, n: hang(), "b": ok()})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]),
                               deadline=Deadline.after_ms(50))
    assert not result.ok and result.error_kind == "timeout"
    assert [c[0] for c in transport.calls] == ["a"]


async def test_cancellation_propagates() -> None:
    started = asyncio.Event()

    async def hang() -> ChatResponse:
        started.set()
        await asyncio.sleep(30)
        return ChatResponse(text="late")

    router, _, _, _ = make_router([offer("a")], {"a": lambda o, n: hang()})
    task = asyncio.create_task(router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[])))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_unexpected_exception_is_upstream_error_without_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY_ENV", "sk-very-secret-value")
    keyed = Offer(id="k", provider="k", family="f", model="f", protocol="chat", transport="openai",
                  api_key_env="FAKE_KEY_ENV", price_in=1, price_out=1)
    router, _, _, _ = make_router([keyed], {"k": lambda o, n: RuntimeError(
        "boom sk-very-secret-value Authorization: Bearer abc123 " + "x" * 400)})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert result.error_kind == "exhausted: upstream_error"
    message = events(result, "attempted")[0]["error_message"]
    assert message.startswith("RuntimeError: boom ***") and len(message) == 300
    assert "secret" not in json.dumps(result.trace) and "abc123" not in json.dumps(result.trace)
    assert "secret" not in result.error_message


async def test_failed_attempt_cost_is_kept() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, _, _, _ = make_router(offers, {"a": fail("bad_response", cost_reported=0.002), "b": ok(cost_reported=0.001)})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert result.ok and result.failed_cost_usd == 0.002 and result.cost_usd == 0.001
    assert events(result, "attempted")[0]["cost_reported"] == 0.002


async def test_envelope_is_composed_and_narrows() -> None:
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, _, _, _ = make_router(offers, {"a": ok(), "b": ok()}, envelope=["not", ["provider_eq", "a"]])
    policy = router.admit_policy(["policy", ["top"], ["zero"], ["ordered"], ["id"], ["always", {"action": "abort"}]])
    assert '(not (provider_eq "a"))' in policy.encoding
    result = await router.chat(policy, ChatRequest(messages=[]))
    assert result.chosen.id == "b" and result.trace["rejected"] == [{"offer": "a", "reason": "not"}]


def test_bad_envelope_is_rejected_with_constrain_prefix() -> None:
    with pytest.raises(PolicyAdmissionError, match=r"^ir\.constrain: "):
        Router([], transport_for=lambda o: None, envelope=["zero"])


def test_router_declared_fields() -> None:
    router = Router([], transport_for=lambda o: None, fields={"cache_hot": "Bool"})
    router.admit_policy(["policy", ["is", "cache_hot"], ["zero"], ["argmax"], ["id"], ["always", {"action": "abort"}]])
    with pytest.raises(PolicyAdmissionError, match="undeclared field 'cache_hot'"):
        Router([], transport_for=lambda o: None).admit_policy(
            ["policy", ["is", "cache_hot"], ["zero"], ["argmax"], ["id"], ["always", {"action": "abort"}]])


# -- costs (docs/behaviour.md#cost-rules) ----------------------------------------------------------

def test_cost_reported_wins_and_rounds() -> None:
    o = offer("a", price_in=3, price_out=15)
    assert compute_cost(o, ChatResponse(text="", cost_reported=0.00123456789, tokens_in=1, tokens_out=1), 6) == (
        0.001235, "reported")
    decision = DecisionResponse(model="m", answers={}, cost_reported=0.0000001234567891234)
    assert compute_cost(o, decision, 12) == (0.000000123457, "reported")


def test_cost_computed_with_cached_tokens() -> None:
    o = offer("a", price_in=2.0, price_out=10.0)
    response = ChatResponse(text="", tokens_in=1_000_000, tokens_out=100_000, tokens_cached=500_000)
    assert compute_cost(o, response, 6) == (round(1.0 + 0.1 + 1.0, 6), "computed")


def test_cache_reads_and_writes_are_priced_at_the_offers_own_cache_prices() -> None:
    from dataclasses import replace

    # OpenAI's GPT-4.1 mini: cached input at a quarter of price_in, no cache-write surcharge (it reports none).
    gpt = replace(offer("gpt", price_in=0.4, price_out=1.6), price_cached_in=0.1, price_cache_write=0.4)
    response = ChatResponse(text="", tokens_in=1_000_000, tokens_out=100_000, tokens_cached=500_000)
    assert compute_cost(gpt, response, 6) == (round(0.2 + 0.05 + 0.16, 6), "computed")  # was 0.38: reads at 10 %
    nova = replace(offer("nova", price_in=0.035, price_out=0.14), price_cached_in=0.00875, price_cache_write=0.035)
    written = DecisionResponse(model="m", answers={}, tokens_in=1_000_000, tokens_out=0, tokens_cached=200_000,
                               tokens_cache_written=300_000)
    assert compute_cost(nova, written, 12) == (round(0.0175 + 0.00175 + 0.0105, 12), "computed")
    # an offer stating neither keeps the default factors (Claude's five-minute cache)
    assert compute_cost(offer("claude", price_in=0.8, price_out=4.0), written, 12) == (
        round(0.4 + 0.016 + 0.3, 12), "computed")
    # free input and output, but a cache price: not free
    cached_only = replace(offer("x", price_in=0, price_out=0), price_cached_in=1.0)
    assert compute_cost(cached_only, response, 6) == (0.5, "computed")


def test_cost_unknown_without_prices_or_tokens() -> None:
    assert compute_cost(offer("a", price_in=None), ChatResponse(text="", tokens_in=1, tokens_out=1), 6) == (None, None)
    assert compute_cost(offer("a"), ChatResponse(text=""), 6) == (None, None)
    assert compute_cost(offer("a"), ChatResponse(text="", cost_reported=-1.0), 6) == (None, None)


def test_free_offer_costs_zero() -> None:
    assert compute_cost(offer("b", price_in=0, price_out=0), ChatResponse(text=""), 6) == (0.0, "computed")


async def test_route_result_cost_precision_by_protocol() -> None:
    offers = [offer("c", price_in=0.3, price_out=0), offer("d", protocol="decisions", price_in=0.3, price_out=0)]
    router, _, _, _ = make_router(offers, {
        "c": lambda o, n: ChatResponse(text="", tokens_in=1, tokens_out=0),
        "d": lambda o, n: DecisionResponse(model="m", answers={}, tokens_in=1, tokens_out=0)})
    chat = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    decision = await router.decide(router.admit_policy(DEFAULT_DECISIONS_POLICY), DecisionRequest(state="", questions={}))
    assert (chat.cost_usd, chat.cost_basis) == (0.0, "computed")  # 3e-7 rounds away at 6 decimals
    assert (decision.cost_usd, decision.cost_basis) == (0.0000003, "computed")


def test_catalog_observations_are_declared_fields() -> None:
    offers = [offer("a", cache_hot=True, bench_rank=3, tier="partner"), offer("b", mixed=True),
              offer("c", mixed=1)]
    router = Router(offers, transport_for=lambda o: None)
    router.admit_policy(["policy", ["is", "cache_hot"], ["field", "bench_rank"], ["argmax"], ["id"],
                         ["always", {"action": "abort"}]])
    for undeclared in (["is", "mixed"], ["is", "tier"]):
        with pytest.raises(PolicyAdmissionError, match="undeclared field"):
            router.admit_policy(["policy", undeclared, ["zero"], ["argmax"], ["id"], ["always", {"action": "abort"}]])


async def test_retry_same_is_capped_and_yields_between_instant_failures() -> None:
    """A huge ``attempts`` against a provider that fails instantly: at most MAX_RETRIES_PER_OFFER re-issues,
    and every re-issue yields to the event loop so other calls keep running."""
    class Failing:
        calls = 0

        async def chat(self, offer, request, timeout_s):
            Failing.calls += 1
            raise ProviderError("upstream_error", "boom")

    offer = Offer(id="f/x", provider="f", family="x", model="x", protocol="chat", transport="fake")
    router = Router([offer], transport_for=lambda o: Failing())
    policy = router.admit_policy(["policy", ["top"], ["zero"], ["argmax"], ["id"],
                                  ["always", {"action": "retry_same", "attempts": 10**9}]])
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    result = await router.chat(policy, ChatRequest(messages=[{"role": "user", "content": "hi"}]),
                               deadline=Deadline.after_ms(5000))
    task.cancel()
    assert not result.ok
    assert Failing.calls == 1 + MAX_RETRIES_PER_OFFER
    assert ticks >= MAX_RETRIES_PER_OFFER


async def test_reasoning_exhausted_is_not_retried_on_the_same_offer() -> None:
    """An answer spent on reasoning is sent the same limit again by a re-issue, and is spent (and billed) again:
    ``retry_same`` moves on to the next offer at once, as for the other failures a re-issue repeats."""
    offers = [offer("a", price_in=1), offer("b", price_in=2)]
    router, transport, _, sleeps = make_router(offers, {"a": fail("reasoning_exhausted"), "b": ok()})
    plan = ["override", ["always", {"action": "next_candidate"}], "reasoning_exhausted",
            {"action": "retry_same", "attempts": 3}]
    result = await router.chat(router.admit_policy(policy_with(plan)), ChatRequest(messages=[]))
    assert result.ok and result.chosen.id == "b"
    assert [c[0] for c in transport.calls] == ["a", "b"] and sleeps == []


@pytest.mark.parametrize("stated, cached, written, defaults", [
    ({}, 400, None, ["price_cached_in"]),
    ({}, 400, 300, ["price_cached_in", "price_cache_write"]),
    ({"price_cached_in": 0.5}, 400, 300, ["price_cache_write"]),
    ({"price_cached_in": 0.5, "price_cache_write": 1.0}, 400, 300, None),
    ({}, None, None, None),  # nothing read from or written to a cache: no cache price was needed
    ({}, 0, 0, None),
])
async def test_the_trace_says_when_a_cache_price_was_a_default(stated: dict[str, float], cached: int | None,
                                                               written: int | None, defaults: list[str] | None) -> None:
    """docs/billing.md: an offer stating no cache price has cache reads and writes priced at Claude's factors of
    price_in, whatever its provider; the trace says which prices were such defaults (it did not say)."""
    a = Offer(id="a", provider="a", family="f", model="f", protocol="chat", transport="openai", price_in=1.0,
              price_out=2.0, **stated)
    router, _, _, _ = make_router([a], {"a": ok(tokens_cached=cached, tokens_cache_written=written)})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert result.ok and result.cost_basis == "computed"
    assert result.trace.get("default_cache_prices") == defaults


async def test_a_reported_cost_uses_no_default_cache_price() -> None:
    router, _, _, _ = make_router([offer("a")], {"a": ok(tokens_cached=400, cost_reported=0.001)})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    assert result.cost_basis == "reported" and "default_cache_prices" not in result.trace


async def test_a_rejected_answer_priced_with_a_default_cache_price_says_so() -> None:
    answered = ChatResponse(text="", finish_reason="length", tokens_in=1000, tokens_out=500, tokens_cached=600,
                            tokens_reasoning=500)
    spent = lambda o, n: ProviderError("reasoning_exhausted", "spent", answered=answered)  # noqa: E731
    router, _, _, _ = make_router([offer("a", price_in=1), offer("b", price_in=2)], {"a": spent, "b": ok()})
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), ChatRequest(messages=[]))
    failed = next(event for event in result.trace["decision_path"] if event.get("error_kind"))
    assert failed["cost_computed"] == pytest.approx((400 + 600 * 0.1) / 1e6 * 1.0 + 500 / 1e6 * 2.0)
    assert failed["default_cache_prices"] == ["price_cached_in"]
