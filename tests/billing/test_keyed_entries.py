"""Ledger entries of keyed calls on the local stores (``compactor serve``): a key computed again after its TTL
is billed again, once, and a replay of a stored response bills nothing more, on whichever instance it lands
(docs/billing.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from compactor import billing as core_billing
from compactor_aws import billing

FACTS = core_billing.billing_facts(route="compact", mode="legacy", bytes_in=10, bytes_out=4, model_calls=1,
                                   cost_usd=0.5)


def event(request_id: str) -> dict[str, Any]:
    return {"headers": {"Idempotency-Key": "k1"}, "body": "{}",
            "requestContext": {"requestId": request_id, "identity": {"apiKeyId": "caller-a"}}}


class Counter:
    """A compute that counts its runs and answers its run's number."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self) -> billing.Computed:
        self.runs += 1
        return billing.Computed(200, json.dumps({"run": self.runs}), FACTS)


def all_entries(ledger: core_billing.UsageLedger) -> list[core_billing.LedgerEntry]:
    return list(ledger.entries("2000-01-01", "2999-12-31"))


def test_in_memory_a_key_computed_again_after_its_ttl_is_billed_again_and_replays_are_not() -> None:
    compute = Counter()
    first = billing.answer_call(event("r1"), "compact", compute)
    for record in billing.backends().layer.store.records.values():
        record["expiry"] = time.time() - 1  # the TTL has passed
    again = billing.answer_call(event("r2"), "compact", compute)
    replay = billing.answer_call(event("r3"), "compact", compute)

    assert (first.body, again.body, replay.body) == ('{"run": 1}', '{"run": 2}', '{"run": 2}')
    assert replay.headers == {billing.REPLAYED_HEADER: "true"} and compute.runs == 2
    entries = all_entries(billing.backends().ledger)
    assert [entry.request_id for entry in entries] == ["r1", "r2"]
    assert len({entry.entry_id for entry in entries}) == 2


def test_serve_workers_over_one_directory_bill_each_computation_once_wherever_its_replay_lands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_IDEMPOTENCY_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("COMPACTOR_LEDGER_FILE", str(tmp_path / "ledger.jsonl"))
    workers = [billing.Backends(), billing.Backends()]  # two processes of compactor serve --workers 2
    for worker in workers:
        assert isinstance(worker.ledger, core_billing.LocalLedger)
    compute = Counter()

    def on(worker: int, request_id: str) -> billing.Answer:
        monkeypatch.setattr(billing.BACKENDS, "value", workers[worker])
        return billing.answer_call(event(request_id), "compact", compute)

    answers = [on(0, "r1"), on(1, "r2")]
    for path in (tmp_path / "shared" / "records").glob("*.json"):
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "expiry": time.time() - 1}))  # the TTL has passed
    answers += [on(1, "r3"), on(0, "r4"), on(1, "r5")]

    assert [answer.body for answer in answers] == ['{"run": 1}'] * 2 + ['{"run": 2}'] * 3
    assert compute.runs == 2
    for ledger in (*(worker.ledger for worker in workers), core_billing.LocalLedger(path=tmp_path / "ledger.jsonl")):
        assert [entry.request_id for entry in all_entries(ledger)] == ["r1", "r3"]
