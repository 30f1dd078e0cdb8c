"""The issue's done-when scenario against ``compactor serve`` on 127.0.0.1, and ``compactor usage``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from compactor.catalog import reset_catalog_cache
from compactor.container import reset_router
from compactor_aws import billing
from compactor_aws.caller import local_key_id
from compactor_cli import serve
from compactor_cli.main import main
from fakes.provider_server import FakeProviderServer

from fakes.local_serve import REPO, running
from .conftest import USAGE_TABLE

KEY_ENV = "COMPACTOR_BILLING_TEST_KEY"
ALICE, BOB = "alice-secret-key", "bob-secret-key"
LONG = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Fix the parser."}] + [
    {"role": "assistant", "content": f"step {i}: " + "tried something " * 40} for i in range(10)]


@pytest.fixture(params=["local-file", "dynamodb"])
def ledger_args(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Where the server's ledger lives (a local file, or moto DynamoDB tables), as ``compactor usage`` options."""
    if request.param == "dynamodb":
        request.getfixturevalue("aws")
        return ["--table", USAGE_TABLE]
    monkeypatch.setenv("COMPACTOR_LEDGER_FILE", str(tmp_path / "ledger.jsonl"))
    return ["--ledger", str(tmp_path / "ledger.jsonl")]


@pytest.fixture
def api(fake_provider: FakeProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        ledger_args: list[str]) -> Iterator[str]:
    """serve with two accepted keys, the ledger of ``ledger_args`` and one chat offer at the fake provider."""
    catalog = {"offers": [
        {"id": "fake/writer", "provider": "fake", "family": "fake-writer", "model": "fake-writer-1",
         "protocol": "chat", "transport": "openai", "base_url": fake_provider.base_url, "api_key_env": KEY_ENV,
         "price_in": 1.0, "price_out": 2.0, "supports_json_mode": True}], "policy_envelope": None}
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    monkeypatch.setenv("COMPACTOR_CATALOG", str(tmp_path / "catalog.json"))
    monkeypatch.setenv(KEY_ENV, "sk-fake")
    reset_catalog_cache()
    reset_router()
    with running(serve.create_server(port=0, api_key=[ALICE, BOB], code_dir=REPO / "functions" / "compact")) as url:
        yield url
    reset_catalog_cache()
    reset_router()


def test_two_identical_posts_with_one_key_compact_once_and_bill_once(
        api: str, fake_provider: FakeProviderServer, ledger_args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    request = {"messages": LONG, "keep_recent": 2}
    headers = {"Authorization": f"Bearer {ALICE}", "Idempotency-Key": "order-42"}

    first = httpx.post(f"{api}/compact", json=request, headers=headers, timeout=30)
    upstream_after_first = len(fake_provider.requests)
    second = httpx.post(f"{api}/compact", json=request, headers=headers, timeout=30)

    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert upstream_after_first == 1 and len(fake_provider.requests) == 1  # one upstream compaction
    entries = [entry.as_dict() for entry in billing.backends().ledger.entries("2000-01-01", "2999-12-31")]
    assert len(entries) == 1 and entries[0]["api_key_id"] == local_key_id(ALICE)
    assert entries[0]["model_calls"] == 1 and entries[0]["idempotency_key"] == "order-42"

    alice = httpx.get(f"{api}/usage", headers={"x-api-key": ALICE}).json()
    bob = httpx.get(f"{api}/usage", headers={"x-api-key": BOB}).json()
    assert [day["calls"] for day in alice["days"]] == [1] and alice["days"][0]["model_calls"] == 1
    assert alice["days"][0]["bytes_saved"] == entries[0]["bytes_in"] - entries[0]["bytes_out"] > 0
    assert bob["days"] == [] and bob["api_key_id"] == local_key_id(BOB)

    capsys.readouterr()
    assert main(["usage", *ledger_args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report) == [local_key_id(ALICE)] and report[local_key_id(ALICE)][0]["calls"] == 1


def test_bearer_and_x_api_key_are_the_same_caller_and_a_wrong_bearer_is_403(api: str) -> None:
    assert httpx.get(f"{api}/usage", headers={"Authorization": "Bearer nope"}).status_code == 403
    by_header = httpx.get(f"{api}/usage", headers={"x-api-key": ALICE}).json()
    by_bearer = httpx.get(f"{api}/usage", headers={"Authorization": f"bearer {ALICE}"}).json()
    assert by_header["api_key_id"] == by_bearer["api_key_id"] == local_key_id(ALICE)
