"""``flow.partition``: cutting an admitted flow at its join and merging component results gives exactly
the inline scheduler's ``FlowResult`` (no AWS; components run in-process after a JSON round trip)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.transcripts import parse_transcript
from compactor.compaction.preparation import prepare
from compactor.compaction.preset import materialise, question_template
from compactor.flow import AdmittedFlow, FlowResult, admit_flow, run_flow
from compactor.flow.partition import (
    input_slice,
    merge_results,
    partition_flow,
    unavailable_result,
)
from compactor.flow.result import result_from_json, result_to_json
from compactor.router import Router
from scenarios.helpers import fixture_t

from fakes.routers import frozen_router

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"
POLICY = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
          ["top_k", 4, ["argmax"]], ["id"], ["always", {"action": "next_candidate"}]]
ALWAYS = ["policy", ["meets_req"], ["field", "context"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]


def preset_flow(messages: list[dict[str, Any]], keep_recent: int) -> tuple[list[Any], dict[str, Any]]:
    prep = prepare(messages, keep_recent=keep_recent, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    return materialise(prep.batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence,
                       budget=prep.budget, decision_policy=POLICY, generation_policy=None, max_tokens=None)


def corpus_messages() -> list[dict[str, Any]]:
    return parse_transcript(CORPUS.read_text(encoding="utf-8"))[0]


def dumps(result: FlowResult) -> str:
    return json.dumps(result_to_json(result))


async def run_components(flow: AdmittedFlow, flow_input: Any, router: Router) -> FlowResult:
    """Each component admitted and run from its JSON payload, as a worker would, then merged."""
    partition = partition_flow(flow, router.admit_policy)
    assert partition is not None
    results = []
    for component in partition.components:
        payload = json.loads(json.dumps(component.payload(flow_input)))
        worker_router = frozen_router()
        admitted = admit_flow(payload["flow_ir"], admit_policy=worker_router.admit_policy,
                              flow_input=payload["flow_input"])
        result = await run_flow(admitted, payload["flow_input"], router=worker_router,
                                deadline=Deadline.after_ms(40_000))
        results.append(result_from_json(json.loads(json.dumps(result_to_json(result)))))
    return await merge_results(partition, results, router=router, deadline=Deadline.after_ms(40_000))


@pytest.mark.parametrize("case", ["fixture_t", "corpus"])
async def test_merged_components_equal_the_inline_run(case: str) -> None:
    messages, keep = (fixture_t(), 1) if case == "fixture_t" else (corpus_messages(), 6)
    flow_ir, flow_input = preset_flow(messages, keep)
    router = frozen_router()
    flow = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    inline = await run_flow(flow, flow_input, router=router, deadline=Deadline.after_ms(40_000))
    merged = await run_components(flow, flow_input, router)
    assert inline.ok and inline.flow_nodes
    assert dumps(merged) == dumps(inline)


async def test_each_batch_is_one_component_cut_at_the_union() -> None:
    flow_ir, flow_input = preset_flow(fixture_t(), 1)
    router = frozen_router()
    flow = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    partition = partition_flow(flow, router.admit_policy)
    assert partition is not None
    assert partition.join.label == "merged" and len(partition.components) == len(flow_input) == 2
    for number, component in enumerate(partition.components):
        key = f"batch_{number}"
        labels = set(component.flow_ir[1]) - {"input", "output"}
        assert labels == {f"{key}_{name}" for name in
                          ("state", "items", "classify", "selected", "generate", "removed", "patch")}
        assert flow.nodes[component.sink].label == f"{key}_patch"
        assert component.input_slice(flow_input) == {key: flow_input[key]}  # only its own batch travels
        assert set(component.to_whole.values()) == {f"n{flow.nodes[i].index}" for i in range(len(flow.nodes))
                                                    if flow.nodes[i].label in labels}


def test_input_slice_keeps_exactly_what_projections_read() -> None:
    router = frozen_router()
    flow = admit_flow(["flow", {
        "in": {"kind": "input"},
        "a": {"kind": "data", "operation": "project", "path": ["x", "y"], "inputs": ["in"]},
        "b": {"kind": "data", "operation": "project", "path": ["x"], "inputs": ["in"]},
        "c": {"kind": "data", "operation": "project", "path": ["missing", "k"], "inputs": ["in"]},
        "u": {"kind": "data", "operation": "union", "inputs": ["a", "b", "c"]},
        "out": {"kind": "output", "inputs": ["u"]}}], admit_policy=router.admit_policy)
    node = {node.label: node for node in flow.nodes}
    value = {"x": {"y": {"k": 1}, "z": 2}, "w": 3}
    assert input_slice([node["a"]], value) == {"x": {"y": {"k": 1}}}
    assert input_slice([node["a"], node["c"]], value) == {"x": {"y": {"k": 1}}}  # missing stays missing
    assert input_slice([node["a"], node["b"]], value) == {"x": {"y": {"k": 1}, "z": 2}}  # "x" whole wins
    assert input_slice([node["b"], node["a"]], value) == {"x": {"y": {"k": 1}, "z": 2}}
    assert input_slice([node["a"], node["u"]], value) == value  # a non-projection reader sees everything
    assert input_slice([node["a"]], "text") == "text"


async def test_flows_without_a_data_join_are_not_partitioned() -> None:
    router = frozen_router()
    llm_last = admit_flow(["flow", {"in": {"kind": "input"},
                                    "a": {"kind": "llm", "system": "A.", "policy": ALWAYS, "inputs": ["in"]},
                                    "out": {"kind": "output", "inputs": ["a"]}}], admit_policy=router.admit_policy)
    reads_input = admit_flow(["flow", {"in": {"kind": "input"}, "out": {"kind": "output", "inputs": ["in"]}}],
                             admit_policy=router.admit_policy)
    assert partition_flow(llm_last, router.admit_policy) is None
    assert partition_flow(reads_input, router.admit_policy) is None


async def test_an_unavailable_component_keeps_its_batch() -> None:
    flow_ir, flow_input = preset_flow(fixture_t(), 1)
    router = frozen_router()
    flow = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    partition = partition_flow(flow, router.admit_policy)
    assert partition is not None
    first = await unavailable_result(partition.components[0], flow_input, "worker failed: States.Timeout")
    assert first.ok and first.output == flow_input["batch_0"]["items"]  # the batch's items, unchanged
    assert first.cost_usd is None  # the worker may have been billed: cost unknown
    classify = [entry for entry in first.flow_nodes if entry["kind"] == "decision"]
    assert len(classify) == 1 and classify[0]["fallback"] == "input"
    assert "ComponentUnavailable: worker failed: States.Timeout" in classify[0]["error"]
    assert not [entry for entry in first.flow_nodes if entry["kind"] == "llm" and not entry.get("skipped")]
