"""What a deploy publishes (docs/deploy.md#what-a-deploy-publishes) and what API Gateway's authorizer
invokes (docs/deploy.md#the-authorizer): template.yaml run through the SAM translator itself, the one
``sam validate`` and ``sam build`` use.

aws-sam-translator pins pydantic below the layer's pin, so it lives with aws-sam-cli in ``.venv-tools``
(infra/tools-requirements.txt), not in the project's virtualenv: each case runs a probe in that
interpreter. ``make unit`` builds it and names it in COMPACTOR_TOOLS_PYTHON, which also makes a missing
interpreter a failure; elsewhere the cases are skipped when there is none."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from compactor_cli.sam_template import SERVERLESS_FUNCTION, load_template

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO / "template.yaml"
LAYER = "CompactorLayer"

# Transforms the template once per build: every function's code, the layer's content and the state
# machines' definitions stand at the S3 locations `sam package` would give them; prints, per build, each
# function's AWS::Lambda::Version logical id, the authorizer's URI and the Lambda permissions naming it.
_PROBE = r"""
import copy, json, logging, os, sys
logging.disable(logging.WARNING)
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

class NoManagedPolicies:
    def load(self):
        return {}

request = json.load(sys.stdin)
source = yaml_parse(open(request["template"], encoding="utf-8").read())
builds = []
for build in request["builds"]:
    template = copy.deepcopy(source)
    for name, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::Function":
            properties["CodeUri"] = "s3://artifacts/" + build["code"].get(name, name)
        elif resource["Type"] == "AWS::Serverless::LayerVersion":
            properties["ContentUri"] = "s3://artifacts/" + build["layer"]
        elif resource["Type"] == "AWS::Serverless::StateMachine" and "DefinitionUri" in properties:
            properties["DefinitionUri"] = "s3://artifacts/" + name
    resources = transform(template, build.get("parameters", {}), NoManagedPolicies())["Resources"]
    versions = {value["Properties"]["FunctionName"]["Ref"]: key for key, value in resources.items()
                if value["Type"] == "AWS::Lambda::Version"}
    authorizers = []
    for api in (v for v in resources.values() if v["Type"] == "AWS::ApiGateway::RestApi"):
        schemes = api["Properties"]["Body"].get("components", {}).get("securitySchemes", {})
        authorizers += [s["x-amazon-apigateway-authorizer"] for s in schemes.values()
                        if "x-amazon-apigateway-authorizer" in s]
    permissions = [value["Properties"] for key, value in resources.items()
                   if value["Type"] == "AWS::Lambda::Permission" and "/authorizers/" in json.dumps(value)]
    builds.append({"versions": versions, "authorizers": authorizers, "permissions": permissions})
print(json.dumps(builds))
"""


def _tools_python() -> str:
    named = os.environ.get("COMPACTOR_TOOLS_PYTHON")
    python = named or str(REPO / ".venv-tools" / "bin" / "python")
    if not Path(python).exists():
        if named:
            pytest.fail(f"COMPACTOR_TOOLS_PYTHON={named} does not exist (make tools builds it)")
        pytest.skip("no .venv-tools (make tools): aws-sam-translator lives there, beside aws-sam-cli")
    return python


def translate(*builds: dict[str, Any]) -> list[dict[str, Any]]:
    request = {"template": str(TEMPLATE_PATH), "builds": [{"code": {}, **build} for build in builds]}
    done = subprocess.run([_tools_python(), "-c", _PROBE], input=json.dumps(request), capture_output=True,
                          text=True, cwd=REPO, check=False,
                          env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def functions_with_the_layer() -> set[str]:
    resources = load_template(TEMPLATE_PATH)["Resources"]
    return {name for name, resource in resources.items() if resource["Type"] == SERVERLESS_FUNCTION
            and {"Ref": LAYER} in resource.get("Properties", {}).get("Layers", [])}


def test_a_layer_only_change_publishes_a_version_of_every_function_that_lists_it_and_a_no_op_none() -> None:
    """Almost all code lives in the layer: a deploy that changed only the layer's content must move
    each function's alias to a new version (a new snapshot), and an unchanged build must not."""
    first, layer_changed, unchanged = translate({"layer": "layer-1.zip"}, {"layer": "layer-2.zip"},
                                                {"layer": "layer-1.zip"})
    users = functions_with_the_layer()

    assert users >= {"CompactFunction", "S3CompactFunction", "WindowJobFunction", "FlowWorkerFunction",
                     "AuthorizerFunction"}
    assert set(first["versions"]) == users  # every function is published behind its alias
    assert {name for name in users if layer_changed["versions"][name] == first["versions"][name]} == set()
    assert unchanged["versions"] == first["versions"]


def test_a_handler_change_publishes_only_that_functions_version() -> None:
    first, changed = translate({"layer": "layer.zip"},
                               {"layer": "layer.zip", "code": {"AuthorizerFunction": "authorizer-2"}})

    differ = {name for name, version in first["versions"].items() if changed["versions"][name] != version}
    assert differ == {"AuthorizerFunction"}


def test_every_function_with_the_layer_hashes_all_its_properties_and_the_layer_publishes_them() -> None:
    """The settings the translator cases rely on, readable without .venv-tools: cfn-lint refuses
    AutoPublishAliasAllProperties in Globals, so each function sets it, and a new function must too."""
    resources = load_template(TEMPLATE_PATH)["Resources"]

    assert resources[LAYER]["Properties"]["PublishLambdaVersion"] is True
    for name in functions_with_the_layer():
        assert resources[name]["Properties"].get("AutoPublishAliasAllProperties") is True, name



def test_api_gateway_calls_the_authorizers_alias_and_may_invoke_it() -> None:
    """The authorizer runs on every API request: through its alias API Gateway reaches the published
    (snapshotted) version, not $LATEST, and the permission SAM generates names that alias."""
    (built,) = translate({"layer": "layer.zip"})
    alias = {"Ref": "AuthorizerFunctionAliaslive"}

    (authorizer,) = built["authorizers"]
    assert authorizer["authorizerUri"]["Fn::Sub"][1] == {"__FunctionArn__": alias}
    assert [permission["FunctionName"] for permission in built["permissions"]] == [alias]
    assert built["permissions"][0]["Principal"] == "apigateway.amazonaws.com"
