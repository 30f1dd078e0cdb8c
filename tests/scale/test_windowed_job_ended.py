"""A windowed job whose execution ends without its RecordFailure step (an operator's StopExecution, the execution's
TimeoutSeconds, a failure no Catch routes to RecordFailure, RecordFailure's own) is recorded as RecordFailure records it
(docs/scale.md#one-outcome-per-object): template.yaml's ``ExecutionEnded`` rule sends Step Functions' status change
event to ``WindowJobFunction``. Until then nothing wrote ``failed/<rel>`` and the upload read ``running`` forever. The
state machine runs in moto (as in ``test_windowed_state_machine``), the rule's pattern is matched by moto's EventBridge
matcher and the matching event is dispatched in-process to the handler, as often as EventBridge delivers it."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import S3Event
from moto.events.models import EventPattern

from compactor import jobs, object_jobs
from compactor.large_jobs import job_id, job_input
from compactor.object_jobs import Source
from compactor_aws.s3_events import source_of
from compactor_cli.lambda_runtime import LocalLambdaContext
from compactor_cli.sam_template import load_template

from .test_job_outcomes import ATTEMPTS, HeldStep, handlers, listing, upload, wait  # noqa: F401 (fixtures)
from .test_jobs_routes import invocation_record
from .test_windowed_state_machine import (ACCOUNT, BUCKET, REGION, aws, big, definition,  # noqa: F401
                                          state_machine, worker)

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
REPO = Path(__file__).resolve().parents[2]
STATUS_CHANGE = "Step Functions Execution Status Change"


class EventBridge:
    """The ``ExecutionEnded`` rule of template.yaml: its pattern, the state machine's ``Ref`` bound to ``machine``,
    matched as EventBridge matches it, its target the ``window_jobs`` handler, invoked in-process."""

    def __init__(self, worker: Any, machine: str, sfn: Any = None) -> None:
        rule = load_template(REPO / "template.yaml")["Resources"]["WindowJobFunction"]["Properties"]["Events"][
            "ExecutionEnded"]
        assert rule["Type"] == "EventBridgeRule"
        pattern = json.dumps(rule["Properties"]["Pattern"]).replace('{"Ref": "WindowedJobStateMachine"}',
                                                                    json.dumps(machine))
        self.pattern, self.worker, self.sfn = EventPattern(None, json.loads(pattern)), worker, sfn

    def status_change(self, execution_arn: str) -> dict[str, Any]:
        """The event Step Functions sends when the execution's status changed: its ``detail`` is DescribeExecution's."""
        described = self.sfn.describe_execution(executionArn=execution_arn)
        detail = {"executionArn": execution_arn, "stateMachineArn": described["stateMachineArn"],
                  "name": described["name"], "status": described["status"],
                  "startDate": int(described["startDate"].timestamp() * 1000),
                  "stopDate": int(described["stopDate"].timestamp() * 1000) if described.get("stopDate") else None,
                  "input": described["input"], "inputDetails": {"included": True}, "output": None,
                  "outputDetails": None}
        detail.update({key: described[key] for key in ("error", "cause") if described.get(key)})
        return event_of(detail)

    def deliver(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """The handler's answer, or None when the rule does not match the event."""
        if not self.pattern.matches_event(event):
            return None
        return self.worker.handler(json.loads(json.dumps(event)), LocalLambdaContext("WindowJobFunction",
                                                                                     timeout_s=900))


def event_of(detail: dict[str, Any]) -> dict[str, Any]:
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": STATUS_CHANGE, "source": "aws.states",
            "account": ACCOUNT, "time": "2026-12-03T19:00:00Z", "region": REGION,
            "resources": [detail["executionArn"]], "detail": detail}


def execution_arn(machine: str, source: Source) -> str:
    return f"{machine.replace(':stateMachine:', ':execution:')}:{job_id(source)}"


def status_of(store: Any, created: dict[str, Any]) -> dict[str, Any]:
    return jobs.job_status(store, BUCKET, "key-a", created["job_id"], lambda *args: "https://x")[1]


def failure_of(aws: dict[str, Any], rel: str) -> tuple[dict[str, Any], str]:
    stored = aws["s3"].get_object(Bucket=BUCKET, Key=object_jobs.FAILED_PREFIX + rel)
    return json.loads(stored["Body"].read()), stored["ETag"]


def s3_outcomes_counted(out: str) -> list[str]:
    """The S3 object outcomes the handler counted (CloudWatch embedded metric format lines)."""
    names = []
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blob = json.loads(line)
            names += [m["Name"] for d in blob["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]
                      if m["Name"].startswith("S3Objects")]
    return names


def test_an_aborted_job_the_destination_deferred_to_ends_failed_once(aws, big, handlers, worker, monkeypatch, capsys):
    """Every attempt of the S3 function crashed after it started the windowed job; its on-failure destination deferred
    to the running execution, which an operator then stopped. Nothing recorded the upload: ``running`` forever. The
    execution's ABORTED event now records ``failed/<rel>`` (500 ``job_failed``), once however often it comes."""
    from compactor_aws import windowed_jobs

    real = windowed_jobs.launcher

    def answer_lost(*args: Any, **kwargs: Any) -> Any:
        launch = real(*args, **kwargs)

        def started_then_crashed(source: Source) -> Any:
            launch(source)
            raise TimeoutError("the StartExecution answer was lost")
        return started_then_crashed

    monkeypatch.setattr(windowed_jobs, "launcher", answer_lost)
    held = HeldStep(aws, "plan")  # released, it writes its windows under work/, no outcome
    store = handlers["s3"].store
    _, created = jobs.create_upload(store, BUCKET, "key-a", lambda *args: "https://presigned")
    rel = jobs.upload_rel("key-a", created["job_id"])
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    source = source_of(S3Event(event).record)
    for _ in range(ATTEMPTS):
        with pytest.raises(TimeoutError):
            handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", timeout_s=300))
    assert held.reached.wait(120)
    gave_up = handlers["gave_up"].handler(invocation_record(event, TimeoutError("x")),
                                          LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert [r["result"] for r in gave_up["results"]] == ["skipped"]  # deferred to the running execution
    execution = execution_arn(aws["arn"], source)
    aws["sfn"].stop_execution(executionArn=execution, error="Operator", cause="stopped by hand")
    held.release()
    assert wait(aws, aws["arn"], job_id(source)) == "ABORTED"
    assert status_of(store, created)["status"] == "running" and listing(aws, rel) == []

    bridge = EventBridge(worker, aws["arn"], aws["sfn"])
    ended = bridge.status_change(execution)
    capsys.readouterr()
    assert bridge.deliver(ended)["result"] == "failed"  # before: KeyError 'job', nothing recorded
    status = status_of(store, created)
    assert status["status"] == "failed" and status["error_status"] == 500
    failure, etag = failure_of(aws, rel)
    assert failure["error"]["code"] == "job_failed" and "(ABORTED)" in failure["error"]["message"]
    assert bridge.deliver(ended)["result"] == "failed"  # EventBridge delivers at least once
    assert failure_of(aws, rel) == (failure, etag) and listing(aws, rel) == ["failed/" + rel]
    assert s3_outcomes_counted(capsys.readouterr().out) == ["S3ObjectsFailed"]  # counted once
    late = handlers["gave_up"].handler(invocation_record(event, TimeoutError("x")),
                                       LocalLambdaContext("S3CompactGaveUpFunction", timeout_s=60))
    assert [r["result"] for r in late["results"]] == ["skipped"] and failure_of(aws, rel) == (failure, etag)


def test_an_aborted_job_whose_result_was_written_stays_done(aws, big, handlers, worker, monkeypatch):
    """The execution was stopped after its last assemble wrote the result (the step's answer never reached Step
    Functions): the ABORTED event finds the result and writes no failure beside it, however often it comes."""
    real, held, release = worker.run_step, threading.Event(), threading.Event()

    def answer_held(*args: Any) -> dict[str, Any]:
        outcome = real(*args)
        if outcome.get("result") == "compacted":
            held.set()
            assert release.wait(120)
        return outcome

    monkeypatch.setattr(worker, "run_step", answer_held)
    store = handlers["s3"].store
    _, created = jobs.create_upload(store, BUCKET, "key-a", lambda *args: "https://presigned")
    rel = jobs.upload_rel("key-a", created["job_id"])
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    source = source_of(S3Event(event).record)
    aws["sfn"].start_execution(stateMachineArn=aws["arn"], name=job_id(source),
                               input=json.dumps(job_input(source, max_concurrency=3, caller="key-a")))
    assert held.wait(120)
    execution = execution_arn(aws["arn"], source)
    aws["sfn"].stop_execution(executionArn=execution)
    release.set()
    assert wait(aws, aws["arn"], job_id(source)) == "ABORTED"
    bridge = EventBridge(worker, aws["arn"], aws["sfn"])
    ended = bridge.status_change(execution)
    for _ in range(2):
        assert bridge.deliver(ended)["result"] == "compacted"  # before: KeyError 'job'
        assert listing(aws, rel) == ["compacted/" + rel] and status_of(store, created)["status"] == "done"


def test_a_timed_out_job_is_recorded_failed(aws, big, worker):
    """The execution's TimeoutSeconds (an operator's, the template sets none) ended it while a step ran."""
    asl = json.loads(definition())
    asl["TimeoutSeconds"] = 2
    machine = state_machine(aws, "compactor-WindowedJob-timed", asl)
    held = HeldStep(aws, "plan")  # released, it writes its windows under work/, no outcome
    rel = "timed.json"
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    source = source_of(S3Event(event).record)
    aws["sfn"].start_execution(stateMachineArn=machine, name=job_id(source),
                               input=json.dumps(job_input(source, max_concurrency=3)))
    assert held.reached.wait(120)
    assert wait(aws, machine, job_id(source)) == "TIMED_OUT"
    held.release()
    assert listing(aws, rel) == []
    bridge = EventBridge(worker, machine, aws["sfn"])
    assert bridge.deliver(bridge.status_change(execution_arn(machine, source)))["result"] == "failed"
    failure, _ = failure_of(aws, rel)
    assert failure["status"] == 500 and "(TIMED_OUT)" in failure["error"]["message"]


def test_an_execution_that_failed_past_record_failure_is_recorded_failed(aws, big, worker):
    """RecordFailure itself failed (past its retries: none here), so the execution failed with no record."""
    asl = json.loads(definition())
    del asl["States"]["RecordFailure"]["Retry"]
    machine = state_machine(aws, "compactor-WindowedJob-unrecorded", asl)
    aws["dispatch"].fail = lambda event: event.get("step") in ("plan", "fail")
    rel = "unrecorded.json"
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    source = source_of(S3Event(event).record)
    aws["sfn"].start_execution(stateMachineArn=machine, name=job_id(source),
                               input=json.dumps(job_input(source, max_concurrency=3)))
    assert wait(aws, machine, job_id(source)) == "FAILED"
    assert listing(aws, rel) == []
    bridge = EventBridge(worker, machine, aws["sfn"])
    assert bridge.deliver(bridge.status_change(execution_arn(machine, source)))["result"] == "failed"
    failure, _ = failure_of(aws, rel)
    assert failure["status"] == 500 and failure["error"]["code"] == "job_failed"
    assert "(RuntimeError)" in failure["error"]["message"]  # the execution's error, never its cause


def test_the_event_of_a_job_record_failure_recorded_changes_nothing(aws, big, worker, capsys):
    """The usual failed execution: RecordFailure wrote ``failed/<rel>`` and counted it; its FAILED event finds that
    failure and neither writes nor counts it again."""
    aws["dispatch"].fail = lambda event: event.get("step") == "plan"
    rel = "recorded.json"
    event = upload(aws, "incoming/" + rel, json.dumps(big).encode(), "0065A1B2C3D4E5F601")
    source = source_of(S3Event(event).record)
    aws["sfn"].start_execution(stateMachineArn=aws["arn"], name=job_id(source),
                               input=json.dumps(job_input(source, max_concurrency=3)))
    assert wait(aws, aws["arn"], job_id(source)) == "FAILED"
    recorded = failure_of(aws, rel)
    assert "(RuntimeError)" in recorded[0]["error"]["message"]
    bridge = EventBridge(worker, aws["arn"], aws["sfn"])
    ended = bridge.status_change(execution_arn(aws["arn"], source))
    assert ended["detail"]["error"] == "WindowedJobFailed"
    capsys.readouterr()
    assert bridge.deliver(ended)["result"] == "failed"
    assert failure_of(aws, rel) == recorded and listing(aws, rel) == ["failed/" + rel]
    assert s3_outcomes_counted(capsys.readouterr().out) == []


def test_no_other_event_records_anything(worker):
    """The rule takes the job's own executions that ended failed, timed out or aborted; the handler records nothing
    for another status or an execution whose input holds no job, and refuses an event without the input."""
    machine = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:compactor-WindowedJob"
    execution = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:compactor-WindowedJob:{'0' * 32}"
    job = job_input(Source(BUCKET, "incoming/x.json", "v1", "e1", "01"), max_concurrency=3)
    bridge = EventBridge(worker, machine)

    def detail(**changes: Any) -> dict[str, Any]:
        return {"executionArn": execution, "stateMachineArn": machine, "name": "0" * 32, "status": "ABORTED",
                "input": json.dumps(job), "inputDetails": {"included": True}, **changes}

    for status in ("RUNNING", "SUCCEEDED", "PENDING_REDRIVE"):
        assert bridge.deliver(event_of(detail(status=status))) is None
        assert worker.handler(event_of(detail(status=status)), LocalLambdaContext("WindowJobFunction",
                                                                                  timeout_s=900)) == {"done": False}
    child = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:compactor-WindowedJob/RunWindows:{uuid.uuid4()}"
    items = json.dumps({"Items": [{"task_key": "t", "result_key": "r"}], "BatchInput": {"bucket": BUCKET}})
    assert bridge.deliver(event_of(detail(stateMachineArn=child, input=items))) is None
    context = LocalLambdaContext("WindowJobFunction", timeout_s=900)
    assert worker.handler(event_of(detail(input=items)), context) == {"done": False}
    assert bridge.deliver({**event_of(detail()), "source": "aws.s3"}) is None
    with pytest.raises(ValueError, match="holds no input"):
        worker.handler(event_of(detail(input=None, inputDetails={"included": False})), context)
