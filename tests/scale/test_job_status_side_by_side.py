"""``GET /v1/jobs/{id}`` looks its job's record and three places up at once (one S3 round trip, not four),
and answers as when it looked them up in turn: done before failed before running before awaiting upload, a
result counting only when it was computed from the upload now under ``incoming/`` (tests/scale/test_jobs_routes.py)."""

from __future__ import annotations

import json
import threading

import pytest

from compactor.jobs import _record_key, job_status, upload_rel
from compactor.object_jobs import COMPACTED_PREFIX, FAILED_PREFIX, INCOMING_PREFIX, ObjectHead, StoredObject

CALLER, JOB = "key-a", "0123456789abcdef0123456789abcdef"


class GatedStore:
    """Objects by key; every ``head`` waits until four are in flight at once (one after another, the
    first would wait out the barrier's timeout and break it)."""

    def __init__(self, keys: set[str], *, failing: str | None = None) -> None:
        self.objects = {key: json.dumps({"status": 502, "error": {"code": "x"}}).encode() for key in keys}
        self.barrier = threading.Barrier(4, timeout=10)
        self.failing = failing  # a key whose lookup raises (S3 throttling, a network error)
        self.read: list[str] = []

    def head(self, bucket: str, key: str) -> ObjectHead | None:
        self.barrier.wait()
        if key == self.failing:
            raise ConnectionError(f"lookup of {key} failed")
        return ObjectHead({}, "etag") if key in self.objects else None

    def get(self, bucket: str, key: str, *, version_id: str | None, max_bytes: int) -> StoredObject:
        self.read.append(key)
        return StoredObject(self.objects[key], None, "etag")

    def get_if_exists(self, bucket: str, key: str, *, max_bytes: int) -> StoredObject | None:
        return self.get(bucket, key, version_id=None, max_bytes=max_bytes) if key in self.objects else None


def _presign(operation: str, key: str, expires: int, content_type: str | None) -> str:
    return f"https://signed/{key}"


REL = upload_rel(CALLER, JOB)
RECORD, COMPACTED, FAILED, INCOMING = (_record_key(CALLER, JOB), COMPACTED_PREFIX + REL, FAILED_PREFIX + REL,
                                       INCOMING_PREFIX + REL)


@pytest.mark.parametrize(("keys", "status"), [
    ({RECORD}, "awaiting_upload"),
    ({RECORD, INCOMING}, "running"),
    ({RECORD, INCOMING, FAILED}, "failed"),
    ({RECORD, INCOMING, FAILED, COMPACTED}, "done"),
    ({RECORD, COMPACTED}, "done"),
])
def test_the_four_lookups_go_at_once_and_the_first_place_found_answers(keys: set[str], status: str) -> None:
    code, body = job_status(GatedStore(keys), "bucket", CALLER, JOB, _presign)

    assert code == 200 and body["status"] == status and body["job_id"] == JOB
    if status == "done":
        assert body["result"]["url"] == f"https://signed/{COMPACTED}"
    if status == "failed":
        assert body["error"] == {"code": "x"} and body["error_status"] == 502


def test_without_its_record_a_job_is_unknown_whatever_its_places_hold() -> None:
    store = GatedStore({INCOMING, FAILED, COMPACTED})

    code, body = job_status(store, "bucket", CALLER, JOB, _presign)

    assert code == 404 and "status" not in body
    assert store.read == []  # the failure's body is read only for a job with its record


@pytest.mark.parametrize(("keys", "failing", "status"), [
    ({INCOMING}, INCOMING, 404),  # no record: its places are not needed
    ({INCOMING}, COMPACTED, 404),
    ({RECORD, COMPACTED}, FAILED, "done"),  # done before failed and running: failed is not needed
])
def test_a_failed_lookup_the_answer_does_not_need_changes_nothing(keys: set[str], failing: str,
                                                                   status: int | str) -> None:
    code, body = job_status(GatedStore(keys, failing=failing), "bucket", CALLER, JOB, _presign)

    assert (code if status == 404 else body["status"]) == status


@pytest.mark.parametrize(("keys", "failing"), [
    ({RECORD, INCOMING}, RECORD),
    ({RECORD, INCOMING}, COMPACTED),  # running is known only once done and failed are ruled out
    ({RECORD, INCOMING}, FAILED),
    ({RECORD}, INCOMING),
    ({RECORD, COMPACTED}, INCOMING),  # a result counts only when it is the upload's now under incoming/
    ({RECORD, FAILED}, INCOMING),
])
def test_a_failed_lookup_the_answer_needs_fails_the_request(keys: set[str], failing: str) -> None:
    with pytest.raises(ConnectionError, match="lookup of"):
        job_status(GatedStore(keys, failing=failing), "bucket", CALLER, JOB, _presign)


def test_a_malformed_id_looks_nothing_up() -> None:
    store = GatedStore({RECORD})
    store.barrier = None  # type: ignore[assignment]  (a lookup would fail on it)

    assert job_status(store, "bucket", CALLER, "../x", _presign)[0] == 404
