"""``S3Store.open_writer``: a streamed write's parts upload while its text goes on, up to ``PARTS_AT_ONCE`` at
once, and a failed part aborts the upload (docs/performance.md, "Streamed writes")."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from compactor_aws import s3_store
from compactor_aws.s3_store import S3Store

from .conftest import BUCKET

PART = 16  # bytes: the fake client has no minimum part size
AT_ONCE = 4  # docs/performance.md: 4 parts of 8 MiB in flight


class FakeClient:
    """Records the multipart calls; each part waits ``delay_s`` (a later part less, so they end out of order),
    or at ``barrier`` when one is given, and the parts numbered in ``failing`` fail."""

    def __init__(self, delay_s: float = 0.02, barrier: threading.Barrier | None = None,
                 failing: frozenset[int] = frozenset()) -> None:
        self.delay_s, self.barrier, self.failing = delay_s, barrier, failing
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.calls: list[str] = []
        self.parts: dict[int, bytes] = {}
        self.completed: list[dict[str, Any]] | None = None
        self.put: bytes | None = None

    def create_multipart_upload(self, **params: Any) -> dict[str, Any]:
        self.calls.append("create")
        return {"UploadId": "u-1"}

    def upload_part(self, *, PartNumber: int, Body: bytes, UploadId: str, **params: Any) -> dict[str, Any]:
        assert UploadId == "u-1"
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if self.barrier is not None:
                self.barrier.wait()
            time.sleep(self.delay_s / PartNumber)
            if PartNumber in self.failing:
                raise OSError(f"part {PartNumber} failed")
            with self.lock:
                self.parts[PartNumber] = Body
            return {"ETag": f'"e{PartNumber}"'}
        finally:
            with self.lock:
                self.in_flight -= 1

    def complete_multipart_upload(self, *, MultipartUpload: dict[str, Any], **params: Any) -> None:
        assert self.in_flight == 0
        self.calls.append("complete")
        self.completed = MultipartUpload["Parts"]

    def abort_multipart_upload(self, **params: Any) -> None:
        assert self.in_flight == 0  # no part lands after the abort
        self.calls.append("abort")

    def put_object(self, *, Body: bytes, **params: Any) -> None:
        self.calls.append("put")
        self.put = Body


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_store, "PART_BYTES", PART)


def write(client: FakeClient, text: str, chunk: int = 5) -> None:
    with S3Store(client).open_writer("b", "k", content_type="application/json", metadata={}) as out:
        for start in range(0, len(text), chunk):
            out.write(text[start:start + chunk])


def test_parts_upload_side_by_side_while_the_text_goes_on() -> None:
    assert s3_store.PARTS_AT_ONCE == AT_ONCE
    client = FakeClient(barrier=threading.Barrier(AT_ONCE, timeout=10))  # parts in turn would break it

    write(client, "x" * (PART * AT_ONCE))

    assert client.calls == ["create", "complete"]
    assert client.completed == [{"ETag": f'"e{n}"', "PartNumber": n} for n in range(1, AT_ONCE + 1)]


def test_at_most_parts_at_once_upload_and_the_parts_are_listed_in_order() -> None:
    client = FakeClient()
    text = "".join(chr(ord("a") + n % 26) * PART for n in range(13)) + "tail"

    write(client, text)

    assert client.most == AT_ONCE
    assert [part["PartNumber"] for part in client.completed or []] == list(range(1, 15))
    assert b"".join(client.parts[n] for n in range(1, 15)).decode() == text


def test_a_failed_part_fails_the_write_and_aborts_once_the_parts_in_flight_ended() -> None:
    client = FakeClient(failing=frozenset({2}))

    with pytest.raises(OSError, match="part 2 failed"):
        write(client, "y" * (PART * 12))

    assert client.calls == ["create", "abort"] and client.completed is None
    assert len(client.parts) < 12  # the text stopped at the failure: no part after the ones in flight then


def test_a_last_part_that_fails_fails_the_write_at_its_end() -> None:
    client = FakeClient(failing=frozenset({3}))

    with pytest.raises(OSError, match="part 3 failed"):
        write(client, "z" * (PART * 2 + 3))

    assert client.calls == ["create", "abort"]


def test_a_failing_block_aborts_after_the_parts_in_flight() -> None:
    client = FakeClient(delay_s=0.2)

    with pytest.raises(RuntimeError):
        with S3Store(client).open_writer("b", "k", content_type="application/json", metadata={}) as out:
            out.write("w" * (PART * 3))
            raise RuntimeError("the block failed")

    assert client.calls == ["create", "abort"]


def test_a_small_object_is_one_put_without_threads() -> None:
    client = FakeClient()
    before = threading.active_count()

    write(client, "short")

    assert client.calls == ["put"] and client.put == b"short" and threading.active_count() == before


def test_a_streamed_write_on_s3_keeps_its_bytes(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_store, "PART_BYTES", 5 * 1024 * 1024)  # S3's smallest part
    text = "".join(f"{n:08d}" for n in range(3 * 1024 * 1024))  # 24 MiB: five parts
    store = S3Store(s3)

    with store.open_writer(BUCKET, "out.json", content_type="application/json", metadata={"a": "1"}) as out:
        for start in range(0, len(text), 1 << 20):
            out.write(text[start:start + (1 << 20)])

    with store.open(BUCKET, "out.json") as body:
        assert body.read() == text.encode()
    assert store.head_metadata(BUCKET, "out.json") == {"a": "1"}
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
