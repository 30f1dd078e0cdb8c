"""The three views of a billed call agree (docs/billing.md): its billing log line, its ledger entry and the totals of
``GET /v1/usage`` and ``compactor usage``, on the day a call is counted and to the last reported digit of its cost."""

from __future__ import annotations

import json
from decimal import Decimal
from types import ModuleType
from typing import Any

import pytest

from compactor import billing as core_billing
from compactor_aws import billing, observability
from compactor_cli.lambda_runtime import LocalLambdaContext

from ..s3.conftest import BUCKET, put_and_event, s3_module, transcript  # noqa: F401 (fixture)
from .test_api_billing import KEY_A, KEY_B, TRANSCRIPT, answered_while_computing, call, event, ledger_items, usage

BEFORE, AFTER = "2026-12-03T23:59:59.999000Z", "2026-12-04T00:00:00.020000Z"


@pytest.fixture
def midnight(monkeypatch: pytest.MonkeyPatch) -> None:
    """UTC midnight passes as the call's billing line is written: the clock reads 23:59:59.999 until then and
    00:00:00.020 after (the result's store, the ledger write)."""
    clock = [BEFORE]
    real_write = observability.write_billing_record

    def write_then_midnight(logger: Any, summary: Any) -> None:
        real_write(logger, summary)
        clock[0] = AFTER

    monkeypatch.setattr(core_billing, "utc_now_iso", lambda: clock[0])
    monkeypatch.setattr(observability, "write_billing_record", write_then_midnight)


def billing_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [record.billing for record in caplog.records if getattr(record, "record_type", None) == "billing"]


@pytest.mark.parametrize("key", [None, "midnight"])
def test_an_api_call_across_midnight_is_on_one_day_in_every_view(
        aws: dict[str, Any], compact_module: ModuleType, caplog: pytest.LogCaptureFixture, midnight: None,
        key: str | None) -> None:
    # The entry's time was read after the line was written (a keyed call's as its response was stored): a call
    # observed at 23:59:59.999 was billed on the next day, and its line (and call metrics) told no UTC time.
    caplog.clear()
    headers = {"Idempotency-Key": key} if key else {}
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers=headers)

    assert call(compact_module, ev)["statusCode"] == 200
    if key:
        assert call(compact_module, dict(ev))["statusCode"] == 200  # a replay bills the same entry

    (line,) = billing_lines(caplog)
    (item,) = ledger_items(aws)
    assert item["sk"]["S"].startswith("2026-12-03#")  # was 2026-12-04
    assert line["time"] == item["time"]["S"] == BEFORE  # the line had no time (its log timestamp is local time)
    days = usage(compact_module, KEY_A, **{"from": "2026-12-01", "to": "2026-12-04"})["days"]
    assert [(day["day"], day["calls"]) for day in days] == [("2026-12-03", 1)]
    assert usage(compact_module, KEY_A, **{"from": "2026-12-04", "to": "2026-12-04"})["days"] == []


def test_an_s3_job_across_midnight_is_on_one_day_in_every_view(
        aws: dict[str, Any], s3_module: ModuleType, caplog: pytest.LogCaptureFixture, midnight: None) -> None:
    # The inline job was observed before its result was written to compacted/, and its entry's time read after.
    aws["s3"].create_bucket(Bucket=BUCKET)
    aws["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    ev = put_and_event(aws["s3"], "incoming/midnight.json", json.dumps(transcript()))
    caplog.clear()

    for _ in range(2):  # S3 delivers the event twice
        s3_module.handler(ev, LocalLambdaContext("S3CompactFunction", 300))

    (line,) = billing_lines(caplog)
    (item,) = ledger_items(aws)
    assert item["sk"]["S"].startswith("2026-12-03#")  # was 2026-12-04
    assert line["time"] == item["time"]["S"] == BEFORE
    report = billing.backends().ledger.totals("2026-12-01", "2026-12-04")  # compactor usage --table
    assert [(day.day, day.calls) for day in report[f"s3:{BUCKET}"]] == [("2026-12-03", 1)]


def entries(count: int, cost: float | None, day: str = "2026-11-05") -> list[core_billing.LedgerEntry]:
    facts = core_billing.billing_facts(route="compact", mode="decision", bytes_in=10, bytes_out=4, model_calls=1,
                                       cost_usd=cost)
    return [core_billing.make_entry(entry_id=f"req:{cost}:{n}", api_key_id=KEY_A, facts=facts,
                                    time=f"{day}T12:00:00.000000Z") for n in range(count)]


def test_a_days_cost_is_the_exact_sum_of_its_calls_costs_in_every_ledger(tmp_path: Any, capsys: Any) -> None:
    # The local ledger (compactor serve, compactor usage --ledger) and a table's entries without totals were
    # summed as floats: 10,000 calls of $0.1 read 1000.0000000002, where the table's totals (DynamoDB adds
    # decimals) read 1000.0 for the same calls.
    import argparse

    from compactor_cli import usage_cmd

    calls = [*entries(10_000, 0.1), *entries(3, None), *entries(7, 0.07)]
    path = tmp_path / "ledger.jsonl"
    ledger = core_billing.LocalLedger(path=path)
    for entry in calls:
        assert ledger.record(entry)

    (day,) = core_billing.usage_body(KEY_A, "2026-11-01", "2026-11-30", ledger)["days"]
    assert (day["calls"], day["cost_usd"], day["calls_cost_unknown"]) == (10_010, 1000.49, 3)
    args = argparse.Namespace(ledger=path, table=None, first="2026-11-01", last="2026-11-30", key=None, json=True,
                              backfill_totals=False, total=False)
    assert usage_cmd.run(args) == 0
    assert json.loads(capsys.readouterr().out)[KEY_A] == [day]


def test_a_tables_totals_and_entries_without_totals_add_up_exactly(aws: dict[str, Any]) -> None:
    # Stored totals items (decimals) and entries written before the totals were added up as floats.
    from compactor_aws.ledger import DynamoLedger, _item

    dynamo = DynamoLedger("compactor-usage-test", aws["dynamodb"])
    for entry in entries(3, 0.1):
        assert dynamo.record(entry)
    for entry in entries(3, 0.2):  # as a version from before the totals wrote them
        old = {**_item(entry), "day": {"S": entry.day}}
        aws["dynamodb"].put_item(TableName="compactor-usage-test", Item=old)

    (day,) = dynamo.totals("2026-11-01", "2026-11-30", KEY_A)[KEY_A]
    assert day.calls == 6 and day.as_dict()["cost_usd"] == 0.9
    assert day.cost_usd == Decimal("0.9")  # as floats: 0.9000000000000001


def test_two_callers_sending_one_key_at_once_each_get_their_own_answer_and_bill(
        aws: dict[str, Any], compact_module: ModuleType) -> None:
    import threading

    both_running = threading.Barrier(2, timeout=10)  # each computation waits for the other: neither is a 409
    answers: dict[str, billing.Answer] = {}

    def send(caller: str, cost: float) -> None:
        ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, caller=caller, headers={"Idempotency-Key": "k"})
        facts = core_billing.billing_facts(route="compact", mode="seal", bytes_in=9, bytes_out=3, model_calls=1,
                                           cost_usd=cost)

        def compute() -> billing.Computed:
            both_running.wait()
            return billing.Computed(200, json.dumps({"caller": caller}), facts)

        answers[caller] = billing.answer_call(ev, "compact", compute)

    threads = [threading.Thread(target=send, args=(caller, cost)) for caller, cost in ((KEY_A, 0.25), (KEY_B, 0.5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)

    assert {caller: (answer.status, json.loads(answer.body)) for caller, answer in answers.items()} == {
        KEY_A: (200, {"caller": KEY_A}), KEY_B: (200, {"caller": KEY_B})}
    assert sorted((item["api_key_id"]["S"], item["cost_usd"]["N"]) for item in ledger_items(aws)) == [
        (KEY_A, "0.25"), (KEY_B, "0.5")]
    for caller, cost in ((KEY_A, 0.25), (KEY_B, 0.5)):
        (day,) = usage(compact_module, caller)["days"]
        assert (day["calls"], day["cost_usd"]) == (1, cost)


def test_a_response_the_idempotency_store_could_not_keep_is_503_and_billed_once_when_retried(
        aws: dict[str, Any], compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from .conftest import IDEMPOTENCY_TABLE, idempotency_store_down_once

    idempotency_store_down_once(monkeypatch)
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "store-down"})

    unkept = call(compact_module, ev)  # computed, but neither stored nor delivered: not billed
    held = call(compact_module, dict(ev))  # the key is held until the Lambda's remaining time has passed
    (item,) = aws["dynamodb"].scan(TableName=IDEMPOTENCY_TABLE)["Items"]
    aws["dynamodb"].update_item(TableName=IDEMPOTENCY_TABLE, Key={"id": item["id"]},
                                UpdateExpression="SET in_progress_expiration = :past",
                                ExpressionAttributeValues={":past": {"N": str(int(time.time() * 1000) - 1)}})
    retried, replay = call(compact_module, dict(ev)), call(compact_module, dict(ev))

    assert json.loads(unkept["body"])["error"]["code"] == "idempotency_unavailable" and unkept["statusCode"] == 503
    assert json.loads(held["body"])["error"]["code"] == "idempotency_in_progress"
    assert (retried["statusCode"], replay["statusCode"], replay["body"]) == (200, 200, retried["body"])
    assert len(ledger_items(aws)) == 1 and usage(compact_module, KEY_A)["days"][0]["calls"] == 1


def test_another_body_under_a_key_still_running_is_422(aws: dict[str, Any]) -> None:
    first = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "running"})
    other = event("POST", "/compact", body={"messages": TRANSCRIPT[:1]}, headers={"Idempotency-Key": "running"})
    facts = core_billing.billing_facts(route="compact", mode="seal", bytes_in=9, bytes_out=3, model_calls=1,
                                       cost_usd=0.001)

    answers, refused = answered_while_computing(first, other, lambda: billing.Computed(200, '{"ok":true}', facts))

    assert refused.status == 422 and json.loads(refused.body)["error"]["code"] == "idempotency_key_reused"
    assert answers[0].status == 200 and len(ledger_items(aws)) == 1
