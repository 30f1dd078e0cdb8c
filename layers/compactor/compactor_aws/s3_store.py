"""The S3 object store of the S3 path (``compactor.object_jobs.ObjectStore`` over boto3).

One client per container, created on first use (so importing this module needs no region or
credentials, and tests can start moto first). ``AWS_ENDPOINT_URL`` is honoured by boto3 itself.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

from botocore.config import Config
from botocore.exceptions import ClientError

from compactor.container import PerContainer
from compactor_aws import aws_session, background

if TYPE_CHECKING:  # imported where used: the fan-out worker needs only the client (docs/performance.md#where-the-time-goes)
    from compactor.object_jobs import ObjectHead, StoredObject

PART_BYTES = 8 * 1024 * 1024
"""Multipart part size of streamed writes (S3's minimum is 5 MiB, the last part excepted)."""
PARTS_AT_ONCE = 4
"""Parts of one streamed write uploading at once while its text goes on (docs/performance.md, "Streamed
writes"): a writer holds at most this many parts and the one it fills, 40 MiB (and the text of one write)."""
# As many kept connections as calls in flight (the fan-out's concurrent result reads and uploads): beyond
# botocore's default of 10, each further concurrent call opened a connection (a TLS handshake) that urllib3
# then discarded with a warning.
_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=60,
                        max_pool_connections=background.CALLS_IN_FLIGHT)
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
logger = logging.getLogger(__name__)
# A conditional write lost its race (412), or an identical one is in flight (409).
_PRECONDITION = {"412", "PreconditionFailed", "409", "ConditionalRequestConflict"}
# A read's If-Match failed: the object is no longer the one asked for.
_CHANGED = {"412", "PreconditionFailed"}
CLIENT: PerContainer[Any] = PerContainer(lambda: aws_session.client("s3", config=_CLIENT_CONFIG))
s3_client = CLIENT.get
"""The container's one S3 client (the S3 path, the fan-out's large results, the worker)."""
# botocore presigns S3 URLs with Signature Version 2 where S3 still takes it (us-east-1, eu-west-1, ...) and on the
# legacy global host <bucket>.s3.amazonaws.com everywhere: S3 refuses SigV2 for buckets created after 24 June 2020
# (every stack's), that host serves no Region launched after March 2019, and it redirects a new bucket elsewhere for
# its first hours. Presigned URLs (POST /v1/uploads, GET /v1/jobs/{id}) are SigV4 on the bucket's Regional host
# (docs/scale.md "Uploads through the API"); requests the functions send are SigV4 already.
PRESIGN_CONFIG = _CLIENT_CONFIG.merge(Config(signature_version="s3v4", s3={"addressing_style": "virtual"}))


def _new_presigner() -> Any:
    """SigV4 on the bucket's Regional host; an endpoint of one's own (``AWS_ENDPOINT_URL_S3``, a local S3 such as
    moto's server on ``localhost``) keeps botocore's addressing, which names the bucket in the path there (a
    virtual host ``<bucket>.localhost`` resolves nowhere)."""
    client = aws_session.client("s3", config=PRESIGN_CONFIG)
    if (urlsplit(client.meta.endpoint_url).hostname or "").endswith(".amazonaws.com"):
        return client
    return aws_session.client("s3", config=_CLIENT_CONFIG.merge(Config(signature_version="s3v4")))


PRESIGNER: PerContainer[Any] = PerContainer(_new_presigner)
presign_client = PRESIGNER.get
"""The container's S3 client for presigned URLs only (the upload routes), created on first use."""


def reset_client() -> None:
    """Forget the container's S3 clients (a SnapStart restore, tests that switch mocks)."""
    CLIENT.reset()
    PRESIGNER.reset()


def _object(bucket: str, key: str, version_id: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version_id:
        params["VersionId"] = version_id
    return params


class S3Store:
    """get / head / put on S3; every other error propagates (the invocation is retried)."""

    def __init__(self, client: Any = None):
        self._client = client
        self._prefetched: dict[tuple[str, str, str | None], Future[Any]] = {}

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else s3_client()

    def prefetch(self, bucket: str, key: str, *, version_id: str | None) -> None:
        """Send the object's GetObject now, on a thread (``compactor_aws.background``), and go on: the
        next :meth:`get` of this object version takes its answer (status and headers; the body is read
        then). :meth:`discard` closes one no :meth:`get` took."""
        client = self.client  # built on this thread
        self._prefetched[(bucket, key, version_id)] = background.start(
            client.get_object, **_object(bucket, key, version_id))

    def discard(self) -> None:
        """Close every prefetched answer that no :meth:`get` took (its error, if any, is dropped)."""
        pending, self._prefetched = self._prefetched, {}
        for future in pending.values():
            with contextlib.suppress(Exception):
                future.result()["Body"].close()

    def get(self, bucket: str, key: str, *, version_id: str | None, max_bytes: int) -> StoredObject:
        """The object's bytes; :class:`ObjectTooLarge` (without reading the body) past ``max_bytes``."""
        from compactor.object_jobs import ObjectTooLarge, StoredObject

        prefetched = self._prefetched.pop((bucket, key, version_id), None)
        response = (prefetched.result() if prefetched is not None
                    else self.client.get_object(**_object(bucket, key, version_id)))
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

    def get_if_exists(self, bucket: str, key: str, *, max_bytes: int) -> StoredObject | None:
        """:meth:`get` of the current version, None when ``key`` does not exist: one request where a head
        and then a get made two."""
        try:
            return self.get(bucket, key, version_id=None, max_bytes=max_bytes)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND:
                return None
            raise

    def head(self, bucket: str, key: str) -> ObjectHead | None:
        """User metadata (lower-case names, no ``x-amz-meta-``) and ETag of ``key``; None when it does not exist."""
        from compactor.object_jobs import ObjectHead

        try:
            response = self.client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND:
                return None
            raise
        metadata = {name.lower(): value for name, value in (response.get("Metadata") or {}).items()}
        return ObjectHead(metadata, response.get("ETag", ""), response.get("VersionId"))

    def head_metadata(self, bucket: str, key: str) -> Mapping[str, str] | None:
        """User metadata of ``key`` (see :meth:`head`), None when it does not exist."""
        head = self.head(bucket, key)
        return None if head is None else head.metadata

    def put(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Mapping[str, str]) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type, Metadata=dict(metadata))

    def put_if(self, bucket: str, key: str, body: bytes, *, content_type: str, metadata: Mapping[str, str],
               replacing: str | None) -> bool:
        """A conditional PutObject: ``If-None-Match: *`` when the key was absent, ``If-Match`` its ETag
        otherwise. False when S3 refuses the condition (another writer was first)."""
        condition = {"IfNoneMatch": "*"} if replacing is None else {"IfMatch": replacing}
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type,
                                   Metadata=dict(metadata), **condition)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _PRECONDITION:
                return False
            raise
        return True

    def delete_if(self, bucket: str, key: str, *, etag: str, version_id: str | None = None) -> bool:
        """DeleteObject of the object looked at: with ``version_id``, that version (``s3:DeleteObjectVersion``: no
        delete marker, and a version written since stays, whatever its ETag); else conditional on its ETag
        (``If-Match``; in a versioned bucket, a delete marker). False when S3 refuses the condition (the key was
        written meanwhile) or the key is gone."""
        condition = {"VersionId": version_id} if version_id else {"IfMatch": etag}
        try:
            self.client.delete_object(Bucket=bucket, Key=key, **condition)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _PRECONDITION | _NOT_FOUND:
                return False
            raise
        return True

    @contextlib.contextmanager
    def open(self, bucket: str, key: str, *, version_id: str | None = None,
             etag: str | None = None) -> Iterator[IO[bytes]]:
        """The object's body as a stream (read in chunks, never whole); with ``etag``, only if the object still has
        that ETag (``If-Match``), else :class:`~compactor.object_jobs.SourceChanged`."""
        params = _object(bucket, key, version_id)
        if etag:
            params["IfMatch"] = f'"{etag.strip(chr(34))}"'
        try:
            body = self.client.get_object(**params)["Body"]
        except ClientError as exc:
            if etag and str(exc.response.get("Error", {}).get("Code")) in _CHANGED:
                from compactor.object_jobs import SourceChanged

                raise SourceChanged(f"s3://{bucket}/{key} is no longer the object this job was started for") from None
            raise
        try:
            yield body
        finally:
            body.close()

    @contextlib.contextmanager
    def open_writer(self, bucket: str, key: str, *, content_type: str, metadata: Mapping[str, str],
                    conditional: bool = False, replacing: str | None = None) -> Iterator[IO[str]]:
        """A text stream uploaded as the object on a clean exit (multipart past one part, its parts uploading
        while the block goes on; aborted and never visible when the block or an upload fails). ``conditional``:
        stored only if the key still is as seen, as :meth:`put_if` (its completion ``If-None-Match: *`` or
        ``If-Match``), else :class:`~compactor.object_jobs.WriteRefused` is raised and nothing is stored."""
        condition = ({"IfNoneMatch": "*"} if replacing is None else {"IfMatch": replacing}) if conditional else {}
        writer = _MultipartWriter(self.client, bucket, key, content_type, dict(metadata), condition)
        try:
            yield writer  # type: ignore[misc]
            try:
                writer.complete()  # raises a part's failed upload
            except ClientError as exc:
                if condition and str(exc.response.get("Error", {}).get("Code")) in _PRECONDITION:
                    from compactor.object_jobs import WriteRefused

                    raise WriteRefused(f"{key} changed while it was written") from exc
                raise
        except BaseException:
            try:
                writer.abort()
            except Exception:  # noqa: BLE001 - the first error is the one to report; the bucket's lifecycle rule
                # aborts an upload left open after 7 days (AbortIncompleteMultipartUpload in template.yaml)
                logger.warning("aborting the multipart upload of %s failed", key, exc_info=True)
            raise


class _MultipartWriter(io.TextIOBase):
    """Buffers UTF-8 text and uploads it in ``PART_BYTES`` parts, up to ``PARTS_AT_ONCE`` in flight while the
    text goes on (:class:`compactor.side_by_side.InFlight`); a small object is one PutObject. A part's failed
    upload is raised by every later write that cuts a part and by :meth:`complete`, and the block's exit then
    aborts the upload."""

    def __init__(self, client: Any, bucket: str, key: str, content_type: str, metadata: dict[str, str],
                 condition: dict[str, str] | None = None) -> None:
        from compactor.side_by_side import InFlight

        self.client, self.bucket, self.key = client, bucket, key
        self.content_type, self.metadata, self.condition = content_type, metadata, condition or {}
        self.buffer = bytearray()
        self.upload_id: str | None = None
        self.parts: InFlight[dict[str, Any]] = InFlight(PARTS_AT_ONCE)
        self.numbered = 0

    def write(self, text: str) -> int:  # type: ignore[override]
        self.buffer += text.encode("utf-8")
        while len(self.buffer) >= PART_BYTES:
            self.parts.make_room()  # the part is cut once it can go: the writer holds it or the buffer, not both
            data = bytes(memoryview(self.buffer)[:PART_BYTES])
            del self.buffer[:PART_BYTES]
            self._upload(data)
        return len(text)

    def _upload(self, data: bytes) -> None:
        if self.upload_id is None:
            self.upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket, Key=self.key, ContentType=self.content_type, Metadata=self.metadata)["UploadId"]
        self.parts.push(self._part, self.upload_id, self.numbered + 1, data)
        self.numbered += 1

    def _part(self, upload_id: str, number: int, data: bytes) -> dict[str, Any]:
        etag = self.client.upload_part(Bucket=self.bucket, Key=self.key, UploadId=upload_id, PartNumber=number,
                                       Body=data)["ETag"]
        return {"ETag": etag, "PartNumber": number}

    def complete(self) -> None:
        if self.upload_id is None:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=bytes(self.buffer),
                                   ContentType=self.content_type, Metadata=self.metadata, **self.condition)
            return
        if self.buffer:
            self.parts.make_room()
            data = bytes(self.buffer)
            self.buffer.clear()
            self._upload(data)
        self.client.complete_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id,
                                              MultipartUpload={"Parts": self.parts.results()}, **self.condition)

    def abort(self) -> None:
        self.parts.close()  # the parts in flight end first: none lands after the abort
        if self.upload_id is not None:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
