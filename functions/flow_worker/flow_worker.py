"""Lambda handler of ``FlowWorkerFunction``: runs one flow on one input for the fan-out state machine.

Event (one Map iteration of ``BatchFanOutStateMachine``)::

    {"bucket": str, "item": {"key": str | None, "payload": str | None, "result_key": str},
     "deadline_epoch_ms": int, "execution_id": str}

Every line an invocation writes carries ``execution_id``, the Step Functions execution's id (``$$.Execution.Id``),
so a worker's lines are found from the execution and the execution from a line (docs/deploy.md).

The payload ``{"flow_ir", "flow_input"?, "conversation"?, "caller"?}`` is the item's ``payload`` (its JSON text) when it
fit in the execution's input, else ``s3://bucket/key`` holds it (docs/deploy.md#batch-fan-out-through-step-functions).
The state machine of an earlier deployment passes ``key`` and ``result_key`` beside ``bucket`` instead of an
item: CloudFormation updates this function before it, and both shapes run.
The flow is admitted and run with :func:`compactor.flow.run_flow` under the caller's deadline (never past
this invocation's own remaining time). The answer is ``{"status": "done", "result": <FlowResult as JSON>}``
when small, else the result is written to ``s3://bucket/result_key`` and the answer is
``{"status": "done", "result_key": key}`` (the Map's aggregated output must stay under 256 KB).
Any other failure raises: the state machine catches it and the caller degrades that flow.
Nothing here knows what the flow computes.
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

from aws_lambda_powertools import Logger  # noqa: F401 - third-party first, then own modules with the collector paused

from compactor.container import collector_paused

with collector_paused():  # the layer's modules only (docs/performance.md#the-workers-cold-start-eighth-round-issue-11)
    from compactor.budget import Deadline
    from compactor.caller import calling_as
    from compactor.container import freeze_init_objects, get_router, run_sync
    from compactor.flow import admit_flow, run_flow
    from compactor.flow.result import result_to_json
    from compactor.flow.values import MISSING
    from compactor.jsonutil import dense_dumps
    from compactor_aws import logs, snapstart
# boto3 and the S3 store load on first use: a batch whose payload and result travel in the execution makes no AWS
# call, and its worker never imports boto3 (docs/performance.md#what-a-deployed-function-reads-thirteenth-round-issue-11).

logger = logs.new_logger()  # the layer's module loggers write through it
snapstart.register()  # warm the core before a SnapStart snapshot (docs/performance.md)

# Inline results above this go to S3: 32 Map items x 6 KB keep the execution output under 256 KB.
INLINE_RESULT_MAX_BYTES: Final = 6000
# Kept back from this invocation's remaining time so the answer is written before Lambda stops it.
WORKER_MARGIN_MS: Final = 1000

def worker_deadline(event: dict[str, Any], context: Any) -> Deadline:
    """The caller's absolute deadline, capped by this invocation's own remaining time."""
    budget_ms = int(event["deadline_epoch_ms"]) - int(time.time() * 1000)
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        budget_ms = min(budget_ms, int(context.get_remaining_time_in_millis()) - WORKER_MARGIN_MS)
    return Deadline.after_ms(max(0, budget_ms))


async def run_payload(payload: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
    """Admit and run ``payload``'s flow; the result as JSON."""
    router = get_router()
    flow_input = payload.get("flow_input", MISSING)
    admitted = admit_flow(payload["flow_ir"], admit_policy=router.admit_policy, flow_input=flow_input)
    caller = payload.get("caller")  # whose request: its provider faults are its own (docs/reliability.md)
    with calling_as(caller if isinstance(caller, str) else None):
        result = await run_flow(admitted, flow_input, router=router, deadline=deadline,
                                conversation=payload.get("conversation") or ())
    return result_to_json(result)


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    with logs.naming(logger, execution_id=event.get("execution_id")):  # none from an earlier state machine
        return run_item(event, context)


def run_item(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The answer to one Map iteration's ``event``."""
    deadline = worker_deadline(event, context)
    bucket = event["bucket"]
    item = event.get("item", event)  # an earlier deployment's state machine passes them beside bucket
    payload = item.get("payload")
    if payload is None:  # too large for the execution's input: written to S3 by the caller
        from compactor_aws import background
        from compactor_aws.s3_store import s3_client

        key = item["key"]
        client = s3_client()
        body = background.start(lambda: client.get_object(Bucket=bucket, Key=key)["Body"].read())
        get_router()  # the catalog loads while the payload is read (docs/performance.md#the-workers-payload)
        payload = body.result()
    result = run_sync(run_payload(json.loads(payload), deadline))
    result_key = item["result_key"]
    logger.info("flow ran", extra={"key": item.get("key"), "result_key": result_key, "ok": result["ok"],
                                   "nodes": len(result["flow_nodes"]), "remaining_ms": deadline.remaining_ms()})
    text = dense_dumps(result)
    if len(text.encode("utf-8")) <= INLINE_RESULT_MAX_BYTES:
        return {"status": "done", "result": result}
    from compactor_aws.s3_store import s3_client

    s3_client().put_object(Bucket=bucket, Key=result_key, Body=text.encode("utf-8"),
                           ContentType="application/json")
    return {"status": "done", "result_key": result_key}


freeze_init_objects()  # the last line of init: what it loaded is no longer scanned by the collector
