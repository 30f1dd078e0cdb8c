"""Lambda handler of ``WindowJobFunction``: every step of ``WindowedJobStateMachine`` (docs/scale.md).

Events (from ``infra/statemachine/windowed_job.asl.json``, and EventBridge):

* ``{"step": "plan", "job": {...}}``: the first pass's windows; ``{"done", "bucket", "windows_key", "caller"}``
  (``caller``: the one the job is billed to, null for a job started before uploads named it);
* ``{"Items": [{"task_key", "result_key"}, ...], "BatchInput": {"bucket", "caller", "execution_id"}}``: one Map batch
  (a window each), compacted in this invocation's remaining time as the job's caller (its provider faults are its own,
  docs/reliability.md), every line naming the execution (``execution_id``, ending in the ``job_id`` steps name);
* ``{"step": "assemble", "job": {...}, "windows_key"}``: the pass's results in order, then the next pass or the result
  (metered and billed once from its call record, as the inline S3 job, docs/billing.md);
* ``{"step": "fail", "job": {...}}``: ``failed/<rel>`` records the failed execution, or a job whose last assemble wrote
  its result before failing (on its billing record) is billed and answered done; the same for EventBridge's event of an
  execution ended failed, timed out or aborted, which RecordFailure may not have run (``windowed_jobs.ended_step``).

Each is one call into ``compactor.large_jobs``; transcripts are never logged.
"""

from __future__ import annotations

import os
from typing import Any

import boto3  # noqa: F401 - third-party first (the S3 store's), then own modules with the collector paused
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.container import collector_paused

# The layer's modules only (docs/performance.md#the-three-rows-above-the-goal-twenty-second-round-issue-11)
with collector_paused():
    from compactor import container, large_jobs, object_jobs
    from compactor.call_record import CallRecord
    from compactor.caller import calling_as
    from compactor_aws import logs, snapstart, windowed_jobs
    from compactor_aws.s3_store import S3Store

logger = logs.new_logger()  # the layer's module loggers write through it
# call metrics and the job's outcome (S3ObjectsCompacted, ...); dimension service even without POWERTOOLS_SERVICE_NAME
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Compactor"), service=logger.service)
store = S3Store()
# Fresh randomness (the router's retry jitter across a Distributed Map's containers) and clients after a restore,
# the core warmed before the snapshot (docs/performance.md#snapstart).
snapstart.register()


def run_batch(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    from compactor import service
    from compactor.container import get_router, run_sync

    bucket, caller = event["BatchInput"]["bucket"], event["BatchInput"].get("caller")  # none: a job started before
    with calling_as(caller):
        for item in event["Items"]:
            run_sync(large_jobs.run_window(store, bucket, item, router=get_router(),
                                           deadline=service.request_deadline(context)))
    logger.info("windows ran", extra={"windows": len(event["Items"])})
    return {"windows": len(event["Items"])}


def bill(job: dict[str, Any], outcome: dict[str, Any], record: CallRecord, context: LambdaContext) -> None:
    """After the job's outcome is stored: its metrics, billing log line and object outcome count, and one ledger entry
    when its result was delivered, to the uploading key (docs/billing.md), once: a retried step replays the record."""
    from compactor_aws import billing, observability
    source, caller = large_jobs.source_of(job), large_jobs.billed_caller(store, job)

    def observe() -> Any:
        summary = observability.record_call(  # its billing line once it is billed, or not (docs/billing.md)
            record, logger=logger, metrics=metrics, tracer=None, request_id=getattr(context, "aws_request_id", None),
            api_key_id=billing.billed_caller(source, caller), settle_later=True)
        count(outcome["result"])
        return summary

    billing.bill_windowed_job(source, observe, caller, context, logger=logger,
                              delivered=outcome["result"] == "compacted")


def count(result: str) -> None:
    """The object's outcome, counted as S3CompactFunction counts the objects it compacts, and published at once."""
    from compactor_aws import observability

    observability.record_s3_object(metrics, result)
    metrics.flush_metrics()


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if "Items" in event:
        with logs.naming(logger, execution_id=event["BatchInput"].get("execution_id")):
            return run_batch(event, context)
    if "detail-type" in event and (event := windowed_jobs.ended_step(event)) is None:
        return {"done": False}  # no job's end to record: another status, or a Map child's execution
    job = event["job"]  # its lines name it; job_id is the execution's name (docs/deploy.md)
    with logs.naming(logger, job_id=job.get("job_id"), bucket=job.get("bucket"), key=job.get("key"),
                     version_id=job.get("version_id")), calling_as(job.get("caller")):
        return run_step(event["step"], job, event, context)


def run_step(step: str, job: dict[str, Any], event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One step of the job; every line it writes (the billing record included) names the job."""
    if step == "plan":
        from compactor.container import get_router

        outcome = large_jobs.plan(store, job, object_jobs.load_defaults(os.environ.get(object_jobs.DEFAULTS_ENV)),
                                  router=get_router())
    elif step == "assemble":
        outcome = large_jobs.assemble(store, job, windows_key=event.get("windows_key"))
    elif step == "fail":  # also bills a job whose result the last assemble wrote before failing
        outcome = large_jobs.fail(store, job, event.get("error"))
    else:
        raise ValueError(f"unknown step {step!r}")
    record, repeated = outcome.pop("record", None), outcome.pop("repeated", False)
    if record is not None:  # the job ran: its result stored or kept from a newer version (as inline jobs), or failed
        bill(job, outcome, record, context)
    logger.info("windowed job step", extra={"step": step, "done": outcome.get("done"), "result": outcome.get("result")})
    if outcome.get("done") and record is None and not repeated:  # a retried step finds its failure: counted once
        count(outcome["result"])
    return outcome


container.freeze_init_objects()  # the last line of init: what it loaded is no longer scanned by the collector
