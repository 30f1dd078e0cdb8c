"""The presigned URLs of ``POST /v1/uploads`` and ``GET /v1/jobs/{id}`` are what a deployed stack's bucket takes:
Signature Version 4 on the bucket's own Regional host (docs/scale.md "Uploads through the API").

botocore presigns S3 URLs with Signature Version 2 by default in the Regions where S3 still takes it (us-east-1,
eu-west-1, ...) and names the legacy global host ``<bucket>.s3.amazonaws.com`` in every Region. S3 takes no SigV2
request for a bucket created after 24 June 2020 (every stack's), and the legacy global host serves no Region launched
after 20 March 2019 (ap-east-1, il-central-1, ...) and answers a bucket created elsewhere outside us-east-1 with a
redirect for its first hours, which a SigV4 signature (it signs the host) does not survive. moto takes all of them,
so the URL's form is checked here, and the upload and the result still go through moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from moto import mock_aws

from compactor import jobs
from compactor_cli.lambda_runtime import LocalLambdaContext

from s3.conftest import s3_event, transcript
from scale.test_jobs_routes import BUCKET, call

REGIONAL_HOST = {"us-east-1": f"{BUCKET}.s3.amazonaws.com",  # us-east-1's own host
                 "eu-west-1": f"{BUCKET}.s3.eu-west-1.amazonaws.com",  # SigV2 presigned by default
                 "ap-east-1": f"{BUCKET}.s3.ap-east-1.amazonaws.com"}  # no legacy global host


@pytest.fixture(params=sorted(REGIONAL_HOST))
def region_aws(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    region = request.param
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": region, "AWS_REGION": region}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "COMPACTOR_S3_DEFAULTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COMPACTOR_JOBS_BUCKET", BUCKET)
    from compactor_aws import s3_store

    with mock_aws():
        import boto3

        s3_store.reset_client()
        client = boto3.client("s3", region_name=region)
        client.create_bucket(Bucket=BUCKET, **({} if region == "us-east-1" else
                                               {"CreateBucketConfiguration": {"LocationConstraint": region}}))
        yield region, client
        s3_store.reset_client()


def assert_sigv4_on_the_regional_host(url: str, region: str) -> None:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert (parts.scheme, parts.hostname) == ("https", REGIONAL_HOST[region]), url
    assert query.get("X-Amz-Algorithm") == ["AWS4-HMAC-SHA256"], url  # not SigV2's AWSAccessKeyId and Signature
    assert query["X-Amz-Credential"][0].split("/")[2] == region
    assert "AWSAccessKeyId" not in query and "Signature" not in query


def test_upload_and_result_urls_are_sigv4_on_the_buckets_regional_host(region_aws, compact_module, s3_module,
                                                                       monkeypatch):
    region, aws = region_aws
    status, created = call(compact_module, "POST", "/uploads")
    assert status == 201
    upload = created["upload"]
    assert_sigv4_on_the_regional_host(upload["url"], region)
    body = json.dumps({"messages": transcript(), "mode": "decision", "keep_recent": 1}).encode()
    assert requests.put(upload["url"], data=body, headers=upload["headers"], timeout=10).status_code == 200

    key = "incoming/" + jobs.upload_rel("key-a", created["job_id"])
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    head = aws.head_object(Bucket=BUCKET, Key=key)
    event = s3_event(BUCKET, key, version_id=head.get("VersionId"), etag=head["ETag"].strip('"'), size=len(body))
    assert s3_module.handler(event, LocalLambdaContext("S3CompactFunction", timeout_s=300))["results"][0]["result"] == "compacted"

    status, done = call(compact_module, "GET", f"/jobs/{created['job_id']}")
    assert status == 200 and done["status"] == "done"
    assert_sigv4_on_the_regional_host(done["result"]["url"], region)
    result = requests.get(done["result"]["url"], timeout=10)
    assert result.status_code == 200 and result.json()["compacted"] is True


def test_an_s3_endpoint_of_ones_own_keeps_its_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local S3 (``AWS_ENDPOINT_URL_S3``, moto's server on localhost): the bucket stays in the path, SigV4 still;
    a virtual host ``<bucket>.localhost`` resolves nowhere."""
    from compactor_aws import s3_store

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION":
                        "eu-west-1", "AWS_ENDPOINT_URL_S3": "http://localhost:5000"}.items():
        monkeypatch.setenv(name, value)
    s3_store.reset_client()
    try:
        url = s3_store.presign_client().generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "k"})
    finally:
        s3_store.reset_client()
    parts = urlsplit(url)
    assert (parts.netloc, parts.path) == ("localhost:5000", f"/{BUCKET}/k")
    assert parse_qs(parts.query)["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
