"""``compactor usage``: the operator's per-key, per-day totals from the usage ledger (docs/billing.md).

Reads the DynamoDB table (``--table``, default ``COMPACTOR_USAGE_TABLE``) or a local ledger file
(``--ledger``, what ``compactor serve --ledger`` writes). ``--key`` limits the report to one API key: its id, or the
key itself, which is looked up under the id the server files it under (``local_key_id``) and never printed.
``--backfill-totals`` first counts a table's entries written before the daily totals in them, once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from compactor.billing import DayTotals, LocalLedger, UsageLedger, UsageRangeError, parse_range
from compactor.caller import local_key_id

_COLUMNS = ("day", "calls", "bytes_in", "bytes_out", "bytes_saved", "model_calls", "cost_usd", "calls_cost_unknown")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--table", help="DynamoDB usage table (default: $COMPACTOR_USAGE_TABLE)")
    source.add_argument("--ledger", type=Path, metavar="FILE", help="local ledger file (compactor serve --ledger)")
    parser.add_argument("--from", dest="first", metavar="YYYY-MM-DD", help="first day (default: first of the month)")
    parser.add_argument("--to", dest="last", metavar="YYYY-MM-DD", help="last day, included (default: today, UTC)")
    parser.add_argument("--key", metavar="API_KEY_ID|API_KEY",
                        help="only this API key: its id (api_key_id), or the key itself (compactor serve --api-key K: "
                             "its usage is under K's hashed id, key-...)")
    parser.add_argument("--json", action="store_true", help="JSON: {api_key_id: [day totals]}")
    parser.add_argument("--total", action="store_true",
                        help="one row per key: the range's totals (an invoice's line; JSON: {api_key_id: totals})")
    parser.add_argument("--backfill-totals", action="store_true",
                        help="with --table: count every entry written before the daily totals in them, once "
                             "(after an upgrade; reports over those days then read totals alone), then report")


def ledger_file_problem(path: Path, *, may_be_new: bool = False) -> str | None:
    """Why ``path`` cannot be a local usage ledger (what ``compactor serve --ledger FILE`` writes), or None:
    a directory, a file none of whose lines is an entry (a transcript or a README named by mistake), or, unless
    ``may_be_new`` (``serve`` creates it), no file. Its lines are read without a warning for each one that is no
    entry (the reports warn of a torn line among entries as they read)."""
    if path.is_dir():
        return "a directory, not a ledger file"
    if not path.exists():
        if not may_be_new:
            return "no such file (compactor serve --ledger FILE writes one)"
        above = next(parent for parent in path.parents if parent.exists())
        return None if above.is_dir() else f"cannot be created: {above} is not a directory"
    log = logging.getLogger(LocalLedger.__module__)
    was_disabled, log.disabled = log.disabled, True
    try:
        is_ledger = LocalLedger(path=path).reads_as_ledger()
    finally:
        log.disabled = was_disabled
    return None if is_ledger else "not a usage ledger (no line of it is an entry)"


def _key_totals(ledger: UsageLedger, first: str, last: str, key: str | None) -> dict[str, list[DayTotals]]:
    """The totals of ``key`` (all keys when None): ``key`` taken as a caller id, and as an API key filed under its
    :func:`~compactor.caller.local_key_id` (what ``compactor serve --api-key`` and the authorizer's principal
    file a key under). A key is never an id, and an id hashed is no id: one of the two finds nothing."""
    if key is None:
        return ledger.totals(first, last, None)
    report: dict[str, list[DayTotals]] = {}
    for key_id in dict.fromkeys((key, local_key_id(key))):
        report.update(ledger.totals(first, last, key_id))
    return report


def _ledger(args: argparse.Namespace) -> UsageLedger | None:
    if args.ledger is not None:
        return LocalLedger(path=args.ledger)
    from compactor_aws.ledger import TABLE_ENV, DynamoLedger

    table = args.table or os.environ.get(TABLE_ENV)
    return DynamoLedger(table) if table else None


def run(args: argparse.Namespace) -> int:
    """Print the report; 2 on a bad range, when no ledger is named or the named file is not one; 1 when the
    table cannot be read."""
    try:
        first, last = parse_range(args.first, args.last)
    except UsageRangeError as exc:
        print(f"compactor usage: {exc}", file=sys.stderr)
        return 2
    if args.ledger is not None and args.backfill_totals:
        print("compactor usage: --backfill-totals needs a DynamoDB table (--table)", file=sys.stderr)
        return 2
    problem = None if args.ledger is None else ledger_file_problem(args.ledger)  # a mistyped path is no empty ledger
    if problem:
        print(f"compactor usage: --ledger {args.ledger}: {problem}", file=sys.stderr)
        return 2
    ledger = _ledger(args)
    report = _key_totals(ledger, first, last, args.key) if isinstance(ledger, LocalLedger) else None
    if ledger is None:
        print("compactor usage: name a ledger with --table, --ledger or COMPACTOR_USAGE_TABLE", file=sys.stderr)
        return 2
    if report is None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            if args.backfill_totals:
                print(f"compactor usage: {ledger.total_untotaled()} entries counted in their daily totals",
                      file=sys.stderr)
            report = _key_totals(ledger, first, last, args.key)  # a table's stored daily totals, not every entry
        except (BotoCoreError, ClientError) as exc:  # no region or credentials, no such table, no network
            print(f"compactor usage: table {ledger.table} cannot be read: {exc}", file=sys.stderr)
            return 1
    if args.total:
        return _print_totals(report, first, last, as_json=args.json)
    if args.json:
        print(json.dumps({key: [day.as_dict() for day in days] for key, days in report.items()}, indent=2))
        return 0
    print("\t".join(("api_key_id", *_COLUMNS)))
    for key, days in report.items():
        for day in days:
            values = day.as_dict()
            print("\t".join((key, *(str(values[column]) for column in _COLUMNS))))
    if not report:
        print(f"(no billed calls from {first} to {last})", file=sys.stderr)
    return 0


def _print_totals(report: dict[str, list[DayTotals]], first: str, last: str, *, as_json: bool) -> int:
    """Each key's totals over ``first``..``last`` (``--total``): its days' totals added as they are kept (the costs
    as exact decimals), rounded once as a day's are (docs/billing.md "Invoicing from the ledger")."""
    totals: dict[str, dict[str, object]] = {}
    for key, days in report.items():
        summed = DayTotals(first)
        for day in days:
            summed.add_totals(day)
        values = summed.as_dict()
        del values["day"]
        totals[key] = {"from": first, "to": last, **values}
    if as_json:
        print(json.dumps(totals, indent=2))
        return 0
    columns = ("from", "to", *_COLUMNS[1:])
    print("\t".join(("api_key_id", *columns)))
    for key, values in totals.items():
        print("\t".join((key, *(str(values[column]) for column in columns))))
    if not totals:
        print(f"(no billed calls from {first} to {last})", file=sys.stderr)
    return 0
