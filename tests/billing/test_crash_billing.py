"""A call that ends in an exception no handler expects, after it paid for model calls: on the API and on the S3 path's
inline job it is observed once as the server error it is (billing log line and call metrics with status 500, the
model calls and tokens known so far, their cost when each is known) and billed nothing (docs/billing.md, "A failed call's fields").
Such a call used to be in no billing line and no call metric: the operator's ledger silently missed it."""

from __future__ import annotations

import json
import logging
from types import ModuleType
from typing import Any

import pytest

from compactor import jobs
from compactor.compaction.seal import SealMode
from compactor_aws.s3_store import S3Store
from compactor_cli.lambda_runtime import LocalLambdaContext
from observability.conftest import Output, value

from ..s3.conftest import BUCKET, put_and_event, s3_module, transcript  # noqa: F401 (fixture)
from .conftest import table_entries
from .test_api_billing import KEY_A, call, event, usage

SECRET = "another-callers-secret-3f9a"


def crash_after_the_model_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seal mode's report (after its one model call, with the offline offers) raises what no handler expects."""
    def report(*args: Any, **kwargs: Any) -> Any:
        raise KeyError(SECRET)

    monkeypatch.setattr(SealMode, "report", report)


def crashed_line(output: Output, caller: str, route: str) -> dict[str, Any]:
    (line,) = output.billing()
    assert (line["status"], line["api_key_id"], line["route"], line["mode"]) == (500, caller, route, "seal")
    assert line["model_calls"] == 1 and line["tokens_in"] and line["tokens_out"]  # the call it made before
    # the one call it made ended, priced (the offline offers cost nothing): its cost is known
    assert line["cost_usd"] == 0.0 and line["cost_known"] is True
    assert line["bytes_out"] is None and line["bytes_saved"] is None and line["target_met"] is None
    blob = output.call_blob()
    assert (blob["route"], blob["mode"], value(blob, "Calls"), value(blob, "ModelCalls")) == (route, "seal", 1, 1)
    assert value(blob, "CostUsd") == 0.0 and "CostUnknown" not in blob and "BytesOut" not in blob
    return line


@pytest.mark.parametrize("idempotency_key", [None, "crash-1"])
def test_an_api_call_that_crashes_is_observed_as_its_500_once_and_not_billed(
        aws: dict[str, Any], compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], idempotency_key: str | None) -> None:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    ev = event("POST", "/compact", body={"messages": transcript(), "mode": "seal"}, headers=headers)
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO), monkeypatch.context() as patched:
        crash_after_the_model_call(patched)
        response = call(compact_module, ev)
    output = Output(compact_module, caplog, capsys)

    assert response["statusCode"] == 500
    assert json.loads(response["body"]) == {"error": {"message": "internal server error", "type": "server_error",
                                                      "code": None}}
    assert SECRET not in response["body"] and "Traceback" not in response["body"]
    crashed_line(output, KEY_A, "compact")
    (requests,) = [blob for blob in output.emf if "Requests" in blob]
    assert value(requests, "ServerErrors") == 1
    assert table_entries(aws["dynamodb"]) == [] and usage(compact_module, KEY_A)["days"] == []

    # the retry succeeds: computed (the crash was not stored for replay) and billed once
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert call(compact_module, dict(ev))["statusCode"] == 200
    (line,) = Output(compact_module, caplog, capsys).billing()
    assert line["status"] == 200 and line["cost_usd"] == 0.0  # the crashed call's cost was this one's
    assert len(table_entries(aws["dynamodb"])) == 1


def test_a_refusal_raised_after_the_model_call_is_observed_with_the_status_it_answers(
        aws: dict[str, Any], compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.errors import RouterError

    def report(*args: Any, **kwargs: Any) -> Any:
        raise RouterError("the flow ran out of time", "timeout")

    monkeypatch.setattr(SealMode, "report", report)
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        response = call(compact_module, event("POST", "/compact", body={"messages": transcript(), "mode": "seal"}))
    assert response["statusCode"] == 504
    (line,) = Output(compact_module, caplog, capsys).billing()
    assert (line["status"], line["model_calls"], line["cost_known"]) == (504, 1, True)  # its one call was priced
    assert table_entries(aws["dynamodb"]) == []


def test_an_inline_s3_job_that_crashes_is_observed_as_its_500_once_then_the_retry_bills_once(
        aws: dict[str, Any], s3_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    aws["s3"].create_bucket(Bucket=BUCKET)
    aws["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    caller = "uploaderkeyid"
    status, created = jobs.create_upload(S3Store(), BUCKET, caller, lambda *args: "https://presigned")
    assert status == 201
    s3_event = put_and_event(aws["s3"], "incoming/" + jobs.upload_rel(caller, created["job_id"]),
                             json.dumps({"mode": "seal", "messages": transcript()}))
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO), monkeypatch.context() as patched, pytest.raises(KeyError):  # Lambda retries
        crash_after_the_model_call(patched)
        s3_module.handler(s3_event, LocalLambdaContext("S3CompactFunction", 300))
    crashed_line(Output(s3_module, caplog, capsys), caller, "s3_compact")
    assert table_entries(aws["dynamodb"]) == []
    assert not aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="compacted/").get("Contents")

    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert s3_module.handler(s3_event, LocalLambdaContext("S3CompactFunction", 300))["results"][0]["result"] \
            == "compacted"
    (line,) = Output(s3_module, caplog, capsys).billing()
    assert (line["status"], line["api_key_id"]) == (200, caller)
    (entry,) = table_entries(aws["dynamodb"])
    assert entry["api_key_id"]["S"] == caller


def s3_counts(output: Output) -> list[str]:
    from observability.conftest import metric_names

    return sorted(name for blob in output.emf for name in metric_names(blob) if name.startswith("S3"))


def test_an_inline_s3_job_that_crashes_counts_its_object_as_errored(
        aws: dict[str, Any], s3_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """Every attempt at an object counts one outcome (docs/deploy.md): a crashed one ``S3ObjectsErrored`` (Lambda
    retries it), then the retry that compacts it ``S3ObjectsCompacted``. A crashed attempt used to count nothing: a
    dashboard of the S3 objects missed every object whose job raised."""
    aws["s3"].create_bucket(Bucket=BUCKET)
    s3_event = put_and_event(aws["s3"], "incoming/crash.json", json.dumps({"mode": "seal", "messages": transcript()}))
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO), monkeypatch.context() as patched, pytest.raises(KeyError):
        crash_after_the_model_call(patched)
        s3_module.handler(s3_event, LocalLambdaContext("S3CompactFunction", 300))
    assert s3_counts(Output(s3_module, caplog, capsys)) == ["S3ObjectsErrored"]

    caplog.clear()
    with caplog.at_level(logging.INFO):
        s3_module.handler(s3_event, LocalLambdaContext("S3CompactFunction", 300))
    assert s3_counts(Output(s3_module, caplog, capsys)) == ["S3ObjectsCompacted"]


async def crash_of(request: Any, shared: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The record of ``request`` crashing after its model call (:func:`crash_after_the_model_call`)."""
    from compactor import service
    from compactor.budget import Deadline
    from compactor.call_record import counting_calls, crashed

    with monkeypatch.context() as patched, counting_calls() as counted:
        crash_after_the_model_call(patched)
        with pytest.raises(KeyError) as raised:
            await service.compact_call(request, deadline=Deadline.after_ms(20_000), router=shared)
    return crashed(raised.value, counted, mode=request.mode_name)


async def test_a_crashed_calls_cost_is_known_when_every_call_it_made_is_priced(
        fake_provider: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/billing.md, "A failed call's fields": a call that crashed after its routed calls ended carries their cost
    when each is known (a failed attempt that reported 0.25, then the answer's 0.5), and an unknown cost when one is
    not (an answer with usage and no price); it is billed nothing either way. Its cost was always unknown."""
    from compactor.models import CompactRequest
    from fakes.provider_server import Reply, chat_reply

    from ..reliability.test_costs import CHEAP_FIRST, router
    from ..reliability.test_isolation_and_retries import transcript as long_transcript

    request = CompactRequest(messages=long_transcript(), keep_recent=2, policy_ir=CHEAP_FIRST)
    fake_provider.responder = lambda request: (Reply(200, {"choices": [], "usage": {"cost": 0.25}})
                                               if request.json["model"] == "fast/chat"
                                               else chat_reply("A short sealed summary.", cost=0.5))
    record = await crash_of(request, router(fake_provider), monkeypatch)
    assert (record.status, record.model_calls, record.cost_usd, record.cost_known) == (500, 2, 0.75, True)
    assert record.bytes_out is None and record.target_met is None

    fake_provider.responder = lambda request: (Reply(200, {"choices": [], "usage": {"prompt_tokens": 1_000_000}})
                                               if request.json["model"] == "fast/chat"
                                               else chat_reply("A short sealed summary.", cost=0.5))
    record = await crash_of(request, router(fake_provider), monkeypatch)
    assert (record.status, record.model_calls, record.cost_usd, record.cost_known) == (500, 2, None, False)


def test_a_crashed_calls_cost_is_unknown_while_a_call_runs_or_ran_elsewhere() -> None:
    """A routed call not ended when the call crashed (a fan-out's sibling task), or calls a fan-out's workers made
    (``compactor_aws.stepfunctions_runner``), may have been paid: the tally's cost is unknown."""
    from compactor.call_record import CallTally

    counted = CallTally()
    counted.begin()
    counted.add({}, None, 0.5)
    assert counted.cost == 0.5
    counted.begin()
    assert counted.cost is None  # one still running
    counted.add({}, None, 0.25)
    assert counted.cost == 0.75
    counted.elsewhere = True
    assert counted.cost is None
