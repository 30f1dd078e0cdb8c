"""The S3 path stores one result per object version (docs/reliability.md): concurrent deliveries of one
event race on a conditional write and only the first one stores, the others find this version's result
there; the stored bytes carry no timings."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from compactor.budget import Deadline
from compactor.object_jobs import Defaults, Source, run_job
from compactor_aws.s3_store import S3Store

from .conftest import BUCKET, put_and_event, transcript


class BarrierStore(S3Store):
    """An S3 store whose reads wait for every delivery: all of them have read the object and compact it
    before any of them writes, the worst interleaving of concurrent deliveries."""

    def __init__(self, client: Any, parties: int) -> None:
        super().__init__(client)
        self.barrier = threading.Barrier(parties, timeout=60)
        self.writes: list[bool] = []
        self.lock = threading.Lock()

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.barrier.wait()
        return super().get(*args, **kwargs)

    def put_if(self, *args: Any, **kwargs: Any) -> bool:
        # S3 evaluates a conditional write atomically; moto checks and then writes, unlocked, so two threads
        # can both pass its check. The lock gives moto S3's atomicity; the condition still decides.
        with self.lock:
            written = super().put_if(*args, **kwargs)
        self.writes.append(written)
        return written


def deliver_concurrently(client: Any, body: bytes, parties: int = 3) -> tuple[list[Any], BarrierStore]:
    event = put_and_event(client, "incoming/t.json", body)
    obj = event["Records"][0]["s3"]["object"]
    source = Source(BUCKET, "incoming/t.json", obj["versionId"], obj["eTag"], obj["sequencer"])
    store = BarrierStore(client, parties)
    outcomes: list[Any] = []

    def one() -> None:
        outcomes.append(asyncio.run(run_job(source, store=store, defaults=Defaults({"mode": "seal"}),
                                            deadline=Deadline.after_ms(30_000))))

    threads = [threading.Thread(target=one) for _ in range(parties)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes, store


def test_concurrent_deliveries_store_one_result(s3: Any) -> None:
    outcomes, store = deliver_concurrently(s3, json.dumps({"messages": transcript(), "keep_recent": 2}).encode())
    assert sorted(o.result for o in outcomes) == ["compacted", "skipped", "skipped"]
    assert {o.reason for o in outcomes if o.result == "skipped"} == {"already processed"}
    assert store.writes.count(True) == 1
    versions = s3.list_object_versions(Bucket=BUCKET, Prefix="compacted/")["Versions"]
    assert len(versions) == 1  # one stored result, never overwritten


def test_concurrent_deliveries_of_bad_content_store_one_failure(s3: Any) -> None:
    outcomes, store = deliver_concurrently(s3, b'{"messages": "not a list"}')
    assert sorted(o.result for o in outcomes) == ["failed", "skipped", "skipped"]
    assert {o.reason for o in outcomes if o.result == "skipped"} == {"already processed"}
    assert store.writes.count(True) == 1
    assert len(s3.list_object_versions(Bucket=BUCKET, Prefix="failed/")["Versions"]) == 1


def test_stored_results_carry_no_timings(s3: Any) -> None:
    body = json.dumps({"messages": transcript(), "keep_recent": 2}).encode()
    event = put_and_event(s3, "incoming/t.json", body)
    obj = event["Records"][0]["s3"]["object"]
    source = Source(BUCKET, "incoming/t.json", obj["versionId"], obj["eTag"], obj["sequencer"])
    asyncio.run(run_job(source, store=S3Store(s3), defaults=Defaults({"mode": "seal"}),
                        deadline=Deadline.after_ms(30_000)))
    stored = s3.get_object(Bucket=BUCKET, Key="compacted/t.json")["Body"].read()
    assert b"latency_ms" not in stored and json.loads(stored)["x_router"]["decision_trace"]["decision_path"]
