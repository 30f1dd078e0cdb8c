"""``GET /v1/usage`` as a busy caller's history grows: the route's work against the number of calls.

Run: ``.venv/bin/python tests/benchmarks/usage_report.py [--calls 400,3200] [--repeats 7]``

The usage table (template.yaml's keys) is a ``moto`` DynamoDB server on 127.0.0.1 (on a thread of this
process), so every request and answer goes through botocore and HTTP as on Lambda: signing, serialising,
parsing each returned item. The ledger is written through ``compactor_aws.ledger.DynamoLedger.record``, the
path every billed call takes (its transaction's writes applied one by one: moto copies the whole table for
every transaction, which made writing 4,000 entries take minutes). For each size N a new table holds one caller's N calls over the first ten days of November 2026 (mixed costs,
some unknown, some calls with unknown bytes) and another caller's few. The figures are the thread CPU time
of ``usage_answer`` (what the route runs: the caller from the event, the range, the ledger's reads, the
totals) for the whole month, the fastest of the repeats (the least disturbed by other processes on a shared
machine): the function's own work, which grows with the items its reads return; and the items its reads read
(DynamoDB's ``ScannedCount``: what they cost in read units, and their pages' latency, returned or filtered
out). Not its wall time: moto answers a range of a partition by walking the whole partition, where DynamoDB
reads only the range; its wall time is printed, not judged. The answer must equal the totals of what was
written (a report that misses or double-counts a call fails the benchmark, whatever its speed).

Goal: the route's work does not grow with the number of calls: the largest size's CPU time and items read
over the smallest's ≤ 1.5 each (8 times as many calls). Reading every entry grows linearly: botocore parses about
140 µs an entry here, so a caller with one call a minute waited about 6 s for a month's report and more
than API Gateway's 29 s for a year's, before the ledger kept daily totals (docs/billing.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TABLE = "compactor-usage-bench"
GOAL = 1.5
DAYS = 10  # the calls fall on the first ten days of the month: 40 or more a day, every shard of a day used
CALLER = "heavy-caller-key"
OTHER = "other-caller-key"


def _environment(endpoint: str) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_SESSION_TOKEN", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_DYNAMODB", endpoint)):
        os.environ[name] = value
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "COMPACTOR_IDEMPOTENCY_TABLE", "COMPACTOR_LEDGER_FILE",
                 "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"


def _entries(calls: int, caller: str, seed: int) -> list[Any]:
    from compactor.billing import billing_facts, make_entry

    rng = random.Random(seed)
    entries = []
    for index in range(calls):
        day, second = 1 + index % DAYS, rng.randrange(86_400)
        time_text = f"2026-11-{day:02d}T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}.{index % 10**6:06d}Z"
        known = rng.random() > 0.1
        facts = billing_facts(route="compact", mode="decision", bytes_in=rng.randrange(10_000, 900_000) if known else None,
                              bytes_out=rng.randrange(1_000, 90_000) if known else None, model_calls=rng.randrange(0, 25),
                              cost_usd=round(rng.random() / 50, 6) if rng.random() > 0.05 else None)
        entries.append(make_entry(entry_id=f"req:{caller}:{seed}:{index}", api_key_id=caller, facts=facts,
                                  time=time_text, request_id=f"r{index}"))
    return entries


class OneByOne:
    """A DynamoDB client whose ``transact_write_items`` applies each write of the transaction in turn."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def transact_write_items(self, TransactItems: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        for write in TransactItems:
            (operation, arguments), = write.items()
            {"Put": self.client.put_item, "Update": self.client.update_item}[operation](**arguments)
        return {}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure(calls: int, repeats: int, table: str) -> tuple[float, float, float, int]:
    """With ``calls`` calls of the caller in a new ``table``: the route's least thread CPU and median wall
    seconds over the repeats, the wall seconds the writes took per call, and the items the route's reads
    read (DynamoDB's ``ScannedCount``: what a read costs in read units, filtered or not)."""
    from compactor import http_api
    from compactor.billing import daily_totals
    from compactor_cli.sam_template import load_template
    from compactor_aws import billing, ledger

    os.environ["COMPACTOR_USAGE_TABLE"] = table
    ledger.reset_client()
    billing.reset_backends()
    spec = load_template(REPO / "template.yaml")["Resources"]["UsageTable"]["Properties"]
    ledger.dynamodb_client().create_table(TableName=table, **{name: spec[name] for name in (
        "BillingMode", "AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes") if name in spec})
    written = _entries(calls, CALLER, calls)
    writer = ledger.DynamoLedger(table, OneByOne(ledger.dynamodb_client()))
    started = time.perf_counter()
    for entry in written + _entries(20, OTHER, 1):
        assert writer.record(entry)
    write_s = (time.perf_counter() - started) / (calls + 20)
    # The event as API Gateway gives it (both query fields): the route reads every value of each bound, so an event
    # with the single-value field alone was answered for the default range, the current month, and the report was
    # judged on November's calls only while it was November.
    event = http_api.rest_proxy_event(method="GET", resource_path="/usage", headers=[], body=b"",
                                      query={"from": ["2026-11-01"], "to": ["2026-11-30"]})
    event["requestContext"]["identity"]["apiKeyId"] = CALLER
    expected = [day.as_dict() for day in daily_totals(written)]
    cpu, wall, scanned = [], [], []
    ledger.dynamodb_client().meta.events.register(
        "after-call.dynamodb.*", lambda parsed, **_: scanned.append(parsed.get("ScannedCount")))
    for _ in range(repeats):
        scanned.clear()
        started, cpu_started = time.perf_counter(), time.thread_time()
        status, body = billing.usage_answer(event)
        cpu.append(time.thread_time() - cpu_started)
        wall.append(time.perf_counter() - started)
        assert status == 200, body
        assert body["days"] == expected, "the report is not the totals of the calls written"
    # DynamoDB (and moto) give every read's ScannedCount: without them the items' ratio would pass as 0
    assert scanned and all(count is not None for count in scanned), "no ScannedCount seen: nothing to judge"
    return min(cpu), statistics.median(wall), write_s, sum(scanned)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", default="400,3200", help="comma-separated numbers of the caller's calls")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    _environment(f"http://127.0.0.1:{port}")
    try:
        sizes = sorted(int(size) for size in args.calls.split(","))
        results = {size: measure(size, args.repeats, f"{TABLE}-{size}") for size in sizes}
    finally:
        server.stop()
    print(f"usage_report: GET /v1/usage for November 2026, one caller's calls in a moto DynamoDB server "
          f"(thread CPU: the least of {args.repeats}; wall: their median)")
    for size, (cpu_s, wall_s, write_s, items) in results.items():
        print(f"  {size:6d} calls: the route's thread CPU {cpu_s * 1000:7.1f} ms ({cpu_s / size * 1e6:6.1f} µs a call), "
              f"items read {items}, "
              f"wall {wall_s * 1000:7.1f} ms (moto's walk of the partition included); "
              f"a billed call's ledger write {write_s * 1000:.2f} ms")
    ratio = results[sizes[-1]][0] / results[sizes[0]][0]
    items_ratio = results[sizes[-1]][3] / max(1, results[sizes[0]][3])
    met = ratio <= GOAL and items_ratio <= GOAL
    print(f"  items read at {sizes[-1]} calls / at {sizes[0]}: {items_ratio:.2f} (goal ≤ {GOAL})")
    print(f"  thread CPU at {sizes[-1]} calls / at {sizes[0]}: {ratio:.2f} "
          f"({sizes[-1] / sizes[0]:.0f}x the calls; goal ≤ {GOAL})  {'OK' if met else 'ABOVE GOAL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
