"""Fixtures of the format and archive tests: a private archive directory, API events per caller."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactor.compaction.preset import load_preset
from compactor.http_api import rest_proxy_event


@pytest.fixture(autouse=True)
def bundled_offers(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The bundled offline offers, whatever router an earlier test left cached."""
    from compactor.container import reset_router

    monkeypatch.delenv("COMPACTOR_CATALOG", raising=False)
    reset_router()
    yield
    reset_router()


@pytest.fixture(autouse=True)
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Originals go to a fresh directory, never to S3 (no archive bucket) nor to ``~``."""
    monkeypatch.setenv("COMPACTOR_ARCHIVE_DIR", str(tmp_path / "archives"))
    monkeypatch.delenv("COMPACTOR_ARCHIVE_BUCKET", raising=False)
    return tmp_path / "archives"


def decision_policy() -> Any:
    return load_preset()["flow"][1]["classify"]["policy"]


def api_event(path: str, body: Any, key_id: str | None = "key-a") -> dict[str, Any]:
    """A REST proxy event; deployed, API Gateway sets the API key id of the request."""
    event = rest_proxy_event(method="POST", resource_path=path, query={},
                             headers=[("Content-Type", "application/json")], body=json.dumps(body).encode())
    if key_id is not None:
        event["requestContext"]["identity"]["apiKeyId"] = key_id
    return event


from tests.s3.conftest import aws_env, s3, s3_module  # noqa: E402,F401 (moto S3 and the S3 handler)


@pytest.fixture
def s3_context() -> Any:
    from compactor_cli.lambda_runtime import LocalLambdaContext

    return LocalLambdaContext("S3CompactFunction", timeout_s=300)
