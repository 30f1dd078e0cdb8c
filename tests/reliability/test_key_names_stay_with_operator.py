"""A provider key that cannot be had (variable unset, secret missing or denied) is answered to the caller in
generic words; the variable's and the secret's names reach only the operator: the log, the call record the
local tools read, and ``compactor doctor`` (docs/providers.md "Keys at run time")."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from compactor.catalog import reset_catalog_cache
from compactor.container import reset_router
from compactor.providers import keys
from compactor_cli import serve
from fakes.local_serve import REPO, running
from fakes.provider_server import FakeProviderServer

from ..unit.flow.triage import FLOW_INPUT, triage_flow

KEY_ENV = "OPERATOR_ONLY_KEY_VARIABLE"
SECRET_NAME = "operator-only/secret-name"
NAMES = (KEY_ENV, SECRET_NAME)


def _denied(name: str) -> str:
    raise PermissionError(f"AccessDeniedException on {name}")


@pytest.fixture(params=["variable", "secret"])
def api(request: pytest.FixtureRequest, fake_provider: FakeProviderServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """The URL and the name the operator reads: both offers' keys in an unset variable, or in a secret the
    function may not read."""
    key = {"api_key_env": KEY_ENV} if request.param == "variable" else {"api_key_secret": SECRET_NAME}
    common = {"base_url": fake_provider.base_url, "price_in": 1.0, "price_out": 2.0, **key}
    catalog = {"offers": [
        {**common, "id": "acme/writer", "provider": "acme", "family": "w", "model": "w-1", "protocol": "chat",
         "transport": "openai", "supports_json_mode": True},
        {**common, "id": "bolt/decider", "provider": "bolt", "family": "d", "model": "d-1",
         "protocol": "decisions", "transport": "decisions"},
    ], "policy_envelope": None}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    monkeypatch.setenv("COMPACTOR_CATALOG", str(path))
    monkeypatch.delenv(KEY_ENV, raising=False)
    previous = keys._secret_resolver, keys._cached_secret
    reset_catalog_cache()
    reset_router()
    with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact")) as url:
        keys.set_secret_resolver(_denied)
        try:
            yield url, KEY_ENV if request.param == "variable" else SECRET_NAME
        finally:
            keys.set_secret_resolver(*previous)
    reset_catalog_cache()
    reset_router()


def test_the_caller_reads_no_key_name_the_operator_reads_each(api: tuple[str, str], fake_provider: FakeProviderServer,
                                                               caplog: pytest.LogCaptureFixture,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    url, named = api
    caplog.set_level(logging.WARNING)
    flows = httpx.post(f"{url}/flows", json={"flow_ir": triage_flow(), "flow_input": FLOW_INPUT}, timeout=30)
    assert fake_provider.requests == []  # no key, no call
    assert "not configured" in flows.text and "contact the operator" in flows.text
    for name in NAMES:
        assert name.lower() not in flows.text.lower()
    assert named in caplog.text  # the operator's log names it
    # and so does the call record the local tools read (compactor serve prints its causes, as the CLI report does)
    assert f"model call fell back x1: {'' if named == KEY_ENV else 'API key secret '}{named}" in capsys.readouterr().err


def test_a_compaction_answer_names_no_key_either(api: tuple[str, str]) -> None:
    body = {"messages": [{"role": "user", "content": "Fix the failing test " * 200},
                         {"role": "assistant", "content": "Reading the test output. " * 200},
                         {"role": "user", "content": "Now the second one."}], "keep_recent": 1}
    answer = httpx.post(f"{api[0]}/compact", json=body, timeout=30)
    assert answer.status_code == 200
    assert "x_router" in answer.text
    for name in NAMES:
        assert name not in answer.text
