"""An inline S3 job whose result was written and whose ledger write failed on every attempt (Lambda's three) is billed
by ``S3CompactGaveUpFunction``, the S3 function's on-failure destination, once, from what the job stored in its
idempotency record, to the caller it is billed to (docs/billing.md). It used to see the result, record "skipped" and
bill nothing: the job was delivered and never billed. Everything runs on moto in-process."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor import jobs
from compactor_cli.lambda_runtime import LocalLambdaContext

from ..s3.conftest import BUCKET, gave_up_module, put_and_event, s3_module, transcript  # noqa: F401 (fixtures)
from .conftest import table_entries

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
ATTEMPTS = 3  # S3CompactFunction's first attempt and its two retries (MaximumRetryAttempts: 2)
CALLER = "key-a"


@pytest.fixture
def handlers(aws: dict[str, Any], s3_module: ModuleType, gave_up_module: ModuleType,
             monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """The S3 function and its on-failure destination, on moto, with the versioned transcript bucket."""
    aws["s3"].create_bucket(Bucket=BUCKET)
    aws["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    monkeypatch.setattr(s3_module, "store", s3_module.S3Store())
    monkeypatch.setattr(gave_up_module, "store", s3_module.S3Store())
    return {"s3": s3_module, "gave_up": gave_up_module}


class Ledger:
    """The usage ledger's writes failing while :attr:`failing`; ``lost`` writes the entry and then raises, as a
    write whose answer was lost (the transaction committed, botocore raised)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from compactor_aws import billing

        self.ledger = billing.backends().ledger
        self.real = self.ledger.record
        self.failing, self.lost = True, False
        monkeypatch.setattr(self.ledger, "record", self.record)

    def record(self, entry: Any) -> bool:
        if self.lost:
            self.real(entry)
            raise RuntimeError("the ledger write's answer was lost")
        if self.failing:
            raise RuntimeError("DynamoDB unavailable")
        return self.real(entry)


def upload(aws: dict[str, Any], handlers: dict[str, ModuleType]) -> tuple[str, dict[str, Any]]:
    """An API upload of ``CALLER`` (billed to that key) and the S3 event of its transcript."""
    _, created = jobs.create_upload(handlers["s3"].store, BUCKET, CALLER, lambda *args: "https://presigned")
    rel = jobs.upload_rel(CALLER, created["job_id"])
    return rel, put_and_event(aws["s3"], "incoming/" + rel, json.dumps(transcript()))


def attempts(handlers: dict[str, ModuleType], event: dict[str, Any], ledger: Ledger | None = None) -> None:
    """Lambda's three attempts of the event, each raising; the last one's ledger write is lost with ``ledger``."""
    for attempt in range(ATTEMPTS):
        if ledger is not None and attempt == ATTEMPTS - 1:
            ledger.lost = True
        with pytest.raises(Exception):
            handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))


def gave_up(handlers: dict[str, ModuleType], event: dict[str, Any]) -> list[dict[str, Any]]:
    """The destination's answer for the invocation record Lambda sends once it gave up on ``event``."""
    record = {"version": "1.0", "timestamp": "2026-12-03T16:00:00.000Z",
              "requestContext": {"requestId": "r-1", "condition": "RetriesExhausted",
                                 "approximateInvokeCount": ATTEMPTS,
                                 "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:s3-compact:live"},
              "requestPayload": event,
              "responseContext": {"statusCode": 200, "executedVersion": "1", "functionError": "Unhandled"},
              "responsePayload": {"errorMessage": "DynamoDB unavailable", "errorType": "RuntimeError",
                                  "stackTrace": []}}
    return handlers["gave_up"].handler(record, LocalLambdaContext("S3CompactGaveUpFunction", 60))["results"]


def listing(aws: dict[str, Any], prefix: str) -> list[str]:
    return sorted(item["Key"] for item in aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def test_a_result_whose_ledger_write_failed_on_every_attempt_is_billed_once_by_the_destination(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor import service

    ledger = Ledger(monkeypatch)
    rel, event = upload(aws, handlers)
    attempts(handlers, event)
    assert listing(aws, "compacted/") == ["compacted/" + rel] and table_entries(aws["dynamodb"]) == []
    ledger.failing = False  # the table is back by the time Lambda gives up

    [outcome] = gave_up(handlers, event)

    assert (outcome["result"], outcome["reason"], outcome["billing"]) == ("skipped", "already processed", "billed")
    [entry] = table_entries(aws["dynamodb"])  # before: none, the job delivered and never billed
    assert entry["api_key_id"]["S"] == CALLER and entry["route"]["S"] == "s3_compact"  # the uploading key
    assert int(entry["bytes_in"]["N"]) > int(entry["bytes_out"]["N"]) > 0
    assert entry["sk"]["S"] == f"{entry['time']['S'][:10]}#{entry['entry_id']['S']}"  # on the job's own day
    assert listing(aws, "failed/") == []

    # A job that wrote no result is recorded failed, as before, and billed nothing.
    def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(service, "compact_call", crash)
    other, crashed = upload(aws, handlers)
    attempts(handlers, crashed)
    [failed] = gave_up(handlers, crashed)
    assert (failed["result"], failed["status"], "billing" in failed) == ("failed", 500, False)
    assert listing(aws, "failed/") == ["failed/" + other]
    assert [item["entry_id"]["S"] for item in table_entries(aws["dynamodb"])] == [entry["entry_id"]["S"]]


def test_a_destination_invoked_twice_bills_once(aws: dict[str, Any], handlers: dict[str, ModuleType],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Lambda's destinations are at-least-once: the second invocation finds the entry written."""
    ledger = Ledger(monkeypatch)
    _, event = upload(aws, handlers)
    attempts(handlers, event)
    ledger.failing = False

    first, again = gave_up(handlers, event), gave_up(handlers, event)

    assert [first[0]["billing"], again[0]["billing"]] == ["billed", "already billed"]
    assert len(table_entries(aws["dynamodb"])) == 1


def test_a_ledger_write_that_succeeded_on_the_last_attempt_is_not_billed_again(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    """The last attempt's entry was written but its answer lost (the attempt failed): the destination bills
    nothing more, and says so."""
    ledger = Ledger(monkeypatch)
    _, event = upload(aws, handlers)
    attempts(handlers, event, ledger)
    [entry] = table_entries(aws["dynamodb"])
    ledger.lost = ledger.failing = False

    [outcome] = gave_up(handlers, event)

    assert outcome["billing"] == "already billed"
    assert table_entries(aws["dynamodb"]) == [entry]


def s3_counts(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The per-object S3 counters the invocations since the last call published (their EMF lines)."""
    from observability.conftest import metric_names

    names = []
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            names += [name for name in metric_names(json.loads(line)) if name.startswith("S3")]
    return sorted(names)


def test_a_job_delivered_by_the_destination_counts_as_compacted_once(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each attempt wrote the result and raised on its ledger write (``S3ObjectsErrored``); the destination that bills
    the job delivers it, and counts it ``S3ObjectsCompacted`` as the windowed job's billing step does. It counted it
    ``S3ObjectsSkipped``: the object was never counted compacted. Invoked again, it finds the job billed: skipped."""
    ledger = Ledger(monkeypatch)
    _, event = upload(aws, handlers)
    capsys.readouterr()
    attempts(handlers, event)
    assert s3_counts(capsys) == ["S3ObjectsErrored"] * ATTEMPTS
    ledger.failing = False

    assert [outcome["billing"] for outcome in gave_up(handlers, event)] == ["billed"]
    assert s3_counts(capsys) == ["S3ObjectsCompacted"]  # before: S3ObjectsSkipped
    assert [outcome["billing"] for outcome in gave_up(handlers, event)] == ["already billed"]
    assert s3_counts(capsys) == ["S3ObjectsSkipped"]


def test_a_retry_that_bills_a_job_whose_ledger_write_failed_counts_it_compacted(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The first attempt wrote the result and raised on its ledger write (``S3ObjectsErrored``); Lambda's retry replays
    the job's record and bills it: it delivers the job and answers and counts ``compacted``. It answered "skipped"
    ("already processed", as a redelivered event of a job billed before), and no attempt counted the object compacted.
    A later delivery still finds it billed: skipped."""
    ledger = Ledger(monkeypatch)
    _, event = upload(aws, handlers)
    capsys.readouterr()
    with pytest.raises(RuntimeError):
        handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))
    assert s3_counts(capsys) == ["S3ObjectsErrored"]
    ledger.failing = False

    retried = handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))["results"]
    assert [outcome["result"] for outcome in retried] == ["compacted"]  # before: skipped
    assert s3_counts(capsys) == ["S3ObjectsCompacted"] and len(table_entries(aws["dynamodb"])) == 1
    again = handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))["results"]
    assert [(outcome["result"], outcome["reason"]) for outcome in again] == [("skipped", "already processed")]
    assert s3_counts(capsys) == ["S3ObjectsSkipped"] and len(table_entries(aws["dynamodb"])) == 1


def test_a_result_whose_attempt_failed_after_writing_it_is_billed_by_the_retry(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    """The attempt wrote the result, then failed in its look at ``failed/<rel>`` (one outcome per object: an S3 error,
    the function's timeout), before its idempotency record completed: Lambda's retry compacted the transcript again,
    found its own result and answered "already processed", billed nothing. The result was delivered and never
    billed. The retry now bills it (the version's one entry: never twice)."""
    store = handlers["s3"].store
    real, failed = store.head, []

    def head(bucket: str, key: str) -> Any:
        if key.startswith("failed/") and not failed:
            failed.append(key)
            raise RuntimeError("S3 unavailable")
        return real(bucket, key)

    monkeypatch.setattr(store, "head", head)
    rel, event = upload(aws, handlers)
    with pytest.raises(RuntimeError):
        handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))
    assert failed == ["failed/" + rel] and listing(aws, "compacted/") == ["compacted/" + rel]
    assert table_entries(aws["dynamodb"]) == []

    handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))  # Lambda's retry

    [entry] = table_entries(aws["dynamodb"])  # before: none
    assert entry["api_key_id"]["S"] == CALLER and int(entry["bytes_in"]["N"]) > int(entry["bytes_out"]["N"]) > 0
    handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))  # a redelivery: replayed
    assert len(table_entries(aws["dynamodb"])) == 1
