"""Windowed jobs (docs/scale.md) are billed like inline S3 jobs: one ledger entry per object version,
after ``compacted/<rel>`` is stored, to the uploading key for API uploads; a retried assemble step
never bills twice. The state machine's steps are driven in order through ``functions/window_jobs``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compactor import billing as core_billing
from compactor import container, jobs
from compactor.large_jobs import job_input
from compactor.object_jobs import Source
from compactor_aws.ledger import _entry
from compactor_aws.s3_store import S3Store
from compactor_cli.lambda_runtime import LocalLambdaContext, load_handler

from scale import transcripts
from fakes.routers import frozen_router

from .conftest import ledger_down, table_entries

REPO = Path(__file__).resolve().parents[2]
BUCKET = "compactor-windowed-billing-test"


@pytest.fixture(scope="module")
def worker() -> ModuleType:
    load_handler(REPO / "functions" / "window_jobs", "window_jobs.handler")
    return sys.modules["window_jobs"]


@pytest.fixture(scope="module")
def big() -> bytes:
    return json.dumps(list(transcripts.messages(400_000))).encode()


@pytest.fixture
def bucket(aws: dict[str, Any], worker: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Any:
    aws["s3"].create_bucket(Bucket=BUCKET)
    aws["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    monkeypatch.setattr(worker, "store", S3Store())
    monkeypatch.setattr(container.ROUTER, "value", frozen_router())
    monkeypatch.delenv("COMPACTOR_S3_DEFAULTS", raising=False)
    return aws["s3"]


def context() -> LocalLambdaContext:
    return LocalLambdaContext("WindowJobFunction", timeout_s=900)


def start(s3: Any, key: str, data: bytes) -> dict[str, Any]:
    put = s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    source = Source(BUCKET, key, put.get("VersionId"), put["ETag"].strip('"'))
    return job_input(source, max_concurrency=2)["job"]


def run_to_assemble(worker: ModuleType, job: dict[str, Any]) -> None:
    """plan, then every pass's windows and assemble, up to (not including) the last assemble."""
    outcome = worker.handler({"step": "plan", "job": job}, context())
    assert outcome["done"] is False
    while True:
        items = json.loads(worker.store.get(BUCKET, outcome["windows_key"], version_id=None,
                                            max_bytes=10_000_000).body)
        for item in items:
            worker.handler({"Items": [item], "BatchInput": {"bucket": BUCKET}}, context())
        outcome = worker.handler({"step": "assemble", "job": job}, context())
        if outcome["done"]:
            assert outcome == {"done": True, "result": "compacted", "key": outcome["key"]}  # facts not in output
            return


def ledger(aws: dict[str, Any]) -> list[Any]:
    return [_entry(item) for item in table_entries(aws["dynamodb"])]


def billing_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [record.billing for record in caplog.records if getattr(record, "record_type", None) == "billing"]


def windows_run_late(worker: ModuleType, s3: Any, key: str, data: bytes
                     ) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """A job of ``data`` at ``key``, planned, each of its windows run with no time left (each window's model nodes
    are skipped and fall back, the window kept): the job, its plan step's outcome and its windows."""
    import asyncio

    from compactor.budget import Deadline

    job = start(s3, key, data)
    outcome = worker.handler({"step": "plan", "job": job}, context())
    items = json.loads(worker.store.get(BUCKET, outcome["windows_key"], version_id=None, max_bytes=10_000_000).body)
    for item in items:
        asyncio.run(worker.large_jobs.run_window(worker.store, BUCKET, item, router=container.ROUTER.value,
                                                 deadline=Deadline.after_ms(0)))
    return job, outcome, items


def window_results(worker: ModuleType, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each window's stored result."""
    return [json.loads(worker.store.get(BUCKET, item["result_key"], version_id=None,
                                        max_bytes=10_000_000).body) for item in items]


def test_a_windowed_job_bills_once(aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes,
                                   caplog: pytest.LogCaptureFixture) -> None:
    job = start(bucket, "incoming/big.json", big)
    run_to_assemble(worker, job)
    worker.handler({"step": "assemble", "job": job}, context())  # a retried (or redelivered) assemble

    entries = ledger(aws)
    assert len(entries) == 1
    entry = entries[0]
    body = json.loads(bucket.get_object(Bucket=BUCKET, Key="compacted/big.json")["Body"].read())
    assert entry.api_key_id == f"s3:{BUCKET}" and entry.route == "s3_compact" and entry.mode == "decision"
    assert entry.bytes_in == body["compaction"]["original_bytes"] > entry.bytes_out == body["compaction"]["output_bytes"]
    assert entry.model_calls > 0
    assert entry.entry_id.startswith("s3:")
    (line,) = billing_lines(caplog)  # the billing log line too: once, with the entry's figures
    assert (line["api_key_id"], line["bytes_in"], line["bytes_out"], line["model_calls"]) == (
        entry.api_key_id, entry.bytes_in, entry.bytes_out, entry.model_calls)


def test_a_ledger_failure_fails_assemble_and_its_retry_bills_once(aws: dict[str, Any], bucket: Any,
                                                                  worker: ModuleType, big: bytes,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    job = start(bucket, "incoming/retried.json", big)
    ledger_down(monkeypatch, once=True)
    with pytest.raises(RuntimeError):
        run_to_assemble(worker, job)  # Step Functions retries the failed assemble step
    assert bucket.head_object(Bucket=BUCKET, Key="compacted/retried.json")  # stored before billing
    assert ledger(aws) == []

    for _ in range(2):
        assert worker.handler({"step": "assemble", "job": job}, context())["result"] == "compacted"
    assert len(ledger(aws)) == 1
    # observed once, by the first attempt (not billed then); the retry that billed it wrote the entry's line
    assert [line["billed"] for line in billing_lines(caplog)] == [False, True]


def test_an_upload_bills_its_key_and_the_ledger_total_is_the_sum(aws: dict[str, Any], bucket: Any,
                                                                 worker: ModuleType, big: bytes) -> None:
    caller = "abc123keyid"
    status, created = jobs.create_upload(worker.store, BUCKET, caller, lambda *args: "https://presigned")
    assert status == 201
    upload = start(bucket, "incoming/" + jobs.upload_rel(caller, created["job_id"]), big)
    direct = start(bucket, "incoming/direct.json", json.dumps(list(transcripts.messages(300_000))).encode())
    for job in (upload, direct):
        run_to_assemble(worker, job)

    entries = ledger(aws)
    assert sorted(e.api_key_id for e in entries) == sorted([caller, f"s3:{BUCKET}"])
    today = core_billing.utc_now_iso()[:10]
    days = core_billing.usage_body(caller, today, today, billing_ledger())["days"]
    mine = [e for e in entries if e.api_key_id == caller]
    assert days[0]["calls"] == 1 and days[0]["bytes_in"] == mine[0].bytes_in
    assert days[0]["model_calls"] == mine[0].model_calls
    every = core_billing.totals_by_key(entries)
    assert sum(t.bytes_in for ts in every.values() for t in ts) == sum(e.bytes_in for e in entries)
    assert sum(t.calls for ts in every.values() for t in ts) == len(entries) == 2
    # another caller's job id does not make its uploader someone else
    assert jobs.upload_caller(worker.store, BUCKET, jobs.upload_rel("other", created["job_id"])) is None


def billing_ledger() -> Any:
    from compactor_aws import billing

    return billing.backends().ledger


def test_every_line_of_a_job_step_names_the_job(aws: dict[str, Any], bucket: Any, worker: ModuleType,
                                                big: bytes) -> None:
    """The billing line of a windowed job, and each step's line, carry the job id (the execution's name) and its
    object; they used to be on the step's own line only (not on the billing record), and never the bucket."""
    import io

    job = start(bucket, "incoming/named.json", big)
    written = io.StringIO()  # what the function writes, formatted when written
    stream = worker.logger.registered_handler.setStream(written)
    try:
        run_to_assemble(worker, job)
        worker.logger.info("after the job")  # the next invocation's lines name no job of this one
    finally:
        worker.logger.registered_handler.setStream(stream)
    lines = [json.loads(line) for line in written.getvalue().splitlines()]

    (billing,) = [line for line in lines if line.get("record_type") == "billing"]
    steps = [line for line in lines if line["message"] == "windowed job step"]
    assert len(steps) >= 2
    for line in [billing, *steps]:
        assert (line["job_id"], line["bucket"], line["key"], line["version_id"]) == (
            job["job_id"], BUCKET, "incoming/named.json", job["version_id"])
    assert lines[-1]["message"] == "after the job" and "job_id" not in lines[-1] and "key" not in lines[-1]


def s3_metrics(output: Any) -> list[str]:
    from observability.conftest import metric_names

    return sorted(name for blob in output.emf for name in metric_names(blob) if name.startswith("S3"))


def test_a_job_whose_every_window_failed_is_a_failure_recorded_once_and_not_billed(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every window's worker failed (none wrote a result): nothing was compacted. The job used to write the
    transcript unchanged to ``compacted/`` with status 200 and bill it; it now ends in ``failed/`` with the 500 the
    caller reads there, its billing line and call metrics carry that status, it is not billed, and a retried
    assemble step records, counts and bills nothing more."""
    import logging

    from observability.conftest import Output, value

    job = start(bucket, "incoming/nothing.json", big)
    outcome = worker.handler({"step": "plan", "job": job}, context())
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        for _ in range(2):  # the step, then Step Functions' retry of it
            done = worker.handler({"step": "assemble", "job": job, "windows_key": outcome["windows_key"]},
                                  context())
            assert (done["done"], done["result"]) == (True, "failed")
    output = Output(worker, caplog, capsys)
    failure = json.loads(bucket.get_object(Bucket=BUCKET, Key="failed/nothing.json")["Body"].read())
    assert failure["status"] == 500 and failure["error"]["code"] == "job_failed"
    assert not bucket.list_objects_v2(Bucket=BUCKET, Prefix="compacted/").get("Contents")
    assert ledger(aws) == []
    (line,) = output.billing()
    assert (line["status"], line["route"], line["model_calls"], line["cost_known"]) == (500, "s3_compact", 0, False)
    assert (line["bytes_out"], line["bytes_saved"], line["target_met"]) == (None, None, None)  # nothing delivered
    assert value(output.call_blob(), "Calls") == 1
    assert s3_metrics(output) == ["S3ObjectsFailed"]


def test_a_retried_assemble_counts_the_object_once(aws: dict[str, Any], bucket: Any, worker: ModuleType,
                                                   big: bytes, caplog: pytest.LogCaptureFixture,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Step Functions retries a step whose answer was lost (a timeout after it ran): the retried assemble counted
    ``S3ObjectsCompacted`` again, and a retried RecordFailure ``S3ObjectsFailed``: one object, two outcomes."""
    import logging

    from observability.conftest import Output

    job = start(bucket, "incoming/counted.json", big)
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        run_to_assemble(worker, job)
        worker.handler({"step": "assemble", "job": job}, context())
    output = Output(worker, caplog, capsys)
    assert s3_metrics(output) == ["S3ObjectsCompacted"] and len(output.billing()) == 1

    failed = start(bucket, "incoming/failing.json", big)
    worker.handler({"step": "plan", "job": failed}, context())
    capsys.readouterr()
    for _ in range(2):
        assert worker.handler({"step": "fail", "job": failed, "error": {"Error": "States.Timeout"}},
                              context())["result"] == "failed"
    assert s3_metrics(Output(worker, caplog, capsys)) == ["S3ObjectsFailed"]


def test_a_job_whose_ledger_write_failed_on_every_assemble_is_billed_by_record_failure(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The ledger write failed on the assemble step and its two retries: the state machine's RecordFailure step then
    wrote ``failed/<rel>`` beside the delivered ``compacted/<rel>`` and the job was never billed. RecordFailure now
    finds the job delivered: it writes no failure and bills the job (the same entry, the facts kept by the first
    attempt); while the ledger still fails it fails too (Step Functions retries it, and a failed execution can be
    redriven from it), never dropping the entry."""
    job = start(bucket, "incoming/unbilled.json", big)
    down = ledger_down(monkeypatch)
    with pytest.raises(RuntimeError):
        run_to_assemble(worker, job)
    for _ in range(2):  # the state machine's two retries of the step on States.TaskFailed
        with pytest.raises(RuntimeError):
            worker.handler({"step": "assemble", "job": job}, context())
    error = {"Error": "RuntimeError", "Cause": "DynamoDB unavailable"}
    with pytest.raises(RuntimeError):  # RecordFailure while the table is still down: retried, the entry kept
        worker.handler({"step": "fail", "job": job, "error": error}, context())
    assert ledger(aws) == []

    down[0] = False
    outcome = worker.handler({"step": "fail", "job": job, "error": error}, context())
    assert (outcome["done"], outcome["result"]) == (True, "compacted")
    assert not bucket.list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("Contents")
    body = json.loads(bucket.get_object(Bucket=BUCKET, Key="compacted/unbilled.json")["Body"].read())
    (entry,) = ledger(aws)
    assert (entry.api_key_id, entry.bytes_in, entry.bytes_out) == (
        f"s3:{BUCKET}", body["compaction"]["original_bytes"], body["compaction"]["output_bytes"])
    assert entry.model_calls > 0
    # observed once, by the first attempt (not billed then); the step that billed it wrote the entry's line
    assert [line["billed"] for line in billing_lines(caplog)] == [False, True]


def test_a_job_stopped_after_its_result_was_written_is_billed_once_by_its_end(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The last assemble wrote the result and its ledger write failed; an operator stopped the execution before its
    retry (RecordFailure never ran): nothing billed the delivered result, and nothing recorded the stopped job. Its
    ABORTED event (template.yaml's ExecutionEnded rule) runs the ``fail`` step: it bills the job once however often the
    event comes, and writes no failure beside the result (docs/scale.md#one-outcome-per-object)."""
    job = start(bucket, "incoming/stopped.json", big)
    down = ledger_down(monkeypatch)
    with pytest.raises(RuntimeError):
        run_to_assemble(worker, job)
    down[0] = False
    execution = f"arn:aws:states:us-east-1:123456789012:execution:compactor-WindowedJob:{job['job_id']}"
    ended = {"version": "0", "id": "e-1", "detail-type": "Step Functions Execution Status Change", "source": "aws.states",
             "account": "123456789012", "region": "us-east-1", "resources": [execution],
             "detail": {"executionArn": execution, "status": "ABORTED", "name": job["job_id"],
                        "stateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:compactor-WindowedJob",
                        "input": json.dumps({"job": job, "max_concurrency": 2}), "inputDetails": {"included": True}}}
    for _ in range(2):  # EventBridge delivers at least once
        outcome = worker.handler(ended, context())
        assert (outcome["done"], outcome["result"]) == (True, "compacted")
    assert not bucket.list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("Contents")
    (entry,) = ledger(aws)
    assert entry.api_key_id == f"s3:{BUCKET}" and entry.model_calls > 0
    # observed once, by the assemble (not billed then); the end that billed it wrote the entry's line
    assert [line["billed"] for line in billing_lines(caplog)] == [False, True]


def test_an_older_versions_job_whose_result_a_newer_one_kept_is_not_billed(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, caplog: pytest.LogCaptureFixture) -> None:
    """A job ending after a newer version of its key was compacted keeps the newer result (``skipped``): nothing it
    computed was delivered. The inline job bills such a job nothing (docs/billing.md: a call is billed when its
    result was written); the windowed job billed it. It is now observed (its billing line) and not billed."""
    from compactor.object_jobs import META_SEQUENCER

    job = start(bucket, "incoming/raced.json", big)
    job["sequencer"] = "0065A1"
    for prefix in ("compacted/", "failed/"):  # the newer version's result and failure, as the inline job stores them
        bucket.put_object(Bucket=BUCKET, Key=prefix + "raced.json", Body=b"{}",
                          Metadata={META_SEQUENCER: "0065B2", "source-version-id": "newer"})
    done = worker.handler({"step": "plan", "job": job}, context())
    while not done["done"]:
        for item in json.loads(worker.store.get(BUCKET, done["windows_key"], version_id=None,
                                                max_bytes=10_000_000).body):
            worker.handler({"Items": [item], "BatchInput": {"bucket": BUCKET}}, context())
        done = worker.handler({"step": "assemble", "job": job}, context())
    assert (done["done"], done["result"], done["reason"]) == (True, "skipped", "a newer version was processed")
    assert bucket.get_object(Bucket=BUCKET, Key="compacted/raced.json")["Body"].read() == b"{}"
    assert ledger(aws) == []
    (line,) = billing_lines(caplog)
    assert line["status"] == 200 and line["model_calls"] > 0  # what it computed, observed as the inline job's is


def test_a_job_that_fails_after_its_windows_ran_is_recorded_with_its_failures_status(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A step failed after its retries (an assemble that kept failing) once the windows had run, paying for their
    model calls: RecordFailure wrote ``failed/<rel>`` and the job was in no billing line or call metric, where an
    inline job's server error is observed with its status. It is now observed once with the 500 the caller reads
    (its cost unknown: the failing pass's windows may have paid), and not billed."""
    import logging

    from compactor.jsonutil import dense_dumps
    from observability.conftest import Output, value

    job = start(bucket, "incoming/crashed.json", big)
    outcome = worker.handler({"step": "plan", "job": job}, context())
    items = json.loads(worker.store.get(BUCKET, outcome["windows_key"], version_id=None, max_bytes=10_000_000).body)
    for item in items:
        worker.handler({"Items": [item], "BatchInput": {"bucket": BUCKET}}, context())
    results = [json.loads(bucket.get_object(Bucket=BUCKET, Key=item["result_key"])["Body"].read()) for item in items]
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        for _ in range(2):  # RecordFailure, then its retry
            failed = worker.handler({"step": "fail", "job": job, "error": {"Error": "States.Timeout"}}, context())
            assert (failed["done"], failed["result"]) == (True, "failed")
    output = Output(worker, caplog, capsys)
    failure = json.loads(bucket.get_object(Bucket=BUCKET, Key="failed/crashed.json")["Body"].read())
    (line,) = output.billing()
    assert (line["status"], line["route"], line["mode"], line["cost_known"]) == (failure["status"], "s3_compact",
                                                                                 "decision", False)
    assert line["bytes_in"] == len(dense_dumps(json.loads(big)).encode())  # the transcript's, as a success's
    # the model calls its windows made, though their pass was never assembled (they used to be left out), and no
    # result's figures: nothing was delivered (it used to say bytes_out = bytes_in and target_met false)
    assert line["model_calls"] == sum(result["model_calls"] for result in results) > 0
    assert line["tokens_in"] == sum(result["tokens_in"] for result in results) > 0
    assert (line["bytes_out"], line["bytes_saved"], line["target_met"]) == (None, None, None)
    assert value(output.call_blob(), "Calls") == 1
    assert s3_metrics(output) == ["S3ObjectsFailed"]
    assert ledger(aws) == []


def test_record_failure_bills_a_delivered_job_from_its_saved_state_when_the_kept_record_is_gone(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts the first attempt kept expire with their idempotency record (a day): a RecordFailure redriven later
    bills the job from the final run state the last assemble saved under ``work/``, the figures of its result."""
    from .conftest import IDEMPOTENCY_TABLE

    job = start(bucket, "incoming/expired.json", big)
    ledger_down(monkeypatch, once=True)
    with pytest.raises(RuntimeError):
        run_to_assemble(worker, job)
    dynamodb = aws["dynamodb"]
    kept = dynamodb.scan(TableName=IDEMPOTENCY_TABLE)["Items"]
    assert kept  # the job's facts, kept by the attempt whose ledger write failed
    for item in kept:
        dynamodb.delete_item(TableName=IDEMPOTENCY_TABLE, Key={"id": item["id"]})

    assert worker.handler({"step": "fail", "job": job, "error": {"Error": "RuntimeError"}},
                          context())["result"] == "compacted"
    body = json.loads(bucket.get_object(Bucket=BUCKET, Key="compacted/expired.json")["Body"].read())
    (entry,) = ledger(aws)
    assert (entry.bytes_in, entry.bytes_out) == (body["compaction"]["original_bytes"],
                                                 body["compaction"]["output_bytes"])
    assert entry.model_calls > 0
    assert not bucket.list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("Contents")


def test_a_windowed_jobs_fallbacks_are_the_sum_of_its_windows(aws: dict[str, Any], bucket: Any, worker: ModuleType,
                                                              big: bytes, caplog: pytest.LogCaptureFixture) -> None:
    """A window's flow nodes that fell back (here: every model node, skipped past its deadline) are the job's
    fallbacks, as one request's record counts its own: a windowed job's record had none, so its billing line and
    its ``Fallbacks`` metric said 0 whatever its windows' flows did."""
    job, outcome, items = windows_run_late(worker, bucket, "incoming/late.json", big)
    done = worker.handler({"step": "assemble", "job": job, "windows_key": outcome["windows_key"]}, context())
    assert (done["done"], done["result"]) == (True, "compacted")
    results = window_results(worker, items)
    (line,) = billing_lines(caplog)
    assert line["fallbacks"] == sum(len(result.get("fallbacks", ())) for result in results) >= len(items)


def test_record_failure_after_the_result_write_failed_counts_each_windows_fallbacks_once(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The last assemble saved the final run state beside the run state it read, then failed writing the result, and
    the execution failed: RecordFailure observes the job from that run state and the pass's windows. Finishing the
    pass had appended its fallbacks to the run state's own list, so they were counted twice (the billing line and the
    Fallbacks metric)."""
    import logging

    job, outcome, items = windows_run_late(worker, bucket, "incoming/unwritten.json", big)
    real = worker.store.open_writer

    def open_writer(bucket_name: str, key: str, **options: Any) -> Any:
        if key.startswith("compacted/"):
            raise RuntimeError("S3 unavailable")
        return real(bucket_name, key, **options)

    monkeypatch.setattr(worker.store, "open_writer", open_writer)
    with pytest.raises(RuntimeError):
        worker.handler({"step": "assemble", "job": job, "windows_key": outcome["windows_key"]}, context())
    with caplog.at_level(logging.INFO):
        failed = worker.handler({"step": "fail", "job": job, "error": {"Error": "RuntimeError"}}, context())

    assert (failed["done"], failed["result"]) == (True, "failed")
    results = window_results(worker, items)
    (line,) = billing_lines(caplog)
    assert line["fallbacks"] == sum(len(result.get("fallbacks", ())) for result in results) >= len(items)


def test_a_result_written_after_its_stopped_execution_was_recorded_failed_is_billed_once(
        aws: dict[str, Any], bucket: Any, worker: ModuleType, big: bytes, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """An operator stopped the execution while its last assemble ran (StopExecution does not stop a Lambda
    invocation): the ABORTED event's ``fail`` step recorded ``failed/<rel>`` and observed the failure, then the
    assemble wrote the result, which supersedes that failure (docs/scale.md#one-outcome-per-object), and billed it.
    Its billing replayed the failure's kept record (nothing to bill): the result was delivered, read ``done``, and
    never billed. It is now billed once, and its outcome counted."""
    import logging

    from compactor import large_jobs
    from observability.conftest import Output

    job = start(bucket, "incoming/stopped-late.json", big)
    execution = f"arn:aws:states:us-east-1:123456789012:execution:compactor-WindowedJob:{job['job_id']}"
    ended = {"version": "0", "id": "e-2", "detail-type": "Step Functions Execution Status Change", "source": "aws.states",
             "account": "123456789012", "region": "us-east-1", "resources": [execution],
             "detail": {"executionArn": execution, "status": "ABORTED", "name": job["job_id"],
                        "stateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:compactor-WindowedJob",
                        "input": json.dumps({"job": job, "max_concurrency": 2}), "inputDetails": {"included": True}}}
    real, stopped = large_jobs._write_result, []

    def stopped_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not stopped:  # the execution is stopped, and its event handled, before this step writes the result
            stopped.append(worker.handler(ended, context()))
        return real(*args, **kwargs)

    monkeypatch.setattr(large_jobs, "_write_result", stopped_meanwhile)
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        run_to_assemble(worker, job)
        worker.handler(ended, context())  # EventBridge delivers at least once
    assert [outcome["result"] for outcome in stopped] == ["failed"]
    assert not bucket.list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("Contents")
    body = json.loads(bucket.get_object(Bucket=BUCKET, Key="compacted/stopped-late.json")["Body"].read())
    (entry,) = ledger(aws)  # before: none
    assert (entry.api_key_id, entry.bytes_in, entry.bytes_out) == (
        f"s3:{BUCKET}", body["compaction"]["original_bytes"], body["compaction"]["output_bytes"])
    output = Output(worker, caplog, capsys)
    assert [line["status"] for line in output.billing()] == [500, 200]  # the failure recorded, then the result
    assert s3_metrics(output) == ["S3ObjectsCompacted", "S3ObjectsFailed"]
