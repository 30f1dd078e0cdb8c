"""The billing log line says whether its call is billed (``billed``), so that an operator summing the lines with
``billed: true`` gets the ledger's figures (docs/billing.md): the ledger is the invoice. A 2xx call's line is written
once its billing is settled; a call computed but not delivered (the idempotency store failed as its answer was stored:
the caller got 503), or whose ledger write failed, says ``billed: false``; the invocation that writes an entry for a
call it did not compute (a replay, a retry finding the result written) writes that entry's line, ``billed: true``. A
line used to be written for every computed call, with nothing telling the ones billed from the others."""

from __future__ import annotations

import json
import time
from types import ModuleType
from typing import Any

import pytest

from ..s3.conftest import BUCKET, put_and_event, s3_module, transcript  # noqa: F401 (fixture)
from .conftest import IDEMPOTENCY_TABLE, idempotency_store_down_once, ledger_down
from .test_api_billing import TRANSCRIPT, call, event, ledger_items

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [record.billing for record in caplog.records if getattr(record, "record_type", None) == "billing"]


def billed_sum(caplog: pytest.LogCaptureFixture) -> tuple[int, float]:
    billed = [line for line in lines(caplog) if line["billed"]]
    return len(billed), round(sum(line["cost_usd"] or 0 for line in billed), 10)


def ledger_sum(aws: dict[str, Any]) -> tuple[int, float]:
    items = ledger_items(aws)
    return len(items), round(sum(float(item.get("cost_usd", {}).get("N", 0)) for item in items), 10)


def test_a_call_whose_answer_the_idempotency_store_could_not_keep_is_a_line_not_billed(
        aws: dict[str, Any], compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    idempotency_store_down_once(monkeypatch)
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "store-down"})
    caplog.clear()

    assert call(compact_module, ev)["statusCode"] == 503
    [unkept] = lines(caplog)
    assert (unkept["status"], unkept["billed"]) == (200, False)  # computed, not delivered; it said nothing
    (item,) = aws["dynamodb"].scan(TableName=IDEMPOTENCY_TABLE)["Items"]
    aws["dynamodb"].update_item(TableName=IDEMPOTENCY_TABLE, Key={"id": item["id"]},
                                UpdateExpression="SET in_progress_expiration = :past",
                                ExpressionAttributeValues={":past": {"N": str(int(time.time() * 1000) - 1)}})
    assert call(compact_module, dict(ev))["statusCode"] == 200
    assert call(compact_module, dict(ev))["statusCode"] == 200  # a replay: no line

    assert [line["billed"] for line in lines(caplog)] == [False, True]
    assert billed_sum(caplog) == ledger_sum(aws) and ledger_sum(aws)[0] == 1


@pytest.mark.parametrize("key", [None, "ledger-down"])
def test_a_call_whose_ledger_write_failed_is_a_line_not_billed_and_its_replay_bills_it_with_a_line(
        aws: dict[str, Any], compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, key: str | None) -> None:
    ledger_down(monkeypatch, once=True)
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": key} if key else {})
    caplog.clear()
    assert call(compact_module, ev)["statusCode"] == 500
    assert [line["billed"] for line in lines(caplog)] == [False]
    assert ledger_sum(aws)[0] == 0

    assert call(compact_module, dict(ev))["statusCode"] == 200  # keyed: a replay writes the missing entry; else again

    [first, second] = lines(caplog)
    assert (first["billed"], second["billed"]) == (False, True)
    assert billed_sum(caplog) == ledger_sum(aws) and ledger_sum(aws)[0] == 1
    if key:  # the replay's line is the entry's: the computation's time and request id
        assert (second["time"], second["request_id"]) == (first["time"], first["request_id"])


def test_s3_jobs_lines_sum_to_the_ledger(aws: dict[str, Any], s3_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """A job delivered and billed, one whose ledger write failed and was replayed by Lambda's retry, and one whose
    result was not kept (a newer version's was there): the billed lines are the ledger's entries."""
    from compactor_cli.lambda_runtime import LocalLambdaContext

    aws["s3"].create_bucket(Bucket=BUCKET)
    aws["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})

    def invoke(ev: dict[str, Any]) -> list[dict[str, Any]]:
        return s3_module.handler(ev, LocalLambdaContext("S3CompactFunction", 300))["results"]

    caplog.clear()
    assert invoke(put_and_event(aws["s3"], "incoming/a.json", json.dumps(transcript())))[0]["result"] == "compacted"
    ledger_down(monkeypatch, once=True)
    failing = put_and_event(aws["s3"], "incoming/b.json", json.dumps(transcript()))
    with pytest.raises(RuntimeError):
        invoke(failing)
    invoke(failing)
    older = put_and_event(aws["s3"], "incoming/c.json", json.dumps(transcript()), sequencer="0065A1B2C3D4E5F601")
    newer = put_and_event(aws["s3"], "incoming/c.json", json.dumps(transcript(8)), sequencer="0065A1B2C3D4E5F6FF")
    assert invoke(newer)[0]["result"] == "compacted"
    assert invoke(older)[0]["result"] == "skipped"

    assert [(line["billed"]) for line in lines(caplog)] == [True, False, True, True, False]
    assert billed_sum(caplog) == ledger_sum(aws) and ledger_sum(aws)[0] == 3
