"""CompactFunction's handler driven with API Gateway REST events (tests/events), the core stubbed."""

from __future__ import annotations

import base64
import json
from types import ModuleType
from typing import Any

import pytest

from compactor import __version__
from compactor_cli.lambda_runtime import LocalLambdaContext
from compactor_cli.sam_template import Template
from compactor.http_api import MAX_BODY_BYTES, rest_proxy_event
from compactor.models import CompactRequest, FlowsRequest

from .conftest import REPO, StubService
from .helpers import content_type, load_event, response_json

def logged_output(module: ModuleType, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> str:
    """Log lines as the function's Powertools formatter writes them, plus whatever was printed (metrics)."""
    formatter = module.logger.registered_formatter
    printed = capsys.readouterr()
    return "\n".join([*(formatter.format(record) for record in caplog.records), printed.out, printed.err])


TRANSCRIPT = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."}]


def test_healthz_answers_ok_and_version(compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    response = compact_module.handler(load_event("healthz"), lambda_context)

    assert response["statusCode"] == 200
    assert response_json(response) == {"ok": True, "version": __version__}
    assert content_type(response) == "application/json"


def test_custom_domain_path_with_stage_prefix_reaches_the_same_route(
    compact_module: ModuleType, lambda_context: LocalLambdaContext
) -> None:
    response = compact_module.handler(load_event("healthz", path="/v1/healthz"), lambda_context)

    assert response["statusCode"] == 200


def test_compact_passes_the_validated_request_and_the_context(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService
) -> None:
    stub_service.answer = (200, {"messages": TRANSCRIPT, "compacted": False})
    event = load_event("compact-legacy", body={"messages": TRANSCRIPT, "keep_recent": 3, "unknown_field": 1})

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 200
    assert response_json(response) == {"messages": TRANSCRIPT, "compacted": False}
    (route, request, kwargs), = stub_service.calls
    assert route == "compact" and isinstance(request, CompactRequest)
    assert request.messages == TRANSCRIPT and request.keep_recent == 3
    assert kwargs["lambda_context"] is lambda_context


def test_the_core_runs_as_the_events_caller(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The router keeps one caller's provider failures to that caller (docs/reliability.md): it reads whose
    request runs from ``current_caller``, which the handler sets from the event, and unsets after it."""
    from compactor import service
    from compactor.caller import current_caller

    seen: list[str | None] = []
    answer = stub_service.handle_compact

    def handle_compact(request: Any, **kwargs: Any) -> Any:
        seen.append(current_caller.get())
        return answer(request, **kwargs)

    monkeypatch.setattr(service, "handle_compact", handle_compact)
    for key_id in ("k1l2m3n4o5", "other-key"):
        event = load_event("compact-legacy", body={"messages": TRANSCRIPT})
        event["requestContext"]["identity"]["apiKeyId"] = key_id
        assert compact_module.handler(event, lambda_context)["statusCode"] == 200
    assert seen == ["k1l2m3n4o5", "other-key"] and current_caller.get() is None


def test_service_errors_keep_their_status_and_body(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService
) -> None:
    error = {"error": {"message": "policy_ir rejected at admission: ir: bad", "type": "invalid_request_error",
                       "code": "invalid_policy"}}
    stub_service.answer = (400, error)

    response = compact_module.handler(load_event("compact-legacy"), lambda_context)

    assert response["statusCode"] == 400
    assert response_json(response) == error


@pytest.mark.parametrize(("event_name", "route"), [("flows", "flows"), ("flows-normalize", "normalize")])
def test_flow_routes_pass_the_body_fields(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    event_name: str, route: str,
) -> None:
    event = load_event(event_name)

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 200
    (called, body, _), = stub_service.calls
    assert called == route
    assert body["flow_ir"][0] == "flow"
    assert ("flow_input" in body) == (route == "flows")


def test_every_template_route_reaches_a_handler_route(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # The upload routes need their bucket (tests/scale/test_jobs_routes.py runs them on moto); without it
    # they answer their own 503.
    monkeypatch.delenv("COMPACTOR_JOBS_BUCKET", raising=False)
    bucketless = {("POST", "/uploads"), ("GET", "/jobs/{id}")}
    properties = Template.load(REPO / "template.yaml").function_properties("CompactFunction")
    for api_event in properties["Events"].values():
        route = api_event["Properties"]
        event = rest_proxy_event(method=route["Method"], resource_path=route["Path"], query={},
                                 headers=[("Content-Type", "application/json")], body=b'{"messages":[],"flow_ir":1,"handles":["cmp_0"]}')
        response = compact_module.handler(event, lambda_context)
        if (route["Method"], route["Path"]) in bucketless:
            assert response["statusCode"] == 503 and "uploads_unavailable" in response["body"], route
        else:
            assert response["statusCode"] == 200, route


@pytest.mark.parametrize(
    ("raw_body", "headers", "error_type"),
    [
        ('{"keep_recent": 2}', None, "missing"),
        ("this is not json", None, "json_invalid"),
        ("", None, "missing"),
        ("[1, 2]", None, "json_invalid"),  # every route takes an object: an array is refused as it is parsed
        ("\"hello\"", None, "model_attributes_type"),
        ('{"messages": "hello"}', None, "list_type"),
        ('{"messages": [], "target_ratio": 0}', None, "greater_than"),
        ('{"messages": [], "target_ratio": 1.5}', None, "less_than_equal"),
        ('{"messages": [], "pinned_indices": ["a"]}', None, "int_type"),
        ('{"messages": [{"role": "user", "content": "a\\ud800b"}]}', None, "value_error"),
    ],
)
def test_invalid_bodies_get_422_in_fastapi_shape(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    raw_body: str, headers: dict[str, str] | None, error_type: str,
) -> None:
    response = compact_module.handler(load_event("compact-legacy", raw_body=raw_body, headers=headers), lambda_context)

    assert response["statusCode"] == 422
    body = response_json(response)
    assert set(body) == {"detail"}
    assert error_type in [item["type"] for item in body["detail"]]
    assert all(item["loc"][0] == "body" and isinstance(item["msg"], str) for item in body["detail"])
    assert content_type(response) == "application/json"
    assert stub_service.calls == []


MULTIPART = '--x\r\nContent-Disposition: form-data; name="handles"\r\n\r\n\u20ac\r\n--x--\r\n'


@pytest.mark.parametrize(("content_type", "raw_body"), [
    ("text/plain", '{"messages": []}'),
    ("application/jsonx", '{"messages": []}'),  # Powertools read it as JSON
    ("application/x-www-form-urlencoded", "messages=x"),  # Powertools parsed it as a form
    ("multipart/form-data", '{"messages": []}'),  # no boundary: a 500
    ("multipart/form-data; boundary=x", MULTIPART),  # a character above U+00FF: a 500
    ("multipart/form-data", ""),
])
def test_a_body_that_is_not_json_is_415(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, content_type: str,
    raw_body: str,
) -> None:
    event = load_event("compact-legacy", raw_body=raw_body, headers={"Content-Type": content_type})

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 415
    assert response_json(response) == {"error": {
        "message": f"Content-Type {content_type!r} is not supported: send the body as application/json",
        "type": "invalid_request_error", "code": "unsupported_media_type"}}
    assert stub_service.calls == []


@pytest.mark.parametrize("encoding", ["gzip", "GZIP", "br", "deflate, gzip"])
def test_a_compressed_body_is_415_naming_its_encoding(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, encoding: str,
) -> None:
    # It was parsed as it came: 422 "Expecting value", which says nothing of the encoding.
    event = load_event("compact-legacy", body={"messages": []}, headers={"Content-Encoding": encoding})

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 415
    assert response_json(response)["error"] == {
        "message": f"Content-Encoding {encoding!r} is not supported: send the body uncompressed",
        "type": "invalid_request_error", "code": "unsupported_media_type"}
    assert stub_service.calls == []


def test_the_identity_encoding_is_no_encoding(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
) -> None:
    stub_service.answer = (200, {"messages": [], "compacted": False})
    event = load_event("compact-legacy", body={"messages": []}, headers={"Content-Encoding": "Identity"})

    assert compact_module.handler(event, lambda_context)["statusCode"] == 200


@pytest.mark.parametrize("content_type", ["APPLICATION/JSON", " Application/Json ; charset=UTF-8", ""])
def test_json_media_types_are_compared_case_insensitively(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, content_type: str,
) -> None:
    stub_service.answer = (200, {"messages": [], "compacted": False})
    event = load_event("compact-legacy", body={"messages": []}, headers={"Content-Type": content_type})

    assert compact_module.handler(event, lambda_context)["statusCode"] == 200
    assert event["headers"]["Content-Type"] == content_type  # the caller's event is left as it came


@pytest.mark.parametrize("content_type", ["application/json; charset=iso-8859-1", 'application/json;charset="UTF-16"',
                                          "application/json; boundary=x; Charset=windows-1252"])
def test_a_body_declared_in_another_charset_than_utf8_is_415(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, content_type: str,
) -> None:
    # It was read as UTF-8 whatever it declared: Latin-1's "é" (E9) reached the transcript as U+FFFD, deployed.
    event = load_event("compact-legacy", body={"messages": []}, headers={"Content-Type": content_type})

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 415
    assert response_json(response)["error"] == {
        "message": f"Content-Type {content_type!r} is not supported: send the body as UTF-8 (application/json)",
        "type": "invalid_request_error", "code": "unsupported_media_type"}
    assert stub_service.calls == []


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", 'application/json; charset="UTF8"',
                                          "application/json; charset=US-ASCII", "application/json; version=2"])
def test_a_body_declared_utf8_or_ascii_is_read(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, content_type: str,
) -> None:
    stub_service.answer = (200, {"messages": [], "compacted": False})
    event = load_event("compact-legacy", body={"messages": []}, headers={"Content-Type": content_type})

    assert compact_module.handler(event, lambda_context)["statusCode"] == 200


def test_a_get_without_a_body_may_declare_any_content_type(
    compact_module: ModuleType, lambda_context: LocalLambdaContext,
) -> None:
    event = load_event("healthz", headers={"Content-Type": "text/plain"})

    assert compact_module.handler(event, lambda_context)["statusCode"] == 200


def test_flows_without_flow_ir_is_422(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService
) -> None:
    response = compact_module.handler(load_event("flows", body={"flow_input": "x"}), lambda_context)

    assert response["statusCode"] == 422
    assert response_json(response)["detail"][0]["loc"] == ["body", "flow_ir"]


TOO_LARGE = {"error": {"message": f"request body exceeds {MAX_BODY_BYTES} bytes", "type": "invalid_request_error",
                       "code": "request_too_large"}}


def test_body_over_10_mib_gets_413_before_validation(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService
) -> None:
    response = compact_module.handler(load_event("compact-legacy", raw_body="x" * (MAX_BODY_BYTES + 1)),
                                      lambda_context)

    assert response["statusCode"] == 413
    assert response_json(response) == TOO_LARGE
    assert content_type(response) == "application/json"
    assert stub_service.calls == []


def test_size_limit_counts_utf8_bytes_and_decoded_base64(
    compact_module: ModuleType, lambda_context: LocalLambdaContext
) -> None:
    multibyte = "é" * (MAX_BODY_BYTES // 2 + 1)  # fewer characters than the limit, more bytes
    base64_over = load_event("compact-legacy", base64_body=b"x" * (MAX_BODY_BYTES + 1))
    base64_at_limit = load_event("compact-legacy", base64_body=b" " * MAX_BODY_BYTES)

    assert compact_module.handler(load_event("compact-legacy", raw_body=multibyte), lambda_context)["statusCode"] == 413
    assert compact_module.handler(base64_over, lambda_context)["statusCode"] == 413
    assert compact_module.handler(base64_at_limit, lambda_context)["statusCode"] == 422


def test_base64_encoded_json_body_is_accepted(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService
) -> None:
    event = load_event("compact-legacy", base64_body=b'{"messages": []}')

    assert compact_module.handler(event, lambda_context)["statusCode"] == 200
    assert base64.b64decode(event["body"]) == b'{"messages": []}'


@pytest.mark.parametrize(("body", "message"), [
    ("!!!notbase64***", "the body is not valid base64 (the event says isBase64Encoded)"),
    ("abc", "the body is not valid base64 (the event says isBase64Encoded)"),
    ("eyJt ZXNzYWdlcyI6W119", "the body is not valid base64 (the event says isBase64Encoded)"),  # a space in it
    (base64.b64encode(b'{"messages":[{"role":"user","content":"\xff"}]}').decode(),
     "the body is not UTF-8 text (an invalid byte at offset 39)"),
])
def test_a_base64_body_that_does_not_decode_is_a_400(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService, body: str,
    message: str,
) -> None:
    # Powertools' own decoding raised binascii.Error or UnicodeDecodeError inside the route: a 500.
    event = load_event("compact-legacy", raw_body=body)
    event["isBase64Encoded"] = True

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 400
    assert response_json(response) == {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    assert stub_service.calls == []


@pytest.mark.parametrize(("method", "path"), [("GET", "/nowhere"), ("POST", "/v1/nowhere"), ("OPTIONS", "/nowhere")])
def test_unknown_route_is_404_json(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, method: str, path: str
) -> None:
    response = compact_module.handler(load_event("healthz", path=path, method=method), lambda_context)

    assert response["statusCode"] == 404
    assert response_json(response)["error"]["code"] == "not_found"
    assert content_type(response) == "application/json"


@pytest.mark.parametrize(("in_path", "in_context"), [
    ("", "/v1"),  # the execute-api URL: the event's path lacks the stage, requestContext.path has it
    ("/v1", "/v1"),  # a custom domain passing the stage through
    ("", ""),  # a custom domain mapped with an empty base path
    ("", None),  # an event without requestContext.path: its path
])
def test_404_and_405_name_the_path_the_caller_sent(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, in_path: str, in_context: str | None
) -> None:
    # They named the event's path: "no route for POST /compactt" for a call to /v1/compactt.
    def answer(method: str, route: str) -> Any:
        event = load_event("healthz", path=in_path + route, method=method)
        if in_context is None:
            del event["requestContext"]["path"]
        else:
            event["requestContext"]["path"] = in_context + route
        return compact_module.handler(event, lambda_context)

    sent = in_path if in_context is None else in_context
    not_found, wrong_method = answer("POST", "/compactt"), answer("GET", "/compact")

    assert not_found["statusCode"] == 404
    assert response_json(not_found)["error"]["message"] == f"no route for POST {sent}/compactt"
    assert wrong_method["statusCode"] == 405
    assert response_json(wrong_method)["error"]["message"] == (
        f"GET is not allowed on {sent}/compact; allowed: OPTIONS, POST")


def test_the_stage_answers_a_route_it_does_not_have_with_the_functions_404(
    compact_module: ModuleType, lambda_context: LocalLambdaContext
) -> None:
    # API Gateway answers it before the function runs; its own answer was 403 "Missing Authentication Token".
    api = Template.load(REPO / "template.yaml").resources["CompactApi"]["Properties"]
    unrouted = api["GatewayResponses"]["MISSING_AUTHENTICATION_TOKEN"]
    function = response_json(compact_module.handler(load_event("healthz", path="/nowhere"), lambda_context))

    assert unrouted["StatusCode"] == 404
    stage = json.loads(unrouted["ResponseTemplates"]["application/json"])
    assert stage["error"].keys() == function["error"].keys()
    assert {**stage["error"], "message": None} == {**function["error"], "message": None}


def template_methods() -> dict[str, set[str]]:
    """The methods template.yaml routes at each path (``/jobs/{id}`` as a concrete ``/jobs/job-1``)."""
    methods: dict[str, set[str]] = {}
    properties = Template.load(REPO / "template.yaml").function_properties("CompactFunction")
    for api_event in properties["Events"].values():
        route = api_event["Properties"]
        methods.setdefault(route["Path"].replace("{id}", "job-1"), set()).add(route["Method"])
    return methods


@pytest.mark.parametrize("path", sorted(template_methods()))
@pytest.mark.parametrize("stage", ["", "/v1"])
def test_a_method_a_route_does_not_take_is_405_with_allow_and_options_204(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, path: str, stage: str
) -> None:
    routed = template_methods()[path]
    allow = ", ".join(sorted(routed | {"OPTIONS"} | ({"HEAD"} if "GET" in routed else set())))
    for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE"} - routed):
        response = compact_module.handler(load_event("healthz", path=stage + path, method=method), lambda_context)

        assert response["statusCode"] == 405, (method, path)
        assert response["multiValueHeaders"]["Allow"] == [allow]
        assert response_json(response)["error"] == {
            "message": f"{method} is not allowed on /v1{path}; allowed: {allow}", "type": "invalid_request_error",
            "code": "method_not_allowed"}
    options = compact_module.handler(load_event("healthz", path=stage + path, method="OPTIONS"), lambda_context)
    assert (options["statusCode"], options["multiValueHeaders"]["Allow"], options["body"]) == (204, [allow], "")


@pytest.mark.parametrize("job_id", ['a"b', "a`b", "a\\b", "a\x01b", "a\u2028b"])
@pytest.mark.parametrize("method", ["GET", "PUT", "OPTIONS"])
def test_a_path_no_route_takes_is_404_whatever_its_shape(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, job_id: str, method: str
) -> None:
    # API Gateway decodes the path (/v1/jobs/a%22b arrives as /jobs/a"b); no route takes a '"' in a path parameter,
    # yet the answer was 405 "GET is not allowed on /jobs/a\"b; allowed: GET, HEAD, OPTIONS" (OPTIONS: 204 with it).
    response = compact_module.handler(load_event("healthz", path=f"/jobs/{job_id}", method=method), lambda_context)

    assert response["statusCode"] == 404
    assert response_json(response)["error"]["code"] == "not_found"
    assert "Allow" not in (response.get("multiValueHeaders") or {})


def test_a_trailing_slash_has_the_methods_of_its_route(
    compact_module: ModuleType, lambda_context: LocalLambdaContext
) -> None:
    # The resolver routes POST /compact/ as POST /compact; GET /compact/ was 404 while GET /compact was 405.
    response = compact_module.handler(load_event("healthz", path="/compact/", method="GET"), lambda_context)

    assert response["statusCode"] == 405 and response["multiValueHeaders"]["Allow"] == ["OPTIONS, POST"]


@pytest.mark.parametrize("path", ["/healthz", "/v1/healthz", "/usage", "/openapi.json"])
def test_head_is_answered_as_the_get_of_its_path(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, path: str
) -> None:
    head = compact_module.handler(load_event("healthz", path=path, method="HEAD"), lambda_context)
    get = compact_module.handler(load_event("healthz", path=path, method="GET"), lambda_context)

    assert (head["statusCode"], head["body"]) == (get["statusCode"], get["body"]) == (200, get["body"])
    assert content_type(head) == content_type(get)


def test_unexpected_error_is_500_without_internals_in_body_or_logs(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    stub_service.error = RuntimeError("upstream said: Authorization: Bearer sk-live-SECRET-123")

    response = compact_module.handler(load_event("compact-legacy"), lambda_context)

    assert response["statusCode"] == 500
    assert response_json(response) == {"error": {"message": "internal server error", "type": "server_error",
                                                 "code": None}}
    logs = logged_output(compact_module, caplog, capsys)
    assert "unhandled RuntimeError" in logs and "compact.py" in logs
    assert "sk-live-SECRET-123" not in logs + response["body"]


def test_a_catalog_that_cannot_be_loaded_is_logged_with_its_path_and_problem(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    """A catalog the function cannot load (``CatalogPath`` naming no file in the layer, a catalog edited wrong)
    fails every compaction with a 500; its error is the operator's configuration, not the request's, and the log
    line names the file and the problem, as GET /v1/healthz's 503 does. It said ``unhandled CatalogError`` alone."""
    from compactor.catalog import CatalogError

    stub_service.error = CatalogError("catalog /opt/python/catalog.json: cannot read (No such file or directory)")

    response = compact_module.handler(load_event("compact-legacy"), lambda_context)

    assert response["statusCode"] == 500
    assert response_json(response)["error"]["message"] == "internal server error"  # the caller reads no path
    logs = logged_output(compact_module, caplog, capsys)
    assert "unhandled CatalogError" in logs
    assert "catalog /opt/python/catalog.json: cannot read (No such file or directory)" in logs


def test_request_bodies_are_not_logged(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    marker = "BODY-MARKER-7f3a"
    event = load_event("compact-legacy", body={"messages": [{"role": "user", "content": marker}]},
                       headers={"Authorization": f"Bearer {marker}"})

    compact_module.handler(event, lambda_context)
    compact_module.handler(load_event("compact-legacy", raw_body=marker), lambda_context)  # 422 path too

    assert marker not in logged_output(compact_module, caplog, capsys)


def test_transcripts_stay_out_of_debug_logs_and_reprs(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Powertools formats the route's arguments into a debug message on every request, at any log level.
    marker = "TRANSCRIPT-MARKER-91c2"
    caplog.set_level("DEBUG")
    compact_module.handler(load_event("compact-legacy", body={"messages": [{"role": "user", "content": marker}]}),
                           lambda_context)
    assert stub_service.calls and "Calling API Route Handler" in caplog.text
    assert marker not in caplog.text
    assert marker not in repr(CompactRequest(messages=[{"role": "user", "content": marker}]))
    assert marker not in repr(FlowsRequest(flow_ir=[], flow_input={"messages": [marker]}))
