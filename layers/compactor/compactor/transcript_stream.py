"""Reading and writing transcripts as streams (docs/scale.md): no whole-file copy in memory.

The formats of :mod:`compactor.transcripts` (a JSON array of messages, an object with a ``messages``
array and request fields, JSONL of messages or Claude Code session records), read incrementally with
``ijson`` from any binary file-like object (a local file, an S3 body). Writing produces one message
per line inside a JSON array, which reads back with the same functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import IO, Any

import ijson

from compactor.jsonutil import dense_dumps
from compactor.transcripts import REQUEST_FIELDS, TranscriptError, jsonl_messages

PEEK_BYTES = 1 << 20
"""How far a first line is looked at to tell JSONL from one JSON document."""


class _Replay:
    """A binary reader that first returns ``head`` (bytes already read), then the rest of ``raw``."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        self.head, self.raw = head, raw

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size < 0 or size >= len(self.head):
                out, self.head = self.head, b""
                rest = self.raw.read(-1 if size < 0 else size - len(out))
                return out + (rest or b"")
            out, self.head = self.head[:size], self.head[size:]
            return out
        return self.raw.read(size)


def _sniff(raw: IO[bytes]) -> tuple[str, _Replay]:
    """``array``, ``object`` or ``jsonl``, and a reader positioned at the start."""
    head = raw.read(PEEK_BYTES)
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    stripped = head.lstrip()
    if not stripped:
        raise TranscriptError("the input is empty")
    if stripped[:1] == b"[":
        return "array", _Replay(head, raw)
    line, newline, rest = stripped.partition(b"\n")
    if newline and rest.strip():
        try:
            json.loads(line)
            return "jsonl", _Replay(head, raw)
        except ValueError:
            pass
    if stripped[:1] == b"{":
        return "object", _Replay(head, raw)
    return "jsonl", _Replay(head, raw)


def iter_messages(raw: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The messages of a transcript stream, one at a time (numbers as float/int, never Decimal)."""
    kind, reader = _sniff(raw)
    try:
        if kind == "jsonl":
            yield from _jsonl(reader)
            return
        prefix = "item" if kind == "array" else "messages.item"
        for index, message in enumerate(ijson.items(reader, prefix, use_float=True)):
            if not isinstance(message, dict):
                raise TranscriptError(f"message {index} is not a JSON object")
            yield message
    except ijson.JSONError as exc:
        raise TranscriptError(f"not JSON: {exc}") from exc


def read_fields(raw: IO[bytes]) -> dict[str, Any]:
    """The request fields next to ``messages`` in an object transcript (``{}`` for arrays and JSONL)."""
    kind, reader = _sniff(raw)
    if kind != "object":
        return {}
    fields: dict[str, Any] = {}
    builder: Any = None
    key = None
    try:
        for prefix, event, value in ijson.parse(reader, use_float=True):
            if prefix == "" and event == "map_key":
                key = value
                continue
            if key not in REQUEST_FIELDS or not (prefix == key or prefix.startswith(key + ".")):
                continue
            if builder is None:
                builder = ijson.ObjectBuilder()
            builder.event(event, value)
            if prefix == key and event not in ("start_map", "start_array"):
                fields[key], builder, key = builder.value, None, None
    except ijson.JSONError as exc:
        raise TranscriptError(f"not JSON: {exc}") from exc
    return fields


def _jsonl(reader: _Replay) -> Iterator[dict[str, Any]]:
    yield from jsonl_messages(_lines(reader))


def _lines(reader: _Replay, chunk: int = 1 << 20) -> Iterator[bytes]:
    pending = b""
    while True:
        data = reader.read(chunk)
        if not data:
            break
        pending += data
        *complete, pending = pending.split(b"\n")
        yield from complete
    if pending:
        yield pending


class ArrayWriter:
    """Writes messages as a JSON array, one compact message per line, to a text stream."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.count = 0
        stream.write("[")

    def write(self, message: dict[str, Any]) -> None:
        self.stream.write(("\n" if self.count == 0 else ",\n") + dense_dumps(message))
        self.count += 1

    def finish(self) -> None:
        self.stream.write("\n]" if self.count else "]")


def opener(path: str) -> Callable[[], IO[bytes]]:
    """A callable opening ``path`` for reading, once per pass."""
    return lambda: open(path, "rb")
