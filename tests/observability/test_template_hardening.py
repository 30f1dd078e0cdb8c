"""template.yaml fit for a real account: logs with retention everywhere, API access logs and throttling,
tracing on, documented parameters, and the observability settings the handlers rely on."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from compactor_cli.sam_template import load_template

from .conftest import REPO


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return load_template(REPO / "template.yaml")


def resources_of(document: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: body for name, body in document["Resources"].items() if body["Type"] == kind}


def test_every_parameter_is_documented(document: dict[str, Any]) -> None:
    for name, parameter in document["Parameters"].items():
        assert len(parameter.get("Description", "")) > 20, name


def test_every_function_has_a_log_group_with_the_retention_parameter(document: dict[str, Any]) -> None:
    functions = resources_of(document, "AWS::Serverless::Function")
    groups = {body["Properties"]["LogGroupName"]["Fn::Sub"]: body
              for body in resources_of(document, "AWS::Logs::LogGroup").values()
              if isinstance(body["Properties"]["LogGroupName"], dict)}
    assert functions
    for name, function in functions.items():
        group = groups[f"/aws/lambda/${{{name}}}"]
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
        assert group.get("Condition") == function.get("Condition"), name


def test_every_log_group_has_retention(document: dict[str, Any]) -> None:
    for name, group in resources_of(document, "AWS::Logs::LogGroup").items():
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
    assert document["Parameters"]["LogRetentionDays"]["Default"] == 30


def test_api_writes_json_access_logs_with_request_key_status_and_latency(document: dict[str, Any]) -> None:
    api = document["Resources"]["CompactApi"]["Properties"]
    setting = api["AccessLogSetting"]
    assert setting["DestinationArn"] == {"Fn::GetAtt": ["CompactApiAccessLogGroup", "Arn"]}
    fields = json.loads(re.sub(r"\$context\.[A-Za-z.]+", "x", setting["Format"]))
    assert {"requestId", "apiKeyId", "status", "latencyMs", "integrationLatencyMs"} <= set(fields)
    assert "$context.identity.apiKey\"" not in setting["Format"]  # the key id, never the key
    assert "CompactApiAccessLogGroup" in resources_of(document, "AWS::Logs::LogGroup")


def test_api_account_role_is_optional_and_outlives_the_stack(document: dict[str, Any]) -> None:
    assert document["Parameters"]["CreateApiGatewayAccountRole"]["Default"] == "false"
    resources = document["Resources"]
    for name in ("ApiGatewayCloudWatchRole", "ApiGatewayAccount"):
        assert resources[name]["Condition"] == "CreateAccountRole"
        assert resources[name]["DeletionPolicy"] == "Retain"
    assert resources["CompactApi"]["DependsOn"] == "ApiGatewayAccountReady"
    role = resources["ApiGatewayCloudWatchRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    # AWS's own trust policy: only API Gateway, only AssumeRole, no source conditions it may not send.
    assert trust == {"Effect": "Allow", "Principal": {"Service": "apigateway.amazonaws.com"},
                     "Action": "sts:AssumeRole"}
    (managed,) = role["ManagedPolicyArns"]
    assert managed["Fn::Sub"].endswith(":iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs")
    assert "Condition" not in resources["ApiGatewayAccountReady"]


def test_api_is_throttled_traced_and_lint_exceptions_are_justified(document: dict[str, Any]) -> None:
    api = document["Resources"]["CompactApi"]
    assert api["Properties"]["TracingEnabled"] is True
    (settings,) = api["Properties"]["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == {"Ref": "StageRateLimit"}  # parameters, each at least 1
    assert settings["ThrottlingBurstLimit"] == {"Ref": "StageBurstLimit"}
    parameters = document["Parameters"]
    assert parameters["StageRateLimit"]["MinValue"] >= 1 and parameters["StageBurstLimit"]["MinValue"] >= 1
    assert "Metadata" not in api  # no lint exception left on the API


def test_api_redeploys_on_every_deploy_so_parameter_changes_reach_the_stage(document: dict[str, Any]) -> None:
    # TimeoutInMillis is a Ref inside the OpenAPI body SAM hashes into the deployment's logical id: a new
    # ApiIntegrationTimeoutMs alone would otherwise leave the stage on the old deployment.
    api = document["Resources"]["CompactApi"]["Properties"]
    assert api["AlwaysDeploy"] is True
    text = (REPO / "template.yaml").read_text(encoding="utf-8")
    for match in re.finditer(r"ignore_checks:\n((?:\s+#.*\n|\s+- \w+\n)+)", text):
        assert "#" in match.group(1), match.group(0)  # each exception says why


def test_functions_trace_and_keep_content_out_of_traces_and_logs(document: dict[str, Any]) -> None:
    function_globals = document["Globals"]["Function"]
    assert function_globals["Tracing"] == "Active"
    variables = function_globals["Environment"]["Variables"]
    assert variables["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"
    assert variables["POWERTOOLS_LOGGER_LOG_EVENT"] == "false"
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] and variables["POWERTOOLS_SERVICE_NAME"]
    for machine in resources_of(document, "AWS::Serverless::StateMachine").values():
        assert machine["Properties"]["Tracing"]["Enabled"] is True
        assert machine["Properties"]["Logging"]["IncludeExecutionData"] is False
