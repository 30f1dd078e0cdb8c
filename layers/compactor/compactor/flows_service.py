"""``POST /v1/flows`` and ``POST /v1/flows/normalize`` (docs/behaviour.md#requests-and-responses): operators' own typed flows.

Both return ``(status, body)``. Admission failures answer 400 ``invalid_flow`` before any model call;
a flow that fails without a fallback answers the router error status of docs/behaviour.md#flow-execution with the
flow's ``x_router`` block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from compactor.budget import Deadline
from compactor.call_record import FLOW_MODE, NO_MODE, CallRecord, flow_facts, refused
from compactor.errors import InvalidFlow, RouterError
from compactor.flow import MISSING, FlowAdmissionError, FlowResult, FlowRouter, admit_flow, normalize_flow, run_flow
from compactor.flow.graph import AdmittedPolicyLike
from compactor.response_blocks import compact_hint


class FlowsRouter(FlowRouter, Protocol):
    """A router that can also admit policies (``routing.Router``)."""

    def admit_policy(self, term: Any) -> AdmittedPolicyLike: ...


def flow_response(result: FlowResult) -> tuple[int, dict[str, Any]]:
    """``{"output", "x_router", "usage"?}`` for a successful flow, the router error body otherwise."""
    error = flow_error(result)
    if error is not None:
        return error.answer()
    body: dict[str, Any] = {"output": result.output, "x_router": _x_router(result)}
    usage = result.usage()
    if usage:
        body["usage"] = usage
    return 200, body


def flow_error(result: FlowResult) -> RouterError | None:
    """The router error a failed flow is answered with: its status, body and headers (the provider's
    ``Retry-After``, docs/behaviour.md#retry-after); None for a flow that ran."""
    if result.ok:
        return None
    return RouterError(result.error_message or "", result.error_kind, retry_after_s=result.retry_after_s,
                       extra={"x_router": _x_router(result)})


def _x_router(result: FlowResult) -> dict[str, Any]:
    return {**result.x_router(), "compact": compact_hint(result.tokens_in)}


def flow_record(result: FlowResult) -> CallRecord:
    """The record of a flow that ran (its bytes are the HTTP bodies: the front door knows them)."""
    error = flow_error(result)
    status, body = error.answer() if error is not None else flow_response(result)
    return CallRecord(status=status, body=body, headers=error.headers() if error is not None else {},
                      mode=FLOW_MODE, route="flows", cost_usd=result.public_cost(),
                      tokens_in=result.tokens_in, tokens_out=result.tokens_out, flow_fingerprint=result.fingerprint,
                      **flow_facts(result.flow_nodes))


async def run_flows_request(body: dict[str, Any], *, router: FlowsRouter, deadline: Deadline) -> CallRecord:
    """Admit ``body["flow_ir"]`` with ``body.get("flow_input")`` (``null`` = absent) and run it."""
    flow_input = body.get("flow_input")
    if flow_input is None:
        flow_input = MISSING
    try:
        admitted = admit_flow(body.get("flow_ir"), admit_policy=router.admit_policy, flow_input=flow_input,
                              cache=getattr(router, "flow_admissions", None))
    except FlowAdmissionError as exc:
        return refused(InvalidFlow.rejected(exc.message), mode=FLOW_MODE, route="flows")
    from compactor.router import request_call_budget

    with request_call_budget():
        result = await run_flow(admitted, flow_input, router=router, deadline=deadline)
    return flow_record(result)


def normalize_request(body: dict[str, Any], *,
                      admit_policy: Callable[[Any], AdmittedPolicyLike]) -> CallRecord:
    """``{"flow_ir", "encoded", "fingerprint", "version"}`` of ``body["flow_ir"]``; no model call."""
    try:
        admitted = admit_flow(body.get("flow_ir"), admit_policy=admit_policy)
    except FlowAdmissionError as exc:
        return refused(InvalidFlow.rejected(exc.message), mode=NO_MODE, route="flows_normalize")
    return CallRecord(status=200, body=normalize_flow(admitted), mode=NO_MODE, route="flows_normalize")
