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


# ------------------------------------------------------------------ a job whose every attempt crashes

ATTEMPTS = 3  # S3CompactFunction's EventInvokeConfig: the first attempt and MaximumRetryAttempts (2) more


def invocation_record(event: dict[str, Any], error: BaseException) -> dict[str, Any]:
    """The invocation record Lambda sends S3CompactFunction's on-failure destination once it gave up."""
    return {"version": "1.0", "timestamp": "2026-12-03T16:00:00.000Z",
            "requestContext": {"requestId": "r-1", "condition": "RetriesExhausted", "approximateInvokeCount": ATTEMPTS,
                               "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:s3-compact:live"},
            "requestPayload": event,
            "responseContext": {"statusCode": 200, "executedVersion": "1", "functionError": "Unhandled"},
            "responsePayload": {"errorMessage": str(error), "errorType": type(error).__name__, "stackTrace": []}}


class Crashes:
    """``compactor.service.compact_call`` failing its first ``times`` calls (an exception no handler expects)."""

    def __init__(self, times: int):
        self.left = times

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from compactor import service

        real = service.compact_call

        async def compact_call(*args: Any, **kwargs: Any) -> Any:
            if self.left > 0:
                self.left -= 1
                raise RuntimeError("the store went away")
            return await real(*args, **kwargs)

        monkeypatch.setattr(service, "compact_call", compact_call)


def deliver(s3_module: Any, gave_up_module: Any, event: dict[str, Any], between: Any = None) -> dict[str, Any] | None:
    """Lambda's asynchronous invocation of S3CompactFunction: up to :data:`ATTEMPTS` attempts (``between()``
    after each that raised), then, when all raised, its on-failure destination. The destination's answer (what
    goes on to the failure queue), None when an attempt succeeded."""
    error: BaseException | None = None
    for _ in range(ATTEMPTS):
        try:
            s3_module.handler(event, LocalLambdaContext("S3CompactFunction", timeout_s=300))
            return None
        except Exception as exc:  # noqa: BLE001 - what Lambda retries
            error = exc
            if between is not None:
                between()
    assert error is not None
    return give_up(gave_up_module, event, error)


def give_up(gave_up_module: Any, event: dict[str, Any], error: BaseException) -> dict[str, Any]:
    """S3CompactGaveUpFunction called with the invocation record of ``event``, whose last attempt raised ``error``."""
    context = LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60)
    return gave_up_module.handler(invocation_record(event, error), context)


def status_of(compact_module: Any, job_id: str) -> str:
    return call(compact_module, "GET", f"/jobs/{job_id}")[1]["status"]


def upload_event(aws: Any, key: str, body: bytes, sequencer: str = "0065A1B2C3D4E5F601") -> dict[str, Any]:
    aws.put_object(Bucket=BUCKET, Key=key, Body=body)
    head = aws.head_object(Bucket=BUCKET, Key=key)
    return s3_event(BUCKET, key, version_id=head.get("VersionId"), etag=head["ETag"].strip('"'),
                    size=head["ContentLength"], sequencer=sequencer)


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_a_job_whose_every_attempt_crashes_is_failed_once_lambda_gives_up(
        aws, compact_module, s3_module, gave_up_module, monkeypatch, capsys):
    """Before, nothing recorded such a job (the event went to the failure queue only): its status stayed
    ``running`` forever. Meanwhile, while a retry may still succeed, it is ``running``, never ``failed``."""
    job_id = call(compact_module, "POST", "/uploads")[1]["job_id"]
    key = "incoming/" + jobs.upload_rel("key-a", job_id)
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    monkeypatch.setattr(gave_up_module, "store", s3_module.S3Store())
    Crashes(ATTEMPTS).install(monkeypatch)
    event = upload_event(aws, key, json.dumps({"messages": transcript(), "keep_recent": 1}).encode())
    seen: list[str] = []

    queued = deliver(s3_module, gave_up_module, event, between=lambda: seen.append(status_of(compact_module, job_id)))

    assert seen == ["running"] * ATTEMPTS
    status, failed = call(compact_module, "GET", f"/jobs/{job_id}")
    assert status == 200 and failed["status"] == "failed" and failed["error_status"] == 500
    assert failed["error"]["code"] == "job_failed" and "RuntimeError" in failed["error"]["message"]
    assert "the store went away" not in failed["error"]["message"]  # the error's kind, never its message
    assert queued is not None and queued["cause"] == "RuntimeError"
    assert '"S3ObjectsFailed":[1.0]' in capsys.readouterr().out  # the object's outcome, counted once
    assert [result["result"] for result in queued["results"]] == ["failed"]
    assert aws.get_object(Bucket=BUCKET, Key=key)["Body"].read()  # the upload is kept


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_a_crash_then_a_successful_retry_is_done_and_never_failed(
        aws, compact_module, s3_module, gave_up_module, monkeypatch):
    """A retry that succeeds: ``running`` between the attempts, then ``done``. And a duplicate delivery of the
    same event whose attempts all crashed (Lambda delivers at least once) does not make it ``failed``: its
    destination finds this version's result and records nothing."""
    job_id = call(compact_module, "POST", "/uploads")[1]["job_id"]
    key = "incoming/" + jobs.upload_rel("key-a", job_id)
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    monkeypatch.setattr(gave_up_module, "store", s3_module.S3Store())
    Crashes(ATTEMPTS - 1).install(monkeypatch)
    event = upload_event(aws, key, json.dumps({"messages": transcript(), "keep_recent": 1}).encode())
    seen: list[str] = []

    queued = deliver(s3_module, gave_up_module, event, between=lambda: seen.append(status_of(compact_module, job_id)))

    assert queued is None  # an attempt succeeded: Lambda calls no destination
    assert seen == ["running"] * (ATTEMPTS - 1)
    assert call(compact_module, "GET", f"/jobs/{job_id}")[1]["status"] == "done"
    late = give_up(gave_up_module, event, RuntimeError("x"))
    assert [(each["result"], each.get("reason")) for each in late["results"]] == [("skipped", "already processed")]
    assert call(compact_module, "GET", f"/jobs/{job_id}")[1]["status"] == "done"
    assert aws.list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("KeyCount") == 0


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_a_failed_upload_never_shadows_the_newer_upload_of_its_job(
        aws, compact_module, s3_module, gave_up_module, monkeypatch):
    """The job is sent again after its first upload crashed every attempt: ``running`` until the new upload's
    own outcome, and an older upload's destination arriving late neither makes it ``failed`` nor replaces the
    newer upload's own failure record."""
    job_id = call(compact_module, "POST", "/uploads")[1]["job_id"]
    key = "incoming/" + jobs.upload_rel("key-a", job_id)
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    monkeypatch.setattr(gave_up_module, "store", s3_module.S3Store())
    good = json.dumps({"messages": transcript(), "keep_recent": 1}).encode()

    def status() -> dict[str, Any]:
        return call(compact_module, "GET", f"/jobs/{job_id}")[1]

    Crashes(ATTEMPTS).install(monkeypatch)
    first = upload_event(aws, key, good, sequencer="0065A1B2C3D4E5F601")
    deliver(s3_module, gave_up_module, first)
    assert status()["status"] == "failed"
    second = upload_event(aws, key, good.replace(b'"keep_recent": 1', b'"keep_recent": 2'),
                          sequencer="0065A1B2C3D4E5F602")
    assert status()["status"] == "running"  # not the first upload's failure
    assert deliver(s3_module, gave_up_module, second) is None  # no crash left: compacted
    assert status()["status"] == "done"
    give_up(gave_up_module, first, RuntimeError("x"))
    assert status()["status"] == "done"

    Crashes(ATTEMPTS).install(monkeypatch)
    third = upload_event(aws, key, good.replace(b'"keep_recent": 1', b'"keep_recent": 3'),
                         sequencer="0065A1B2C3D4E5F603")
    assert status()["status"] == "running"
    deliver(s3_module, gave_up_module, third)
    assert status()["status"] == "failed"
    late = give_up(gave_up_module, first, ValueError("x"))
    assert [(each["result"], each.get("reason")) for each in late["results"]] == [
        ("skipped", "a newer version was processed")]
    failed = status()
    assert failed["status"] == "failed" and "RuntimeError" in failed["error"]["message"]  # the third upload's own


def _age_record(aws: Any, job_id: str, days: float, key_id: str = "key-a") -> None:
    """The job's record as if ``POST /v1/uploads`` created it ``days`` ago."""
    import time

    key = "jobs/" + jobs.upload_rel(key_id, job_id).removeprefix(jobs.UPLOADS)
    record = json.loads(aws.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    record["created_at"] = int(time.time() - days * 86400)
    aws.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(record).encode(), ContentType="application/json")


def test_a_job_whose_data_expired_before_its_record_is_410(aws, compact_module, s3_module, monkeypatch):
    """With TranscriptRetentionDays, S3 expires the upload and its result (lifecycle: a delete marker over each)
    while the job's record lives its 30 days: the job answers 410 ``job_expired``, where it read
    ``awaiting_upload`` (as if the caller could still upload: the URL had expired weeks before), and a result that
    expired between the look-up and the read of a failure is no 500."""
    monkeypatch.setenv(jobs.RETENTION_ENV, "7")
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    done_id = call(compact_module, "POST", "/uploads")[1]["job_id"]
    key = "incoming/" + jobs.upload_rel("key-a", done_id)
    aws.put_object(Bucket=BUCKET, Key=key, Body=json.dumps({"messages": transcript(), "keep_recent": 1}).encode())
    head = aws.head_object(Bucket=BUCKET, Key=key)
    s3_module.handler(s3_event(BUCKET, key, version_id=head.get("VersionId"), etag=head["ETag"].strip('"'),
                               size=head["ContentLength"]), LocalLambdaContext("S3CompactFunction", timeout_s=300))
    assert call(compact_module, "GET", f"/jobs/{done_id}")[1]["status"] == "done"

    # 8 days on: the record is older than the retention, the data is still there (lifecycle runs late): done, and
    # its URL answers the result
    _age_record(aws, done_id, 8)
    status, done = call(compact_module, "GET", f"/jobs/{done_id}")
    assert status == 200 and done["status"] == "done"
    assert requests.get(done["result"]["url"], timeout=10).status_code == 200
    # then S3 expires the upload and the result (a delete marker over each: the bucket is versioned)
    aws.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    for place in ("incoming/", "compacted/"):
        aws.delete_object(Bucket=BUCKET, Key=place + jobs.upload_rel("key-a", done_id))
    status, body = call(compact_module, "GET", f"/jobs/{done_id}")
    assert status == 410, body  # before: 200 awaiting_upload
    assert body["error"]["code"] == "job_expired" and "7 days" in body["error"]["message"]

    # a job never uploaded, past the retention: 410 as well; a young one still awaits its upload
    old_id, young_id = (call(compact_module, "POST", "/uploads")[1]["job_id"] for _ in range(2))
    _age_record(aws, old_id, 7.5)
    assert call(compact_module, "GET", f"/jobs/{old_id}")[0] == 410
    _age_record(aws, young_id, 6.5)
    assert call(compact_module, "GET", f"/jobs/{young_id}") == (200, {"job_id": young_id, "status": "awaiting_upload"})
    # another caller's expired job stays unknown to you; without a retention nothing is taken as expired
    assert call(compact_module, "GET", f"/jobs/{old_id}", key_id="key-b")[0] == 404
    monkeypatch.delenv(jobs.RETENTION_ENV)
    assert call(compact_module, "GET", f"/jobs/{old_id}")[1]["status"] == "awaiting_upload"


def test_a_failure_that_expires_while_it_is_read_is_410_not_500(aws, monkeypatch):
    """The failure S3 expired between the job's look-ups and the read of its record: the job is looked up again
    and answers 410, not 500 (NoSuchKey) nor a failure with no error."""
    from compactor_aws.routes.jobs import presign
    from compactor_aws.s3_store import S3Store

    store = S3Store()
    job_id = jobs.create_upload(store, BUCKET, "key-a", presign)[1]["job_id"]
    _age_record(aws, job_id, 30)
    failure_key = "failed/" + jobs.upload_rel("key-a", job_id)
    aws.put_object(Bucket=BUCKET, Key=failure_key, Body=b'{"status": 422, "error": {"code": "invalid_transcript"}}')
    real_get = store.get_if_exists

    def get_if_exists(bucket: str, key: str, *, max_bytes: int) -> Any:
        if key == failure_key:  # expired after the head found it
            aws.delete_object(Bucket=BUCKET, Key=key)
        return real_get(bucket, key, max_bytes=max_bytes)

    monkeypatch.setattr(store, "get_if_exists", get_if_exists)
    status, body = jobs.job_status(store, BUCKET, "key-a", job_id, presign, retention_days=7)
    assert status == 410 and body["error"]["code"] == "job_expired"
