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
