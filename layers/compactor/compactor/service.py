"""The core's entry points for every front door (Lambda handler, local server, CLI).

Each returns a :class:`~compactor.call_record.CallRecord` (the answer and the facts about the call);
the adapters only translate events to calls and records to responses, metrics and billing records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compactor import __version__
from compactor.budget import Deadline, flow_budget_ms
from compactor.call_record import CallRecord

if TYPE_CHECKING:  # an annotation only: a windowed job's worker asks for its deadline and never validates a request,
    # and importing the request models builds them and loads pydantic
    # (docs/performance.md#the-three-rows-above-the-goal-twenty-second-round-issue-11)
    from compactor.models import CompactRequest


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
    """The shared budget of one request (docs/behaviour.md#configuration)."""
    return Deadline.after_ms(flow_budget_ms(lambda_context=lambda_context))


WINDOWS_END_MARGIN_MS = 15_000
"""Kept back from an S3 invocation's remaining time when its windows run inline (docs/scale.md): the result of up
to ``S3InlineMaxBytes`` is then encoded, written and billed."""


def windows_deadline(lambda_context: Any = None) -> Deadline | None:
    """When the windows of an inline S3 job must end (each has its own flow budget, docs/scale.md): the
    invocation's remaining time less :data:`WINDOWS_END_MARGIN_MS`; None without a Lambda context."""
    if lambda_context is None or not hasattr(lambda_context, "get_remaining_time_in_millis"):
        return None
    return Deadline.after_ms(max(0, int(lambda_context.get_remaining_time_in_millis()) - WINDOWS_END_MARGIN_MS))


async def compact(request: CompactRequest, *, deadline: Deadline, router: Any = None,
                  on_event: Any = None, flow_runner: Any = None, archive: Any = None) -> tuple[int, dict[str, Any]]:
    """``POST /v1/compact`` in any mode, as a coroutine (the CLI and tests await it directly).
    ``flow_runner`` replaces the inline ``run_flow`` for decision mode (the batch fan-out); ``archive``
    (a ``compactor.archives.Archive``) keeps the originals of a ``restorable`` request."""
    return (await compact_call(request, deadline=deadline, router=router, on_event=on_event,
                               flow_runner=flow_runner, archive=archive)).answer()


async def compact_call(request: CompactRequest, *, deadline: Deadline, router: Any = None,
                       on_event: Any = None, flow_runner: Any = None, archive: Any = None) -> CallRecord:
    """One compaction in the request's mode (docs/architecture.md, "The path of a request"). The
    request's upstream calls are bounded (``compactor.router.request_call_budget``)."""
    from compactor.call_record import refused
    from compactor.compaction import modes
    from compactor.router import request_call_budget
    from compactor.container import get_router
    from compactor.formats import get_dialect
    from compactor.errors import CompactorError

    mode = modes.get(request.mode_name)
    context = modes.ModeContext(router=router or get_router(), deadline=deadline, on_event=on_event,
                                flow_runner=flow_runner, archive=archive)
    try:
        plan = mode.prepare(request, context)
    except CompactorError as exc:
        return refused(exc, mode=mode.name)
    with request_call_budget():
        ran = await mode.run(plan, context)
    return mode.report(request, plan, ran).in_format(get_dialect(request.format).items_field)


async def compact_large(request: CompactRequest, *, router: Any = None, on_event: Any = None,
                        deadline: Deadline | None = None, until: Deadline | None = None) -> CallRecord:
    """Decision-mode compaction in windows (docs/scale.md) for transcripts over one request's limits:
    every window runs inline, all under ``deadline``, else each with its own flow budget
    (``COMPACTOR_FLOW_BUDGET_MS``), none past ``until`` (the S3 path: the invocation's end)."""
    from compactor.call_record import refused
    from compactor.compaction.windowed import compact_in_memory, inline_runner
    from compactor.container import get_router
    from compactor.errors import InvalidFlow, InvalidMaxTokens
    from compactor.flow import FlowAdmissionError

    router = router or get_router()
    runner = inline_runner(router, window_budget_ms=flow_budget_ms(), deadline=deadline, until=until)
    try:
        return await compact_in_memory(request, router=router, run_window=runner, on_event=on_event)
    except FlowAdmissionError as exc:
        return refused(InvalidFlow.rejected(exc), mode="decision")
    except InvalidMaxTokens as exc:
        return refused(exc, mode="decision")


def handle_compact(request: CompactRequest, *, lambda_context: Any = None, flow_runner: Any = None,
                   archive: Any = None) -> CallRecord:
    """``POST /v1/compact`` (any mode); ``flow_runner`` and ``archive`` as in :func:`compact`."""
    from compactor.container import run_sync

    return run_sync(compact_call(request, deadline=request_deadline(lambda_context), flow_runner=flow_runner,
                                 archive=archive))


def handle_expand(handles: Any, *, archive: Any) -> CallRecord:
    """``POST /v1/expand``: the caller's originals by handle (docs/archives.md). No model call."""
    from compactor.archives import expand
    from compactor.call_record import NO_MODE

    status, body = expand(archive, handles)
    return CallRecord(status=status, body=body, mode=NO_MODE, route="expand")


def handle_flows(body: dict[str, Any], *, lambda_context: Any = None) -> CallRecord:
    """``POST /v1/flows``: admit and run an operator's flow."""
    from compactor.container import get_router, run_sync
    from compactor.flows_service import run_flows_request

    return run_sync(run_flows_request(body, router=get_router(), deadline=request_deadline(lambda_context)))


def handle_flows_normalize(body: dict[str, Any]) -> CallRecord:
    """``POST /v1/flows/normalize``: admission and canonical identity only, no model call."""
    from compactor.container import get_router
    from compactor.flows_service import normalize_request

    return normalize_request(body, admit_policy=get_router().admit_policy)
