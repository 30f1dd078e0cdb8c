"""DecisionsTransport against the fake provider."""

from __future__ import annotations

import dataclasses
import json

import pytest

from compactor.decision_validation import DECISION_RESPONSE_MAX_BYTES
from compactor.providers.base import ChatRequest, DecisionRequest, Offer, ProviderError
from compactor.providers.native_decisions import DecisionsTransport
from fakes.provider_server import FakeProviderServer, Reply, decision_reply

TRANSPORT = DecisionsTransport()
QUESTIONS = {"f1": {"type": "choice", "instructions": "Keep or summarize?",
                    "criteria": {"keep": "needed", "summarize": "bulky"}}}
REQUEST = DecisionRequest(state={"f1": "some tool output"}, questions=QUESTIONS)


async def failure(offer: Offer, request: DecisionRequest = REQUEST, timeout_s: float = 10) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.decide(offer, request, timeout_s)
    return caught.value


async def test_success_body_and_usage(fake_provider: FakeProviderServer, decision_offer: Offer, api_key: str) -> None:
    fake_provider.enqueue(decision_reply({"f1": {"type": "choice", "choice": "summarize", "confidence": 0.9}},
                                         model="decider-v2", input_tokens=11, output_tokens=3, cost=0.0004))
    response = await TRANSPORT.decide(decision_offer, REQUEST, 10)
    assert response.model == "decider-v2"
    assert response.answers["f1"]["choice"] == "summarize"
    assert (response.tokens_in, response.tokens_out, response.tokens_total) == (11, 3, 14)
    assert response.cost_reported == pytest.approx(0.0004)
    assert response.usage == {"input_tokens": 11, "output_tokens": 3, "total_tokens": 14, "cost": 0.0004}
    sent = fake_provider.requests[0]
    assert sent.path == "/v1/decisions"
    assert sent.json == {"model": "fake-decider-1", "state": REQUEST.state, "questions": QUESTIONS}
    assert sent.headers["authorization"] == f"Bearer {api_key}"


async def test_default_answer_without_usage(fake_provider: FakeProviderServer, decision_offer: Offer) -> None:
    fake_provider.enqueue(Reply(200, {"model": "m", "answers": {"f1": {"type": "choice", "choice": "keep"}}}))
    response = await TRANSPORT.decide(decision_offer, REQUEST, 10)
    assert response.usage is None and response.cost_reported is None and response.tokens_in is None


async def test_invalid_payload_is_refused_before_any_call(fake_provider: FakeProviderServer,
                                                          decision_offer: Offer) -> None:
    error = await failure(decision_offer, DecisionRequest(state=7, questions=QUESTIONS))
    assert error.kind == "bad_request"
    assert "state must be text, an object or an array." in error.message
    assert fake_provider.requests == []


async def test_a_payload_the_flow_runtime_checked_is_not_checked_again(
        fake_provider: FakeProviderServer, decision_offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.jsonutil import ascii_wire_size
    from compactor.providers import native_decisions

    checks: list[object] = []
    real = native_decisions.validate_payload
    monkeypatch.setattr(native_decisions, "validate_payload", lambda payload: checks.append(payload) or real(payload))
    checked = dataclasses.replace(REQUEST, wire_bytes=ascii_wire_size({"state": REQUEST.state, "questions": QUESTIONS}))
    for request in (REQUEST, checked):
        fake_provider.enqueue(decision_reply({"f1": {"type": "choice", "choice": "keep", "confidence": 0.9}}))
        await TRANSPORT.decide(decision_offer, request, 10)
    assert len(checks) == 1  # the request without wire_bytes only
    assert fake_provider.requests[0].json == fake_provider.requests[1].json  # the same body either way


@pytest.mark.parametrize(
    "body",
    [
        b"nope",
        b'{"model": "m", "model": "n", "answers": {"f1": {"type": "choice", "choice": "keep"}}}',
        {"model": "m", "answers": {"f1": {"type": "choice", "choice": "archive"}}},
        {"model": "m", "answers": {}},
        {"answers": {"f1": {"type": "choice", "choice": "keep"}}},
        [],
    ],
)
async def test_bad_answers_are_bad_response(fake_provider: FakeProviderServer, decision_offer: Offer,
                                            body: object) -> None:
    fake_provider.enqueue(Reply(200, body))
    error = await failure(decision_offer)
    # Answers breaking the decision rules are the model's invalid decision; anything else is a bad response.
    rules_broken = isinstance(body, dict) and isinstance(body.get("answers"), dict) and "model" in body
    assert (error.kind, error.http_status) == ("invalid_decision" if rules_broken else "bad_response", 200)


async def test_invalid_answer_keeps_billed_cost(fake_provider: FakeProviderServer, decision_offer: Offer) -> None:
    fake_provider.enqueue(decision_reply({"f1": {"type": "choice", "choice": "archive"}}, cost=0.002))
    error = await failure(decision_offer)
    assert error.kind == "invalid_decision"
    assert "unknown_choice" in error.message
    assert error.cost_reported == 0.002


async def test_oversized_answer_is_bad_response(fake_provider: FakeProviderServer, decision_offer: Offer) -> None:
    answer = {"model": "m", "answers": {"f1": {"type": "choice", "choice": "keep"}},
              "padding": "x" * DECISION_RESPONSE_MAX_BYTES}
    fake_provider.enqueue(Reply(200, json.dumps(answer)))
    error = await failure(decision_offer)
    assert error.kind == "bad_response"


async def test_answer_just_under_the_bound_is_read(fake_provider: FakeProviderServer, decision_offer: Offer) -> None:
    answer = {"model": "m", "answers": {"f1": {"type": "choice", "choice": "keep"}}, "padding": ""}
    answer["padding"] = "x" * (DECISION_RESPONSE_MAX_BYTES - len(json.dumps(answer)))
    assert len(json.dumps(answer)) == DECISION_RESPONSE_MAX_BYTES
    fake_provider.enqueue(Reply(200, json.dumps(answer)))
    assert (await TRANSPORT.decide(decision_offer, REQUEST, 10)).answers["f1"]["choice"] == "keep"


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limit"), (401, "auth_error"), (502, "upstream_error")])
async def test_http_errors(fake_provider: FakeProviderServer, decision_offer: Offer, status: int, kind: str) -> None:
    fake_provider.enqueue(Reply(status, {"error": {"message": "no"}}))
    assert (await failure(decision_offer)).kind == kind


async def test_timeout(fake_provider: FakeProviderServer, decision_offer: Offer) -> None:
    fake_provider.enqueue(decision_reply({"f1": {"type": "choice", "choice": "keep"}}, delay_s=30))
    assert (await failure(decision_offer, timeout_s=0.3)).kind == "timeout"


async def test_missing_key(decision_offer: Offer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(decision_offer.api_key_env)
    error = await failure(decision_offer)
    assert error.kind == "auth_error" and decision_offer.api_key_env in error.detail


async def test_jev_family_comes_from_the_offer(fake_provider: FakeProviderServer, decision_offer: Offer) -> None:
    questions = {"q": {"type": "choice", "instructions": "x", "criteria": {"a": "", "b": "", "c": ""}}}
    rounded = {"q": {"type": "choice", "choice": "a", "probabilities": {"a": 0.33, "b": 0.33, "c": 0.33}}}
    fake_provider.enqueue(decision_reply(rounded, model="served"), decision_reply(rounded, model="served"))
    jev = dataclasses.replace(decision_offer, family="jev-1.13")
    assert (await TRANSPORT.decide(jev, DecisionRequest("s", questions), 10)).model == "served"
    assert (await failure(decision_offer, DecisionRequest("s", questions))).kind == "invalid_decision"


async def test_chat_is_refused(decision_offer: Offer) -> None:
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.chat(decision_offer, ChatRequest([]), 1)
    assert caught.value.kind == "bad_request"
