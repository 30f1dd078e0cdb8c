"""The core usage ledger: exactly-once records, daily totals, ranges, the local file (no AWS)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from compactor.billing import (
    LedgerEntry,
    LocalLedger,
    UsageRangeError,
    billing_facts,
    daily_totals,
    make_entry,
    parse_range,
    totals_by_key,
    usage_body,
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


def _held(value: object, depth: int = 0) -> Iterator[object]:
    """What ``value`` holds in its attributes and containers (a few levels down)."""
    yield value
    if depth < 4:
        children = (value.values() if isinstance(value, dict) else value if isinstance(value, (list, set, tuple))
                    else vars(value).values() if hasattr(value, "__dict__") else ())
        for child in children:
            yield from _held(child, depth + 1)


def test_a_ledger_file_is_not_held_in_memory_only_its_entry_ids_and_its_totals_are_unchanged(
        tmp_path: Path) -> None:
    # A compactor serve worker runs for days: its ledger keeps what de-duplication needs (docs/billing.md).
    written = [entry(f"req:{index:05d}", key=f"k{index % 3}", time=f"2026-11-{10 + index % 20}T10:00:00.000000Z",
                     cost=None if index % 7 == 0 else 0.01 * (index % 5), bytes_in=100 + index, bytes_out=index % 50,
                     model_calls=index % 4) for index in range(3000)]
    ledger, memory = LocalLedger(path=tmp_path / "ledger.jsonl"), LocalLedger()
    for item in written + written[::10]:  # a tenth written twice (replays on the same process)
        ledger.record(item)
        memory.record(item)

    held = list(_held(ledger))
    assert not any(isinstance(value, LedgerEntry) for value in held)
    assert ledger._ids == {item.entry_id for item in written}
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == len(written)
    reopened = LocalLedger(path=tmp_path / "ledger.jsonl")
    assert reopened.record(written[5]) is False and reopened._ids == ledger._ids
    for key in (None, "k0", "k2"):
        for first, last in (("2026-11-01", "2026-11-30"), ("2026-11-12", "2026-11-12")):
            expected = [day.as_dict() for day in daily_totals(
                item for item in written if first <= item.day <= last and key in (None, item.api_key_id))]
            assert [day.as_dict() for day in daily_totals(ledger.entries(first, last, key))] == expected
            assert [day.as_dict() for day in daily_totals(memory.entries(first, last, key))] == expected
            if key is not None:
                assert usage_body(key, first, last, reopened)["days"] == expected


def test_workers_appending_to_one_file_are_counted_once_each(tmp_path: Path) -> None:
    # compactor serve --workers N: each process de-duplicates its own writes; reads de-duplicate.
    one, other = LocalLedger(path=tmp_path / "l.jsonl"), LocalLedger(path=tmp_path / "l.jsonl")
    assert one.record(entry("idem:a:1")) is True
    assert other.record(entry("idem:a:1")) is True  # a replay on the other worker: its line once more
    assert one.record(entry("idem:a:1")) is other.record(entry("idem:a:1")) is False
    for ledger in (one, other, LocalLedger(path=tmp_path / "l.jsonl")):
        assert [day.calls for day in daily_totals(ledger.entries("2026-11-01", "2026-11-30"))] == [1]


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
                                             ("2026-03-02", "2026-03-01"), ("2025-01-01", "2026-01-02"),
                                             ("2026-W01-1", "2026-01-10"), ("2026-01-01", "2026-W02-1"),
                                             ("2026-001-01", None), ("\uff12\uff10\uff12\uff16-01-01", None)])
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


def test_compactor_usage_key_takes_the_key_a_server_was_given_or_its_id(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``compactor serve --api-key dev-key`` files calls under dev-key's hashed id: ``--key dev-key`` finds them
    (it found nothing: only the id was matched, and nothing local said how to get it), the id still works, and the
    key itself is never printed."""
    from compactor.caller import local_key_id
    from compactor_cli.main import main

    path = tmp_path / "l.jsonl"
    ledger = LocalLedger(path=path)
    ledger.record(entry("a", key=local_key_id("dev-key")))
    ledger.record(entry("b", key=local_key_id("other-key")))
    ledger.record(entry("c", key="anonymous"))
    capsys.readouterr()
    for key in ("dev-key", local_key_id("dev-key")):
        assert main(["usage", "--ledger", str(path), "--from", "2026-11-01", "--to", "2026-11-30", "--key", key]) == 0
        out, err = capsys.readouterr()
        assert [line.split("\t")[:3] for line in out.splitlines()[1:]] == [[local_key_id("dev-key"), "2026-11-30", "1"]]
        assert "dev-key" not in out.replace(local_key_id("dev-key"), "") + err
    assert main(["usage", "--ledger", str(path), "--from", "2026-11-01", "--to", "2026-11-30", "--key", "anonymous"]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["anonymous"]
    assert main(["usage", "--ledger", str(path), "--from", "2026-11-01", "--to", "2026-11-30", "--key", "nokey",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "{}" and "nokey" not in err


def test_the_api_document_describes_each_days_totals_with_their_units() -> None:
    """GET /v1/usage's days were untyped objects in the OpenAPI document: nothing said a cost is in US dollars,
    that unknown costs are left out of it, or what the byte counts count."""
    from dataclasses import fields

    from compactor.billing import DayTotals, usage_body
    from compactor_aws.openapi import Usage, UsageDay

    assert list(UsageDay.model_fields) == [field.name for field in fields(DayTotals)]
    assert "US dollars" in (UsageDay.model_fields["cost_usd"].description or "")
    ledger = LocalLedger()
    ledger.record(entry("a"))
    ledger.record(entry("b", cost=None))
    answer = {"api_key_id": "k1", **usage_body("k1", "2026-11-01", "2026-11-30", ledger)}
    assert Usage.model_validate(answer).days[0].calls_cost_unknown == 1


def test_a_line_cut_short_by_a_crash_is_skipped_and_the_next_entry_is_counted(tmp_path: Path) -> None:
    """A torn last line (a crash or a full disk mid-append; its call was never answered) made the file
    unreadable: the next server could not open it, every report raised, and the next entry, appended to the
    torn line, was lost with it."""
    path = tmp_path / "ledger.jsonl"
    LocalLedger(path=path).record(entry("a"))
    with path.open("ab") as out:
        out.write('{"entry_id":"b","api_key_id":"k1","time":"2026-11-30T1'.encode() + "é".encode()[:1])

    reopened = LocalLedger(path=path)
    assert reopened.record(entry("c")) and reopened.record(entry("b"))  # the torn one written again: a retry
    assert [e.entry_id for e in reopened.entries("2026-11-01", "2026-11-30")] == ["a", "c", "b"]
    totals = reopened.totals("2026-11-01", "2026-11-30", "k1")["k1"]
    assert [(day.calls, day.cost_usd) for day in totals] == [(3, 1.5)]
    path.write_text(path.read_text(encoding="utf-8", errors="replace") + '7\n["not", "an entry"]\n{"time": 1}\n')
    assert [e.entry_id for e in LocalLedger(path=path).entries("2026-11-01", "2026-11-30")] == ["a", "c", "b"]


def test_lines_that_are_no_entries_are_one_warning_with_their_count(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A warning for every line that is no entry flooded stderr with hundreds of lines on a file that is mostly
    not a ledger (and again on every report of a server reading it): now one line per file, with the count, and
    a torn last line is still skipped and named as before."""
    path = tmp_path / "ledger.jsonl"
    LocalLedger(path=path).record(entry("a"))
    with path.open("a", encoding="utf-8") as out:
        out.writelines(f"# line {number} of some notes\n" for number in range(600))
    caplog.set_level("WARNING", logger="compactor.billing")

    ledger = LocalLedger(path=path)
    assert [e.entry_id for e in ledger.entries("2026-11-01", "2026-11-30")] == ["a"]
    assert ledger.totals("2026-11-01", "2026-11-30")["k1"][0].calls == 1
    assert [record.getMessage() for record in caplog.records] == [
        f"usage ledger {path}: 600 lines are not ledger entries (the first: line 2); skipped"]

    path.write_text(path.read_text(encoding="utf-8").splitlines()[0] + '\n{"entry_id":"c","api_k')
    caplog.clear()
    torn = LocalLedger(path=path)
    assert [e.entry_id for e in torn.entries("2026-11-01", "2026-11-30")] == ["a"]
    assert [record.getMessage() for record in caplog.records] == [
        f"usage ledger {path}: line 2 is no entry (a write cut short?); skipped"]


def test_a_flows_call_saves_no_transcript_bytes_in_the_totals() -> None:
    """A ``/v1/flows`` entry's bytes are its HTTP request and response bodies, and its billing line says
    ``bytes_saved: null``; the day's totals used to add its request minus its response (here -200) to the
    compactions' savings, so the usage report disagreed with the records it sums."""
    flow = LedgerEntry(entry_id="f", api_key_id="k", request_id=None, time="2026-11-30T10:00:00.000000Z",
                       route="flows", mode="flow", bytes_in=100, bytes_out=300, model_calls=1, cost_usd=0.0)
    assert flow.bytes_saved is None
    (day,) = daily_totals([entry("a"), flow])
    assert (day.calls, day.bytes_in, day.bytes_out, day.bytes_saved) == (2, 200, 340, 60)


def test_compactor_usage_total_gives_each_keys_range_total_for_an_invoice(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """docs/billing.md "Invoicing from the ledger": ``--total`` prints one row per key, the range's totals summed
    exactly (the costs as decimals, rounded once), so that an invoice for a month is one line per key and not a sum
    of daily rows each rounded; the daily report is unchanged. Without it the operator added the days up by hand."""
    from compactor_cli.main import main

    path = tmp_path / "l.jsonl"
    ledger = LocalLedger(path=path)
    for index in range(30):  # $0.1 a call over three days: ten days' rows of floats would not read 3.0 exactly
        ledger.record(entry(f"a{index}", key="k1", cost=0.1, time=f"2026-11-{1 + index % 3:02d}T10:00:00Z"))
    ledger.record(entry("b", key="k1", cost=None, time="2026-11-05T10:00:00Z"))
    ledger.record(entry("c", key="k2", time="2026-11-30T10:00:00Z"))
    ledger.record(entry("d", key="k1", time="2026-12-01T10:00:00Z"))  # outside the range
    capsys.readouterr()
    assert main(["usage", "--ledger", str(path), "--from", "2026-11-01", "--to", "2026-11-30", "--total"]) == 0
    header, *rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert header == ["api_key_id", "from", "to", "calls", "bytes_in", "bytes_out", "bytes_saved", "model_calls",
                      "cost_usd", "calls_cost_unknown"]
    assert [row[:4] for row in rows] == [["k1", "2026-11-01", "2026-11-30", "31"], ["k2", "2026-11-01", "2026-11-30", "1"]]
    assert rows[0][8:] == ["3.0", "1"]
    assert main(["usage", "--ledger", str(path), "--from", "2026-11-01", "--to", "2026-11-30", "--total", "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)
    assert totals["k1"] == {"from": "2026-11-01", "to": "2026-11-30", "calls": 31, "bytes_in": 31 * 100,
                            "bytes_out": 31 * 40, "bytes_saved": 31 * 60, "model_calls": 62, "cost_usd": 3.0,
                            "calls_cost_unknown": 1}
    daily = main(["usage", "--ledger", str(path), "--from", "2026-11-01", "--to", "2026-11-30"])
    assert daily == 0 and len(capsys.readouterr().out.splitlines()) == 1 + 4 + 1  # header, k1's 4 days, k2's 1
