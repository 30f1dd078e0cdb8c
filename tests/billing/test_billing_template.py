"""template.yaml: the billing tables, their least-privilege grants, the authorizer and the concurrency limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactor.http_api import FORBIDDEN_BODY
from compactor_aws.idempotency import BUCKET_ENV, RESPONSES_PREFIX, TABLE_ENV as IDEMPOTENCY_ENV
from compactor_aws.ledger import TABLE_ENV as USAGE_ENV
from compactor_cli.sam_template import Template, load_template

from .conftest import create_tables

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO / "template.yaml"
FUNCTIONS = ("CompactFunction", "S3CompactFunction", "FlowWorkerFunction", "AuthorizerFunction")


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    return load_template(TEMPLATE_PATH)["Resources"]


# UpdateItem on the usage table only inside the transaction that writes an entry with its day's totals.
IN_TRANSACTIONS = {"ForAnyValue:StringEquals": {"dynamodb:EnclosingOperation": "TransactWriteItems"}}
TOTALS_GRANT = ({"dynamodb:UpdateItem"}, {"Fn::GetAtt": ["UsageTable", "Arn"]}, IN_TRANSACTIONS)


def statements(policy: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Each statement by its Sid: its actions and resource, and its condition when it has one."""
    out: dict[str, tuple[Any, ...]] = {}
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        out[statement["Sid"]] = (set(actions), statement["Resource"]) + (
            (statement["Condition"],) if "Condition" in statement else ())
    return out


def test_the_tables_have_the_keys_the_adapters_use(resources: dict[str, Any]) -> None:
    declared: dict[str, Any] = {}

    class Recorder:
        def create_table(self, **kwargs: Any) -> None:
            declared[kwargs["TableName"]] = kwargs

    create_tables(Recorder())
    tests_usage, tests_idempotency = declared.values()
    for logical_id, used in (("UsageTable", tests_usage), ("IdempotencyTable", tests_idempotency)):
        table = resources[logical_id]["Properties"]
        assert table["KeySchema"] == used["KeySchema"] and table["AttributeDefinitions"] == used["AttributeDefinitions"]
        assert table.get("GlobalSecondaryIndexes") == used.get("GlobalSecondaryIndexes")
        assert table["BillingMode"] == "PAY_PER_REQUEST"
        assert table["SSESpecification"] == {"SSEEnabled": True}
        assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert resources["UsageTable"]["DeletionPolicy"] == resources["UsageTable"]["UpdateReplacePolicy"] == "Retain"
    assert resources["UsageTable"]["Properties"]["DeletionProtectionEnabled"] is True
    # Powertools' DynamoDB layer: key "id", expiry attribute "expiration" (what the TTL deletes on)
    assert resources["IdempotencyTable"]["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "expiration", "Enabled": True}


def test_the_functions_name_the_tables_and_may_do_only_what_they_need(resources: dict[str, Any]) -> None:
    template = Template.load(TEMPLATE_PATH)
    api = template.function_properties("CompactFunction")["Environment"]["Variables"]
    s3 = template.function_properties("S3CompactFunction")["Environment"]["Variables"]
    assert (api[USAGE_ENV], api[IDEMPOTENCY_ENV], api[BUCKET_ENV]) == ("UsageTable", "IdempotencyTable",
                                                                       "TranscriptBucket")
    assert (s3[USAGE_ENV], s3[IDEMPOTENCY_ENV]) == ("UsageTable", "IdempotencyTable") and BUCKET_ENV not in s3
    assert int(template.parameters["IdempotencyTtlSeconds"]) == 86400

    api_grants = statements(resources["CompactFunction"]["Properties"]["Policies"][0])
    assert api_grants["WriteAndReadOwnUsage"] == ({"dynamodb:PutItem", "dynamodb:Query"},
                                                  {"Fn::GetAtt": ["UsageTable", "Arn"]})
    assert api_grants["ReadOwnUsageWithoutTotals"] == ({"dynamodb:Query"},
                                                       {"Fn::Sub": "${UsageTable.Arn}/index/untotaled-by-day"})
    from compactor_aws.ledger import UNTOTALED_INDEX
    assert UNTOTALED_INDEX == "untotaled-by-day"
    assert api_grants["AddToDailyTotals"] == TOTALS_GRANT
    record_actions = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    assert api_grants["IdempotencyRecords"] == (record_actions, {"Fn::GetAtt": ["IdempotencyTable", "Arn"]})
    assert api_grants["LargeStoredResponses"] == ({"s3:PutObject", "s3:GetObject", "s3:GetObjectVersion"}, {
        "Fn::Sub": f"arn:${{AWS::Partition}}:s3:::${{TranscriptBucket}}/{RESPONSES_PREFIX}*"})
    s3_grants = statements(resources["S3CompactFunctionBillingAccess"]["Properties"]["PolicyDocument"])
    window_grants = statements(resources["WindowJobFunctionBillingAccess"]["Properties"]["PolicyDocument"])
    for grants in (s3_grants, window_grants):
        assert grants == {"WriteUsage": ({"dynamodb:PutItem"}, {"Fn::GetAtt": ["UsageTable", "Arn"]}),
                          "AddToDailyTotals": TOTALS_GRANT,
                          "IdempotencyRecords": (record_actions, {"Fn::GetAtt": ["IdempotencyTable", "Arn"]})}


def test_the_s3_functions_destination_reads_the_jobs_record_and_writes_its_entry_only(
        resources: dict[str, Any]) -> None:
    """S3CompactGaveUpFunction bills a job whose result was written and whose every ledger write failed
    (docs/billing.md): it names both tables, reads the job's idempotency record (never writes it) and writes the
    entry with its day's totals, as the S3 function does."""
    env = Template.load(TEMPLATE_PATH).function_properties("S3CompactGaveUpFunction")["Environment"]["Variables"]
    assert (env[USAGE_ENV], env[IDEMPOTENCY_ENV]) == ("UsageTable", "IdempotencyTable") and BUCKET_ENV not in env
    grants = statements(resources["S3CompactGaveUpFunctionBillingAccess"]["Properties"]["PolicyDocument"])
    assert resources["S3CompactGaveUpFunctionBillingAccess"]["Properties"]["RoleName"] == {
        "Ref": "S3CompactGaveUpFunctionRole"}
    assert grants == {"WriteUsage": ({"dynamodb:PutItem"}, {"Fn::GetAtt": ["UsageTable", "Arn"]}),
                      "AddToDailyTotals": TOTALS_GRANT,
                      "ReadIdempotencyRecords": ({"dynamodb:GetItem"}, {"Fn::GetAtt": ["IdempotencyTable", "Arn"]})}


def test_stored_responses_expire_after_the_longest_ttl(resources: dict[str, Any]) -> None:
    rules = resources["TranscriptBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    expiring = [rule for rule in rules if rule.get("Prefix") == RESPONSES_PREFIX and "ExpirationInDays" in rule]
    assert len(expiring) == 1 and expiring[0]["ExpirationInDays"] * 86400 > 86400


def test_every_function_has_a_reserved_concurrency_parameter(resources: dict[str, Any]) -> None:
    template = Template.load(TEMPLATE_PATH)
    for logical_id in FUNCTIONS:
        parameter = logical_id.removesuffix("Function") + "ReservedConcurrency"
        assert int(template.parameters[parameter]) == -1, parameter  # unreserved unless set
        value = resources[logical_id]["Properties"]["ReservedConcurrentExecutions"]
        condition, reserved, unreserved = value["Fn::If"]
        assert reserved == {"Ref": parameter} and unreserved == {"Ref": "AWS::NoValue"}
        assert load_template(TEMPLATE_PATH)["Conditions"][condition] == {
            "Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, -1]}]}


def test_the_api_takes_its_key_from_the_authorizer(resources: dict[str, Any]) -> None:
    api = resources["CompactApi"]["Properties"]
    authorizer = api["Auth"]["Authorizers"][api["Auth"]["DefaultAuthorizer"]]

    assert api["ApiKeySourceType"] == "AUTHORIZER" and api["Auth"]["ApiKeyRequired"] is True
    assert authorizer["FunctionPayloadType"] == "REQUEST"
    assert authorizer["FunctionArn"] == {"Ref": "AuthorizerFunction.Alias"}  # the published version
    assert authorizer["Identity"] == {"ReauthorizeEvery": 0}  # both headers stay optional (docs/billing.md)
    assert "Policies" not in resources["AuthorizerFunction"]["Properties"]  # no AWS call, no grant
    # no key fails the authorizer: answered as API Gateway answers a wrong key (the contract's 403)
    unauthorized = api["GatewayResponses"]["UNAUTHORIZED"]
    assert unauthorized["StatusCode"] == 403
    assert json.loads(unauthorized["ResponseTemplates"]["application/json"]) == FORBIDDEN_BODY
    plan = api["Auth"]["UsagePlan"]
    assert plan["Throttle"] == {"BurstLimit": {"Ref": "KeyBurstLimit"}, "RateLimit": {"Ref": "KeyRateLimit"}}
    assert plan["Quota"] == {"Limit": {"Ref": "KeyMonthlyQuota"}, "Period": "MONTH"}


def test_the_stage_throttle_is_a_parameter_documented_with_the_keys_limits(resources: dict[str, Any]) -> None:
    """docs/billing.md "Limits": the stage caps every key together. It was a constant (20 requests/s, burst 50), so a
    KeyRateLimit raised above 20, or a third key at the default 10, was answered 429 by the stage whatever the plan
    said, and no parameter could raise it; StageRateLimit and StageBurstLimit set it now (defaults unchanged)."""
    parameters = load_template(TEMPLATE_PATH)["Parameters"]
    assert (parameters["StageRateLimit"]["Default"], parameters["StageBurstLimit"]["Default"]) == (20, 50)
    (settings,) = resources["CompactApi"]["Properties"]["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == {"Ref": "StageRateLimit"}
    assert settings["ThrottlingBurstLimit"] == {"Ref": "StageBurstLimit"}
    deploy = (Path(TEMPLATE_PATH).parent / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert "`StageRateLimit`, `StageBurstLimit`" in deploy
