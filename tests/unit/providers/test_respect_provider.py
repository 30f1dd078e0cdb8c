"""Respecting the provider: requests fit the offer's context, at most max_concurrency calls in flight per
offer, and an abandoned call closes its connection."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from compactor.budget import Deadline
from compactor.policy import DEFAULT_CHAT_POLICY
from compactor.providers import http
from compactor.providers.base import ChatRequest, DecisionRequest, Offer
from compactor.providers.registry import transport_for
from compactor.router import CONTEXT_REJECTION, Router, chat_request_tokens, decision_request_tokens
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply

CHAT = Offer(id="small", provider="p1", family="f", model="m", protocol="chat", transport="openai",
             base_url="http://127.0.0.1:1/v1", price_in=0.0, price_out=0.0, observations={"context": 1000})


def test_estimates_grow_with_the_request() -> None:
    small = ChatRequest([{"role": "user", "content": "x" * 30}], max_tokens=100)
    assert chat_request_tokens(small) > 100
    assert chat_request_tokens(ChatRequest([{"role": "user", "content": "x" * 3000}], max_tokens=100)) > 1100
    decision = DecisionRequest(state={"a": "é" * 1500}, questions={})
    assert decision_request_tokens(decision) >= 1000  # 3000 UTF-8 bytes


async def test_offers_too_small_for_the_request_are_skipped(fake_provider: FakeProviderServer) -> None:
    small = dataclasses.replace(CHAT, base_url=fake_provider.base_url)
    large = dataclasses.replace(small, id="large", provider="p2", price_in=1.0, observations={"context": 100_000})
    router = Router([small, large], transport_for=transport_for)
    policy = router.admit_policy(DEFAULT_CHAT_POLICY)
    short = await router.chat(policy, ChatRequest([{"role": "user", "content": "hi"}], max_tokens=50))
    assert short.ok and short.chosen.id == "small"  # cheapest, and it fits
    long = await router.chat(policy, ChatRequest([{"role": "user", "content": "word " * 1000}], max_tokens=50))
    assert long.ok and long.chosen.id == "large"
    assert long.trace["rejected"][0]["offer"] == "small"
    assert long.trace["rejected"][0]["reason"] == CONTEXT_REJECTION
    assert len(fake_provider.requests) == 2  # the small offer was never sent the long request
    only_small = Router([small], transport_for=transport_for)
    refused = await only_small.chat(only_small.admit_policy(DEFAULT_CHAT_POLICY),
                                    ChatRequest([{"role": "user", "content": "word " * 1000}]))
    assert not refused.ok and refused.error_kind == "no_candidates" and len(fake_provider.requests) == 2


async def test_max_concurrency_bounds_calls_in_flight(fake_provider: FakeProviderServer) -> None:
    in_flight, peak, lock = 0, 0, threading.Lock()

    def slow(request: RecordedRequest) -> Reply:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.15)
        with lock:
            in_flight -= 1
        return chat_reply("ok")

    fake_provider.responder = slow
    results = {}
    for limit in (1, None):
        peak = 0
        offer = dataclasses.replace(CHAT, base_url=fake_provider.base_url, max_concurrency=limit)
        router = Router([offer], transport_for=transport_for)
        policy = router.admit_policy(DEFAULT_CHAT_POLICY)
        request = ChatRequest([{"role": "user", "content": "hi"}])
        calls = [router.chat(policy, request, deadline=Deadline.after_ms(30_000))
                 for _ in range(4)]
        outcomes = await asyncio.gather(*calls)
        assert all(outcome.ok for outcome in outcomes)
        results[limit] = peak
    assert results[1] == 1
    assert results[None] > 1  # the same burst without a limit overlaps: the bound is what held it


async def test_waiting_for_a_slot_is_bounded_by_the_deadline(fake_provider: FakeProviderServer) -> None:
    fake_provider.responder = lambda request: chat_reply("ok", delay_s=1.0)
    offer = dataclasses.replace(CHAT, base_url=fake_provider.base_url, max_concurrency=1)
    router = Router([offer], transport_for=transport_for)
    policy = router.admit_policy(["policy", ["meets_req"], ["neg", ["field", "price_in"]], ["top_k", 1, ["argmax"]],
                                  ["id"], ["always", {"action": "abort"}]])
    first, second = await asyncio.gather(
        router.chat(policy, ChatRequest([{"role": "user", "content": "a"}]), deadline=Deadline.after_ms(5_000)),
        router.chat(policy, ChatRequest([{"role": "user", "content": "b"}]), deadline=Deadline.after_ms(300)),
    )
    assert first.ok
    assert not second.ok and "no free slot" in second.error_message
    assert len(fake_provider.requests) == 1


@pytest.fixture
def silent_server() -> Iterator[tuple[str, threading.Event]]:
    """A server that reads a request and never answers; the event is set when the client closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    closed = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(30)
            connection.recv(65536)
            try:
                while connection.recv(65536):
                    pass
            except OSError:
                return
            closed.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", closed
    listener.close()


async def test_an_abandoned_call_closes_its_connection(silent_server: tuple[str, threading.Event]) -> None:
    url, closed = silent_server
    task = asyncio.create_task(http.post_json(f"{url}/chat/completions", {"model": "m"}, headers={},
                                              timeout_s=30, max_body_bytes=1000))
    await asyncio.sleep(0.3)  # the request is out, the server is "generating"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(closed.wait, 10)  # the server saw the client leave


async def test_a_router_timeout_closes_the_connection(silent_server: tuple[str, threading.Event]) -> None:
    url, closed = silent_server
    router = Router([dataclasses.replace(CHAT, base_url=url)], transport_for=transport_for)
    request = ChatRequest([{"role": "user", "content": "x"}])
    result = await router.chat(router.admit_policy(DEFAULT_CHAT_POLICY), request, timeout_s=0.3)
    assert not result.ok and "timeout" in result.error_kind
    assert await asyncio.to_thread(closed.wait, 10)


