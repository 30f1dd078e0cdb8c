"""Trace entries, cost and token aggregation, the flow ``x_router`` block and ``usage``."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.budget import Deadline
from compactor.cost import NODE_DECIMALS
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


def _aggregate_by_definition(entries: list) -> tuple:
    """The totals as first written: each node's cost, then each token key summed in its own pass."""
    costs = [node_cost(entry) for entry in entries]

    def token_sum(key: str) -> int | None:
        total = 0
        for entry in entries:
            total += entry.get(key) or 0
            routing = entry.get("routing")
            if isinstance(routing, dict):
                total += routing.get(key) or 0
        return total or None

    cost = round(math.fsum(costs), NODE_DECIMALS) if all(c is not None for c in costs) else None
    return cost, token_sum("tokens_in"), token_sum("tokens_out"), token_sum("tokens_cached")


_NUMBER = st.one_of(st.none(), st.integers(-5, 10_000), st.floats(-1.0, 5.0), st.just(float("nan")))
_ROUTING = st.fixed_dictionaries({}, optional={"cost_usd": _NUMBER, "tokens_in": _NUMBER, "tokens_out": _NUMBER,
                                               "tokens_cached": _NUMBER})
_ENTRY = st.fixed_dictionaries({}, optional={
    "cost_reported": _NUMBER, "raw_price_in": _NUMBER, "raw_price_out": _NUMBER, "tokens_in": _NUMBER,
    "tokens_out": _NUMBER, "tokens_cached": _NUMBER, "error": st.just("x"),
    "routing": st.one_of(st.none(), st.just("not a mapping"), _ROUTING)})


@settings(max_examples=300, deadline=None)
@given(st.lists(_ENTRY, max_size=8))
def test_aggregate_in_one_pass_equals_the_definition(entries: list) -> None:
    totals = aggregate(entries)
    cost, tokens_in, tokens_out, tokens_cached = _aggregate_by_definition(entries)
    # repr: the same NaN where a token count was one
    assert repr((totals.cost_usd, totals.tokens_in, totals.tokens_out, totals.tokens_cached)) == \
        repr((cost, tokens_in, tokens_out, tokens_cached))
