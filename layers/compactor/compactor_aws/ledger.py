"""The usage ledger in DynamoDB (docs/billing.md): ``compactor.billing.UsageLedger`` over one table.

Item: partition key ``api_key_id``, sort key ``sk`` = ``<YYYY-MM-DD>#<entry id>``, so one caller's
days are one ``Query``; the write is a ``PutItem`` with ``attribute_not_exists(sk)``, so an entry is
written once however often a call is retried. ``cost_usd`` is absent when the cost is unknown
(``cost_known`` false). ``COMPACTOR_USAGE_TABLE`` names the table.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from compactor.billing import LedgerEntry, LocalLedger, UsageLedger
from compactor.container import PerContainer

TABLE_ENV = "COMPACTOR_USAGE_TABLE"
LEDGER_FILE_ENV = "COMPACTOR_LEDGER_FILE"
_NUMBERS = ("bytes_in", "bytes_out", "model_calls", "cost_usd")
_TEXTS = ("entry_id", "request_id", "time", "route", "mode", "idempotency_key")


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

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else dynamodb_client()

    def record(self, entry: LedgerEntry) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_item(TableName=self.table, Item=_item(entry),
                                 ConditionExpression="attribute_not_exists(sk)")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def entries(self, first_day: str, last_day: str, api_key_id: str | None = None) -> Iterator[LedgerEntry]:
        bounds = {":first": {"S": f"{first_day}#"}, ":last": {"S": f"{last_day}#\U0010ffff"}}
        if api_key_id is not None:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table, ConsistentRead=True,
                KeyConditionExpression="api_key_id = :key AND sk BETWEEN :first AND :last",
                ExpressionAttributeValues={":key": {"S": api_key_id}, **bounds})
        else:  # the operator's report over every key
            pages = self.client.get_paginator("scan").paginate(
                TableName=self.table, ConsistentRead=True, FilterExpression="sk BETWEEN :first AND :last",
                ExpressionAttributeValues=bounds)
        for page in pages:
            for item in page.get("Items", []):
                yield _entry(item)


def _item(entry: LedgerEntry) -> dict[str, Any]:
    item: dict[str, Any] = {"api_key_id": {"S": entry.api_key_id}, "sk": {"S": f"{entry.day}#{entry.entry_id}"},
                            "day": {"S": entry.day}, "cost_known": {"BOOL": entry.cost_usd is not None}}
    for name in _TEXTS:
        value = getattr(entry, name)
        if value is not None:
            item[name] = {"S": value}
    for name in _NUMBERS:
        value = getattr(entry, name)
        if value is not None:
            item[name] = {"N": str(Decimal(repr(value)) if isinstance(value, float) else value)}
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
