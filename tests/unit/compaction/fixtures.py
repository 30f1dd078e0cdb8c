"""Transcripts used by the compaction tests (fixture T: docs/behaviour.md#worked-example-fixture-t)."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def fixture_t() -> list[dict]:
    return ([{"role": "system", "content": "Keep instructions."}, {"role": "user", "content": "Complete the task."}]
            + [{"role": "assistant", "content": f"fact_{i} " + "x" * 1800} for i in range(10)]
            + [{"role": "assistant", "content": "Current state."}])


def tool_unit(call_id: str, command: str, output: str) -> list[dict]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def corpus_messages(name: str) -> list[dict]:
    return json.loads((CORPUS / name).read_text(encoding="utf-8"))


CORPUS_FILES = sorted(p.name for p in CORPUS.glob("*.json"))
