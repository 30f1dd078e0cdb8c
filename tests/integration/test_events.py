"""The sample events in tests/events/ run end to end through the real CompactFunction handler and the
bundled offline offers (what `compactor invoke CompactFunction -e …` does)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext

EVENTS = Path(__file__).resolve().parents[1] / "events"


@pytest.mark.parametrize("name, marker, head", [
    ("compact-legacy", "[Earlier conversation, sealed summary]\n", 1),  # the system prompt is frozen
    ("compact-decision", "[Summary of fragment_4; original retained by caller]\n", 2),  # and the pinned task
])
def test_compact_events_compact_with_the_bundled_offers(compact_module: ModuleType, lambda_context: LocalLambdaContext,
                                                        name: str, marker: str, head: int) -> None:
    event = json.loads((EVENTS / f"{name}.json").read_text())
    request = json.loads(event["body"])

    response = compact_module.handler(event, lambda_context)

    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert body["compacted"] is True
    assert any(str(m.get("content", "")).startswith(marker) for m in body["messages"])
    assert body["messages"][:head] == request["messages"][:head]
    assert body["messages"][-2:] == request["messages"][-2:]  # recent tail untouched
    assert len(json.dumps(body["messages"])) < len(json.dumps(request["messages"]))
