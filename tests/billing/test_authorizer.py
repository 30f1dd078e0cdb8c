"""The Lambda authorizer (x-api-key or Bearer -> usage-plan key) and the one derivation of the caller."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
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
    ({"x-api-key": "sk-live-1", "Authorization": "Bearer sk-live-1"}, "x-api-key"),  # one key, two ways
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
                                     {"x-api-key": ""}, {"x-api-key": None}])
def test_no_key_is_unauthorized(authorize: Any, headers: dict[str, str]) -> None:
    with pytest.raises(Exception, match="^Unauthorized$"):
        authorize(request(headers), LocalLambdaContext("AuthorizerFunction", 5))


AMBIGUOUS = {
    "two x-api-key headers": {"x-api-key": ["sk-live-1", "sk-live-2"]},
    "x-api-key and a different bearer": {"x-api-key": ["sk-live-1"], "Authorization": ["Bearer sk-live-2"]},
    "two bearer tokens": {"Authorization": ["Bearer sk-live-1", "Bearer sk-live-2"]},
}


def multi_request(multi: dict[str, list[str]]) -> dict[str, Any]:
    """A REQUEST event as API Gateway builds it: ``headers`` holds each header's last value."""
    return {**request({name: values[-1] for name, values in multi.items()}), "multiValueHeaders": multi}


@pytest.mark.parametrize("case", sorted(AMBIGUOUS))
def test_two_different_keys_are_denied_whichever_came_last(authorize: Any, case: str) -> None:
    """x-api-key won over a different bearer token, and the last of two x-api-key headers over the first: the
    request was billed to and throttled as one of two keys, without a word. Now it is denied, which API Gateway
    answers with the template's ACCESS_DENIED response: the 400 ``ambiguous_api_key``."""
    for multi in (AMBIGUOUS[case], {name: values[::-1] for name, values in AMBIGUOUS[case].items()}):
        answer = authorize(multi_request(multi), LocalLambdaContext("AuthorizerFunction", 5))

        assert "usageIdentifierKey" not in answer
        assert answer["policyDocument"]["Statement"] == [{
            "Action": "execute-api:Invoke", "Effect": "Deny",
            "Resource": "arn:aws:execute-api:us-east-1:123456789012:abc123/v1/*/*"}]
        assert "sk-live" not in json.dumps(answer)


def test_one_key_sent_twice_is_that_key(authorize: Any) -> None:
    multi = {"x-api-key": ["sk-live-1", "sk-live-1"], "Authorization": ["Bearer sk-live-1"]}
    answer = authorize(multi_request(multi), LocalLambdaContext("AuthorizerFunction", 5))

    assert answer["usageIdentifierKey"] == "sk-live-1"
    assert answer["policyDocument"]["Statement"][0]["Effect"] == "Allow"


def test_the_deployed_api_and_compactor_serve_answer_two_keys_alike() -> None:
    """The template's ACCESS_DENIED response (the authorizer's deny) is the 400 compactor serve answers."""
    from compactor.errors import AmbiguousApiKey
    from compactor_cli.sam_template import Template
    from fakes.local_serve import api_server

    denied = Template.load(REPO / "template.yaml").resources["CompactApi"]["Properties"]["GatewayResponses"][
        "ACCESS_DENIED"]
    with api_server(api_key=["sk-live-1", "sk-live-2"]) as url:
        served = [httpx.get(f"{url}/healthz", headers=list(headers)) for headers in (
            [("x-api-key", "sk-live-1"), ("x-api-key", "sk-live-2")],
            [("x-api-key", "sk-live-2"), ("Authorization", "Bearer sk-live-1")],
            [("x-api-key", "sk-live-1"), ("Authorization", "Bearer not-a-key")])]
        one_key_twice = httpx.get(f"{url}/healthz", headers=[("x-api-key", "sk-live-1"),
                                                             ("Authorization", "Bearer sk-live-1")])
    with api_server() as open_url:  # without --api-key too: whose call it is would still be a guess
        served.append(httpx.get(f"{open_url}/usage", headers=[("x-api-key", "a"), ("x-api-key", "b")]))

    assert denied["StatusCode"] == 400
    assert json.loads(denied["ResponseTemplates"]["application/json"]) == AmbiguousApiKey().body()
    for response in served:
        assert response.status_code == 400
        assert response.json() == AmbiguousApiKey().body()
        assert response.json()["error"]["code"] == "ambiguous_api_key"
    assert one_key_twice.status_code == 200


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
