"""Decision-guided compaction (REFERENCE §3.2–§3.4, G3): prepare, materialise the preset, run it on the
generic flow runtime, reassemble. Any failure keeps the affected units as they were."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from compactor.archives import Archive, store_originals
from compactor.budget import Deadline
from compactor.formats import get_dialect
from compactor.flow import FlowAdmissionError, FlowResult, admit_flow, run_flow
from compactor.models import CompactRequest
from compactor.response_blocks import compact_hint
from compactor.router import BYTES_PER_TOKEN_ESTIMATE, DECISION_PROMPT_TOKENS
from compactor.compaction.preparation import DECISION_PAYLOAD_MAX_BYTES, prepare
from compactor.compaction.preset import materialise, question_template
from compactor.compaction.reassembly import compaction_report, reassemble

PINS_MESSAGE = "pinned_indices must reference existing messages"


class InvalidRequest(Exception):
    """A 400 answer: ``message`` and ``code`` go into the error body."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def decision_payload_limit(router: Any) -> int:
    """Bytes one batch's decision payload may take: 32 000, or less when the smallest context among the
    catalog's deciders cannot hold that much (docs/providers.md)."""
    smallest = getattr(router, "smallest_context", None)
    context = smallest("decisions") if smallest is not None else None
    if context is None:
        return DECISION_PAYLOAD_MAX_BYTES
    return max(0, min(DECISION_PAYLOAD_MAX_BYTES, (context - DECISION_PROMPT_TOKENS) * BYTES_PER_TOKEN_ESTIMATE))


async def compact_selective(request: CompactRequest, *, router: Any, deadline: Deadline,
                            on_event: Callable[[dict[str, Any]], None] | None = None,
                            flow_runner: Callable[..., Awaitable[FlowResult]] | None = None,
                            archive: Archive | None = None) -> dict[str, Any]:
    """``flow_runner`` (same signature as ``run_flow``, the default) runs the admitted flow: the
    batch fan-out plugs in here. ``on_event`` receives the plan, the flow's node events and, last,
    ``{"event": "units", "units": [...]}``: every manifest entry, unbounded, with its ``reason`` (docs/report.md).
    ``archive`` (required when the request is ``restorable``) receives the originals of the changed units
    (docs/archives.md)."""
    messages = request.messages
    dialect = get_dialect(request.format)
    pins = request.pinned_indices
    if pins is not None and any(i < 0 or i >= len(messages) for i in pins):
        raise InvalidRequest(PINS_MESSAGE)
    prep = prepare(messages, keep_recent=request.keep_recent, target_ratio=request.target_ratio,
                   pinned_indices=pins, question_template=question_template(),
                   payload_max_bytes=decision_payload_limit(router), dialect=dialect)
    flow_ir, flow_input = materialise(
        prep.batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence, budget=prep.budget,
        decision_policy=request.decision_policy_ir, generation_policy=request.policy_ir,
        max_tokens=request.max_tokens)
    try:
        admitted = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    except FlowAdmissionError as exc:
        raise InvalidRequest(f"flow_ir rejected at admission: {exc}", "invalid_flow") from exc
    if on_event is not None:
        on_event({"event": "plan", "batches": len(prep.batches), "candidates": len(prep.candidates)})
    runner = flow_runner or run_flow
    result = await runner(admitted, flow_input, router=router, deadline=deadline, on_event=on_event)
    values = result.output if result.ok and isinstance(result.output, dict) else None
    output, manifest, output_bytes = reassemble(messages, prep, values, dialect, restorable=request.restorable,
                                                decided=result.answer_reasons)
    if request.restorable:
        if archive is None:
            raise InvalidRequest("restorable is not available here", "restorable_unavailable")
        store_originals(archive, messages, manifest)
    if on_event is not None:
        on_event({"event": "units", "units": manifest})
    body: dict[str, Any] = {
        "messages": output,
        "compacted": output != messages,
        "compaction": compaction_report(messages, output, output_bytes, prep, manifest, request.target_ratio,
                                        result.fingerprint),
    }
    if result.flow_nodes:
        usage = result.usage()
        if usage:
            body["usage"] = usage
        body["x_router"] = {**result.x_router(), "compact": compact_hint(result.tokens_in)}
    return body
