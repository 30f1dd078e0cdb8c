"""Reading transcripts (``compactor compact``, the S3 path): JSON arrays, request bodies, trajectories
and JSONL, and the ``/v1/compact`` request body they stand for (see docs/behaviour.md, "Compaction modes")."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.jsonutil import JSONLimitError, bounded_loads
from compactor.models import COMPACT_FIELDS as REQUEST_FIELDS  # the fields a transcript file may carry

TRANSCRIPT_MODE = "decision"
"""The mode of a bare transcript (array or JSONL: no request fields to infer one from) unless told."""


class TranscriptError(ValueError):
    """The input is not a transcript this command understands (the message says why)."""


@dataclass(frozen=True)
class Transcript:
    """The messages, the other request fields, and whether the text was a request body (an object with
    ``messages``) rather than a bare transcript."""

    messages: list[dict[str, Any]]
    fields: dict[str, Any] = field(default_factory=dict)
    request_body: bool = False

    def compact_body(self, defaults: Mapping[str, Any] | None = None, *, mode: str | None = None) -> dict[str, Any]:
        """The ``/v1/compact`` body: ``defaults`` under the transcript's own fields, ``mode`` over both.
        Without a mode, a request body is inferred exactly as the API infers it; a bare transcript runs
        in :data:`TRANSCRIPT_MODE`."""
        body = {**(defaults or {}), **self.fields, "messages": self.messages}
        if mode is not None:
            body["mode"] = mode
        elif body.get("mode") is None and not self.request_body:
            body["mode"] = TRANSCRIPT_MODE
        return body


def parse_transcript(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(messages, request_fields)``: request fields are the other keys of a ``/v1/compact`` body."""
    transcript = read_transcript(text)
    return transcript.messages, transcript.fields


def read_transcript(text: str) -> Transcript:
    """The :class:`Transcript` in ``text`` (:class:`TranscriptError` when there is none)."""
    stripped = text.strip()
    if not stripped:
        raise TranscriptError("the input is empty")
    try:
        data = bounded_loads(stripped)
    except JSONLimitError as exc:
        if not exc.syntax:
            raise TranscriptError(exc.msg) from None
        return Transcript(_parse_jsonl(stripped))
    if isinstance(data, list):
        return Transcript(_check_messages(data))
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        # Agent trajectory files carry run metadata next to the messages: keep only request fields.
        fields = {k: v for k, v in data.items() if k in REQUEST_FIELDS}
        return Transcript(_check_messages(data["messages"]), fields, request_body=True)
    raise TranscriptError("expected a JSON array of messages, an object with a 'messages' array, or JSONL")


def _parse_jsonl(text: str) -> list[dict[str, Any]]:
    return _check_messages(list(jsonl_messages(text.splitlines())))


def jsonl_messages(lines: Iterable[str] | Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The OpenAI messages of JSONL lines (blank lines skipped; Claude Code records converted)."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = bounded_loads(line)
        except JSONLimitError as exc:
            raise TranscriptError(f"line {number} is not JSON: {exc.msg}") from None
        yield from _jsonl_record_messages(record, number)


def _jsonl_record_messages(record: Any, number: int) -> list[dict[str, Any]]:
    """An OpenAI message, or a Claude Code session record converted to OpenAI messages."""
    if isinstance(record, dict) and "role" in record:
        return [record]
    if isinstance(record, dict) and record.get("type") in ("user", "assistant") and isinstance(
            record.get("message"), dict):
        return _anthropic_to_openai(record["message"])
    if isinstance(record, dict) and "type" in record:
        return []  # session bookkeeping (queue operations, summaries)
    raise TranscriptError(f"line {number} is not a chat message")


def _anthropic_to_openai(message: dict[str, Any]) -> list[dict[str, Any]]:
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": content}]
    texts, calls, results = [], [], []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input"))}})
        elif kind == "tool_result":
            body = block.get("content")
            if isinstance(body, list):
                body = "\n".join(b.get("text", "") for b in body if isinstance(b, dict))
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": body})
    out: list[dict[str, Any]] = []
    if texts or calls:
        msg: dict[str, Any] = {"role": role, "content": "\n".join(texts) if texts else None}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    out.extend(results)
    return out


def _check_messages(messages: list[Any]) -> list[dict[str, Any]]:
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TranscriptError(f"message {index} is not a JSON object")
    return messages
