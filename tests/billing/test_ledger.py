"""The core usage ledger: exactly-once records, daily totals, ranges, the local file (no AWS)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from compactor.billing import (
    LocalLedger,
    UsageRangeError,
    billing_facts,
    daily_totals,
    make_entry,
    parse_range,
    totals_by_key,
)


def entry(entry_id: str, key: str = "k1", time: str = "2026-11-30T10:00:00.000000Z", cost: float | None = 0.5,
          bytes_in: int = 100, bytes_out: int = 40, model_calls: int = 2):
    facts = billing_facts(route="compact", mode="decision", bytes_in=bytes_in, bytes_out=bytes_out,
                          model_calls=model_calls, cost_usd=cost)
    return make_entry(entry_id=entry_id, api_key_id=key, facts=facts, time=time)


def test_an_entry_is_recorded_once_per_id(tmp_path: Path) -> None:
    ledger = LocalLedger(path=tmp_path / "ledger.jsonl")

    assert ledger.record(entry("a")) is True
    assert ledger.record(entry("a", cost=9.0)) is False
    reopened = LocalLedger(path=tmp_path / "ledger.jsonl")
    assert reopened.record(entry("a")) is False  # the file remembers across processes
    assert [e.cost_usd for e in reopened.entries("2026-11-01", "2026-11-30")] == [0.5]


def test_daily_totals_sum_known_costs_and_count_unknown_ones() -> None:
    days = daily_totals([entry("a"), entry("b", cost=None, bytes_out=100),
                         entry("c", time="2026-11-29T23:59:59.000000Z", cost=0.25)])

    assert [d.as_dict() for d in days] == [
        {"day": "2026-11-29", "calls": 1, "bytes_in": 100, "bytes_out": 40, "bytes_saved": 60, "model_calls": 2,
         "cost_usd": 0.25, "calls_cost_unknown": 0},
        {"day": "2026-11-30", "calls": 2, "bytes_in": 200, "bytes_out": 140, "bytes_saved": 60, "model_calls": 4,
         "cost_usd": 0.5, "calls_cost_unknown": 1}]


def test_entries_are_filtered_by_day_and_key() -> None:
    ledger = LocalLedger()
    for item in (entry("a"), entry("b", key="k2"), entry("c", time="2026-12-01T00:00:00.000000Z")):
        ledger.record(item)

    assert [e.entry_id for e in ledger.entries("2026-11-30", "2026-11-30", "k1")] == ["a"]
    assert sorted(totals_by_key(ledger.entries("2026-11-01", "2026-12-31"))) == ["k1", "k2"]


def test_parse_range_defaults_to_the_month_so_far() -> None:
    assert parse_range(None, None, today=date(2026, 11, 30)) == ("2026-11-01", "2026-11-30")
    assert parse_range("2026-01-01", "2026-12-31") == ("2026-01-01", "2026-12-31")


@pytest.mark.parametrize(("first", "last"), [("2026-1-1", "2026-01-02"), ("2026-02-30", None),
                                             ("2026-03-02", "2026-03-01"), ("2025-01-01", "2026-01-02")])
def test_parse_range_rejects(first: str, last: str | None) -> None:
    with pytest.raises(UsageRangeError):
        parse_range(first, last, today=date(2026, 11, 30))


def test_an_expired_idempotency_record_frees_its_key() -> None:
    from compactor.idempotency import MemoryRecordStore

    store = MemoryRecordStore()
    first = {"status": "COMPLETED", "expiry": 1000, "data": "{}"}
    in_progress = {"status": "INPROGRESS", "expiry": 5000, "in_progress_expiry": 1_500_000}

    assert store.put_new("k", first, now=999.0) is None
    assert store.put_new("k", {"status": "INPROGRESS", "expiry": 2000}, now=999.5) == first  # live: kept
    assert store.put_new("k", in_progress, now=1000.0) is None  # expired at 1000: replaced
    assert store.put_new("k", first, now=1499.0) == in_progress  # the first attempt still has time
    assert store.put_new("k", first, now=1500.0) is None  # its Lambda timed out: the key is free again


def test_idempotency_keys_are_checked_and_scoped() -> None:
    from compactor.idempotency import InvalidIdempotencyKey, checked_key, scope_id, ttl_seconds

    assert checked_key("  order-42 ") == "order-42"
    for bad in ("", "\t", "x" * 256, "k\u00e9y", "a\nb"):
        with pytest.raises(InvalidIdempotencyKey):
            checked_key(bad)
    assert scope_id("a", "compact", "k") != scope_id("b", "compact", "k") != scope_id("a", "flows", "k")
    assert scope_id("a:b", "compact", "k") != scope_id("a", "b:compact", "k")
    assert ttl_seconds({}) == 86400 and ttl_seconds({"COMPACTOR_IDEMPOTENCY_TTL_SECONDS": "5"}) == 60
    assert ttl_seconds({"COMPACTOR_IDEMPOTENCY_TTL_SECONDS": "604800"}) == 86400  # the bucket keeps bodies 2 days


def test_compactor_usage_needs_a_ledger_and_a_good_range(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from compactor_cli.main import build_parser, main

    monkeypatch.delenv("COMPACTOR_USAGE_TABLE", raising=False)
    assert main(["usage"]) == 2
    assert main(["usage", "--ledger", str(tmp_path / "none.jsonl"), "--from", "2026-13-01"]) == 2
    ledger = LocalLedger(path=tmp_path / "l.jsonl")
    ledger.record(entry("a", key="k2"))
    ledger.record(entry("b", key="k1", cost=None))
    capsys.readouterr()

    assert main(["usage", "--ledger", str(tmp_path / "l.jsonl"), "--from", "2026-11-01", "--to", "2026-11-30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t")[:3] == ["api_key_id", "day", "calls"]
    assert [line.split("\t")[0] for line in lines[1:]] == ["k1", "k2"]
    assert build_parser().parse_args(["serve", "--ledger", "x.jsonl"]).ledger == Path("x.jsonl")
