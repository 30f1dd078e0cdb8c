"""The core's entry points for every front door (Lambda handler, local server, CLI).

Each returns ``(status, body)``; the adapters only translate events to calls and back.
"""

from __future__ import annotations

from typing import Any

from compactor import __version__
from compactor.budget import Deadline, flow_budget_ms
from compactor.models import CompactRequest


def error_body(message: str, *, type_: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code}}


def health() -> tuple[int, dict[str, Any]]:
    """``GET /v1/healthz``: 200 when the catalog loads (the router can be built), else 503 with the reason."""
    from compactor.catalog import CatalogError
    from compactor.container import get_router
    from compactor.policy import PolicyAdmissionError

    try:
        get_router()
    except (CatalogError, PolicyAdmissionError) as exc:
        return 503, {"ok": False, "version": __version__, "error": str(exc)[:500]}
    return 200, {"ok": True, "version": __version__}


def request_deadline(lambda_context: Any = None) -> Deadline:
    """The shared budget of one request (CONTRACT §3)."""
    return Deadline.after_ms(flow_budget_ms(lambda_context=lambda_context))


async def compact(request: CompactRequest, *, deadline: Deadline, router: Any = None,
                  on_event: Any = None, flow_runner: Any = None, archive: Any = None) -> tuple[int, dict[str, Any]]:
    """``POST /v1/compact`` in either mode, as a coroutine (the CLI and tests await it directly).
    ``flow_runner`` replaces the inline ``run_flow`` for decision mode (the batch fan-out); ``archive``
    (a ``compactor.archives.Archive``) keeps the originals of a ``restorable`` request. The request's
    upstream calls are bounded (``compactor.router.request_call_budget``)."""
    from compactor.router import request_call_budget

    with request_call_budget():
        return await _compact(request, deadline=deadline, router=router, on_event=on_event,
                              flow_runner=flow_runner, archive=archive)


async def _compact(request: CompactRequest, *, deadline: Deadline, router: Any, on_event: Any,
                   flow_runner: Any, archive: Any) -> tuple[int, dict[str, Any]]:
    from compactor.compaction.seal import InvalidPolicy, seal
    from compactor.container import get_router
    from compactor.formats import get_dialect

    router = router or get_router()
    dialect = get_dialect(request.format)
    if request.decision_mode:
        from compactor.compaction.decision import InvalidRequest, compact_selective

        try:
            body = await compact_selective(request, router=router, deadline=deadline, on_event=on_event,
                                           flow_runner=flow_runner, archive=archive)
        except InvalidRequest as exc:
            return 400, error_body(exc.message, code=exc.code)
        return 200, in_format(body, dialect.items_field)
    if request.restorable:
        return 400, error_body("restorable needs decision mode", code="restorable_unavailable")
    if request.max_tokens is not None and request.max_tokens < 0:  # 0/null mean the default (REFERENCE §1)
        return 400, error_body("max_tokens must not be negative", code="invalid_max_tokens")
    try:
        body = await seal(request.messages, keep_recent=request.keep_recent, policy_ir=request.policy_ir,
                          max_tokens=request.max_tokens, router=router, deadline=deadline, dialect=dialect)
    except InvalidPolicy as exc:
        return 400, error_body(str(exc), code="invalid_policy")
    return 200, in_format(body, dialect.items_field)


def in_format(body: dict[str, Any], items_field: str) -> dict[str, Any]:
    """The response body with the items under the format's own name (``input`` for Responses)."""
    if items_field == "messages":
        return body
    return {(items_field if key == "messages" else key): value for key, value in body.items()}


async def compact_large(request: CompactRequest, *, router: Any = None, on_event: Any = None,
                        deadline: Deadline | None = None) -> tuple[int, dict[str, Any]]:
    """Decision-mode compaction in windows (docs/scale.md) for transcripts over one request's limits:
    every window runs inline, all under ``deadline``, else each with its own flow budget
    (``COMPACTOR_FLOW_BUDGET_MS``)."""
    from compactor.container import get_router
    from compactor.flow import FlowAdmissionError
    from compactor.compaction.windowed import compact_in_memory, inline_runner

    router = router or get_router()
    runner = inline_runner(router, window_budget_ms=flow_budget_ms(), deadline=deadline)
    try:
        body = await compact_in_memory(request, router=router, run_window=runner, on_event=on_event)
    except FlowAdmissionError as exc:
        return 400, error_body(f"flow_ir rejected at admission: {exc}", code="invalid_flow")
    return 200, body


def handle_compact(request: CompactRequest, *, lambda_context: Any = None,
                   flow_runner: Any = None, archive: Any = None) -> tuple[int, dict[str, Any]]:
    """``POST /v1/compact`` (both modes); ``flow_runner`` and ``archive`` as in :func:`compact`."""
    from compactor.container import run_sync

    return run_sync(compact(request, deadline=request_deadline(lambda_context), flow_runner=flow_runner,
                            archive=archive))


def handle_expand(handles: Any, *, archive: Any) -> tuple[int, dict[str, Any]]:
    """``POST /v1/expand``: the caller's originals by handle (docs/archives.md)."""
    from compactor.archives import expand

    return expand(archive, handles)


def handle_flows(body: dict[str, Any], *, lambda_context: Any = None) -> tuple[int, dict[str, Any]]:
    """``POST /v1/flows``: admit and run an operator's flow."""
    from compactor.container import get_router, run_sync
    from compactor.flows_service import run_flows_request

    return run_sync(run_flows_request(body, router=get_router(), deadline=request_deadline(lambda_context)))


def handle_flows_normalize(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``POST /v1/flows/normalize``: admission and canonical identity only, no model call."""
    from compactor.container import get_router
    from compactor.flows_service import normalize_request

    return normalize_request(body, admit_policy=get_router().admit_policy)
