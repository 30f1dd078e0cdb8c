"""``POST /v1/flows`` and ``/v1/flows/normalize`` over real HTTP (``compactor serve``) against the fake
decision and chat provider: the ticket-triage flow end to end, and admission errors before any call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from compactor.catalog import reset_catalog_cache
from compactor_cli import serve
from compactor.container import reset_router
from fakes.provider_server import FakeProviderServer

from ..unit.flow.test_real_router import respond
from ..unit.flow.triage import FLOW_INPUT, triage_flow
from fakes.local_serve import REPO, running

KEY_ENV = "COMPACTOR_FLOWS_HTTP_KEY"
SECRET = "sk-flows-http-secret-9999"


@pytest.fixture
def api(fake_provider: FakeProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    catalog = {"offers": [
        {"id": "fake/writer", "provider": "fake", "family": "fake-writer", "model": "fake-writer-1",
         "protocol": "chat", "transport": "openai", "base_url": fake_provider.base_url, "api_key_env": KEY_ENV,
         "price_in": 1.0, "price_out": 2.0, "supports_json_mode": True},
        {"id": "fake/decider", "provider": "fake", "family": "fake-decider", "model": "fake-decider-1",
         "protocol": "decisions", "transport": "decisions", "base_url": fake_provider.base_url,
         "api_key_env": KEY_ENV, "price_in": 0.5, "price_out": 0.5},
    ], "policy_envelope": None}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    monkeypatch.setenv("COMPACTOR_CATALOG", str(path))
    monkeypatch.setenv(KEY_ENV, SECRET)
    reset_catalog_cache()
    reset_router()
    fake_provider.responder = respond
    with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact")) as url:
        yield url
    reset_catalog_cache()
    reset_router()


def test_triage_flow_runs_through_v1_flows(api: str, fake_provider: FakeProviderServer) -> None:
    response = httpx.post(f"{api}/flows", json={"flow_ir": triage_flow(), "flow_input": FLOW_INPUT}, timeout=30)

    assert response.status_code == 200
    body = response.json()
    assert body["output"] == {"t1": "Facilities notified.", "t2": "Reset link sent."}
    assert body["x_router"]["provider"] == "flow"
    assert body["x_router"]["cost_basis"] == "reported"
    assert body["x_router"]["cost_usd"] == pytest.approx(0.00012)
    assert body["usage"]["prompt_tokens"] >= 120
    assert [r.path.rsplit("/", 1)[-1] for r in fake_provider.requests] == ["decisions", "completions"]
    assert SECRET not in response.text
    assert fake_provider.requests[0].headers.get("authorization") == f"Bearer {SECRET}"


def test_normalize_gives_the_canonical_identity_without_calls(api: str, fake_provider: FakeProviderServer) -> None:
    first = httpx.post(f"{api}/flows/normalize", json={"flow_ir": triage_flow()}).json()

    assert first["version"] == "sigma-flow/v1"
    assert first["encoded"].startswith("sigma-flow/v1:((input n0)")
    renamed = json.loads(json.dumps(triage_flow()).replace('"classify"', '"triage_step"'))
    assert httpx.post(f"{api}/flows/normalize", json={"flow_ir": renamed}).json()["fingerprint"] == first["fingerprint"]
    assert fake_provider.requests == []


@pytest.mark.parametrize("flow_ir", [
    ["flow", {}],
    ["flow", {"input": {"kind": "input"}, "output": {"kind": "output", "inputs": ["missing"]}}],
    ["flow", {"input": {"kind": "input"}, "x": {"kind": "llm", "inputs": ["input"], "system": "s",
                                                "policy": ["zero"]}, "output": {"kind": "output", "inputs": ["x"]}}],
])
def test_malformed_flows_are_400_invalid_flow_before_any_call(api: str, fake_provider: FakeProviderServer,
                                                              flow_ir: list) -> None:
    response = httpx.post(f"{api}/flows", json={"flow_ir": flow_ir, "flow_input": FLOW_INPUT})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_flow" and error["type"] == "invalid_request_error"
    assert error["message"].startswith("flow_ir rejected at admission: ")
    assert fake_provider.requests == []
