"""A windowed job reads the caller's object several times (plan's scan, its windows, the result when no pass changed
it). In a bucket without versioning the key can be written again between those reads: every read of the caller's
object asks for the ETag the S3 event named (``If-Match``), and a job whose object was replaced ends ``skipped``
(the new object's event starts its own job) instead of cutting windows from one object's messages under a scan
of another's (docs/scale.md, "The S3 path at scale")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compactor import large_jobs
from compactor.object_jobs import Defaults, Source
from compactor_aws.s3_store import S3Store
from scale.test_windowed_side_by_side import BUCKET, _keep_every_window, s3  # noqa: F401  (its moto S3 fixture)


def _job(s3: Any, key: str, body: bytes) -> dict[str, Any]:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    head = s3.head_object(Bucket=BUCKET, Key=key)
    return large_jobs.job_input(Source(BUCKET, key, head.get("VersionId"), head["ETag"].strip('"'), "0065A1"),
                                max_concurrency=4)["job"]


def _replaced_at_read(monkeypatch: pytest.MonkeyPatch, s3: Any, key: str, body: bytes, read: int) -> list[str]:
    """Write ``body`` at ``key`` just before the ``read``-th reading of its messages (1: the first); the keys read."""
    readings: list[str] = []
    messages = large_jobs._messages

    def counted(store: Any, bucket: str, name: str, *args: Any, **options: Any) -> Any:
        readings.append(name)
        if name == key and readings.count(key) == read:
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        return messages(store, bucket, name, *args, **options)

    monkeypatch.setattr(large_jobs, "_messages", counted)
    return readings


def _checked_reads(monkeypatch: pytest.MonkeyPatch, key: str) -> list[bool]:
    """Whether each reading of ``key``'s messages checks its keys, in order."""
    checked: list[bool] = []
    messages = large_jobs._messages

    def counted(store: Any, bucket: str, name: str, *args: Any, **options: Any) -> Any:
        if name == key:
            checked.append(options.get("keys_checked", True))
        return messages(store, bucket, name, *args, **options)

    monkeypatch.setattr(large_jobs, "_messages", counted)
    return checked


def test_an_object_replaced_between_the_scan_and_the_windows_ends_the_job_skipped(
        s3: Any, sessions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, plan's windows were cut from the new object's messages under the scan of the old one (its units, pins
    and budget), and the job went on with them."""
    key = "incoming/replaced.json"
    job = _job(s3, key, json.dumps(sessions).encode())
    other = [{"role": "user", "content": "another task"}, *sessions[len(sessions) // 2:]]
    readings = _replaced_at_read(monkeypatch, s3, key, json.dumps(other).encode(), read=2)

    outcome = large_jobs.plan(S3Store(s3), job, Defaults())

    assert readings.count(key) == 2  # the scan, then the windows' read, refused
    assert outcome == {"done": True, "result": "skipped", "reason": large_jobs.REPLACED}
    listed = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert not [item["Key"] for item in listed if item["Key"].startswith(("compacted/", "failed/"))]


def test_an_object_replaced_before_the_result_is_read_again_writes_no_result(
        s3: Any, sessions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A transcript no pass changed is read again for the result: before, the result held the new object's messages
    with the old one's metadata (its ETag), and the new object's own job found it written."""
    key = "incoming/unchanged.json"
    job = _job(s3, key, json.dumps(sessions).encode())
    store = S3Store(s3)
    _keep_every_window(store, large_jobs.plan(store, job, Defaults()))
    _replaced_at_read(monkeypatch, s3, key, json.dumps(sessions[:3]).encode(), read=1)

    outcome = large_jobs.assemble(store, job)

    assert (outcome["result"], outcome["reason"]) == ("skipped", large_jobs.REPLACED)
    assert "record" in outcome  # its windows ran: observed, not billed, as an older version's job ending late
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="compacted/")
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_an_object_left_alone_is_read_unchecked_after_the_scan(
        s3: Any, sessions: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """An unversioned object's reads after the scan are its bytes (the ETag the event named), so they skip the
    repeated-key check the scan made, as a versioned object's reads do (docs/performance.md, "Streamed reading")."""
    key = "incoming/kept.json"
    job = _job(s3, key, json.dumps(sessions).encode())
    checked = _checked_reads(monkeypatch, key)
    outcome = large_jobs.plan(S3Store(s3), job, Defaults())
    assert outcome["done"] is False and checked == [True, False]


def test_an_event_naming_no_etag_reads_the_key_as_it_is(s3: Any, sessions: list[dict[str, Any]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an ETag to ask for, every read is of the key as it is then, each checked."""
    key = "incoming/no-etag.json"
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(sessions).encode())
    job = large_jobs.job_input(Source(BUCKET, key, None, ""), max_concurrency=4)["job"]
    checked = _checked_reads(monkeypatch, key)
    outcome = large_jobs.plan(S3Store(s3), job, Defaults())
    assert outcome["done"] is False and checked == [True, True]
