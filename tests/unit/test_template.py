"""template.yaml: the resources, parameters and wiring docs/deploy.md describes, checked on the parsed YAML."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from compactor_cli import serve
from compactor_cli.sam_template import SERVERLESS_FUNCTION, Template, load_template

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO / "template.yaml"
API_ROUTES = {("GET", "/healthz"), ("GET", "/usage"), ("GET", "/openapi.json"), ("POST", "/compact"),
              ("POST", "/flows"), ("POST", "/flows/normalize"), ("POST", "/uploads"), ("GET", "/jobs/{id}"),
              ("POST", "/expand")}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return load_template(TEMPLATE_PATH)


@pytest.fixture(scope="module")
def template() -> Template:
    return Template.load(TEMPLATE_PATH)


def resource(document: dict[str, Any], logical_id: str, resource_type: str) -> dict[str, Any]:
    assert document["Resources"][logical_id]["Type"] == resource_type
    return document["Resources"][logical_id].get("Properties", {})


def test_is_a_sam_template_with_the_contract_parameters(document: dict[str, Any]) -> None:
    assert document["Transform"] == "AWS::Serverless-2016-10-31"
    parameters = document["Parameters"]
    assert parameters["ApiIntegrationTimeoutMs"]["Default"] == 29000
    assert parameters["FlowBudgetMs"]["Default"] < parameters["ApiIntegrationTimeoutMs"]["Default"]
    assert parameters["BatchFanOut"]["Default"] == "inline"
    assert set(parameters["BatchFanOut"]["AllowedValues"]) == {"inline", "stepfunctions"}


def test_globals_set_runtime_tracing_and_powertools_environment(document: dict[str, Any]) -> None:
    function_globals = document["Globals"]["Function"]
    assert function_globals["Runtime"] == "python3.12"
    assert function_globals["Tracing"] == "Active"
    variables = function_globals["Environment"]["Variables"]
    for name in ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL"):
        assert variables[name]
    assert variables["COMPACTOR_FLOW_BUDGET_MS"] == {"Ref": "FlowBudgetMs"}
    assert variables["COMPACTOR_BATCH_FANOUT"] == {"Ref": "BatchFanOut"}
    assert variables["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"


def test_api_is_regional_rest_on_stage_v1_with_a_required_key_and_usage_plan(document: dict[str, Any]) -> None:
    api = resource(document, "CompactApi", "AWS::Serverless::Api")
    assert api["StageName"] == "v1"
    assert api["EndpointConfiguration"]["Type"] == "REGIONAL"
    assert api["Auth"]["ApiKeyRequired"] is True
    plan = api["Auth"]["UsagePlan"]
    assert plan["CreateUsagePlan"] == "PER_API"
    assert {"BurstLimit", "RateLimit"} <= set(plan["Throttle"]) and {"Limit", "Period"} <= set(plan["Quota"])


def test_layer_is_built_by_its_makefile_holding_the_package(document: dict[str, Any]) -> None:
    layer = document["Resources"]["CompactorLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    content = REPO / layer["Properties"]["ContentUri"]
    assert (content / "requirements.txt").is_file()
    assert (content / "compactor" / "__init__.py").is_file()
    assert "build-CompactorLayer:" in (content / "Makefile").read_text()


def test_compact_function_serves_every_route_on_the_api_with_the_layer(template: Template) -> None:
    properties = template.function_properties("CompactFunction")
    assert properties["Layers"] == ["CompactorLayer"]
    events = list(properties["Events"].values())
    assert all(event["Type"] == "Api" for event in events)
    assert {(event["Properties"]["Method"], event["Properties"]["Path"]) for event in events} == API_ROUTES
    for event in events:
        assert event["Properties"]["RestApiId"] == "CompactApi"
        assert event["Properties"]["TimeoutInMillis"] == template.parameters["ApiIntegrationTimeoutMs"]


def test_timeouts_are_ordered_budget_then_integration_then_function(template: Template) -> None:
    flow_budget_ms = int(template.parameters["FlowBudgetMs"])
    integration_ms = int(template.parameters["ApiIntegrationTimeoutMs"])
    function_timeout_s = template.function_properties("CompactFunction")["Timeout"]

    assert flow_budget_ms < integration_ms <= function_timeout_s * 1000
    assert serve.FUNCTION_TIMEOUT_S == function_timeout_s


def test_every_function_handler_resolves_to_a_function_in_a_file(template: Template) -> None:
    functions = [key for key, value in template.resources.items() if value["Type"] == SERVERLESS_FUNCTION]
    assert "CompactFunction" in functions
    for logical_id in functions:
        properties = template.function_properties(logical_id)
        module_name, function_name = properties["Handler"].rsplit(".", 1)
        source = REPO / properties["CodeUri"] / f"{module_name.replace('.', '/')}.py"
        assert source.is_file(), logical_id
        tree = ast.parse(source.read_text(encoding="utf-8"))
        assert function_name in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}, logical_id
        for layer in properties.get("Layers", []):
            assert template.layer_path(layer) is not None and template.layer_path(layer).is_dir(), layer


def test_outputs_give_the_url_the_key_id_and_the_function_arn(document: dict[str, Any]) -> None:
    outputs = document["Outputs"]
    assert "/v1/" in outputs["CompactApiUrl"]["Value"]["Fn::Sub"]
    assert outputs["CompactApiKeyId"]["Value"] == {"Ref": "CompactApiApiKey"}
    assert outputs["CompactFunctionArn"]["Value"] == {"Fn::GetAtt": ["CompactFunction", "Arn"]}


def test_lint_exceptions_are_justified_in_the_template() -> None:
    lines = TEMPLATE_PATH.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if line.strip() == "ignore_checks:":
            assert lines[index + 1].strip().startswith("#"), f"unexplained cfn-lint exception at line {index + 1}"


def test_every_function_publishes_a_snapstart_version_behind_an_alias(document: dict[str, Any]) -> None:
    function_globals = document["Globals"]["Function"]
    assert function_globals["AutoPublishAlias"] == "live"
    assert function_globals["SnapStart"] == {"ApplyOn": {"Ref": "SnapStart"}}
    parameter = document["Parameters"]["SnapStart"]
    assert parameter["Default"] == "PublishedVersions" and set(parameter["AllowedValues"]) == {"PublishedVersions", "None"}
    assert function_globals["Runtime"] in {"python3.12", "python3.13"}  # SnapStart supports Python 3.12 and later


def test_no_ttl_outlives_the_large_bodies_the_bucket_keeps(document: dict[str, Any]) -> None:
    # A record that outlived its large body would fail every replay of its key (docs/billing.md): the TTL's
    # bounds are the code's, and the bucket keeps the stored responses a day longer than the longest TTL.
    from compactor.idempotency import DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS, MIN_TTL_SECONDS

    ttl = document["Parameters"]["IdempotencyTtlSeconds"]
    assert (ttl["MinValue"], ttl["Default"], ttl["MaxValue"]) == (MIN_TTL_SECONDS, DEFAULT_TTL_SECONDS,
                                                                  MAX_TTL_SECONDS)
    rules = {rule["Id"]: rule for rule in
             resource(document, "TranscriptBucket", "AWS::S3::Bucket")["LifecycleConfiguration"]["Rules"]}
    assert rules["ExpireStoredResponses"]["Prefix"] == "idempotency/"
    assert rules["ExpireStoredResponses"]["ExpirationInDays"] * 86400 >= MAX_TTL_SECONDS + 86400


def test_docs_deploy_lists_every_parameter_with_its_default_and_every_output(document: dict[str, Any]) -> None:
    """docs/deploy.md's parameter table is the operator's reference: each parameter of the template in a row that
    states its default (several parameters may share a row, their defaults in order), no row naming one the
    template does not take, and the outputs paragraph names every output."""
    import re

    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    documented: dict[str, str] = {}
    for row in rows:
        names = re.findall(r"`([A-Za-z0-9]+)`", row[0])
        defaults = [d.strip(" `") for d in row[1].split(",")] if len(names) > 1 and "," in row[1] else [row[1]] * len(names)
        documented.update(zip(names, defaults))
    parameters = document["Parameters"]
    assert set(documented) == set(parameters)
    for name, parameter in parameters.items():
        default = str(parameter.get("Default", ""))
        assert documented[name].strip(" `") == (default or "empty"), name
    outputs = text.split("Outputs: ", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"`([A-Za-z]+)`", outputs)) == set(document["Outputs"])
