"""The windowed-job state machine (``infra/statemachine/windowed_job.asl.json``) executed by moto,
every Lambda task dispatched in-process to ``functions/window_jobs`` (``tests/fakes/lambda_dispatch.py``,
as for the Express fan-out): its ``compacted/`` object is byte for byte what the inline run writes."""

from __future__ import annotations

import io
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import S3Event
from moto import mock_aws

from compactor import container
from compactor.compaction.windowed import compact_stream, inline_runner
from compactor.compaction.windows import Settings
from compactor.container import run_sync
from compactor.large_jobs import job_id, job_input
from compactor.object_jobs import Defaults, Failure, Source, build_request
from compactor_cli.lambda_runtime import LocalLambdaContext, load_handler
from fakes.lambda_dispatch import LambdaDispatch
from fakes.log_lines import lines_written
from fakes.routers import frozen_router

from scale import transcripts

from .conftest import decision_policy

REPO = Path(__file__).resolve().parents[2]
ASL = REPO / "infra" / "statemachine" / "windowed_job.asl.json"
REGION, ACCOUNT, BUCKET = "us-east-1", "123456789012", "compactor-transcripts-test"
WORKER_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:compactor-WindowJobFunction"
MOTO_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}


def definition() -> str:
    """The deployed definition with its substitutions applied. moto's ASL parser has no
    ``ItemBatcher``: the one-item batch it makes is built by an equivalent ``ItemSelector``."""
    asl = json.loads(ASL.read_text().replace("${WindowJobFunctionArn}", WORKER_ARN).replace("${Partition}", "aws"))
    run_windows = asl["States"]["RunWindows"]
    batcher = run_windows.pop("ItemBatcher")
    assert batcher["MaxItemsPerBatch"] == 1
    run_windows["ItemSelector"] = {"Items.$": "States.Array($$.Map.Item.Value)",
                                   "BatchInput": batcher["BatchInput"]}
    return json.dumps(asl)


@pytest.fixture(scope="module")
def worker() -> ModuleType:
    load_handler(REPO / "functions" / "window_jobs", "window_jobs.handler")
    return sys.modules["window_jobs"]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, worker: ModuleType) -> Iterator[dict[str, Any]]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("COMPACTOR_S3_DEFAULTS", raising=False)
    from compactor_aws import s3_store

    with mock_aws(config=MOTO_CONFIG):
        import boto3

        s3_store.reset_client()
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.create_state_machine(name="compactor-WindowedJob", definition=definition(), type="STANDARD",
                                       roleArn=f"arn:aws:iam::{ACCOUNT}:role/r")["stateMachineArn"]
        dispatch = LambdaDispatch(worker, WORKER_ARN, "WindowJobFunction", timeout_s=900).install(monkeypatch)
        monkeypatch.setattr(container.ROUTER, "value", frozen_router())
        yield {"s3": s3, "sfn": sfn, "arn": arn, "dispatch": dispatch}
        s3_store.reset_client()


def state_machine(aws: dict[str, Any], name: str, asl: dict[str, Any]) -> str:
    """A state machine named ``name`` of the definition ``asl`` (the deployed one, changed by a test): its ARN."""
    return aws["sfn"].create_state_machine(name=name, definition=json.dumps(asl), type="STANDARD",
                                           roleArn=f"arn:aws:iam::{ACCOUNT}:role/r")["stateMachineArn"]


def quick_assemble_retry(aws: dict[str, Any]) -> str:
    """A state machine of the deployed definition whose Assemble retries a TaskFailed once, a second later: its
    ARN."""
    asl = json.loads(definition())
    for retry in asl["States"]["Assemble"]["Retry"]:
        if retry["ErrorEquals"] == ["States.TaskFailed"]:
            retry.update(IntervalSeconds=1, MaxAttempts=1, BackoffRate=1)
    return state_machine(aws, "compactor-WindowedJob-fast", asl)


def execute(aws: dict[str, Any], key: str, concurrency: int = 3) -> dict[str, Any]:
    head = aws["s3"].head_object(Bucket=BUCKET, Key=key)
    source = Source(BUCKET, key, head.get("VersionId"), head["ETag"].strip('"'))
    arn = aws["sfn"].start_execution(stateMachineArn=aws["arn"], name=job_id(source),
                                     input=json.dumps(job_input(source, max_concurrency=concurrency)))["executionArn"]
    stop = time.monotonic() + 120
    while True:
        described = aws["sfn"].describe_execution(executionArn=arn)
        if described["status"] != "RUNNING" or time.monotonic() > stop:
            return described
        time.sleep(0.05)


def inline_bytes(messages: list[dict[str, Any]]) -> bytes:
    data = json.dumps(messages).encode()
    out = io.StringIO()
    router = frozen_router()
    run_sync(compact_stream(lambda: io.BytesIO(data), Settings(decision_policy_ir=decision_policy()), router=router,
                            run_window=inline_runner(router, window_budget_ms=60_000), out=out, messages_only=False))
    return out.getvalue().encode()


@pytest.fixture(scope="module")
def big() -> list[dict[str, Any]]:
    return list(transcripts.messages(1_200_000))


def test_distributed_map_result_is_the_inline_result(aws, big):
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/big.json", Body=json.dumps(big).encode())
    described = execute(aws, "incoming/big.json")
    assert described["status"] == "SUCCEEDED", described
    stored = aws["s3"].get_object(Bucket=BUCKET, Key="compacted/big.json")
    assert stored["Body"].read() == inline_bytes(big)
    windows = [e for e in aws["dispatch"].events if "Items" in e]
    body = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="compacted/big.json")["Body"].read())
    passes = body["compaction"]["windows"]["passes"]
    assert len(windows) == sum(p["windows"] for p in passes) and passes[0]["windows"] >= 2
    assert all(len(e["Items"]) == 1 for e in windows)
    # each batch names its execution (it logged none: docs/deploy.md)
    assert {e["BatchInput"]["execution_id"] for e in windows} == {described["executionArn"]}
    assert stored["Metadata"]["compactor-status"] == "200"
    manifests = [o["Key"] for o in aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="work/map-results/")["Contents"]]
    assert len(manifests) == len(passes) and all(key.endswith("/manifest.json") for key in manifests)


def test_a_messages_own_timing_fields_reach_the_result(aws, big):
    """Window tasks and results are the messages whole: a harness's ``latency_ms`` beside a message was left out of
    every task and result (``object_jobs.encode`` drops the service's timings), so kept messages lost it."""
    timed = [{**message, "latency_ms": index} for index, message in enumerate(big)]
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/timed.json", Body=json.dumps(timed).encode())
    assert execute(aws, "incoming/timed.json")["status"] == "SUCCEEDED"
    stored = aws["s3"].get_object(Bucket=BUCKET, Key="compacted/timed.json")["Body"].read()
    assert stored == inline_bytes(timed)
    kept = [m for m in json.loads(stored)["messages"] if m.get("role") == "user"]
    assert kept and all(isinstance(m.get("latency_ms"), int) for m in kept)


def test_a_failed_window_keeps_its_original_and_the_job_succeeds(aws, big, worker):
    aws["dispatch"].fail = lambda event: any(item["task_key"].endswith("/p1/w1.json")
                                             for item in event.get("Items", ()))
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/big.json", Body=json.dumps(big).encode())
    described = execute(aws, "incoming/big.json")
    assert described["status"] == "SUCCEEDED", described
    body = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="compacted/big.json")["Body"].read())
    assert body["compaction"]["windows"]["passes"][0]["failed_windows"] == 1


def test_a_failing_step_records_the_job_in_failed(aws, big):
    aws["dispatch"].fail = lambda event: event.get("step") == "assemble"
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/big.json", Body=json.dumps(big).encode())
    described = execute(aws, "incoming/big.json")
    assert described["status"] == "FAILED"
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="failed/big.json")["Body"].read())
    assert failure["status"] == 500 and failure["error"]["code"] == "job_failed"
    assert "RuntimeError" in failure["error"]["message"] and "crashed" not in failure["error"]["message"]
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="compacted/").get("Contents")


def test_bad_content_is_recorded_in_failed(aws):
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/bad.json", Body=b'{"mode": "decision", "messages": [1, 2]}')
    described = execute(aws, "incoming/bad.json")
    assert described["status"] == "SUCCEEDED", described
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="failed/bad.json")["Body"].read())
    assert failure["status"] == 422 and failure["error"]["code"] == "invalid_transcript"


def test_s3_event_for_a_large_object_starts_the_job_once(aws, big, monkeypatch):
    from compactor_aws import windowed_jobs
    from s3.conftest import s3_event

    load_handler(REPO / "functions" / "s3_compact", "s3_compact.handler")
    s3_module = sys.modules["s3_compact"]
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    monkeypatch.setenv(windowed_jobs.STATE_MACHINE_ENV, aws["arn"])
    monkeypatch.setenv(windowed_jobs.INLINE_MAX_ENV, "100000")
    data = json.dumps(big).encode()
    put = aws["s3"].put_object(Bucket=BUCKET, Key="incoming/large.json", Body=data)
    event = s3_event(BUCKET, "incoming/large.json", version_id=put.get("VersionId"), etag=put["ETag"].strip('"'),
                     size=len(data))
    context = LocalLambdaContext("S3CompactFunction", timeout_s=300)
    first = s3_module.handler(event, context)["results"][0]
    assert first["result"] == "started"
    again = s3_module.handler(event, context)["results"][0]  # a redelivered event: the same execution name
    assert again["result"] in ("started", "skipped")
    executions = aws["sfn"].list_executions(stateMachineArn=aws["arn"])["executions"]
    assert len(executions) == 1
    stop = time.monotonic() + 120
    while aws["sfn"].describe_execution(executionArn=executions[0]["executionArn"])["status"] == "RUNNING":
        assert time.monotonic() < stop
        time.sleep(0.05)
    assert aws["s3"].get_object(Bucket=BUCKET, Key="compacted/large.json")["Body"].read() == inline_bytes(big)


def test_a_jobs_steps_and_windows_run_as_the_caller_it_is_billed_to(aws, worker, monkeypatch):
    """The S3 path starts a windowed job with the caller it bills (the uploading key, else ``s3:<bucket>``), and every
    step and window worker runs as that caller, its provider faults its own (docs/reliability.md): windows ran as one
    caller, so one upload's faults opened breakers and disabled providers for every other job's windows."""
    from compactor import jobs
    from compactor.caller import current_caller
    from compactor.compaction import windows
    from compactor_aws import windowed_jobs
    from s3.conftest import s3_event

    seen: list[str | None] = []
    compact_window = windows.compact_window

    async def watched(task, **options):
        seen.append(current_caller.get())
        return await compact_window(task, **options)

    monkeypatch.setattr(windows, "compact_window", watched)
    load_handler(REPO / "functions" / "s3_compact", "s3_compact.handler")
    s3_module = sys.modules["s3_compact"]
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    monkeypatch.setenv(windowed_jobs.STATE_MACHINE_ENV, aws["arn"])
    monkeypatch.setenv(windowed_jobs.INLINE_MAX_ENV, "100000")
    caller = "abc123keyid"
    status, created = jobs.create_upload(worker.store, BUCKET, caller, lambda *args: "https://presigned")
    assert status == 201
    for who, key in ((caller, "incoming/" + jobs.upload_rel(caller, created["job_id"])),
                     (f"s3:{BUCKET}", "incoming/direct.json")):
        seen.clear()
        data = json.dumps(list(transcripts.messages(250_000))).encode()
        put = aws["s3"].put_object(Bucket=BUCKET, Key=key, Body=data)
        event = s3_event(BUCKET, key, version_id=put.get("VersionId"), etag=put["ETag"].strip('"'), size=len(data))
        assert s3_module.handler(event, LocalLambdaContext("S3CompactFunction", timeout_s=300))["results"][0][
            "result"] == "started"
        (execution,) = [e for e in aws["sfn"].list_executions(stateMachineArn=aws["arn"])["executions"]
                        if e["name"] == job_id(s3_module.source_of(S3Event(event).record))]
        stop = time.monotonic() + 120
        while aws["sfn"].describe_execution(executionArn=execution["executionArn"])["status"] == "RUNNING":
            assert time.monotonic() < stop
            time.sleep(0.05)
        assert aws["sfn"].describe_execution(executionArn=execution["executionArn"])["status"] == "SUCCEEDED"
        windows_run = [e for e in aws["dispatch"].events if "Items" in e and e["BatchInput"].get("caller") == who]
        assert windows_run and len(seen) == len(windows_run) and set(seen) == {who}
        steps = [e for e in aws["dispatch"].events if "step" in e and e["job"]["key"] == key]
        assert steps and {e["job"]["caller"] for e in steps} == {who}


def test_the_last_step_meters_and_bills_each_job_from_its_record(aws, worker, caplog, capsys):
    """The assemble step that writes ``compacted/`` writes the job's call metrics (EMF) and its billing
    log line, once, from the job's call record, as the inline S3 job does: each execution's line names
    the caller it is billed to and carries that job's figures only; the ledger holds the same figures."""
    from compactor import jobs
    from compactor.billing import usage_body, utc_now_iso
    from compactor_aws import billing
    from observability.conftest import Output, dimension_sets, value

    caller = "abc123keyid"
    status, created = jobs.create_upload(worker.store, BUCKET, caller, lambda *args: "https://presigned")
    assert status == 201
    runs = {caller: ("incoming/" + jobs.upload_rel(caller, created["job_id"]), transcripts.messages(400_000)),
            f"s3:{BUCKET}": ("incoming/direct.json", transcripts.messages(250_000))}
    seen: dict[str, tuple[dict[str, Any], dict[str, Any], Output]] = {}
    for who, (key, messages) in runs.items():
        aws["s3"].put_object(Bucket=BUCKET, Key=key, Body=json.dumps(list(messages)).encode())
        capsys.readouterr()
        caplog.clear()
        with caplog.at_level(logging.INFO):
            assert execute(aws, key)["status"] == "SUCCEEDED"
        output = Output(worker, caplog, capsys)
        body = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="compacted/" + key[len("incoming/"):])["Body"]
                          .read())
        (line,) = output.billing()
        seen[who] = body["compaction"], line, output

    today = utc_now_iso()[:10]
    for who, (report, line, output) in seen.items():
        assert line["api_key_id"] == who and line["request_id"]
        assert (line["route"], line["mode"], line["status"]) == ("s3_compact", "decision", 200)
        assert (line["bytes_in"], line["bytes_out"]) == (report["original_bytes"], report["output_bytes"])
        assert line["bytes_saved"] == line["bytes_in"] - line["bytes_out"] > 0
        assert line["target_met"] is report["target_met"] and line["model_calls"] > 0
        assert line["cost_usd"] == 0.0 and line["cost_known"] is True  # the built-in offers are free
        blob = output.call_blob()
        assert dimension_sets(blob) == [["mode", "route", "service"]]
        assert (blob["route"], blob["mode"], value(blob, "Calls")) == ("s3_compact", "decision", 1)
        assert (value(blob, "BytesIn"), value(blob, "BytesOut"), value(blob, "ModelCalls"), value(blob, "CostUsd")) \
            == (line["bytes_in"], line["bytes_out"], line["model_calls"], 0.0)
        assert value(blob, "TargetMet") == int(report["target_met"]) and value(blob, "Fallbacks") == 0
        (day,) = usage_body(who, today, today, billing.backends().ledger)["days"]
        assert (day["calls"], day["bytes_in"], day["model_calls"]) == (1, line["bytes_in"], line["model_calls"])
        # nothing of the other caller's job in this one's lines
        other = next(report for name, (report, _, _) in seen.items() if name != who)
        assert other["original_bytes"] != report["original_bytes"]
        assert other["original_bytes"] not in (line["bytes_in"], value(blob, "BytesIn"))
        assert [name for name in seen if name != who and name in output.everything] == []


CHAT = [{"role": "user", "content": "fix the build"}, {"role": "assistant", "content": "done"}]
CALL = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]}


@pytest.mark.parametrize("name, body, reason", [
    ("responses.json", {"format": "openai-responses", "input": [CALL, OUTPUT]}, "format is openai-responses"),
    ("input.json", {"input": [CALL, OUTPUT]}, "request body (its items in 'input')"),
    ("items.json", [*CHAT, CALL, OUTPUT], "message 2 is an openai-responses item"),
    ("rollout.jsonl", '{"type": "session_meta", "payload": {}}\n' + json.dumps(
        {"type": "response_item", "payload": CALL}) + "\n", "line 2 is a Codex rollout's response_item"),
    ("items.jsonl", "\n".join(json.dumps(item) for item in [*CHAT, CALL]), "line 3 is an openai-responses item"),
    ("session.jsonl", "\n".join(json.dumps(record) for record in [
        {"type": "queue-operation", "operation": "enqueue"},
        {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "fix the build"}},
        {"type": "assistant", "uuid": "u2", "parentUuid": "u1", "message": TOOL_USE}]),
     "line 2 is a Claude Code session's user record (anthropic-messages)"),
    ("restorable.json", {"restorable": True, "messages": CHAT}, "keep no restorable archives"),
])
def test_a_transcript_windows_cannot_read_as_chat_is_refused_not_emptied(aws, name, body, reason):
    """Windows read openai-chat and anthropic-messages only (docs/scale.md): a transcript in another format read as
    chat gave no messages (a "compacted" empty result) or lost its pairs, and a restorable request kept no archives.
    (An Anthropic transcript, named or shown by its blocks, is compacted in windows: test_windowed_anthropic.py.)"""
    data = body if isinstance(body, str) else json.dumps(body)
    aws["s3"].put_object(Bucket=BUCKET, Key=f"incoming/{name}", Body=data.encode())
    described = execute(aws, f"incoming/{name}")
    assert described["status"] == "SUCCEEDED", described
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key=f"failed/{name}")["Body"].read())
    assert failure["status"] == 413 and failure["error"]["code"] == "request_too_large", failure
    assert reason in failure["error"]["message"]
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix=f"compacted/{name}").get("Contents")


@pytest.mark.parametrize("name, data, reason", [
    ("empty.json", b"{}", "an object with a 'messages' array"),
    ("other.json", b'{"other": [{"role": "user", "content": "x"}]}', "an object with a 'messages' array"),
    ("object.json", b'{"messages": {"item": {"role": "user", "content": "x"}}}', "'messages' is not an array"),
    ("twice.json", b'{"messages": [{"role": "user", "content": "old"}], "messages": []}',
     'the key "messages" appears twice in one object'),
    ("content.json", b'{"mode": "decision", "messages": [{"role": "user", "content": "kept", "content": "lost"}]}',
     'the key "content" appears twice in one object'),
    ("array.json", b'[{"role": "user", "content": [{"type": "text", "text": "kept", "text": "lost"}]}]',
     'the key "text" appears twice in one object'),
    ("member.json", b'{"messages.item": {"role": "user", "content": "x"}, "messages": []}', "'messages.item'"),
])
def test_an_object_the_stream_cannot_read_as_the_api_is_refused(aws, name, data, reason):
    aws["s3"].put_object(Bucket=BUCKET, Key=f"incoming/{name}", Body=data)
    assert execute(aws, f"incoming/{name}")["status"] == "SUCCEEDED"
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key=f"failed/{name}")["Body"].read())
    assert failure["status"] == 422 and failure["error"]["code"] == "invalid_transcript", failure
    assert reason in failure["error"]["message"]
    inline = build_request(data, Defaults())  # what the inline job records for the same bytes, when it refuses them
    if isinstance(inline, Failure) and inline.detail and inline.detail[0]["loc"] == ["body"]:
        assert failure["detail"][0]["type"] == inline.detail[0]["type"], (failure, inline)


@pytest.mark.parametrize("data", [
    b'{"format": "bogus", "messages": []}',
    b'{"format": "bogus", "mode": "decision", "messages": [{"role": "user", "content": "x"}]}',
    b'{"format": ["openai-chat"], "messages": []}',
])
def test_an_unknown_format_is_recorded_as_the_inline_job_records_it(aws, data):
    """The inline job records its fields' validation (422 "the transcript's request fields failed validation", the
    detail at ``body.format``); the windowed job recorded "not a transcript: unknown format 'bogus'; one of ..." with a
    detail of its own, or without a mode a 413 for the mode it would run in."""
    inline = build_request(data, Defaults())
    assert isinstance(inline, Failure) and inline.detail[0]["loc"] == ["body", "format"], inline
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/format.json", Body=data)
    assert execute(aws, "incoming/format.json")["status"] == "SUCCEEDED"
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="failed/format.json")["Body"].read())
    assert {key: failure[key] for key in ("status", "error", "detail")} == \
        {"status": inline.status, "error": inline.error, "detail": inline.detail}


KEPT = b'{"role": "user", "content": "kept"}'


@pytest.mark.parametrize("data", [
    b'{"mode": "decision", "messages": [{"role": "user", "content": "kept", "content": "lost"}]}',  # a key twice
    b'{"mode": "decision", "messages": [' + KEPT + b'], "messages": []}',  # a member twice
    b"[" + KEPT + b', {"role": "user", "content": "kept", "content": "lost"}]',
    b"\xef\xbb\xbf\xef\xbb\xbf[" + KEPT + b"]",  # two byte order marks
    b"not json\n" + KEPT + b"\n",  # a JSONL line that is not JSON
    KEPT + b"\n" + KEPT[:-1] + b"\n",  # nor this one
    KEPT + b"\n" + KEPT[:-3] + b"\n",  # a line torn inside a string (it read "Invalid control character at" read whole)
])
def test_bytes_the_api_does_not_read_as_json_are_recorded_as_the_inline_job_records_them(aws, data):
    """The inline job records bytes the API would not read as JSON with the API's 422 ``json_invalid`` detail; the
    windowed job recorded the same bytes with a ``value_error`` one, so ``failed/<rel>`` (and the job's status)
    said another thing for the same object by its size."""
    inline = build_request(data, Defaults())
    assert isinstance(inline, Failure) and inline.detail[0]["type"] == "json_invalid", inline
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/bad.json", Body=data)
    assert execute(aws, "incoming/bad.json")["status"] == "SUCCEEDED"
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="failed/bad.json")["Body"].read())
    assert {key: failure[key] for key in ("status", "error", "detail")} == \
        {"status": inline.status, "error": inline.error, "detail": inline.detail}


@pytest.mark.parametrize("pins", [[len(CHAT)], [0, 10_000], [-1]])
def test_pins_past_the_transcript_are_refused_as_one_request_refuses_them(aws, pins):
    """A windowed job's ``pinned_indices`` are checked once the stream is counted: out of range, the job ends in
    ``failed/`` with the API's 400 (before, it compacted and the pins named nothing)."""
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/pins.json",
                         Body=json.dumps({"mode": "decision", "messages": CHAT, "pinned_indices": pins}).encode())
    assert execute(aws, "incoming/pins.json")["status"] == "SUCCEEDED"
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="failed/pins.json")["Body"].read())
    assert failure["status"] == 400 and failure["error"]["message"] == "pinned_indices must reference existing messages"
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="compacted/pins.json").get("Contents")
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="work/").get("Contents")  # no window was planned


@pytest.mark.parametrize("fields, code, message", [
    # named by its request field: it named a node of the preset the caller never wrote ("batch_0_classify")
    ({"decision_policy_ir": ["policy", ["nonsense"]]}, "invalid_flow",
     "flow_ir rejected at admission: decision_policy_ir: ir: "),
    ({"max_tokens": -1}, "invalid_max_tokens", "max_tokens must not be negative"),
])
def test_an_inadmissible_request_is_refused_as_one_request_refuses_it(aws, big, fields, code, message):
    """Policies the router does not admit end the job in ``failed/`` with the 400 ``invalid_flow`` the inline job and
    ``compactor compact`` answer, before any window is planned, and a negative ``max_tokens`` with the 400
    ``invalid_max_tokens`` of one request. Plan did not look: every window worker failed on them, the Map tolerated
    it, and ``compacted/`` held the transcript unchanged with status 200, billed."""
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/policy.json",
                         Body=json.dumps({"messages": big, "mode": "decision", **fields}).encode())
    assert execute(aws, "incoming/policy.json")["status"] == "SUCCEEDED"
    failure = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="failed/policy.json")["Body"].read())
    assert failure["status"] == 400 and failure["error"]["code"] == code, failure
    assert failure["error"]["message"].startswith(message)
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="compacted/policy.json").get("Contents")
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="work/").get("Contents")
    assert [e for e in aws["dispatch"].events if "Items" in e] == []


def test_each_jobs_outcome_is_counted_as_the_s3_function_counts_its_objects(aws, big, worker, caplog, capsys):
    """``S3ObjectsCompacted``/``Failed``/``Skipped`` count every object (docs/deploy.md): a windowed job's outcome was
    counted nowhere (the S3 function counts its start), so an alarm on S3ObjectsFailed missed every large object's
    failure."""
    from observability.conftest import Output, metric_names

    def counted(key: str, data: bytes) -> list[str]:
        capsys.readouterr()
        caplog.clear()
        aws["s3"].put_object(Bucket=BUCKET, Key=key, Body=data)
        execute(aws, key)
        emf = Output(worker, caplog, capsys).emf
        return sorted(name for blob in emf for name in metric_names(blob) if name.startswith("S3"))

    assert counted("incoming/ok.json", json.dumps(big).encode()) == ["S3ObjectsCompacted"]
    assert counted("incoming/bad.json", b'{"messages": [1]}') == ["S3ObjectsFailed"]
    aws["dispatch"].fail = lambda event: event.get("step") == "assemble"
    assert counted("incoming/crash.json", json.dumps(big).encode()) == ["S3ObjectsFailed"]


def test_a_retried_assemble_that_had_planned_the_next_pass_goes_on_with_it(aws, big, monkeypatch):
    """Step Functions retries ``assemble`` when its answer is lost (a Lambda or service error after the step ran).
    One that had planned the next pass saved that pass's state: its retry read the new pass's windows, which had
    no results yet, as all failed, so the job ended there with a pass of failed windows and less compacted."""
    body = json.dumps({"messages": big, "mode": "decision", "target_ratio": 0.02}).encode()
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/steady.json", Body=body)
    assert execute(aws, "incoming/steady.json")["status"] == "SUCCEEDED"
    steady = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="compacted/steady.json")["Body"].read())
    assert len(steady["compaction"]["windows"]["passes"]) >= 2  # the first assemble planned a second pass

    dispatch, invoke, lost = aws["dispatch"], aws["dispatch"].invoke, []

    def losing_the_first_planned_pass(parameters: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        answer = invoke(parameters, **kwargs)
        event = json.loads(parameters["Payload"])
        if event.get("step") == "assemble" and not lost and answer["Payload"].get("done") is False:
            lost.append(answer)
            return {"StatusCode": 200, "FunctionError": "Unhandled",
                    "Payload": {"errorMessage": "connection reset", "errorType": "ConnectionError"}}
        return answer

    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", losing_the_first_planned_pass)
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/lost.json", Body=body)
    assert execute(aws, "incoming/lost.json")["status"] == "SUCCEEDED"
    assembled = [e for e in dispatch.events if e.get("step") == "assemble" and e["job"]["key"] == "incoming/lost.json"]
    assert lost and len(assembled) == len(steady["compaction"]["windows"]["passes"]) + 1
    result = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="compacted/lost.json")["Body"].read())
    assert result["messages"] == steady["messages"] and result["compaction"] == steady["compaction"]


def test_a_job_whose_last_assemble_failed_on_its_billing_is_billed_by_record_failure_and_done(
        aws, big, worker, monkeypatch):
    """The last Assemble wrote ``compacted/`` and failed on its billing record after its retries: RecordFailure wrote
    ``failed/`` beside the delivered result, the job was never billed and the execution failed. RecordFailure now
    bills the job and the execution ends done. (This definition retries Assemble on TaskFailed at once.)"""
    from compactor_aws import billing

    arn = quick_assemble_retry(aws)
    ledger = billing.backends().ledger
    real, refused = ledger.record, []

    def down_for_assemble(entry: Any) -> bool:
        if len(refused) < 2:  # the step and its one retry
            refused.append(entry)
            raise RuntimeError("DynamoDB unavailable")
        return real(entry)

    monkeypatch.setattr(ledger, "record", down_for_assemble)
    aws["s3"].put_object(Bucket=BUCKET, Key="incoming/late-bill.json", Body=json.dumps(big).encode())
    described = execute({**aws, "arn": arn}, "incoming/late-bill.json")
    assert described["status"] == "SUCCEEDED", described
    assert [e["step"] for e in aws["dispatch"].events if "step" in e][-3:] == ["assemble", "assemble", "fail"]
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("Contents")
    body = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key="compacted/late-bill.json")["Body"].read())
    (entry,) = ledger.entries("2000-01-01", "2999-12-31")
    assert len(refused) == 2 and refused[0].entry_id == entry.entry_id
    assert entry.bytes_in == body["compaction"]["original_bytes"]


def test_a_batchs_lines_name_its_execution(worker: ModuleType) -> None:
    """The batch steps' lines named no execution (the other steps name its job_id): each now carries the
    ``execution_id`` the state machine puts in the batch input, for that invocation only."""
    execution = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:compactor-WindowedJob:job-1"
    with lines_written(worker.logger) as lines:
        worker.handler({"Items": [], "BatchInput": {"bucket": BUCKET, "execution_id": execution}},
                       LocalLambdaContext("WindowJobFunction", timeout_s=900))
        worker.logger.info("a later invocation's line")
    assert [line["message"] for line in lines] == ["windows ran", "a later invocation's line"]
    assert lines[0]["execution_id"] == execution and "execution_id" not in lines[1]
