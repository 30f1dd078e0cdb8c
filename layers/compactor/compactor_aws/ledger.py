"""The usage ledger in DynamoDB (docs/billing.md): ``compactor.billing.UsageLedger`` over one table.

Item: partition key ``api_key_id``, sort key ``sk`` = ``<YYYY-MM-DD>#<entry id>``, so one caller's
days are one ``Query``. ``cost_usd`` is absent when the cost is unknown (``cost_known`` false).
``COMPACTOR_USAGE_TABLE`` names the table.

Each entry is written in one transaction with its day's totals: a ``Put`` with ``attribute_not_exists(sk)``
(so an entry is written once however often a call is retried, and a retry adds nothing to the totals) and an
``ADD`` to one of :data:`TOTALS_SHARDS` totals items of the caller and day (``sk`` = ``total#<day>#<shard>``,
the shard from the entry id, so that one caller's concurrent calls seldom update one item). The usage route
reads those items, at most ``TOTALS_SHARDS`` a day, instead of every entry. Entries written without totals
(by a version from before them, before an upgrade or after a rollback) are the ones with a ``day`` attribute:
the route reads them, and only them, through the sparse index :data:`UNTOTALED_INDEX` on (``api_key_id``,
``day``), and counts them one by one (:meth:`DynamoLedger.totals`).
"""

from __future__ import annotations

import logging
import os
import random
import time
import zlib
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from compactor.billing import TOTALED, DayTotals, LedgerEntry, LocalLedger, UsageLedger
from compactor.container import PerContainer

logger = logging.getLogger(__name__)
TABLE_ENV = "COMPACTOR_USAGE_TABLE"
LEDGER_FILE_ENV = "COMPACTOR_LEDGER_FILE"
_NUMBERS = ("bytes_in", "bytes_out", "model_calls", "cost_usd")
_TEXTS = ("entry_id", "request_id", "time", "route", "mode", "idempotency_key")
TOTALS_PREFIX = "total#"
TOTALS_SHARDS = 16
"""Totals items per caller and day: concurrent transactions on one item cancel each other
(``TransactionConflict``), so one caller's concurrent calls spread over this many."""
TOTALED_ATTRIBUTE = "totaled"
"""Set on every entry written with its day's totals (which has no ``day`` attribute)."""
UNTOTALED_INDEX = "untotaled-by-day"
"""template.yaml's index of the usage table on (``api_key_id``, ``day``): only entries written without
totals have ``day``, so it holds those and nothing else."""
_INDEX_UNREADABLE = frozenset({"ValidationException", "ResourceNotFoundException", "AccessDeniedException"})
CONFLICT_ATTEMPTS = 8
RETRIED_CANCELLATIONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
"""Why a transaction may be cancelled and then succeed as it is: another on the same item, or throttling
(which botocore's retries do not see inside a cancellation)."""
_LAST = "\U0010ffff"


def _new_client() -> Any:
    from botocore.config import Config

    from compactor_aws import aws_session

    return aws_session.client("dynamodb", config=Config(retries={"mode": "standard", "max_attempts": 5}))


CLIENT: PerContainer[Any] = PerContainer(_new_client)
dynamodb_client = CLIENT.get
"""The container's one DynamoDB client (the ledger, the idempotency records), created on first use: one
botocore session and one load of the service model for both (docs/performance.md#where-the-time-goes)."""
reset_client = CLIENT.reset


class DynamoLedger:
    """A :class:`~compactor.billing.UsageLedger` over a DynamoDB table (low-level client)."""

    def __init__(self, table: str, client: Any = None):
        self.table = table
        self._client = client
        self._warned = False  # the index's fallback is logged once per ledger (so per container)

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else dynamodb_client()

    def record(self, entry: LedgerEntry) -> bool:
        """Write ``entry`` and add it to its day's totals, atomically; False when the entry exists (then
        nothing is written or added). A transaction cancelled by another on the same totals item, or by
        throttling, is tried again after a short random wait, up to :data:`CONFLICT_ATTEMPTS` times."""
        put = {"TableName": self.table, "Item": {**_item(entry), TOTALED_ATTRIBUTE: {"BOOL": True}},
               "ConditionExpression": "attribute_not_exists(sk)"}
        return self._transact({"Put": put}, {"Update": _totals_update(self.table, entry)})

    def total_untotaled(self) -> int:
        """Count every entry written without totals in its day's totals, once (the operator's one-off
        backfill after an upgrade, ``compactor usage --table T --backfill-totals``): per entry, one
        transaction sets ``totaled``, removes ``day`` (so it leaves :data:`UNTOTALED_INDEX`) and ``ADD``s it to
        a totals item, on the condition that it still lacks ``totaled``; a run beside another, or again, adds
        nothing twice. Read through the index; the number of entries totaled."""
        done = 0
        pages = self.client.get_paginator("scan").paginate(
            TableName=self.table, IndexName=UNTOTALED_INDEX, FilterExpression=f"attribute_not_exists({TOTALED_ATTRIBUTE})")
        for page in pages:
            for item in page.get("Items", []):
                entry = _entry(item)
                mark = {"TableName": self.table, "Key": {"api_key_id": item["api_key_id"], "sk": item["sk"]},
                        "UpdateExpression": f"SET {TOTALED_ATTRIBUTE} = :true REMOVE #day",
                        "ConditionExpression": f"attribute_exists(sk) AND attribute_not_exists({TOTALED_ATTRIBUTE})",
                        "ExpressionAttributeNames": {"#day": "day"},
                        "ExpressionAttributeValues": {":true": {"BOOL": True}}}
                done += self._transact({"Update": mark}, {"Update": _totals_update(self.table, entry)})
        return done

    def _transact(self, *writes: dict[str, Any]) -> bool:
        """Run ``writes`` as one transaction: True when done, False when the first write's condition failed
        (nothing done). Cancelled by a conflict on an item or by throttling, it is tried again after a short
        random wait, up to :data:`CONFLICT_ATTEMPTS` times."""
        from botocore.exceptions import ClientError

        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                self.client.transact_write_items(TransactItems=list(writes))
                return True
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                reasons = [reason.get("Code") for reason in exc.response.get("CancellationReasons") or ()]
                if reasons[:1] == ["ConditionalCheckFailed"]:
                    return False
                if RETRIED_CANCELLATIONS.isdisjoint(reasons) or attempt == CONFLICT_ATTEMPTS:
                    raise
                time.sleep(random.uniform(0, 0.025 * 2 ** attempt))
        raise AssertionError("unreachable")

    def entries(self, first_day: str, last_day: str, api_key_id: str | None = None) -> Iterator[LedgerEntry]:
        if api_key_id is not None:
            items: Iterator[dict[str, Any]] = self._caller_range(api_key_id, first_day, last_day)
        else:  # the operator's report over every key
            items = (item for page in self.client.get_paginator("scan").paginate(
                TableName=self.table, ConsistentRead=True, FilterExpression="sk BETWEEN :first AND :last",
                ExpressionAttributeValues=_sk_range(first_day, last_day)) for item in page.get("Items", []))
        for item in items:
            yield _entry(item)

    def totals(self, first_day: str, last_day: str, api_key_id: str | None = None) -> dict[str, list[DayTotals]]:
        """The daily totals of days ``first_day``..``last_day``: the stored totals items, plus the entries
        written without totals, read one by one through :data:`UNTOTALED_INDEX` (which holds no other); the
        index is read eventually consistent (a global index has no other reads), the totals consistently."""
        if api_key_id is None:
            return self._scanned_totals(first_day, last_day)
        days: dict[str, DayTotals] = {}
        for item in self._caller_range(api_key_id, first_day, last_day, prefix=TOTALS_PREFIX):
            _count(days, item)
        for item in self._untotaled(first_day, last_day, api_key_id):
            _count(days, item)
        return {api_key_id: _in_order(days)} if days else {}

    def _untotaled(self, first_day: str, last_day: str, api_key_id: str) -> list[dict[str, Any]]:
        """The caller's entries without totals of the range: through :data:`UNTOTALED_INDEX`, or, when the
        index cannot be read (still being built after an upgrade, or missing from the table or the role),
        from the table, every entry of the range read and those without ``totaled`` returned (as exact, slower)."""
        from botocore.exceptions import ClientError

        try:  # only entries without "totaled", as the fallback and the operator's scan: the three agree
            return list(self._query(
                IndexName=UNTOTALED_INDEX, ConsistentRead=False,
                KeyConditionExpression="api_key_id = :key AND #day BETWEEN :first AND :last",
                FilterExpression=f"attribute_not_exists({TOTALED_ATTRIBUTE})",
                ExpressionAttributeNames={"#day": "day"},
                ExpressionAttributeValues={":key": {"S": api_key_id}, ":first": {"S": first_day},
                                           ":last": {"S": last_day}}))
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") not in _INDEX_UNREADABLE:
                raise
            if not self._warned:
                self._warned = True
                logger.warning("usage ledger: its index %s cannot be read (%s: %s); reports read the table's "
                               "entries instead (exact, slower)", UNTOTALED_INDEX, error.get("Code"),
                               error.get("Message"))
        return list(self._caller_range(api_key_id, first_day, last_day,
                                       FilterExpression=f"attribute_not_exists({TOTALED_ATTRIBUTE})"))

    def _scanned_totals(self, first_day: str, last_day: str) -> dict[str, list[DayTotals]]:
        """The operator's report over every key: one scan returning the totals items of the range and the
        entries without totals (the table is read whole by a scan anyway; only these are returned)."""
        by_key: dict[str, dict[str, DayTotals]] = {}
        pages = self.client.get_paginator("scan").paginate(
            TableName=self.table, ConsistentRead=True,
            FilterExpression=(f"sk BETWEEN :first_total AND :last_total OR "
                              f"(attribute_not_exists({TOTALED_ATTRIBUTE}) AND sk BETWEEN :first AND :last)"),
            ExpressionAttributeValues={**_sk_range(first_day, last_day, prefix=TOTALS_PREFIX, name="_total"),
                                       **_sk_range(first_day, last_day)})
        for page in pages:
            for item in page.get("Items", []):
                _count(by_key.setdefault(item["api_key_id"]["S"], {}), item)
        return {key: _in_order(days) for key, days in sorted(by_key.items())}

    def _caller_range(self, api_key_id: str, first_day: str, last_day: str, prefix: str = "",
                      **arguments: Any) -> Iterator[dict[str, Any]]:
        """The caller's items whose sort key is ``<prefix><day>#...`` for a day of the range."""
        return self._query(KeyConditionExpression="api_key_id = :key AND sk BETWEEN :first AND :last",
                           ExpressionAttributeValues={":key": {"S": api_key_id},
                                                      **_sk_range(first_day, last_day, prefix=prefix)}, **arguments)

    def _query(self, **arguments: Any) -> Iterator[dict[str, Any]]:
        for page in self.client.get_paginator("query").paginate(**{"TableName": self.table, "ConsistentRead": True,
                                                                   **arguments}):
            yield from page.get("Items", [])


def _sk_range(first_day: str, last_day: str, prefix: str = "", name: str = "") -> dict[str, Any]:
    """The values ``:first<name>`` and ``:last<name>`` bounding the sort keys ``<prefix><day>#...`` of the days
    ``first_day``..``last_day``."""
    return {f":first{name}": {"S": f"{prefix}{first_day}#"}, f":last{name}": {"S": f"{prefix}{last_day}#{_LAST}"}}


def _totals_update(table: str, entry: LedgerEntry) -> dict[str, Any]:
    """The ``Update`` adding ``entry``'s call to one of its caller's and day's totals items."""
    totals = DayTotals.of(entry)
    values = {name: getattr(totals, name) for name in TOTALED}
    if entry.cost_usd is None:
        del values["cost_usd"]  # a known zero would read as a known cost
    shard = zlib.crc32(entry.entry_id.encode("utf-8")) % TOTALS_SHARDS
    return {"TableName": table,
            "Key": {"api_key_id": {"S": entry.api_key_id}, "sk": {"S": f"{TOTALS_PREFIX}{entry.day}#{shard}"}},
            "UpdateExpression": "ADD " + ", ".join(f"{name} :{name}" for name in values),
            "ExpressionAttributeValues": {f":{name}": {"N": _cost(value) if name == "cost_usd" else _number(value)}
                                          for name, value in values.items()}}


def _count(days: dict[str, DayTotals], item: Mapping[str, Any]) -> None:
    """Count an item in its day's totals: a stored totals item (``total#<day>#<shard>``), or an entry."""
    sort_key = item["sk"]["S"]
    if not sort_key.startswith(TOTALS_PREFIX):
        entry = _entry(item)
        days.setdefault(entry.day, DayTotals(entry.day)).add(entry)
        return
    day = sort_key[len(TOTALS_PREFIX):].partition("#")[0]
    stored = DayTotals(day, **{name: (Decimal if name == "cost_usd" else int)(item[name]["N"])
                               for name in TOTALED if name in item})
    days.setdefault(day, DayTotals(day)).add_totals(stored)


def _in_order(days: dict[str, DayTotals]) -> list[DayTotals]:
    return [days[day] for day in sorted(days)]


def _cost(value: Decimal) -> str:
    """What a call's cost adds to its day's totals (``compactor.billing.cost_share``), as a DynamoDB number."""
    return format(value.normalize(), "f")


def _number(value: int | float) -> str:
    """A DynamoDB number: a float as the shortest decimal that reads back as it, without an exponent."""
    return format(Decimal(repr(value)), "f") if isinstance(value, float) else str(value)


def _item(entry: LedgerEntry) -> dict[str, Any]:
    """The entry's item, without ``day``: the versions from before the totals wrote it, and only their entries
    may have it (:data:`UNTOTALED_INDEX`); the day is the sort key's first part."""
    item: dict[str, Any] = {"api_key_id": {"S": entry.api_key_id}, "sk": {"S": f"{entry.day}#{entry.entry_id}"},
                            "cost_known": {"BOOL": entry.cost_usd is not None}}
    for name in _TEXTS:
        value = getattr(entry, name)
        if value is not None:
            item[name] = {"S": value}
    for name in _NUMBERS:
        value = getattr(entry, name)
        if value is not None:
            item[name] = {"N": _number(value)}
    return item


def _entry(item: Mapping[str, Any]) -> LedgerEntry:
    data: dict[str, Any] = {"api_key_id": item["api_key_id"]["S"]}
    for name in _TEXTS:
        data[name] = item[name]["S"] if name in item else None
    for name in _NUMBERS:
        if name in item:
            text = item[name]["N"]
            data[name] = float(text) if name == "cost_usd" else int(text)
    return LedgerEntry.from_dict(data)


def configured_ledger(environ: Mapping[str, str] | None = None) -> UsageLedger:
    """DynamoDB when ``COMPACTOR_USAGE_TABLE`` is set; else a local ledger (``COMPACTOR_LEDGER_FILE``, or memory)."""
    env = os.environ if environ is None else environ
    if env.get(TABLE_ENV):
        return DynamoLedger(env[TABLE_ENV])
    path = env.get(LEDGER_FILE_ENV)
    return LocalLedger(path=path) if path else LocalLedger()
