"""``POST /v1/flows`` and ``POST /v1/flows/normalize`` (CONTRACT §2): operators' own typed flows.

Both return ``(status, body)``. Admission failures answer 400 ``invalid_flow`` before any model call;
a flow that fails without a fallback answers the router error status of REFERENCE §4.4 with the
flow's ``x_router`` block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from compactor.budget import Deadline
from compactor.flow import MISSING, FlowAdmissionError, FlowResult, FlowRouter, admit_flow, normalize_flow, run_flow
from compactor.flow.graph import AdmittedPolicyLike
from compactor.response_blocks import compact_hint

ADMISSION_PREFIX: Final = "flow_ir rejected at admission: "
_STATUS_BY_ERROR_KIND: Final[Mapping[str, int]] = {
    "no_candidates": 503,
    "timeout": 504,
    "flow_deadline": 504,
    "bad_request": 400,
    "context_overflow": 400,
    "auth_error": 401,
    "rate_limit": 429,
    # A data operation that does not fit the data it is given: the caller's flow or input is at fault, so
    # 422 where the reference answers 502 (docs/differences.md).
    "data_error": 422,
}
_EXHAUSTED_PREFIX: Final = "exhausted: "


class FlowsRouter(FlowRouter, Protocol):
    """A router that can also admit policies (``routing.Router``)."""

    def admit_policy(self, term: Any) -> AdmittedPolicyLike: ...


def router_error_status(kind: str | None) -> int:
    """HTTP status of a failed flow from its error kind (``exhausted: <kind>`` maps like ``<kind>``)."""
    base = (kind or "").removeprefix(_EXHAUSTED_PREFIX)
    return _STATUS_BY_ERROR_KIND.get(base, 502)


def invalid_flow_body(message: str) -> dict[str, Any]:
    """The 400 body of an admission failure."""
    return {"error": {"message": ADMISSION_PREFIX + message, "type": "invalid_request_error",
                      "code": "invalid_flow"}}


def flow_response(result: FlowResult) -> tuple[int, dict[str, Any]]:
    """``{"output", "x_router", "usage"?}`` for a successful flow, the router error body otherwise."""
    x_router = {**result.x_router(), "compact": compact_hint(result.tokens_in)}
    if not result.ok:
        error = {"message": result.error_message, "type": "router_error", "code": result.error_kind}
        return router_error_status(result.error_kind), {"error": error, "x_router": x_router}
    body: dict[str, Any] = {"output": result.output, "x_router": x_router}
    usage = result.usage()
    if usage:
        body["usage"] = usage
    return 200, body


async def run_flows_request(body: dict[str, Any], *, router: FlowsRouter,
                            deadline: Deadline) -> tuple[int, dict[str, Any]]:
    """Admit ``body["flow_ir"]`` with ``body.get("flow_input")`` (``null`` = absent) and run it."""
    flow_input = body.get("flow_input")
    if flow_input is None:
        flow_input = MISSING
    try:
        admitted = admit_flow(body.get("flow_ir"), admit_policy=router.admit_policy, flow_input=flow_input)
    except FlowAdmissionError as exc:
        return 400, invalid_flow_body(exc.message)
    from compactor.router import request_call_budget

    with request_call_budget():
        result = await run_flow(admitted, flow_input, router=router, deadline=deadline)
    return flow_response(result)


def normalize_request(body: dict[str, Any], *,
                      admit_policy: Callable[[Any], AdmittedPolicyLike]) -> tuple[int, dict[str, Any]]:
    """``{"flow_ir", "encoded", "fingerprint", "version"}`` of ``body["flow_ir"]``; no model call."""
    try:
        admitted = admit_flow(body.get("flow_ir"), admit_policy=admit_policy)
    except FlowAdmissionError as exc:
        return 400, invalid_flow_body(exc.message)
    return 200, normalize_flow(admitted)
