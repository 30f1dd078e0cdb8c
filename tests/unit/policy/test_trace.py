"""Decision-trace trimming (docs/behaviour.md#the-x_router-block-and-usage)."""

from __future__ import annotations

import copy

from compactor.policy.trace import trim_decision_trace


def engine_trace(ranked: int, rejected: int) -> dict:
    return {
        "policy_fingerprint": "1-2",
        "ranked": [{"offer": f"o{i}", "score": i} for i in range(ranked)],
        "rejected": [{"offer": f"r{i}", "reason": ["cmp:price_in:le", "not", 7, None][i % 4]} for i in range(rejected)],
        "decision_path": [{"event": "attempted", "attempt": i} for i in range(25)],
    }


def test_caps_lists_and_counts() -> None:
    trace = engine_trace(ranked=13, rejected=22)
    trimmed = trim_decision_trace(trace)
    assert len(trimmed["ranked"]) == 10 and trimmed["ranked_total"] == 13
    assert len(trimmed["rejected"]) == 10 and trimmed["rejected_total"] == 22
    assert trimmed["rejected_reasons"] == {"cmp:price_in:le": 6, "not": 6, "unknown": 10}
    assert len(trimmed["decision_path"]) == 25
    assert trimmed["ranked"] == trace["ranked"][:10]


def test_small_traces_still_get_totals() -> None:
    trimmed = trim_decision_trace(engine_trace(ranked=2, rejected=0))
    assert trimmed["ranked_total"] == 2 and trimmed["rejected_total"] == 0 and trimmed["rejected_reasons"] == {}


def test_input_not_mutated_and_idempotent() -> None:
    trace = {"policy_fingerprint": None, "flow_fingerprint": "f", "flow_nodes": [
        {"node": "n1", "kind": "decision", "decision_trace": engine_trace(ranked=12, rejected=15)},
        {"node": "n2", "kind": "data", "cost_reported": 0},
        {"node": "n3", "kind": "llm", "decision_trace": None},
    ]}
    snapshot = copy.deepcopy(trace)
    once = trim_decision_trace(trace)
    assert trace == snapshot
    assert trim_decision_trace(once) == once
    nested = once["flow_nodes"][0]["decision_trace"]
    assert len(nested["ranked"]) == 10 and nested["ranked_total"] == 12 and nested["rejected_total"] == 15
    assert once["flow_nodes"][1] == snapshot["flow_nodes"][1] and once["flow_nodes"][2]["decision_trace"] is None
    assert "ranked_total" not in once


def test_recurses_into_nested_flow_traces() -> None:
    inner = {"flow_nodes": [{"node": "n1", "decision_trace": engine_trace(ranked=11, rejected=0)}]}
    outer = {"flow_nodes": [{"node": "n1", "decision_trace": inner}]}
    trimmed = trim_decision_trace(outer)
    assert trimmed["flow_nodes"][0]["decision_trace"]["flow_nodes"][0]["decision_trace"]["ranked_total"] == 11


def test_non_dict_passes_through() -> None:
    assert trim_decision_trace(None) is None
    assert trim_decision_trace([1]) == [1]
