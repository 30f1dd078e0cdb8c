"""Decision routing on llm nodes (docs/behaviour.md#decision-routing): admission, identity, runtime, trace and costs."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import time
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.flow import FlowAdmissionError, admit_flow, normalize_flow, run_flow
from compactor.flow.partition import merge_results, partition_flow
from compactor.flow.result import result_from_json, result_to_json
from compactor.flow.decision_routing import project_messages, routing_state
from compactor.flow.trace import aggregate, node_cost
from compactor.providers.base import DecisionResponse, Offer, ProviderError
from compactor.router import RouteResult

from .chains import chain_reply
from .fake_router import CHAT_OFFER, DECIDER_OFFER, FakeRouter
from .triage import POLICY, relabel

FAST_POLICY = ["policy", ["meets_req"], ["neg", ["field", "price_in"]], ["argmax"], ["id"],
               ["always", {"action": "next_candidate"}]]
STRONG_POLICY = ["policy", ["meets_req"], ["field", "context"], ["argmax"], ["id"],
                 ["always", {"action": "next_candidate"}]]
ROUTE_POLICY = ["policy", ["meets_req"], ["neg", ["field", "price_out"]], ["argmax"], ["id"],
                ["always", {"action": "next_candidate"}]]
FAST_OFFER = Offer(id="fake/fast", provider="fastchat", family="fast", model="fast-1", protocol="chat",
                   transport="builtin", price_in=0.1, price_out=0.2)
STRONG_OFFER = Offer(id="fake/strong", provider="strongchat", family="strong", model="strong-1", protocol="chat",
                     transport="builtin", price_in=3.0, price_out=6.0)
ROUTING_KEYS = {"selected", "fallback_used", "fallback_reason", "proposed", "confidence", "probabilities",
                "cost_usd", "tokens_in", "tokens_out", "model", "decision_trace"}


def routing(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "policy": ROUTE_POLICY,
        "instructions": "Pick the model that should answer this request.",
        "choices": {"fast": {"description": "Simple requests a small model answers well", "policy": FAST_POLICY},
                    "strong": {"description": "Hard requests that need careful reasoning", "policy": STRONG_POLICY}},
        "fallback": "strong",
    }
    for key, value in changes.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    return record


def routed_flow(route: Any = None, *, labels: tuple[str, str, str] = ("input", "answer", "output"),
                **node: Any) -> list[Any]:
    i, a, o = labels
    llm = {"kind": "llm", "inputs": [i], "system": "Answer.", "policy": POLICY,
           "routing": routing() if route is None else route, **node}
    return ["flow", {i: {"kind": "input"}, a: llm, o: {"kind": "output", "inputs": [a]}}]


def make_router(**kwargs: Any) -> FakeRouter:
    probe = FakeRouter()
    offers = {probe.admit_policy(FAST_POLICY).fingerprint: FAST_OFFER,
              probe.admit_policy(STRONG_POLICY).fingerprint: STRONG_OFFER}
    return FakeRouter(chat_offers=offers, **kwargs)


ROUTER = make_router()


def admit(flow: Any) -> Any:
    return admit_flow(flow, admit_policy=ROUTER.admit_policy)


def rejected(flow: Any) -> str:
    with pytest.raises(FlowAdmissionError) as info:
        admit(flow)
    return info.value.message


def answer(choice: Any = "fast", confidence: Any = 0.9, probabilities: Any = None, **extra: Any):
    def handler(request: Any) -> DecisionResponse:
        route: dict[str, Any] = {"type": "choice", "choice": choice}
        if confidence is not None:
            route["confidence"] = confidence
        if probabilities is not None:
            route["probabilities"] = probabilities
        return DecisionResponse(model="fake-decider-1", answers={"route": route}, tokens_in=120, tokens_out=8,
                                **extra)
    return handler


CONVERSATION = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "What is 2+2?"}]


async def run(flow: Any, router: FakeRouter, *, budget_ms: int = 40_000, conversation: Any = CONVERSATION):
    admitted = admit_flow(flow, admit_policy=router.admit_policy)
    return await run_flow(admitted, router=router, deadline=Deadline.after_ms(budget_ms), conversation=conversation)


# --- admission -------------------------------------------------------------------------------------------

def test_routing_is_admitted_with_defaults() -> None:
    admitted = admit(routed_flow())
    node = admitted.nodes[1]
    assert node.routing is not None
    assert (node.routing.fallback, node.routing.min_confidence, node.routing.timeout_ms) == ("strong", 0.0, 2500)
    assert node.routing.policy.fingerprint == ROUTER.admit_policy(ROUTE_POLICY).fingerprint
    assert {k: p.fingerprint for k, p in node.routing.choices.items()} == {
        "fast": ROUTER.admit_policy(FAST_POLICY).fingerprint, "strong": ROUTER.admit_policy(STRONG_POLICY).fingerprint}
    assert not admitted.typed  # routing alone does not make a flow typed (docs/behaviour.md#flow-admission)


@pytest.mark.parametrize("changes", [
    {"min_confidence": 0}, {"min_confidence": 1}, {"min_confidence": 0.5}, {"min_confidence": 1.0},
    {"timeout_ms": 100}, {"timeout_ms": 10_000},
    {"choices": {f"c{i}": {"description": "d", "policy": FAST_POLICY} for i in range(16)}, "fallback": "c0"},
    {"choices": {"é" * 32: {"description": "é" * 1000, "policy": FAST_POLICY},
                 "b": {"description": "d", "policy": FAST_POLICY}}, "fallback": "b"},
    {"instructions": "x" * 2000},
])
def test_routing_bounds_are_admitted(changes: dict[str, Any]) -> None:
    admit(routed_flow(routing(**changes)))


def _choices(**extra: Any) -> dict[str, Any]:
    base = copy.deepcopy(routing()["choices"])
    base.update(extra)
    return base


ROUTING_ERRORS: list[tuple[str, Any, str]] = [
    ("not an object", ["fast", "strong"], "routing must be an object"),
    ("unknown key", routing(threshold=0.5), "option 'threshold' is not allowed in routing"),
    ("missing policy", routing(policy=None), "routing needs a policy"),
    ("missing instructions", routing(instructions=None), "routing instructions must be 1–2000 bytes"),
    ("empty instructions", routing(instructions=""), "routing instructions must be 1–2000 bytes"),
    ("instructions over 2000 bytes", routing(instructions="é" * 1001), "routing instructions must be 1–2000 bytes"),
    ("instructions not a string", routing(instructions=["pick"]), "routing instructions must be 1–2000 bytes"),
    ("missing choices", routing(choices=None), "routing choices must be an object with 2–16 choices"),
    ("choices a list", routing(choices=[{"description": "d", "policy": FAST_POLICY}] * 2),
     "routing choices must be an object with 2–16 choices"),
    ("one choice", routing(choices={"strong": {"description": "d", "policy": FAST_POLICY}}),
     "routing choices must be an object with 2–16 choices"),
    ("17 choices", routing(choices={f"c{i}": {"description": "d", "policy": FAST_POLICY} for i in range(17)},
                           fallback="c0"), "routing choices must be an object with 2–16 choices"),
    ("empty choice id", routing(choices=_choices(**{"": {"description": "d", "policy": FAST_POLICY}})),
     "routing choice ids must be 1–64 bytes"),
    ("choice id over 64 bytes", routing(choices=_choices(**{"é" * 33: {"description": "d", "policy": FAST_POLICY}})),
     "routing choice ids must be 1–64 bytes"),
    ("choice not an object", routing(choices=_choices(fast="small model")),
     "routing choice 'fast': a choice must be an object"),
    ("unknown choice key", routing(choices=_choices(fast={"description": "d", "policy": FAST_POLICY, "weight": 1})),
     "routing choice 'fast': option 'weight' is not allowed in a routing choice"),
    ("missing description", routing(choices=_choices(fast={"policy": FAST_POLICY})),
     "routing choice 'fast': description must be 1–2000 bytes"),
    ("empty description", routing(choices=_choices(fast={"description": "", "policy": FAST_POLICY})),
     "routing choice 'fast': description must be 1–2000 bytes"),
    ("description over 2000 bytes", routing(choices=_choices(fast={"description": "x" * 2001, "policy": FAST_POLICY})),
     "routing choice 'fast': description must be 1–2000 bytes"),
    ("choice without policy", routing(choices=_choices(fast={"description": "d"})),
     "routing choice 'fast': a choice needs a policy"),
    ("missing fallback", routing(fallback=None), "routing fallback must name a choice"),
    ("fallback not a choice", routing(fallback="medium"), "routing fallback must name a choice"),
    ("fallback not a string", routing(fallback=1), "routing fallback must name a choice"),
    ("min_confidence below 0", routing(min_confidence=-0.1), "routing min_confidence must be a finite number 0–1"),
    ("min_confidence above 1", routing(min_confidence=1.5), "routing min_confidence must be a finite number 0–1"),
    ("min_confidence NaN", routing(min_confidence=math.nan), "routing min_confidence must be a finite number 0–1"),
    ("min_confidence inf", routing(min_confidence=math.inf), "routing min_confidence must be a finite number 0–1"),
    ("min_confidence bool", routing(min_confidence=True), "routing min_confidence must be a finite number 0–1"),
    ("min_confidence string", routing(min_confidence="0.5"), "routing min_confidence must be a finite number 0–1"),
    ("timeout_ms 99", routing(timeout_ms=99), "routing timeout_ms must be an integer 100–10000"),
    ("timeout_ms 10001", routing(timeout_ms=10_001), "routing timeout_ms must be an integer 100–10000"),
    ("timeout_ms float", routing(timeout_ms=2500.0), "routing timeout_ms must be an integer 100–10000"),
    ("timeout_ms bool", routing(timeout_ms=True), "routing timeout_ms must be an integer 100–10000"),
    ("bad routing policy", routing(policy=["zero"]), "routing policy rejected: "),
    ("bad choice policy", routing(choices=_choices(fast={"description": "d", "policy": ["zero"]})),
     "routing choice 'fast' policy rejected: "),
    ("route question over 32000 bytes",
     routing(choices={f"c{i}": {"description": "x" * 2000, "policy": FAST_POLICY} for i in range(16)}, fallback="c0"),
     "routing question: Decision request exceeds 32000 bytes."),
]


@pytest.mark.parametrize(("route", "expected"), [(r, m) for _, r, m in ROUTING_ERRORS],
                         ids=[name for name, _, _ in ROUTING_ERRORS])
def test_malformed_routing_is_rejected(route: Any, expected: str) -> None:
    message = rejected(routed_flow(route))
    assert message.startswith('node "answer": '), message
    assert expected in message, message


def test_routing_only_on_llm_nodes() -> None:
    flow = ["flow", {"input": {"kind": "input"},
                     "ask": {"kind": "decision", "inputs": ["input"], "policy": POLICY, "routing": routing(),
                             "questions": {"q": {"type": "noul", "instructions": "Yes?"}}},
                     "output": {"kind": "output", "inputs": ["ask"]}}]
    assert rejected(flow) == "node \"ask\": option 'routing' is not allowed on a decision node"
    data = ["flow", {"input": {"kind": "input"},
                     "p": {"kind": "data", "operation": "project", "path": ["a"], "inputs": ["input"],
                           "routing": routing()},
                     "output": {"kind": "output", "inputs": ["p"]}}]
    assert rejected(data) == "node \"p\": option 'routing' is not allowed on a data node"


def test_routing_policies_use_the_same_admission_callable() -> None:
    seen: list[Any] = []

    def counting(term: Any) -> Any:
        seen.append(term)
        return ROUTER.admit_policy(term)

    admit_flow(routed_flow(routing(choices=_choices(fast={"description": "d", "policy": POLICY}))),
               admit_policy=counting)
    # node POLICY (also the fast choice: admitted once), ROUTE_POLICY, STRONG_POLICY
    assert sorted(map(json.dumps, seen)) == sorted(map(json.dumps, [POLICY, ROUTE_POLICY, STRONG_POLICY]))


# --- identity --------------------------------------------------------------------------------------------

def test_routing_key_sits_after_template_in_the_llm_encoding() -> None:
    encoding = admit(routed_flow(template="Q: $1", max_tokens=64)).encoding
    node = encoding.split(") (", 1)[1]
    assert node.startswith('llm n1 system="Answer." policy=sigma-pol/v2:')
    template, routing_at, data = node.index(' template="Q: $1"'), node.index(" routing=t"), node.index(" data=t")
    assert template < routing_at < data < node.index(" inputs=[n0]")
    # every policy enters by its sigma-pol/v2 encoding
    assert node.count("sigma-pol/v2:") == 4
    assert ROUTER.admit_policy(ROUTE_POLICY).encoding in node


def test_renaming_nodes_or_reordering_choices_keeps_identity() -> None:
    base = admit(routed_flow())
    renamed = admit(relabel(routed_flow(), {"input": "start", "answer": "x", "output": "end"}))
    reordered_choices = dict(reversed(list(routing()["choices"].items())))
    reordered = admit(routed_flow(dict(reversed(list(routing(choices=reordered_choices).items())))))
    assert renamed.encoding == reordered.encoding == base.encoding
    assert renamed.fingerprint == reordered.fingerprint == base.fingerprint


@pytest.mark.parametrize(("one", "other"), [(1, 1.0), (0, 0.0), (0, -0.0)])
def test_one_threshold_spelt_two_ways_is_one_identity(one: float, other: float) -> None:
    # JSON has one number type: a client that writes 1.0 and one that writes 1 send the same flow (the
    # fingerprints differed, the typed encoding writing a float 1.0 as "1.0")
    assert admit(routed_flow(routing(min_confidence=one))).encoding == \
        admit(routed_flow(routing(min_confidence=other))).encoding


@pytest.mark.parametrize(("one", "other"), [(0.3, 0.30000000000000004), (0.5, 0.500000000000001)])
def test_two_thresholds_are_two_identities(one: float, other: float) -> None:
    # the typed encoding writes a float with 14 significant digits, which told these apart from nothing
    assert admit(routed_flow(routing(min_confidence=one))).encoding != \
        admit(routed_flow(routing(min_confidence=other))).encoding


def test_a_threshold_of_few_digits_keeps_its_encoding() -> None:
    assert "s14:min_confidencen0.25:" in admit(routed_flow(routing(min_confidence=0.25))).encoding


SENSITIVE: list[tuple[str, dict[str, Any]]] = [
    ("routing policy", {"policy": FAST_POLICY}),
    ("instructions", {"instructions": "Pick a model."}),
    ("description", {"choices": _choices(fast={"description": "Easy ones", "policy": FAST_POLICY})}),
    ("choice policy", {"choices": _choices(fast={"description": "Simple requests a small model answers well",
                                                 "policy": ROUTE_POLICY})}),
    ("choice id", {"choices": {"quick": _choices()["fast"], "strong": _choices()["strong"]}}),
    ("extra choice", {"choices": _choices(mid={"description": "Medium", "policy": FAST_POLICY})}),
    ("fallback", {"fallback": "fast"}),
    ("min_confidence", {"min_confidence": 0.25}),
    ("explicit default min_confidence", {"min_confidence": 0}),
    ("timeout_ms", {"timeout_ms": 900}),
]


@pytest.mark.parametrize("changes", [c for _, c in SENSITIVE], ids=[n for n, _ in SENSITIVE])
def test_changing_any_routing_field_changes_the_fingerprint(changes: dict[str, Any]) -> None:
    assert admit(routed_flow(routing(**changes))).fingerprint != admit(routed_flow()).fingerprint


def test_routing_changes_identity_and_flows_without_it_are_unchanged() -> None:
    plain = ["flow", {"input": {"kind": "input"},
                      "answer": {"kind": "llm", "inputs": ["input"], "system": "Answer.", "policy": POLICY},
                      "output": {"kind": "output", "inputs": ["answer"]}}]
    assert " routing=" not in admit(plain).encoding
    assert admit(plain).fingerprint != admit(routed_flow()).fingerprint


def test_normalize_rewrites_routing_policies_and_round_trips() -> None:
    admitted = admit(routed_flow(labels=("a", "b", "c")))
    normalized = normalize_flow(admitted)
    node = normalized["flow_ir"][1]["n1"]
    assert node["routing"]["policy"] == ROUTER.admit_policy(ROUTE_POLICY).policy.term
    assert node["routing"]["choices"]["fast"]["policy"] == ROUTER.admit_policy(FAST_POLICY).policy.term
    assert node["routing"]["fallback"] == "strong"
    assert admit(normalized["flow_ir"]).encoding == admitted.encoding


# --- runtime ---------------------------------------------------------------------------------------------

async def test_selected_choice_policy_serves_the_generation() -> None:
    router = make_router(decide=answer("fast"))
    result = await run(routed_flow(), router)
    assert result.ok and result.output == "ok"
    decide, chat = router.calls
    assert decide.kind == "decide" and chat.kind == "chat"
    assert decide.policy.fingerprint == router.admit_policy(ROUTE_POLICY).fingerprint
    assert chat.policy.fingerprint == router.admit_policy(FAST_POLICY).fingerprint
    entry = result.flow_nodes[0]
    assert (entry["provider"], entry["served_model_id"]) == ("fastchat", "fast-1")
    assert entry["policy_fingerprint"] == router.admit_policy(FAST_POLICY).fingerprint
    assert entry["routing"]["selected"] == "fast" and entry["routing"]["fallback_used"] is False

    router = make_router(decide=answer("strong"))
    entry = (await run(routed_flow(), router)).flow_nodes[0]
    assert (entry["provider"], entry["served_model_id"]) == ("strongchat", "strong-1")


async def test_routing_decision_request() -> None:
    router = make_router(decide=answer("fast"))
    await run(routed_flow(routing(timeout_ms=1200), template="Question: $1"), router)
    decide = router.calls[0]
    assert decide.timeout_s == pytest.approx(1.2)
    assert decide.request.questions == {"route": {
        "type": "choice", "instructions": "Pick the model that should answer this request.",
        "criteria": {"fast": "Simple requests a small model answers well",
                     "strong": "Hard requests that need careful reasoning"}}}
    assert decide.request.state == {
        "messages": [json.dumps(CONVERSATION[1]), json.dumps(CONVERSATION[0])], "omitted_messages": 0,
        "request": "Question: What is 2+2?", "request_truncated": False}


def test_state_projection_bounds() -> None:
    messages = [{"role": "user", "content": f"m{i} " + "é" * 3000} for i in range(8)]
    texts, omitted = project_messages(messages)
    assert all(text.isascii() for text in texts)
    assert texts[0].startswith('{"role": "user", "content": "m7 \\u00e9')  # newest first
    assert [len(t) for t in texts] == [2400] * 5 and omitted == 3  # 12 000 reached exactly
    short = [{"role": "user", "content": "y"}] + [{"role": "user", "content": "x" * 2368}] * 5
    texts, omitted = project_messages(short)
    # 5 × 2399 chars leave 5 < 128: the oldest message is left out
    assert [len(t) for t in texts] == [2399] * 5 and omitted == 1
    cut = [{"role": "user", "content": "x" * 2300}] * 5 + [{"content": "z" * 3000}]
    texts, omitted = project_messages(list(reversed(cut)))
    assert sum(map(len, texts)) == 12_000 and len(texts[-1]) == 12_000 - 5 * len(json.dumps(cut[0]))
    assert omitted == 0
    state = routing_state([], "q" * 2001)
    assert state == {"messages": [], "omitted_messages": 0, "request": "q" * 2000, "request_truncated": True}
    assert routing_state([], "q" * 2000)["request_truncated"] is False


async def test_oversized_routing_state_drops_oldest_messages() -> None:
    route = routing(choices={f"c{i}": {"description": "é" * 900, "policy": FAST_POLICY} for i in range(5)},
                    fallback="c0")
    router = make_router(decide=answer("c1"))
    conversation = [{"role": "user", "content": '"' * 1000} for _ in range(6)]
    result = await run(routed_flow(route), router, conversation=conversation)
    state = router.calls[0].request.state
    assert state["omitted_messages"] + len(state["messages"]) == 6 and state["omitted_messages"] > 1
    assert result.flow_nodes[0]["routing"]["selected"] == "c1"


FALLBACKS: list[tuple[str, dict[str, Any], Any, str]] = [
    ("router failure", {}, lambda r: ProviderError("upstream_error", "boom"), "decision_failed"),
    ("missing confidence", {}, answer("fast", confidence=None), "uncertain"),
    ("below min_confidence", {"min_confidence": 0.95}, answer("fast", confidence=0.9), "uncertain"),
    ("unknown choice", {}, answer("medium"), "invalid_decision"),
    ("bad probabilities", {}, answer("fast", probabilities={"fast": 0.2, "strong": 0.8}), "invalid_decision"),
    ("missing answer", {}, lambda r: DecisionResponse(model="m", answers={}), "invalid_decision"),
    ("router raises", {}, lambda r: (_ for _ in ()).throw(RuntimeError("router down")), "decision_error"),
]


@pytest.mark.parametrize(("changes", "decide", "reason"), [(c, d, r) for _, c, d, r in FALLBACKS],
                         ids=[name for name, *_ in FALLBACKS])
async def test_fallback_reasons(changes: dict[str, Any], decide: Any, reason: str) -> None:
    router = make_router(decide=decide)
    result = await run(routed_flow(routing(fallback="strong", **changes)), router)
    assert result.ok
    record = result.flow_nodes[0]["routing"]
    assert (record["selected"], record["fallback_used"], record["fallback_reason"]) == ("strong", True, reason)
    assert router.calls[-1].policy.fingerprint == router.admit_policy(STRONG_POLICY).fingerprint
    assert result.flow_nodes[0]["served_model_id"] == "strong-1"
    if reason in ("decision_failed", "invalid_decision", "decision_error"):
        assert record["error"]
    if reason == "uncertain":
        assert record["proposed"] == "fast"  # proposed but not trusted


async def test_confidence_at_threshold_is_trusted() -> None:
    router = make_router(decide=answer("fast", confidence=0.5))
    record = (await run(routed_flow(routing(min_confidence=0.5)), router)).flow_nodes[0]["routing"]
    assert (record["selected"], record["fallback_used"], record["confidence"]) == ("fast", False, 0.5)


async def test_decision_timeout_falls_back_and_cost_is_unknown() -> None:
    async def slow(request: Any) -> DecisionResponse:
        await asyncio.sleep(5)
        raise AssertionError("not reached")

    router = make_router(decide=slow)
    result = await run(routed_flow(routing(timeout_ms=100)), router)
    assert result.ok and router.cancelled == ["decide"]
    record = result.flow_nodes[0]["routing"]
    assert (record["selected"], record["fallback_reason"]) == ("strong", "decision_timeout")
    assert record["error"] == "timeout: routing timeout after 100 ms; call cancelled"
    assert record["cost_usd"] is None and result.cost_usd is None  # a cancelled call's cost is unknown


async def test_node_timeout_covers_routing_and_generation() -> None:
    async def slow(request: Any) -> DecisionResponse:
        await asyncio.sleep(5)
        raise AssertionError("not reached")

    router = make_router(decide=slow)
    result = await run(routed_flow(timeout_ms=150), router)  # routing default 2500 ms > node 150 ms
    assert not result.ok and result.error_kind == "timeout"
    entry = result.flow_nodes[0]
    assert entry["routing"]["fallback_reason"] == "decision_timeout"
    assert entry["routing"]["error"] == "timeout: node timeout after 150 ms; call cancelled"
    assert entry["error"] == "timeout: node timeout after 150 ms during routing; generation not called"
    assert [call.kind for call in router.calls] == ["decide"]

    async def after_a_while(request: Any) -> DecisionResponse:
        await asyncio.sleep(0.05)
        return answer("fast")(request)

    router = make_router(decide=after_a_while)
    started = time.monotonic()
    await run(routed_flow(timeout_ms=3000), router)
    elapsed = time.monotonic() - started
    decide, chat = router.calls
    assert decide.timeout_s == pytest.approx(2.5)
    # What is left of the node timeout: less the routing's 50 ms at least, less the whole run's time at most
    # (bounded by the run's own clock, not a fixed floor, so a loaded machine cannot fail it).
    assert 3.0 - elapsed <= chat.timeout_s <= 3.0 - 0.05


async def test_routing_counts_against_the_shared_deadline() -> None:
    async def slow(request: Any) -> DecisionResponse:
        await asyncio.sleep(5)
        raise AssertionError("not reached")

    router = make_router(decide=slow)
    result = await run(routed_flow(on_error="input"), router, budget_ms=150)
    entry = result.flow_nodes[0]
    assert entry["routing"]["error"] == "timeout: flow budget expired; call cancelled"
    assert entry["error"] == "flow_deadline: no time left after routing; generation not called"
    assert entry["fallback"] == "input" and entry["cost_reported"] == 0 and "skipped" not in entry
    assert result.cost_usd is None  # the cancelled routing call


async def test_expired_deadline_skips_routing_too() -> None:
    router = make_router()
    result = await run(routed_flow(), router, budget_ms=0)
    assert not result.ok and result.error_kind == "flow_deadline" and router.calls == []
    assert "routing" not in result.flow_nodes[0] and result.cost_usd == 0.0


async def test_trace_entry_shape_and_costs() -> None:
    probabilities = {"fast": 0.7, "strong": 0.3}
    router = make_router(decide=answer("fast", confidence=0.8, probabilities=probabilities))
    result = await run(routed_flow(), router)
    entry = result.flow_nodes[0]
    record = entry["routing"]
    assert set(record) == ROUTING_KEYS
    decision_cost = round((120 * 0.5 + 8 * 0.5) / 1e6, 12)
    chat_cost = round((50 * 0.1 + 5 * 0.2) / 1e6, 6)
    assert {k: v for k, v in record.items() if k != "decision_trace"} == {
        "selected": "fast", "fallback_used": False, "fallback_reason": None, "proposed": "fast",
        "confidence": 0.8, "probabilities": probabilities, "cost_usd": decision_cost, "tokens_in": 120,
        "tokens_out": 8, "model": "fake-decider-1"}
    assert record["decision_trace"]["policy_fingerprint"] == router.admit_policy(ROUTE_POLICY).fingerprint
    assert (entry["tokens_in"], entry["tokens_out"], entry["cost_reported"]) == (50, 5, chat_cost)
    assert result.cost_usd == pytest.approx(chat_cost + decision_cost)
    assert (result.tokens_in, result.tokens_out) == (170, 13)
    json.dumps(result.x_router())  # JSON-ready


async def test_unknown_routing_cost_makes_the_aggregate_unknown() -> None:
    def unpriced(request: Any) -> RouteResult:
        reply = answer("fast")(request)
        return RouteResult(ok=True, response=reply, chosen=DECIDER_OFFER, trace={}, cost_usd=None)

    router = make_router(decide=unpriced)
    result = await run(routed_flow(), router)
    assert result.ok and result.flow_nodes[0]["cost_reported"] is not None
    assert result.flow_nodes[0]["routing"]["cost_usd"] is None
    assert result.cost_usd is None and result.x_router()["cost_usd"] is None
    assert result.tokens_in == 170  # tokens still add up
    assert node_cost({"cost_reported": 0.1, "routing": {"cost_usd": None}}) is None
    assert node_cost({"cost_reported": 0.1, "routing": {"cost_usd": 0.02}}) == pytest.approx(0.12)
    assert aggregate([{"cost_reported": 0, "routing": {"cost_usd": -1}}]).cost_usd is None


async def test_no_candidates_for_routing_costs_nothing() -> None:
    def none_left(request: Any) -> RouteResult:
        return RouteResult(ok=False, response=None, chosen=None, trace={"ranked": []}, error_kind="no_candidates",
                           error_message="no offer")

    router = make_router(decide=none_left)
    result = await run(routed_flow(), router)
    record = result.flow_nodes[0]["routing"]
    assert (record["fallback_reason"], record["cost_usd"], record["error"]) == (
        "decision_failed", 0, "no_candidates: no offer")
    assert result.cost_usd == result.flow_nodes[0]["cost_reported"]


async def test_failed_generation_keeps_the_routing_entry() -> None:
    router = make_router(decide=answer("fast"), chat=lambda r: ProviderError("rate_limit", "slow down"))
    result = await run(routed_flow(on_error="input"), router)
    entry = result.flow_nodes[0]
    assert entry["fallback"] == "input" and entry["routing"]["selected"] == "fast"
    assert result.tokens_in == 120 and result.cost_usd is None


async def test_routing_decision_trace_is_trimmed_in_x_router() -> None:
    router = make_router(decide=answer("fast"), ranked_extra=15)
    result = await run(routed_flow(), router)
    trimmed = result.x_router()["decision_trace"]["flow_nodes"][0]["routing"]["decision_trace"]
    assert len(trimmed["ranked"]) == 10 and trimmed["ranked_total"] == 16
    assert len(result.flow_nodes[0]["routing"]["decision_trace"]["ranked"]) == 16  # not mutated


async def test_default_chat_offer_unchanged_for_unrouted_nodes() -> None:
    router = make_router()
    flow = ["flow", {"input": {"kind": "input"},
                     "answer": {"kind": "llm", "inputs": ["input"], "system": "Answer.", "policy": POLICY},
                     "output": {"kind": "output", "inputs": ["answer"]}}]
    result = await run(flow, router)
    assert "routing" not in result.flow_nodes[0]
    assert result.flow_nodes[0]["served_model_id"] == CHAT_OFFER.model
    assert [call.kind for call in router.calls] == ["chat"]


async def test_routed_nodes_partition_like_any_llm_node() -> None:
    nodes: dict[str, Any] = {"input": {"kind": "input"}}
    for i in range(2):
        nodes[f"pick_{i}"] = {"kind": "data", "operation": "project", "inputs": ["input"], "path": [f"c{i}"]}
        nodes[f"say_{i}"] = {"kind": "llm", "inputs": [f"pick_{i}"], "system": f"Chain {i}.", "policy": POLICY,
                             "context": "inputs", "output_format": "json", "routing": routing()}
    nodes["merged"] = {"kind": "data", "operation": "union", "inputs": ["say_0", "say_1"]}
    nodes["output"] = {"kind": "output", "inputs": ["merged"]}
    flow_input = {"c0": "first", "c1": "second"}

    router = make_router(decide=answer("fast"), chat=chain_reply)
    flow = admit_flow(["flow", nodes], admit_policy=router.admit_policy, flow_input=flow_input)
    inline = await run_flow(flow, flow_input, router=router, deadline=Deadline.after_ms(40_000))
    partition = partition_flow(flow, router.admit_policy)
    assert partition is not None and len(partition.components) == 2
    results = []
    for component in partition.components:
        payload = json.loads(json.dumps(component.payload(flow_input)))
        worker = make_router(decide=answer("fast"), chat=chain_reply)
        admitted = admit_flow(payload["flow_ir"], admit_policy=worker.admit_policy, flow_input=payload["flow_input"])
        assert admitted.nodes[2].routing is not None
        result = await run_flow(admitted, payload["flow_input"], router=worker, deadline=Deadline.after_ms(40_000))
        results.append(result_from_json(json.loads(json.dumps(result_to_json(result)))))
    merged = await merge_results(partition, results, router=router, deadline=Deadline.after_ms(40_000))
    assert inline.ok and merged.output == inline.output == {"c0": "answer 0", "c1": "answer 1"}
    assert json.dumps(result_to_json(merged)) == json.dumps(result_to_json(inline))
    assert all(entry["routing"]["selected"] == "fast" for entry in inline.flow_nodes if entry["kind"] == "llm")


def test_answer_reasons_are_kept_and_survive_the_result_json() -> None:
    from compactor.flow.result import MAX_REASON_CHARS, answer_reasons

    answers = {"a": {"type": "choice", "choice": "keep", "reason": "r" * 100}, "b": {"type": "choice", "choice": "x"},
               "c": {"type": "choice", "choice": "x", "reason": 3}}
    assert answer_reasons(answers) == {"a": "r" * MAX_REASON_CHARS}
    assert answer_reasons(None) == {}
    stored = {"ok": True, "output": None, "failed_node": None, "error_kind": None, "error_message": None,
              "flow_nodes": [], "fingerprint": "f", "cost_usd": None, "tokens_in": None, "tokens_out": None,
              "tokens_cached": None}
    assert result_from_json(stored).answer_reasons == {}  # a result stored before the field existed
    again = result_from_json(json.loads(json.dumps(result_to_json(result_from_json({**stored, "answer_reasons": {"a": "x"}})))))
    assert again.answer_reasons == {"a": "x"}
