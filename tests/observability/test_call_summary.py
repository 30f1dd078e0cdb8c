"""A call's counts, bytes and cost: from the core's call record, never from the response body."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.jsonutil import dense_size
from compactor.call_record import CallRecord, NodeOutcome, flow_facts, refused
from compactor.errors import InvalidRequest
from compactor_aws.observability import CallSummary, node_schedule, summarize

MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "x" * 400},
            {"role": "assistant", "content": "ok"}]
SEALED = [MESSAGES[0], {"role": "system", "content": "[Earlier conversation, sealed summary]\nshort"}, MESSAGES[2]]


def model_node(node: str, kind: str = "llm", **extra: Any) -> dict[str, Any]:
    return {"node": node, "kind": kind, "inputs": ["n0"], "provider": "acme", "served_model_id": "m1",
            "tokens_in": 100, "tokens_out": 10, "cost_reported": 0.001, "latency_ms": 200, **extra}


NODES = [
    {"node": "n1", "kind": "data", "inputs": ["n0"], "cost_reported": 0},
    model_node("n2", "decision", inputs=["n1"]),
    model_node("n3", inputs=["n2"]),
    {"node": "n4", "kind": "llm", "inputs": ["n2"], "skipped": True, "cost_reported": 0},
    {"node": "n5", "kind": "llm", "inputs": ["n2"], "skipped": True, "cost_reported": 0, "error": "flow_deadline"},
    model_node("n6", inputs=["n2"], fallback="input", error="invalid_summary: too long"),
    {"node": "n7", "kind": "llm", "inputs": ["n2"], "error": "node_exception: TimeoutError: sk-secret"},
]


def decision_record(nodes: list[dict[str, Any]], *, cost: float | None = 0.0021) -> CallRecord:
    """What decision mode records for a flow with these trace entries."""
    return CallRecord(status=200, body={"messages": SEALED, "compacted": True}, mode="decision", bytes_in=5000,
                      bytes_out=900, target_met=False, cost_usd=cost, tokens_in=300, tokens_out=30,
                      flow_fingerprint="12-34", **flow_facts(nodes))


def test_flow_facts_count_model_calls_and_fallbacks_with_reasons() -> None:
    facts = flow_facts(NODES)
    assert facts["model_calls"] == 4  # n2, n3, n6, n7: not the data node, not the two skipped ones
    assert facts["fallbacks"] == ("flow_deadline", "invalid_summary", "node_exception")  # n5, n6, n7
    assert [node.outcome for node in facts["nodes"]] == ["ok", "ok", "ok", "skipped", "deadline", "fallback",
                                                         "error"]


def test_a_decision_record_becomes_the_summary() -> None:
    summary = summarize(decision_record(NODES), request_id="req-1", api_key_id="key-1", request_bytes=6000,
                        response_bytes=1200)

    assert summary == CallSummary(
        route="compact", mode="decision", status=200, request_id="req-1", api_key_id="key-1", request_bytes=6000,
        response_bytes=1200, bytes_in=5000, bytes_out=900, bytes_saved=4100, target_met=False,
        model_calls=4, fallbacks=3, tokens_in=300, tokens_out=30, cost_usd=0.0021, flow_fingerprint="12-34",
    )


def test_unknown_flow_cost_stays_unknown() -> None:
    summary = summarize(decision_record(NODES, cost=None))

    assert summary.cost_usd is None and summary.cost_known is False
    billing = summary.billing_record()["billing"]
    assert billing["cost_usd"] is None and billing["cost_known"] is False


def test_seal_records_the_messages_and_every_call_made() -> None:
    record = CallRecord(status=200, body={}, mode="seal", bytes_in=dense_size(MESSAGES),
                        bytes_out=dense_size(SEALED), model_calls=2, fallbacks=("rate_limit",), cost_usd=0.0004,
                        tokens_in=50, tokens_out=5)

    summary = summarize(record)

    assert summary.bytes_saved == dense_size(MESSAGES) - dense_size(SEALED) > 0
    assert summary.target_met is None
    assert (summary.model_calls, summary.fallbacks, summary.cost_usd) == (2, 1, 0.0004)  # calls made


def test_refusals_have_no_bytes_and_no_calls() -> None:
    record = refused(InvalidRequest("pinned_indices must reference existing messages"), mode="decision")

    summary = summarize(record, request_bytes=77)

    assert summary.status == 400 and summary.request_bytes == 77 and summary.mode == "decision"
    assert (summary.bytes_in, summary.bytes_out, summary.bytes_saved, summary.model_calls) == (None, None, None, 0)
    assert summary.cost_usd == 0.0


def test_flows_bytes_are_the_http_bodies() -> None:
    record = CallRecord(status=200, body={}, mode="flow", route="flows", cost_usd=0.5, **flow_facts(NODES[:3]))

    summary = summarize(record, request_bytes=10, response_bytes=20)

    assert (summary.mode, summary.bytes_in, summary.bytes_out, summary.bytes_saved) == ("flow", 10, 20, None)
    assert (summary.model_calls, summary.cost_usd) == (2, 0.5)


def test_billing_record_has_a_stable_shape_and_no_content() -> None:
    record = summarize(decision_record(NODES), request_id="r", api_key_id="k").billing_record()

    assert set(record) == {"record_type", "billing"} and record["record_type"] == "billing"
    assert record["billing"]["version"] == 1
    assert {"request_id", "api_key_id", "bytes_in", "bytes_out", "bytes_saved", "model_calls", "fallbacks",
            "cost_usd", "cost_known", "tokens_in", "tokens_out", "route", "mode", "status"} <= set(record["billing"])
    text = repr(record)
    assert "sealed summary" not in text and "sk-secret" not in text and "x" * 50 not in text


@pytest.mark.parametrize(("node", "outcome"), [
    ({"node": "n1", "kind": "data"}, "ok"),
    ({"skipped": True}, "skipped"),
    ({"skipped": True, "error": "flow_deadline"}, "deadline"),
    ({"fallback": "input", "error": "bad"}, "fallback"),
    ({"error": "timeout"}, "error"),
])
def test_node_outcomes(node: dict[str, Any], outcome: str) -> None:
    assert NodeOutcome.from_trace(node).outcome == outcome


def test_error_kind_keeps_only_the_leading_token() -> None:
    def error_kind(entry: dict[str, Any]) -> str | None:
        return NodeOutcome.from_trace(entry).error_kind

    assert error_kind({"error": "node_exception: RuntimeError: provider said sk-123"}) == "node_exception"
    assert error_kind({"error": "flow_deadline"}) == "flow_deadline"
    assert error_kind({"error": " leading space"}) == "unknown"
    assert error_kind({"error": {"nested": 1}}) == "unknown"
    assert error_kind({}) is None


def test_schedule_places_each_node_after_its_inputs_and_clips_to_the_flow() -> None:
    nodes = [
        {"node": "n1", "kind": "data", "inputs": ["n0"]},
        {"node": "n2", "kind": "decision", "inputs": ["n1"], "latency_ms": 300},
        {"node": "n3", "kind": "decision", "inputs": ["n1"], "latency_ms": 100},  # concurrent with n2
        {"node": "n4", "kind": "llm", "inputs": ["n2", "n3"], "latency_ms": 500},
        {"node": "n5", "kind": "llm", "inputs": ["n4"], "latency_ms": 5000},  # longer than what is left
        {"node": "n6", "kind": "llm", "inputs": ["n2"], "error": "timeout"},  # no latency recorded
    ]

    spans = node_schedule([NodeOutcome.from_trace(node) for node in nodes], 100.0, 101.0)

    assert spans[0] == (100.0, 100.0)
    assert spans[1] == pytest.approx((100.0, 100.3)) and spans[2] == pytest.approx((100.0, 100.1))
    assert spans[3] == pytest.approx((100.3, 100.8))
    assert spans[4] == pytest.approx((100.8, 101.0))
    assert spans[5] == pytest.approx((100.3, 100.3))
    assert all(100.0 <= start <= end <= 101.0 for start, end in spans)


def _from_trace_by_constructor(entry: dict) -> NodeOutcome:
    """``NodeOutcome.from_trace`` as first written, through the frozen constructor."""
    error = entry.get("error")
    if entry.get("skipped"):
        outcome = "deadline" if error == "flow_deadline" else "skipped"
    elif entry.get("fallback"):
        outcome = "fallback"
    elif "error" in entry:
        outcome = "error"
    else:
        outcome = "ok"
    kind_match = re.match(r"[A-Za-z0-9_.-]{1,64}", error) if isinstance(error, str) else None
    error_kind = kind_match.group(0) if kind_match else (None if error is None else "unknown")
    latency = entry.get("latency_ms")
    inputs = entry.get("inputs") if isinstance(entry.get("inputs"), list) else []
    return NodeOutcome(node=str(entry.get("node")), kind=str(entry.get("kind")), outcome=outcome,
                       provider=entry.get("provider"), error_kind=error_kind, inputs=tuple(str(i) for i in inputs),
                       latency_ms=float(latency) if isinstance(latency, (int, float)) and not isinstance(latency, bool)
                       else None, fell_back=bool(entry.get("fallback")) or "error" in entry, trace=entry)


_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=8))
_TRACE_ENTRY = st.fixed_dictionaries({}, optional={
    "node": _VALUE, "kind": st.sampled_from(["llm", "decision", "data", None]), "provider": _VALUE,
    "error": st.one_of(_VALUE, st.sampled_from(["flow_deadline", "timeout: after 5 ms", "exhausted: timeout", "!"])),
    "skipped": _VALUE, "fallback": _VALUE, "latency_ms": _VALUE,
    "inputs": st.one_of(_VALUE, st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=3))})


@settings(max_examples=400, deadline=None)
@given(_TRACE_ENTRY)
def test_from_trace_makes_what_the_constructor_makes(entry: dict) -> None:
    made, expected = NodeOutcome.from_trace(entry), _from_trace_by_constructor(entry)
    assert type(made) is NodeOutcome
    assert vars(made) == vars(expected) and list(vars(made)) == list(vars(expected))
    assert made.trace is entry and made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    assert (made.model_call, made.calls_made) == (expected.model_call, expected.calls_made)
