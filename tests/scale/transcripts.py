"""Large transcripts built from the corpus (tests and ``make bench``): sessions of the tool-call
transcripts one after another, each repetition made distinct (its own working directory, call ids
and wording), so no repetition merely re-runs an earlier one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
SOURCES = sorted(CORPUS.glob("msa-v2-toolcalls_*.json"))


def _messages(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, list) else data["messages"]


def _distinct(message: dict[str, Any], rep: int) -> dict[str, Any]:
    text = json.dumps(message, ensure_ascii=False).replace("/testbed", f"/work/s{rep}/testbed")
    out = json.loads(text)
    if out.get("role") == "assistant" and isinstance(out.get("content"), str):
        out["content"] = f"[session {rep}] {out['content']}"
    for call in out.get("tool_calls") or []:
        if isinstance(call, dict) and call.get("id"):
            call["id"] = f"{call['id']}-s{rep}"
    if out.get("role") == "tool" and out.get("tool_call_id"):
        out["tool_call_id"] = f"{out['tool_call_id']}-s{rep}"
    return out


def messages(target_bytes: int) -> Iterator[dict[str, Any]]:
    """Corpus sessions, one after another, until about ``target_bytes`` of dense JSON."""
    sources = [_messages(path) for path in SOURCES]
    written, rep = 0, 0
    while written < target_bytes:
        for message in sources[rep % len(sources)]:
            out = _distinct(message, rep)
            written += len(json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode("utf-8")) + 1
            yield out
        rep += 1


def write(stream: TextIO, target_bytes: int) -> int:
    """Writes a JSON array of :func:`messages` (one per line); the number of messages."""
    count = 0
    stream.write("[")
    for message in messages(target_bytes):
        stream.write(("\n" if count == 0 else ",\n") + json.dumps(message, separators=(",", ":"), ensure_ascii=False))
        count += 1
    stream.write("\n]\n")
    return count


ANTHROPIC_SOURCE = CORPUS / "anthropic-messages" / "claude-code-2.1.179_claude-opus-4-8_git-sync_omitted-thinking.jsonl"


def _distinct_anthropic(message: dict[str, Any], rep: int) -> dict[str, Any]:
    """``message`` of repetition ``rep``: its call ids, response ``id`` and text its own."""
    out = json.loads(json.dumps(message, ensure_ascii=False))
    if isinstance(out.get("id"), str):
        out["id"] = f"{out['id']}-s{rep}"
    content = out.get("content")
    if isinstance(content, str):
        out["content"] = f"[session {rep}] {content}"
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("tool_use", "server_tool_use") and isinstance(block.get("id"), str):
            block["id"] = f"{block['id']}-s{rep}"
        if isinstance(block.get("tool_use_id"), str):
            block["tool_use_id"] = f"{block['tool_use_id']}-s{rep}"
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            block["text"] = f"[session {rep}] {block['text']}"
    return out


def anthropic_messages(target_bytes: int) -> Iterator[dict[str, Any]]:
    """The corpus's Claude Code session's messages (``anthropic-messages``), one repetition after another, until
    about ``target_bytes`` of dense JSON."""
    from compactor.transcripts import read_transcript

    source = read_transcript(ANTHROPIC_SOURCE.read_text(encoding="utf-8")).items
    written, rep = 0, 0
    while written < target_bytes:
        for message in source:
            out = _distinct_anthropic(message, rep)
            written += len(json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode("utf-8")) + 1
            yield out
        rep += 1
