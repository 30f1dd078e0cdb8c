"""Honest costs (docs/reliability.md): junk usage is unknown cost, billed answers keep their cost whatever
happens to them, invalid decision answers are ``invalid_decision`` and are not retried on other offers,
and billing counts the calls actually made. Real transports against a fake provider on 127.0.0.1."""

from __future__ import annotations

from typing import Any

from compactor import service
from compactor.budget import Deadline
from compactor.call_record import counting_calls, flow_facts
from compactor.flow import admit_flow, run_flow
from compactor.models import CompactRequest
from compactor.providers.base import Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from compactor_aws.observability import summarize
from fakes.provider_server import FakeProviderServer, Reply, chat_reply, decision_reply, default_answers

from ..unit.flow.test_routing_nodes import FAST_POLICY, STRONG_POLICY, routed_flow, routing
from .test_isolation_and_retries import Sleeps, transcript

CHEAP_FIRST = ["policy", ["meets_req"], ["neg", ["field", "price_in"]], ["argmax"], ["id"],
               ["always", {"action": "next_candidate"}]]


def offers(fake: FakeProviderServer) -> list[Offer]:
    def make(offer_id: str, protocol: str, transport: str, price: float) -> Offer:
        return Offer(id=offer_id, provider=offer_id.split("/")[0], family=offer_id, model=offer_id,
                     protocol=protocol, transport=transport, base_url=fake.base_url, price_in=price, price_out=price,
                     observations={"context": 100_000 * price})
    return [make("d1/dec", "decisions", "decisions", 1.0), make("d2/dec", "decisions", "decisions", 2.0),
            make("fast/chat", "chat", "openai", 0.1), make("strong/chat", "chat", "openai", 3.0)]


def router(fake: FakeProviderServer) -> Router:
    return Router(offers(fake), transport_for=transport_for, sleep=Sleeps())


def decision_requests(fake: FakeProviderServer) -> list[Any]:
    return [r for r in fake.requests if r.path.endswith("/decisions")]


async def test_absurd_usage_is_an_unknown_cost_not_a_huge_one(fake_provider: FakeProviderServer) -> None:
    fake_provider.responder = lambda request: chat_reply("A short summary.", prompt_tokens=10**30,
                                                         completion_tokens=5)
    request = CompactRequest(messages=transcript(), keep_recent=2, policy_ir=CHEAP_FIRST)
    record = await service.compact_call(request, deadline=Deadline.after_ms(20_000), router=router(fake_provider))
    status, body = record.answer()
    assert status == 200 and body["compacted"] is True
    assert body["x_router"]["cost_usd"] is None  # was 5e23 with cost_known true
    summary = summarize(record)
    assert summary.cost_usd is None and summary.cost_known is False


async def test_an_absurd_reported_cost_is_unknown(fake_provider: FakeProviderServer) -> None:
    fake_provider.responder = lambda request: chat_reply("A short summary.", cost=1e20)
    request = CompactRequest(messages=transcript(), keep_recent=2, policy_ir=CHEAP_FIRST)
    _, body = await service.compact(request, deadline=Deadline.after_ms(20_000), router=router(fake_provider))
    # Prices x tokens replace the junk figure.
    assert body["x_router"]["cost_usd"] is not None and body["x_router"]["cost_usd"] < 1


def invented_label(request: Any, cost: float = 0.002) -> Reply:
    answers = default_answers(request.json.get("questions"))
    for answer in answers.values():
        if answer.get("type") == "choice":
            answer["choice"] = "a-label-nobody-asked-for"
    return decision_reply(answers, model=request.json["model"], cost=cost)


async def test_an_invented_route_choice_is_invalid_decision_billed_once(fake_provider: FakeProviderServer) -> None:
    def respond(request: Any) -> Reply:
        if request.path.endswith("/decisions"):
            return invented_label(request)
        return chat_reply("An answer.", cost=0.001)

    fake_provider.responder = respond
    real = router(fake_provider)
    flow = routed_flow(routing={"policy": CHEAP_FIRST, "instructions": "Pick the model.", "fallback": "strong",
                                "choices": {"fast": {"description": "easy", "policy": FAST_POLICY},
                                            "strong": {"description": "hard", "policy": STRONG_POLICY}}})
    admitted = admit_flow(flow, admit_policy=real.admit_policy, flow_input="What is 2+2?")
    result = await run_flow(admitted, "What is 2+2?", router=real, deadline=Deadline.after_ms(20_000))
    (node,) = [n for n in result.flow_nodes if n["kind"] == "llm"]
    assert node["routing"]["fallback_reason"] == "invalid_decision"  # was decision_failed
    assert node["routing"]["cost_usd"] == 0.002  # the rejected answer was billed: its cost is kept
    assert [r.json["model"] for r in decision_requests(fake_provider)] == ["d1/dec"]  # d2 never tried
    assert result.x_router()["cost_usd"] is not None


async def test_rejected_decision_answers_keep_their_cost_in_compaction(fake_provider: FakeProviderServer) -> None:
    fake_provider.responder = lambda request: (invented_label(request, cost=0.003)
                                               if request.path.endswith("/decisions") else chat_reply("{}"))
    request = CompactRequest(messages=transcript(), keep_recent=2, decision_policy_ir=CHEAP_FIRST,
                             policy_ir=CHEAP_FIRST)
    status, body = await service.compact(request, deadline=Deadline.after_ms(20_000), router=router(fake_provider))
    assert status == 200 and body["messages"] == request.messages
    decisions = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"]
    assert decisions and all(n["error"].startswith("invalid_decision") for n in decisions)
    assert all(n["cost_reported"] == 0.003 for n in decisions)  # was null
    assert body["x_router"]["cost_usd"] is not None  # so the request's cost stays known
    assert len(decision_requests(fake_provider)) == len(decisions)  # one call per batch, no failover


async def test_usage_junk_does_not_void_a_valid_decision(fake_provider: FakeProviderServer) -> None:
    def respond(request: Any) -> Reply:
        if request.path.endswith("/decisions"):
            reply = decision_reply(default_answers(request.json.get("questions")), model=request.json["model"])
            reply.body["usage"] = {"input_tokens": -5, "output_tokens": "many", "cost": "free"}
            return reply
        return chat_reply("{}")

    fake_provider.responder = respond
    request = CompactRequest(messages=transcript(), keep_recent=2, decision_policy_ir=CHEAP_FIRST,
                             policy_ir=CHEAP_FIRST)
    _, body = await service.compact(request, deadline=Deadline.after_ms(20_000), router=router(fake_provider))
    decisions = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"]
    assert decisions and all(n.get("error") is None for n in decisions)  # was "Invalid usage."


async def test_billing_counts_the_calls_actually_made(fake_provider: FakeProviderServer) -> None:
    fake_provider.responder = lambda request: Reply(503, {"error": {"message": "down"}})
    request = CompactRequest(messages=transcript(), keep_recent=2, policy_ir=CHEAP_FIRST)
    record = await service.compact_call(request, deadline=Deadline.after_ms(20_000), router=router(fake_provider))
    assert summarize(record).model_calls == len(fake_provider.requests) == 2  # both chat offers, once each

    no_offer = Router([], transport_for=transport_for)
    record = await service.compact_call(request, deadline=Deadline.after_ms(20_000), router=no_offer)
    assert summarize(record).model_calls == 0  # was 1


async def test_an_unpriced_failed_attempt_makes_the_answered_cost_unknown(fake_provider: FakeProviderServer) -> None:
    """docs/behaviour.md "Cost rules": the cheap offer answers 200 with usage (1,000,000 prompt tokens, billed) but
    no chat completion, and no reported cost; the next offer answers. Its cost alone was reported as the call's,
    a known figure leaving the billed attempt out: the total is unknown now, never a partial sum."""
    def answer(request: Any) -> Reply:
        if request.json["model"] == "fast/chat":
            return Reply(200, {"id": "x", "choices": [], "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 0,
                                                                   "total_tokens": 1_000_000}})
        return chat_reply("A short sealed summary.", prompt_tokens=10, completion_tokens=5)

    fake_provider.responder = answer
    request = CompactRequest(messages=transcript(), keep_recent=2, policy_ir=CHEAP_FIRST)
    record = await service.compact_call(request, deadline=Deadline.after_ms(20_000), router=router(fake_provider))
    status, body = record.answer()
    attempts = [(e["offer"], e["error_kind"]) for e in body["x_router"]["decision_trace"]["decision_path"]
                if e["event"] == "attempted"]
    assert status == 200 and body["compacted"] is True
    assert attempts == [("fast/chat", "bad_response"), ("strong/chat", None)]
    assert body["x_router"]["cost_usd"] is None and body["x_router"]["cost_basis"] is None
    summary = summarize(record)
    assert summary.cost_usd is None and summary.cost_known is False

    # A failed attempt that reported its cost is added: the total stays known.
    fake_provider.responder = lambda request: (Reply(200, {"choices": [], "usage": {"cost": 0.25}})
                                               if request.json["model"] == "fast/chat"
                                               else chat_reply("A short sealed summary.", cost=0.5))
    _, body = await service.compact(request, deadline=Deadline.after_ms(20_000), router=router(fake_provider))
    assert body["compacted"] is True and body["x_router"]["cost_usd"] == 0.75


RETRY_SAME = ["policy", ["meets_req"], ["neg", ["field", "price_in"]], ["argmax"], ["id"],
              ["always", {"action": "retry_same", "attempts": 3, "backoff_ms": 0}]]


async def _cut_off_mid_retry(fake_provider: FakeProviderServer) -> Any:
    """A flow whose llm node's timeout (5 s) cancels its routed call during the third attempt under ``retry_same``:
    two 503s, then an answer held 30 s."""
    down = Reply(503, {"error": {"message": "down"}})
    fake_provider.enqueue(down, down, chat_reply("late", delay_s=30.0))
    one = Router([offers(fake_provider)[2]], transport_for=transport_for, sleep=Sleeps())
    flow = ["flow", {"input": {"kind": "input"},
                     "write": {"kind": "llm", "inputs": ["input"], "policy": RETRY_SAME, "system": "Answer.",
                               "timeout_ms": 5000},
                     "output": {"kind": "output", "inputs": ["write"]}}]
    admitted = admit_flow(flow, admit_policy=one.admit_policy, flow_input="a question")
    return await run_flow(admitted, "a question", router=one, deadline=Deadline.after_ms(20_000))


async def test_a_node_timeout_mid_retry_counts_every_attempt_sent(fake_provider: FakeProviderServer) -> None:
    """A node's timeout cancels its routed call during its third attempt: three requests were sent, and billing
    counts three (it counted one, as for a node cut off with nothing known of its call)."""
    result = await _cut_off_mid_retry(fake_provider)
    assert not result.ok and result.error_kind == "timeout"
    assert flow_facts(result.flow_nodes)["model_calls"] == len(fake_provider.requests) == 3
    entry = next(node for node in result.flow_nodes if node["kind"] == "llm")
    assert [(event["attempt"], event["error_kind"]) for event in entry["decision_trace"]["decision_path"]
            if event["event"] == "attempted"] == [(1, "upstream_error"), (2, "upstream_error"), (3, "timeout")]
    assert result.cost_usd is None  # the cut-off attempt may have been billed


async def test_a_call_cut_off_by_a_node_timeout_is_in_the_calls_tally(fake_provider: FakeProviderServer) -> None:
    """The tally a crashed call's record is built from (counting_calls) counts the attempts of a routed call a node
    timeout cancelled, as the node's record does: it counted none, so a call that then crashed was recorded with
    fewer model calls than it had sent."""
    with counting_calls() as counted:
        result = await _cut_off_mid_retry(fake_provider)
    assert not result.ok and result.error_kind == "timeout"
    assert counted.model_calls == flow_facts(result.flow_nodes)["model_calls"] == len(fake_provider.requests) == 3


async def test_a_routing_decision_cut_off_by_its_timeout_is_counted(fake_provider: FakeProviderServer) -> None:
    """A routing decision cancelled at its timeout was sent: it counts beside the generation (it counted none)."""
    fake_provider.enqueue(decision_reply({}, delay_s=30.0), chat_reply("answer"))
    flow = routed_flow(routing(timeout_ms=2000))
    shared = router(fake_provider)
    admitted = admit_flow(flow, admit_policy=shared.admit_policy, flow_input="a question")
    result = await run_flow(admitted, "a question", router=shared, deadline=Deadline.after_ms(20_000))
    assert result.ok
    entry = next(node for node in result.flow_nodes if node["kind"] == "llm")
    assert entry["routing"]["fallback_reason"] == "decision_timeout"
    assert flow_facts(result.flow_nodes)["model_calls"] == len(fake_provider.requests) == 2
