"""``S3Store.prefetch``: the S3 handler sends the object's GetObject before the idempotency record is
written, and the job's ``get`` takes that answer (docs/performance.md#where-the-time-goes)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from compactor.object_jobs import ObjectTooLarge
from compactor_aws.s3_store import S3Store

from .conftest import BUCKET


class CountingClient:
    """The moto client, counting GetObject calls and closing of their bodies."""

    def __init__(self, client: Any) -> None:
        self.client, self.gets, self.closed = client, 0, 0

    def get_object(self, **params: Any) -> Any:
        self.gets += 1
        response = self.client.get_object(**params)
        body, counter = response["Body"], self

        class Body:
            def read(self, *args: Any) -> bytes:
                return body.read(*args)

            def close(self) -> None:
                counter.closed += 1
                body.close()
        return {**response, "Body": Body()}


def test_a_prefetched_object_is_read_once(s3: Any) -> None:
    version = s3.put_object(Bucket=BUCKET, Key="incoming/a.json", Body=b"[1]")["VersionId"]
    client = CountingClient(s3)
    store = S3Store(client)

    store.prefetch(BUCKET, "incoming/a.json", version_id=version)
    stored = store.get(BUCKET, "incoming/a.json", version_id=version, max_bytes=100)
    store.discard()

    assert (stored.body, stored.version_id) == (b"[1]", version)
    assert (client.gets, client.closed) == (1, 1)


def test_a_prefetch_of_another_version_is_not_taken(s3: Any) -> None:
    old = s3.put_object(Bucket=BUCKET, Key="incoming/a.json", Body=b"[1]")["VersionId"]
    s3.put_object(Bucket=BUCKET, Key="incoming/a.json", Body=b"[2]")
    client = CountingClient(s3)
    store = S3Store(client)

    store.prefetch(BUCKET, "incoming/a.json", version_id=None)
    assert store.get(BUCKET, "incoming/a.json", version_id=old, max_bytes=100).body == b"[1]"
    store.discard()  # the unread latest version is closed

    assert (client.gets, client.closed) == (2, 2)


def test_a_prefetched_error_is_raised_by_get_and_dropped_by_discard(s3: Any) -> None:
    store = S3Store(s3)
    store.prefetch(BUCKET, "incoming/missing.json", version_id=None)
    with pytest.raises(ClientError):
        store.get(BUCKET, "incoming/missing.json", version_id=None, max_bytes=100)

    store.prefetch(BUCKET, "incoming/missing.json", version_id=None)
    store.discard()  # a redelivered event whose job never read the object: nothing raised


def test_a_prefetched_object_over_the_limit_is_not_read(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="incoming/big.json", Body=b"x" * 1000)
    client = CountingClient(s3)
    store = S3Store(client)

    store.prefetch(BUCKET, "incoming/big.json", version_id=None)
    with pytest.raises(ObjectTooLarge):
        store.get(BUCKET, "incoming/big.json", version_id=None, max_bytes=10)

    assert (client.gets, client.closed) == (1, 1)
