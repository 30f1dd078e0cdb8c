"""The S3 object store of the S3 path (``compactor.object_jobs.ObjectStore`` over boto3).

One client per container, created on first use (so importing this module needs no region or
credentials, and tests can start moto first). ``AWS_ENDPOINT_URL`` is honoured by boto3 itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from compactor.object_jobs import ObjectTooLarge, StoredObject

_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=60)
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
_client: Any = None
_lock = threading.Lock()


def s3_client() -> Any:
    """The container's S3 client."""
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = boto3.client("s3", config=_CLIENT_CONFIG)
    return _client


def reset_client() -> None:
    """Forget the client (tests that switch endpoints or mocks)."""
    global _client
    with _lock:
        _client = None


class S3Store:
    """get / head / put on S3; every other error propagates (the invocation is retried)."""

    def __init__(self, client: Any = None):
        self._client = client

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else s3_client()

    def get(self, bucket: str, key: str, *, version_id: str | None, max_bytes: int) -> StoredObject:
        """The object's bytes; :class:`ObjectTooLarge` (without reading the body) past ``max_bytes``."""
        params: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if version_id:
            params["VersionId"] = version_id
        response = self.client.get_object(**params)
        stream = response["Body"]
        try:
            size = int(response.get("ContentLength", 0))
            if size > max_bytes:
                raise ObjectTooLarge(size, max_bytes)
            body = stream.read(max_bytes + 1)
            if len(body) > max_bytes:
                raise ObjectTooLarge(len(body), max_bytes)
        finally:
            stream.close()
        return StoredObject(body=body, version_id=response.get("VersionId"), etag=response.get("ETag", ""))

    def head_metadata(self, bucket: str, key: str) -> Mapping[str, str] | None:
        """User metadata of ``key`` (lower-case names, no ``x-amz-meta-``), None when it does not exist."""
        try:
            response = self.client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND:
                return None
            raise
        return {name.lower(): value for name, value in (response.get("Metadata") or {}).items()}

    def put(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Mapping[str, str]) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type, Metadata=dict(metadata))
