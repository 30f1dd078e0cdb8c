"""A caller's hostile transcript within the documented limits (docs/reliability.md): no 500, nothing lost."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from .conftest import assert_well_answered, post

FILLER = "The agent ran the test suite again; two tests still fail in test_config.py. " * 40


def _with_arguments(arguments: str, calls: int = 12) -> list[dict[str, Any]]:
    middle = [message for i in range(calls) for message in (
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": FILLER})]
    return [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the tests."},
            *middle, {"role": "user", "content": "go on"}, {"role": "assistant", "content": "done"}]


@pytest.mark.usefixtures("bundled_catalog")
@pytest.mark.parametrize("depth", [300, 10_000])
@pytest.mark.parametrize("mode", ["decision", "mask", "seal"])
def test_tool_arguments_nested_deeper_than_a_request_may_be_are_text(compact_module: ModuleType, depth: int,
                                                                     mode: str) -> None:
    # The request's depth check (128) sees a call's arguments as one string; the names scan and the
    # built-in decider parsed it, and 10,000 '[' raised RecursionError: a 500 for a valid request.
    arguments = "[" * depth + "]" * depth
    messages = _with_arguments(arguments)
    raw = json.dumps({"messages": messages, "mode": mode, "target_ratio": 0.2}).encode()
    status, text = post(compact_module, "compact", raw)
    body = assert_well_answered(status, text, raw)
    assert status == 200
    kept = [m for m in body["messages"] if m.get("tool_calls")]
    assert all(m["tool_calls"][0]["function"]["arguments"] == arguments for m in kept)
