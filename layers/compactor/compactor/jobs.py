"""Upload jobs (docs/scale.md): ``POST /v1/uploads`` and ``GET /v1/jobs/{id}``, storage-agnostic.

A job is one object under ``incoming/``: the S3 path compacts it (inline, or as a windowed job when it
is large) into ``compacted/<rel>`` or records ``failed/<rel>``; its status is read off those objects, so
API uploads and objects written straight to the bucket share one job model. An API upload is
``incoming/uploads/<caller>/<id>.json`` (``<caller>`` a digest of the API key id, ``<id>`` random), with
a record ``jobs/<caller>/<id>.json`` so unknown ids are 404; another caller's id is unknown to you.
Presigning is the adapter's (``presign(method, key, expires_s, content_type)`` -> URL). A deployment may expire
uploads and their outcomes after ``COMPACTOR_TRANSCRIPT_RETENTION_DAYS`` (the template's ``TranscriptRetentionDays``,
an S3 lifecycle rule); records under ``jobs/`` expire after 30 days, so a job whose data is gone answers 410.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from compactor.object_jobs import (
    COMPACTED_PREFIX,
    FAILED_PREFIX,
    INCOMING_PREFIX,
    JSON_CONTENT_TYPE,
    META_ETAG,
    META_VERSION,
    NO_VERSION,
    ObjectHead,
    ObjectStore,
    encode,
    normalize_etag,
)

UPLOADS = "uploads/"
JOBS_PREFIX = "jobs/"
URL_EXPIRES_S = 900
JOB_ID = re.compile(r"^[0-9a-f]{32}$")
FAILURE_READ_MAX_BYTES = 1_000_000
RETENTION_ENV = "COMPACTOR_TRANSCRIPT_RETENTION_DAYS"
DAY_S = 86_400

Presign = Callable[[str, str, int, str | None], str]


def _caller_segment(caller: str) -> str:
    return hashlib.sha256(caller.encode("utf-8")).hexdigest()[:24]


def upload_rel(caller: str, job_id: str) -> str:
    """``<rel>`` of an API upload: the key under ``incoming/`` (and ``compacted/``, ``failed/``)."""
    return f"{UPLOADS}{_caller_segment(caller)}/{job_id}.json"


def _record_key(caller: str, job_id: str) -> str:
    return f"{JOBS_PREFIX}{_caller_segment(caller)}/{job_id}.json"


def create_upload(store: ObjectStore, bucket: str, caller: str, presign: Presign, *,
                  new_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> tuple[int, dict[str, Any]]:
    """``POST /v1/uploads``: a new job and the presigned PUT its transcript goes to (201)."""
    job_id = new_id()
    key = INCOMING_PREFIX + upload_rel(caller, job_id)
    store.put(bucket, _record_key(caller, job_id),
              encode({"job_id": job_id, "created_at": int(time.time()), "api_key_id": caller}),
              content_type=JSON_CONTENT_TYPE, metadata={})
    return 201, {
        "job_id": job_id,
        "status": "awaiting_upload",
        "upload": {"url": presign("put_object", key, URL_EXPIRES_S, JSON_CONTENT_TYPE), "method": "PUT",
                   "headers": {"Content-Type": JSON_CONTENT_TYPE}, "expires_in": URL_EXPIRES_S},
        "status_url": f"/v1/jobs/{job_id}",
    }


def upload_caller(store: ObjectStore, bucket: str, rel: str) -> str | None:
    """The API key id that created the upload ``<rel>`` (billed for its job, docs/billing.md), or None
    when ``rel`` is not an API upload or its record names no caller."""
    parts = rel.split("/")
    if len(parts) != 3 or parts[0] + "/" != UPLOADS or not parts[2].endswith(".json"):
        return None
    segment, job_id = parts[1], parts[2][:-len(".json")]
    if not JOB_ID.match(job_id):
        return None
    found = store.get_if_exists(bucket, f"{JOBS_PREFIX}{segment}/{job_id}.json", max_bytes=FAILURE_READ_MAX_BYTES)
    if found is None:
        return None
    record = json.loads(found.body)
    caller = record.get("api_key_id") if isinstance(record, dict) else None
    return caller if isinstance(caller, str) and _caller_segment(caller) == segment else None


def retention_days(environ: Mapping[str, str]) -> int:
    """Days the deployment keeps uploads and their outcomes (``RETENTION_ENV``); 0, keep them, when unset or not a
    positive whole number."""
    value = environ.get(RETENTION_ENV, "").strip()
    return int(value) if value.isdigit() else 0


def job_status(store: ObjectStore, bucket: str, caller: str, job_id: str, presign: Presign, *,
               retention_days: int = 0, now: Callable[[], float] = time.time,
               looked_again: bool = False) -> tuple[int, dict[str, Any]]:
    """``GET /v1/jobs/{id}``: ``awaiting_upload``, ``running``, ``done`` (a presigned GET of the
    ``/v1/compact`` response body) or ``failed`` (the recorded error and its status). The job's record and its
    three places are looked up side by side: one round trip instead of four for a job still running (they are
    the caller's own keys; docs/scale.md, "Uploads through the API"). An unknown id is a 404 whatever its
    places hold. An upload can be sent again (its URL stays valid until it expires), so a result counts only
    when it was computed from the upload now under ``incoming/`` (its ``source-etag``): a newer upload whose
    result is not written yet is ``running``, never the older upload's outcome. A lookup that failed fails the
    request only when the answer needs it. A failure deleted between its look-up and its read (a result of the same
    upload superseded it, docs/scale.md "One outcome per object") is looked up again, once: S3's NoSuchKey was a
    500. With a retention (``retention_days``), a job that has neither outcome nor upload once its record is that many
    days old is 410 ``job_expired``: its data expired (or it was never uploaded, its upload URL long expired); it read
    ``awaiting_upload`` until its record expired too."""
    from compactor.errors import JobExpired, NotFound
    from compactor.side_by_side import each_side_by_side

    if not JOB_ID.match(job_id):
        return NotFound(f"no job {job_id}").answer()
    rel = upload_rel(caller, job_id)
    keys = (_record_key(caller, job_id), COMPACTED_PREFIX + rel, FAILED_PREFIX + rel, INCOMING_PREFIX + rel)

    def head(key: str) -> ObjectHead | None | Exception:
        try:
            return store.head(bucket, key)
        except Exception as exc:  # noqa: BLE001 - raised below if this lookup decides the answer
            return exc

    record, compacted, failed, incoming = each_side_by_side(head, keys, at_once=len(keys))
    if _found(record) is None:
        return NotFound(f"no job {job_id}").answer()
    body: dict[str, Any] = {"job_id": job_id}
    upload = _found(incoming)
    if _of_upload(_found(compacted), upload):
        url = presign("get_object", COMPACTED_PREFIX + rel, URL_EXPIRES_S, None)
        return 200, {**body, "status": "done", "result": {"url": url, "expires_in": URL_EXPIRES_S}}
    if _of_upload(_found(failed), upload):
        stored = store.get_if_exists(bucket, FAILED_PREFIX + rel, max_bytes=FAILURE_READ_MAX_BYTES)
        if stored is None:  # deleted since it was looked up: its result, or a newer upload's outcome, is there now
            if looked_again:
                return 200, {**body, "status": "running"}
            return job_status(store, bucket, caller, job_id, presign, retention_days=retention_days, now=now,
                              looked_again=True)
        failure = json.loads(stored.body)
        return 200, {**body, "status": "failed", "error": failure.get("error"), "error_status": failure.get("status")}
    if upload is None and retention_days > 0 and _expired(store, bucket, keys[0], retention_days * DAY_S, now()):
        return JobExpired(f"job {job_id} expired: uploads and their results are kept {retention_days} days").answer()
    return 200, {**body, "status": "running" if upload is not None else "awaiting_upload"}


def _expired(store: ObjectStore, bucket: str, record_key: str, retention_s: int, now: float) -> bool:
    """Whether the job's record is at least ``retention_s`` old: its upload and outcome, written after it, may then
    have expired. A record that vanished meanwhile, or names no creation time, is not taken as expired."""
    found = store.get_if_exists(bucket, record_key, max_bytes=FAILURE_READ_MAX_BYTES)
    record = json.loads(found.body) if found is not None else None
    created_at = record.get("created_at") if isinstance(record, dict) else None
    return isinstance(created_at, int | float) and now - created_at >= retention_s


def _of_upload(result: ObjectHead | None, upload: ObjectHead | None) -> bool:
    """Whether a result object exists and was computed from ``upload`` (the object under ``incoming/``): its
    ``source-etag`` is the upload's ETag and, in a versioned bucket, its ``source-version-id`` the upload's version.
    A result without that metadata, or with no upload left to compare with, is taken as it is. The same bytes sent
    again (a retried PUT) are a new version with the same ETag: its job is ``running`` until its own outcome is
    written; before, the earlier upload's ``failed`` answered for it at once."""
    if result is None:
        return False
    source = result.metadata.get(META_ETAG)
    if upload is None or source is None:
        return True
    version = result.metadata.get(META_VERSION)
    return source == normalize_etag(upload.etag) and (
        upload.version_id in (None, NO_VERSION) or version in (None, NO_VERSION) or version == upload.version_id)


def _found(looked_up: ObjectHead | None | Exception) -> ObjectHead | None:
    """A lookup's answer, read when the status needs it: a failed lookup's error is raised then, not before."""
    if isinstance(looked_up, Exception):
        raise looked_up
    return looked_up
