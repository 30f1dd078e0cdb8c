"""template.yaml: Bedrock access only for the listed model ids, secret reads only for the listed ARNs,
the catalog path into every function's environment (docs/providers.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compactor_cli.sam_template import Template

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"
PROVIDER_POLICIES = {"BedrockModelAccess": "HasBedrockModels", "ProviderKeySecretsAccess": "HasKeySecrets"}


def statements(template: Template, logical_id: str) -> list[dict[str, Any]]:
    resource = template.resources[logical_id]
    assert resource["Type"] == "AWS::IAM::Policy"
    return template.resolve(resource["Properties"]["PolicyDocument"])["Statement"]


# SAM's implicit roles of every function that calls models; the fan-out worker's exists (and is
# granted) only with BatchFanOut=stepfunctions.
ROLES = [{"Ref": "CompactFunctionRole"}, {"Ref": "S3CompactFunctionRole"}, {"Ref": "WindowJobFunctionRole"},
         {"Fn::If": ["FanOutWithStepFunctions", {"Ref": "FlowWorkerFunctionRole"}, {"Ref": "AWS::NoValue"}]}]


def roles(template: Template, logical_id: str) -> list[Any]:
    return template.resources[logical_id]["Properties"]["Roles"]


def test_nothing_is_granted_by_default() -> None:
    template = Template.load(TEMPLATE_PATH)
    for logical_id, condition in PROVIDER_POLICIES.items():
        assert template.resources[logical_id]["Condition"] == condition
        assert template.condition(condition) is False
    assert "COMPACTOR_CATALOG" not in template.function_properties("CompactFunction")["Environment"]["Variables"]


def test_bedrock_invoke_only_for_the_listed_ids() -> None:
    ids = "us.amazon.nova-micro-v1:0,amazon.nova-micro-v1:0"
    template = Template.load(TEMPLATE_PATH, {"BedrockModelIds": ids})
    assert template.condition("HasBedrockModels")
    (statement,) = statements(template, "BedrockModelAccess")
    assert statement["Effect"] == "Allow" and statement["Action"] == "bedrock:InvokeModel"
    assert sorted(statement["Resource"]) == sorted(
        [f"arn:aws:bedrock:*::foundation-model/{model}" for model in ids.split(",")]
        + [f"arn:aws:bedrock:*:*:inference-profile/{model}" for model in ids.split(",")])
    assert roles(template, "BedrockModelAccess") == ROLES


def test_secret_reads_only_for_the_listed_arns() -> None:
    arns = ("arn:aws:secretsmanager:us-east-1:123456789012:secret:compactor/openai-AbCdEf,"
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:compactor/anthropic-GhIjKl")
    template = Template.load(TEMPLATE_PATH, {"ProviderKeySecretArns": arns})
    (statement,) = statements(template, "ProviderKeySecretsAccess")
    assert statement["Action"] == "secretsmanager:GetSecretValue"
    assert statement["Resource"] == arns.split(",")
    assert roles(template, "ProviderKeySecretsAccess") == ROLES


def test_catalog_path_reaches_every_function() -> None:
    template = Template.load(TEMPLATE_PATH, {"CatalogPath": "/opt/python/catalog.json"})
    for function in ("CompactFunction", "S3CompactFunction"):
        variables = template.function_properties(function)["Environment"]["Variables"]
        assert variables["COMPACTOR_CATALOG"] == "/opt/python/catalog.json"
