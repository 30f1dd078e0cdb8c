"""Execution of one flow node (docs/behaviour.md#flow-execution and #budgets): a function of the node, its input values, the
router and the shared deadline, returning the node's value and its trace entry. Nothing here knows
about other nodes, so a node can run in any worker that has those four things.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from ..budget import Deadline
from ..cost import NODE_DECIMALS, with_failed_attempts
from ..decision_validation import DecisionValidationError, validate_answers, validate_state
from ..jsonutil import (
    StrictJSONError, dense_dumps, depth_exceeds, ensure_parsed_encodable, strict_loads, utf8_len,
)
from ..providers.base import (
    BAD_REQUEST, BAD_RESPONSE, REASONING_EXHAUSTED, REFUSED, TIMEOUT, ChatRequest, ChatResponse, DecisionRequest,
    spent_on_reasoning, unfinished,
)
from ..records import record
from ..router import RouteResult, routed_traces
from . import data_ops, decision_routing as routed
from .graph import DATA, DECISION, AdmittedPolicyLike, AdmittedRouting, FlowNode
from .values import MAX_VALUE_BYTES, MAX_VALUE_DEPTH, WireSized, is_empty_container, view_of

DEFAULT_DECISION_TIMEOUT_MS: Final = 7000

# Node outcomes (also reported to progress listeners).
OK, SKIPPED, FALLBACK, FAILED = "ok", "skipped", "fallback", "failed"
# Error kinds the runtime itself produces (routed calls bring their own).
FLOW_DEADLINE: Final = "flow_deadline"
NODE_EXCEPTION: Final = "node_exception"
DATA_ERROR: Final = "data_error"

# Compiled on first use by ``re``'s cache, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_PLACEHOLDER = r"\$(\d+)"


class FlowRouter(Protocol):
    """The part of the router (``routing.Router``) the runtime calls."""

    async def chat(self, policy: Any, request: ChatRequest, *, needs: frozenset[str] = ...,
                   deadline: Deadline | None = None, timeout_s: float | None = None) -> RouteResult: ...

    async def decide(self, policy: Any, request: DecisionRequest, *, deadline: Deadline | None = None,
                     timeout_s: float | None = None) -> RouteResult: ...


@record(slots=True)
class NodeOutcome:
    """What a node produced: its value, its ``flow_nodes`` entry and how it ended."""

    value: Any
    entry: dict[str, Any]
    status: str  # OK | SKIPPED | FALLBACK | FAILED
    error_kind: str | None = None
    error_message: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # proposed by an llm node, shown to its readers
    retry_after_s: float | None = None  # FAILED on a routed call: the provider's Retry-After (RouteResult's)


class _NodeFailure(Exception):
    def __init__(self, kind: str, message: str = "", *, trace: dict[str, Any] | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.text = f"{kind}: {message}" if message else kind
        self.trace = trace  # the trace of a routed call cut off (_bounded): the attempts it sent
        self.retry_after_s = retry_after_s  # the provider's Retry-After of a failed routed call


async def execute_node(node: FlowNode, values: Sequence[Any], *, router: FlowRouter, deadline: Deadline,
                       conversation: Sequence[Mapping[str, Any]] = (),
                       proposed_tool_calls: Sequence[Mapping[str, Any]] = ()) -> NodeOutcome:
    """Run an ``llm``, ``decision`` or ``data`` node on its ordered input ``values``.

    Never raises for model or data failures: they come back as a FAILED outcome, or as FALLBACK
    with the first input value when the node has ``on_error: "input"``. Cancellation propagates.
    """
    if node.kind == DATA:
        return execute_data_node(node, values)
    entry: dict[str, Any] = {"node": node.cid, "kind": node.kind, "inputs": [f"n{i}" for i in node.inputs]}
    try:
        if node.option("skip_empty") and is_empty_container(values[0]):
            entry.update(skipped=True, cost_reported=0)
            return NodeOutcome(values[0], entry, SKIPPED)
        if deadline.expired:
            entry.update(skipped=True, cost_reported=0)
            raise _NodeFailure(FLOW_DEADLINE)
        if node.kind == DECISION:
            return await _run_decision(node, values, entry, router, deadline)
        return await _run_llm(node, values, entry, router, deadline, conversation, proposed_tool_calls)
    except _NodeFailure as failure:
        return _failed(node, values, entry, failure)


def execute_data_node(node: FlowNode, values: Sequence[Any]) -> NodeOutcome:
    """:func:`execute_node` of a ``data`` node, which is pure and never waits: a scheduler runs it inline
    without a coroutine to drive (docs/performance.md). A failure comes back as :func:`execute_node`'s."""
    entry: dict[str, Any] = {"node": node.cid, "kind": node.kind, "inputs": [f"n{i}" for i in node.inputs],
                             "cost_reported": 0}  # pure: free whether it succeeds or not
    try:
        try:
            value = data_ops.apply(node.spec["operation"], node.spec, values)
        except data_ops.DataOpError as exc:
            raise _NodeFailure(DATA_ERROR, exc.message) from exc
        except UnicodeEncodeError as exc:  # a value holding a lone surrogate has no byte size
            raise _NodeFailure(DATA_ERROR, "value is not valid Unicode (lone surrogate)") from exc
    except _NodeFailure as failure:
        return _failed(node, values, entry, failure)
    return NodeOutcome(value, entry, OK)


def _failed(node: FlowNode, values: Sequence[Any], entry: dict[str, Any], failure: _NodeFailure) -> NodeOutcome:
    """The outcome of a node that failed: FALLBACK to its first input with ``on_error: "input"``, else FAILED."""
    entry["error"] = failure.text
    if failure.trace is not None:  # its routed call was cut off: what it sent is counted (docs/billing.md)
        entry["decision_trace"] = failure.trace
    if node.option("on_error") == "input":
        entry["fallback"] = "input"
        return NodeOutcome(values[0], entry, FALLBACK, failure.kind, failure.text)
    return NodeOutcome(None, entry, FAILED, failure.kind, failure.text, retry_after_s=failure.retry_after_s)


async def _run_decision(node: FlowNode, values: Sequence[Any], entry: dict[str, Any], router: FlowRouter,
                        deadline: Deadline) -> NodeOutcome:
    state = values[0] if len(values) == 1 else list(values)
    questions = node.spec["questions"]
    try:  # the questions passed the host decision validation at admission: only the state is new
        measured = state.wire_bytes if type(state) is WireSized else None  # its maker measured it
        wire_bytes = validate_state(state, questions, measured, node.questions_bytes)
    except DecisionValidationError as exc:
        entry["cost_reported"] = 0  # nothing was sent
        raise _NodeFailure(BAD_REQUEST, exc.message) from exc
    request = DecisionRequest(state=state, questions=questions, cache_prefix=tuple(node.option("cache_prefix", ())),
                              wire_bytes=wire_bytes)
    result = await _bounded(
        lambda timeout_s: router.decide(node.policy, request, deadline=deadline, timeout_s=timeout_s),
        node.option("timeout_ms", DEFAULT_DECISION_TIMEOUT_MS), deadline)
    assert node.policy is not None
    response = _record_route(entry, node.policy, result)
    # Every transport's answer is checked against this node's questions (docs/behaviour.md#native-decisions), whoever served it.
    answer = {"model": response.model, "answers": response.answers, "usage": response.usage}
    try:
        validate_answers(questions, answer, model_family=result.chosen.family if result.chosen else None)
    except DecisionValidationError as exc:
        raise _NodeFailure(BAD_RESPONSE, f"invalid decision: {exc.message}") from exc
    return NodeOutcome(response.answers, entry, OK)


async def _run_llm(node: FlowNode, values: Sequence[Any], entry: dict[str, Any], router: FlowRouter,
                   deadline: Deadline, conversation: Sequence[Mapping[str, Any]],
                   proposed_tool_calls: Sequence[Mapping[str, Any]]) -> NodeOutcome:
    messages: list[dict[str, Any]] = [] if node.option("context") == "inputs" else [dict(m) for m in conversation]
    prompt = build_prompt(node.option("template"), values, proposed_tool_calls, node.option("embed_json_text", False))
    messages.append({"role": "system", "content": node.spec["system"]})
    messages.append({"role": "user", "content": prompt})
    json_mode = node.option("output_format") == "json"
    request = ChatRequest(messages=messages, max_tokens=node.option("max_tokens"), json_mode=json_mode,
                          max_string_bytes=node.option("max_string_bytes"),
                          max_total_string_bytes=node.option("max_total_string_bytes"),
                          keep_names=tuple(node.option("keep_names", ())))
    timeout_ms = node.option("timeout_ms")
    # A routed node's timeout covers the routing decision and the generation together.
    node_deadline = None if timeout_ms is None or node.routing is None else Deadline.after_ms(timeout_ms)
    policy = node.policy
    if node.routing is not None:
        policy = await _route(node.routing, entry, router, deadline, node_deadline, timeout_ms, conversation, prompt)
        if deadline.expired:
            entry["cost_reported"] = 0  # the generation was not called
            raise _NodeFailure(FLOW_DEADLINE, "no time left after routing; generation not called")
        if node_deadline is not None and node_deadline.expired:
            entry["cost_reported"] = 0
            raise _NodeFailure(TIMEOUT, f"node timeout after {timeout_ms} ms during routing; generation not called")
    assert policy is not None
    result = await _bounded(
        lambda timeout_s: router.chat(policy, request, deadline=deadline, timeout_s=timeout_s),
        timeout_ms, deadline, left_s=None if node_deadline is None else node_deadline.remaining_s())
    response = _record_route(entry, policy, result)
    if json_mode:
        return NodeOutcome(parse_json_output(response), entry, OK)
    if response.finish_reason == REFUSED:  # the model declined (or a filter stopped it): no output to pass on
        raise _NodeFailure(BAD_RESPONSE, f"output {unfinished(response)}")
    if spent_on_reasoning(response):  # nothing but reasoning: no output, and the failure says why
        raise _NodeFailure(REASONING_EXHAUSTED, f"output {unfinished(response)}")
    return NodeOutcome(response.text or "", entry, OK, tool_calls=response.tool_calls or None)


async def _route(routing: AdmittedRouting, entry: dict[str, Any], router: FlowRouter, deadline: Deadline,
                 node_deadline: Deadline | None, node_timeout_ms: int | None,
                 conversation: Sequence[Mapping[str, Any]], prompt: str) -> AdmittedPolicyLike:
    """The routing decision of a decision-routed llm node (docs/behaviour.md#decision-routing): one ``route`` choice
    question over a bounded projection of the conversation and the node's prompt. Fills
    ``entry["routing"]`` and returns the policy that runs the generation: the proposed choice's, or
    the fallback choice's when the decision failed, timed out, raised, was invalid or uncertain.
    Never raises for a failed decision (cancellation propagates)."""
    record: dict[str, Any] = {
        "selected": None, "fallback_used": False, "fallback_reason": None, "proposed": None, "confidence": None,
        "probabilities": None, "cost_usd": None, "tokens_in": None, "tokens_out": None, "model": None,
        "decision_trace": None,
    }
    entry["routing"] = record

    def settle(proposed: str | None, reason: str | None, error: str | None = None) -> AdmittedPolicyLike:
        selected = routing.fallback if reason is not None or proposed is None else proposed
        record.update(selected=selected, fallback_used=reason is not None, fallback_reason=reason)
        if error:
            record["error"] = error
        return routing.choices[selected]

    questions = {routed.ROUTE_QUESTION: routed.route_question(routing.instructions, routing.descriptions)}
    try:
        payload = routed.fitted_payload(routed.routing_state(conversation, prompt), questions)
    except DecisionValidationError as exc:
        record["cost_usd"] = 0  # nothing was sent
        return settle(None, routed.INVALID_DECISION, exc.message)
    request = DecisionRequest(state=payload["state"], questions=questions)
    left_s, limit_ms, label = routing.timeout_ms / 1000, routing.timeout_ms, "routing timeout"
    if node_deadline is not None and node_deadline.remaining_s() < left_s:
        left_s, limit_ms, label = node_deadline.remaining_s(), node_timeout_ms, "node timeout"
    try:
        result = await _bounded(
            lambda timeout_s: router.decide(routing.policy, request, deadline=deadline, timeout_s=timeout_s),
            limit_ms, deadline, left_s=left_s, label=label)
    except _NodeFailure as failure:  # the call was cancelled or raised: its cost is unknown
        record["decision_trace"] = failure.trace  # the attempts it sent, counted (docs/billing.md)
        reason = routed.DECISION_TIMEOUT if failure.kind == TIMEOUT else routed.DECISION_ERROR
        return settle(None, reason, failure.text)
    response, chosen = result.response, result.chosen
    record["decision_trace"] = result.trace or None
    if not result.ok or response is None or chosen is None:
        kind = result.error_kind or "upstream_error"
        record["cost_usd"] = result.failure_cost()  # a billed, rejected answer keeps its cost
        reason = routed.INVALID_DECISION if kind == routed.INVALID_DECISION else routed.DECISION_FAILED
        return settle(None, reason, f"{kind}: {result.error_message}" if result.error_message else kind)
    record.update(cost_usd=_route_cost(result), tokens_in=response.tokens_in, tokens_out=response.tokens_out,
                  model=getattr(response, "model", None) or chosen.model)
    answer = {"model": getattr(response, "model", None), "answers": getattr(response, "answers", None),
              "usage": getattr(response, "usage", None)}
    choice, error = routed.read_answer(questions, answer, model_family=chosen.family,
                                       min_confidence=routing.min_confidence)
    record.update(proposed=choice.proposed, confidence=choice.confidence, probabilities=choice.probabilities)
    return settle(choice.proposed, choice.fallback_reason, error)


def build_prompt(template: str | None, values: Sequence[Any],
                 proposed_tool_calls: Sequence[Mapping[str, Any]] = (), embed_json_text: bool = False) -> str:
    """The user prompt of an llm node: ``template`` with ``$n`` → view of input n (out of range → ""),
    else the single input's view, else ``[input i]`` sections joined by blank lines; proposed tool
    calls of predecessors follow in a ``[proposed tool calls]`` block. ``embed_json_text``: the node's
    option (``values.view_of``)."""
    if template is not None:
        views: dict[int, str] = {}

        def substitute(match: re.Match[str]) -> str:
            position = int(match.group(1))
            if not 1 <= position <= len(values):
                return ""
            if position not in views:
                views[position] = view_of(values[position - 1], embed_json_text)
            return views[position]

        text = re.sub(_PLACEHOLDER, substitute, template)
    elif len(values) == 1:
        text = view_of(values[0], embed_json_text)
    else:
        text = "\n\n".join(f"[input {i}]\n{view_of(value, embed_json_text)}" for i, value in enumerate(values, start=1))
    if proposed_tool_calls:
        text += "\n\n[proposed tool calls]\n" + dense_dumps(list(proposed_tool_calls))
    return text


def parse_json_output(response: ChatResponse) -> Any:
    """The typed value of a JSON-mode reply: finished (``providers.base.unfinished``: not cut off,
    refused or filtered, no tool calls), strict JSON (no duplicate keys, finite numbers), ≤ 1 MiB and depth ≤ 32."""
    problem = unfinished(response)
    if problem is not None:
        raise _NodeFailure(REASONING_EXHAUSTED if spent_on_reasoning(response) else BAD_RESPONSE,
                           f"JSON output {problem}")
    text = response.text
    if not text or not text.strip():
        raise _NodeFailure(BAD_RESPONSE, "empty JSON output")
    if not _utf8_encodable(text):
        raise _NodeFailure(BAD_RESPONSE, "JSON output is not valid Unicode (lone surrogate)")
    if utf8_len(text) > MAX_VALUE_BYTES:
        raise _NodeFailure(BAD_RESPONSE, f"JSON output exceeds {MAX_VALUE_BYTES} bytes")
    try:
        value = strict_loads(text)
    except StrictJSONError as exc:
        raise _NodeFailure(BAD_RESPONSE, f"invalid JSON output ({exc})") from exc
    if depth_exceeds(value, MAX_VALUE_DEPTH):
        raise _NodeFailure(BAD_RESPONSE, f"JSON output nested deeper than {MAX_VALUE_DEPTH} levels")
    try:
        ensure_parsed_encodable(text, value)
    except ValueError as exc:
        raise _NodeFailure(BAD_RESPONSE, f"JSON output {exc}") from None
    return value


def _utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _bounded(call: Callable[[float | None], Awaitable[RouteResult]], timeout_ms: int | None,
                   deadline: Deadline, *, left_s: float | None = None, label: str = "node timeout") -> RouteResult:
    """Run a routed call under the node timeout and the time left, cancelling it at either bound.
    ``left_s`` is what remains of ``timeout_ms`` when part of it was spent already; ``label`` names
    the timeout in the failure message. A call cut off leaves its trace on the failure (the attempts it sent)."""
    node_limit = left_s if left_s is not None else (None if timeout_ms is None else timeout_ms / 1000)
    remaining = deadline.remaining_s()
    limit = remaining if node_limit is None else min(node_limit, remaining)
    scope = asyncio.timeout(limit)
    with routed_traces() as traces:
        try:
            async with scope:
                return await call(node_limit)
        except TimeoutError as exc:
            trace = traces[-1] if traces else None
            if not scope.expired():
                raise _NodeFailure(NODE_EXCEPTION, f"{type(exc).__name__}: {exc}", trace=trace) from exc
            if node_limit is not None and node_limit <= remaining:
                raise _NodeFailure(TIMEOUT, f"{label} after {timeout_ms} ms; call cancelled", trace=trace) from exc
            raise _NodeFailure(TIMEOUT, "flow budget expired; call cancelled", trace=trace) from exc
        except Exception as exc:  # any router defect is a clean node failure, never a crash
            raise _NodeFailure(NODE_EXCEPTION, f"{type(exc).__name__}: {exc}",
                               trace=traces[-1] if traces else None) from exc


def _route_cost(result: RouteResult) -> float | None:
    """The USD cost of a successful routed call, billed failed attempts before it included."""
    return with_failed_attempts(result.cost_usd, result.failed_cost_usd, NODE_DECIMALS,
                                failed_known=result.failed_cost_known)


def _record_route(entry: dict[str, Any], policy: AdmittedPolicyLike, result: RouteResult) -> Any:
    """Add the routed call's model fields to ``entry``; return the response or raise its failure."""
    entry["policy_fingerprint"] = result.trace.get("policy_fingerprint") or policy.fingerprint
    response, chosen = result.response, result.chosen
    if not result.ok or response is None or chosen is None:
        kind = result.error_kind or "upstream_error"
        billed = result.failure_cost()  # 0 when no offer was called; None when a failed attempt may be billed
        if billed is not None:
            entry["cost_reported"] = billed
        entry["latency_ms"] = result.latency_ms
        entry["decision_trace"] = result.trace or None
        raise _NodeFailure(kind, result.error_message or "", retry_after_s=result.retry_after_s)
    cost = _route_cost(result)
    entry.update(
        provider=chosen.provider,
        served_model_id=getattr(response, "served_model_id", None) or getattr(response, "model", None)
        or chosen.model,
        price_in=chosen.price_in, price_out=chosen.price_out,
        raw_price_in=chosen.price_in, raw_price_out=chosen.price_out, price_multiplier=1,
        tokens_in=response.tokens_in, tokens_out=response.tokens_out,
        tokens_cached=getattr(response, "tokens_cached", None),
        cost_reported=cost, latency_ms=result.latency_ms, decision_trace=result.trace or None,
    )
    if not result.failed_cost_known:  # the answer's own figures leave out a failed attempt's unknown bill
        entry["failed_cost_known"] = False
    return response
