"""The DynamoDB ledger's daily totals (docs/billing.md#get-v1usagefromyyyy-mm-ddtoyyyy-mm-dd): written with
each entry in one transaction, read instead of the entries, exact across retries, shards, unknown costs and
entries written without totals (before an upgrade, or after a rollback)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from botocore.exceptions import ClientError

from compactor.billing import LedgerEntry, billing_facts, make_entry, totals_by_key
from compactor_aws import ledger as dynamo
from compactor_aws.ledger import TOTALS_PREFIX, TOTALS_SHARDS, UNTOTALED_INDEX, DynamoLedger, _item

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


def old_item(item: LedgerEntry) -> dict[str, Any]:
    """The item a version from before the totals wrote for ``item``: the same, with ``day``, no ``totaled``."""
    return {**_item(item), "day": {"S": item.day}}


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


def test_a_callers_report_reads_at_most_the_shards_of_each_day_not_every_entry(aws: dict[str, Any]) -> None:
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

    ledger = DynamoLedger(USAGE_TABLE, Counting(aws["dynamodb"]))
    written = [entry(index, "busy", 1 + index % 3, rng) for index in range(400)]
    for item in written:
        ledger.record(item)
    before = [entry(1000 + index, "busy", 1 + index % 3, rng, month="2026-10") for index in range(50)]
    for item in before:  # October's entries, from before the upgrade: not in November's report
        aws["dynamodb"].put_item(TableName=USAGE_TABLE, Item=old_item(item))
    reads.clear()

    report = ledger.totals("2026-11-01", "2026-11-30", "busy")

    assert as_dicts(report) == as_dicts(totals_by_key(written))
    # the stored totals (3 days of at most TOTALS_SHARDS items) and the index of entries without totals
    # (none in November): no entry read
    assert sum(returned for _, returned in reads) <= 3 * TOTALS_SHARDS, reads
    assert [arguments.get("IndexName") for arguments, _ in reads] == [None, UNTOTALED_INDEX], reads
    assert reads[0][0]["ExpressionAttributeValues"][":first"]["S"].startswith(TOTALS_PREFIX)


def test_entries_written_before_the_totals_are_counted_once_with_the_new_ones(aws: dict[str, Any]) -> None:
    rng = random.Random(3)
    client = aws["dynamodb"]
    ledger = DynamoLedger(USAGE_TABLE, client)
    # the previous version's entries: a plain conditional PutItem each, with "day", no totals, no "totaled"
    before = [entry(index, "k1", day, rng) for index, day in enumerate((1, 2, 2, 3, 5))]
    for item in before:
        client.put_item(TableName=USAGE_TABLE, Item=old_item(item), ConditionExpression="attribute_not_exists(sk)")
    assert ledger.record(before[0]) is False  # a replay of a call billed before the upgrade adds nothing
    after = [entry(100 + index, "k1", day, rng) for index, day in enumerate((2, 5, 6, 20, 21))]
    for item in after:
        assert ledger.record(item) is True

    everything = as_dicts(totals_by_key(before + after))
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == everything
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30")) == everything
    assert as_dicts(ledger.totals("2026-11-02", "2026-11-05", "k1")) == as_dicts(totals_by_key(
        item for item in before + after if "2026-11-02" <= item.day <= "2026-11-05"))


def test_a_rollbacks_entries_without_totals_are_counted_whatever_their_day(aws: dict[str, Any]) -> None:
    # Upgrade, roll back (the old version writes entries without totals for days), upgrade again: the report
    # counts every entry, through the index that holds exactly those without totals.
    client = aws["dynamodb"]
    ledger = DynamoLedger(USAGE_TABLE, client)
    rng = random.Random(8)
    first = [entry(index, "k1", day, rng) for index, day in enumerate((1, 2, 3))]
    rolled_back = [entry(10 + index, "k1", day, rng) for index, day in enumerate((4, 9, 15, 28))]
    again = [entry(20 + index, "k1", day, rng) for index, day in enumerate((28, 29, 30))]
    for item in first:
        ledger.record(item)
    for item in rolled_back:
        client.put_item(TableName=USAGE_TABLE, Item=old_item(item))
    for item in again:
        ledger.record(item)

    everything = first + rolled_back + again
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == as_dicts(totals_by_key(everything))
    assert as_dicts(ledger.totals("2026-11-09", "2026-11-28", "k1")) == as_dicts(totals_by_key(
        item for item in everything if "2026-11-09" <= item.day <= "2026-11-28"))
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30")) == as_dicts(totals_by_key(everything))
    assert len(table_entries(client)) == 10


def test_the_index_holds_only_the_entries_written_without_totals(aws: dict[str, Any]) -> None:
    client = aws["dynamodb"]
    ledger = DynamoLedger(USAGE_TABLE, client)
    rng = random.Random(6)
    for index in range(20):
        ledger.record(entry(index, "k1", 1 + index % 5, rng))
    old = entry(99, "k1", 2, rng)
    client.put_item(TableName=USAGE_TABLE, Item=old_item(old))

    indexed = client.scan(TableName=USAGE_TABLE, IndexName=UNTOTALED_INDEX)["Items"]
    assert [item["sk"]["S"] for item in indexed] == [f"2026-11-02#{old.entry_id}"]  # no new entry, no totals item


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


def index_failing(client: Any, code: str) -> Any:
    """``client``, whose queries of the index fail with ``code``."""
    class Failing:
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        def get_paginator(self, name: str) -> Any:
            pages = client.get_paginator(name)

            class Paginator:
                def paginate(self, **arguments: Any) -> Any:
                    if "IndexName" in arguments:
                        raise ClientError({"Error": {"Code": code, "Message": "index says no"}}, "Query")
                    return pages.paginate(**arguments)
            return Paginator()
    return Failing()


def test_without_a_readable_index_the_entries_without_totals_are_read_from_the_table(aws: dict[str, Any]) -> None:
    # While DynamoDB builds the index after an upgrade (or on a table or role without it) the report reads
    # the range's entries and keeps those without totals: as exact.
    client = aws["dynamodb"]
    client.create_table(
        TableName="no-index", BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "api_key_id", "AttributeType": "S"},
                              {"AttributeName": "sk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "api_key_id", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}])
    ledger = DynamoLedger("no-index", client)
    rng = random.Random(12)
    new = [entry(index, "k1", 1 + index % 4, rng) for index in range(12)]
    old = [entry(50 + index, "k1", 1 + index % 6, rng) for index in range(7)]
    for item in new:
        ledger.record(item)
    for item in old:
        client.put_item(TableName="no-index", Item=old_item(item))

    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == as_dicts(totals_by_key(new + old))

    denied = index_failing(client, "AccessDeniedException")  # a role without the index's grant
    assert as_dicts(DynamoLedger("no-index", denied).totals("2026-11-01", "2026-11-30", "k1")) == as_dicts(
        totals_by_key(new + old))


@pytest.mark.parametrize("code", ["ThrottlingException", "InternalServerError", "ProvisionedThroughputExceededException"])
def test_an_index_read_that_fails_otherwise_fails_the_report(aws: dict[str, Any], code: str) -> None:
    # Throttling or a server error is not an unreadable index: reading the whole range from the table
    # instead would add load where the table is already throttled.
    ledger = DynamoLedger(USAGE_TABLE, index_failing(aws["dynamodb"], code))
    with pytest.raises(ClientError):
        ledger.totals("2026-11-01", "2026-11-30", "k1")


def test_the_fallback_is_logged_once_per_ledger(aws: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    ledger = DynamoLedger(USAGE_TABLE, index_failing(aws["dynamodb"], "ValidationException"))
    with caplog.at_level("WARNING", logger="compactor_aws.ledger"):
        for _ in range(3):
            ledger.totals("2026-11-01", "2026-11-30", "k1")
    warnings = [record for record in caplog.records if record.name == "compactor_aws.ledger"]
    assert len(warnings) == 1 and "untotaled-by-day" in warnings[0].getMessage()
    assert "ValidationException" in warnings[0].getMessage()


def test_an_entry_with_both_day_and_totaled_counts_once_in_every_view(aws: dict[str, Any]) -> None:
    # No version writes such an item (this round's first design did), but a half-done hand migration could:
    # the index query keeps only entries without "totaled", as the fallback and the operator's scan do.
    client = aws["dynamodb"]
    ledger = DynamoLedger(USAGE_TABLE, client)
    rng = random.Random(9)
    written = [entry(index, "k1", 3, rng) for index in range(6)]
    for item in written:
        ledger.record(item)
    client.update_item(TableName=USAGE_TABLE, Key={"api_key_id": {"S": "k1"},
                                                   "sk": {"S": f"2026-11-03#{written[0].entry_id}"}},
                       UpdateExpression="SET #day = :day", ExpressionAttributeNames={"#day": "day"},
                       ExpressionAttributeValues={":day": {"S": "2026-11-03"}})

    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", "k1")) == as_dicts(totals_by_key(written))
    assert len(table_entries(client)) == 6  # the operator's scan and the caller's report agree


def test_the_backfill_totals_every_old_entry_once_and_the_reports_do_not_change(
        aws: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from compactor_cli.main import main

    client = aws["dynamodb"]
    ledger = DynamoLedger(USAGE_TABLE, client)
    rng = random.Random(13)
    old = [entry(index, rng.choice(("k1", "k2")), rng.randrange(1, 31), rng) for index in range(40)]
    new = [entry(100 + index, rng.choice(("k1", "k2")), rng.randrange(1, 31), rng) for index in range(30)]
    for item in old:
        client.put_item(TableName=USAGE_TABLE, Item=old_item(item))
    for item in new:
        ledger.record(item)
    expected = as_dicts(totals_by_key(old + new))
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30")) == expected

    capsys.readouterr()
    assert main(["usage", "--table", USAGE_TABLE, "--from", "2026-11-01", "--to", "2026-11-30", "--json",
                 "--backfill-totals"]) == 0
    out = capsys.readouterr()
    assert "40 entries counted" in out.err and json.loads(out.out) == expected
    assert client.scan(TableName=USAGE_TABLE, IndexName=UNTOTALED_INDEX)["Items"] == []  # none left to read
    for key in expected:  # the caller's reports now read totals alone, and read the same
        assert as_dicts(ledger.totals("2026-11-01", "2026-11-30", key)) == {key: expected[key]}
    assert len(table_entries(client)) == 70
    assert ledger.total_untotaled() == 0  # again: nothing more
    assert as_dicts(ledger.totals("2026-11-01", "2026-11-30")) == expected
    assert ledger.record(old[0]) is False  # a replay of an old call still adds nothing


def test_the_backfill_needs_a_table(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from compactor_cli.main import main

    assert main(["usage", "--ledger", str(tmp_path / "l.jsonl"), "--backfill-totals"]) == 2
    assert "needs a DynamoDB table" in capsys.readouterr().err
