"""The OpenAPI document: served at ``GET /v1/openapi.json``, identical to ``docs/openapi.json``, covering
every route of the handler, and its request examples run as they are and answer what it documents."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from compactor_aws import openapi
from compactor_cli.openapi_doc import DOC_PATH, current_document, main
from fakes.local_serve import api_server

REPO = Path(__file__).resolve().parents[2]
API_KEY = "openapi-test-key"


pytestmark = pytest.mark.usefixtures("bundled_catalog")  # the examples run on the bundled offline offers


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with api_server(API_KEY) as base:
        yield base


def test_the_checked_in_document_is_current() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == current_document(), "docs/openapi.json is stale: make openapi"


def test_check_mode_tells_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    assert main(["--check", str(stale)]) == 1
    assert main([str(stale)]) == 0 and main(["--check", str(stale)]) == 0


def test_the_route_answers_the_document_behind_the_key(url: str) -> None:
    assert httpx.get(f"{url}/openapi.json").status_code == 403
    response = httpx.get(f"{url}/openapi.json", headers={"x-api-key": API_KEY})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == json.loads(DOC_PATH.read_text(encoding="utf-8"))


def test_every_route_of_the_template_is_documented() -> None:
    from compactor_cli.sam_template import Template

    events = Template.load(REPO / "template.yaml").function_properties("CompactFunction")["Events"].values()
    def shape(path: str) -> str:  # path parameters by position, whatever their names
        return re.sub(r"\{[^}]*\}", "{}", path)

    routes = {(e["Properties"]["Method"].lower(), shape(e["Properties"]["Path"])) for e in events}
    paths = json.loads(DOC_PATH.read_text(encoding="utf-8"))["paths"]
    documented = {(method, shape(path)) for path, operations in paths.items() for method in operations}
    assert documented == routes - {("get", "/openapi.json")}
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert operation["summary"] and "422" in operation["responses"]
            assert {"200", "201"} & set(operation["responses"]), (method, path)
            assert (method, path) in openapi.RESPONSES


def _examples() -> list[tuple[str, str, str, Any]]:
    return [(method, path, name, example["value"])
            for (method, path), named in openapi.request_examples().items() for name, example in named.items()]


@pytest.mark.parametrize("method,path,name,value", _examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_request_example_runs_and_answers_its_documented_model(url: str, method: str, path: str, name: str,
                                                                    value: Any) -> None:
    response = httpx.request(method.upper(), f"{url}{path}", json=value, headers={"x-api-key": API_KEY},
                             timeout=60)
    assert response.status_code == 200, response.text
    model = openapi.RESPONSES[(method, path)]
    TypeAdapter(model).validate_python(response.json())
    if path == "/compact" and name == "decision":
        assert response.json()["compaction"]["output_bytes"] < response.json()["compaction"]["original_bytes"]


def _documented(method: str, path: str, status: int) -> dict[str, Any]:
    """The schema docs/openapi.json gives the body of ``method path``'s ``status`` answer, able to resolve its
    ``$ref``s on its own."""
    doc = json.loads(DOC_PATH.read_text(encoding="utf-8"))
    response = doc["paths"][path][method]["responses"][str(status)]
    return {**response["content"]["application/json"]["schema"], "components": doc["components"]}


def _request_schema(path: str) -> dict[str, Any]:
    doc = json.loads(DOC_PATH.read_text(encoding="utf-8"))
    schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return {**schema, "components": doc["components"]}


_RESPONSES_ITEMS = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Make the test pass."}]},
    {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{\"cmd\": \"pytest\"}"},
    {"type": "function_call_output", "call_id": "c1", "output": "FAILED tests/test_io.py\n" * 40},
    {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": "{\"cmd\": \"cat io.py\"}"},
    {"type": "function_call_output", "call_id": "c2", "output": "def read(path):\n    ...\n" * 40},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]},
]
_ANTHROPIC_ITEMS = [
    {"role": "user", "content": "Make the test pass."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "pytest"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "FAILED x\n" * 60}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
    {"role": "user", "content": "Go on."},
    {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
]
_ANSWERS = {  # (request body, the status it answers): each a documented answer the document once refused
    "mask-chat": ({"messages": openapi.EXAMPLE_MESSAGES, "mode": "mask", "keep_recent": 1}, 200),
    "mask-anthropic": ({"format": "anthropic-messages", "messages": _ANTHROPIC_ITEMS, "mode": "mask",
                        "keep_recent": 1}, 200),
    "mask-responses": ({"format": "openai-responses", "input": _RESPONSES_ITEMS, "mode": "mask",
                        "keep_recent": 1}, 200),
    "decision-responses": ({"format": "openai-responses", "input": _RESPONSES_ITEMS, "mode": "decision"}, 200),
    "seal-responses": ({"format": "openai-responses", "input": _RESPONSES_ITEMS, "mode": "seal",
                        "keep_recent": 1}, 200),
}


@pytest.mark.parametrize("name", list(_ANSWERS))
def test_every_format_and_mode_sends_and_answers_what_the_document_says(url: str, name: str) -> None:
    # The document required `messages` in every request and answer and knew only decision mode's report:
    # an openai-responses request (items in `input`) failed its request schema, and every openai-responses or
    # mask answer failed its response schema, so a client generated from it refused valid answers.
    import jsonschema

    body, status = _ANSWERS[name]
    jsonschema.validate(body, _request_schema("/compact"))
    response = httpx.post(f"{url}/compact", json=body, headers={"x-api-key": API_KEY}, timeout=60)

    assert response.status_code == status, response.text
    jsonschema.validate(response.json(), _documented("post", "/compact", status))
    openapi.CompactResponse.model_validate(response.json())
    if body.get("mode") == "mask":
        assert response.json()["compaction"]["masked"], "the case masks something"


def test_a_body_with_neither_messages_nor_input_is_not_a_documented_request() -> None:
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"mode": "mask"}, _request_schema("/compact"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"messages": [], "mode": "summarize"}, _request_schema("/compact"))


def test_usage_documents_its_range_and_its_own_422(url: str) -> None:
    # /usage read `from` and `to` and answered a bad range with an `error` body, while the document listed no
    # parameter and gave its 422 the `detail` body of a failed schema validation.
    import jsonschema

    doc = json.loads(DOC_PATH.read_text(encoding="utf-8"))
    assert [p["name"] for p in doc["paths"]["/usage"]["get"]["parameters"]] == ["from", "to"]
    headers = {"x-api-key": API_KEY}
    ok = httpx.get(f"{url}/usage", params={"from": "2026-11-01", "to": "2026-11-30"}, headers=headers)
    bad = httpx.get(f"{url}/usage", params={"from": "2026-11-31"}, headers=headers)

    assert ok.status_code == 200 and ok.json()["from"] == "2026-11-01"
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_usage_range"
    jsonschema.validate(bad.json(), _documented("get", "/usage", 422))


def test_billed_routes_document_the_idempotency_key_and_its_answers(url: str) -> None:
    import jsonschema

    doc = json.loads(DOC_PATH.read_text(encoding="utf-8"))
    for path in ("/compact", "/flows", "/flows/normalize", "/expand"):
        operation = doc["paths"][path]["post"]
        assert "Idempotency-Key" in [p["name"] for p in operation.get("parameters", [])], path
        assert "409" in operation["responses"] and "Idempotent-Replayed" in operation["responses"]["200"]["headers"]
    headers = {"x-api-key": API_KEY, "Idempotency-Key": "openapi-test-reused"}
    first = httpx.post(f"{url}/compact", json={"messages": [], "mode": "mask"}, headers=headers)
    reused = httpx.post(f"{url}/compact", json={"messages": [{"role": "user", "content": "x"}]}, headers=headers)
    invalid = httpx.post(f"{url}/compact", json={"messages": 5}, headers={"x-api-key": API_KEY})

    assert first.status_code == 200 and reused.status_code == 422 and invalid.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    jsonschema.validate(reused.json(), _documented("post", "/compact", 422))
    jsonschema.validate(invalid.json(), _documented("post", "/compact", 422))


def test_a_health_check_without_a_catalog_answers_its_documented_503(
        compact_module: Any, lambda_context: Any, unloadable_catalog: None) -> None:
    import jsonschema

    from compactor.http_api import rest_proxy_event

    response = compact_module.handler(rest_proxy_event(method="GET", resource_path="/healthz", query={},
                                                       headers=[], body=b""), lambda_context)
    assert response["statusCode"] == 503
    jsonschema.validate(json.loads(response["body"]), _documented("get", "/healthz", 503))
    assert json.loads(response["body"])["ok"] is False


def test_an_unavailable_idempotency_store_answers_the_documented_503(
        compact_module: Any, lambda_context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonschema
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError

    from compactor.http_api import rest_proxy_event
    from compactor_aws import billing
    from compactor_aws.routes.common import BILLED_ROUTES

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise IdempotencyPersistenceLayerError("the table is unreachable")

    monkeypatch.setattr(billing, "idempotency_run", unavailable)
    for method, path in sorted(BILLED_ROUTES):
        event = rest_proxy_event(method=method.upper(), resource_path=path, query={},
                                 body=b'{"messages":[],"flow_ir":["flow",{}],"handles":["cmp_0"]}',
                                 headers=[("Idempotency-Key", "k"), ("Content-Type", "application/json")])
        response = compact_module.handler(event, lambda_context)
        assert response["statusCode"] == 503, (path, response["body"])
        assert json.loads(response["body"])["error"]["code"] == "idempotency_unavailable"
        jsonschema.validate(json.loads(response["body"]), _documented(method, path, 503))


def test_every_status_a_flow_failure_maps_to_is_documented_on_flows() -> None:
    import jsonschema

    from compactor.errors import RouterError

    for status in {*RouterError._STATUS_BY_KIND.values(), RouterError.status_of("anything else")}:
        body = RouterError("the flow failed", kind="k").body()
        jsonschema.validate(body, _documented("post", "/flows", status))


def test_each_flow_error_kind_is_named_under_its_status_on_flows() -> None:
    # data_error's 422 and bad_request's 400 were answered but documented nowhere on /flows (the 422 said
    # schema validation and the Idempotency-Key only)
    from compactor.errors import RouterError

    doc = json.loads(DOC_PATH.read_text(encoding="utf-8"))
    responses = doc["paths"]["/flows"]["post"]["responses"]
    for kind, status in RouterError._STATUS_BY_KIND.items():
        assert f"`{kind}`" in responses[str(status)]["description"], (kind, status)
    assert "invalid policy or flow" in responses["400"]["description"]  # the admission's 400 is still there
    assert "idempotency_key_reused" in responses["422"]["description"]


def test_every_route_documents_the_stages_throttling() -> None:
    import jsonschema

    paths = json.loads(DOC_PATH.read_text(encoding="utf-8"))["paths"]
    for path, operations in paths.items():
        for method in operations:
            jsonschema.validate({"message": "Too Many Requests"}, _documented(method, path, 429))


def test_every_route_documents_the_400_of_two_different_keys() -> None:
    """Deployed (the authorizer's deny) and in compactor serve, any route answers it (docs/billing.md#bearer-keys)."""
    import jsonschema

    from compactor.errors import AmbiguousApiKey

    paths = json.loads(DOC_PATH.read_text(encoding="utf-8"))["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert "`ambiguous_api_key`" in operation["responses"]["400"]["description"], (method, path)
            jsonschema.validate(AmbiguousApiKey().body(), _documented(method, path, 400))


def test_a_usage_answer_is_documented_field_by_field(compact_module: Any, lambda_context: Any) -> None:
    import dataclasses

    import jsonschema

    from compactor.billing import DayTotals
    from compactor.http_api import rest_proxy_event

    body = b'{"messages":[{"role":"user","content":"hi"}],"mode":"mask"}'
    compact_module.handler(rest_proxy_event(method="POST", resource_path="/compact", query={}, headers=[],
                                            body=body), lambda_context)
    response = compact_module.handler(rest_proxy_event(method="GET", resource_path="/usage", query={}, headers=[],
                                                       body=b""), lambda_context)
    answer = json.loads(response["body"])
    assert response["statusCode"] == 200 and len(answer["days"]) == 1
    schema = _documented("get", "/usage", 200)
    jsonschema.validate(answer, schema)
    day = schema["components"]["schemas"]["UsageDay"]
    fields = [field.name for field in dataclasses.fields(DayTotals)]
    assert list(answer["days"][0]) == fields
    assert sorted(day["properties"]) == sorted(day["required"]) == sorted(fields)


def test_the_decision_report_names_every_field_a_decision_answer_holds(url: str) -> None:
    # The document's Compaction model listed neither `limits` (in every decision answer), `fragments_omitted` nor
    # `fallbacks` (when the manifest is bounded, or a model call fell back): extra fields are allowed, so answers
    # validated, but a client generated from the document dropped them.
    body, _ = _ANSWERS["decision-responses"]
    response = httpx.post(f"{url}/compact", json=body, headers={"x-api-key": API_KEY}, timeout=60)
    assert response.status_code == 200, response.text
    documented = json.loads(DOC_PATH.read_text(encoding="utf-8"))["components"]["schemas"]["Compaction"]["properties"]
    assert set(response.json()["compaction"]) <= set(documented)
    assert {"limits", "fragments_omitted", "fallbacks"} <= set(documented)
    assert set(response.json()["compaction"]["limits"]) <= set(
        json.loads(DOC_PATH.read_text(encoding="utf-8"))["components"]["schemas"]["Limits"]["properties"])
