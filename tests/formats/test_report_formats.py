"""The decision report's byte parts in every format (docs/offline-offers.md "Targets")."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event, decision_policy
from .test_api_formats import CASES
from .validity import cdump


def _size(value: Any) -> int:
    return len(cdump(value).encode())


@pytest.mark.parametrize("fmt", list(CASES))
@pytest.mark.parametrize("restorable", [False, True])
def test_summaries_bytes_are_the_items_written_in_every_format(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str, restorable: bool) -> None:
    field, load = CASES[fmt]
    items = load()
    response = compact_module.handler(api_event("/compact", {
        "format": fmt, field: items, "decision_policy_ir": decision_policy(), "restorable": restorable}),
        lambda_context)
    body = json.loads(response["body"])

    assert response["statusCode"] == 200, body
    originals = {cdump(m) for m in items}
    written = [m for m in body[field] if cdump(m) not in originals]
    limits, report = body["compaction"]["limits"], body["compaction"]
    assert written and limits["summaries_bytes"] == sum(_size(m) + 1 for m in written)
    parts = sum(limits[f"{name}_bytes"] for name in ("pins", "tail", "kept_units", "summaries"))
    assert parts == report["output_bytes"] - 1  # each item with its comma, no brackets
