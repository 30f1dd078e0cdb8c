"""Trace entries, cost and token aggregation, the flow ``x_router`` block and ``usage``."""

from __future__ import annotations

import copy
import json

import pytest

from compactor.budget import Deadline
from compactor.flow import admit_flow, run_flow
from compactor.flow.trace import aggregate, node_cost
from compactor.providers.base import ChatResponse

from .fake_router import FakeRouter
from .triage import FLOW_INPUT, triage_flow


@pytest.mark.parametrize(("entry", "cost"), [
    ({"cost_reported": 0}, 0.0),
    ({"cost_reported": 0.25, "raw_price_in": 9, "raw_price_out": 9, "tokens_in": 9, "tokens_out": 9}, 0.25),
    ({"cost_reported": None, "raw_price_in": 1.0, "raw_price_out": 2.0, "tokens_in": 1000, "tokens_out": 500}, 0.002),
    ({"cost_reported": -1, "raw_price_in": 1.0, "raw_price_out": 2.0, "tokens_in": 1000, "tokens_out": 0}, 0.001),
    ({"raw_price_in": 1.0, "raw_price_out": 2.0, "tokens_in": 1000, "tokens_out": 0, "tokens_cached": 500}, 0.00055),
    ({"cost_reported": None, "raw_price_in": 1.0, "raw_price_out": 2.0, "tokens_in": 1000, "tokens_out": None}, None),
    ({"cost_reported": None, "raw_price_in": None, "raw_price_out": 2.0, "tokens_in": 1, "tokens_out": 1}, None),
    ({"error": "timeout: node timeout after 5 ms; call cancelled"}, None),
])
def test_node_cost(entry: dict, cost: float | None) -> None:
    assert node_cost(entry) == (None if cost is None else pytest.approx(cost))


def test_aggregate_is_unknown_when_any_node_is_unknown() -> None:
    known = [{"cost_reported": 0}, {"cost_reported": 0.1, "tokens_in": 10, "tokens_out": 2, "tokens_cached": 0}]
    totals = aggregate(known)
    assert totals.cost_usd == pytest.approx(0.1)
    assert (totals.tokens_in, totals.tokens_out, totals.tokens_cached) == (10, 2, None)
    assert aggregate([*known, {"error": "x", "tokens_in": 5}]).cost_usd is None
    assert aggregate([*known, {"error": "x", "tokens_in": 5}]).tokens_in == 15
    empty = aggregate([])
    assert empty.cost_usd == 0.0 and empty.tokens_in is None


async def test_x_router_flow_variant_with_trimmed_traces() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text="{}", tokens_in=5, tokens_out=1, tokens_cached=2,
                                                          cost_reported=0.0000123456789),
                        ranked_extra=15)
    admitted = admit_flow(triage_flow(), admit_policy=router.admit_policy, flow_input=FLOW_INPUT)
    result = await run_flow(admitted, FLOW_INPUT, router=router, deadline=Deadline.after_ms(40_000))
    before = copy.deepcopy(result.flow_nodes)
    block = result.x_router()
    assert result.flow_nodes == before  # trimming never mutates the trace
    fp = admitted.fingerprint
    node_costs = sum(entry["cost_reported"] for entry in result.flow_nodes)  # data nodes cost 0
    assert node_costs > 0
    assert {k: v for k, v in block.items() if k != "decision_trace"} == {
        "provider": "flow", "model_family": f"flow:{fp}", "served_model_id": f"flow:{fp}", "served_by": None,
        "price_in": None, "price_out": None, "cost_usd": round(node_costs, 6), "cost_basis": "reported",
        "tokens_cached": 2, "policy_fingerprint": None}
    trace = block["decision_trace"]
    assert trace["policy_fingerprint"] is None and trace["flow_fingerprint"] == fp
    assert "failed_node" not in trace and "flow_error" not in trace
    model_entries = [e for e in trace["flow_nodes"] if e.get("decision_trace")]
    assert model_entries
    for entry in model_entries:
        nested = entry["decision_trace"]
        assert len(nested["ranked"]) == 10 and nested["ranked_total"] == 16
        assert nested["rejected_total"] == 15 and nested["rejected_reasons"] == {"missing_capability:json_mode": 15}
    json.dumps(block, allow_nan=False)


async def test_model_entry_fields_in_order() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text="{}", served_model_id="writer-2025",
                                                          tokens_in=5, tokens_out=1, tokens_cached=2))
    admitted = admit_flow(triage_flow(), admit_policy=router.admit_policy, flow_input=FLOW_INPUT)
    result = await run_flow(admitted, FLOW_INPUT, router=router, deadline=Deadline.after_ms(40_000))
    # the fake decider answers "support" for every ticket, so the draft ran
    entry = next(e for e in result.flow_nodes if e["kind"] == "llm")
    assert list(entry) == ["node", "kind", "inputs", "policy_fingerprint", "provider", "served_model_id", "price_in",
                           "price_out", "raw_price_in", "raw_price_out", "price_multiplier", "tokens_in",
                           "tokens_out", "tokens_cached", "cost_reported", "latency_ms", "decision_trace"]
    assert entry["served_model_id"] == "writer-2025" and entry["tokens_cached"] == 2
    assert entry["policy_fingerprint"] == router.admit_policy(triage_flow()[1]["draft"]["policy"]).fingerprint
    assert result.tokens_cached == 2 and result.x_router()["tokens_cached"] == 2


async def test_usage() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text="{}", tokens_in=5, tokens_out=1, tokens_cached=2))
    admitted = admit_flow(triage_flow(), admit_policy=router.admit_policy, flow_input=FLOW_INPUT)
    result = await run_flow(admitted, FLOW_INPUT, router=router, deadline=Deadline.after_ms(40_000))
    assert result.usage() == {"prompt_tokens": 105, "completion_tokens": 11, "total_tokens": 116,
                              "prompt_tokens_details": {"cached_tokens": 2}}
    quiet = admit_flow(["flow", {"input": {"kind": "input"}, "output": {"kind": "output", "inputs": ["input"]}}],
                       admit_policy=router.admit_policy)
    assert (await run_flow(quiet, "x", router=router, deadline=Deadline.after_ms(1000))).usage() is None
