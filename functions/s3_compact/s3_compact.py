"""Lambda handler of ``S3CompactFunction``: compacts transcripts uploaded under ``incoming/`` (docs/behaviour.md#the-s3-path).

Each record of the S3 event becomes one ``compactor.object_jobs.run_job``: the result goes to
``compacted/<rel>``, bad content to ``failed/<rel>`` (recorded once), and only storage or configuration
errors raise, so Lambda's asynchronous retries and the on-failure destination take over. Keys arrive
URL-encoded in S3 events and are decoded here. Transcripts are never logged.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.data_classes import S3Event, event_source
from aws_lambda_powertools.utilities.data_classes.s3_event import S3EventRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import container, jobs, object_jobs
from compactor_aws import logs, observability, snapstart, windowed_jobs
from compactor_aws.s3_events import source_of
from compactor_aws.s3_store import S3Store

logger = logs.new_logger()  # the layer's module loggers write through it
snapstart.register()  # warm the core before a SnapStart snapshot (docs/performance.md)
tracer = observability.new_tracer()  # no X-Ray SDK where tracing is off
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Compactor"),
                  service=logger.service)  # dimension service, also where POWERTOOLS_SERVICE_NAME is unset
store = S3Store()


def observer(request_id: str | None, api_key_id: str, billed: list[Any]) -> object_jobs.Observer:
    """Metrics, billing record (naming ``api_key_id``, who is billed) and flow-node subsegments of each
    compaction run (never raises); the run's observed summary is appended to ``billed``."""
    def observe(record: Any, started_at: float, ended_at: float) -> None:
        billed.append(observability.record_call(record, logger=logger, metrics=metrics, tracer=tracer,
                                                request_id=request_id, api_key_id=api_key_id,
                                                started_at=started_at, ended_at=ended_at))
    return observe


def run_job(source: object_jobs.Source, rel: str | None, defaults: object_jobs.Defaults,
            context: LambdaContext) -> dict[str, Any]:
    """The object's job under the Lambda's remaining time (docs/behaviour.md#configuration flow budget), once per
    object version, billed once after its result is stored (docs/billing.md)."""
    from compactor import service
    from compactor.container import run_sync
    from compactor_aws import billing

    caller = jobs.upload_caller(store, source.bucket, rel) if rel else None  # an API upload's key
    request_id = getattr(context, "aws_request_id", None)
    billed_to = billing.billed_caller(source, caller)  # also the caller the job runs as, its windows too

    def job() -> tuple[dict[str, Any], dict[str, Any] | None]:
        billed: list[Any] = []
        launch = windowed_jobs.launcher(caller=billed_to)  # large objects: a windowed job (docs/scale.md)
        done = run_sync(object_jobs.run_job(
            source, store=store, defaults=defaults, deadline=service.request_deadline(context),
            windows_until=service.windows_deadline(context), observe=observer(request_id, billed_to, billed),
            launch=launch, max_bytes=windowed_jobs.inline_max_bytes() if launch else None))
        facts = billing.facts_of(billed[0]) if billed and object_jobs.delivered(done) else None
        return done.as_dict(), facts

    return billing.run_object_job(source, job, context, caller, prepare=lambda: object_jobs.prepare(defaults))


def object_outcome(record: S3EventRecord, source: object_jobs.Source, defaults: object_jobs.Defaults,
                   context: LambdaContext) -> dict[str, Any]:
    if not record.event_name.startswith("ObjectCreated:"):
        return object_jobs.Outcome("skipped", source, reason=f"event {record.event_name}").as_dict()
    rel = object_jobs.relative_key(source.key)
    if rel:  # read while the idempotency record is written (docs/performance.md#where-the-time-goes)
        store.prefetch(source.bucket, source.key, version_id=source.version_id)
    try:
        return run_job(source, rel, defaults, context)
    finally:
        store.discard()  # the object if the job did not read it (a redelivered event)


@tracer.capture_method(capture_response=False)
@observability.counting_errored(metrics, tracer)  # an attempt that raises is counted too
def process(record: S3EventRecord, defaults: object_jobs.Defaults, context: LambdaContext) -> dict[str, Any]:
    """One record: its object's job (:func:`run_job`), logged and counted. Every line written meanwhile (the
    billing record included) names the object: ``bucket``, ``key``, ``version_id``."""
    source = source_of(record)
    with logs.naming(logger, bucket=source.bucket, key=source.key, version_id=source.version_id):
        outcome = object_outcome(record, source, defaults, context)
        tracer.put_annotation("s3_result", outcome["result"])
        logger.info("s3 object %s", outcome["result"], extra={
            "target": outcome["key"], "status": outcome["status"], "reason": outcome.get("reason"),
            "already_compacted": outcome.get("already_compacted")})
    observability.record_s3_object(metrics, outcome["result"])
    return outcome


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
@event_source(data_class=S3Event)
def handler(event: S3Event, context: LambdaContext) -> dict[str, Any]:
    """Process every record; a configuration error fails the whole invocation before any read."""
    defaults = object_jobs.load_defaults(os.environ.get(object_jobs.DEFAULTS_ENV))
    if "Records" not in event.raw_event:  # S3's s3:TestEvent when notifications are set up: nothing to process
        logger.info("s3 event without records", extra={"event": str(event.raw_event.get("Event"))[:64]})
        return {"results": []}
    return {"results": [process(record, defaults, context) for record in event.records]}


container.freeze_init_objects()  # the last line of init: what it loaded is no longer scanned by the collector
