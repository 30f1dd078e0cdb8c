"""A flow that failed on a provider's ``Retry-After`` answers it (docs/behaviour.md#retry-after): the router keeps the
wait of the failure that ended the call, the flow's failed node carries it to the result (inline or merged from its
components), and ``POST /v1/flows``' router error passes it on, rounded up, with a status a retry may change."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.errors import RETRY_AFTER, RouterError
from compactor.flow import admit_flow, run_flow
from compactor.flow.partition import merge_results, partition_flow
from compactor.flow.result import result_from_json, result_to_json
from compactor.flows_service import run_flows_request
from compactor.providers.base import ChatRequest, ProviderError
from compactor.router import RouteResult

from ..test_routing import fail, make_router, offer, policy_with
from .fake_router import FakeRouter
from .triage import POLICY


@pytest.mark.parametrize(("kind", "seconds", "header"), [
    ("exhausted: rate_limit", 2.5, "3"), ("rate_limit", 7.0, "7"), ("exhausted: upstream_error", 0.2, "1"),
    ("no_candidates", 30.0, "30"), ("exhausted: timeout", 1.0, "1"),
    ("exhausted: rate_limit", None, None),  # no word from the provider: no wait of the service's own
    ("auth_error", 60.0, None), ("bad_request", 5.0, None), ("data_error", 5.0, None),  # a retry changes nothing
])
def test_a_router_error_passes_the_providers_wait_on_rounded_up(kind: str, seconds: float | None,
                                                                header: str | None) -> None:
    error = RouterError("failed", kind, retry_after_s=seconds)

    assert error.headers() == ({RETRY_AFTER: header} if header else {})


async def test_the_router_keeps_the_wait_of_the_failure_that_ended_the_call() -> None:
    router, _, _, _ = make_router([offer("a"), offer("b")], {
        "a": fail("upstream_error", retry_after_s=40.0), "b": fail("rate_limit", retry_after_s=2.5)})

    result = await router.chat(router.admit_policy(policy_with(["always", {"action": "next_candidate"}])),
                               ChatRequest(messages=[]))

    assert (result.ok, result.error_kind, result.retry_after_s) == (False, "exhausted: rate_limit", 2.5)


def failing_chat(seconds: float | None) -> Any:
    def chat(request: ChatRequest) -> RouteResult:
        if "Chain 1." not in json.dumps(request.messages):
            return ProviderError("upstream_error", "no wait")  # type: ignore[return-value]
        return RouteResult(ok=False, response=None, chosen=None, trace={"policy_fingerprint": "f"},
                           error_kind="exhausted: rate_limit", error_message="HTTP 429", retry_after_s=seconds)
    return chat


def one_node_flow(system: str) -> list[Any]:
    return ["flow", {"input": {"kind": "input"},
                     "say": {"kind": "llm", "inputs": ["input"], "system": system, "policy": POLICY},
                     "output": {"kind": "output", "inputs": ["say"]}}]


async def test_a_flow_failed_on_a_providers_wait_answers_it() -> None:
    # The 429 said only "exhausted: rate_limit": the provider's wait was read, honoured by the router, and dropped.
    record = await run_flows_request({"flow_ir": one_node_flow("Chain 1."), "flow_input": "x"},
                                     router=FakeRouter(chat=failing_chat(2.5)), deadline=Deadline.after_ms(40_000))

    assert (record.status, record.body["error"]["code"]) == (429, "exhausted: rate_limit")
    assert record.headers == {RETRY_AFTER: "3"}


async def test_a_flow_failed_without_a_wait_answers_none() -> None:
    record = await run_flows_request({"flow_ir": one_node_flow("Chain 0."), "flow_input": "x"},
                                     router=FakeRouter(chat=failing_chat(2.5)), deadline=Deadline.after_ms(40_000))

    assert record.status == 502 and record.headers == {}


async def test_a_flow_run_in_components_keeps_the_wait_as_the_inline_run() -> None:
    nodes: dict[str, Any] = {"input": {"kind": "input"}}
    for i in range(2):
        nodes[f"pick_{i}"] = {"kind": "data", "operation": "project", "inputs": ["input"], "path": [f"c{i}"]}
        nodes[f"say_{i}"] = {"kind": "llm", "inputs": [f"pick_{i}"], "system": f"Chain {i}.", "policy": POLICY,
                             "context": "inputs"}
    nodes["merged"] = {"kind": "data", "operation": "union", "inputs": ["say_0", "say_1"]}
    nodes["output"] = {"kind": "output", "inputs": ["merged"]}
    flow_input = {"c0": "first", "c1": "second"}

    def ok_then_wait(request: ChatRequest) -> Any:
        if "Chain 1." in json.dumps(request.messages):
            return failing_chat(4.0)(request)
        return FakeRouter().chat_handler(request)

    router = FakeRouter(chat=ok_then_wait)
    flow = admit_flow(["flow", nodes], admit_policy=router.admit_policy, flow_input=flow_input)
    inline = await run_flow(flow, flow_input, router=router, deadline=Deadline.after_ms(40_000))
    partition = partition_flow(flow, router.admit_policy)
    assert partition is not None and len(partition.components) == 2
    results = []
    for component in partition.components:
        payload = json.loads(json.dumps(component.payload(flow_input)))
        admitted = admit_flow(payload["flow_ir"], admit_policy=router.admit_policy, flow_input=payload["flow_input"])
        result = await run_flow(admitted, payload["flow_input"], router=router, deadline=Deadline.after_ms(40_000))
        results.append(result_from_json(json.loads(json.dumps(result_to_json(result)))))  # as a worker answers it
    merged = await merge_results(partition, results, router=router, deadline=Deadline.after_ms(40_000))

    assert not inline.ok and inline.retry_after_s == merged.retry_after_s == 4.0
