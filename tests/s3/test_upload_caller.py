"""``jobs.upload_caller``: the key id that created an API upload, read in one S3 request (a ``GetObject`` of the
upload's record, where a ``HeadObject`` and then a ``GetObject`` made two)."""

from __future__ import annotations

from typing import Any

from compactor import jobs
from compactor_aws.s3_store import S3Store

from .conftest import BUCKET


class Requests:
    """The S3 operations the client sends."""

    def __init__(self, client: Any) -> None:
        self.sent: list[str] = []
        client.meta.events.register("before-call.s3.*", self.seen)

    def seen(self, model: Any, **_: Any) -> None:
        self.sent.append(model.name)


def test_an_uploads_caller_is_one_request_and_an_unknown_job_one_request_too(s3: Any) -> None:
    store = S3Store(s3)
    status, created = jobs.create_upload(store, BUCKET, "abc123keyid", lambda *args: "https://presigned")
    assert status == 201
    requests = Requests(s3)

    assert jobs.upload_caller(store, BUCKET, jobs.upload_rel("abc123keyid", created["job_id"])) == "abc123keyid"
    assert requests.sent == ["GetObject"]

    requests.sent.clear()
    assert jobs.upload_caller(store, BUCKET, jobs.upload_rel("abc123keyid", "0" * 32)) is None
    assert jobs.upload_caller(store, BUCKET, jobs.upload_rel("other", created["job_id"])) is None
    assert requests.sent == ["GetObject", "GetObject"]

    requests.sent.clear()
    assert jobs.upload_caller(store, BUCKET, "direct.json") is None  # not an API upload: nothing read
    assert requests.sent == []
