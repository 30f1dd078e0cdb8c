"""Transcripts and expectations shared by the scenario tests (fixture T: docs/behaviour.md#worked-example-fixture-t)."""

from __future__ import annotations

import json
from typing import Any

SUMMARY_MARKER = "[Summary of {id}; original retained by caller]\n"


def size(value: Any) -> int:
    """The dense size (docs/behaviour.md#requests-and-responses): compact separators, non-ASCII raw, UTF-8 bytes."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def ascii_size(value: Any) -> int:
    """The ASCII wire size of a decision payload: default separators, non-ASCII escaped."""
    return len(json.dumps(value).encode("ascii"))


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def fixture_t() -> list[dict[str, Any]]:
    return ([{"role": "system", "content": "Keep instructions."}, {"role": "user", "content": "Complete the task."}]
            + [{"role": "assistant", "content": f"fact_{i} " + "x" * 1800} for i in range(10)]
            + [{"role": "assistant", "content": "Current state."}])


def summary(fragment_id: str, text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": SUMMARY_MARKER.format(id=fragment_id) + text}


def bulky(i: int, n: int = 1500) -> dict[str, Any]:
    return {"role": "assistant", "content": f"observation {i}: " + "y" * n}


def tool_unit(call_id: str, command: str, output: str, results: int = 1) -> list[dict[str, Any]]:
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}
    return [call] + [{"role": "tool", "tool_call_id": call_id, "content": f"{output} (part {k})"}
                     for k in range(results)]


def manifest(units: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Manifest entries from ``(start, end, action[, reason])``; the reason defaults to what a decision
    that was followed says (``summarized``, ``archived``, ``model_kept``); the fake decider gives no
    ``decider_reason``."""
    default = {"summarize": "summarized", "archive": "archived", "keep": "model_kept"}
    return [{"id": f"fragment_{unit[0]}", "start": unit[0], "end": unit[1], "action": unit[2],
             "reason": unit[3] if len(unit) > 3 else default[unit[2]]} for unit in units]


def flow_nodes(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["x_router"]["decision_trace"]["flow_nodes"]


def model_nodes(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [node for node in flow_nodes(body) if node["kind"] == kind]
