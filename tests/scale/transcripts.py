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
