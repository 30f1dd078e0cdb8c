"""The three views of a billed call agree (docs/billing.md): its billing log line, its ledger entry and the totals of
``GET /v1/usage`` and ``compactor usage``, on the day a call is counted and to the last reported digit of its cost."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from compactor import billing as core_billing

from .test_api_billing import KEY_A

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
                              backfill_totals=False)
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
