"""Run an admitted flow's independent components on the fan-out state machine (``BatchFanOut=stepfunctions``).

A drop-in for :func:`compactor.flow.run_flow`: the flow is cut at its join
(:func:`compactor.flow.partition.partition_flow`), each component's payload (flow term + the slice of
input it reads) travels in the execution's input when it fits there, else it is written to
``s3://<bucket>/fanout/<run>/<i>.json`` (:func:`map_items`), and one synchronous execution of the Express
state machine runs a Map iteration per component, each invoking ``FlowWorkerFunction``. Besides the
payloads that fit, the execution input holds the keys, the absolute deadline (epoch ms) every worker runs
under (the request's remaining budget, cut to end before each Task's timeout) and that timeout
(:func:`fanout_timing`). Results come back inline in the execution output when small, as S3 objects
otherwise. A component whose worker failed, timed out or never answered is replaced by the run in which
its model calls failed (``on_error`` fallbacks: a batch is kept), and the join runs here, so the answer
is the :class:`~compactor.flow.FlowResult` the inline scheduler would produce.

Flows with no join to cut at, and requests whose budget is already spent, run inline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from compactor.budget import Deadline
from compactor.call_record import tally
from compactor.caller import current_caller
from compactor.flow import AdmittedFlow, FlowResult, run_flow
from compactor.flow.values import MISSING
from compactor.jsonutil import dense_dumps
from compactor.records import record
from compactor_aws import background

if TYPE_CHECKING:  # the partition and the upload threads load with the first fan-out, not with the
    # API function's routes, which import this module to learn that fan-out is off (docs/performance.md)
    from compactor.flow.partition import Component

logger = logging.getLogger(__name__)

STATE_MACHINE_ENV: Final = "COMPACTOR_STATE_MACHINE_ARN"
BUCKET_ENV: Final = "COMPACTOR_FANOUT_BUCKET"
SCRATCH_PREFIX: Final = "fanout/"
# Timing of one execution (see :func:`fanout_timing`). The caller waits for it at most the remaining
# budget R plus GRACE_S (inside the handler's Lambda safety margin). Every Map iteration's Task must end
# strictly before that, or one late worker keeps the execution running past the wait and every batch
# degrades: the Task timeout is floor(R) - 1 s (at least 1 s), and the workers' deadline ends
# WORKER_STOP_MARGIN_MS before it, so a worker using its whole budget still answers (with fallbacks).
# Lambda service errors (throttling, ...) are retried once, RETRY_WAIT_S later, only when the Task timeout
# can give that wait up and keep at least RETRY_MIN_TIMEOUT_S: timeout + RETRY_WAIT_S stays floor(R) - 1,
# the rejected attempt (answered before the worker runs) fits in the >= 1 s + GRACE_S left. Otherwise the
# execution input says retry=false and the Map runs the Task without Retry.
GRACE_S: Final = 1.0
RETRY_WAIT_S: Final = 1
RETRY_MIN_TIMEOUT_S: Final = 5
WORKER_STOP_MARGIN_MS: Final = 500
UPLOAD_THREADS: Final = 16
# Step Functions takes at most 256 KiB of execution input. The payloads carried in it (as JSON strings) stay
# within this part of it; the rest holds the keys, the timing and the JSON around them
# (docs/deploy.md#batch-fan-out-through-step-functions).
INLINE_PAYLOADS_MAX_BYTES: Final = 192 * 1024


@record(frozen=True)
class FanOutTiming:
    """How long the caller waits, each Task's timeout, the workers' budget and whether Lambda service
    errors are retried, for ``remaining_ms`` of budget left. Always ``timeout_s (+ RETRY_WAIT_S when
    retry) < wait_s`` and ``worker_budget_ms < timeout_s * 1000``."""

    wait_s: float
    timeout_s: int
    worker_budget_ms: int
    retry: bool


def fanout_timing(remaining_ms: int) -> FanOutTiming:
    whole_s = max(0, remaining_ms) // 1000
    retry = whole_s - 1 - RETRY_WAIT_S >= RETRY_MIN_TIMEOUT_S
    timeout_s = whole_s - 1 - RETRY_WAIT_S if retry else max(1, whole_s - 1)
    worker_budget_ms = max(0, min(remaining_ms, timeout_s * 1000 - WORKER_STOP_MARGIN_MS))
    return FanOutTiming(wait_s=max(0, remaining_ms) / 1000 + GRACE_S, timeout_s=timeout_s,
                        worker_budget_ms=worker_budget_ms, retry=retry)


class StepFunctionsFlowRunner:
    """``await runner(admitted, flow_input, router=…, deadline=…, on_event=…)`` like ``run_flow``."""

    def __init__(self, state_machine_arn: str, bucket: str, *, stepfunctions: Any = None, s3: Any = None,
                 prefix: str = SCRATCH_PREFIX, run_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self.state_machine_arn = state_machine_arn
        self.bucket = bucket
        self.prefix = prefix
        self.run_id = run_id
        self._stepfunctions = stepfunctions
        self._s3 = s3

    @property
    def stepfunctions(self) -> Any:
        if self._stepfunctions is None:
            from botocore.config import Config

            from compactor_aws import aws_session

            # One attempt: a retried StartSyncExecution would run (and bill) every batch twice.
            config = Config(read_timeout=900, retries={"total_max_attempts": 1})
            self._stepfunctions = aws_session.client("stepfunctions", config=config)
        return self._stepfunctions

    @property
    def s3(self) -> Any:
        """The injected client, else the container's one S3 client (looked up each time: a SnapStart
        restore replaces it)."""
        if self._s3 is not None:
            return self._s3
        from compactor_aws.s3_store import s3_client

        return s3_client()

    async def __call__(self, admitted: AdmittedFlow, flow_input: Any = MISSING, *, router: Any, deadline: Deadline,
                       on_event: Callable[[dict[str, Any]], None] | None = None,
                       conversation: Sequence[Mapping[str, Any]] = ()) -> FlowResult:
        from compactor.flow.partition import merge_results, partition_flow, start_value

        partition = partition_flow(admitted, router.admit_policy) if not deadline.expired else None
        if partition is None:
            return await run_flow(admitted, flow_input, router=router, deadline=deadline, on_event=on_event,
                                  conversation=conversation)
        counted = tally()
        if counted is not None:  # the workers' calls are in no tally of this call: a crash's cost is unknown
            counted.elsewhere = True
        value = start_value(flow_input, conversation)
        components = partition.components
        run = f"{self.prefix}{self.run_id()}/"
        # The workers' routers keep this caller's provider faults to this caller, as this one does (docs/reliability.md).
        caller = current_caller.get()
        items, uploads = map_items([dense_dumps(with_caller(c.payload(value, conversation), caller))
                                    for c in components], run)
        for component in components:
            _emit_started(on_event, component)
        try:
            outputs = await asyncio.wait_for(asyncio.to_thread(self._upload_and_execute, uploads, items, run,
                                                               deadline),
                                             fanout_timing(deadline.remaining_ms()).wait_s)
        except Exception as exc:  # unreachable service, failed/timed-out execution: every component degrades
            logger.warning("batch fan-out failed (%s): every component degrades", type(exc).__name__)
            outputs = [{"status": "failed", "error": f"fan-out: {type(exc).__name__}"}] * len(components)
        # Together: a large result is a read from S3 on a call thread, and awaited one by one, each read waited
        # for the one before it.
        results = await asyncio.gather(*(self._result(component, item, value, conversation)
                                         for component, item in zip(components, outputs, strict=True)))
        for component, result in zip(components, results, strict=True):
            _emit_finished(on_event, component, result)
        return await merge_results(partition, results, router=router, deadline=deadline, on_event=on_event)

    def _upload_and_execute(self, uploads: Mapping[str, str], items: list[dict[str, Any]], run: str,
                            deadline: Deadline) -> list[Any]:
        if uploads:  # none when every payload travels in the execution's input
            self._upload(uploads)
        return self._execute(items, run, deadline)

    def _upload(self, payloads: Mapping[str, str]) -> None:
        from compactor.side_by_side import each_side_by_side

        def put(item: tuple[str, str]) -> None:
            self.s3.put_object(Bucket=self.bucket, Key=item[0], Body=item[1].encode("utf-8"),
                               ContentType="application/json")

        each_side_by_side(put, payloads.items(), at_once=UPLOAD_THREADS)

    def _execute(self, items: list[dict[str, Any]], run: str, deadline: Deadline) -> list[Any]:
        # Measured after the upload: never longer than what the caller's wait was sized from.
        timing = fanout_timing(deadline.remaining_ms())
        execution_input = {
            "bucket": self.bucket,
            "deadline_epoch_ms": int(time.time() * 1000) + timing.worker_budget_ms,
            "timeout_s": timing.timeout_s,
            "retry": timing.retry,
            "items": items,
        }
        response = self.stepfunctions.start_sync_execution(
            stateMachineArn=self.state_machine_arn, name=run.rstrip("/").rsplit("/", 1)[-1],
            input=json.dumps(execution_input, separators=(",", ":")))
        if response.get("status") != "SUCCEEDED":
            raise RuntimeError(f"execution {response.get('status')}: {response.get('error')}")
        outputs = json.loads(response["output"])
        if not isinstance(outputs, list) or len(outputs) != len(items):
            raise RuntimeError("execution output is not one result per component")
        return outputs

    async def _result(self, component: Component, item: Any, value: Any,
                      conversation: Sequence[Mapping[str, Any]]) -> FlowResult:
        """The component's result from its Map item, or the unavailable run when there is none."""
        from compactor.flow.partition import unavailable_result
        from compactor.flow.result import result_from_json

        reason = "worker failed"
        try:
            if isinstance(item, dict) and item.get("status") == "done":
                data = item.get("result")
                if data is None:
                    data = await background.in_thread(self._read, item["result_key"])
                result = result_from_json(data)
                if result.fingerprint == component.admitted.fingerprint:
                    return result
                reason = "worker ran another flow"
            elif isinstance(item, dict) and isinstance(item.get("error"), str):
                reason = f"worker failed: {item['error'][:200]}"
        except Exception as exc:  # unreadable or malformed result
            reason = f"worker result unreadable: {type(exc).__name__}"
        logger.warning("fan-out component %d degraded: %s", component.index, reason)
        return await unavailable_result(component, value, reason, conversation=conversation)

    def _read(self, key: str) -> Any:
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return json.loads(body)


def with_caller(payload: dict[str, Any], caller: str | None) -> dict[str, Any]:
    """A worker's ``payload`` naming whose request it runs (``"caller"``, none outside the API)."""
    return payload if caller is None else {**payload, "caller": caller}


def map_items(payloads: Sequence[str], run: str,
              budget: int | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The Map's items for the components' ``payloads`` (JSON texts, in component order) of the execution
    ``run`` (the key prefix ``<prefix><id>/``), and the payloads to upload first, by key.

    Each item is ``{"key", "payload", "result_key"}``: a payload that fits travels in the item as its JSON
    text and ``key`` is ``None``; the others are written to ``<run><i>.json`` and ``payload`` is ``None``.
    The smallest payloads go inline first, as many as fit in ``budget`` bytes (by default
    :data:`INLINE_PAYLOADS_MAX_BYTES`) of the execution's input, each counted as the JSON string the input
    holds: a request whose components all fit never touches S3 for them, and a large one still carries what
    it can. Each component carried spares a write here and a read, with its S3 client, in its worker; a
    request that uploads any still waits for its uploads and for the largest batches' reads, which are the ones
    left in S3 (docs/deploy.md#batch-fan-out-through-step-functions)."""
    budget = INLINE_PAYLOADS_MAX_BYTES if budget is None else budget
    sizes = [len(json.dumps(text)) for text in payloads]
    inline: set[int] = set()
    used = 0
    for index in sorted(range(len(payloads)), key=sizes.__getitem__):
        if used + sizes[index] > budget:
            break
        inline.add(index)
        used += sizes[index]
    items: list[dict[str, Any]] = []
    uploads: dict[str, str] = {}
    for index, text in enumerate(payloads):
        key = None if index in inline else f"{run}{index}.json"
        if key is not None:
            uploads[key] = text
        items.append({"key": key, "payload": text if key is None else None,
                      "result_key": f"{run}{index}.result.json"})
    return items, uploads


def _emit_started(on_event: Callable[[dict[str, Any]], None] | None, component: Component) -> None:
    if on_event is None:
        return
    for node in component.admitted.nodes:
        if node.cid in component.to_whole:
            on_event({"event": "node_started", "node": component.to_whole[node.cid], "label": node.label,
                      "kind": node.kind})


def _emit_finished(on_event: Callable[[dict[str, Any]], None] | None, component: Component,
                   result: FlowResult) -> None:
    if on_event is None:
        return
    labels = {node.cid: node.label for node in component.admitted.nodes}
    for entry in result.flow_nodes:
        status = ("fallback" if entry.get("fallback") else "skipped" if entry.get("skipped")
                  else "failed" if entry.get("error") else "ok")
        event = {"event": "node_finished", "node": component.to_whole[entry["node"]],
                 "label": labels[entry["node"]], "kind": entry["kind"], "outcome": status}
        if entry.get("error"):
            event["error"] = entry["error"]
        on_event(event)


_configured: dict[tuple[str, str], StepFunctionsFlowRunner] = {}


def configured_runner(env: Mapping[str, str] | None = None) -> StepFunctionsFlowRunner | None:
    """:func:`runner_from_env`, one runner (and its boto3 clients) per container and configuration."""
    runner = runner_from_env(env)
    if runner is None:
        return None
    return _configured.setdefault((runner.state_machine_arn, runner.bucket), runner)


def runner_from_env(env: Mapping[str, str] | None = None) -> StepFunctionsFlowRunner | None:
    """The runner when ``COMPACTOR_BATCH_FANOUT=stepfunctions`` and the state machine and bucket are
    configured, else ``None`` (inline)."""
    source = os.environ if env is None else env
    if source.get("COMPACTOR_BATCH_FANOUT", "inline") != "stepfunctions":
        return None
    arn, bucket = source.get(STATE_MACHINE_ENV), source.get(BUCKET_ENV)
    if not arn or not bucket:
        return None
    if not arn.startswith("arn:"):  # e.g. `compactor invoke`, where resources resolve to logical ids
        logger.warning("%s is not an ARN (%s); running the batches inline", STATE_MACHINE_ENV, arn)
        return None
    return StepFunctionsFlowRunner(arn, bucket)
