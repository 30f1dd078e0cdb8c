"""Callers cannot hurt each other or the providers (docs/reliability.md): shared provider state changes only
on provider faults, a caller's FailPlan affects its own request, retries are polite and bounded.

The router talks to a fake provider on 127.0.0.1 through the real HTTP transports."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from compactor import router as router_module
from compactor import service
from compactor.budget import Deadline
from compactor.caller import calling_as
from compactor.models import CompactRequest
from compactor.policy import DEFAULT_CHAT_POLICY, DEFAULT_DECISIONS_POLICY
from compactor.providers.base import ChatRequest, Offer
from compactor.providers.http import RETRY_AFTER_MAX_S, parse_go_duration, parse_retry_after, retry_after_of
from compactor.providers.registry import transport_for
from compactor.router import (
    BREAKER_OPEN_S,
    MAX_RETRIES_PER_OFFER,
    MAX_RETRIES_PER_REQUEST,
    Router,
    request_call_budget,
)
from fakes.provider_server import FakeProviderServer, Reply, chat_reply
from fakes.transcripts import agent_transcript

OVERFLOW = Reply(400, {"error": {"message": "This model's maximum context length is 8192 tokens",
                                 "code": "context_length_exceeded"}})
LONG = "The agent ran the migration; two tables still lack indexes and the cron job is disabled. " * 8


def transcript() -> list[dict[str, Any]]:
    return agent_transcript(LONG)


def chat_offer(fake: FakeProviderServer, offer_id: str, provider: str, price_in: float) -> Offer:
    return Offer(id=offer_id, provider=provider, family=f"{provider}-fam", model=f"{provider}-model",
                 protocol="chat", transport="openai", base_url=fake.base_url, price_in=price_in, price_out=1.0)


class Sleeps:
    """An injected ``sleep`` that records the waits and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def make_router(fake: FakeProviderServer, sleeps: Sleeps | None = None, rand: float = 0.0) -> Router:
    offers = [chat_offer(fake, "a/chat", "pa", 1.0), chat_offer(fake, "b/chat", "pb", 2.0)]
    return Router(offers, transport_for=transport_for, sleep=sleeps or Sleeps(), random=lambda: rand)


def policy(plan: list[Any]) -> list[Any]:
    return ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
            ["argmax"], ["id"], plan]


async def ask(router: Router, plan: Any, deadline_ms: int = 30_000) -> Any:
    """One routed chat call ("hi") under the policy IR ``plan``, within ``deadline_ms``."""
    return await router.chat(router.admit_policy(plan), ChatRequest(messages=[{"role": "user", "content": "hi"}]),
                             deadline=Deadline.after_ms(deadline_ms))


def served_models(fake: FakeProviderServer) -> list[str]:
    return [request.json["model"] for request in fake.requests]


# -- isolation (finding 1) -------------------------------------------------------------------------

async def test_one_callers_failplan_never_disables_a_provider_for_the_next_caller(
        fake_provider: FakeProviderServer) -> None:
    router = make_router(fake_provider)
    hostile = router.admit_policy(policy(["always", {"action": "disable_provider", "open_breaker_ms": 10**9}]))
    fake_provider.enqueue(OVERFLOW, OVERFLOW)  # the first caller's huge request is refused by both offers
    first = await router.chat(hostile, ChatRequest(messages=[{"role": "user", "content": "x" * 1000}]),
                              deadline=Deadline.after_ms(10_000))
    assert not first.ok and served_models(fake_provider) == ["pa-model", "pb-model"]
    assert [e.get("scope") for e in first.trace["decision_path"] if e["event"] == "provider_disabled"] == [
        "call", "call"]

    second = await ask(router, DEFAULT_CHAT_POLICY, 10_000)
    assert second.ok and second.chosen.id == "a/chat"  # the cheapest offer, neither disabled nor broken
    assert second.trace["rejected"] == [] and served_models(fake_provider)[-1] == "pa-model"


async def test_a_callers_tiny_timeout_says_nothing_about_the_provider(fake_provider: FakeProviderServer) -> None:
    router = make_router(fake_provider)
    fake_provider.responder = lambda request: chat_reply("late", delay_s=1.0)
    hostile = router.admit_policy(policy(["always", {"action": "disable_provider"}]))
    for _ in range(4):  # more than the breaker threshold
        result = await router.chat(hostile, ChatRequest(messages=[{"role": "user", "content": "hi"}]),
                                   timeout_s=0.01)
        assert result.error_kind == "exhausted: timeout"
    fake_provider.responder = None
    second = await ask(router, DEFAULT_CHAT_POLICY, 10_000)
    assert second.ok and second.chosen.id == "a/chat" and second.trace["rejected"] == []


async def test_a_timeout_a_caller_can_cause_never_lets_its_failplan_disable_the_provider_for_everyone(
        fake_provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A caller picks the attempt's timeout (a flow node's timeout_ms, up to 40 s) and how long an answer it asks
    # for: 4,096 tokens within 5 s times out on a healthy provider. Its FailPlan then disabled the provider for
    # every caller for 300 s and opened its breaker. Scaled down here: 5 s → 50 ms.
    monkeypatch.setattr(router_module, "SHARED_TIMEOUT_MIN_S", 0.05)
    router = make_router(fake_provider)
    fake_provider.responder = lambda request: chat_reply("a very long answer", delay_s=1.0)
    hostile = router.admit_policy(policy(["always", {"action": "disable_provider", "open_breaker_ms": 10**9}]))
    first = await router.chat(hostile, ChatRequest(messages=[{"role": "user", "content": "write 4096 tokens"}]),
                              timeout_s=0.1)
    assert first.error_kind == "exhausted: timeout"
    assert [e.get("scope") for e in first.trace["decision_path"] if e["event"] == "provider_disabled"] == [
        "call", "call"]
    fake_provider.responder = None
    second = await ask(router, DEFAULT_CHAT_POLICY, 10_000)
    assert second.ok and second.chosen.id == "a/chat"
    assert not any(e["event"] == "skipped" for e in second.trace["decision_path"])


async def test_provider_faults_still_disable_and_a_caller_opens_a_breaker_for_a_bounded_time(
        fake_provider: FakeProviderServer) -> None:
    now = [1000.0]
    offers = [chat_offer(fake_provider, "a/chat", "pa", 1.0), chat_offer(fake_provider, "b/chat", "pb", 2.0)]
    router = Router(offers, transport_for=transport_for, sleep=Sleeps(), clock=lambda: now[0])
    fake_provider.enqueue(Reply(503, {"error": {"message": "overloaded"}}))
    plan = policy(["always", {"action": "disable_provider", "open_breaker_ms": 10**9}])
    result = await ask(router, plan, 10_000)
    assert result.ok and result.chosen.id == "b/chat"
    assert {"event": "provider_disabled", "provider": "pa", "ttl_ms": 300_000, "scope": "caller"} \
        in result.trace["decision_path"]
    assert router._observed(offers[0]).observations["breaker_open"] is True
    now[0] += BREAKER_OPEN_S + 1  # the operator's ceiling, not the caller's 10^9 ms
    assert router._observed(offers[0]).observations["breaker_open"] is False


# -- one caller's failures are that caller's (docs/reliability.md) ---------------------------------------

# The default decisions policy's order, over the chat offers: closed breakers first, then the cheapest.
BREAKER_AWARE = ["policy", *DEFAULT_DECISIONS_POLICY[1:]]
TOO_LARGE = Reply(429, {"error": {"message": "Request too large for pa-model on tokens per min (TPM): Limit 30000, "
                                             "Requested 250000.", "code": "rate_limit_exceeded"}})


async def ask_as(caller: str, router: Router, plan: Any, **options: Any) -> Any:
    with calling_as(caller):
        return await router.chat(router.admit_policy(plan), ChatRequest(messages=[{"role": "user", "content": "hi"}]),
                                 **options)


def ranked(result: Any) -> list[str]:
    return [entry["offer"] for entry in result.trace["ranked"]]


async def test_one_callers_timeouts_open_the_breaker_for_its_own_calls_only(
        fake_provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A caller whose own requests time out (a huge transcript, a long answer asked within a node's 5 s) opened the
    # cheapest offer's breaker after three timeouts, and for 30 s every caller's decisions went to a dearer offer
    # first. Scaled down here: the 5 s that count toward a breaker → 50 ms.
    monkeypatch.setattr(router_module, "SHARED_TIMEOUT_MIN_S", 0.05)
    router = make_router(fake_provider)
    fake_provider.responder = lambda request: chat_reply("late", delay_s=1.0 if request.json["model"] == "pa-model"
                                                         else 0.0)
    for _ in range(3):
        result = await ask_as("key-slow", router, BREAKER_AWARE, timeout_s=0.1)
        assert result.ok and result.chosen.id == "b/chat"
    assert ranked(await ask_as("key-slow", router, BREAKER_AWARE, timeout_s=0.1)) == ["b/chat", "a/chat"]
    fake_provider.responder = None
    other = await ask_as("key-other", router, BREAKER_AWARE, deadline=Deadline.after_ms(10_000))
    assert ranked(other) == ["a/chat", "b/chat"] and other.chosen.id == "a/chat"


async def test_a_429_one_callers_request_provokes_disables_the_provider_for_that_caller_only(
        fake_provider: FakeProviderServer) -> None:
    # Some providers answer a request over their per-request token limit 429: its FailPlan's disable_provider
    # disabled the provider for every caller for 300 s.
    router = make_router(fake_provider)
    hostile = policy(["always", {"action": "disable_provider"}])
    fake_provider.enqueue(TOO_LARGE)
    first = await ask_as("key-huge", router, hostile, deadline=Deadline.after_ms(10_000))
    assert first.ok and first.chosen.id == "b/chat"
    assert [e.get("scope") for e in first.trace["decision_path"] if e["event"] == "provider_disabled"] == ["caller"]
    again = await ask_as("key-huge", router, DEFAULT_CHAT_POLICY, deadline=Deadline.after_ms(10_000))
    assert again.chosen.id == "b/chat"  # its own calls skip the provider for the TTL
    other = await ask_as("key-other", router, DEFAULT_CHAT_POLICY, deadline=Deadline.after_ms(10_000))
    assert other.ok and other.chosen.id == "a/chat" and other.trace["rejected"] == []


async def test_a_provider_failing_two_callers_is_down_for_everyone(fake_provider: FakeProviderServer) -> None:
    router = make_router(fake_provider)
    down = Reply(503, {"error": {"message": "overloaded"}})
    plan = policy(["always", {"action": "disable_provider"}])
    fake_provider.responder = lambda request: down if request.json["model"] == "pa-model" else chat_reply("ok")
    scopes = []
    for caller in ("key-1", "key-2"):
        result = await ask_as(caller, router, plan, deadline=Deadline.after_ms(10_000))
        assert result.chosen.id == "b/chat"
        scopes += [e["scope"] for e in result.trace["decision_path"] if e["event"] == "provider_disabled"]
    assert scopes == ["caller", "all"]
    third = await ask_as("key-3", router, DEFAULT_CHAT_POLICY, deadline=Deadline.after_ms(10_000))
    assert {r["offer"]: r["reason"] for r in third.trace["rejected"]} == {"a/chat": "not"}
    router._disabled_until.clear()  # its breaker too: when two callers each saw three faults in a row
    router._disabled_for.clear()
    onward = policy(["always", {"action": "next_candidate"}])
    for caller in ("key-1", "key-1", "key-2"):  # with their faults above (one each): key-1 three, key-2 two
        await ask_as(caller, router, onward, deadline=Deadline.after_ms(10_000))
    assert ranked(await ask_as("key-4", router, BREAKER_AWARE, deadline=Deadline.after_ms(10_000)))[0] == "a/chat"
    await ask_as("key-2", router, onward, deadline=Deadline.after_ms(10_000))
    assert ranked(await ask_as("key-4", router, BREAKER_AWARE, deadline=Deadline.after_ms(10_000)))[0] == "b/chat"


# -- polite retries (finding 6) --------------------------------------------------------------------

async def test_retry_after_is_honoured_and_retries_are_capped(fake_provider: FakeProviderServer) -> None:
    sleeps = Sleeps()
    router = make_router(fake_provider, sleeps)
    fake_provider.responder = lambda request: Reply(429, {"error": {"message": "slow down"}},
                                                    headers={"Retry-After": "2"})
    plan = policy(["always", {"action": "retry_same", "attempts": 1000, "then_action": "abort"}])
    result = await ask(router, plan)
    assert not result.ok and result.error_kind == "rate_limit"
    assert len(fake_provider.requests) == 1 + MAX_RETRIES_PER_OFFER
    assert len(sleeps.waits) == MAX_RETRIES_PER_OFFER and all(wait >= 2.0 for wait in sleeps.waits)


async def test_retry_after_beyond_the_deadline_moves_on_at_once(fake_provider: FakeProviderServer) -> None:
    sleeps = Sleeps()
    router = make_router(fake_provider, sleeps)
    fake_provider.enqueue(Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "120"}))
    plan = policy(["always", {"action": "retry_same", "attempts": 5}])
    result = await ask(router, plan, 10_000)
    assert result.ok and result.chosen.id == "b/chat" and sleeps.waits == []


async def test_backoff_is_exponential_with_jitter(fake_provider: FakeProviderServer) -> None:
    waits = {}
    for rand in (0.0, 0.999):
        sleeps = Sleeps()
        router = make_router(fake_provider, sleeps, rand=rand)
        fake_provider.responder = lambda request: Reply(502, {"error": {"message": "bad gateway"}})
        plan = policy(["always", {"action": "retry_same", "attempts": 3, "then_action": "abort"}])
        await ask(router, plan)
        waits[rand] = sleeps.waits
    low, high = waits[0.0], waits[0.999]
    assert len(low) == len(high) == 3
    assert low[1] == pytest.approx(2 * low[0]) and low[2] == pytest.approx(2 * low[1])  # doubling
    assert all(h > 1.9 * lo for lo, h in zip(low, high))  # the random factor spans [0.5, 1)


@pytest.mark.parametrize(("status", "calls"), [(400, 1), (401, 1), (404, 1), (422, 1), (408, 4), (429, 4),
                                               (500, 4), (503, 4)])
async def test_only_408_and_429_among_client_errors_are_retried(fake_provider: FakeProviderServer, status: int,
                                                                calls: int) -> None:
    router = make_router(fake_provider)
    fake_provider.responder = lambda request: Reply(status, {"error": {"message": "no"}})
    plan = policy(["always", {"action": "retry_same", "attempts": 3, "then_action": "abort"}])
    await ask(router, plan)
    assert len(fake_provider.requests) == calls


async def test_a_redirect_is_the_offers_address_not_the_providers_health(fake_provider: FakeProviderServer) -> None:
    """docs/providers.md "Errors": a provider redirecting (``http://`` to ``https://``, a moved path) answers every
    call so: a 301 was an upstream_error, re-issued by retry_same, counted against the provider's breaker and
    disabling it for every caller, and made the answering offer's cost unknown as if it might have been billed."""
    router = make_router(fake_provider)
    moved = f"{fake_provider.base_url.replace('http://', 'https://')}/chat/completions"
    fake_provider.responder = lambda request: (
        Reply(301, "<html><body>Moved Permanently</body></html>", headers={"Location": moved})
        if request.json["model"] == "pa-model" else chat_reply("Summary.", prompt_tokens=1000, completion_tokens=10))
    plan = policy(["always", {"action": "retry_same", "attempts": 3, "then_action": "disable_provider"}])
    result = await ask(router, plan)
    attempts = [e for e in result.trace["decision_path"] if e["event"] == "attempted"]
    assert [(e["offer"], e["error_kind"], e["http_status"]) for e in attempts] == \
        [("a/chat", "bad_request", 301), ("b/chat", None, None)]  # not re-issued
    assert moved in attempts[0]["error_message"]  # the address base_url should name
    assert {"event": "provider_disabled", "provider": "pa", "scope": "call"} in result.trace["decision_path"]
    assert result.ok and result.cost_usd == pytest.approx((1000 * 2.0 + 10 * 1.0) / 1e6)  # known: nothing billed


async def test_one_request_retries_at_most_its_budget_whatever_the_policy(fake_provider: FakeProviderServer) -> None:
    router = make_router(fake_provider)
    fake_provider.responder = lambda request: Reply(429, {"error": {"message": "slow down"}})
    plan = policy(["always", {"action": "retry_same", "attempts": 1000, "then_action": "abort"}])
    with request_call_budget():
        for _ in range(5):  # five routed calls of one request
            await ask(router, plan)
    assert len(fake_provider.requests) == 5 + MAX_RETRIES_PER_REQUEST


async def test_legacy_request_against_a_429_provider_makes_few_calls(fake_provider: FakeProviderServer) -> None:
    router = make_router(fake_provider)
    fake_provider.responder = lambda request: Reply(429, {"error": {"message": "slow down"}})
    plan = policy(["always", {"action": "retry_same", "attempts": 1000}])
    request = CompactRequest(messages=transcript(), keep_recent=2, policy_ir=plan)
    status, body = await service.compact(request, deadline=Deadline.after_ms(30_000), router=router)
    assert status == 200 and body["messages"] == request.messages and body["compacted"] is False
    assert len(fake_provider.requests) <= 2 * (1 + MAX_RETRIES_PER_OFFER)  # was 17 on one offer


async def test_decision_request_against_a_429_provider_makes_few_calls(fake_provider: FakeProviderServer) -> None:
    decider = Offer(id="d/dec", provider="pd", family="pd-fam", model="pd-model", protocol="decisions",
                    transport="decisions", base_url=fake_provider.base_url, price_in=1.0, price_out=1.0)
    router = Router([decider, chat_offer(fake_provider, "a/chat", "pa", 1.0)], transport_for=transport_for,
                    sleep=Sleeps())
    fake_provider.responder = lambda request: Reply(429, {"error": {"message": "slow down"}})
    plan = ["policy", ["top"], ["zero"], ["argmax"], ["id"], ["always", {"action": "retry_same", "attempts": 1000}]]
    request = CompactRequest(messages=transcript(), keep_recent=2, decision_policy_ir=plan, policy_ir=plan)
    status, body = await service.compact(request, deadline=Deadline.after_ms(30_000), router=router)
    assert status == 200 and body["messages"] == request.messages
    batches = len([n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"])
    assert len(fake_provider.requests) <= batches + MAX_RETRIES_PER_REQUEST  # was 102


@pytest.mark.parametrize(("header", "seconds"), [
    ("2", 2.0), ("0.5", 0.5), ("-3", 0.0), ("1e9", RETRY_AFTER_MAX_S), ("soon", None), ("", None), (None, None),
    ("nan", None), ("x" * 100, None),
])
def test_retry_after_values(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),  # the finer one, as the providers' SDKs read it
    ({"x-ms-retry-after-ms": "250"}, 0.25),  # Azure OpenAI's
    ({"retry-after-ms": "soon", "Retry-After": "2"}, 2.0), ({"retry-after-ms": "nan", "Retry-After": "3"}, 3.0),
    ({"retry-after-ms": "-5"}, 0.0), ({"retry-after-ms": "1e12"}, RETRY_AFTER_MAX_S), ({"Retry-After": "4"}, 4.0),
    ({}, None),
])
def test_a_wait_in_milliseconds_is_read_first(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_of(httpx.Headers(headers)) == seconds


async def test_retry_after_ms_alone_is_honoured(fake_provider: FakeProviderServer) -> None:
    sleeps = Sleeps()
    router = make_router(fake_provider, sleeps)
    fake_provider.enqueue(Reply(429, {"error": {"message": "slow down"}}, headers={"retry-after-ms": "2500"}))
    plan = policy(["always", {"action": "retry_same", "attempts": 1}])
    result = await ask(router, plan)
    assert result.ok and len(fake_provider.requests) == 2
    assert len(sleeps.waits) == 1 and sleeps.waits[0] >= 2.5


@pytest.mark.parametrize(("value", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("2m59.56s", 179.56), ("1h2m3.5s", 3723.5), ("0s", 0.0),
    ("5", None), ("-1s", None), ("1.5.5s", None), ("s", None), ("", None), (None, None), ("1s" * 20, None),
])
def test_go_durations(value: str | None, seconds: float | None) -> None:
    assert parse_go_duration(value) == (pytest.approx(seconds) if seconds is not None else None)


RESETS = {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}


@pytest.mark.parametrize(("headers", "rate_limited", "seconds"), [
    # OpenAI's 429 often carries no Retry-After: the reset of the limit that is used up
    ({**RESETS, "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "90000"}, True, 1.0),
    ({**RESETS, "x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "0"}, True, 360.0),
    # none used up: the request needs more tokens than remain
    ({**RESETS, "x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "120"}, True, 360.0),
    ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-requests": "59"}, True, None),
    ({"x-ratelimit-reset-tokens": "20ms"}, True, 0.02),
    ({"x-ratelimit-reset-tokens": "2h0m0s", "x-ratelimit-remaining-tokens": "0"}, True, RETRY_AFTER_MAX_S),
    ({**RESETS, "Retry-After": "3"}, True, 3.0),  # the provider's own wait wins
    ({**RESETS, "x-ratelimit-remaining-requests": "0"}, False, None),  # sent on every answer: a 500's is no wait
])
def test_a_429s_rate_limit_reset_is_its_wait(headers: dict[str, str], rate_limited: bool,
                                             seconds: float | None) -> None:
    assert retry_after_of(httpx.Headers(headers), rate_limited=rate_limited) == seconds


async def test_a_rate_limit_reset_is_waited_or_failed_over_within_the_deadline(
        fake_provider: FakeProviderServer) -> None:
    # Before, a 429 naming only its x-ratelimit-reset was re-sent after the router's own 0.1-0.2 s, into the
    # same exhausted limit; now a reset within the deadline is waited, a later one fails over to the next offer.
    sleeps = Sleeps()
    router = make_router(fake_provider, sleeps)
    plan = router.admit_policy(policy(["always", {"action": "retry_same", "attempts": 1}]))
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    fake_provider.enqueue(Reply(429, {"error": {"message": "Rate limit reached for requests"}}, headers={
        **RESETS, "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "90000"}))
    result = await router.chat(plan, request, deadline=Deadline.after_ms(30_000))
    assert result.ok and served_models(fake_provider) == ["pa-model", "pa-model"] and sleeps.waits == [1.0]
    fake_provider.enqueue(Reply(429, {"error": {"message": "Rate limit reached for tokens"}}, headers={
        **RESETS, "x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "0"}))
    result = await router.chat(plan, request, deadline=Deadline.after_ms(30_000))
    assert result.ok and result.chosen.id == "b/chat" and sleeps.waits == [1.0]  # 6 min: no wait, the next offer
    assert served_models(fake_provider)[2:] == ["pa-model", "pb-model"]


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)
    later = (now + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(later, now=now) == pytest.approx(30.0)
