"""The DynamoDB ledger's daily totals (docs/billing.md#get-v1usagefromyyyy-mm-ddtoyyyy-mm-dd): written with each entry in one
transaction, read instead of the entries, exact across retries, shards, unknown costs and entries written
before the totals existed."""

from __future__ import annotations

import random
from typing import Any

import pytest
from botocore.exceptions import ClientError

from compactor.billing import LedgerEntry, billing_facts, make_entry, totals_by_key
from compactor_aws import ledger as dynamo
from compactor_aws.ledger import TOTALS_PREFIX, TOTALS_SHARDS, DynamoLedger, _item

from .conftest import USAGE_TABLE, table_entries


def entry(index: int, key: str, day: int, rng: random.Random, month: str = "2026-11") -> LedgerEntry:
    known = rng.random() > 0.2
    facts = billing_facts(route=rng.choice(("compact", "s3_compact")), mode="decision",
                          bytes_in=rng.randrange(100, 10**6) if known else None,
                          bytes_out=rng.randrange(10, 10**5) if known else None, model_calls=rng.randrange(0, 30),
                          # (moto's ADD cannot add to a sum it wrote in exponent form, as for 1E-7: costs >= 1e-6 here)
                          cost_usd=rng.choice((None, 0.0, round(rng.random() / 7, 6) or 1e-6, 1e-6, 0.1)))
    return make_entry(entry_id=f"req:{key}:{index}", api_key_id=key, facts=facts,
                      time=f"{month}-{day:02d}T{rng.randrange(24):02d}:00:00.{index:06d}Z", request_id=f"r{index}")


def as_dicts(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {key: [day.as_dict() for day in days] for key, days in report.items()}


def test_the_totals_equal_the_entries_totals_through_retries_and_unknown_costs(aws: dict[str, Any]) -> None:
    rng = random.Random(11)
    ledger = DynamoLedger(USAGE_TABLE, aws["dynamodb"])
    written = [entry(index, rng.choice(("k1", "k2", "s3:bucket")), rng.randrange(1, 31), rng) for index in range(300)]
    for item in written:
        assert ledger.record(item) is True
    for item in rng.sample(written, 60):  # retries and replays: the entry exists, nothing more is added
        assert ledger.record(item) is False

    expected = as_dicts(totals_by_key(written))
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30")) == expected
    for key in expected:
        assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", key)) == {key: expected[key]}
        assert as_dicts(ledger.totals("2026-11-10", "2026-11-12", key)) == as_dicts(totals_by_key(
            item for item in written if item.api_key_id == key and "2026-11-10" <= item.day <= "2026-11-12"))
    assert ledger.totals("2026-11-01", "2026-11-30", "nobody") == {}
    assert len(table_entries(aws["dynamodb"])) == 300  # and the totals items count exactly them


def test_a_callers_report_reads_at_most_the_shards_of_each_day_not_every_entry(
        aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    reads: list[tuple[dict[str, Any], int]] = []

    class Counting:  # the client, keeping each read's arguments and the number of items it returned
        def __init__(self, client: Any) -> None:
            self.client = client

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

        def query(self, **arguments: Any) -> Any:
            answer = self.client.query(**arguments)
            reads.append((arguments, len(answer["Items"])))
            return answer

        def get_paginator(self, name: str) -> Any:
            pages = self.client.get_paginator(name)

            class Paginator:
                def paginate(self, **arguments: Any) -> Any:
                    for page in pages.paginate(**arguments):
                        reads.append((arguments, len(page["Items"])))
                        yield page
            return Paginator()

    ledger = DynamoLedger(USAGE_TABLE, Counting(aws["dynamodb"]), notes_since=True)  # the deployed functions'
    monkeypatch.setattr(dynamo, "utc_now_iso", lambda: "2026-10-01T00:00:00.000000Z")
    assert ledger.totals("2026-10-01", "2026-10-01", "busy") == {}  # the first report, in October, notes it
    written = [entry(index, "busy", 1 + index % 3, rng) for index in range(400)]
    for item in written:
        ledger.record(item)
    reads.clear()

    report = ledger.totals("2026-11-01", "2026-11-30", "busy")

    assert as_dicts(report) == as_dicts(totals_by_key(written))
    # the note and the stored totals (3 days of at most TOTALS_SHARDS items); no read of the entries: the
    # note is older than November by more than the margin
    assert sum(returned for _, returned in reads) <= 3 * TOTALS_SHARDS + 1, reads
    bounds = [arguments["ExpressionAttributeValues"] for arguments, _ in reads]
    assert all(values[":sk"]["S"] == "totals-since" if ":sk" in values else
               values[":first"]["S"].startswith(TOTALS_PREFIX) for values in bounds), bounds


def test_entries_written_before_the_totals_are_counted_once_with_the_new_ones(aws: dict[str, Any]) -> None:
    rng = random.Random(3)
    client = aws["dynamodb"]
    ledger = DynamoLedger(USAGE_TABLE, client)
    # the previous version's entries: a plain conditional PutItem each, no totals, no "totaled"
    before = [entry(index, "k1", day, rng) for index, day in enumerate((1, 2, 2, 3, 5))]
    for item in before:
        client.put_item(TableName=USAGE_TABLE, Item=_item(item), ConditionExpression="attribute_not_exists(sk)")
    assert ledger.record(before[0]) is False  # a replay of a call billed before the upgrade adds nothing
    after = [entry(100 + index, "k1", day, rng) for index, day in enumerate((2, 5, 6, 20, 21))]
    for item in after:
        assert ledger.record(item) is True

    everything = as_dicts(totals_by_key(before + after))
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == everything
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30")) == everything
    assert as_dicts(ledger.totals("2026-11-02", "2026-11-05", "k1")) == as_dicts(totals_by_key(
        item for item in before + after if "2026-11-02" <= item.day <= "2026-11-05"))


def test_entries_without_totals_are_read_only_up_to_the_margin_after_the_note(
        aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # An entry without totals dated after the note plus the margin cannot come from the previous version, so
    # the report does not read that far: planted there, it is not counted.
    client = aws["dynamodb"]
    ledger = DynamoLedger(USAGE_TABLE, client, notes_since=True)
    rng = random.Random(8)
    monkeypatch.setattr(dynamo, "utc_now_iso", lambda: "2026-11-10T23:00:00.000000Z")
    first = entry(1, "k1", 10, rng)
    ledger.record(first)
    within, beyond = entry(2, "k1", 12, rng), entry(3, "k1", 13, rng)  # 10th 23:00 + 2 days = the 12th
    for item in (within, beyond):
        client.put_item(TableName=USAGE_TABLE, Item=_item(item))

    # the first report finds no note: it reads every day, and notes the 10th for the next ones
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == as_dicts(
        totals_by_key([first, within, beyond]))
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == as_dicts(totals_by_key([first, within]))
    assert ledger.totals("2026-11-13", "2026-11-30", "k1") == {}
    # the operator's report does not depend on the note
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30")) == as_dicts(totals_by_key([first, within, beyond]))
    # without the note (a rollback's remedy, docs/billing.md) every day is read again, and noted anew
    client.delete_item(TableName=USAGE_TABLE, Key=dynamo.SINCE_KEY)
    monkeypatch.setattr(dynamo, "utc_now_iso", lambda: "2026-11-20T00:00:00.000000Z")
    for _ in range(2):
        assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == as_dicts(
            totals_by_key([first, within, beyond]))


def test_only_the_deployed_functions_report_notes_and_a_failed_note_fails_nothing(
        aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    client = aws["dynamodb"]
    rng = random.Random(6)
    monkeypatch.setattr(dynamo, "utc_now_iso", lambda: "2026-11-01T00:00:00.000000Z")

    def noted() -> str | None:
        item = client.get_item(TableName=USAGE_TABLE, Key=dynamo.SINCE_KEY).get("Item")
        return item and item["since"]["S"]

    DynamoLedger(USAGE_TABLE, client, notes_since=True).record(entry(1, "k1", 1, rng))
    assert noted() is None  # a billed call writes no note: its write is the transaction alone
    DynamoLedger(USAGE_TABLE, client).totals("2026-11-01", "2026-11-30", "k1")
    assert noted() is None  # compactor usage may run before the stack is upgraded: it never notes

    class Throttled:  # the note's write fails: the report is still answered, the next one notes
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        def put_item(self, **arguments: Any) -> Any:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "PutItem")

    assert DynamoLedger(USAGE_TABLE, Throttled(), notes_since=True).totals("2026-11-01", "2026-11-30", "k1")
    assert noted() is None
    deployed = DynamoLedger(USAGE_TABLE, client, notes_since=True)
    deployed.totals("2026-11-01", "2026-11-30", "k1")
    assert noted() == "2026-11-01T00:00:00.000000Z"
    monkeypatch.setattr(dynamo, "utc_now_iso", lambda: "2026-11-09T00:00:00.000000Z")
    DynamoLedger(USAGE_TABLE, client, notes_since=True).totals("2026-11-01", "2026-11-30", "k1")
    assert noted() == "2026-11-01T00:00:00.000000Z"  # the first note's time stays
    from compactor_aws.ledger import configured_ledger
    assert configured_ledger({"COMPACTOR_USAGE_TABLE": USAGE_TABLE}).notes_since is True


def test_the_shards_spread_one_days_calls_and_a_call_lands_in_one(aws: dict[str, Any]) -> None:
    ledger = DynamoLedger(USAGE_TABLE, aws["dynamodb"])
    rng = random.Random(2)
    for index in range(64):
        ledger.record(entry(index, "k1", 7, rng))
    items = aws["dynamodb"].scan(TableName=USAGE_TABLE)["Items"]
    totals = [item for item in items if item["sk"]["S"].startswith(TOTALS_PREFIX)]
    assert len(totals) == TOTALS_SHARDS  # 64 calls of one day: every shard used
    assert {item["sk"]["S"].rsplit("#", 1)[0] for item in totals} == {f"{TOTALS_PREFIX}2026-11-07"}
    assert sum(int(item["calls"]["N"]) for item in totals) == 64


def cancelled(*reasons: str | None) -> ClientError:
    return ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                        "CancellationReasons": [{"Code": reason or "None"} for reason in reasons]},
                       "TransactWriteItems")


class Conflicting:
    """A client whose first ``conflicts`` transactions are cancelled by another on the totals item (or
    for ``reason``)."""

    def __init__(self, conflicts: int, reason: str = "TransactionConflict") -> None:
        self.conflicts, self.calls, self.reason = conflicts, 0, reason

    def transact_write_items(self, **arguments: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.conflicts:
            raise cancelled(None, self.reason)
        return {}


@pytest.mark.parametrize("reason", ["TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"])
def test_a_transaction_cancelled_by_a_conflict_or_throttling_is_tried_again(
        monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    waits: list[float] = []
    monkeypatch.setattr(dynamo.time, "sleep", waits.append)
    rng = random.Random(1)

    client = Conflicting(conflicts=2, reason=reason)
    assert DynamoLedger("t", client).record(entry(1, "k1", 1, rng)) is True
    assert client.calls == 3 and len(waits) == 2

    client = Conflicting(conflicts=dynamo.CONFLICT_ATTEMPTS, reason=reason)
    with pytest.raises(ClientError):
        DynamoLedger("t", client).record(entry(2, "k1", 1, rng))
    assert client.calls == dynamo.CONFLICT_ATTEMPTS


def test_other_cancellations_and_errors_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynamo.time, "sleep", lambda seconds: None)

    class Failing:
        def __init__(self, error: ClientError) -> None:
            self.error, self.calls = error, 0

        def transact_write_items(self, **arguments: Any) -> dict[str, Any]:
            self.calls += 1
            raise self.error

    rng = random.Random(4)
    exists = Failing(cancelled("ConditionalCheckFailed", None))
    assert DynamoLedger("t", exists).record(entry(1, "k1", 1, rng)) is False and exists.calls == 1
    for error in (cancelled(None, "ValidationError"),
                  ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "TransactWriteItems")):
        failing = Failing(error)
        with pytest.raises(ClientError):
            DynamoLedger("t", failing).record(entry(2, "k1", 1, rng))
        assert failing.calls == 1


def test_a_costs_share_of_the_totals_is_rounded_to_fifteen_decimals() -> None:
    # A DynamoDB number holds 38 significant digits: a day's sum of costs of very different sizes, each
    # added with its 17 digits, could pass them and fail the billed call's write.
    def added(cost: float | None) -> str | None:
        item = make_entry(entry_id="req:x", api_key_id="k", time="2026-11-01T00:00:00.000000Z", facts=billing_facts(
            route="compact", mode="decision", bytes_in=1, bytes_out=1, model_calls=1, cost_usd=cost))
        value = dynamo._totals_update("t", item)["ExpressionAttributeValues"].get(":cost_usd")
        return value and value["N"]

    assert added(1.5000000000000002e-07) == "0.00000015"
    assert added(0.0123) == "0.0123" and added(0.0) == "0" and added(1e-20) == "0"
    assert added(1.2345678901234567e13) == "12345678901234.566"  # too large to round: kept
    assert added(None) is None  # an unknown cost adds none (calls_cost_unknown counts it)
