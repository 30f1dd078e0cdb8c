"""The OpenAPI document names ``Retry-After`` on every answer that carries it (docs/behaviour.md#retry-after), and on
no answer that a retry does not change."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compactor.errors import RETRY_AFTER
from compactor_aws.routes.common import BILLED_ROUTES
from compactor_cli.openapi_doc import current_document


@pytest.fixture(scope="module")
def paths() -> dict[str, Any]:
    return json.loads(current_document())["paths"]


def documents_retry_after(paths: dict[str, Any], method: str, path: str, status: str) -> bool:
    return RETRY_AFTER in paths[path][method]["responses"][status].get("headers", {})


def test_the_answers_that_ask_to_retry_later_document_when(paths: dict[str, Any]) -> None:
    # The document named no header on any of them: a client generated from it could not read the wait.
    every_429 = [(method, path, "429") for path, operations in paths.items() for method in operations]
    billed = [(method, path, status) for method, path in BILLED_ROUTES for status in ("409", "503")]
    router_errors = [("post", "/flows", status) for status in ("429", "502", "503", "504")]

    for method, path, status in every_429 + billed + router_errors:
        assert documents_retry_after(paths, method, path, status), (method, path, status)
    header = paths["/compact"]["post"]["responses"]["409"]["headers"][RETRY_AFTER]
    assert header["schema"] == {"type": "integer", "minimum": 1}


@pytest.mark.parametrize(("method", "path", "status"), [
    ("get", "/healthz", "503"),  # the catalog does not load: a retry meets it until the deployment changes
    ("post", "/uploads", "503"),  # no jobs bucket configured
    ("post", "/flows", "401"), ("post", "/flows", "422"), ("post", "/compact", "422"),
])
def test_answers_a_retry_does_not_change_document_no_wait(paths: dict[str, Any], method: str, path: str,
                                                          status: str) -> None:
    assert not documents_retry_after(paths, method, path, status)
