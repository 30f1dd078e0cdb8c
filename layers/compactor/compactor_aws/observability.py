"""What one call did and cost, told three ways: EMF metrics, a billing log record and X-Ray subsegments.

Everything is derived from the response body the core returned (plus a few facts about the request),
so the core stays free of AWS and of observability concerns:

* legacy (seal) mode: bytes from the messages in and out; one model call when ``x_router`` is present
  (router failover attempts that failed count as fallbacks);
* decision mode: ``compaction.*`` (bytes, target) and ``x_router.decision_trace.flow_nodes``;
* ``/v1/flows``: the flow's nodes; bytes are the HTTP request and response bodies.

Model calls are the ``llm``/``decision`` nodes that were not skipped; fallbacks are the nodes carrying
``fallback`` or ``error``; cost is ``x_router.cost_usd`` when known (a call without any model call costs
0). Nothing here reads or writes transcript text, prompts, summaries or keys: only counts, sizes, ids,
provider and model names.

One entry point per handler: :func:`record_call`. It never raises (a failure to observe must not fail the
request) and imports nothing heavy: Powertools and the X-Ray SDK are already loaded by the handler.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from compactor import billing

BILLING_RECORD_TYPE = "billing"
"""``record_type`` of the billing log line (filter on it in CloudWatch Logs Insights)."""
BILLING_VERSION = 1
"""Bumped whenever a billing field changes meaning or disappears (fields are only ever added otherwise)."""

MODEL_KINDS = billing.MODEL_NODE_KINDS
FLOW_SUBSEGMENT = "compactor flow"
XRAY_NAMESPACE = "compactor"

_KIND_PREFIX = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class CallSummary:
    """The countable facts of one call; :meth:`billing_record` is what the meter reads."""

    route: str
    mode: str  # legacy | decision | flow | none
    status: int
    request_id: str | None = None
    api_key_id: str | None = None
    request_bytes: int | None = None  # HTTP request body
    response_bytes: int | None = None  # HTTP response body
    bytes_in: int | None = None  # messages in (compaction) or request body (flows)
    bytes_out: int | None = None  # messages out (compaction) or response body (flows)
    bytes_saved: int | None = None
    target_met: bool | None = None
    model_calls: int = 0
    fallbacks: int = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = 0.0  # None: a model call's cost is unknown
    flow_fingerprint: str | None = None

    @property
    def cost_known(self) -> bool:
        return self.cost_usd is not None

    def billing_record(self) -> dict[str, Any]:
        """The billing log line's extra keys: ``record_type`` and ``billing`` (ids, sizes, counts, cost).

        The fields are nested so that unknown values stay in the record as ``null`` (Powertools drops
        top-level keys whose value is None). Never content, never keys.
        """
        return {"record_type": BILLING_RECORD_TYPE,
                "billing": {"version": BILLING_VERSION, **asdict(self), "cost_known": self.cost_known}}


# ---------------------------------------------------------------------------------------------- derive


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def flow_nodes(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``x_router.decision_trace.flow_nodes`` of a response body (empty when absent)."""
    nodes = _mapping(_mapping(_mapping(body).get("x_router")).get("decision_trace")).get("flow_nodes")
    return [node for node in nodes if isinstance(node, Mapping)] if isinstance(nodes, list) else []


def node_outcome(node: Mapping[str, Any]) -> str:
    """``ok``, ``skipped``, ``deadline`` (skipped after the shared deadline), ``fallback`` or ``error``."""
    if node.get("skipped"):
        return "deadline" if node.get("error") == "flow_deadline" else "skipped"
    if node.get("fallback"):
        return "fallback"
    if "error" in node:
        return "error"
    return "ok"


def error_kind(node: Mapping[str, Any]) -> str | None:
    """The leading token of a node's error (``timeout``, ``node_exception``…): never the message itself."""
    error = node.get("error")
    if not isinstance(error, str):
        return None if error is None else "unknown"
    match = _KIND_PREFIX.match(error)
    return match.group(0) if match else "unknown"


def _calls_made(trace: Any) -> int:
    """Provider calls a routed call made: its ``attempted`` events (retries and failovers included)."""
    path = _mapping(trace).get("decision_path")
    return sum(1 for step in path if isinstance(step, Mapping) and step.get("event") == "attempted") \
        if isinstance(path, list) else 0


def _node_calls(node: Mapping[str, Any]) -> int:
    """Provider calls of one model node (its routing decision included): the attempts of its trace; a node
    without a trace (a call cut off by a timeout) made one, unless it failed before sending anything."""
    if node.get("skipped"):
        return 0
    routing = _calls_made(_mapping(node.get("routing")).get("decision_trace"))
    if isinstance(node.get("decision_trace"), Mapping):
        return routing + _calls_made(node["decision_trace"])
    nothing_sent = node.get("cost_reported") == 0 and "error" in node
    return routing + (0 if nothing_sent else 1)


def _legacy_fallbacks(x_router: Mapping[str, Any]) -> int:
    path = _mapping(x_router.get("decision_trace")).get("decision_path")
    if not isinstance(path, list):
        return 0
    return sum(1 for step in path if isinstance(step, Mapping) and step.get("error_kind"))


def summarize_call(*, route: str, status: int, body: Any, mode: str | None = None,
                   request_messages: Sequence[Any] | None = None, request_id: str | None = None,
                   api_key_id: str | None = None, request_bytes: int | None = None,
                   response_bytes: int | None = None) -> CallSummary:
    """Derive a :class:`CallSummary` from the core's response ``body`` and what the front door knows.

    ``mode`` defaults to ``decision`` when the body carries ``compaction``, ``legacy`` on route
    ``compact``, ``flow`` on route ``flows`` and ``none`` otherwise. ``request_messages`` (legacy mode)
    gives the bytes in; without it the request body size stands in.
    """
    from compactor.jsonutil import dense_size

    body = _mapping(body)
    compaction = _mapping(body.get("compaction"))
    if mode is None:
        mode = ("decision" if compaction else "legacy" if route == "compact"
                else "flow" if route == "flows" else "none")
    x_router = _mapping(body.get("x_router"))
    nodes = flow_nodes(body)
    usage = _mapping(body.get("usage"))

    bytes_in = bytes_out = bytes_saved = None
    target_met: bool | None = None
    if compaction:
        bytes_in, bytes_out = _count(compaction.get("original_bytes")), _count(compaction.get("output_bytes"))
        met = compaction.get("target_met")
        target_met = met if isinstance(met, bool) else None
    elif mode == "legacy" and isinstance(body.get("messages"), list):
        bytes_in = dense_size(list(request_messages)) if request_messages is not None else request_bytes
        bytes_out = dense_size(body["messages"])
    elif mode == "flow":
        bytes_in, bytes_out = request_bytes, response_bytes
    if compaction or mode == "legacy":
        if bytes_in is not None and bytes_out is not None:
            bytes_saved = bytes_in - bytes_out

    if nodes:
        model_calls = sum(_node_calls(node) for node in nodes if node.get("kind") in MODEL_KINDS)
        fallbacks = sum(1 for node in nodes if node.get("fallback") or "error" in node)
    elif x_router:  # a single routed call (legacy seal): its failed attempts were failovers
        model_calls, fallbacks = _calls_made(x_router.get("decision_trace")), _legacy_fallbacks(x_router)
    else:
        model_calls = fallbacks = 0

    if x_router:
        cost_usd = _number(x_router.get("cost_usd"))
    else:
        cost_usd = 0.0 if model_calls == 0 else None
    fingerprint = compaction.get("flow_fingerprint") or _mapping(x_router.get("decision_trace")).get(
        "flow_fingerprint")
    return CallSummary(
        route=route, mode=mode, status=int(status), request_id=request_id, api_key_id=api_key_id,
        request_bytes=request_bytes, response_bytes=response_bytes, bytes_in=bytes_in, bytes_out=bytes_out,
        bytes_saved=bytes_saved, target_met=target_met, model_calls=model_calls, fallbacks=fallbacks,
        tokens_in=_count(usage.get("prompt_tokens")), tokens_out=_count(usage.get("completion_tokens")),
        cost_usd=cost_usd, flow_fingerprint=fingerprint if isinstance(fingerprint, str) else None,
    )


def api_request_details(event: Mapping[str, Any]) -> dict[str, Any]:
    """``request_id``, ``api_key_id`` and ``request_bytes`` of an API Gateway REST proxy event."""
    from compactor.http_api import event_body_size

    context = _mapping(_mapping(event).get("requestContext"))
    identity = _mapping(context.get("identity"))
    return {
        "request_id": context.get("requestId") if isinstance(context.get("requestId"), str) else None,
        "api_key_id": identity.get("apiKeyId") if isinstance(identity.get("apiKeyId"), str) else None,
        "request_bytes": event_body_size(event),
    }


# ---------------------------------------------------------------------------------------------- emit


def emit_metrics(summary: CallSummary, *, namespace: str | None, service: str | None) -> None:
    """One EMF blob for this call, dimensions ``service``, ``route`` and ``mode`` only.

    A separate (ephemeral) metric set keeps several calls of one invocation (an S3 batch) apart and
    leaves the handler's own request counters untouched.
    """
    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    metrics = EphemeralMetrics(namespace=namespace, service=service)
    metrics.add_dimension(name="route", value=summary.route)
    metrics.add_dimension(name="mode", value=summary.mode)
    metrics.add_metric(name="Calls", unit=MetricUnit.Count, value=1)
    for name, value in (("BytesIn", summary.bytes_in), ("BytesOut", summary.bytes_out),
                        ("BytesSaved", summary.bytes_saved)):
        if value is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Bytes, value=value)
    if summary.target_met is not None:
        metrics.add_metric(name="TargetMet", unit=MetricUnit.Count, value=int(summary.target_met))
    metrics.add_metric(name="ModelCalls", unit=MetricUnit.Count, value=summary.model_calls)
    metrics.add_metric(name="Fallbacks", unit=MetricUnit.Count, value=summary.fallbacks)
    if summary.cost_usd is None:
        metrics.add_metric(name="CostUnknown", unit=MetricUnit.Count, value=1)
    else:
        metrics.add_metric(name="CostUsd", unit=MetricUnit.NoUnit, value=summary.cost_usd)
    metrics.flush_metrics()


def write_billing_record(logger: Any, summary: CallSummary) -> None:
    """One structured log line with ``record_type: billing``.

    Written at INFO; when the function's log level is raised above INFO it is written at that level
    instead, so the meter never depends on the ``LogLevel`` parameter.
    """
    level = getattr(logger, "log_level", logging.INFO)
    emit = (logger.info if level <= logging.INFO else logger.warning if level <= logging.WARNING
            else logger.error if level <= logging.ERROR else logger.critical)
    emit("billing", extra=summary.billing_record())


def node_schedule(nodes: Sequence[Mapping[str, Any]], started_at: float,
                  ended_at: float) -> list[tuple[float, float]]:
    """Estimated ``(start, end)`` epoch seconds of each node.

    The trace records each model node's latency but not when it started, and independent nodes ran
    concurrently. Each node is placed as soon as its inputs finished (the scheduler runs a node the
    moment its inputs are ready) and lasts its ``latency_ms`` (0 for data, skipped and failed nodes),
    clipped to the flow's wall time: an as-soon-as-possible reconstruction, exact for the model
    calls' durations, approximate for their start times.
    """
    ended: dict[str, float] = {}
    spans = []
    for node in nodes:
        inputs = node.get("inputs") if isinstance(node.get("inputs"), list) else []
        start = max((ended.get(str(name), started_at) for name in inputs), default=started_at)
        latency = _number(node.get("latency_ms"))
        end = min(start + (latency or 0.0) / 1000.0, ended_at)
        start = min(start, end)
        ended[str(node.get("node"))] = end
        spans.append((start, end))
    return spans


def _annotate_node(subsegment: Any, node: Mapping[str, Any]) -> None:
    subsegment.put_annotation("node", str(node.get("node")))
    subsegment.put_annotation("kind", str(node.get("kind")))
    subsegment.put_annotation("provider", str(node.get("provider") or "none"))
    subsegment.put_annotation("outcome", node_outcome(node))
    kind = error_kind(node)
    if kind:
        subsegment.put_annotation("error_kind", kind)
    metadata = {key: node.get(key) for key in ("served_model_id", "cost_reported", "tokens_in", "tokens_out",
                                                "tokens_cached", "latency_ms", "inputs") if key in node}
    metadata["timing"] = "latency" if _number(node.get("latency_ms")) is not None else "instant"
    subsegment.put_metadata("flow_node", metadata, XRAY_NAMESPACE)


def trace_flow_nodes(tracer: Any, summary: CallSummary, body: Mapping[str, Any], *, started_at: float,
                     ended_at: float) -> int:
    """A ``compactor flow`` subsegment with one child per flow node, under the current (handler) entity.

    A no-op (returns 0) when the tracer is disabled (outside Lambda, ``POWERTOOLS_TRACE_DISABLED``,
    SAM local) or there is no segment to attach to. Returns the number of node subsegments written.
    """
    nodes = flow_nodes(body)
    if tracer is None or getattr(tracer, "disabled", True) or not nodes:
        return 0
    recorder = tracer.provider
    flow = recorder.begin_subsegment(FLOW_SUBSEGMENT)
    if flow is None:
        return 0
    written = 0
    try:
        flow.start_time = started_at
        flow.put_annotation("route", summary.route)
        flow.put_annotation("mode", summary.mode)
        flow.put_annotation("model_calls", summary.model_calls)
        flow.put_annotation("fallbacks", summary.fallbacks)
        if summary.flow_fingerprint:
            flow.put_annotation("flow_fingerprint", summary.flow_fingerprint)
        flow.put_metadata("call", {"cost_usd": summary.cost_usd, "tokens_in": summary.tokens_in,
                                   "tokens_out": summary.tokens_out, "nodes": len(nodes)}, XRAY_NAMESPACE)
        for node, (start, end) in zip(nodes, node_schedule(nodes, started_at, ended_at)):
            subsegment = recorder.begin_subsegment(f"{node.get('node')} {node.get('kind')}")
            if subsegment is None:
                continue
            try:
                subsegment.start_time = start
                _annotate_node(subsegment, node)
            finally:
                recorder.end_subsegment(end_time=end)
            written += 1
    finally:
        recorder.end_subsegment(end_time=ended_at)
    return written


def record_call(*, route: str, status: int, body: Any, logger: Any, metrics: Any, tracer: Any,
                mode: str | None = None, request_messages: Sequence[Any] | None = None,
                request_id: str | None = None, api_key_id: str | None = None,
                request_bytes: int | None = None, response_bytes: int | None = None,
                started_at: float | None = None, ended_at: float | None = None) -> CallSummary | None:
    """Metrics, billing record and X-Ray node subsegments for one call; the one helper each handler calls.

    ``metrics`` supplies the namespace and service (its own metric set is not touched); ``started_at`` /
    ``ended_at`` (``time.time()`` around the core call) place the flow in the trace. Never raises: a
    failure is logged by exception type only and the call's answer stands.
    """
    try:
        summary = summarize_call(route=route, status=status, body=body, mode=mode,
                                 request_messages=request_messages, request_id=request_id,
                                 api_key_id=api_key_id, request_bytes=request_bytes,
                                 response_bytes=response_bytes)
        write_billing_record(logger, summary)
        emit_metrics(summary, namespace=getattr(metrics, "namespace", None),
                     service=getattr(metrics, "service", None) or getattr(logger, "service", None))
        if started_at is not None:
            trace_flow_nodes(tracer, summary, _mapping(body), started_at=started_at,
                             ended_at=ended_at if ended_at is not None else time.time())
        return summary
    except Exception as error:  # noqa: BLE001 - observing must never fail the call
        logger.warning("observability failed: %s", type(error).__name__,
                       extra={"record_type": "observability_error", "route": route, "request_id": request_id})
        return None


def record_request(metrics: Any, status: int) -> None:
    """The handler's per-request counters: ``Requests``, ``ClientErrors``, ``ServerErrors``."""
    from aws_lambda_powertools.metrics import MetricUnit

    metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="ClientErrors", unit=MetricUnit.Count, value=int(400 <= status < 500))
    metrics.add_metric(name="ServerErrors", unit=MetricUnit.Count, value=int(status >= 500))
