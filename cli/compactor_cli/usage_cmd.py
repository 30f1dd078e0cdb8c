"""``compactor usage``: the operator's per-key, per-day totals from the usage ledger (docs/billing.md).

Reads the DynamoDB table (``--table``, default ``COMPACTOR_USAGE_TABLE``) or a local ledger file
(``--ledger``, what ``compactor serve --ledger`` writes). ``--key`` limits the report to one API key id.
``--backfill-totals`` first counts a table's entries written before the daily totals in them, once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from compactor.billing import LocalLedger, UsageLedger, UsageRangeError, parse_range

_COLUMNS = ("day", "calls", "bytes_in", "bytes_out", "bytes_saved", "model_calls", "cost_usd", "calls_cost_unknown")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--table", help="DynamoDB usage table (default: $COMPACTOR_USAGE_TABLE)")
    source.add_argument("--ledger", type=Path, metavar="FILE", help="local ledger file (compactor serve --ledger)")
    parser.add_argument("--from", dest="first", metavar="YYYY-MM-DD", help="first day (default: first of the month)")
    parser.add_argument("--to", dest="last", metavar="YYYY-MM-DD", help="last day, included (default: today, UTC)")
    parser.add_argument("--key", metavar="API_KEY_ID", help="only this API key id")
    parser.add_argument("--json", action="store_true", help="JSON: {api_key_id: [day totals]}")
    parser.add_argument("--backfill-totals", action="store_true",
                        help="with --table: count every entry written before the daily totals in them, once "
                             "(after an upgrade; reports over those days then read totals alone), then report")


def _ledger(args: argparse.Namespace) -> UsageLedger | None:
    if args.ledger is not None:
        return LocalLedger(path=args.ledger)
    from compactor_aws.ledger import TABLE_ENV, DynamoLedger

    table = args.table or os.environ.get(TABLE_ENV)
    return DynamoLedger(table) if table else None


def run(args: argparse.Namespace) -> int:
    """Print the report; 2 on a bad range, when no ledger is named or the named file is not there."""
    try:
        first, last = parse_range(args.first, args.last)
    except UsageRangeError as exc:
        print(f"compactor usage: {exc}", file=sys.stderr)
        return 2
    if args.ledger is not None and args.backfill_totals:
        print("compactor usage: --backfill-totals needs a DynamoDB table (--table)", file=sys.stderr)
        return 2
    if args.ledger is not None and not args.ledger.is_file():  # a mistyped path is not an empty ledger
        cause = "a directory, not a ledger file" if args.ledger.is_dir() else "no such file"
        print(f"compactor usage: --ledger {args.ledger}: {cause} (compactor serve --ledger FILE writes one)",
              file=sys.stderr)
        return 2
    ledger = _ledger(args)
    if isinstance(ledger, LocalLedger) and not ledger.reads_as_ledger():
        print(f"compactor usage: --ledger {args.ledger}: not a usage ledger (no line of it is an entry)",
              file=sys.stderr)
        return 2
    report = ledger.totals(first, last, args.key) if isinstance(ledger, LocalLedger) else None
    if ledger is None:
        print("compactor usage: name a ledger with --table, --ledger or COMPACTOR_USAGE_TABLE", file=sys.stderr)
        return 2
    if report is None:
        if args.backfill_totals:
            print(f"compactor usage: {ledger.total_untotaled()} entries counted in their daily totals",
                  file=sys.stderr)
        report = ledger.totals(first, last, args.key)  # a table's stored daily totals, not every entry
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
