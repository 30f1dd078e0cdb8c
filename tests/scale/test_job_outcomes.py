"""One outcome per object version (docs/scale.md, "One outcome per object"): whatever the order in which the inline S3
job, its on-failure destination, a windowed job's steps and a newer upload's job end, ``compacted/<rel>`` and
``failed/<rel>`` hold at most one outcome between them, the newest version's, and an upload's status is that one.
The windowed job runs in moto's Step Functions interpreter, its tasks dispatched in-process (as in
``test_windowed_state_machine``)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import S3Event

from compactor import jobs, large_jobs, object_jobs
from compactor.large_jobs import job_id, job_input
from compactor.object_jobs import Source
from compactor_aws.s3_events import source_of
from compactor_cli.lambda_runtime import LocalLambdaContext
from s3.conftest import s3_event

from .test_jobs_routes import invocation_record
from .test_windowed_state_machine import (ACCOUNT, BUCKET, aws, big, quick_assemble_retry,  # noqa: F401 (fixtures)
                                          worker)

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
ATTEMPTS = 3  # S3CompactFunction's first attempt and its two retries


def listing(aws: dict[str, Any], rel: str) -> list[str]:
    """The outcomes a caller listing the output prefixes finds for ``rel``."""
    found = []
    for prefix in (object_jobs.COMPACTED_PREFIX, object_jobs.FAILED_PREFIX):
        contents = aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix=prefix + rel).get("Contents", [])
        found += [item["Key"] for item in contents if item["Key"] == prefix + rel]
    return found


def wait(aws: dict[str, Any], arn: str, name: str) -> str:
    execution = f"{arn.replace(':stateMachine:', ':execution:')}:{name}"
    stop = time.monotonic() + 120
    while (status := aws["sfn"].describe_execution(executionArn=execution)["status"]) == "RUNNING":
        assert time.monotonic() < stop
        time.sleep(0.05)
    return status


class HeldStep:
    """Holds every ``step`` (``plan``, ``assemble``...) of the windowed jobs before it runs until :meth:`release`
    (through the dispatch's ``fail`` hook, which is asked before each invocation and answers no); ``reached`` is set
    once one is held."""

    def __init__(self, aws: dict[str, Any], step: str) -> None:
        self.step = step
        self.reached, self.released = threading.Event(), threading.Event()
        aws["dispatch"].fail = self.hold

    def hold(self, event: dict[str, Any]) -> bool:
        if event.get("step") == self.step:
            self.reached.set()
            assert self.released.wait(120)
        return False

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def handlers(aws, monkeypatch, s3_module, gave_up_module) -> dict[str, Any]:
    """The S3 function (starting windowed jobs past 100 kB) and its on-failure destination, on moto."""
    from compactor_aws import windowed_jobs

    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    monkeypatch.setattr(gave_up_module, "store", s3_module.S3Store())
    monkeypatch.setenv(windowed_jobs.STATE_MACHINE_ENV, aws["arn"])
    monkeypatch.setenv(windowed_jobs.INLINE_MAX_ENV, "100000")
    return {"s3": s3_module, "gave_up": gave_up_module}


def upload(aws: dict[str, Any], key: str, body: bytes, sequencer: str) -> dict[str, Any]:
    put = aws["s3"].put_object(Bucket=BUCKET, Key=key, Body=body)
    return s3_event(BUCKET, key, version_id=put.get("VersionId"), etag=put["ETag"].strip('"'), size=len(body),
                    sequencer=sequencer)


def test_a_windowed_job_whose_inline_attempts_all_crash_ends_with_its_own_outcome_only(aws, big, handlers, monkeypatch):
    """Every attempt of the S3 function crashed after its StartExecution (its answer lost, say): Lambda gave up and
    its destination recorded ``failed/<rel>`` while the windowed job ran, so the job read ``failed``, then, once the job
    wrote ``compacted/<rel>``, ``done`` beside a failure that stayed in ``failed/``. The destination now leaves a
    version whose windowed job runs (or ended done) to that job: ``running``, then ``done``, one object."""
    from compactor_aws import windowed_jobs

    real = windowed_jobs.launcher

    def answer_lost(*args: Any, **kwargs: Any) -> Any:
        launch = real(*args, **kwargs)

        def started_then_crashed(source: Source) -> Any:
            launch(source)  # started, or found already started
            raise TimeoutError("the StartExecution answer was lost")
        return started_then_crashed

    monkeypatch.setattr(windowed_jobs, "launcher", answer_lost)
    gate = HeldStep(aws, "assemble")
    _, created = jobs.create_upload(handlers["s3"].store, BUCKET, "key-a", lambda *args: "https://presigned")
    rel = jobs.upload_rel("key-a", created["job_id"])
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")

    def status() -> str:
        return jobs.job_status(handlers["s3"].store, BUCKET, "key-a", created["job_id"], lambda *a: "https://x")[1][
            "status"]

    for _ in range(ATTEMPTS):
        with pytest.raises(TimeoutError):
            handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", timeout_s=300))
    assert gate.reached.wait(120)  # the job runs, held before its assemble
    gave_up = handlers["gave_up"].handler(invocation_record(event, TimeoutError("x")),
                                          LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert [r["result"] for r in gave_up["results"]] == ["skipped"]
    assert status() == "running" and listing(aws, rel) == []  # before: failed, failed/<rel> written
    gate.release()
    assert wait(aws, aws["arn"], job_id(source_of(S3Event(event).record))) == "SUCCEEDED"
    assert status() == "done" and listing(aws, rel) == ["compacted/" + rel]  # before: and failed/<rel>
    late = handlers["gave_up"].handler(invocation_record(event, TimeoutError("x")),
                                       LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert [r["result"] for r in late["results"]] == ["skipped"]  # the job ended done: its outcome stands
    assert listing(aws, rel) == ["compacted/" + rel]


def test_a_failure_recorded_before_the_windowed_job_was_seen_gives_way_to_its_result(aws, big, handlers):
    """A ``failed/<rel>`` of the same version already there when the windowed job writes its result (recorded by a
    destination that could not see the job, or before this rule) is deleted once the result is written: the result
    supersedes it. Before, both stayed."""
    rel = "same.json"
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    source = source_of(S3Event(event).record)
    object_jobs.record_gave_up(handlers["gave_up"].store, source, "TimeoutError")
    assert listing(aws, rel) == ["failed/" + rel]
    aws["sfn"].start_execution(stateMachineArn=aws["arn"], name=job_id(source),
                               input=json.dumps(job_input(source, max_concurrency=3)))
    assert wait(aws, aws["arn"], job_id(source)) == "SUCCEEDED"
    assert listing(aws, rel) == ["compacted/" + rel]


def test_an_older_versions_windowed_result_never_stands_beside_a_newer_versions_failure(aws, big, handlers, worker):
    """Version 1 (large) runs as a windowed job; version 2 is sent meanwhile and its content is bad, recorded at once in
    ``failed/``. When version 1's job ended it wrote its result to ``compacted/`` beside version 2's failure: a caller
    listing ``compacted/`` took an outcome of an upload replaced since. Its result is now withdrawn (the job is
    ``skipped``, not billed), and only version 2's failure stays."""
    gate = HeldStep(aws, "assemble")
    rel = "replaced.json"
    first = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    context = LocalLambdaContext("S3CompactFunction", timeout_s=300)
    assert handlers["s3"].handler(first, context)["results"][0]["result"] == "started"
    assert gate.reached.wait(120)
    second = upload(aws, "incoming/" + rel, b'{"messages": "no"}', "0065A1B2C3D4E5F602")
    assert handlers["s3"].handler(second, context)["results"][0]["result"] == "failed"
    gate.release()
    assert wait(aws, aws["arn"], job_id(source_of(S3Event(first).record))) == "SUCCEEDED"
    assert listing(aws, rel) == ["failed/" + rel]  # before: and compacted/<rel>, version 1's
    assert json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="failed/" + rel)["Body"].read())["status"] == 422
    ended = [e for e in aws["dispatch"].events if e.get("step") == "assemble"]
    assert ended and all(e["job"]["sequencer"] == "0065A1B2C3D4E5F601" for e in ended)
    # RecordFailure after that assemble (its answer lost, or its billing failed after its retries): the job's result
    # was withdrawn, not failed. It recorded a failure (refused: a newer version's is there) and counted the job
    # failed with a 500 record; it now finds the withdrawn result and answers skipped, as the assemble did.
    job = ended[-1]["job"]
    context = LocalLambdaContext("WindowJobFunction", timeout_s=900)
    recorded = worker.handler({"step": "fail", "job": job, "error": {"Error": "States.TaskFailed"}}, context)
    assert (recorded["result"], recorded.get("reason")) == ("skipped", object_jobs.NEWER)
    assert listing(aws, rel) == ["failed/" + rel]


@pytest.fixture
def versioned(aws) -> dict[str, Any]:
    aws["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    return aws


def transcript_body(keep_recent: int = 1) -> bytes:
    from s3.conftest import transcript

    return json.dumps({"messages": transcript(), "mode": "decision", "keep_recent": keep_recent}).encode()


def run(handlers: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    return handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", timeout_s=300))["results"][0]


def test_a_newer_versions_failure_replaces_an_older_versions_result(versioned, handlers):
    """Version 1 was compacted, version 2's content is bad: ``failed/<rel>`` answers for the key now, and
    ``compacted/<rel>`` no longer holds version 1's result beside it (it did: two outcomes, the older one where a caller
    looks for results; the bucket keeps it as a noncurrent version)."""
    rel = "redo.json"
    assert run(handlers, upload(versioned, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F601"))[
        "result"] == "compacted"
    second = run(handlers, upload(versioned, "incoming/" + rel, b'{"messages": "no"}', "0065A1B2C3D4E5F602"))
    assert (second["result"], second["status"]) == ("failed", 422)
    assert listing(versioned, rel) == ["failed/" + rel]  # before: and compacted/<rel>


def test_an_older_versions_late_failure_never_stands_beside_a_newer_versions_result(versioned, handlers):
    """An older version's event processed after the newer version's result was written (events arrive in any order):
    its bad content was recorded in ``failed/`` beside the newer result. It is now withdrawn: ``skipped``."""
    rel = "late.json"
    first = upload(versioned, "incoming/" + rel, b'{"messages": "no"}', "0065A1B2C3D4E5F601")
    second = upload(versioned, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F602")
    assert run(handlers, second)["result"] == "compacted"
    late = run(handlers, first)
    assert (late["result"], late["reason"]) == ("skipped", object_jobs.NEWER)
    assert listing(versioned, rel) == ["compacted/" + rel]  # before: and failed/<rel>, version 1's


def test_a_destination_firing_after_a_newer_versions_result_records_nothing(versioned, handlers, monkeypatch):
    """Lambda gave up on version 1 (every attempt crashed), but its destination ran after version 2's result was
    written: it wrote version 1's failure to ``failed/`` beside version 2's result. It now records nothing."""
    from .test_jobs_routes import Crashes

    rel = "crashed.json"
    first = upload(versioned, "incoming/" + rel, transcript_body(1), "0065A1B2C3D4E5F601")
    Crashes(ATTEMPTS).install(monkeypatch)
    for _ in range(ATTEMPTS):
        with pytest.raises(RuntimeError):
            run(handlers, first)
    assert run(handlers, upload(versioned, "incoming/" + rel, transcript_body(2), "0065A1B2C3D4E5F602"))[
        "result"] == "compacted"
    gave_up = handlers["gave_up"].handler(invocation_record(first, RuntimeError("x")),
                                          LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert [(r["result"], r["reason"]) for r in gave_up["results"]] == [("skipped", object_jobs.NEWER)]
    assert listing(versioned, rel) == ["compacted/" + rel]  # before: and failed/<rel>, version 1's


def test_the_same_bytes_sent_again_are_running_until_their_own_outcome(versioned, handlers, monkeypatch):
    """An upload whose job crashed on every attempt is sent again as it was (a retried PUT: a new version, the same
    ETag). Its status read the first upload's ``failed`` at once, while the new upload's job ran: a result counts
    only for the upload it was computed from, and the ETag alone did not tell them apart."""
    from .test_jobs_routes import Crashes

    _, created = jobs.create_upload(handlers["s3"].store, BUCKET, "key-a", lambda *args: "https://presigned")
    key = "incoming/" + jobs.upload_rel("key-a", created["job_id"])

    def status() -> str:
        return jobs.job_status(handlers["s3"].store, BUCKET, "key-a", created["job_id"], lambda *a: "https://x")[1][
            "status"]

    first = upload(versioned, key, transcript_body(), "0065A1B2C3D4E5F601")
    Crashes(ATTEMPTS).install(monkeypatch)
    for _ in range(ATTEMPTS):
        with pytest.raises(RuntimeError):
            run(handlers, first)
    handlers["gave_up"].handler(invocation_record(first, RuntimeError("x")),
                                LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert status() == "failed"
    again = upload(versioned, key, transcript_body(), "0065A1B2C3D4E5F602")
    assert again["Records"][0]["s3"]["object"]["eTag"] == first["Records"][0]["s3"]["object"]["eTag"]
    assert status() == "running"  # before: failed, the first upload's
    assert run(handlers, again)["result"] == "compacted"
    assert status() == "done"


@pytest.mark.parametrize("failures, steps", [(1, ["assemble", "assemble"]), (2, ["assemble", "assemble", "fail"])])
def test_a_step_retried_after_the_result_was_written_settles_its_outcome(aws, big, handlers, monkeypatch, failures,
                                                                        steps):
    """The last assemble wrote the result and failed before it settled the other place (a stale failure of this
    version there): its retry, or RecordFailure after its retries, found the result and answered done, the failure left
    beside it. They now settle it as the first attempt would have."""
    arn = quick_assemble_retry(aws)
    real, failed = large_jobs.settle, []

    def crashing(*args: Any) -> Any:
        if len(failed) < failures:
            failed.append(args)
            raise ConnectionError("the connection was reset")
        return real(*args)

    monkeypatch.setattr(large_jobs, "settle", crashing)
    rel = "retried.json"
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    source = source_of(S3Event(event).record)
    object_jobs.record_gave_up(handlers["gave_up"].store, source, "TimeoutError")
    aws["sfn"].start_execution(stateMachineArn=arn, name=job_id(source),
                               input=json.dumps(job_input(source, max_concurrency=3)))
    assert wait(aws, arn, job_id(source)) == "SUCCEEDED"
    assert [e["step"] for e in aws["dispatch"].events if "step" in e][-len(steps):] == steps
    assert len(failed) == failures and listing(aws, rel) == ["compacted/" + rel]  # before: and failed/<rel>


@pytest.mark.parametrize("status, owned", [("RUNNING", True), ("PENDING_REDRIVE", True), ("SUCCEEDED", True),
                                           ("FAILED", False), ("TIMED_OUT", False), ("ABORTED", False), (None, False)])
def test_the_destination_defers_only_to_an_execution_that_writes_its_outcome(status: str | None, owned: bool) -> None:
    """A windowed job's execution that failed, timed out or was aborted may have written no outcome (RecordFailure
    catches a step's failure, not the execution's end): the destination records the failure then."""
    from compactor_aws import windowed_jobs

    class Missing(Exception):
        pass

    class StepFunctions:
        exceptions = type("Exceptions", (), {"ExecutionDoesNotExist": Missing})
        asked: list[str] = []

        def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803 - boto3's name
            self.asked.append(executionArn)
            if status is None:
                raise Missing(executionArn)
            return {"status": status}

    source = Source(BUCKET, "incoming/x.json", "v1", "e1", "01")
    machine = f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:compactor-WindowedJob"
    client = StepFunctions()
    assert windowed_jobs.owns(source, {windowed_jobs.STATE_MACHINE_ENV: machine}, client) is owned
    assert client.asked == [f"arn:aws:states:us-east-1:{ACCOUNT}:execution:compactor-WindowedJob:{job_id(source)}"]
    assert windowed_jobs.owns(source, {}, client) is False and len(client.asked) == 1  # no state machine: no job


@pytest.mark.parametrize("size, asked", [(99_999, False), (100_000, False), (100_001, True), (None, True)])
def test_the_destination_asks_about_a_windowed_job_only_for_an_object_that_could_have_one(size, asked) -> None:
    """The S3 function reads an object of at most ``COMPACTOR_S3_INLINE_MAX_BYTES`` inline and starts no windowed job
    for it: the destination knows that from the event's size, and no longer asks Step Functions (one DescribeExecution
    for every object it was handed, most of them small). An event without a size is asked about, as before."""
    from compactor_aws import windowed_jobs

    class StepFunctions:
        exceptions = type("Exceptions", (), {"ExecutionDoesNotExist": KeyError})
        asked: list[str] = []

        def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803 - boto3's name
            self.asked.append(executionArn)
            return {"status": "RUNNING"}

    env = {windowed_jobs.STATE_MACHINE_ENV: f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:compactor-WindowedJob",
           windowed_jobs.INLINE_MAX_ENV: "100000"}
    client = StepFunctions()
    assert windowed_jobs.owns(Source(BUCKET, "incoming/x.json", "v1", "e1", "01"), env, client, size=size) is asked
    assert len(client.asked) == int(asked)  # before: asked whatever the size


def test_the_destination_records_a_small_objects_failure_without_asking_step_functions(versioned, handlers,
                                                                                        monkeypatch):
    """Every attempt at a small object crashed: the destination records its failure, and asks Step Functions nothing
    (its event's size is under the inline limit). A large object's is still asked about."""
    from compactor_aws import aws_session

    from .test_jobs_routes import Crashes

    real, described = aws_session.client, []

    class Counting:
        def __init__(self, client: Any) -> None:
            self.client = client

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

        def describe_execution(self, **kwargs: Any) -> Any:
            described.append(kwargs["executionArn"])
            return self.client.describe_execution(**kwargs)

    monkeypatch.setattr(aws_session, "client", lambda service, **kwargs: Counting(real(service, **kwargs))
                        if service == "stepfunctions" else real(service, **kwargs))
    rel = "small.json"
    event = upload(versioned, "incoming/" + rel, transcript_body(), "0065A1B2C3D4E5F601")
    assert event["Records"][0]["s3"]["object"]["size"] < 100_000
    Crashes(ATTEMPTS).install(monkeypatch)
    for _ in range(ATTEMPTS):
        with pytest.raises(RuntimeError):
            run(handlers, event)
    gave_up = handlers["gave_up"].handler(invocation_record(event, RuntimeError("x")),
                                          LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert [(r["result"], r["status"]) for r in gave_up["results"]] == [("failed", 500)]
    assert listing(versioned, rel) == ["failed/" + rel] and described == []  # before: one DescribeExecution
    large = upload(versioned, "incoming/large.json", b" " * 100_001, "0065A1B2C3D4E5F602")
    handlers["gave_up"].handler(invocation_record(large, RuntimeError("x")),
                                LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert len(described) == 1
