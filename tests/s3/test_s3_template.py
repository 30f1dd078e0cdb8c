"""template.yaml: the S3 path's resources (TranscriptBucket, its policy, S3CompactFunction and what it needs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compactor_cli.sam_template import Template, load_template
from compactor.jobs import RETENTION_ENV
from compactor.object_jobs import COMPACTED_PREFIX, DEFAULTS_ENV, FAILED_PREFIX, INCOMING_PREFIX, load_defaults

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO / "template.yaml"


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    return load_template(TEMPLATE_PATH)["Resources"]


@pytest.fixture(scope="module")
def template() -> Template:
    return Template.load(TEMPLATE_PATH)


def properties(resources: dict[str, Any], logical_id: str, resource_type: str) -> dict[str, Any]:
    assert resources[logical_id]["Type"] == resource_type
    return resources[logical_id].get("Properties", {})


def test_bucket_is_private_encrypted_versioned_and_expires_scratch(resources: dict[str, Any]) -> None:
    bucket = properties(resources, "TranscriptBucket", "AWS::S3::Bucket")
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert all(bucket["PublicAccessBlockConfiguration"][name] is True for name in (
        "BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"))
    assert bucket["VersioningConfiguration"]["Status"] == "Enabled"
    rules = bucket["LifecycleConfiguration"]["Rules"]
    assert any("NoncurrentVersionExpiration" in rule and "Prefix" not in rule for rule in rules)
    assert any(rule.get("Prefix") == "fanout/" and rule["ExpirationInDays"] == 1
               and rule["NoncurrentVersionExpiration"]["NoncurrentDays"] == 1 for rule in rules)
    # Expired scratch leaves delete markers in the versioned bucket, and so does a delete of an outcome without a
    # version id (docs/scale.md): they are removed, not kept forever, under every prefix that has them. Only fanout/,
    # idempotency/ and archives/ had that rule: compacted/, failed/, work/ and jobs/ kept theirs.
    removing = [rule.get("Prefix", "") for rule in rules if rule.get("ExpiredObjectDeleteMarker") is True
                and rule["Status"] == "Enabled" and "ExpirationInDays" not in rule]
    expiring = [rule["Prefix"] for rule in rules if "ExpirationInDays" in rule]
    for prefix in (*expiring, COMPACTED_PREFIX, FAILED_PREFIX, "fanout/", "work/", "jobs/"):
        assert any(prefix.startswith(covering) for covering in removing), prefix
    assert "NotificationConfiguration" not in bucket  # SAM adds it from the function's S3 events


def test_bucket_policy_denies_plain_http_without_getatt(resources: dict[str, Any]) -> None:
    policy = properties(resources, "TranscriptBucketPolicy", "AWS::S3::BucketPolicy")
    assert policy["Bucket"] == {"Ref": "TranscriptBucket"}
    [statement] = policy["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert all(set(resource) == {"Fn::Sub"} for resource in statement["Resource"])


def test_function_listens_to_incoming_json_and_jsonl_only(template: Template) -> None:
    function = template.function_properties("S3CompactFunction")
    assert function["Handler"] == "s3_compact.handler" and function["CodeUri"] == "functions/s3_compact/"
    assert (REPO / "functions" / "s3_compact" / "s3_compact.py").is_file()
    assert function["Layers"] == ["CompactorLayer"]
    suffixes = set()
    for event in function["Events"].values():
        assert event["Type"] == "S3"
        assert event["Properties"]["Bucket"] == "TranscriptBucket"
        assert event["Properties"]["Events"] == "s3:ObjectCreated:*"
        rules = {rule["Name"]: rule["Value"] for rule in event["Properties"]["Filter"]["S3Key"]["Rules"]}
        assert rules["prefix"] == INCOMING_PREFIX  # outputs (compacted/, failed/) can never trigger it
        suffixes.add(rules["suffix"])
    assert suffixes == {".json", ".jsonl"}


def test_function_budget_timeout_and_defaults(template: Template, resources: dict[str, Any]) -> None:
    function = template.function_properties("S3CompactFunction")
    variables = function["Environment"]["Variables"]
    assert int(variables["COMPACTOR_FLOW_BUDGET_MS"]) + 10_000 < int(function["Timeout"]) * 1000
    load_defaults(variables[DEFAULTS_ENV])  # the parameter's default is a valid configuration
    assert resources["S3CompactFunction"]["Properties"]["Environment"]["Variables"][DEFAULTS_ENV] == {
        "Ref": "S3CompactDefaults"}


def test_failures_are_retried_a_bounded_number_of_times_recorded_then_queued(
        template: Template, resources: dict[str, Any]) -> None:
    """Once Lambda gave up, S3CompactGaveUpFunction records failed/<rel> (an upload's status was running forever
    before), and its own invocation record, holding S3CompactFunction's, reaches the failure queue whether it
    succeeded or failed: the queue stays the operator's record of every event given up on."""
    config = template.function_properties("S3CompactFunction")["EventInvokeConfig"]
    assert 0 <= config["MaximumRetryAttempts"] <= 2
    on_failure = config["DestinationConfig"]["OnFailure"]
    assert on_failure == {"Type": "Lambda", "Destination": "S3CompactGaveUpFunction.Alias"}
    gave_up = template.function_properties("S3CompactGaveUpFunction")
    assert gave_up["Handler"] == "s3_gave_up.handler" and gave_up["CodeUri"] == "functions/s3_gave_up/"
    assert (REPO / "functions" / "s3_gave_up" / "s3_gave_up.py").is_file()
    assert "Events" not in gave_up  # invoked by Lambda only, as the destination
    destinations = gave_up["EventInvokeConfig"]["DestinationConfig"]
    assert destinations == {outcome: {"Type": "SQS", "Destination": "S3CompactFailureQueue.Arn"}
                            for outcome in ("OnSuccess", "OnFailure")}
    queue = properties(resources, "S3CompactFailureQueue", "AWS::SQS::Queue")
    assert queue["SqsManagedSseEnabled"] is True and queue["MessageRetentionPeriod"] == 1209600


def test_the_gave_up_function_only_checks_results_and_writes_failures(resources: dict[str, Any]) -> None:
    assert "Policies" not in resources["S3CompactGaveUpFunction"]["Properties"]
    access = properties(resources, "S3CompactGaveUpFunctionBucketAccess", "AWS::IAM::RolePolicy")
    assert access["RoleName"] == {"Ref": "S3CompactGaveUpFunctionRole"}
    grants: dict[str, set[str]] = {}
    for statement in access["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        grants.setdefault(statement["Resource"]["Fn::Sub"].split("${TranscriptBucket}")[1], set()).update(actions)
    deletes = {"s3:DeleteObject", "s3:DeleteObjectVersion"}  # the version looked at (docs/scale.md)
    assert grants == {f"/{COMPACTED_PREFIX}*": {"s3:GetObject", *deletes},
                      f"/{FAILED_PREFIX}*": {"s3:GetObject", "s3:PutObject", *deletes}, "": {"s3:ListBucket"},
                      "/jobs/*": {"s3:GetObject"}}  # the caller of an upload whose job's record names none
    # It records nothing for an object version whose windowed job runs or ended done: that job's executions only
    described = resources["S3CompactGaveUpFunctionWindowedJobs"]["Properties"]["PolicyDocument"]["Statement"]
    assert [(s["Action"], s["Resource"]["Fn::Sub"].split(":execution:")[1]) for s in described] == [
        ("states:DescribeExecution", "${WindowedJobStateMachine.Name}:*")]
    env = resources["S3CompactGaveUpFunction"]["Properties"]["Environment"]["Variables"]
    assert env["COMPACTOR_WINDOWED_STATE_MACHINE_ARN"] == {"Ref": "WindowedJobStateMachine"}
    # asked only for an object over the size past which S3CompactFunction starts a windowed job: the same one
    s3_env = resources["S3CompactFunction"]["Properties"]["Environment"]["Variables"]
    inline_max = {"Ref": "S3InlineMaxBytes"}
    assert env["COMPACTOR_S3_INLINE_MAX_BYTES"] == s3_env["COMPACTOR_S3_INLINE_MAX_BYTES"] == inline_max


def test_bucket_access_is_least_privilege_and_outside_the_function(resources: dict[str, Any]) -> None:
    assert "Policies" not in resources["S3CompactFunction"]["Properties"]  # a Ref to the bucket there is a cycle
    access = properties(resources, "S3CompactFunctionBucketAccess", "AWS::IAM::RolePolicy")
    assert access["RoleName"] == {"Ref": "S3CompactFunctionRole"}
    grants: dict[str, set[str]] = {}
    for statement in access["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for target in targets:
            assert set(target) == {"Fn::Sub"}
            grants.setdefault(target["Fn::Sub"].split("${TranscriptBucket}")[1], set()).update(actions)
    assert grants == {
        f"/{INCOMING_PREFIX}*": {"s3:GetObject", "s3:GetObjectVersion"},
        # one outcome (docs/scale.md): the version looked at is deleted, or, without one, the object on its ETag
        f"/{COMPACTED_PREFIX}*": {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"},
        f"/{FAILED_PREFIX}*": {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"},
        "": {"s3:ListBucket"},
        "/jobs/*": {"s3:GetObject"},  # an API upload's record names the key it is billed to (docs/billing.md)
    }


def test_every_role_that_deletes_outcomes_may_delete_the_version_it_looked_at(resources: dict[str, Any]) -> None:
    """In the versioned bucket a writer deletes the version of the outcome it looked at (docs/scale.md, "One outcome per
    object"), which needs ``s3:DeleteObjectVersion``: ``s3:DeleteObject`` alone let it delete only on the ETag, and a
    newer version's result of the same bytes has the same one."""
    deleting = set()
    for name, resource in resources.items():
        if resource["Type"] != "AWS::IAM::RolePolicy":
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            for target in targets:
                path = target.get("Fn::Sub", "").split("${TranscriptBucket}")[-1] if isinstance(target, dict) else ""
                if "s3:DeleteObject" in actions and path in (f"/{COMPACTED_PREFIX}*", f"/{FAILED_PREFIX}*"):
                    deleting.add((resource["Properties"]["RoleName"]["Ref"], path))
                    assert "s3:DeleteObjectVersion" in actions, (name, path)
    assert {role for role, _ in deleting} == {"S3CompactFunctionRole", "S3CompactGaveUpFunctionRole",
                                              "WindowJobFunctionRole"}
    assert len(deleting) == 6  # both places, each


def test_log_group_has_retention(resources: dict[str, Any], template: Template) -> None:
    group = properties(resources, "S3CompactFunctionLogGroup", "AWS::Logs::LogGroup")
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${S3CompactFunction}"}
    assert int(template.resolve(group["RetentionInDays"])) > 0


@pytest.mark.parametrize("days", ["0", "7", "400"])
def test_uploaded_transcripts_and_their_outcomes_expire_after_the_retention(days: str) -> None:
    """TranscriptRetentionDays expires the customer data the S3 path and the uploads keep
    (docs/deploy.md#data-retention): each of incoming/, compacted/ and failed/ after that many days, their replaced
    versions after a day; 0 (the default) keeps them for ever, as every stack did (they had no rule), and the API
    function knows the retention, so that a job whose data expired answers 410."""
    template = Template.load(TEMPLATE_PATH, {"TranscriptRetentionDays": days})
    assert template.document["Parameters"]["TranscriptRetentionDays"]["Default"] == 0
    rules = template.resolve(template.resources["TranscriptBucket"]["Properties"])["LifecycleConfiguration"]["Rules"]
    for prefix in (INCOMING_PREFIX, COMPACTED_PREFIX, FAILED_PREFIX):
        [rule] = [rule for rule in rules if rule.get("Prefix") == prefix]
        if days == "0":
            assert rule["Status"] == "Disabled" and "ExpirationInDays" not in rule, prefix
        else:
            assert rule["Status"] == "Enabled" and rule["ExpirationInDays"] == days, prefix
            assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}, prefix
    # no enabled rule expires them otherwise (the rule without a prefix: replaced versions after 30 days)
    assert not any(rule["Status"] == "Enabled" and "ExpirationInDays" in rule and INCOMING_PREFIX.startswith(
        rule.get("Prefix", "")) for rule in rules if rule.get("Prefix") != INCOMING_PREFIX)
    env = template.function_properties("CompactFunction")["Environment"]["Variables"]
    assert env[RETENTION_ENV] == days
