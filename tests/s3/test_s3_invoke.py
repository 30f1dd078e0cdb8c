"""``compactor invoke S3CompactFunction -e tests/events/s3-put.json`` against a moto server on 127.0.0.1,
reached through ``AWS_ENDPOINT_URL`` from a fresh process (the Docker-free stand-in for ``sam local invoke``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_plus

import pytest
from moto.server import ThreadedMotoServer

from .conftest import DEMO_TRANSCRIPT, EVENT_TEMPLATE, REPO

EVENT = json.loads(EVENT_TEMPLATE.read_text(encoding="utf-8"))
RECORD = EVENT["Records"][0]["s3"]
BUCKET = RECORD["bucket"]["name"]
KEY = unquote_plus(RECORD["object"]["key"])
RESULT_KEY = "compacted/" + KEY.removeprefix("incoming/")
DUMMY_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
             "AWS_REGION": "us-east-1"}


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        # The server shares moto's in-process backends: start from an empty account.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10)
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def remote_s3(moto_endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def invoke(endpoint: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("AWS_") and key not in ("COMPACTOR_S3_DEFAULTS", "COMPACTOR_CATALOG")}
    env.update(DUMMY_AWS, AWS_ENDPOINT_URL=endpoint)
    return subprocess.run(
        [sys.executable, "-m", "compactor_cli", "invoke", "S3CompactFunction", "-e", "tests/events/s3-put.json", *extra],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=120)


def test_invoke_writes_the_compacted_object_on_the_moto_server(moto_endpoint: str, remote_s3: Any) -> None:
    remote_s3.create_bucket(Bucket=BUCKET)
    remote_s3.put_object(Bucket=BUCKET, Key=KEY, Body=DEMO_TRANSCRIPT.read_bytes())

    result = invoke(moto_endpoint)

    assert result.returncode == 0, result.stderr
    [outcome] = json.loads(result.stdout)["results"]
    assert outcome["result"] == "compacted" and outcome["key"] == RESULT_KEY
    response = remote_s3.get_object(Bucket=BUCKET, Key=RESULT_KEY)
    body = json.loads(response["Body"].read())
    assert body["compacted"] is True and body["compaction"]["output_bytes"] < body["compaction"]["original_bytes"]
    assert response["Metadata"]["source-etag"] == RECORD["object"]["eTag"]  # the event names this very file

    written = remote_s3.head_object(Bucket=BUCKET, Key=RESULT_KEY)
    again = invoke(moto_endpoint)  # the same event delivered twice: the result is not written again

    assert again.returncode == 0, again.stderr
    assert remote_s3.head_object(Bucket=BUCKET, Key=RESULT_KEY)["LastModified"] == written["LastModified"]
    # Another process, whose ledger (in memory) lacks the job's entry: it finds the result written and bills it, so it
    # delivers the job (docs/billing.md). It answered "already processed" while it billed it.
    assert json.loads(again.stdout)["results"][0]["result"] == "compacted"


def test_invoke_fails_like_lambda_when_the_object_is_missing(moto_endpoint: str, remote_s3: Any) -> None:
    remote_s3.create_bucket(Bucket=BUCKET)

    result = invoke(moto_endpoint)

    assert result.returncode == 1
    assert json.loads(result.stdout)["errorType"] == "NoSuchKey"


def test_an_object_over_the_inline_size_is_compacted_in_the_function_without_a_state_machine(
        moto_endpoint: str, remote_s3: Any) -> None:
    # The template's COMPACTOR_WINDOWED_STATE_MACHINE_ARN resolved to the logical id: an object over S3InlineMaxBytes
    # (8 MiB; 1000 bytes here) failed on StartExecution, "Invalid State Machine Arn: 'WindowedJobStateMachine'", exit 1.
    remote_s3.create_bucket(Bucket=BUCKET)
    remote_s3.put_object(Bucket=BUCKET, Key=KEY, Body=DEMO_TRANSCRIPT.read_bytes())

    result = invoke(moto_endpoint, "--param", "S3InlineMaxBytes=1000")

    assert result.returncode == 0, result.stderr
    [outcome] = json.loads(result.stdout)["results"]
    assert outcome["result"] == "compacted" and outcome["key"] == RESULT_KEY
