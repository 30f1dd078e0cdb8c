"""The S3 requests of a windowed job's steps (docs/scale.md), counted through a botocore event hook on the
container's S3 client while moto answers them: no step writes an object nothing reads or reads what it has in hand."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from compactor import jobs
from compactor.large_jobs import job_input
from compactor.object_jobs import Source
from compactor_aws import s3_store

from .test_windowed_billing import BUCKET, big, bucket, context, ledger, worker  # noqa: F401 (fixtures)

OUTPUT = re.compile(r"^work/[0-9a-f]+/p\d+/output\.json$")


@contextmanager
def s3_requests() -> Iterator[list[tuple[str, str]]]:
    """``(operation, key)`` of every S3 request the container's client sends meanwhile."""
    sent: list[tuple[str, str]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        sent.append((model.name, params.get("Key", "")))

    events = s3_store.s3_client().meta.events
    events.register("before-parameter-build.s3", record)
    try:
        yield sent
    finally:
        events.unregister("before-parameter-build.s3", record)


def upload_job(s3: Any, caller: str, data: bytes) -> dict[str, Any]:
    """An API upload's windowed job, its execution input as the S3 function starts it (naming its caller)."""
    status, created = jobs.create_upload(s3_store.S3Store(), BUCKET, caller, lambda *args: "https://presigned")
    assert status == 201
    key = "incoming/" + jobs.upload_rel(caller, created["job_id"])
    put = s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    return job_input(Source(BUCKET, key, put.get("VersionId"), put["ETag"].strip('"')), max_concurrency=2,
                     caller=caller)["job"]


def run_job(worker: ModuleType, job: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Every step of ``job`` in order, its S3 requests by step (``plan``, ``windows``, ``assemble 1``, ...)."""
    steps: dict[str, list[tuple[str, str]]] = {}
    with s3_requests() as steps["plan"]:
        outcome = worker.handler({"step": "plan", "job": job}, context())
    number = 0
    while not outcome["done"]:
        number += 1
        items = json.loads(worker.store.get(BUCKET, outcome["windows_key"], version_id=None,
                                            max_bytes=10_000_000).body)
        with s3_requests() as steps[f"windows {number}"]:
            for item in items:
                worker.handler({"Items": [item], "BatchInput": {"bucket": BUCKET, "caller": job["caller"]}}, context())
        with s3_requests() as steps[f"assemble {number}"]:
            outcome = worker.handler({"step": "assemble", "job": job, "windows_key": outcome["windows_key"]},
                                     context())
    return steps


def test_no_step_writes_an_output_nothing_reads_or_reads_the_caller_it_was_given(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    """A pass that changed nothing keeps its input as the result: its assembled output was stored all the same, and
    never read (one PutObject, or a multipart upload's completion). And the steps that bill read the upload's record
    again for its caller (one GetObject), which the execution's input names: the S3 function read it to start the
    job. The job's result and its bill are the same."""
    caller = "uploaderkeyid"
    job = upload_job(bucket, caller, big)
    steps = run_job(worker, job)
    every = [request for sent in steps.values() for request in sent]
    written = {key for operation, key in every if operation in ("PutObject", "CompleteMultipartUpload")}
    read = {key for operation, key in every if operation == "GetObject"}
    body = json.loads(bucket.get_object(Bucket=BUCKET, Key=job["key"].replace("incoming/", "compacted/", 1))
                      ["Body"].read())
    passes = body["compaction"]["windows"]["passes"]
    assert any(p["output_bytes"] >= p["input_bytes"] for p in passes)  # a pass that changed nothing
    assert len(passes) == len([name for name in steps if name.startswith("assemble")])
    assert {key for key in written if OUTPUT.match(key)} <= read
    assert not [key for _, key in every if key.startswith(jobs.JOBS_PREFIX)]
    (entry,) = ledger(aws)
    assert entry.api_key_id == caller
    with capsys.disabled():
        for name, sent in steps.items():
            print(f"\n{name}: {len(sent)} S3 requests", sorted({operation for operation, _ in sent}))


def test_record_failure_reads_no_record_of_the_caller(aws: dict[str, Any], bucket: Any, worker: ModuleType,
                                                      big: bytes) -> None:
    """RecordFailure after the windows ran observes the job's failure as its caller's: from the execution's input,
    where it read the upload's record again."""
    caller = "uploaderkeyid"
    job = upload_job(bucket, caller, big)
    outcome = worker.handler({"step": "plan", "job": job}, context())
    assert outcome["done"] is False
    with s3_requests() as sent:
        recorded = worker.handler({"step": "fail", "job": job, "error": {"Error": "States.Timeout"}}, context())
    assert recorded["result"] == "failed"
    assert not [key for _, key in sent if key.startswith(jobs.JOBS_PREFIX)]
    assert [operation for operation, _ in sent].count("PutObject") == 1  # failed/<rel>


def test_a_retried_last_assemble_assembles_nothing_again(aws: dict[str, Any], bucket: Any, worker: ModuleType,
                                                         big: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last assemble wrote the result and failed on its ledger write; Step Functions retries it. The retry read
    every window's task and result again and wrote the pass's output and the final run state again, already
    written, to find the result there: it now reads the run state, finds the result written, looks at ``failed/``
    once more (the first attempt may have failed before it did: one outcome per object, docs/scale.md), and bills
    (three requests). The job is billed once, with the first attempt's figures."""
    from .conftest import ledger_down

    job = upload_job(bucket, "uploaderkeyid", big)
    ledger_down(monkeypatch, once=True)
    with pytest.raises(RuntimeError):
        run_job(worker, job)
    key = job["key"].replace("incoming/", "compacted/", 1)
    written = bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    with s3_requests() as sent:
        outcome = worker.handler({"step": "assemble", "job": job}, context())
    assert (outcome["done"], outcome["result"], outcome["key"]) == (True, "compacted", key)
    assert [operation for operation, _ in sent] == ["GetObject", "HeadObject", "HeadObject"]
    assert bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read() == written
    (entry,) = ledger(aws)
    body = json.loads(written)
    assert (entry.api_key_id, entry.bytes_in, entry.bytes_out) == (
        "uploaderkeyid", body["compaction"]["original_bytes"], body["compaction"]["output_bytes"])


def test_record_failure_finds_the_final_state_an_earlier_assemble_saved_apart(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """An execution whose last assemble ran before the final run state moved into ``state.json`` saved it in
    ``work/<job>/final.json``: RecordFailure (after that assemble failed on its ledger write) still finds the job
    delivered and bills it, writing no failure."""
    from compactor.large_jobs import FINAL

    from .conftest import ledger_down

    job = upload_job(bucket, "uploaderkeyid", big)
    ledger_down(monkeypatch, once=True)
    with pytest.raises(RuntimeError):
        run_job(worker, job)
    state_key = f"work/{job['job_id']}/state.json"
    saved = json.loads(bucket.get_object(Bucket=BUCKET, Key=state_key)["Body"].read())
    bucket.put_object(Bucket=BUCKET, Key=f"work/{job['job_id']}/final.json", Body=json.dumps(saved.pop(FINAL)))
    bucket.put_object(Bucket=BUCKET, Key=state_key, Body=json.dumps(saved))
    outcome = worker.handler({"step": "fail", "job": job, "error": {"Error": "RuntimeError"}}, context())
    assert (outcome["done"], outcome["result"]) == (True, "compacted")
    assert not bucket.list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("Contents")
    (entry,) = ledger(aws)
    assert entry.api_key_id == "uploaderkeyid"


def test_a_last_assemble_retried_after_its_result_write_failed_writes_the_undisturbed_result(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last assemble saved the final run state beside the run state it read, then failed writing the result (S3
    unavailable, the step's time out): Step Functions retries it, and the retry assembles the last pass again from
    that run state. Finishing the pass appended to the lists the run state it read held (its passes, fallbacks and
    reasons), so the state saved again held the last pass already: the retry's result listed that pass twice in
    ``compaction.windows.passes``, and its record counted that pass's fallbacks twice (the billing line, metrics)."""
    reference = upload_job(bucket, "otherkeyid", big)
    run_job(worker, reference)
    expected = json.loads(bucket.get_object(Bucket=BUCKET, Key=reference["key"].replace("incoming/", "compacted/", 1))
                          ["Body"].read())
    job = upload_job(bucket, "uploaderkeyid", big)
    real, failures = worker.store.open_writer, [1]

    def open_writer(bucket_name: str, key: str, **options: Any) -> Any:
        if key.startswith("compacted/") and failures[0]:
            failures[0] -= 1
            raise RuntimeError("S3 unavailable")
        return real(bucket_name, key, **options)

    monkeypatch.setattr(worker.store, "open_writer", open_writer)
    with pytest.raises(RuntimeError):
        run_job(worker, job)
    saved = json.loads(bucket.get_object(Bucket=BUCKET, Key=f"work/{job['job_id']}/state.json")["Body"].read())
    outcome = worker.handler({"step": "assemble", "job": job, "windows_key": saved["windows_key"]}, context())

    assert (outcome["done"], outcome["result"]) == (True, "compacted")
    body = json.loads(bucket.get_object(Bucket=BUCKET, Key=outcome["key"])["Body"].read())
    assert body["compaction"]["windows"] == expected["compaction"]["windows"]
    assert body == expected
    entries = {entry.api_key_id: entry for entry in ledger(aws)}
    assert (entries["uploaderkeyid"].model_calls, entries["uploaderkeyid"].bytes_out) == (
        entries["otherkeyid"].model_calls, entries["otherkeyid"].bytes_out)
