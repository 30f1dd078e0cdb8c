"""Restorable originals in S3 (``compactor.archives.ArchiveStore``), docs/archives.md.

Objects ``<prefix><owner>/<handle>.json`` in ``COMPACTOR_ARCHIVE_BUCKET`` (the template: the transcript
bucket's ``archives/`` prefix, encrypted, expired by a lifecycle rule). Without that setting (``compactor
serve``, tests) the originals go to the core's local directory store.
"""

from __future__ import annotations

import os
from typing import Any

from botocore.exceptions import ClientError

from compactor.archives import ArchiveStore, default_local_store
from compactor_aws.s3_store import s3_client

BUCKET_ENV = "COMPACTOR_ARCHIVE_BUCKET"
PREFIX = "archives/"
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}


class S3ArchiveStore:
    def __init__(self, bucket: str, client: Any = None, prefix: str = PREFIX) -> None:
        self.bucket, self.prefix, self._client = bucket, prefix, client

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else s3_client()

    def _key(self, owner: str, handle: str) -> str:
        return f"{self.prefix}{owner}/{handle}.json"

    def put(self, owner: str, handle: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(owner, handle), Body=data,
                               ContentType="application/json")

    def get(self, owner: str, handle: str) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(owner, handle))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND:
                return None
            raise
        return response["Body"].read()


def configured_store() -> ArchiveStore:
    """S3 when ``COMPACTOR_ARCHIVE_BUCKET`` is set, else the local directory store."""
    bucket = os.environ.get(BUCKET_ENV)
    return S3ArchiveStore(bucket) if bucket else default_local_store()
