"""Outcomes settling while other writers and readers run (docs/scale.md, "One outcome per object"): a writer may
delete the object a poll has just looked up; two writes of a key may hold the same bytes."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from compactor import jobs, large_jobs, object_jobs
from compactor.object_jobs import Source
from compactor_cli.lambda_runtime import LocalLambdaContext

from .test_job_outcomes import ATTEMPTS, handlers, listing, run, transcript_body, upload, versioned  # noqa: F401 (fixtures)
from .test_jobs_routes import Crashes, invocation_record
from .test_windowed_state_machine import BUCKET, aws, worker  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def test_a_failure_deleted_between_the_polls_look_and_its_read_is_not_a_500(versioned, handlers, monkeypatch):
    """The destination recorded the upload's failure (every attempt crashed); a later delivery of its event wrote the
    result, which deletes that failure (a result supersedes a failure of the same upload). A poll that looked the
    failure up just before read it after it was deleted: S3's NoSuchKey went up as a 500. It now looks again and finds
    the result."""
    store = handlers["s3"].store
    _, created = jobs.create_upload(store, BUCKET, "key-a", lambda *args: "https://presigned")
    rel = jobs.upload_rel("key-a", created["job_id"])
    first = upload(versioned, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F601")
    Crashes(ATTEMPTS).install(monkeypatch)  # then the compaction runs
    for _ in range(ATTEMPTS):
        with pytest.raises(RuntimeError):
            run(handlers, first)
    handlers["gave_up"].handler(invocation_record(first, RuntimeError("x")),
                                LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))

    def status() -> dict[str, Any]:
        return jobs.job_status(store, BUCKET, "key-a", created["job_id"], lambda *a: "https://x")[1]

    assert status()["status"] == "failed"
    delivered: list[dict[str, Any]] = []

    def delivered_first(read: Any) -> Any:
        def reading(bucket: str, key: str, **kwargs: Any) -> Any:
            if key == "failed/" + rel and not delivered:  # the event delivered again, between the look and the read
                delivered.append(run(handlers, first))
            return read(bucket, key, **kwargs)
        return reading

    monkeypatch.setattr(store, "get", delivered_first(store.get))
    monkeypatch.setattr(store, "get_if_exists", delivered_first(store.get_if_exists))
    assert status()["status"] == "done"
    assert [outcome["result"] for outcome in delivered] == ["compacted"]



def test_the_same_bytes_written_again_meanwhile_keep_their_result_in_a_bucket_without_versioning(aws, handlers,
                                                                                                 monkeypatch):
    """Without versioning a write was told apart by its ETag alone. Version 1 was compacted; version 2, bad content,
    was read, and before its failure was written the key was written again with version 1's bytes (a revert). That
    third write's event was answered as version 1's redelivered one ("already processed": its idempotency record and
    its result had the same ETag), and version 2's failure then deleted version 1's result as an older version's: the
    key's object, a good transcript, was left with version 2's failure alone (an upload's job ``running`` for ever).
    The same ETag with another S3 sequencer is another write: its job writes its own result, version 2's gives way."""
    rel = "revert.json"
    first = upload(aws, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F601")
    assert run(handlers, first)["result"] == "compacted"
    second = upload(aws, "incoming/" + rel, b'{"messages": "no"}', "0065A1B2C3D4E5F602")
    store, third = handlers["s3"].store, []
    real_put_if = store.put_if

    def put_if(bucket: str, key: str, body: bytes, **kwargs: Any) -> bool:
        if key == "failed/" + rel and not third:  # version 2 was read; version 1's bytes are written again
            again = upload(aws, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F603")
            assert again["Records"][0]["s3"]["object"]["eTag"] == first["Records"][0]["s3"]["object"]["eTag"]
            job = threading.Thread(target=lambda: third.append(run(handlers, again)))  # its own event loop
            job.start()
            job.join()
        return real_put_if(bucket, key, body, **kwargs)

    monkeypatch.setattr(store, "put_if", put_if)
    second_outcome = run(handlers, second)
    assert [outcome["result"] for outcome in third] == ["compacted"]  # before: skipped, "already processed"
    assert (second_outcome["result"], second_outcome["reason"]) == ("skipped", object_jobs.NEWER)
    assert listing(aws, rel) == ["compacted/" + rel]  # before: failed/<rel> alone
    head = aws["s3"].head_object(Bucket=BUCKET, Key="compacted/" + rel)
    assert head["Metadata"][object_jobs.META_SEQUENCER] == "0065A1B2C3D4E5F603"


def test_a_windowed_job_is_one_write_of_the_key_without_versioning() -> None:
    """Its execution's name: the same bytes written again (another sequencer) were the earlier write's job, so their
    StartExecution answered "already started" and the on-failure destination deferred to the earlier execution. A
    redelivered event (the same sequencer) and a versioned object's version are still one job."""
    unversioned = [Source("b", "incoming/a.json", None, "e1", sequencer) for sequencer in ("01", "02", "02")]
    versioned = [Source("b", "incoming/a.json", "v1", "e1", sequencer) for sequencer in ("01", "02")]
    assert len({large_jobs.job_id(source) for source in unversioned}) == 2
    assert len({large_jobs.job_id(source) for source in versioned}) == 1


class DeletingAfter:
    """An S3 client whose first ``delete_object`` of ``key`` runs ``meanwhile()`` before it is sent: another writer
    between a writer's look at the other place (its HeadObject) and its delete."""

    def __init__(self, client: Any, key: str, meanwhile: Any) -> None:
        self.client, self.key, self.meanwhile, self.deletes = client, key, meanwhile, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def delete_object(self, **kwargs: Any) -> Any:
        if kwargs["Key"] == self.key and not self.deletes:
            self.deletes.append(kwargs)
            self.meanwhile()
        return self.client.delete_object(**kwargs)


def versions(aws: dict[str, Any], key: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The versions of ``key`` and its delete markers."""
    found = aws["s3"].list_object_versions(Bucket=BUCKET, Prefix=key)
    return ([item for item in found.get("Versions", []) if item["Key"] == key],
            [item for item in found.get("DeleteMarkers", []) if item["Key"] == key])


def test_a_delete_never_removes_a_newer_versions_result_of_the_same_bytes(versioned, handlers, monkeypatch):
    """Results are deterministic: two versions of the same transcript have results with the same ETag. Version 2's
    failure looked at ``compacted/<rel>`` (version 1's result, older) and, before its delete, version 3 (version 1's
    bytes again) wrote its result there: the delete, on the ETag it had seen (``If-Match``), removed version 3's result,
    and version 3 had deleted version 2's failure as older, so the key was left with no outcome (an upload's job
    ``running`` for ever). In the versioned bucket the delete names the version looked at: version 3's result stays."""
    from compactor_aws.s3_store import s3_client

    rel = "same-bytes.json"
    first = upload(versioned, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F601")
    assert run(handlers, first)["result"] == "compacted"
    seen = versioned["s3"].head_object(Bucket=BUCKET, Key="compacted/" + rel)["ETag"]
    second = upload(versioned, "incoming/" + rel, b'{"messages": "no"}', "0065A1B2C3D4E5F602")
    third: list[dict[str, Any]] = []

    def version_3_is_compacted() -> None:
        again = upload(versioned, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F603")
        job = threading.Thread(target=lambda: third.append(run(handlers, again)))  # its own event loop
        job.start()
        job.join()

    store = handlers["s3"].store
    client = DeletingAfter(s3_client(), "compacted/" + rel, version_3_is_compacted)
    monkeypatch.setattr(store, "_client", client)
    assert run(handlers, second)["result"] == "failed"
    assert [outcome["result"] for outcome in third] == ["compacted"] and len(client.deletes) == 1
    head = versioned["s3"].head_object(Bucket=BUCKET, Key="compacted/" + rel)  # before: NoSuchKey, a delete marker
    assert head["ETag"] == seen and head["Metadata"][object_jobs.META_SEQUENCER] == "0065A1B2C3D4E5F603"
    assert listing(versioned, rel) == ["compacted/" + rel]


def test_a_deleted_versions_older_outcome_below_it_does_not_come_back(versioned, handlers):
    """Deleting the version looked at makes the one below it current again: version 2's result had replaced version
    1's, so version 3's failure, deleting version 2's result, would have brought version 1's back beside it. It goes
    too, and no delete marker is left behind (the bucket keeps none of these deletes)."""
    rel = "three.json"
    for number, body in ((1, transcript_body(1)), (2, transcript_body(2))):
        assert run(handlers, upload(versioned, "incoming/" + rel, body, f"0065A1B2C3D4E5F60{number}"))[
            "result"] == "compacted"
    assert len(versions(versioned, "compacted/" + rel)[0]) == 2
    assert run(handlers, upload(versioned, "incoming/" + rel, b'{"messages": "no"}', "0065A1B2C3D4E5F603"))[
        "result"] == "failed"
    assert listing(versioned, rel) == ["failed/" + rel]
    assert versions(versioned, "compacted/" + rel) == ([], [])  # before: both versions, under a delete marker


def test_an_outcome_withdrawn_takes_the_older_one_it_had_replaced_with_it(versioned, handlers):
    """A writer withdrawing its own result (a newer version's failure is in ``failed/<rel>``) deletes its version; the
    older version's result it had replaced, current again, goes too."""
    from compactor_aws.s3_store import S3Store

    rel, store = "withdrawn.json", S3Store()
    written = []
    for sequencer in ("0065A1B2C3D4E5F601", "0065A1B2C3D4E5F602"):
        put = versioned["s3"].put_object(Bucket=BUCKET, Key="incoming/" + rel, Body=transcript_body())
        source = Source(BUCKET, "incoming/" + rel, put["VersionId"], put["ETag"].strip('"'), sequencer)
        metadata = object_jobs.result_metadata(source, object_jobs.StoredObject(b"", put["VersionId"], put["ETag"]),
                                               200)
        versioned["s3"].put_object(Bucket=BUCKET, Key="compacted/" + rel, Body=b"{}", Metadata=metadata)
        written.append(source)
    newer = versioned["s3"].put_object(Bucket=BUCKET, Key="incoming/" + rel, Body=b"[]")
    later = Source(BUCKET, "incoming/" + rel, newer["VersionId"], newer["ETag"].strip('"'), "0065A1B2C3D4E5F603")
    versioned["s3"].put_object(Bucket=BUCKET, Key="failed/" + rel, Body=b"{}", Metadata=object_jobs.result_metadata(
        later, object_jobs.StoredObject(b"", newer["VersionId"], newer["ETag"]), 422))

    withdrawn = object_jobs.settle(store, written[1], "compacted/" + rel)

    assert withdrawn is not None and withdrawn.reason == object_jobs.NEWER
    assert listing(versioned, rel) == ["failed/" + rel]  # before: version 1's result, current again
    assert versions(versioned, "compacted/" + rel) == ([], [])
