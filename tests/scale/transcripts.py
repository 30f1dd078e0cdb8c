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


# -- small random transcripts of every shape the units depend on --------------------------------------------------


def _late_pick(rng: Any, opened: list[str]) -> str:
    """One of the calls made so far: often a recent one, often an early one (answered late)."""
    return rng.choice(opened[-3:]) if rng.random() < 0.5 else opened[min(len(opened) - 1, int(rng.random() ** 2
                                                                                              * len(opened)))]


def random_anthropic(rng: Any, length: int = 60) -> list[dict[str, Any]]:
    """Anthropic messages of up to ``length`` + 1: calls answered at once, late (past other calls and human turns),
    twice or never, parallel calls, results of no call, ids reused, thinking-only messages, responses stored as
    several messages (one ``id``), text beside results."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    opened: list[str] = []
    for _ in range(rng.randint(0, length)):
        draw = rng.random()
        if draw < 0.12:
            items.append({"role": "user", "content": rng.choice(["and", [{"type": "text", "text": "so"}]])})
        elif draw < 0.45:
            content: list[dict[str, Any]] = []
            if rng.random() < 0.2:
                content.append({"type": "thinking", "thinking": "t", "signature": "s"})
            for _ in range(rng.choice([0, 1, 1, 2, 3])):
                opened.append(f"toolu_{rng.randrange(40)}")
                content.append({"type": "tool_use", "id": opened[-1], "name": "bash", "input": {}})
            if rng.random() < 0.6 or not content:
                content.append({"type": "text", "text": "ok"})
            message = {"role": "assistant", "content": content}
            if rng.random() < 0.3:
                message["id"] = rng.choice(["msg_1", "msg_2", "msg_3"])
            items.append(message)
        elif draw < 0.5:
            items.append({"role": "assistant", "content": [{"type": "thinking", "thinking": "z", "signature": "s"}]})
        else:
            content = [{"type": "tool_result", "content": "out", "tool_use_id": _late_pick(rng, opened)
                        if opened and rng.random() < 0.9 else f"toolu_{rng.randrange(40, 50)}"}
                       for _ in range(rng.choice([1, 1, 2]))]
            if rng.random() < 0.1:
                content.append({"type": "text", "text": "also"})
            items.append({"role": "user", "content": content})
    return items


def random_chat(rng: Any, length: int = 60) -> list[dict[str, Any]]:
    """OpenAI chat messages of up to ``length`` + 1: calls answered at once, late (after other messages), twice or
    never, parallel calls, results of no call, legacy ``function_call`` turns and their ``function`` messages, text
    agents' observations."""
    items: list[dict[str, Any]] = [{"role": "system", "content": "be terse"}]
    opened: list[str] = []
    for _ in range(rng.randint(0, length)):
        draw = rng.random()
        if draw < 0.12:
            items.append({"role": "user", "content": rng.choice(["go on", "<returncode>0</returncode>"])})
        elif draw < 0.4:
            calls = []
            for _ in range(rng.choice([1, 1, 2, 3])):
                opened.append(f"call_{rng.randrange(40)}")
                calls.append({"id": opened[-1], "type": "function", "function": {"name": "bash", "arguments": "{}"}})
            items.append({"role": "assistant", "content": None, "tool_calls": calls})
        elif draw < 0.45:
            items.append({"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": "{}"}})
        elif draw < 0.5:
            items.append({"role": "function", "name": "bash", "content": "legacy out"})
        elif draw < 0.65:
            items.append({"role": "assistant", "content": "thinking aloud"})
        else:
            call = _late_pick(rng, opened) if opened and rng.random() < 0.9 else f"call_{rng.randrange(40, 50)}"
            items.append({"role": "tool", "tool_call_id": call, "content": "out"})
    return items
