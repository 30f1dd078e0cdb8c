"""Independent checks that items are valid in their format (written from the APIs' documented rules,
not from ``compactor.formats``): every result answers a call made earlier, and no call made in an item
that precedes its results lost them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
CLAUDE_CODE = CORPUS / "anthropic-messages" / "claude-code-2.1.179_claude-opus-4-8_git-sync_omitted-thinking.jsonl"
CODEX = CORPUS / "openai-responses" / "codex-desktop-0.133.0_gpt-5.5_entire-graph_resumed.jsonl"
CHAT = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"


def anthropic_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems, called = [], set()
    for index, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            problems.append(f"{index}: role {message.get('role')!r}")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            problems.append(f"{index}: content is {type(content).__name__}")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                called.add(block["id"])
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                problems.append(f"{index}: tool_result {block.get('tool_use_id')} answers no earlier tool_use")
    return problems


def responses_problems(items: list[dict[str, Any]]) -> list[str]:
    problems, called = [], set()
    for index, item in enumerate(items):
        kind = item.get("type", "message" if "role" in item else None)
        if kind is None:
            problems.append(f"{index}: no type")
        elif kind.endswith("_call_output"):
            if item.get("call_id") not in called:
                problems.append(f"{index}: {kind} {item.get('call_id')} answers no earlier call")
        elif kind.endswith("_call") and "call_id" in item:
            called.add(item["call_id"])
        elif kind == "message" and not isinstance(item.get("content"), (str, list)):
            problems.append(f"{index}: message content")
    return problems


def chat_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems, called = [], set()
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            called.add(call.get("id"))
        if message.get("role") == "tool" and message.get("tool_call_id") not in called:
            problems.append(f"{index}: tool message answers no earlier call")
    return problems


PROBLEMS = {"openai-chat": chat_problems, "anthropic-messages": anthropic_problems,
            "openai-responses": responses_problems}


def claude_code_messages(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["message"] for r in records if r.get("type") in ("user", "assistant") and isinstance(r.get("message"), dict)]


def codex_items(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["payload"] for r in records if r.get("type") == "response_item"]


def cdump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
