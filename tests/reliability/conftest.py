"""Shared helpers of the reliability suite: the real CompactFunction handler over the bundled (offline)
catalog, and the invariants every answer must keep whatever the request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from compactor.catalog import reset_catalog_cache
from compactor.container import reset_router
from compactor.http_api import rest_proxy_event
from compactor_cli.lambda_runtime import LocalLambdaContext

RESPONSE_OVERHEAD_BYTES = 128 * 1024
"""How much larger than its request an answer may be (manifest, traces, error text): docs/reliability.md."""


@pytest.fixture
def bundled_catalog(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The bundled catalog (built-in offline offers) and a fresh router, restored afterwards."""
    monkeypatch.delenv("COMPACTOR_CATALOG", raising=False)
    monkeypatch.setenv("COMPACTOR_FLOW_BUDGET_MS", "20000")
    reset_catalog_cache()
    reset_router()
    yield
    reset_catalog_cache()
    reset_router()


def post(module: ModuleType, route: str, body: bytes) -> tuple[int, str]:
    """POST ``body`` to ``/v1/<route>`` through the handler, as API Gateway delivers it."""
    event = rest_proxy_event(method="POST", resource_path=f"/{route}", query={},
                             headers=[("content-type", "application/json")], body=body)
    response = module.handler(event, LocalLambdaContext("CompactFunction", timeout_s=60))
    return int(response["statusCode"]), response["body"]


def assert_well_answered(status: int, text: str, request: bytes) -> Any:
    """No 5xx, a clear message on every 4xx, and an answer bounded by the request's size."""
    assert status < 500, text[:500]
    assert len(text.encode("utf-8")) <= len(request) + RESPONSE_OVERHEAD_BYTES
    body = json.loads(text)
    if status >= 400:
        if "detail" in body:
            assert body["detail"] and all(isinstance(item["msg"], str) and item["msg"] for item in body["detail"])
            assert len(body["detail"]) <= 20
        else:
            assert isinstance(body["error"]["message"], str) and body["error"]["message"].strip()
    return body
