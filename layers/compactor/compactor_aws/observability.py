"""What one call did and cost, told three ways: EMF metrics, a billing log record and X-Ray subsegments.

Everything comes from the :class:`~compactor.call_record.CallRecord` the core returned (plus a few facts
about the HTTP request), never from the response body: the core stays free of AWS and of observability
concerns, and these adapters never re-derive what the core already knows. Nothing here reads or writes
transcript text, prompts, summaries or keys: only counts, sizes, ids, provider and model names.

One entry point per handler: :func:`record_call`. It never raises (a failure to observe must not fail the
request) and imports nothing heavy: Powertools (and the X-Ray SDK where tracing is on) are already loaded
by the handler. :func:`new_tracer` is the handlers' Powertools tracer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import asdict, replace
from typing import Any

from aws_lambda_powertools import Tracer  # the X-Ray SDK stays lazy until a tracer is enabled
from aws_lambda_powertools.tracing.base import BaseProvider, BaseSegment

from compactor.call_record import FLOW_MODE, CallRecord, NodeOutcome
from compactor.records import record

BILLING_RECORD_TYPE = "billing"
"""``record_type`` of the billing log line (filter on it in CloudWatch Logs Insights)."""
BILLING_VERSION = 1
"""Bumped whenever a billing field changes meaning or disappears (fields are only ever added otherwise)."""

FLOW_SUBSEGMENT = "compactor flow"
XRAY_NAMESPACE = "compactor"

_watcher: ContextVar[Callable[[CallRecord], None] | None] = ContextVar("compactor_call_watcher", default=None)


@record(frozen=True)
class CallSummary:
    """The countable facts of one call; :meth:`billing_record` is what the meter reads."""

    route: str
    mode: str  # a compaction mode (seal, decision, mask…) | flow | none
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
    time: str | None = None  # UTC, ISO 8601: when the call was observed, its ledger entry's time (docs/billing.md)
    # cache prices the catalog did not state (docs/billing.md); None: unknown (an entry's line, write_entry_line)
    default_cache_prices: tuple[str, ...] | None = ()
    billed: bool = False  # this line's figures are a ledger entry's: summing billed lines gives the ledger's totals

    @property
    def billable(self) -> bool:
        """A 2xx: billed once its answer or result is delivered (docs/billing.md); its line waits for that."""
        return 200 <= self.status < 300

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


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def summarize(record: CallRecord, *, request_id: str | None = None, api_key_id: str | None = None,
              request_bytes: int | None = None, response_bytes: int | None = None,
              time: str | None = None) -> CallSummary:
    """The :class:`CallSummary` of a core record and what the front door knows. A flow's bytes in and
    out are the HTTP request and response bodies. ``time``: when the call was observed (:func:`record_call`'s now)."""
    flow = record.mode == FLOW_MODE
    return CallSummary(
        route=record.route, mode=record.mode, status=int(record.status), request_id=request_id,
        api_key_id=api_key_id, request_bytes=request_bytes, response_bytes=response_bytes,
        bytes_in=request_bytes if flow else record.bytes_in, bytes_out=response_bytes if flow else record.bytes_out,
        bytes_saved=None if flow else record.bytes_saved, target_met=record.target_met,
        model_calls=record.model_calls, fallbacks=len(record.fallbacks), tokens_in=record.tokens_in,
        tokens_out=record.tokens_out, cost_usd=record.cost_usd, flow_fingerprint=record.flow_fingerprint,
        time=time, default_cache_prices=record.default_cache_prices,
    )


def api_request_details(event: Mapping[str, Any]) -> dict[str, Any]:
    """``request_id``, ``api_key_id`` and ``request_bytes`` of an API Gateway REST proxy event. The caller is
    :func:`compactor.caller.caller_of`'s, the one the ledger bills (docs/billing.md): it used to be the API key id
    only, so a call billed to the authorizer's principal or to ``anonymous`` logged ``api_key_id: null``."""
    from compactor.caller import caller_of
    from compactor.http_api import event_body_size

    context = event.get("requestContext") if isinstance(event.get("requestContext"), Mapping) else {}
    return {
        "request_id": context.get("requestId") if isinstance(context.get("requestId"), str) else None,
        "api_key_id": caller_of(event),
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


def node_schedule(nodes: Sequence[NodeOutcome], started_at: float, ended_at: float) -> list[tuple[float, float]]:
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
        start = max((ended.get(name, started_at) for name in node.inputs), default=started_at)
        latency = _number(node.latency_ms)
        end = min(start + (latency or 0.0) / 1000.0, ended_at)
        start = min(start, end)
        ended[node.node] = end
        spans.append((start, end))
    return spans


FLAGGED_OUTCOMES = {"error": "add_fault_flag", "fallback": "add_error_flag"}
"""The X-Ray flag of a node subsegment by outcome (docs/deploy.md): a node that failed is a fault, one that fell
back to its fallback value an error, so the console's error and fault views and ``fault = true`` find them."""


def _annotate_node(subsegment: Any, node: NodeOutcome) -> None:
    flag = FLAGGED_OUTCOMES.get(node.outcome)
    if flag is not None:
        getattr(subsegment, flag)()
    subsegment.put_annotation("node", node.node)
    subsegment.put_annotation("kind", node.kind)
    subsegment.put_annotation("provider", str(node.provider or "none"))
    subsegment.put_annotation("outcome", node.outcome)
    if node.error_kind:
        subsegment.put_annotation("error_kind", node.error_kind)
    metadata = {key: node.trace.get(key) for key in ("served_model_id", "cost_reported", "tokens_in", "tokens_out",
                                                      "tokens_cached", "latency_ms", "inputs") if key in node.trace}
    metadata["timing"] = "latency" if _number(node.latency_ms) is not None else "instant"
    subsegment.put_metadata("flow_node", metadata, XRAY_NAMESPACE)


def trace_flow_nodes(tracer: Any, summary: CallSummary, nodes: Sequence[NodeOutcome], *, started_at: float,
                     ended_at: float) -> int:
    """A ``compactor flow`` subsegment with one child per flow node, under the current (handler) entity.

    A no-op (returns 0) when the tracer is disabled (outside Lambda, ``POWERTOOLS_TRACE_DISABLED``,
    SAM local) or there is no segment to attach to. Returns the number of node subsegments written.
    """
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
            subsegment = recorder.begin_subsegment(f"{node.node} {node.kind}")
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


def record_call(record: CallRecord, *, logger: Any, metrics: Any, tracer: Any, request_id: str | None = None,
                api_key_id: str | None = None, request_bytes: int | None = None, response_bytes: int | None = None,
                started_at: float | None = None, ended_at: float | None = None,
                settle_later: bool = False) -> CallSummary | None:
    """Metrics, billing record and X-Ray node subsegments for one call; the one helper each handler calls.

    ``settle_later``: a 2xx call's billing line is not written here but by :func:`write_settled_line`, once the front
    door knows whether the call is billed (its answer stored, its result kept, its ledger entry written: the line's
    ``billed``); a call that is not a 2xx is billed nothing, and its line (``billed: false``) is written here.

    ``metrics`` supplies the namespace and service (its own metric set is not touched); ``started_at`` /
    ``ended_at`` (``time.time()`` around the core call) place the flow in the trace. Never raises: a
    failure is logged by exception type only and the call's answer stands. The summary is returned
    whenever it could be derived, even when writing the metrics, log line or trace failed: the ledger
    entry is made from it (``compactor_aws.billing.facts_of``), and a call delivered must be billed
    (docs/billing.md); it used to be None after any such failure, and the call went unbilled.
    """
    from compactor.billing import utc_now_iso

    try:  # its time, UTC, is the ledger entry's, so the line and the entry name one day (docs/billing.md)
        summary = summarize(record, request_id=request_id, api_key_id=api_key_id, request_bytes=request_bytes,
                            response_bytes=response_bytes, time=utc_now_iso())
    except Exception as error:  # noqa: BLE001 - observing must never fail the call
        _observing_failed(logger, error, record, request_id)
        return None
    try:
        if not (settle_later and summary.billable):
            write_billing_record(logger, summary)
        emit_metrics(summary, namespace=getattr(metrics, "namespace", None),
                     service=getattr(metrics, "service", None) or getattr(logger, "service", None))
        if started_at is not None:
            trace_flow_nodes(tracer, summary, record.nodes, started_at=started_at,
                             ended_at=ended_at if ended_at is not None else time.time())
        watcher = _watcher.get()
        if watcher is not None:
            watcher(record)
    except Exception as error:  # noqa: BLE001 - observing must never fail the call
        _observing_failed(logger, error, record, request_id)
    return summary


def write_settled_line(logger: Any, summary: CallSummary | None, billed: bool) -> None:
    """The billing line of a 2xx call observed with ``settle_later``, once its billing is settled: ``billed`` when its
    ledger entry is written (by this invocation, or found written), else not (its answer could not be stored, so it
    was not delivered; a newer version's result was kept; its ledger write failed). Never raises; nothing for a call
    whose line was written when it was observed."""
    if summary is None or not summary.billable:
        return
    try:
        write_billing_record(logger, replace(summary, billed=billed))
    except Exception as error:  # noqa: BLE001 - observing must never fail the call
        logger.warning("observability failed: %s", type(error).__name__,
                       extra={"record_type": "observability_error", "route": summary.route,
                              "request_id": summary.request_id})


def write_entry_line(logger: Any, entry: Any, status: int = 200) -> None:
    """The billing line of a ledger ``entry`` (``compactor.billing.LedgerEntry``) written by another invocation than
    the one that computed its call (a keyed request's replay, a Lambda retry's, a retried windowed step, the S3
    on-failure destination, a retry that finds an earlier attempt's result): ``billed: true``, the entry's figures and
    time, the fields the entry does not keep null (``default_cache_prices`` too: unknown here, where ``[]`` would say
    every price was stated), so that the billed lines sum to the ledger (docs/billing.md). The
    computation's own line said ``billed: false``, or was never written (a process that died). Never raises."""
    try:
        summary = CallSummary(route=entry.route, mode=entry.mode, status=status, request_id=entry.request_id,
                              api_key_id=entry.api_key_id, bytes_in=entry.bytes_in, bytes_out=entry.bytes_out,
                              bytes_saved=entry.bytes_saved, model_calls=entry.model_calls, fallbacks=0,
                              cost_usd=entry.cost_usd, time=entry.time, default_cache_prices=None, billed=True)
        write_billing_record(logger, summary)
    except Exception as error:  # noqa: BLE001 - observing must never fail the call
        logger.warning("observability failed: %s", type(error).__name__,
                       extra={"record_type": "observability_error", "route": getattr(entry, "route", None),
                              "request_id": getattr(entry, "request_id", None)})


def _observing_failed(logger: Any, error: Exception, record: CallRecord, request_id: str | None) -> None:
    logger.warning("observability failed: %s", type(error).__name__,
                   extra={"record_type": "observability_error", "route": record.route, "request_id": request_id})


@contextmanager
def watching_calls(watcher: Callable[[CallRecord], None]) -> Iterator[None]:
    """Also hand every record :func:`record_call` observes in this context to ``watcher``: how local
    tooling that runs a handler in-process (``compactor serve``) reads the records of its calls."""
    token = _watcher.set(watcher)
    try:
        yield
    finally:
        _watcher.reset(token)


def record_request(metrics: Any, status: int) -> None:
    """The handler's per-request counters: ``Requests``, ``ClientErrors``, ``ServerErrors``."""
    from aws_lambda_powertools.metrics import MetricUnit

    metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="ClientErrors", unit=MetricUnit.Count, value=int(400 <= status < 500))
    metrics.add_metric(name="ServerErrors", unit=MetricUnit.Count, value=int(status >= 500))


ERRORED = "errored"
"""The outcome of an S3 job attempt that raised (Lambda retries it): no result and no failure was written."""
S3_OBJECT_METRICS = {"compacted": "S3ObjectsCompacted", "failed": "S3ObjectsFailed", "skipped": "S3ObjectsSkipped",
                     "started": "S3WindowedJobsStarted", ERRORED: "S3ObjectsErrored"}
"""The per-object counter of each S3 job outcome (docs/deploy.md): counted by ``S3CompactFunction`` for the objects it
compacts (``errored`` once per attempt that raised), and by ``WindowJobFunction`` for a windowed job's outcome (its
start is counted by the first)."""


def record_s3_object(metrics: Any, result: str) -> None:
    """Count one S3 object's outcome (:data:`S3_OBJECT_METRICS`) in ``metrics``' set."""
    from aws_lambda_powertools.metrics import MetricUnit

    metrics.add_metric(name=S3_OBJECT_METRICS[result], unit=MetricUnit.Count, value=1)


@contextmanager
def counting_errored(metrics: Any, tracer: Any) -> Iterator[None]:
    """An S3 job attempt that raises (a crash, a server error, a failed store or ledger write: Lambda retries it) is
    counted as its outcome, :data:`ERRORED` (metric and ``s3_result`` annotation), as every other attempt's outcome
    is, then raised. It used to be counted nowhere (docs/deploy.md)."""
    try:
        yield
    except Exception:
        tracer.put_annotation("s3_result", ERRORED)
        record_s3_object(metrics, ERRORED)
        raise


# ----------------------------------------------------------------------------------------------- tracer

class _Untraced(BaseSegment):
    """The segment of a tracer that traces nothing."""

    def close(self, end_time: int | None = None) -> None: ...
    def add_subsegment(self, subsegment: Any) -> None: ...
    def remove_subsegment(self, subsegment: Any) -> None: ...
    def put_annotation(self, key: str, value: Any) -> None: ...
    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None: ...
    def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None: ...


class _NoTracing(BaseProvider):
    """A Powertools tracing provider that traces nothing (and imports nothing)."""

    @contextmanager
    def in_subsegment(self, name: Any = None, **kwargs: Any) -> Iterator[BaseSegment]:
        yield _Untraced()

    @asynccontextmanager
    async def in_subsegment_async(self, name: Any = None, **kwargs: Any) -> AsyncIterator[BaseSegment]:
        yield _Untraced()

    def put_annotation(self, key: str, value: Any) -> None: ...
    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None: ...
    def patch(self, modules: Any) -> None: ...
    def patch_all(self) -> None: ...


# What the tracer patches: botocore (AWS, Bedrock included). Powertools would otherwise patch every library the X-Ray
# SDK knows, importing each one installed (docs/performance.md). Not httpx, the model providers' client: the SDK keeps
# a Lambda invocation's open subsegments in one stack per thread, and a request's model calls run concurrently on one
# event loop, so its httpx patch ended one call's subsegment under another's and most calls of a sampled invocation
# failed with ``AlreadyEndedException`` (their batches kept as they were). Each model call is traced by its flow
# node's subsegment instead, written after the flow from the call record (:func:`trace_flow_nodes`; docs/deploy.md).
TRACED_LIBRARIES = ("botocore",)


def new_tracer() -> Tracer:
    """The Powertools tracer of a handler. Where Powertools finds tracing off (outside Lambda, SAM local,
    ``POWERTOOLS_TRACE_DISABLED``) it is a disabled tracer whose provider does nothing, so the X-Ray SDK is
    never imported: importing it builds two botocore X-Ray clients for its sampler (docs/performance.md).
    Where it is on, it patches :data:`TRACED_LIBRARIES` only."""
    if not Tracer._is_tracer_disabled():  # Powertools' own rule, so that both agree
        return Tracer(patch_modules=TRACED_LIBRARIES)
    return Tracer(disabled=True, auto_patch=False, provider=_NoTracing())
