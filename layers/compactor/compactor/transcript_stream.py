"""Reading and writing transcripts as streams (docs/scale.md): no whole-file copy in memory.

The formats of :mod:`compactor.transcripts` (a JSON array of messages, an object with a ``messages``
array and request fields, JSONL of messages or Claude Code session records), read incrementally with
``ijson`` from any binary file-like object (a local file, an S3 body). Writing produces one message
per line inside a JSON array, which reads back with the same functions.

Numbers read as ``json.loads`` (the API) reads them. ijson's C backend, with its numbers as floats (the fast
path), refuses an integer outside 64 bits ("integer overflow"), which ``json.loads`` reads as an int: a
valid transcript. :func:`messages_from` and :func:`fields_from`, given a way to open the stream again,
then read it again with ijson's pure-Python backend (about 15 times slower, for such transcripts only).
Its C backend with Decimal numbers would read them, but crashes the process (a segmentation fault, ijson
3.6.0) on an integer longer than Python converts (4,300 digits), which the API refuses with a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import IO, Any

import ijson

from compactor.jsonutil import MAX_BODY_DEPTH, JSONLimitError, bounded_loads, dense_dumps, depth_exceeds
from compactor.transcripts import REQUEST_FIELDS, TranscriptError, _jsonl_record_messages

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
            bounded_loads(line)
            return "jsonl", _Replay(head, raw)
        except JSONLimitError:
            pass
    if stripped[:1] == b"{":
        return "object", _Replay(head, raw)
    return "jsonl", _Replay(head, raw)


class IntegerOutside64Bits(TranscriptError):
    """ijson's C backend refused an integer outside 64 bits; the pure-Python one reads it (module docstring)."""


def _python_backend() -> Any:
    return ijson.get_backend("python")


def _refused_integer(exc: Exception) -> bool:
    return "integer overflow" in str(exc)


def messages_from(open_source: Callable[[], AbstractContextManager[IO[bytes]]]) -> Iterator[dict[str, Any]]:
    """:func:`iter_messages` of the stream ``open_source()`` opens; one holding an integer outside 64 bits
    is opened again and read by the pure-Python backend, which goes on after the messages already given."""
    given = 0
    try:
        with open_source() as raw:
            for message in iter_messages(raw):
                yield message
                given += 1
        return
    except IntegerOutside64Bits:
        pass
    with open_source() as raw:
        for index, message in enumerate(iter_messages(raw, backend=_python_backend())):
            if index >= given:
                yield message


def fields_from(open_source: Callable[[], AbstractContextManager[IO[bytes]]]) -> dict[str, Any]:
    """:func:`read_fields` of the stream ``open_source()`` opens, as :func:`messages_from` reads it."""
    try:
        with open_source() as raw:
            return read_fields(raw)
    except IntegerOutside64Bits:
        with open_source() as raw:
            return read_fields(raw, backend=_python_backend())


def iter_messages(raw: IO[bytes], *, backend: Any = None) -> Iterator[dict[str, Any]]:
    """The messages of a transcript stream, one at a time (numbers as float/int, never Decimal); ``backend``:
    an ijson backend (default: ijson's own, its C one). :class:`IntegerOutside64Bits` when the C backend
    refuses an integer (:func:`messages_from` then reads on)."""
    kind, reader = _sniff(raw)
    try:
        if kind == "jsonl":
            yield from _jsonl(reader)
            return
        prefix = "item" if kind == "array" else "messages.item"
        for index, message in enumerate((backend or ijson).items(reader, prefix, use_float=True)):
            if not isinstance(message, dict):
                raise TranscriptError(f"message {index} is not a JSON object")
            if depth_exceeds(message, MAX_BODY_DEPTH):  # the limits of bounded_loads (docs/reliability.md)
                raise TranscriptError(f"message {index} is nested deeper than {MAX_BODY_DEPTH} levels")
            yield message
    except TranscriptError:
        raise
    except (ijson.JSONError, ValueError) as exc:  # ValueError: a number Python refuses to convert
        raise _not_json(exc) from exc


def _not_json(exc: Exception) -> TranscriptError:
    if isinstance(exc, ijson.JSONError) and _refused_integer(exc):
        return IntegerOutside64Bits("an integer outside 64 bits: the stream is to be read again by the "
                                    "pure-Python backend (transcript_stream.messages_from)")
    return TranscriptError(f"not JSON: {str(exc)[:200]}")


def read_fields(raw: IO[bytes], *, backend: Any = None) -> dict[str, Any]:
    """The request fields next to ``messages`` in an object transcript (``{}`` for arrays and JSONL);
    ``backend`` as for :func:`iter_messages`."""
    kind, reader = _sniff(raw)
    if kind != "object":
        return {}
    fields: dict[str, Any] = {}
    builder: Any = None
    key = None
    try:
        for prefix, event, value in (backend or ijson).parse(reader, use_float=True):
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
    except (ijson.JSONError, ValueError) as exc:
        raise _not_json(exc) from exc
    return fields


def _jsonl(reader: _Replay) -> Iterator[dict[str, Any]]:
    buffered = _lines(reader)
    for number, line in enumerate(buffered, start=1):
        if not line.strip():
            continue
        try:
            record = bounded_loads(line)
        except JSONLimitError as exc:
            raise TranscriptError(f"line {number} is not JSON: {exc.msg}") from exc
        yield from _jsonl_record_messages(record, number)


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
