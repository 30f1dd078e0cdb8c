"""Decision mode through ``compactor serve``: fixture T (docs/behaviour.md#worked-example-fixture-t) and the
flow-variant ``x_router``."""

from __future__ import annotations

import json

from .conftest import DECISION_POLICY, SECRET, Stack, chat_cost, decision_cost
from .helpers import ascii_size, compact_json, fixture_t, flow_nodes, manifest, model_nodes, size, summary


def test_fixture_t_reaches_the_ten_percent_target(stack: Stack) -> None:
    messages = fixture_t()

    body = stack.compact(messages, keep_recent=1, target_ratio=0.1, max_tokens=512)

    expected = messages[:2] + [summary(f"fragment_{i}", f"Evidence fragment_{i}") for i in range(2, 12)] + messages[-1:]
    assert body["messages"] == expected
    assert body["compacted"] is True
    report = body["compaction"]
    assert (report["original_bytes"], report["output_bytes"], report["target_bytes"]) == (18_555, 1_219, 1_855)
    assert report["target_ratio"] == 0.1 and report["target_met"] is True
    assert report["fragments"] == manifest([(0, 1, "keep", "pinned"), (1, 2, "keep", "pinned")]
                                           + [(i, i + 1, "summarize") for i in range(2, 12)]
                                           + [(12, 13, "keep", "recent_tail")])
    assert report["reasons"] == []
    assert report["first_changed_index"] == 2
    assert report["preserved_prefix_bytes"] == size(messages[:2])
    assert size(summary("fragment_2", "Evidence fragment_2")) == 106


def test_fixture_t_sends_two_decisions_and_two_summaries(stack: Stack) -> None:
    messages = fixture_t()

    stack.compact(messages, keep_recent=1, target_ratio=0.1, max_tokens=512)

    decisions = sorted(stack.requests("decisions"), key=lambda d: -len(d["questions"]))
    assert [[f["id"] for f in d["state"]["fragments"]] for d in decisions] == [
        [f"fragment_{i}" for i in range(2, 10)], ["fragment_10", "fragment_11"]]
    first = decisions[0]
    assert set(first) == {"model", "state", "questions"} and first["model"] == "decider-model"
    assert first["state"]["instructions"] == messages[:2]
    assert first["state"]["recent_evidence"] == ['[{"role":"assistant","content":"Current state."}]']
    assert first["state"]["fragments"][0]["evidence"] == json.dumps([messages[2]])
    question = first["questions"]["fragment_2"]
    assert question["type"] == "choice"
    assert question["criteria"] == {"keep": "Preserve verbatim", "summarize": "Shorter summary of the useful facts",
                                    "archive": "Remove; the caller keeps the original"}
    assert 18_000 < ascii_size({"state": first["state"], "questions": first["questions"]}) <= 32_000

    summaries = sorted(stack.requests("summaries"), key=lambda s: len(s["messages"][1]["content"]))
    assert len(summaries) == 2 and len(stack.requests("chat")) == 2
    small = summaries[0]
    assert small["model"] == "summarizer-model" and small["max_tokens"] == 512
    assert small["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in small["messages"]] == ["system", "user"]
    # fixture T's budget is 128 for each of the two items; one summary may take the batch's total
    # (docs/differences.md)
    assert "at most 256 UTF-8 bytes, and all summaries together at most 256" in small["messages"][0]["content"]
    assert json.loads(small["messages"][1]["content"]) == {f"fragment_{i}": [messages[i]] for i in (10, 11)}
    assert small["messages"][1]["content"] == compact_json(json.loads(small["messages"][1]["content"]))


def test_flow_variant_x_router_and_usage(stack: Stack) -> None:
    body = stack.compact(fixture_t(), keep_recent=1)

    fingerprint = body["compaction"]["flow_fingerprint"]
    assert isinstance(fingerprint, str) and fingerprint
    x_router = body["x_router"]
    assert {key: x_router[key] for key in ("provider", "model_family", "served_model_id", "served_by", "price_in",
                                           "price_out", "cost_basis", "policy_fingerprint")} == {
        "provider": "flow", "model_family": f"flow:{fingerprint}", "served_model_id": f"flow:{fingerprint}",
        "served_by": None, "price_in": None, "price_out": None, "cost_basis": "reported", "policy_fingerprint": None}
    assert x_router["cost_usd"] == round(2 * decision_cost() + 2 * chat_cost(), 6)
    trace = x_router["decision_trace"]
    assert trace["policy_fingerprint"] is None and trace["flow_fingerprint"] == fingerprint
    assert "failed_node" not in trace and "flow_error" not in trace
    nodes = flow_nodes(body)
    assert len(nodes) == 2 * 7 + 1  # per batch: state, items, classify, selected, generate, removed, patch; merged
    assert all(node["node"].startswith("n") and node["node"][1:].isdigit() for node in nodes)
    assert [n for n in nodes if n["kind"] == "data"] and all(n["cost_reported"] == 0 for n in nodes
                                                              if n["kind"] == "data")
    for node in model_nodes(body, "decision") + model_nodes(body, "llm"):
        assert node["provider"] == "acme" and node["latency_ms"] >= 0
        assert isinstance(node["policy_fingerprint"], str) and node["decision_trace"]["ranked"]
        assert "error" not in node and "fallback" not in node
    decision = model_nodes(body, "decision")[0]
    assert (decision["price_in"], decision["price_out"], decision["tokens_in"], decision["tokens_out"]) == (
        0.5, 2.0, 20, 4)
    assert body["usage"] == {"prompt_tokens": 2 * 20 + 2 * 10, "completion_tokens": 2 * 4 + 2 * 5,
                             "total_tokens": 2 * 24 + 2 * 15}
    assert SECRET not in json.dumps(body)


def test_reported_costs_win_over_prices(stack: Stack) -> None:
    from fakes.provider_server import chat_reply, decision_reply

    script = stack.script
    script.decision_reply_for = lambda req: decision_reply(
        {fid: {"type": "choice", "choice": "summarize"} for fid in req["questions"]}, model="d", cost=0.00125)
    script.summary_reply_for = lambda req: chat_reply(
        json.dumps({fid: f"Evidence {fid}" for fid in json.loads(req["messages"][1]["content"])}), cost=0.0025)

    body = stack.compact(fixture_t(), keep_recent=1)

    assert body["x_router"]["cost_usd"] == round(2 * 0.00125 + 2 * 0.0025, 6)
    assert body["x_router"]["cost_basis"] == "reported"
    assert {node["cost_reported"] for node in model_nodes(body, "decision")} == {0.00125}


def test_identical_requests_share_the_flow_fingerprint(stack: Stack) -> None:
    first = stack.compact(fixture_t(), keep_recent=1)
    second = stack.compact(fixture_t(), keep_recent=1)
    other = stack.compact(fixture_t(), keep_recent=1, decision_policy_ir=[*DECISION_POLICY[:3], ["argmax"],
                                                                           *DECISION_POLICY[4:]])

    assert first["compaction"]["flow_fingerprint"] == second["compaction"]["flow_fingerprint"]
    assert other["compaction"]["flow_fingerprint"] != first["compaction"]["flow_fingerprint"]
