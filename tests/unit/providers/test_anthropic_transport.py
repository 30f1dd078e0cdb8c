"""AnthropicTransport against the local fake: request shape, content blocks, usage with cache tokens,
stop reasons, errors, and decisions through the validated chat path."""

from __future__ import annotations

import dataclasses
import json

import pytest

from compactor.providers.anthropic import ANTHROPIC_VERSION, AnthropicTransport
from compactor.providers.base import (
    AUTH_ERROR, BAD_REQUEST, BAD_RESPONSE, CONTEXT_OVERFLOW, INVALID_DECISION, RATE_LIMIT, UPSTREAM_ERROR,
    ChatRequest, DecisionRequest, Offer, ProviderError,
)
from compactor.providers.turns import JSON_INSTRUCTION
from compactor.router import compute_cost
from fakes.provider_server import FakeProviderServer, Reply, anthropic_reply

TRANSPORT = AnthropicTransport()
MESSAGES = [
    {"role": "system", "content": "Summarize."},
    {"role": "user", "content": "first"},
    {"role": "user", "content": [{"type": "text", "text": "second"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
]
QUESTIONS = {"f1": {"type": "choice", "instructions": "Keep?", "criteria": {"keep": "needed", "summarize": "bulky"}}}


async def test_request_shape_and_usage(fake_provider: FakeProviderServer, anthropic_offer: Offer,
                                       api_key: str) -> None:
    fake_provider.enqueue(anthropic_reply("done", input_tokens=100, output_tokens=20, cache_read=1000,
                                          cache_write=50, model="claude-x-20250101"))
    response = await TRANSPORT.chat(anthropic_offer, ChatRequest(MESSAGES, max_tokens=64), 10)
    sent = fake_provider.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == api_key
    assert sent.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "authorization" not in sent.headers
    assert sent.json["model"] == "claude-x" and sent.json["max_tokens"] == 64
    assert sent.json["system"] == "Summarize."  # no JSON instruction outside JSON mode
    roles = [m["role"] for m in sent.json["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert sent.json["messages"][0]["content"] == "first\n\nsecond"
    assert "[tool call ls({})]" in sent.json["messages"][1]["content"]
    assert sent.json["messages"][2]["content"] == "[tool result] a.txt"
    assert response.text == "done" and response.finish_reason == "stop"
    assert response.served_model_id == "claude-x-20250101"
    # input_tokens leaves out cache reads and writes: all three are input.
    assert (response.tokens_in, response.tokens_out, response.tokens_total, response.tokens_cached,
            response.tokens_cache_written) == (1150, 20, 1170, 1000, 50)
    cost, basis = compute_cost(anthropic_offer, response, 6)
    assert basis == "computed"  # cache reads at 10 % of price_in, cache writes at 125 %
    assert cost == pytest.approx(round((100 * 3.0 + 1000 * 3.0 * 0.1 + 50 * 3.0 * 1.25 + 20 * 15.0) / 1e6, 6))


async def test_max_tokens_is_always_sent_and_stop_reason_maps(fake_provider: FakeProviderServer,
                                                               anthropic_offer: Offer) -> None:
    fake_provider.enqueue(anthropic_reply("trunc", stop_reason="max_tokens"))
    response = await TRANSPORT.chat(anthropic_offer, ChatRequest([{"role": "assistant", "content": "x"}]), 10)
    body = fake_provider.requests[0].json
    assert body["max_tokens"] > 0 and "system" not in body
    assert body["messages"][0]["role"] == "user"  # the first turn is the user's
    assert response.finish_reason == "length"


@pytest.mark.parametrize(("reply", "kind"), [
    (Reply(401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
     AUTH_ERROR),
    (Reply(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}), RATE_LIMIT),
    (Reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}), UPSTREAM_ERROR),
    (Reply(400, {"type": "error", "error": {"type": "invalid_request_error",
                                            "message": "prompt is too long: 250000 tokens > 200000 maximum"}}),
     CONTEXT_OVERFLOW),
    # an account out of credit: no wait and no other request passes (it read as a bad_request of this request)
    (Reply(400, {"type": "error", "error": {"type": "invalid_request_error", "message": (
        "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or "
        "purchase credits.")}}), AUTH_ERROR),
    (Reply(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "messages: roles must "
                                            "alternate; your credit balance is fine"}}), BAD_REQUEST),
    (Reply(200, {"type": "message"}), BAD_RESPONSE),
    (Reply(200, b"not json"), BAD_RESPONSE),
])
async def test_errors(fake_provider: FakeProviderServer, anthropic_offer: Offer, reply: Reply, kind: str) -> None:
    fake_provider.enqueue(reply)
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.chat(anthropic_offer, ChatRequest(MESSAGES), 10)
    assert caught.value.kind == kind


async def test_retry_after_reaches_the_router(fake_provider: FakeProviderServer, anthropic_offer: Offer) -> None:
    # docs/reliability.md "Polite retries": a re-issue waits at least the provider's Retry-After.
    fake_provider.enqueue(Reply(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
                                headers={"Retry-After": "7"}))
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.chat(anthropic_offer, ChatRequest(MESSAGES), 10)
    assert (caught.value.kind, caught.value.retry_after_s) == (RATE_LIMIT, 7.0)


def test_a_long_model_name_is_cut() -> None:
    from compactor.providers.anthropic import parse_message

    body = json.dumps({"content": [{"type": "text", "text": "ok"}], "model": "m" * 1000}).encode()
    served = parse_message(body, default_model="fallback").served_model_id
    assert served == "m" * 255 + "…"  # docs/reliability.md "Bounded answers"


async def test_missing_key_is_named(anthropic_offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(anthropic_offer.api_key_env)
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.chat(anthropic_offer, ChatRequest(MESSAGES), 10)
    assert caught.value.kind == AUTH_ERROR and anthropic_offer.api_key_env in caught.value.detail


async def test_decisions_go_through_the_validated_chat_path(fake_provider: FakeProviderServer,
                                                            anthropic_offer: Offer) -> None:
    offer = dataclasses.replace(anthropic_offer, protocol="decisions")
    good = {"answers": {"f1": {"type": "choice", "choice": "keep", "confidence": 0.9}}}
    fake_provider.enqueue(anthropic_reply(json.dumps(good), input_tokens=40, output_tokens=9),
                          anthropic_reply('{"answers": {"f1": {"type": "choice", "choice": "drop"}}}'),
                          anthropic_reply("I think keep."))
    request = DecisionRequest(state={"f1": "text"}, questions=QUESTIONS)
    response = await TRANSPORT.decide(offer, request, 10)
    assert response.answers == good["answers"] and (response.tokens_in, response.tokens_out) == (40, 9)
    sent = fake_provider.requests[0].json
    assert '"answers"' in sent["system"] and sent["system"].endswith(JSON_INSTRUCTION)  # JSON mode, by prompt
    assert json.loads(sent["messages"][0]["content"]) == {"state": {"f1": "text"}, "questions": QUESTIONS}
    for kind in (INVALID_DECISION, BAD_RESPONSE):  # an invented option (the model's), then prose: both refused
        with pytest.raises(ProviderError) as caught:
            await TRANSPORT.decide(offer, request, 10)
        assert caught.value.kind == kind
