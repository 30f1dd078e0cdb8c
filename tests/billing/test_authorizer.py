"""The Lambda authorizer (x-api-key or Bearer -> usage-plan key) and the one derivation of the caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compactor_aws.caller import ANONYMOUS, caller_of, local_key_id, presented_key
from compactor_cli.lambda_runtime import LocalLambdaContext, load_handler

REPO = Path(__file__).resolve().parents[2]
METHOD_ARN = "arn:aws:execute-api:us-east-1:123456789012:abc123/v1/POST/compact"


@pytest.fixture(scope="module")
def authorize() -> Any:
    return load_handler(REPO / "functions" / "authorizer", "authorizer.handler")


def request(headers: dict[str, str]) -> dict[str, Any]:
    return {"type": "REQUEST", "methodArn": METHOD_ARN, "headers": headers,
            "requestContext": {"stage": "v1", "requestId": "r1"}}


@pytest.mark.parametrize(("headers", "source"), [
    ({"Authorization": "Bearer sk-live-1"}, "bearer"),
    ({"authorization": "bearer   sk-live-1"}, "bearer"),
    ({"X-API-Key": "sk-live-1"}, "x-api-key"),
    ({"x-api-key": "sk-live-1", "Authorization": "Bearer other"}, "x-api-key"),
])
def test_either_header_becomes_the_usage_plan_key(authorize: Any, headers: dict[str, str], source: str) -> None:
    answer = authorize(request(headers), LocalLambdaContext("AuthorizerFunction", 5))

    assert answer["usageIdentifierKey"] == "sk-live-1"
    assert answer["principalId"] == local_key_id("sk-live-1") and "sk-live-1" not in answer["principalId"]
    assert answer["policyDocument"]["Statement"] == [{
        "Action": "execute-api:Invoke", "Effect": "Allow",
        "Resource": "arn:aws:execute-api:us-east-1:123456789012:abc123/v1/*/*"}]
    assert answer["context"] == {"keySource": source}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer "},
                                     {"x-api-key": ""}])
def test_no_key_is_unauthorized(authorize: Any, headers: dict[str, str]) -> None:
    with pytest.raises(Exception, match="^Unauthorized$"):
        authorize(request(headers), LocalLambdaContext("AuthorizerFunction", 5))


def test_the_caller_comes_from_the_request_context_never_from_headers() -> None:
    forged = {"headers": {"x-api-key": "k"}, "requestContext": {"identity": {"apiKeyId": None}}}
    via_authorizer = {"requestContext": {"identity": {}, "authorizer": {"principalId": "key-abc"}}}
    both = {"requestContext": {"identity": {"apiKeyId": "id1"}, "authorizer": {"principalId": "key-abc"}}}

    assert caller_of(forged) == ANONYMOUS
    assert caller_of(via_authorizer) == "key-abc"
    assert caller_of(both) == "id1"
    assert presented_key([("Authorization", "Token x")]) is None



def test_the_sample_event_runs_through_compactor_invoke(capsys: pytest.CaptureFixture[str]) -> None:
    """template.yaml wires AuthorizerFunction (code, handler, layer) as ``compactor invoke`` runs it."""
    import json

    from compactor_cli.main import main

    capsys.readouterr()
    code = main(["invoke", "AuthorizerFunction", "-e", str(REPO / "tests" / "events" / "authorizer-bearer.json"),
                 "-t", str(REPO / "template.yaml")])

    answer = json.loads(capsys.readouterr().out)
    assert code == 0
    assert answer["usageIdentifierKey"] == "example-api-key-not-a-secret"
    assert answer["principalId"] == local_key_id("example-api-key-not-a-secret")
    assert answer["policyDocument"]["Statement"][0]["Resource"].endswith("abc123defg/v1/*/*")
