"""Lambda handler of ``S3CompactGaveUpFunction``, ``S3CompactFunction``'s on-failure destination (docs/deploy.md).

Lambda calls it once it gave up on an S3 event (every attempt raised or timed out, or the event grew too old:
no attempt knows it is the last), with its invocation record: the event in ``requestPayload``, the last error in
``responsePayload``. Each object the event created is recorded under ``failed/<rel>``, 500 ``job_failed`` naming
the error's kind (``compactor.object_jobs.record_gave_up``), unless the object version's windowed job runs or ended
done (``compactor_aws.windowed_jobs.owns``, asked only for an object over the inline size: it writes that version's
outcome), so that an API upload's
``GET /v1/jobs/{id}`` answers ``failed`` instead of ``running`` forever (docs/scale.md), and its outcome is counted
(``S3ObjectsFailed``). An object whose result was written (only its billing failed, on every attempt) is billed
once instead, from what the job stored (``compactor_aws.billing.bill_given_up``; docs/billing.md), and counted then
(``S3ObjectsCompacted``).
This function's own destinations pass its invocation record, which holds ``S3CompactFunction``'s, on to the
failure queue: the operator's record.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import object_jobs
from compactor_aws import logs, observability, s3_events, windowed_jobs
from compactor_aws.s3_store import S3Store

logger = logs.new_logger()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Compactor"), service=logger.service)
store = S3Store()


def bill(source: object_jobs.Source, metadata: Mapping[str, str]) -> str | None:
    """Bill the job whose result ``metadata`` belongs to, once (docs/billing.md)."""
    from compactor_aws import billing  # only for a result written: the usual crash loads no billing (cold start)

    def caller() -> str:  # whom a job of a version that kept no caller in its record billed: the job's own caller
        from compactor import jobs

        rel = object_jobs.relative_key(source.key)
        return billing.billed_caller(source, jobs.upload_caller(store, source.bucket, rel) if rel else None)

    return billing.bill_given_up(source, metadata, caller, logger=logger)


def counted(outcome: dict[str, Any]) -> str:
    """The object's outcome as the S3 path counts it: ``failed`` when recorded here, and ``compacted`` when this
    invocation billed the job whose result was written (``"billing": "billed"``): no attempt counted that delivery (each
    raised on its ledger write: ``S3ObjectsErrored``), as the windowed job's step that bills it counts it. It used to be
    ``S3ObjectsSkipped``, and such an object was never counted compacted. Found billed already, it was counted."""
    if outcome.get("billing"):
        from compactor_aws import billing  # loaded by the billing itself

        if outcome["billing"] == billing.BILLED_NOW:
            return "compacted"
    return outcome["result"]


@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
def handler(invocation: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    cause = s3_events.gave_up_cause(invocation)
    results = []
    for source, size in s3_events.given_up(invocation):
        with logs.naming(logger, bucket=source.bucket, key=source.key, version_id=source.version_id):
            windowed = windowed_jobs.owns(source, size=size)  # asks Step Functions only past the inline size
            outcome = object_jobs.record_gave_up(store, source, cause, windowed=windowed,
                                                 bill=partial(bill, source)).as_dict()
            logger.warning("s3 job given up: %s", outcome["result"], extra={
                "cause": cause, "target": outcome["key"], "reason": outcome.get("reason"),
                "billing": outcome.get("billing")})
        observability.record_s3_object(metrics, counted(outcome))  # once per object version
        results.append(outcome)
    return {"cause": cause, "results": results}
