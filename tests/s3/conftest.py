"""Fixtures of the S3 path: moto S3 (started before any client exists), the handler module, S3 events."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote_plus

import pytest
from moto import mock_aws

from compactor_cli.lambda_runtime import LocalLambdaContext, load_handler

REPO = Path(__file__).resolve().parents[2]
EVENT_TEMPLATE = REPO / "tests" / "events" / "s3-put.json"
DEMO_TRANSCRIPT = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
BUCKET = "compactor-transcripts-test"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and region; no endpoint override (moto intercepts in-process)."""
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_SESSION_TOKEN", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("AWS_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "COMPACTOR_S3_DEFAULTS",
                 "COMPACTOR_CATALOG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def s3(aws_env: None) -> Iterator[Any]:
    """A moto S3 client with a versioned bucket :data:`BUCKET`; the store's cached client is reset."""
    import boto3

    from compactor_aws import s3_store

    with mock_aws():
        s3_store.reset_client()
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        yield client
        s3_store.reset_client()


@pytest.fixture(scope="session")
def s3_module() -> ModuleType:
    """``functions/s3_compact/s3_compact.py`` imported as Lambda imports it (module ``s3_compact``)."""
    load_handler(REPO / "functions" / "s3_compact", "s3_compact.handler")
    return sys.modules["s3_compact"]


@pytest.fixture(scope="session")
def gave_up_module() -> ModuleType:
    """``functions/s3_gave_up/s3_gave_up.py``, S3CompactFunction's on-failure destination (module ``s3_gave_up``)."""
    load_handler(REPO / "functions" / "s3_gave_up", "s3_gave_up.handler")
    return sys.modules["s3_gave_up"]


@pytest.fixture
def lambda_context() -> LocalLambdaContext:
    return LocalLambdaContext("S3CompactFunction", timeout_s=300)


def s3_event(bucket: str, key: str, *, version_id: str | None = None, etag: str = "", size: int = 0,
             sequencer: str = "0065A1B2C3D4E5F601", event_name: str = "ObjectCreated:Put") -> dict[str, Any]:
    """The notification S3 sends for ``key``: the repository's ``s3-put.json`` with this object's
    identity, the key URL-encoded the way S3 encodes it (``quote_plus``)."""
    event = copy.deepcopy(json.loads(EVENT_TEMPLATE.read_text(encoding="utf-8")))
    record = event["Records"][0]
    record["eventName"] = event_name
    record["s3"]["bucket"].update(name=bucket, arn=f"arn:aws:s3:::{bucket}")
    obj: dict[str, Any] = {"key": quote_plus(key, safe="/"), "size": size, "eTag": etag, "sequencer": sequencer}
    if version_id is not None:
        obj["versionId"] = version_id
    record["s3"]["object"] = obj
    return event


def put_and_event(client: Any, key: str, body: bytes | str, *, bucket: str = BUCKET,
                  sequencer: str = "0065A1B2C3D4E5F601") -> dict[str, Any]:
    """Upload ``body`` to ``key`` and return the S3 event of that write."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    response = client.put_object(Bucket=bucket, Key=key, Body=data)
    assert response["ETag"].strip('"') == hashlib.md5(data).hexdigest()  # noqa: S324 (S3's ETag)
    return s3_event(bucket, key, version_id=response.get("VersionId"), etag=response["ETag"].strip('"'),
                    size=len(data), sequencer=sequencer)


def read_json(client: Any, key: str, bucket: str = BUCKET) -> tuple[Any, dict[str, Any]]:
    """(parsed body, get_object response) of a result object."""
    response = client.get_object(Bucket=bucket, Key=key)
    return json.loads(response["Body"].read()), response


def keys(client: Any, prefix: str = "", bucket: str = BUCKET) -> list[str]:
    listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listing.get("Contents", []))


def transcript(n_assistant: int = 12, size: int = 2000) -> list[dict[str, Any]]:
    """A transcript with bulky assistant turns (fixture-T-like), compactible in both modes."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Keep instructions."},
                                      {"role": "user", "content": "Complete the task."}]
    messages += [{"role": "assistant", "content": f"fact_{i} " + "x" * size} for i in range(n_assistant)]
    messages.append({"role": "assistant", "content": "Current state."})
    return messages
