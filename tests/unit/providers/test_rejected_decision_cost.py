"""A decision reply the transport rejects (bad JSON, an invalid choice) after the provider reported its usage is
priced from that usage, as a ``reasoning_exhausted`` answer is (docs/behaviour.md "Cost rules"): the attempt's
cost is known, and so is that of the call that answered after it. It used to be unknown, which made the whole
call's cost unknown."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from compactor.providers.base import BAD_RESPONSE, INVALID_DECISION, DecisionRequest, Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, anthropic_reply, chat_reply, decision_reply

CHOICE = {"kind": {"type": "choice", "instructions": "Which?", "criteria": {"a": "first", "b": "second"}}}
DECISION = DecisionRequest(state={"f1": "ls -la output"}, questions=CHOICE)
GOOD = json.dumps({"answers": {"kind": {"type": "choice", "choice": "a", "confidence": 0.9}}})
INVENTED = json.dumps({"answers": {"kind": {"type": "choice", "choice": "zzz", "confidence": 0.9}}})
NEXT = ["policy", ["top"], ["zero"], ["ordered"], ["id"], ["always", {"action": "next_candidate"}]]


def decider(offer: Offer, offer_id: str, **fields: Any) -> Offer:
    return dataclasses.replace(offer, id=offer_id, provider=offer_id, **fields)


@pytest.mark.parametrize("rejected, kind", [("not json at all", BAD_RESPONSE), ('{"answer": 1}', BAD_RESPONSE),
                                            (INVENTED, INVALID_DECISION)])
async def test_a_rejected_chat_decision_reply_is_priced_from_its_usage(
        fake_provider: FakeProviderServer, chat_decision_offer: Offer, rejected: str, kind: str) -> None:
    first = decider(chat_decision_offer, "first", price_in=1.0, price_out=4.0)
    second = decider(chat_decision_offer, "second", price_in=0.5, price_out=2.0)

    def respond(request: RecordedRequest) -> Reply:
        if len(fake_provider.requests) == 1:
            return chat_reply(rejected, prompt_tokens=1000, completion_tokens=500)
        return chat_reply(GOOD, prompt_tokens=1000, completion_tokens=10)

    fake_provider.responder = respond
    router = Router([first, second], transport_for=transport_for)
    result = await router.decide(router.admit_policy(NEXT), DECISION)
    failed = next(event for event in result.trace["decision_path"] if event.get("error_kind"))
    assert failed["error_kind"] == kind
    assert failed["cost_computed"] == pytest.approx(0.001 + 0.002)  # 1000 in at $1, 500 out at $4 per million
    assert result.failed_cost_known and result.failure_cost() == pytest.approx(0.003)
    if kind == BAD_RESPONSE:  # the next offer answered: its cost and the rejected attempt's, both known
        assert result.ok and result.chosen is not None and result.chosen.id == "second"
    else:  # an invalid decision is not tried elsewhere: the call fails with its cost known
        assert not result.ok and result.error_kind == INVALID_DECISION


async def test_a_rejected_anthropic_decision_reply_is_priced_from_its_usage(
        fake_provider: FakeProviderServer, anthropic_offer: Offer) -> None:
    offer = dataclasses.replace(anthropic_offer, protocol="decisions")
    fake_provider.enqueue(anthropic_reply("no JSON here", input_tokens=1000, output_tokens=100, cache_read=2000))
    router = Router([offer], transport_for=transport_for)
    result = await router.decide(router.admit_policy(NEXT), DECISION)
    failed = next(event for event in result.trace["decision_path"] if event.get("error_kind"))
    # 1000 fresh in at $3, 2000 cache reads at 10 % of it, 100 out at $15 per million
    assert failed["cost_computed"] == pytest.approx(0.003 + 0.0006 + 0.0015)
    assert result.failed_cost_known


async def test_an_invalid_native_decision_is_priced_from_its_usage(
        fake_provider: FakeProviderServer, decision_offer: Offer) -> None:
    offer = dataclasses.replace(decision_offer, price_in=1.0, price_out=4.0)
    fake_provider.enqueue(decision_reply({"kind": {"type": "choice", "choice": "zzz", "confidence": 0.9}},
                                         input_tokens=1000, output_tokens=500))
    router = Router([offer], transport_for=transport_for)
    result = await router.decide(router.admit_policy(NEXT), DECISION)
    assert result.error_kind == INVALID_DECISION
    assert result.failed_cost_known and result.failure_cost() == pytest.approx(0.003)


async def test_a_rejected_reply_without_usage_stays_unknown(
        fake_provider: FakeProviderServer, chat_decision_offer: Offer) -> None:
    offer = decider(chat_decision_offer, "first", price_in=1.0, price_out=4.0)
    fake_provider.enqueue(Reply(body={"choices": [{"message": {"role": "assistant", "content": "nope"},
                                                   "finish_reason": "stop"}]}))
    router = Router([offer], transport_for=transport_for)
    result = await router.decide(router.admit_policy(NEXT), DECISION)
    assert result.error_kind.endswith(BAD_RESPONSE)
    assert not result.failed_cost_known and result.failure_cost() is None
