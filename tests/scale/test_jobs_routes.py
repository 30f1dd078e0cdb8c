"""``POST /v1/uploads`` and ``GET /v1/jobs/{id}`` through the API handler, on moto: upload with the
presigned PUT, the S3 path compacts it, the job reports done with a presigned GET of the result."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from moto import mock_aws

from compactor import jobs
from compactor.http_api import rest_proxy_event
from compactor_cli.lambda_runtime import LocalLambdaContext

from s3.conftest import s3_event, transcript

REGION, BUCKET = "us-east-1", "compactor-jobs-test"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COMPACTOR_JOBS_BUCKET", BUCKET)
    monkeypatch.delenv("COMPACTOR_S3_DEFAULTS", raising=False)
    from compactor_aws import s3_store

    with mock_aws():
        import boto3

        s3_store.reset_client()
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client
        s3_store.reset_client()


def call(compact_module: Any, method: str, path: str, key_id: str = "key-a") -> tuple[int, dict[str, Any]]:
    event = rest_proxy_event(method=method, resource_path=path, query={}, headers=[("Content-Type", "application/json")],
                             body=b"")
    event["requestContext"]["identity"]["apiKeyId"] = key_id
    response = compact_module.handler(event, LocalLambdaContext("CompactFunction", timeout_s=60))
    return response["statusCode"], json.loads(response["body"])


def test_upload_then_job_status_through_done(aws, compact_module, s3_module, monkeypatch):
    status, created = call(compact_module, "POST", "/uploads")
    assert status == 201 and created["status"] == "awaiting_upload"
    job_id = created["job_id"]
    assert call(compact_module, "GET", f"/jobs/{job_id}") == (200, {"job_id": job_id, "status": "awaiting_upload"})

    body = json.dumps({"messages": transcript(), "mode": "decision", "keep_recent": 1}).encode()
    upload = created["upload"]
    put = requests.put(upload["url"], data=body, headers=upload["headers"], timeout=10)
    assert put.status_code == 200
    key = "incoming/" + jobs.upload_rel("key-a", job_id)
    assert aws.get_object(Bucket=BUCKET, Key=key)["Body"].read() == body
    assert call(compact_module, "GET", f"/jobs/{job_id}")[1]["status"] == "running"

    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    head = aws.head_object(Bucket=BUCKET, Key=key)
    event = s3_event(BUCKET, key, version_id=head.get("VersionId"), etag=head["ETag"].strip('"'), size=len(body))
    assert s3_module.handler(event, LocalLambdaContext("S3CompactFunction", timeout_s=300))["results"][0]["result"] == "compacted"

    status, done = call(compact_module, "GET", f"/jobs/{job_id}")
    assert status == 200 and done["status"] == "done"
    result = requests.get(done["result"]["url"], timeout=10)
    assert result.status_code == 200
    compacted = result.json()
    assert compacted["compacted"] is True and compacted["compaction"]["output_bytes"] < len(body)


def test_failed_jobs_report_the_recorded_error(aws, compact_module, s3_module, monkeypatch):
    job_id = call(compact_module, "POST", "/uploads")[1]["job_id"]
    key = "incoming/" + jobs.upload_rel("key-a", job_id)
    aws.put_object(Bucket=BUCKET, Key=key, Body=b'{"messages": "no"}')
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    head = aws.head_object(Bucket=BUCKET, Key=key)
    s3_module.handler(s3_event(BUCKET, key, version_id=head.get("VersionId"), etag=head["ETag"].strip('"')),
                      LocalLambdaContext("S3CompactFunction", timeout_s=300))
    status, failed = call(compact_module, "GET", f"/jobs/{job_id}")
    assert status == 200 and failed["status"] == "failed" and failed["error_status"] == 422
    assert failed["error"]["code"] == "invalid_transcript"


def test_jobs_belong_to_their_caller_and_unknown_ids_are_404(aws, compact_module):
    job_id = call(compact_module, "POST", "/uploads", key_id="key-a")[1]["job_id"]
    status, body = call(compact_module, "GET", f"/jobs/{job_id}", key_id="key-b")
    assert status == 404 and body["error"]["code"] == "not_found"
    for bad in ("0" * 32, "../../etc", "ABC"):
        assert call(compact_module, "GET", f"/jobs/{bad}")[0] == 404


def test_uploads_unconfigured_is_503(aws, compact_module, monkeypatch):
    monkeypatch.delenv("COMPACTOR_JOBS_BUCKET")
    status, body = call(compact_module, "POST", "/uploads")
    assert status == 503 and body["error"]["code"] == "uploads_unavailable"


def test_an_upload_sent_again_reports_its_own_outcome_not_the_last_ones(aws, compact_module, s3_module, monkeypatch):
    """The upload URL stays valid for 15 minutes, so a caller can send another transcript to the same job: its
    status is ``running`` until that upload's own result is written, then that result (done after failed and
    failed after done), never the earlier upload's."""
    job_id = call(compact_module, "POST", "/uploads")[1]["job_id"]
    key = "incoming/" + jobs.upload_rel("key-a", job_id)
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    good = json.dumps({"messages": transcript(), "mode": "decision", "keep_recent": 1}).encode()

    def upload(body: bytes) -> None:
        aws.put_object(Bucket=BUCKET, Key=key, Body=body)

    def process() -> None:
        head = aws.head_object(Bucket=BUCKET, Key=key)
        s3_module.handler(s3_event(BUCKET, key, version_id=head.get("VersionId"), etag=head["ETag"].strip('"'),
                                   size=head["ContentLength"]), LocalLambdaContext("S3CompactFunction", timeout_s=300))

    def status() -> str:
        return call(compact_module, "GET", f"/jobs/{job_id}")[1]["status"]

    upload(good)
    process()
    assert status() == "done"
    upload(b'{"messages": "no"}')
    assert status() == "running"  # before: "done", the first upload's result
    process()
    assert status() == "failed"  # before: "done"
    upload(good.replace(b'"keep_recent": 1', b'"keep_recent": 2'))
    assert status() == "running"  # before: "done" (the first result), not this upload's
    process()
    assert status() == "done"
