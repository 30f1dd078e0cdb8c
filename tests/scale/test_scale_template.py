"""The template's windowed-job resources and upload routes (docs/scale.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from compactor_aws import windowed_jobs
from compactor_aws.routes import jobs as jobs_routes
from compactor_cli.sam_template import load_template

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    return load_template(REPO / "template.yaml")["Resources"]


def test_state_machine_is_standard_with_every_substitution_covered(resources):
    machine = resources["WindowedJobStateMachine"]["Properties"]
    assert machine["Type"] == "STANDARD" and "Condition" not in resources["WindowedJobStateMachine"]
    text = (REPO / machine["DefinitionUri"]).read_text()
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(machine["DefinitionSubstitutions"])
    assert machine["DefinitionSubstitutions"]["WindowJobFunctionArn"] == {"Ref": "WindowJobFunction.Alias"}


def test_distributed_map_reads_windows_from_s3_batches_limits_and_tolerates(resources):
    asl = json.loads((REPO / resources["WindowedJobStateMachine"]["Properties"]["DefinitionUri"]).read_text())
    run = asl["States"]["RunWindows"]
    assert run["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert run["ItemReader"]["Resource"].endswith(":states:::s3:getObject")
    assert run["ItemReader"]["ReaderConfig"]["InputType"] == "JSON"
    assert run["ItemBatcher"]["MaxItemsPerBatch"] == 1
    assert run["MaxConcurrencyPath"] == "$.max_concurrency"
    assert run["ToleratedFailurePercentage"] == 100
    assert run["ResultPath"] is None  # results go to S3, never through the execution's state
    # Without a ResultWriter the children's outputs still form the Map's output, and past 256 KiB (about 16,000
    # windows) States.DataLimitExceeded failed the job whatever its ResultPath: they are written under work/.
    assert run["ResultWriter"] == {"Resource": "arn:${Partition}:states:::s3:putObject",
                                   "Parameters": {"Bucket.$": "$$.Execution.Input.job.bucket",
                                                  "Prefix": "work/map-results"}}
    statements = resources["WindowedJobStateMachineBucketAccess"]["Properties"]["PolicyDocument"]["Statement"]
    assert any("s3:PutObject" in statement["Action"] and statement["Resource"]["Fn::Sub"].endswith("/work/*")
               for statement in statements)
    worker = run["ItemProcessor"]["States"]["RunWindow"]
    assert worker["Catch"][0]["Next"] == "WindowKeepsItsOriginal"
    assert asl["States"]["Assemble"]["Next"] == "MoreWindows"
    # a failed ledger write fails the step after compacted/<rel> is written: the step is retried (it bills
    # once, docs/billing.md) before the job is recorded as failed
    assert any(retrier["ErrorEquals"] == ["States.TaskFailed"] and retrier["MaxAttempts"] >= 1
               for retrier in asl["States"]["Assemble"]["Retry"])
    for name in ("Plan", "RunWindows", "Assemble"):
        assert asl["States"][name]["Catch"][0]["Next"] == "RecordFailure"


def test_s3_function_starts_jobs_with_the_configured_machine_and_limits(resources):
    env = resources["S3CompactFunction"]["Properties"]["Environment"]["Variables"]
    assert env[windowed_jobs.STATE_MACHINE_ENV] == {"Ref": "WindowedJobStateMachine"}
    assert env[windowed_jobs.CONCURRENCY_ENV] == {"Ref": "WindowConcurrency"}
    assert env[windowed_jobs.INLINE_MAX_ENV] == {"Ref": "S3InlineMaxBytes"}
    start = resources["S3CompactFunctionWindowedJobs"]["Properties"]["PolicyDocument"]["Statement"]
    assert start == [{"Sid": "StartWindowedJobs", "Effect": "Allow", "Action": "states:StartExecution",
                      "Resource": {"Ref": "WindowedJobStateMachine"}}]


def test_bucket_permissions_are_role_policies_scoped_to_prefixes(resources):
    for name in ("WindowJobFunction", "WindowedJobStateMachine"):
        assert not any("TranscriptBucket" in json.dumps(p) for p in resources[name]["Properties"].get("Policies", []))
    for policy in ("WindowJobFunctionBucketAccess", "WindowedJobStateMachineBucketAccess", "CompactFunctionJobsAccess"):
        for statement in resources[policy]["Properties"]["PolicyDocument"]["Statement"]:
            targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            for target in targets:
                path = target["Fn::Sub"].split("${TranscriptBucket}")[1]
                assert path == "" and statement["Action"] == "s3:ListBucket" or path.endswith("/*"), (policy, path)


def test_api_routes_and_jobs_bucket(resources):
    events = resources["CompactFunction"]["Properties"]["Events"]
    assert {(e["Properties"]["Method"], e["Properties"]["Path"]) for e in events.values()} >= {
        ("POST", "/uploads"), ("GET", "/jobs/{id}")}
    env = resources["CompactFunction"]["Properties"]["Environment"]["Variables"]
    assert env[jobs_routes.BUCKET_ENV] == {"Ref": "TranscriptBucket"}
    rules = resources["TranscriptBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert any(rule.get("Prefix") == "work/" and rule.get("ExpirationInDays") for rule in rules)


def test_window_job_handler_stays_small():
    assert len((REPO / "functions" / "window_jobs" / "window_jobs.py").read_text().splitlines()) <= 120


def test_an_execution_ended_without_record_failure_reaches_the_window_job_function(resources):
    """The job's own executions (not its Distributed Map's children) that ended failed, timed out or aborted are
    recorded by WindowJobFunction's ``fail`` step (docs/scale.md#one-outcome-per-object); an event EventBridge could not
    deliver, or one the function failed to record after its retries, reaches a queue only EventBridge and the function
    may send to."""
    function = resources["WindowJobFunction"]["Properties"]
    (name, rule), = function["Events"].items()
    assert rule["Type"] == "EventBridgeRule"
    pattern = rule["Properties"]["Pattern"]
    assert pattern["source"] == ["aws.states"] and pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert pattern["detail"]["stateMachineArn"] == [{"Ref": "WindowedJobStateMachine"}]
    assert sorted(pattern["detail"]["status"]) == sorted(windowed_jobs.ENDED)
    queue = {"Fn::GetAtt": ["WindowedJobEndedQueue", "Arn"]}
    assert rule["Properties"]["DeadLetterConfig"] == {"Arn": queue}
    assert 0 < rule["Properties"]["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 86400
    config = function["EventInvokeConfig"]  # asynchronous invocations: the rule's only
    assert 0 <= config["MaximumRetryAttempts"] <= 2
    assert config["DestinationConfig"] == {"OnFailure": {"Type": "SQS", "Destination": queue}}
    assert resources["WindowedJobEndedQueue"]["Properties"] == {"SqsManagedSseEnabled": True,
                                                                 "MessageRetentionPeriod": 1209600}
    policy = resources["WindowedJobEndedQueuePolicy"]["Properties"]
    assert policy["Queues"] == [{"Ref": "WindowedJobEndedQueue"}]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert (statement["Principal"], statement["Action"], statement["Resource"]) == (
        {"Service": "events.amazonaws.com"}, "sqs:SendMessage", queue)
    # the rule SAM makes of the event is named after the function and the event
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [f"WindowJobFunction{name}",
                                                                                     "Arn"]}}}


def test_the_distributed_map_may_run_children_of_its_own_state_machine_only(resources):
    """The state machine's role starts, describes and stops the Distributed Map's child executions: on its own
    ARN and its own executions (``<name>/<map run>:<id>``), not on "*" (any state machine of the account), and
    through a role policy, so the role does not refer to the state machine that uses it (a circular dependency)."""
    machine = resources["WindowedJobStateMachine"]["Properties"]
    assert "Name" not in machine  # a name of its own would replace the state machine (and its running jobs)
    own = [statement for policy in machine["Policies"] for statement in policy["Statement"]]
    assert not any("WindowedJobStateMachine" in json.dumps(statement) for statement in own)
    attached = [statement for resource in resources.values() if resource["Type"] == "AWS::IAM::RolePolicy"
                and resource["Properties"]["RoleName"] == {"Ref": "WindowedJobStateMachineRole"}
                for statement in resource["Properties"]["PolicyDocument"]["Statement"]]
    grants: dict[str, Any] = {}
    for statement in own + attached:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            if action.startswith("states:"):
                assert action not in grants, action
                grants[action] = statement["Resource"]
    children = {"Fn::Sub": "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:execution:"
                           "${WindowedJobStateMachine.Name}/*"}
    assert grants == {"states:StartExecution": {"Ref": "WindowedJobStateMachine"},
                      "states:DescribeExecution": children, "states:StopExecution": children}
    # the S3 function starts no job before the grant exists (a new stack)
    assert resources["S3CompactFunctionWindowedJobs"]["DependsOn"] == "WindowedJobStateMachineChildExecutions"
