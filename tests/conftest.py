"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext, load_handler
from fakes.provider_server import FakeProviderServer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bundled_catalog(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The bundled offline offers, whatever an earlier test configured (the cached catalog and router
    are dropped before and after)."""
    from compactor.catalog import reset_catalog_cache
    from compactor.container import reset_router

    monkeypatch.delenv("COMPACTOR_CATALOG", raising=False)
    reset_catalog_cache()
    reset_router()
    yield
    reset_catalog_cache()
    reset_router()


@pytest.fixture
def unloadable_catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A configured catalog that does not load (its file is not JSON), the cached catalog and router dropped
    before and after."""
    from compactor.catalog import reset_catalog_cache
    from compactor.container import reset_router

    broken = tmp_path / "catalog.json"
    broken.write_text("{not json")
    monkeypatch.setenv("COMPACTOR_CATALOG", str(broken))
    reset_catalog_cache()
    reset_router()
    yield
    reset_catalog_cache()
    reset_router()


@pytest.fixture(autouse=True)
def fresh_billing_state() -> Iterator[None]:
    """Every test starts with empty local idempotency records and ledger (docs/billing.md): an S3 job or
    a keyed request of one test is never replayed in another."""
    from compactor_aws import billing

    billing.reset_backends()
    yield
    billing.reset_backends()


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test leaves the process environment as it found it: the CLI run in-process sets
    ``COMPACTOR_CATALOG`` for ``--catalog``, which would otherwise reach every later test. When the
    catalog changed, the cached catalog and router built from it are dropped too."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        catalog_changed = os.environ.get("COMPACTOR_CATALOG") != saved.get("COMPACTOR_CATALOG")
        os.environ.clear()
        os.environ.update(saved)
        if catalog_changed:
            from compactor.catalog import reset_catalog_cache
            from compactor.container import reset_router

            reset_catalog_cache()
            reset_router()


@pytest.fixture
def batches_of_eight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decision batches of at most 8 fragments, as before they could grow to 16 (docs/performance.md
    "Fewer, larger batches"): for tests whose transcripts are built to make several batches."""
    from compactor.compaction import preparation

    monkeypatch.setattr(preparation, "MAX_PER_BATCH", 8)


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The functions sent to a worker thread through ``asyncio.to_thread`` while the test runs, in order (they
    still run there)."""
    import asyncio

    sent: list[object] = []
    to_thread = asyncio.to_thread

    async def counted(function: object, /, *args: object, **kwargs: object) -> object:
        sent.append(function)
        return await to_thread(function, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncio, "to_thread", counted)
    return sent


@pytest.fixture
def fake_provider() -> Iterator[FakeProviderServer]:
    """A running fake OpenAI-compatible / native-decisions provider on 127.0.0.1.

    Point offers at ``fake_provider.base_url``; script answers with ``enqueue(Reply(...))`` or
    ``responder``; assert on ``fake_provider.requests``. See ``tests/fakes/provider_server.py``.
    """
    with FakeProviderServer() as server:
        yield server


@pytest.fixture(scope="session")
def compact_module() -> ModuleType:
    """``functions/compact/compact.py`` imported as module ``compact``, as Lambda imports it."""
    load_handler(REPO / "functions" / "compact", "compact.handler")
    return sys.modules["compact"]


@pytest.fixture
def lambda_context() -> LocalLambdaContext:
    """A Lambda-like context with CompactFunction's 60 s timeout."""
    return LocalLambdaContext("CompactFunction", timeout_s=60)
