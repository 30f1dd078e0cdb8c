"""An attempt that failed before its request left (no API key, no connection made, no free slot) reached no
provider: it is no model call and costs nothing, so the call that answered after it keeps a known cost
(docs/behaviour.md "Cost rules"). Such an attempt used to count as a model call that may have been billed an
unknown amount, which made the whole call's cost unknown."""

from __future__ import annotations

import dataclasses

import pytest

from compactor.call_record import attempts
from compactor.providers.base import ChatRequest, Offer, ProviderError
from compactor.providers.registry import transport_for
from compactor.router import Router
from fakes.provider_server import FakeProviderServer, chat_reply

NEXT = ["policy", ["top"], ["zero"], ["ordered"], ["id"], ["always", {"action": "next_candidate"}]]
REQUEST = ChatRequest([{"role": "user", "content": "hi"}])


def other(offer: Offer, offer_id: str, **fields: object) -> Offer:
    return dataclasses.replace(offer, id=offer_id, provider=offer_id, **fields)


async def test_attempts_that_never_left_cost_nothing_and_are_no_model_calls(
        fake_provider: FakeProviderServer, chat_offer: Offer) -> None:
    no_key = other(chat_offer, "no-key", api_key_env="COMPACTOR_TEST_KEY_NOT_SET")
    refused = other(chat_offer, "refused", base_url="http://127.0.0.1:9/v1")  # nothing listens on port 9
    good = other(chat_offer, "good")
    fake_provider.enqueue(chat_reply("ok", prompt_tokens=1000, completion_tokens=500))
    router = Router([no_key, refused, good], transport_for=transport_for)
    result = await router.chat(router.admit_policy(NEXT), REQUEST)
    assert result.ok and result.chosen is not None and result.chosen.id == "good"
    failed = [event for event in result.trace["decision_path"] if event.get("error_kind")]
    assert [(event["error_kind"], event.get("sent")) for event in failed] == [
        ("auth_error", False), ("network_error", False)]
    assert result.failed_cost_known and result.failure_cost() == 0.0
    assert result.cost_usd == pytest.approx(0.001 + 0.001)  # 1000 in at $1, 500 out at $2 per million
    assert attempts(result.trace) == 1  # the one call a provider saw


async def test_an_attempt_cut_off_after_it_left_stays_unknown(fake_provider: FakeProviderServer,
                                                               chat_offer: Offer) -> None:
    slow, good = other(chat_offer, "slow"), other(chat_offer, "good")
    fake_provider.enqueue(chat_reply("late", delay_s=2.0))
    fake_provider.enqueue(chat_reply("ok"))
    router = Router([slow, good], transport_for=transport_for)
    result = await router.chat(router.admit_policy(NEXT), REQUEST, timeout_s=0.3)
    assert result.ok and result.chosen is not None and result.chosen.id == "good"
    assert not result.failed_cost_known  # the provider may have billed the request it was sent
    assert attempts(result.trace) == 2


async def test_a_proxy_refusing_the_tunnel_sent_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # The proxy answers CONNECT with 407: httpx's ProxyError, raised before the request reached the provider. It
    # was counted a model call that may have been billed (sent), which made the call's cost unknown.
    import asyncio

    from compactor.providers import http

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    await http.aclose_client()
    try:
        with pytest.raises(ProviderError) as caught:
            await http.post_json("https://provider.invalid/v1/chat/completions", {}, headers={}, timeout_s=5,
                                 max_body_bytes=100)
    finally:
        await http.aclose_client()
        server.close()
        await server.wait_closed()
    assert "ProxyError" in caught.value.message or "407" in caught.value.message
    assert (caught.value.kind, caught.value.sent) == ("network_error", False)
