"""Fixtures of the billing tests: moto DynamoDB tables (as template.yaml declares them) and S3, fresh backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

USAGE_TABLE = "compactor-usage-test"
IDEMPOTENCY_TABLE = "compactor-idempotency-test"
RESPONSES_BUCKET = "compactor-responses-test"


@pytest.fixture(autouse=True)
def local_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Local backends unless a test names tables (the root conftest resets them around each test)."""
    for name in ("COMPACTOR_USAGE_TABLE", "COMPACTOR_IDEMPOTENCY_TABLE", "COMPACTOR_RESPONSES_BUCKET",
                 "COMPACTOR_LEDGER_FILE", "COMPACTOR_IDEMPOTENCY_TTL_SECONDS", "COMPACTOR_IDEMPOTENCY_DIR"):
        monkeypatch.delenv(name, raising=False)


def create_tables(dynamodb: Any) -> None:
    """The usage and idempotency tables with template.yaml's keys (checked by test_billing_template)."""
    dynamodb.create_table(
        TableName=USAGE_TABLE, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "api_key_id", "AttributeType": "S"},
                              {"AttributeName": "sk", "AttributeType": "S"},
                              {"AttributeName": "day", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "api_key_id", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[{"IndexName": "untotaled-by-day", "Projection": {"ProjectionType": "ALL"},
                                 "KeySchema": [{"AttributeName": "api_key_id", "KeyType": "HASH"},
                                               {"AttributeName": "day", "KeyType": "RANGE"}]}])
    dynamodb.create_table(
        TableName=IDEMPOTENCY_TABLE, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])


def table_entries(dynamodb: Any) -> list[dict[str, Any]]:
    """The usage table's entries (not its totals items), after checking that its totals items count exactly
    those entries: the operator's report and each caller's equal the totals of the entries read one by one."""
    from compactor.billing import totals_by_key
    from compactor_aws.ledger import DynamoLedger, _entry

    items = dynamodb.scan(TableName=USAGE_TABLE, ConsistentRead=True)["Items"]
    entries = [item for item in items if item["sk"]["S"][:1].isdigit()]  # <day>#<entry id>
    expected = {key: [day.as_dict() for day in days]
                for key, days in totals_by_key(_entry(item) for item in entries).items()}
    ledger = DynamoLedger(USAGE_TABLE, dynamodb)
    every_key = ledger.totals("2000-01-01", "2999-12-31")
    assert {key: [day.as_dict() for day in days] for key, days in every_key.items()} == expected
    for key, days in expected.items():
        assert [day.as_dict() for day in ledger.totals("2000-01-01", "2999-12-31", key)[key]] == days
    return entries


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """moto DynamoDB + S3 with the tables and a versioned responses bucket, named in the environment."""
    import boto3

    from compactor_aws import billing, s3_store

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_SESSION_TOKEN", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("AWS_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        s3_store.reset_client()
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        create_tables(dynamodb)
        s3.create_bucket(Bucket=RESPONSES_BUCKET)
        s3.put_bucket_versioning(Bucket=RESPONSES_BUCKET, VersioningConfiguration={"Status": "Enabled"})
        monkeypatch.setenv("COMPACTOR_USAGE_TABLE", USAGE_TABLE)
        monkeypatch.setenv("COMPACTOR_IDEMPOTENCY_TABLE", IDEMPOTENCY_TABLE)
        monkeypatch.setenv("COMPACTOR_RESPONSES_BUCKET", RESPONSES_BUCKET)
        billing.reset_backends()
        yield {"dynamodb": dynamodb, "s3": s3}
        s3_store.reset_client()


def ledger_down(monkeypatch: pytest.MonkeyPatch, *, once: bool = False) -> list[bool]:
    """Make the ledger's writes fail (DynamoDB unavailable) while the returned flag's one item is true; ``once``:
    only the first write fails."""
    from compactor_aws import billing

    store = billing.backends().ledger
    real = store.record
    down = [True]

    def flaky(entry: Any) -> bool:
        if down[0]:
            down[0] = not once
            raise RuntimeError("DynamoDB unavailable")
        return real(entry)

    monkeypatch.setattr(store, "record", flaky)
    return down


def idempotency_store_down_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the idempotency store's first record update fail (DynamoDB unavailable): the answer computed is not kept."""
    from compactor_aws import billing

    layer = billing.backends().layer
    real, failures = type(layer)._update_record, [RuntimeError("DynamoDB unavailable")]

    def flaky(self: Any, data_record: Any) -> None:
        if failures:
            raise failures.pop()
        real(self, data_record)

    monkeypatch.setattr(type(layer), "_update_record", flaky)
