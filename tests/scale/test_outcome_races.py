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
