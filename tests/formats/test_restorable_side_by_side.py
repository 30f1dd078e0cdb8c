"""A request's originals are written and read side by side, not one request after another (docs/archives.md,
docs/performance.md "Restorable archives"): each is an S3 round trip deployed, and 128 of them one after another
took over 4 s."""

from __future__ import annotations

import contextvars
import threading
import time
from typing import Any

import boto3
import pytest
from moto import mock_aws

from compactor import archives
from compactor.archives import Archive, expand, handle_of, original_bytes, owner_key, store_originals
from compactor_aws.archive_store import S3ArchiveStore

CALLER = "key-a"
REQUEST_TAG: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_tag", default=None)


class GatedStore:
    """An archive store whose every call waits at a barrier until ``parties`` calls are in it at once: calls made
    one after another break the barrier (its timeout) instead of passing it. Keeps what it is given."""

    def __init__(self, parties: int, *, failing: str | None = None) -> None:
        self.barrier = threading.Barrier(parties, timeout=10)
        self.failing = failing
        self.lock = threading.Lock()
        self.data: dict[tuple[str, str], bytes] = {}
        self.calls: list[tuple[str, str]] = []
        self.tags: set[str | None] = set()

    def _enter(self, kind: str, handle: str) -> None:
        with self.lock:
            self.calls.append((kind, handle))
            self.tags.add(REQUEST_TAG.get())
        self.barrier.wait()

    def put(self, owner: str, handle: str, data: bytes) -> None:
        self._enter("put", handle)
        if handle == self.failing:
            raise RuntimeError("the store is down")
        with self.lock:
            self.data[(owner, handle)] = data

    def get(self, owner: str, handle: str) -> bytes | None:
        self._enter("get", handle)
        with self.lock:
            return self.data.get((owner, handle))


class CountingStore:
    """Counts the calls in it at once (each takes ``delay_s``)."""

    def __init__(self, delay_s: float = 0.02) -> None:
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.data: dict[tuple[str, str], bytes] = {}

    def _counted(self, work: Any) -> Any:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(self.delay_s)
            return work()
        finally:
            with self.lock:
                self.in_flight -= 1

    def put(self, owner: str, handle: str, data: bytes) -> None:
        self._counted(lambda: self.data.__setitem__((owner, handle), data))

    def get(self, owner: str, handle: str) -> bytes | None:
        return self._counted(lambda: self.data.get((owner, handle)))


def _units(count: int, *, repeat_first: bool = False) -> tuple[list[Any], list[dict[str, Any]]]:
    """``count`` one-item units and their manifest (every unit summarized, with its handle); ``repeat_first``:
    the last unit is the first one again (the same handle twice)."""
    items: list[Any] = [{"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i}"} for i in range(count)]
    if repeat_first:
        items[-1] = dict(items[0])
    manifest = [{"start": i, "end": i + 1, "action": "summarize", "handle": handle_of(items[i:i + 1])}
                for i in range(count)]
    return items, manifest


def _stored(store: Any, items: list[Any], manifest: list[dict[str, Any]]) -> None:
    for entry in manifest:
        store.data[(owner_key(CALLER), entry["handle"])] = original_bytes(items[entry["start"]:entry["end"]])


def test_a_requests_originals_are_written_side_by_side() -> None:
    items, manifest = _units(8)
    store = GatedStore(parties=8)

    store_originals(Archive(store, CALLER), items, manifest)  # one after another, the first write waits 10 s

    assert sorted(store.data) == sorted((owner_key(CALLER), entry["handle"]) for entry in manifest)
    assert all(store.data[(owner_key(CALLER), e["handle"])] == original_bytes(items[e["start"]:e["end"]])
               for e in manifest)


def test_expand_reads_the_originals_side_by_side_and_answers_in_the_callers_order() -> None:
    items, manifest = _units(8)
    store = GatedStore(parties=8)
    _stored(store, items, manifest)
    handles = [entry["handle"] for entry in reversed(manifest)]

    status, body = expand(Archive(store, CALLER), handles)

    assert status == 200
    assert list(body["originals"]) == handles
    assert body["originals"] == {e["handle"]: items[e["start"]:e["end"]] for e in manifest}


def test_at_most_calls_in_flight_at_once() -> None:
    count = archives.ORIGINALS_AT_ONCE + 8
    items, manifest = _units(count)
    store = CountingStore()

    store_originals(Archive(store, CALLER), items, manifest)
    written = store.most
    store.most = 0
    status, body = expand(Archive(store, CALLER), [entry["handle"] for entry in manifest])

    assert status == 200 and len(body["originals"]) == count
    assert 1 < written <= archives.ORIGINALS_AT_ONCE and 1 < store.most <= archives.ORIGINALS_AT_ONCE


def test_the_same_unit_twice_is_written_once() -> None:
    items, manifest = _units(4, repeat_first=True)
    store = GatedStore(parties=3)  # three distinct handles

    store_originals(Archive(store, CALLER), items, manifest)

    assert sorted(handle for _, handle in store.calls) == sorted({entry["handle"] for entry in manifest})


def test_a_failed_write_fails_the_request_once_the_writes_in_flight_have_ended() -> None:
    items, manifest = _units(6)
    store = GatedStore(parties=6, failing=manifest[2]["handle"])

    with pytest.raises(RuntimeError, match="the store is down"):
        store_originals(Archive(store, CALLER), items, manifest)

    assert len(store.data) == 5  # the others, all in flight with it, finished before the error reached the caller


def test_a_malformed_handle_reads_nothing() -> None:
    items, manifest = _units(3)
    store = GatedStore(parties=3)
    _stored(store, items, manifest)

    assert expand(Archive(store, CALLER), [manifest[0]["handle"], "../../etc/passwd"])[0] == 404
    assert store.calls == []


def test_one_unknown_handle_among_many_is_a_404_for_all() -> None:
    items, manifest = _units(4)
    store = GatedStore(parties=4)
    _stored(store, items, manifest)
    del store.data[(owner_key(CALLER), manifest[1]["handle"])]

    status, body = expand(Archive(store, CALLER), [entry["handle"] for entry in manifest])

    assert status == 404 and "originals" not in body


def test_the_callers_context_goes_with_every_call() -> None:
    items, manifest = _units(4)
    store = GatedStore(parties=4)
    token = REQUEST_TAG.set("request-1")
    try:
        store_originals(Archive(store, CALLER), items, manifest)
        expand(Archive(store, CALLER), [entry["handle"] for entry in manifest])
    finally:
        REQUEST_TAG.reset(token)

    assert store.tags == {"request-1"}


@mock_aws
def test_s3_originals_written_and_read_side_by_side() -> None:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="transcripts")
    archive = Archive(S3ArchiveStore("transcripts", client=client), CALLER)
    items, manifest = _units(40)

    store_originals(archive, items, manifest)
    status, body = expand(archive, [entry["handle"] for entry in manifest])

    assert status == 200
    assert body["originals"] == {e["handle"]: items[e["start"]:e["end"]] for e in manifest}
    assert client.list_objects_v2(Bucket="transcripts")["KeyCount"] == 40
