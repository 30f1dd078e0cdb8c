"""Events API Gateway does not send but a test console, a hand-made invoke or another integration can: each is a
clear 400 ``invalid_event`` naming what is off, or, where it means one thing only, read as the event it means
(docs/reliability.md#bounded-input). Each used to raise from the handler (API Gateway then answers 502) or answer
500."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import StubService
from .helpers import load_event, response_json

TRANSCRIPT = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."}]


def compact_event() -> dict[str, Any]:
    return load_event("compact-legacy", body={"messages": TRANSCRIPT, "keep_recent": 1})


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for part in parents:
            event = event[part]
        event[last] = value
    return change


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda event: event.pop(name)


REFUSED: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a header null": (_set("headers.Content-Type", None), "header 'Content-Type' is null: a string"),
    "another header null": (_set("headers.X-Forwarded-Port", None), "header 'X-Forwarded-Port' is null"),
    "a multi-value header null": (_set("multiValueHeaders.Content-Type", None), "'Content-Type' is null"),
    "a multi-value header [null]": (_set("multiValueHeaders.Content-Type", [None]), "'Content-Type' is [null]"),
    "a multi-value header a string": (_set("multiValueHeaders.Accept", "*/*"), "a list of strings"),
    "a header a number": (_set("headers.X-Forwarded-Port", 443), "'X-Forwarded-Port' is 443: a string"),
    "headers a list": (_set("headers", ["Content-Type: application/json"]), "headers is a JSON array"),
    "the body an object": (_set("body", {"messages": TRANSCRIPT}), "body is a JSON object"),
    "the body a number": (_set("body", 5), "body is a JSON number"),
    "the body an array": (_set("body", TRANSCRIPT), "body is a JSON array"),
    "isBase64Encoded 1": (_set("isBase64Encoded", 1), "isBase64Encoded is 1: true or false"),
    "isBase64Encoded 'no'": (_set("isBase64Encoded", "no"), "isBase64Encoded is 'no'"),
    "a query value null": (_set("queryStringParameters", {"a": None}), "query parameter 'a' is null"),
    "requestContext a string": (_set("requestContext", "v1"), "requestContext is a JSON string"),
    "pathParameters a list": (_set("pathParameters", []), "pathParameters is a JSON array"),
    "no httpMethod (a Function URL's payload)": (_drop("httpMethod"), "no httpMethod"),
    "httpMethod null": (_set("httpMethod", None), "no httpMethod"),
    "no path": (_drop("path"), "no path"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_event_of_another_shape_is_a_400_naming_what_is_off(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, case: str) -> None:
    change, says = REFUSED[case]
    event = compact_event()
    change(event)

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 400, response["body"]
    error = response_json(response)["error"]
    assert error["code"] == "invalid_event" and error["type"] == "invalid_request_error"
    assert says in error["message"]
    assert stub_service.calls == []


@pytest.mark.parametrize("event", [[], "POST /v1/compact", None, {}], ids=["array", "string", "null", "empty"])
def test_an_event_that_is_no_proxy_event_at_all_is_a_400(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, event: Any) -> None:
    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 400
    assert response_json(response)["error"]["code"] == "invalid_event"


EQUIVALENT: dict[str, Callable[[dict[str, Any]], None]] = {
    "isBase64Encoded 'false'": _set("isBase64Encoded", "false"),
    "isBase64Encoded 'False'": _set("isBase64Encoded", "False"),
    "isBase64Encoded null": _set("isBase64Encoded", None),
    "multiValueHeaders only": _set("headers", None),
    "headers only": _set("multiValueHeaders", None),
    "no requestContext": _drop("requestContext"),
    "requestContext without identity or requestId": _set("requestContext", {"stage": "v1"}),
}


@pytest.mark.parametrize("case", sorted(EQUIVALENT))
def test_an_event_that_means_one_thing_is_read_as_it(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, case: str) -> None:
    event = compact_event()
    EQUIVALENT[case](event)

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 200, response["body"]
    (route, request, _), = stub_service.calls
    assert route == "compact" and request.messages == TRANSCRIPT and request.keep_recent == 1


def test_isbase64encoded_true_as_a_string_decodes_the_body(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService) -> None:
    event = load_event("compact-legacy", base64_body=b'{"messages": [{"role": "user", "content": "hi"}]}')
    event["isBase64Encoded"] = "true"

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 200, response["body"]
    assert stub_service.calls[0][1].messages == [{"role": "user", "content": "hi"}]


def test_a_content_type_in_multivalueheaders_only_is_checked(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService) -> None:
    """It went unread: a form body declared there was compacted as JSON."""
    event = compact_event()
    event["headers"] = None
    event["multiValueHeaders"]["Content-Type"] = ["text/plain"]

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 415
    assert response_json(response)["error"]["code"] == "unsupported_media_type"
    assert stub_service.calls == []


@pytest.mark.parametrize("values", [["application/json", "text/plain"], ["text/plain", "application/json"]])
def test_a_content_type_sent_twice_with_different_values_is_a_400(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
        values: list[str]) -> None:
    """The last one was read, whichever it was."""
    event = compact_event()
    event["headers"]["Content-Type"] = values[-1]
    event["multiValueHeaders"]["Content-Type"] = values

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 400
    assert "Content-Type was sent with 2 different values" in response_json(response)["error"]["message"]
    assert stub_service.calls == []


def test_the_same_header_twice_with_one_value_is_that_header(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService) -> None:
    event = compact_event()
    event["multiValueHeaders"]["Content-Type"] = ["application/json", "application/json"]

    assert compact_module.handler(event, lambda_context)["statusCode"] == 200
