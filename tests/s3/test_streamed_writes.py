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
                 failing: frozenset[int] = frozenset(), keep: bool = True, abort_fails: bool = False) -> None:
        self.delay_s, self.barrier, self.failing = delay_s, barrier, failing
        self.keep, self.abort_fails = keep, abort_fails
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
                self.parts[PartNumber] = Body if self.keep else b""
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
        if self.abort_fails:
            raise ConnectionError("the abort failed")

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


def test_a_caller_that_catches_a_failed_part_cannot_complete_the_object_without_it() -> None:
    client = FakeClient(failing=frozenset({2}))
    raised = 0

    with pytest.raises(OSError, match="part 2 failed"):
        with S3Store(client).open_writer("b", "k", content_type="application/json", metadata={}) as out:
            for n in range(12):
                try:
                    out.write(chr(ord("a") + n) * PART)
                except OSError:
                    raised += 1  # every write after the failure raises it again

    assert raised >= 1 and client.calls == ["create", "abort"] and client.completed is None


def test_a_failed_abort_does_not_hide_the_error_that_caused_it() -> None:
    client = FakeClient(failing=frozenset({1}), abort_fails=True)

    with pytest.raises(OSError, match="part 1 failed"):
        write(client, "v" * (PART * 6))

    assert client.calls == ["create", "abort"]


def test_a_writer_holds_its_parts_in_flight_and_the_one_it_fills(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracemalloc

    part = 1 << 20
    monkeypatch.setattr(s3_store, "PART_BYTES", part)
    client = FakeClient(delay_s=0.05, keep=False)
    chunk = "m" * (64 << 10)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with S3Store(client).open_writer("b", "k", content_type="application/json", metadata={}) as out:
            for _ in range(24 * 16):  # 24 parts
                out.write(chunk)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()

    assert client.most == AT_ONCE and len(client.parts) == 24
    # AT_ONCE parts uploading, the one being filled, and one write's text (its str and its bytes), and a margin
    assert peak <= (AT_ONCE + 1) * part + 3 * len(chunk) + (256 << 10), peak / part
