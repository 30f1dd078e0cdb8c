"""``POST /v1/uploads`` and ``GET /v1/jobs/{id}`` (docs/scale.md): large transcripts through a presigned
S3 upload and the S3 path; each route one call into ``compactor.jobs``."""

from __future__ import annotations

import os
from typing import Any, Final

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from compactor.errors import UploadsUnavailable
from compactor.http_api import JSON_CONTENT_TYPE
from compactor.jsonutil import dense_dumps
from compactor_aws.routes.common import route

BUCKET_ENV: Final = "COMPACTOR_JOBS_BUCKET"
router = Router()


def _json(status: int, body: Any) -> Response[str]:
    return Response(status_code=status, content_type=JSON_CONTENT_TYPE, body=dense_dumps(body))


def presign(method: str, key: str, expires_s: int, content_type: str | None) -> str:
    """A presigned URL of the jobs bucket (``put_object`` with its content type, or ``get_object``)."""
    from compactor_aws.s3_store import presign_client

    params: dict[str, Any] = {"Bucket": os.environ[BUCKET_ENV], "Key": key}
    if content_type:
        params["ContentType"] = content_type
    return presign_client().generate_presigned_url(method, Params=params, ExpiresIn=expires_s)


def _ready() -> tuple[str, Any] | Response[str]:
    bucket = os.environ.get(BUCKET_ENV)
    if not bucket:
        return _json(*UploadsUnavailable("uploads are not configured here").answer())
    from compactor_aws.caller import caller_of
    from compactor_aws.s3_store import S3Store

    return bucket, (S3Store(), caller_of(router.current_event.raw_event))


@route(router, "POST", "/uploads")
def create_upload() -> Response[str]:
    from compactor import jobs

    ready = _ready()
    if isinstance(ready, Response):
        return ready
    bucket, (store, caller) = ready
    return _json(*jobs.create_upload(store, bucket, caller, presign))


@route(router, "GET", "/jobs/<job_id>")
def get_job(job_id: str) -> Response[str]:
    from compactor import jobs

    ready = _ready()
    if isinstance(ready, Response):
        return ready
    bucket, (store, caller) = ready
    retention_days = jobs.retention_days(os.environ)  # a job whose data expired answers 410 (docs/deploy.md)
    return _json(*jobs.job_status(store, bucket, caller, job_id, presign, retention_days=retention_days))
