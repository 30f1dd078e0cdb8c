"""The ticket-triage flow through the real Router and HTTP transports against the fake provider."""

from __future__ import annotations

import json

import pytest

from compactor.budget import Deadline
from compactor.flow import admit_flow, run_flow
from compactor.providers.base import Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply, decision_reply

from .triage import FLOW_INPUT, POLICY, TICKETS, triage_flow

KEY_ENV = "COMPACTOR_FLOW_TEST_KEY"
CHOICES = {"t1": "support", "t2": "support", "t3": "spam"}


def offers(base_url: str) -> list[Offer]:
    return [
        Offer(id="fake/writer", provider="fake", family="fake-writer", model="fake-writer-1", protocol="chat",
              transport="openai", base_url=base_url, api_key_env=KEY_ENV, price_in=1.0, price_out=2.0,
              observations={"supports_json_mode": True}),
        Offer(id="fake/decider", provider="fake", family="fake-decider", model="fake-decider-1",
              protocol="decisions", transport="decisions", base_url=base_url, api_key_env=KEY_ENV,
              price_in=0.5, price_out=0.5),
    ]


def respond(request: RecordedRequest) -> Reply:
    if request.path.endswith("/decisions"):
        answers = {name: {"type": "choice", "choice": CHOICES[name], "confidence": 0.9}
                   for name in request.json["questions"]}
        return decision_reply(answers, model="fake-decider-1", cost=0.00002)
    return chat_reply(json.dumps({"t1": "Facilities notified.", "t2": "Reset link sent."}),
                      model="fake-writer-1", prompt_tokens=120, completion_tokens=30, cost=0.0001)


async def test_triage_through_the_real_router(fake_provider: FakeProviderServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-flow-test-key-0000")
    fake_provider.responder = respond
    router = Router(offers(fake_provider.base_url), transport_for=transport_for)
    admitted = admit_flow(triage_flow(), admit_policy=router.admit_policy, flow_input=FLOW_INPUT)
    result = await run_flow(admitted, FLOW_INPUT, router=router, deadline=Deadline.after_ms(30_000))

    assert result.ok, result.error_message
    assert result.output == {"t1": "Facilities notified.", "t2": "Reset link sent."}
    decision, chat = fake_provider.requests
    assert decision.path.endswith("/decisions") and decision.json["state"] == TICKETS
    assert chat.json["response_format"] == {"type": "json_object"} and chat.json["max_tokens"] == 256
    assert [m["role"] for m in chat.json["messages"]] == ["system", "user"]
    assert result.cost_usd == pytest.approx(0.00012)
    block = result.x_router()
    assert block["cost_basis"] == "reported" and block["cost_usd"] == pytest.approx(0.00012)
    llm = next(e for e in block["decision_trace"]["flow_nodes"] if e["kind"] == "llm")
    assert llm["provider"] == "fake" and llm["tokens_in"] == 120 and llm["cost_reported"] == pytest.approx(0.0001)
    assert llm["decision_trace"]["ranked"][0]["offer"] == "fake/writer"
    assert "sk-flow-test-key" not in json.dumps(block)


@pytest.mark.parametrize("output_format", ["json", None])
async def test_an_llm_node_whose_model_spent_its_budget_on_reasoning_fails_saying_so(
        fake_provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch, output_format: str | None) -> None:
    # docs/providers.md "Reasoning models": before, a text node passed the empty answer on as its output and a
    # JSON node failed as "JSON output cut off (finish_reason length)", a bad_response like any other.
    monkeypatch.setenv(KEY_ENV, "sk-flow-test-key-0000")
    fake_provider.enqueue(chat_reply("", finish_reason="length", prompt_tokens=50, completion_tokens=1280,
                                     reasoning_tokens=1280))
    writer = Offer(id="openai/o4-mini", provider="openai", family="o4-mini", model="o4-mini", protocol="chat",
                   transport="openai", base_url=fake_provider.base_url, api_key_env=KEY_ENV, price_in=1.0,
                   price_out=4.0, reasoning_effort="minimal", observations={"supports_json_mode": True})
    router = Router([writer], transport_for=transport_for)
    flow = ["flow", {"input": {"kind": "input"},
                     "write": {"kind": "llm", "inputs": ["input"], "policy": POLICY, "system": "Answer in JSON.",
                               "max_tokens": 256, **({"output_format": output_format} if output_format else {})},
                     "output": {"kind": "output", "inputs": ["write"]}}]
    admitted = admit_flow(flow, admit_policy=router.admit_policy, flow_input="a question")
    result = await run_flow(admitted, "a question", router=router, deadline=Deadline.after_ms(30_000))

    assert not result.ok and result.failed_node is not None and result.error_kind == "reasoning_exhausted"
    assert "spent its whole output budget on reasoning (1280 reasoning tokens" in result.error_message
    assert fake_provider.requests[0].json["max_completion_tokens"] == 256 + 1024
    assert result.cost_usd == pytest.approx((50 * 1.0 + 1280 * 4.0) / 1e6)  # the reasoning billed as output
