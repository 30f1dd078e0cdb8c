"""What the S3 path's Lambda events say (docs/behaviour.md#the-s3-path): the object an S3 notification's record
names, and, in the invocation record Lambda sends ``S3CompactFunction``'s on-failure destination once it gave up
on an event, the objects that event named and what ended its last attempt (docs/deploy.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_plus

from aws_lambda_powertools.utilities.data_classes import S3Event
from aws_lambda_powertools.utilities.data_classes.s3_event import S3EventRecord

from compactor import object_jobs


def source_of(record: S3EventRecord) -> object_jobs.Source:
    """The object a record names; the key is URL-decoded (``+`` is a space, ``%XX`` a byte of UTF-8)."""
    obj = record.s3.get_object
    return object_jobs.Source(
        bucket=record.s3.bucket.name,
        key=unquote_plus(obj["key"]),
        version_id=obj.get("versionId") or None,
        etag=object_jobs.normalize_etag(obj.get("eTag")),
        sequencer=obj.get("sequencer") or None,
    )


def given_up(invocation: dict[str, Any]) -> list[tuple[object_jobs.Source, int | None]]:
    """The objects created that the event of an invocation record (its ``requestPayload``) named, each with its size
    in bytes (None where the record has none); none for S3's ``s3:TestEvent`` and for other events."""
    payload = invocation.get("requestPayload")
    if not (isinstance(payload, dict) and "Records" in payload):
        return []
    return [(source_of(record), _size(record)) for record in S3Event(payload).records
            if record.event_name.startswith("ObjectCreated:")]


def _size(record: S3EventRecord) -> int | None:
    size = record.s3.get_object.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def gave_up_cause(invocation: dict[str, Any]) -> str | None:
    """What ended the last attempt, from an invocation record: the error's type (``ClientError``,
    ``RuntimeError``, ...), ``timeout`` for an attempt that ran out of time, else the record's condition
    (``EventAgeExceeded``). Never the error's message, which may quote content."""
    response = invocation.get("responsePayload")
    if isinstance(response, dict):
        if isinstance(response.get("errorType"), str):
            return response["errorType"][:100]
        if "timed out" in str(response.get("errorMessage", "")):
            return "timeout"
    condition = (invocation.get("requestContext") or {}).get("condition")
    return condition[:100] if isinstance(condition, str) else None
