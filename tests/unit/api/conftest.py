"""Fixtures for the CompactFunction handler: the module, API Gateway events, a stubbed core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compactor import service
from compactor.call_record import CallRecord

REPO = Path(__file__).resolve().parents[3]


class StubService:
    """Records what the handler passes to the core and answers with ``answer`` (or raises ``error``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []
        self.answer: tuple[int, dict[str, Any]] = (200, {"stub": True})
        self.error: Exception | None = None

    def _record(self, route: str, payload: Any, **kwargs: Any) -> CallRecord:
        self.calls.append((route, payload, kwargs))
        if self.error is not None:
            raise self.error
        status, body = self.answer
        return CallRecord(status=status, body=body, mode="stub", route=route)

    def handle_compact(self, request: Any, **kwargs: Any) -> CallRecord:
        return self._record("compact", request, **kwargs)

    def handle_flows(self, body: dict[str, Any], **kwargs: Any) -> CallRecord:
        return self._record("flows", body, **kwargs)

    def handle_flows_normalize(self, body: dict[str, Any]) -> CallRecord:
        return self._record("normalize", body)

    def handle_expand(self, handles: list[str], **kwargs: Any) -> tuple[int, dict[str, Any]]:
        return self._record("expand", handles, **kwargs)


@pytest.fixture
def stub_service(monkeypatch: pytest.MonkeyPatch) -> StubService:
    """Replace the core entry points: these tests are about the adapter, not compaction."""
    stub = StubService()
    for name in ("handle_compact", "handle_flows", "handle_flows_normalize", "handle_expand"):
        monkeypatch.setattr(service, name, getattr(stub, name))
    return stub
