"""An inline S3 job's result carries what it is billed (``x-amz-meta-compactor-bill``, docs/billing.md), so that a job
whose attempt crashed between writing its result and billing it is billed once, on its own day, to its caller: by the
retry that finds the result written, or by the on-failure destination whatever became of the job's idempotency record
(expired, left in progress by a hard crash, or kept by a version that named no caller). Such a job used to be delivered
and never billed. Everything runs on moto in-process."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import pytest

from compactor import billing as core_billing
from compactor_aws import billing
from compactor_cli.lambda_runtime import LocalLambdaContext

from ..s3.conftest import BUCKET, gave_up_module, s3_module  # noqa: F401 (fixtures)
from .conftest import IDEMPOTENCY_TABLE, table_entries
from .test_gave_up_billing import CALLER, Ledger, gave_up, handlers, listing, upload  # noqa: F401 (fixture)

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
DAY_ONE, DAY_TWO = "2026-12-03T23:59:59.999000Z", "2026-12-04T00:00:01.000000Z"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The time calls are observed at: the first attempt's on one day, a retry's on the next (set ``clock[0]``)."""
    now = [DAY_ONE]
    monkeypatch.setattr(core_billing, "utc_now_iso", lambda: now[0])
    return now


def invoke(handlers: dict[str, ModuleType], event: dict[str, Any]) -> list[dict[str, Any]]:
    return handlers["s3"].handler(event, LocalLambdaContext("S3CompactFunction", 300))["results"]


class HardCrash:
    """The attempt dies after writing its result, before its ledger write and before its idempotency record is
    completed (out of memory, a timeout): the record stays in progress and no entry is written."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ledger = Ledger(monkeypatch)
        layer = billing.backends().layer
        real = type(layer)._update_record
        self.crashing = True

        def update(layer: Any, data_record: Any) -> None:
            if self.crashing:
                raise RuntimeError("the process died")
            real(layer, data_record)

        monkeypatch.setattr(type(layer), "_update_record", update)

    def over(self) -> None:
        self.ledger.failing = self.crashing = False


def in_progress_expired(aws: dict[str, Any]) -> None:
    """The crashed invocation's remaining time has passed: its in-progress record no longer holds the version."""
    for item in aws["dynamodb"].scan(TableName=IDEMPOTENCY_TABLE)["Items"]:
        aws["dynamodb"].update_item(TableName=IDEMPOTENCY_TABLE, Key={"id": item["id"]},
                                    UpdateExpression="SET in_progress_expiration = :past",
                                    ExpressionAttributeValues={":past": {"N": str(int(time.time() * 1000) - 1)}})


def records(aws: dict[str, Any]) -> list[dict[str, Any]]:
    return aws["dynamodb"].scan(TableName=IDEMPOTENCY_TABLE)["Items"]


def test_a_retry_that_finds_the_result_of_an_attempt_that_crashed_before_billing_bills_it_once(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch,
        clock: list[str]) -> None:
    """The first attempt's settling fails after its result is written (a handled failure: its record is removed);
    Lambda's retry compacts again, the next day, finds the result and bills it: the first attempt's facts, on its
    day."""
    from compactor_aws.s3_store import S3Store

    real_head, failures = S3Store.head, [RuntimeError("S3 HeadObject failed")]

    def head(store: S3Store, bucket: str, key: str) -> Any:
        if key.startswith("failed/") and failures:
            raise failures.pop()
        return real_head(store, bucket, key)

    monkeypatch.setattr(S3Store, "head", head)
    rel, event = upload(aws, handlers)
    with pytest.raises(RuntimeError):
        invoke(handlers, event)
    assert listing(aws, "compacted/") == ["compacted/" + rel] and table_entries(aws["dynamodb"]) == []
    clock[0] = DAY_TWO

    [retried] = invoke(handlers, event)
    [redelivered] = invoke(handlers, event)

    assert retried["result"] == "compacted"  # it delivers the result: before, skipped ("already processed")
    assert redelivered["result"] == "skipped"
    [entry] = table_entries(aws["dynamodb"])  # before: none
    assert entry["api_key_id"]["S"] == CALLER and entry["time"]["S"] == DAY_ONE
    assert entry["sk"]["S"].startswith("2026-12-03#")


def test_a_retry_after_a_hard_crash_bills_once_whether_the_crashed_attempt_billed_or_not(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch,
        clock: list[str]) -> None:
    crash = HardCrash(monkeypatch)
    _, event = upload(aws, handlers)
    with pytest.raises(Exception):
        invoke(handlers, event)
    assert table_entries(aws["dynamodb"]) == []
    crash.over()
    in_progress_expired(aws)
    clock[0] = DAY_TWO

    invoke(handlers, event)

    [entry] = table_entries(aws["dynamodb"])
    assert entry["time"]["S"] == DAY_ONE and entry["api_key_id"]["S"] == CALLER

    # The crashed attempt had billed (its ledger write went through before it died): the retry, a day later, writes
    # the same item, not a second one on its own day.
    crash.crashing, clock[0] = True, DAY_ONE
    _, again = upload(aws, handlers)
    with pytest.raises(Exception):
        invoke(handlers, again)
    crash.crashing = False
    in_progress_expired(aws)
    clock[0] = DAY_TWO
    invoke(handlers, again)
    assert len(table_entries(aws["dynamodb"])) == 2  # one per upload


@pytest.mark.parametrize("record", ["in_progress", "expired"])
def test_the_destination_bills_a_result_whose_record_holds_nothing(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch, record: str) -> None:
    """Every attempt failed after the first wrote its result and crashed hard: the later ones found the version in
    progress. The destination bills what the result was written with, the record left in progress or gone."""
    crash = HardCrash(monkeypatch)
    _, event = upload(aws, handlers)
    for _ in range(3):
        with pytest.raises(Exception):
            invoke(handlers, event)
    crash.over()
    assert len(records(aws)) == 1 and records(aws)[0]["status"]["S"] == "INPROGRESS"
    if record == "expired":
        aws["dynamodb"].delete_item(TableName=IDEMPOTENCY_TABLE, Key={"id": records(aws)[0]["id"]})

    [outcome] = gave_up(handlers, event)
    [again] = gave_up(handlers, event)

    assert (outcome["reason"], outcome.get("billing"), again.get("billing")) == (
        "already processed", "billed", "already billed")  # before: no billing
    [entry] = table_entries(aws["dynamodb"])
    assert entry["api_key_id"]["S"] == CALLER and entry["route"]["S"] == "s3_compact"
    assert int(entry["bytes_in"]["N"]) > int(entry["bytes_out"]["N"]) > 0


def test_the_destination_bills_a_record_without_a_caller_to_the_jobs_caller(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    """A result and a record written by a version before either named whom they bill (no metadata, no ``caller``):
    that version billed the job's caller (the uploading key), and so does the destination."""
    ledger = Ledger(monkeypatch)
    monkeypatch.setattr(core_billing.ResultBill, "metadata", lambda self: {})  # an earlier version wrote the result
    real_run = billing.idempotency_run

    def without_caller(function: Any, **kwargs: Any) -> Any:
        return real_run(lambda: {key: value for key, value in function().items() if key != "caller"}, **kwargs)

    monkeypatch.setattr(billing, "idempotency_run", without_caller)
    rel, event = upload(aws, handlers)
    for _ in range(3):
        with pytest.raises(Exception):
            invoke(handlers, event)
    ledger.failing = False

    [outcome] = gave_up(handlers, event)

    assert outcome.get("billing") == "billed"  # before: no billing
    [entry] = table_entries(aws["dynamodb"])
    assert entry["api_key_id"]["S"] == CALLER


def test_a_result_bill_reads_back_and_refuses_what_is_not_one() -> None:
    facts = core_billing.billing_facts(route="s3_compact", mode="decision", bytes_in=9, bytes_out=3, model_calls=2,
                                       cost_usd=0.002, time=DAY_ONE)
    bill = core_billing.ResultBill(facts, "key-a", "r-1")
    metadata = bill.metadata()
    assert all(value.isascii() for value in metadata.values()) and len(metadata[core_billing.RESULT_BILL_META]) < 400
    assert core_billing.ResultBill.of_metadata(metadata) == bill
    for broken in ({}, {core_billing.RESULT_BILL_META: "{"}, {core_billing.RESULT_BILL_META: '{"facts":{}}'},
                   {core_billing.RESULT_BILL_META: '{"facts":{"route":"s3_compact","model_calls":1},"caller":"k"}'}):
        assert core_billing.ResultBill.of_metadata(broken) is None


def test_an_attempt_that_billed_and_then_failed_has_a_billed_line(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Its ledger write went through, then its idempotency record could not be completed (the attempt fails): its
    billing line says billed, and the retry that finds the result computes again (a line not billed) and bills nothing
    more: the billed lines sum to the ledger (docs/billing.md)."""
    from .test_billed_lines import billed_sum, ledger_sum, lines

    crash = HardCrash(monkeypatch)
    crash.ledger.failing = False
    _, event = upload(aws, handlers)
    caplog.clear()
    with pytest.raises(Exception):
        invoke(handlers, event)
    crash.over()
    in_progress_expired(aws)
    invoke(handlers, event)

    assert [line["billed"] for line in lines(caplog)] == [True, False]
    assert billed_sum(caplog) == ledger_sum(aws) and ledger_sum(aws)[0] == 1


def test_a_retry_that_bills_a_found_result_delivers_it_and_counts_it_compacted_once(
        aws: dict[str, Any], handlers: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The first attempt wrote the result and died before billing it (counting nothing); the retry that finds the result
    and bills it delivers the job: it answers and counts ``compacted``, as a retry that replays and bills, or the
    on-failure destination that bills, does (docs/deploy.md). It answered ``skipped`` ("already processed") and counted
    ``S3ObjectsSkipped``: the object was never counted compacted. A retry whose own ledger write failed leaves that to
    the next, which replays and bills the found result: ``compacted`` too. A later delivery finds it billed: skipped."""
    from .test_gave_up_billing import s3_counts

    crash = HardCrash(monkeypatch)
    _, event = upload(aws, handlers)
    with pytest.raises(Exception):
        invoke(handlers, event)
    crash.over()
    in_progress_expired(aws)
    capsys.readouterr()

    [retried] = invoke(handlers, event)

    assert (retried["result"], retried["status"], "reason" in retried) == ("compacted", 200, False)  # before: skipped
    assert s3_counts(capsys) == ["S3ObjectsCompacted"] and len(table_entries(aws["dynamodb"])) == 1
    [again] = invoke(handlers, event)
    assert (again["result"], again["reason"]) == ("skipped", "already processed")
    assert s3_counts(capsys) == ["S3ObjectsSkipped"] and len(table_entries(aws["dynamodb"])) == 1

    crash.crashing = crash.ledger.failing = True  # another upload: its retry finds the result, fails to bill it
    _, other = upload(aws, handlers)
    with pytest.raises(Exception):
        invoke(handlers, other)
    crash.crashing = False
    in_progress_expired(aws)
    with pytest.raises(RuntimeError, match="DynamoDB unavailable"):
        invoke(handlers, other)
    crash.ledger.failing = False
    capsys.readouterr()
    [replayed] = invoke(handlers, other)
    assert replayed["result"] == "compacted" and s3_counts(capsys) == ["S3ObjectsCompacted"]
    assert len(table_entries(aws["dynamodb"])) == 2
