"""The pooled clients keep no cookies: a provider's Set-Cookie in its answer to one caller's call is never
sent with another caller's call (docs/performance.md, end-to-end concurrency)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from compactor.providers import http
from compactor.providers.anthropic import AnthropicTransport
from compactor.providers.base import ChatRequest, DecisionRequest, Offer
from compactor.providers.chat_decisions import ChatDecisionsTransport
from compactor.providers.native_decisions import DecisionsTransport
from compactor.providers.openai import OpenAITransport
from fakes.provider_server import FakeProviderServer, Reply, anthropic_reply, chat_reply, decision_reply

KEY_A = "sk-caller-a-0123456789"
KEY_B = "sk-caller-b-9876543210"
MESSAGES = [{"role": "user", "content": "hi"}]
QUESTIONS = {"useful": {"type": "noul", "instructions": "Is it useful?"}}
DECISION = DecisionRequest(state={"f1": "x"}, questions=QUESTIONS)
COOKIES = ("session=from-caller-A; Path=/", "sticky=a; Domain=127.0.0.1; Path=/; Max-Age=3600",
           "plain=1")

Call = Callable[[Offer], Awaitable[Any]]

CASES: dict[str, tuple[str, Call, Callable[[], Reply]]] = {
    "openai": ("chat_offer", lambda offer: OpenAITransport().chat(offer, ChatRequest(MESSAGES), 10),
               lambda: chat_reply("ok")),
    "anthropic": ("anthropic_offer", lambda offer: AnthropicTransport().chat(offer, ChatRequest(MESSAGES), 10),
                  lambda: anthropic_reply("ok")),
    "decisions": ("decision_offer", lambda offer: DecisionsTransport().decide(offer, DECISION, 10),
                  lambda: decision_reply({"useful": {"type": "noul", "noul": 0.5}})),
    "chat-decisions": ("chat_decision_offer",
                       lambda offer: ChatDecisionsTransport().decide(offer, DECISION, 10),
                       lambda: chat_reply('{"answers": {"useful": {"type": "noul", "noul": 0.5}}}')),
}


def with_cookie(reply: Reply, cookie: str) -> Reply:
    return dataclasses.replace(reply, headers={**reply.headers, "Set-Cookie": cookie})


@pytest.mark.parametrize("cookie", COOKIES)
@pytest.mark.parametrize("case", list(CASES))
async def test_a_cookie_set_for_one_caller_is_not_sent_for_the_next(
        case: str, cookie: str, fake_provider: FakeProviderServer, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fixture, call, reply = CASES[case]
    offer: Offer = request.getfixturevalue(fixture)
    assert offer.api_key_env is not None
    fake_provider.enqueue(with_cookie(reply(), cookie), with_cookie(reply(), cookie))
    monkeypatch.setenv(offer.api_key_env, KEY_A)  # caller A's call
    await call(offer)
    monkeypatch.setenv(offer.api_key_env, KEY_B)  # then caller B's, through the same pooled client
    await call(offer)
    first, second = fake_provider.requests
    assert KEY_A in str(first.headers) and KEY_B in str(second.headers)
    assert "cookie" not in first.headers
    assert "cookie" not in second.headers
    assert len(http.client().cookies) == 0
    await http.aclose_client()


async def test_an_error_answer_s_cookie_is_not_kept_either(fake_provider: FakeProviderServer) -> None:
    url = f"{fake_provider.base_url}/chat/completions"
    fake_provider.enqueue(Reply(429, {"error": {"message": "slow down"}}, headers={"Set-Cookie": "rl=1; Path=/"}))
    replies = [await http.post_json(url, {"n": n}, headers={}, timeout_s=10, max_body_bytes=1 << 20)
               for n in range(2)]
    assert [reply.status for reply in replies] == [429, 200]
    assert "cookie" not in fake_provider.requests[1].headers
    await http.aclose_client()
