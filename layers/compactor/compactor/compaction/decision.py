"""Decision-guided compaction (``decision`` mode, see docs/behaviour.md): prepare, materialise the
preset, run it on the generic flow runtime, reassemble. Any failure keeps the affected units as they were."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from compactor.call_record import CallRecord, flow_facts
from compactor.compaction.modes import check_max_tokens, check_pins
from compactor.compaction.preparation import (
    DECISION_PAYLOAD_MAX_BYTES, MAX_SUMMARY_RECORD_BYTES, REASON_BATCHES, REASON_FLOW_INPUT, REASON_FRAGMENTS,
    Preparation, bounded_tail, prepare)
from compactor.compaction.preset import (
    default_decision_policy, generation_tokens, materialise, question_template, reply_bytes, requested_max_tokens)
from compactor.compaction.reassembly import compaction_report, reassemble, with_fallbacks
from compactor.errors import InvalidFlow, RestorableUnavailable
from compactor.flow import FlowAdmissionError, FlowResult, admit_flow, run_flow
from compactor.formats import get_dialect
from compactor.response_blocks import compact_hint
from compactor.policy import PolicyAdmissionError
from compactor.policy.defaults import DEFAULT_CHAT_POLICY
from compactor.router import BYTES_PER_TOKEN_ESTIMATE, DECISION_PROMPT_TOKENS

if TYPE_CHECKING:
    from compactor.compaction.modes import ModeContext
    from compactor.models import CompactRequest

NAME = "decision"


class DecisionPlan(NamedTuple):
    """The preparation and the admitted flow (with its input) that will decide over it."""

    prep: Preparation
    admitted: Any
    flow_input: dict[str, Any]
    on_event: Any = None  # receives, last, {"event": "units", "units": [...]} (docs/report.md)
    archive: Any = None  # a restorable request's ``compactor.archives.Archive`` (docs/archives.md)


# What the summary prompt adds around a batch's summary record: the system prompt with its names hint
# (up to 3,000 bytes, compaction/salience.py).
SUMMARY_PROMPT_TOKENS = 1500
# The record travels as a JSON string inside the chat request, whose escapes the router's estimate counts.
_ESCAPED_SHARE = (4, 5)


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


# The smallest context at which each limit below reaches its cap (a larger context changes nothing): the
# decision payload's 32 000 bytes, the summary reply's 4096 tokens, and the summary record's 50 000 bytes
# with the largest reply (a reply is at most 4096 tokens, so the record's room is then the least).
_PAYLOAD_FULL_CONTEXT = DECISION_PROMPT_TOKENS + _ceil_div(DECISION_PAYLOAD_MAX_BYTES, BYTES_PER_TOKEN_ESTIMATE)
_REPLY_FULL_CONTEXT = 4 * generation_tokens(None)
_RECORD_FULL_CONTEXT = generation_tokens(None) + SUMMARY_PROMPT_TOKENS + _ceil_div(
    _ceil_div(MAX_SUMMARY_RECORD_BYTES * _ESCAPED_SHARE[1], _ESCAPED_SHARE[0]), BYTES_PER_TOKEN_ESTIMATE)


def smallest_context(router: Any, protocol: str, policy_ir: Any, enough: int | None = None) -> int | None:
    """The smallest context among the ``protocol`` offers ``policy_ir`` may pick (docs/performance.md);
    every enabled offer's when the policy does not admit (the flow's admission then says why).

    ``enough``: a context from which the caller's answer no longer changes. The offers a policy may pick
    are among the enabled ones, so their smallest context is at least the smallest of all: when that is
    ``enough`` already, or no enabled offer states a context, it is returned as it is, without admitting
    and ranking the policy for an answer it cannot change (the flow's admission admits the policy)."""
    smallest = getattr(router, "smallest_context", None)
    if smallest is None:
        return None
    if enough is not None:
        every = smallest(protocol)
        if every is None or every >= enough:
            return every
    try:
        policy = router.admit_policy(policy_ir)
    except PolicyAdmissionError:
        return smallest(protocol)
    return smallest(protocol, policy)


def decision_payload_limit(router: Any, policy_ir: Any = None) -> int:
    """Bytes one batch's decision payload may take: 32 000, or less when the smallest context among the
    deciders the decision policy may pick cannot hold that much (docs/providers.md)."""
    context = smallest_context(router, "decisions", default_decision_policy() if policy_ir is None else policy_ir,
                               _PAYLOAD_FULL_CONTEXT)
    if context is None:
        return DECISION_PAYLOAD_MAX_BYTES
    return max(0, min(DECISION_PAYLOAD_MAX_BYTES, (context - DECISION_PROMPT_TOKENS) * BYTES_PER_TOKEN_ESTIMATE))


def _reply_limit(context: int | None, max_tokens: int | None) -> int:
    if max_tokens:
        return generation_tokens(max_tokens)
    return generation_tokens(None) if context is None else min(generation_tokens(None), max(512, context // 4))


def summary_reply_limit(router: Any, policy_ir: Any = None, max_tokens: int | None = None) -> int:
    """The most ``max_tokens`` a summary call gets: the request's (at most 4096); when the request does not
    set it, a quarter of the smallest context among the summarizers the generation policy may pick
    (512 to 4096; 4096 when no context is stated), so the summary record keeps most of the room."""
    if max_tokens:
        return generation_tokens(max_tokens)
    return _reply_limit(smallest_context(router, "chat", DEFAULT_CHAT_POLICY if policy_ir is None else policy_ir,
                                         _REPLY_FULL_CONTEXT), None)


def summary_limits(router: Any, policy_ir: Any = None, max_tokens: int | None = None) -> tuple[int, int]:
    """``(summary_reply_limit, summary_record_limit)`` from one look at the summarizers' contexts."""
    context = smallest_context(router, "chat", DEFAULT_CHAT_POLICY if policy_ir is None else policy_ir,
                               _RECORD_FULL_CONTEXT)
    reply = _reply_limit(context, max_tokens)
    if context is None:
        return reply, MAX_SUMMARY_RECORD_BYTES
    room = (context - reply - SUMMARY_PROMPT_TOKENS) * BYTES_PER_TOKEN_ESTIMATE
    return reply, max(0, min(MAX_SUMMARY_RECORD_BYTES, room * _ESCAPED_SHARE[0] // _ESCAPED_SHARE[1]))


def summary_record_limit(router: Any, policy_ir: Any = None, max_tokens: int | None = None) -> int:
    """Bytes one batch's summary record may take: 50 000, or less when the smallest context among the
    summarizers the generation policy may pick cannot hold it with the prompt and the output room."""
    return summary_limits(router, policy_ir, max_tokens)[1]


def admit_request_policies(router: Any, decision_policy_ir: Any, policy_ir: Any) -> None:
    """Admit the request's own policies before the flow built from them: a ``FlowAdmissionError`` naming the
    request field (``decision_policy_ir: ir: $: …``), where the flow's admission names a node of the preset
    (``node "batch_0_classify": policy rejected: …``) the caller never wrote (docs/behaviour.md#errors). The
    router keeps what it admitted, so the flow's admission does not admit them again."""
    for field_name, term in (("decision_policy_ir", decision_policy_ir), ("policy_ir", policy_ir)):
        if term is None:
            continue
        try:
            router.admit_policy(term)
        except PolicyAdmissionError as exc:
            raise FlowAdmissionError(f"{field_name}: {exc}") from exc


class DecisionMode:
    """``decision``: a model classifies each aged unit (keep, summarize, archive) through the preset flow."""

    name = NAME

    def prepare(self, request: CompactRequest, context: ModeContext) -> DecisionPlan:
        messages = request.messages
        check_pins(request)
        check_max_tokens(request)
        if request.restorable and context.archive is None:
            raise RestorableUnavailable("restorable is not available here")
        max_tokens = requested_max_tokens(request)
        decision_policy = request.decision_policy_ir
        if decision_policy is None:
            decision_policy = default_decision_policy()
        reply_max, record_max = summary_limits(context.router, request.policy_ir, max_tokens)
        prep = prepare(messages, keep_recent=request.keep_recent, target_ratio=request.target_ratio,
                       pinned_indices=request.pinned_indices, question_template=question_template(),
                       payload_max_bytes=decision_payload_limit(context.router, decision_policy),
                       summary_max_bytes=record_max,
                       dialect=get_dialect(request.format), bounded=bounded_tail(request),
                       reply_bytes=reply_bytes(reply_max))
        flow_ir, flow_input = materialise(
            prep.batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence, budget=prep.budget,
            decision_policy=decision_policy,
            generation_policy=request.policy_ir, max_tokens=max_tokens,
            reply_max=reply_max)
        try:
            if prep.batches:  # policies are admitted only when there is something to decide (docs/behaviour.md)
                admit_request_policies(context.router, request.decision_policy_ir, request.policy_ir)
            admitted = admit_flow(flow_ir, admit_policy=context.router.admit_policy, flow_input=flow_input,
                                  flow_input_bytes=prep.flow_input_bytes,
                                  cache=getattr(context.router, "flow_admissions", None))
        except FlowAdmissionError as exc:
            raise InvalidFlow.rejected(exc) from exc
        if context.on_event is not None:
            context.on_event({"event": "plan", "batches": len(prep.batches), "candidates": len(prep.candidates)})
        return DecisionPlan(prep, admitted, flow_input, context.on_event,
                            context.archive if request.restorable else None)

    async def run(self, plan: DecisionPlan, context: ModeContext) -> FlowResult:
        """``context.flow_runner`` (same signature as ``run_flow``, the default) runs the admitted flow:
        the batch fan-out plugs in here."""
        runner = context.flow_runner or run_flow
        return await runner(plan.admitted, plan.flow_input, router=context.router, deadline=context.deadline,
                            on_event=context.on_event)

    def report(self, request: CompactRequest, plan: DecisionPlan, ran: FlowResult) -> CallRecord:
        messages, prep = request.messages, plan.prep
        values = ran.output if ran.ok and isinstance(ran.output, dict) else None
        output, manifest, output_bytes, output_sizes = reassemble(
            messages, prep, values, get_dialect(request.format), restorable=request.restorable,
            decided=ran.answer_reasons)
        if plan.archive is not None:  # the originals of the changed units (docs/archives.md)
            from compactor.archives import store_originals  # restorable requests only: lean cold starts

            store_originals(plan.archive, messages, manifest)
        if plan.on_event is not None:  # every manifest entry, unbounded, with its reason (docs/report.md)
            plan.on_event({"event": "units", "units": manifest})
        facts = flow_facts(ran.flow_nodes)
        compaction = with_fallbacks(compaction_report(messages, output, output_bytes, prep, manifest,
                                                      request.target_ratio, ran.fingerprint, output_sizes),
                                    facts["fallbacks"])
        body: dict[str, Any] = {"messages": output, "compacted": output != messages, "compaction": compaction}
        if ran.flow_nodes:
            usage = ran.usage()
            if usage:
                body["usage"] = usage
            body["x_router"] = {**ran.x_router(), "compact": compact_hint(ran.tokens_in)}
        return CallRecord(
            status=200, body=body, mode=NAME, bytes_in=prep.original_bytes, bytes_out=output_bytes,
            target_met=compaction["target_met"], cost_usd=ran.public_cost() if ran.flow_nodes else 0.0,
            cost_basis=ran.cost_basis if ran.flow_nodes else None,
            tokens_in=ran.tokens_in, tokens_out=ran.tokens_out, flow_fingerprint=ran.fingerprint,
            report=compaction, **facts)


MODE = DecisionMode()

LIMIT_REASONS = (REASON_FRAGMENTS, REASON_BATCHES, REASON_FLOW_INPUT)
"""The limits of one request that leave candidates out; a transcript over them is compacted in windows
(``compactor.compaction.windowed``, docs/scale.md)."""


def exceeds_one_request(request: CompactRequest) -> bool:
    """Whether one ``/v1/compact`` request would leave candidates out for its limits (False for a request
    the single-request path rejects, so it answers it). Windows read ``openai-chat`` and ``anthropic-messages``
    (``formats.WINDOWED_FORMATS``) and keep no originals: other formats and restorable requests run as one request
    (docs/scale.md). Here, not in the windowed module, so that the S3 path asks without importing what windows need
    (docs/performance.md#where-the-time-goes)."""
    from compactor.formats import WINDOWED_FORMATS, get_dialect

    if request.format not in WINDOWED_FORMATS or request.restorable:
        return False
    pins = request.pinned_indices
    if pins is not None and any(i < 0 or i >= len(request.messages) for i in pins):
        return False
    prep = prepare(request.messages, keep_recent=request.keep_recent, target_ratio=request.target_ratio,
                   pinned_indices=request.pinned_indices, question_template=question_template(),
                   bounded=bounded_tail(request), salience=False,  # the reasons only: no names scan
                   dialect=get_dialect(request.format))
    return any(reason in LIMIT_REASONS for reason in prep.reasons)
