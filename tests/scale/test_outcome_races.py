"""Outcomes settling while readers run (docs/scale.md, "One outcome per object"): a writer may delete the object a
poll has just looked up."""

from __future__ import annotations

from typing import Any

import pytest

from compactor import jobs
from compactor_cli.lambda_runtime import LocalLambdaContext

from .test_job_outcomes import ATTEMPTS, handlers, run, transcript_body, upload, versioned  # noqa: F401 (fixtures)
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

