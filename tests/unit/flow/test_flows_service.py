"""POST /v1/flows and /v1/flows/normalize (docs/behaviour.md#requests-and-responses)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.errors import RouterError
from compactor.flows_service import normalize_request, run_flows_request
from compactor.providers.base import ChatResponse, ProviderError
from compactor.router import RouteResult

from .fake_router import FakeRouter
from .triage import FLOW_INPUT, POLICY, triage_flow


async def call(router: FakeRouter, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return (await run_flows_request(body, router=router, deadline=Deadline.after_ms(40_000))).answer()


async def test_run_ok() -> None:
    router = FakeRouter(chat=lambda request: ChatResponse(text='{"t1": "On it."}', tokens_in=5, tokens_out=2))
    status, body = await call(router, {"flow_ir": triage_flow(), "flow_input": FLOW_INPUT})
    assert status == 200
    assert set(body) == {"output", "x_router", "usage"}
    assert body["output"]["t1"] == "On it."
    assert body["x_router"]["provider"] == "flow"
    json.dumps(body, allow_nan=False)


@pytest.mark.parametrize("body", [
    {"flow_ir": ["flow", {}]},
    {"flow_ir": triage_flow(classify={"questions": {}}), "flow_input": FLOW_INPUT},
    {"flow_ir": triage_flow(), "flow_input": {"tickets": {}, "blob": "x" * 1_048_576}},
    {},
    # a fail plan's action that is no name (an array): a TypeError in policy admission, a 500, until fixed
    {"flow_ir": triage_flow(classify={"policy": [*POLICY[:5], ["always", {"action": []}]]}), "flow_input": FLOW_INPUT},
])
async def test_admission_failure_is_400_before_any_call(body: dict[str, Any]) -> None:
    router = FakeRouter()
    status, answer = await call(router, body)
    assert status == 400
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["code"] == "invalid_flow"
    assert answer["error"]["message"].startswith("flow_ir rejected at admission: ")
    assert router.calls == []


async def test_null_flow_input_is_absent() -> None:
    flow = ["flow", {"input": {"kind": "input"}, "output": {"kind": "output", "inputs": ["input"]}}]
    status, body = await call(FakeRouter(), {"flow_ir": flow, "flow_input": None})
    assert status == 200 and body["output"] == "" and "usage" not in body


@pytest.mark.parametrize(("kind", "status"), [
    ("no_candidates", 503), ("timeout", 504), ("exhausted: timeout", 504), ("flow_deadline", 504),
    ("bad_request", 400), ("context_overflow", 400), ("auth_error", 401), ("exhausted: rate_limit", 429),
    ("exhausted: upstream_error", 502), ("node_exception", 502), ("data_error", 422), (None, 502),
])
def test_router_error_status(kind: str | None, status: int) -> None:
    assert RouterError.status_of(kind) == status


async def test_failed_flow_answers_the_router_error() -> None:
    router = FakeRouter(decide=lambda request: RouteResult(
        ok=False, response=None, chosen=None, trace={"policy_fingerprint": "1-2", "ranked": [], "rejected": []},
        error_kind="no_candidates", error_message="no offer satisfies the policy (0 rejected)"))
    status, body = await call(router, {"flow_ir": triage_flow(classify={"on_error": None}), "flow_input": FLOW_INPUT})
    assert status == 503
    assert body["error"] == {"message": "no_candidates: no offer satisfies the policy (0 rejected)",
                             "type": "router_error", "code": "no_candidates"}
    assert body["x_router"]["decision_trace"]["flow_error"] == "flow_node_failed"
    assert body["x_router"]["decision_trace"]["failed_node"] == "n2"


async def test_rate_limited_flow() -> None:
    router = FakeRouter(decide=lambda request: ProviderError("rate_limit", "HTTP 429"))
    status, body = await call(router, {"flow_ir": triage_flow(classify={"on_error": None}), "flow_input": FLOW_INPUT})
    assert status == 429 and body["error"]["code"] == "exhausted: rate_limit"


def test_normalize_request() -> None:
    router = FakeRouter()
    status, body = normalize_request({"flow_ir": triage_flow()}, admit_policy=router.admit_policy).answer()
    assert status == 200 and body["version"] == "sigma-flow/v1"
    assert body["encoded"].startswith("sigma-flow/v1:((input n0) (data n1 ")
    assert list(body["flow_ir"][1]) == [f"n{i}" for i in range(8)]
    assert router.calls == []
    status, body = normalize_request({"flow_ir": ["flow", {"x": {"kind": "nope"}}]}, admit_policy=router.admit_policy).answer()
    assert status == 400 and body["error"]["message"] == (
        'flow_ir rejected at admission: node "x": unknown kind "nope"; kinds are input, output, llm, decision, data')
