"""template.yaml and the ASL definition of the batch fan-out, checked on the parsed documents."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from compactor_cli.sam_template import Template, load_template
from compactor_aws import stepfunctions_runner

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO / "template.yaml"
CONDITION = "FanOutWithStepFunctions"
LAMBDA_SERVICE_ERRORS = {"Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException",
                         "Lambda.TooManyRequestsException"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return load_template(TEMPLATE_PATH)


@pytest.fixture(scope="module")
def machine(document: dict[str, Any]) -> dict[str, Any]:
    return document["Resources"]["BatchFanOutStateMachine"]


@pytest.fixture(scope="module")
def asl_text(machine: dict[str, Any]) -> str:
    return (REPO / machine["Properties"]["DefinitionUri"]).read_text(encoding="utf-8")


def test_fanout_resources_exist_only_with_stepfunctions(document: dict[str, Any]) -> None:
    assert document["Conditions"][CONDITION] == {"Fn::Equals": [{"Ref": "BatchFanOut"}, "stepfunctions"]}
    for logical_id in ("BatchFanOutStateMachine", "BatchFanOutStateMachineLogGroup", "FlowWorkerFunction",
                       "FlowWorkerFunctionLogGroup", "CompactFunctionFanOutAccess"):
        assert document["Resources"][logical_id]["Condition"] == CONDITION, logical_id


def test_state_machine_is_express_logged_traced_with_substitutions(machine: dict[str, Any]) -> None:
    assert machine["Type"] == "AWS::Serverless::StateMachine"
    properties = machine["Properties"]
    assert properties["Type"] == "EXPRESS"
    assert properties["Tracing"] == {"Enabled": True}
    (destination,) = properties["Logging"]["Destinations"]
    assert destination["CloudWatchLogsLogGroup"]["LogGroupArn"] == {
        "Fn::GetAtt": ["BatchFanOutStateMachineLogGroup", "Arn"]}
    assert properties["Logging"]["IncludeExecutionData"] is False
    assert properties["DefinitionSubstitutions"] == {
        "FlowWorkerFunctionArn": {"Ref": "FlowWorkerFunction.Alias"},
        "Partition": {"Ref": "AWS::Partition"}}
    # The Map invokes the published alias (SnapStart snapshots versions), and may invoke nothing else.
    invoke = [statement for policy in properties["Policies"] for statement in policy.get("Statement", [])
              if statement.get("Sid") == "InvokeFlowWorker"]
    assert invoke == [{"Sid": "InvokeFlowWorker", "Effect": "Allow", "Action": "lambda:InvokeFunction",
                       "Resource": {"Ref": "FlowWorkerFunction.Alias"}}]


def test_every_asl_substitution_is_covered(machine: dict[str, Any], asl_text: str) -> None:
    used = set(re.findall(r"\$\{([^}]+)\}", asl_text))
    assert used and used == set(machine["Properties"]["DefinitionSubstitutions"])
    assert "arn:aws:" not in asl_text  # the partition is substituted, never hard-coded


def test_map_runs_every_batch_concurrently_and_tolerates_a_failed_item(asl_text: str) -> None:
    definition = json.loads(asl_text)
    mapped = definition["States"][definition["StartAt"]]
    assert mapped["Type"] == "Map" and mapped["ItemsPath"] == "$.items"
    assert mapped["MaxConcurrency"] >= 32
    processor = mapped["ItemProcessor"]
    assert processor["ProcessorConfig"]["Mode"] == "INLINE"
    assert mapped["ItemSelector"]["retry.$"] == "$.retry"
    assert mapped["ItemSelector"]["item.$"] == "$$.Map.Item.Value"  # whole: any item shape reaches the worker
    choice = processor["States"][processor["StartAt"]]
    assert choice["Type"] == "Choice"
    (rule,) = choice["Choices"]
    assert rule == {"Variable": "$.retry", "BooleanEquals": True, "Next": rule["Next"]}
    retrying, once = processor["States"][rule["Next"]], processor["States"][choice["Default"]]
    for task in (retrying, once):
        assert task["Type"] == "Task" and task["Resource"] == "arn:${Partition}:states:::lambda:invoke"
        assert task["Parameters"]["FunctionName"] == "${FlowWorkerFunctionArn}"
        assert set(task["Parameters"]["Payload"]) == {"bucket.$", "item.$", "deadline_epoch_ms.$", "execution_id.$"}
        assert task["TimeoutSecondsPath"] == "$.timeout_s"
        (catch,) = task["Catch"]
        assert catch["ErrorEquals"] == ["States.ALL"]
        fallback = processor["States"][catch["Next"]]
        assert fallback["Type"] == "Pass" and fallback["Parameters"]["status"] == "failed" and fallback["End"]
    assert "Retry" not in once
    (retry,) = retrying["Retry"]
    assert set(retry["ErrorEquals"]) == LAMBDA_SERVICE_ERRORS  # worker errors (and timeouts) are never retried
    # One retry, whose wait the runner takes out of the Task timeout (stepfunctions_runner.fanout_timing).
    assert retry["MaxAttempts"] == 1 and retry["IntervalSeconds"] == stepfunctions_runner.RETRY_WAIT_S
    assert retry.get("BackoffRate", 1) == 1 and "MaxDelaySeconds" not in retry


def test_compact_function_gets_the_machine_bucket_and_scoped_permissions(document: dict[str, Any]) -> None:
    variables = document["Resources"]["CompactFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["COMPACTOR_STATE_MACHINE_ARN"] == {
        "Fn::If": [CONDITION, {"Ref": "BatchFanOutStateMachine"}, {"Ref": "AWS::NoValue"}]}
    assert variables["COMPACTOR_FANOUT_BUCKET"] == {
        "Fn::If": [CONDITION, {"Ref": "TranscriptBucket"}, {"Ref": "AWS::NoValue"}]}
    access = document["Resources"]["CompactFunctionFanOutAccess"]["Properties"]
    assert access["RoleName"] == {"Ref": "CompactFunctionRole"}
    statements = {statement["Sid"]: statement for statement in access["PolicyDocument"]["Statement"]}
    assert statements["StartFanOutSynchronously"]["Action"] == "states:StartSyncExecution"
    assert statements["StartFanOutSynchronously"]["Resource"] == {"Ref": "BatchFanOutStateMachine"}
    assert statements["FanOutScratch"]["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:s3:::${TranscriptBucket}/fanout/*"}


@pytest.mark.parametrize("fanout", ["inline", "stepfunctions"])
def test_compact_function_environment_per_mode(fanout: str) -> None:
    variables = Template.load(TEMPLATE_PATH, {"BatchFanOut": fanout}).function_properties(
        "CompactFunction")["Environment"]["Variables"]
    assert variables["COMPACTOR_BATCH_FANOUT"] == fanout
    if fanout == "inline":
        assert "COMPACTOR_STATE_MACHINE_ARN" not in variables and "COMPACTOR_FANOUT_BUCKET" not in variables
    else:
        assert variables["COMPACTOR_STATE_MACHINE_ARN"] == "BatchFanOutStateMachine"
        assert variables["COMPACTOR_FANOUT_BUCKET"] == "TranscriptBucket"


def test_flow_worker_runs_the_handler_with_the_layer_and_scratch_access_only(document: dict[str, Any]) -> None:
    template = Template.load(TEMPLATE_PATH, {"BatchFanOut": "stepfunctions"})
    properties = template.function_properties("FlowWorkerFunction")
    assert properties["Handler"] == "flow_worker.handler" and properties["Layers"] == ["CompactorLayer"]
    assert (REPO / properties["CodeUri"] / "flow_worker.py").is_file()
    (policy,) = document["Resources"]["FlowWorkerFunction"]["Properties"]["Policies"]
    (statement,) = policy["Statement"]
    assert set(statement["Action"]) == {"s3:GetObject", "s3:PutObject"}
    assert statement["Resource"]["Fn::Sub"].endswith("/fanout/*")
    log_group = document["Resources"]["FlowWorkerFunctionLogGroup"]["Properties"]
    assert log_group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${FlowWorkerFunction}"}


def test_flow_worker_module_stays_small() -> None:
    source = (REPO / "functions" / "flow_worker" / "flow_worker.py").read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 120
