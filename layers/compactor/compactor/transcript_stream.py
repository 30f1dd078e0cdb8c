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

Depth as the API bounds it, without the parser's memory growing with the square of a depth it refuses.
ijson names every event by its path from the document's root, and holds the name of each open level: at
20,000 levels of ``[`` (40 KB of text) the process held about 1 GB, and 100,000 levels were killed for
memory before any message was checked. So the parser is handed a stream that counts the ``[`` and ``{``
it passes on (in strings too: an over-count) since the last message was given (:class:`_Watched`):
no message can be deeper than that count. Past :data:`OPENERS_BETWEEN_MESSAGES`, :func:`messages_from`
and :func:`fields_from` measure the whole stream's depth with ijson's event stream (which names no path),
refuse it when deeper than the API allows, else read it again without the count. The count bounds depth,
not the length of a path: long keys also make long names (docs/scale.md).

Text as the API takes it: a lone surrogate (an escape such as ``"\\ud83d"`` without its pair, which no UTF-8
text can carry) is refused with the API's message. The C backend reads a lone high one as ``?`` and fails
on a lone low one, so a read that holds a high escape without a low one after it, or that the C backend
cannot decode, is read again by the pure-Python backend, which keeps them; each message it gives, and each
JSONL line with a ``\\ud`` escape, is then checked as the API checks a request.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from itertools import accumulate
from operator import itemgetter
from typing import IO, Any

import ijson

from compactor.jsonutil import MAX_BODY_DEPTH, JSONLimitError, bounded_loads, dense_dumps, ensure_utf8_encodable
from compactor.transcripts import REQUEST_FIELDS, TranscriptError, _jsonl_record_messages

PEEK_BYTES = 1 << 20
"""How far a first line is looked at to tell JSONL from one JSON document."""
READ_BYTES = 16_384
"""What the parser reads at a time: a quarter of ijson's default, so that the count of a read holding a
message's end and the next messages' start stays small (parsing about 2% slower)."""
OPENERS_BETWEEN_MESSAGES = 4096
"""How many ``[`` and ``{`` the parser may be handed since the last message it gave (counting the read that
held that message's end) before the stream's depth is measured first: at that depth the parser's names of
the open levels hold about 40 MB (module docstring)."""


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


class NotForTheCBackend(TranscriptError):
    """What ijson's C backend reads otherwise than ``json.loads``; the pure-Python one reads it (module
    docstring)."""


class IntegerOutside64Bits(NotForTheCBackend):
    """ijson's C backend refused an integer outside 64 bits."""


class SurrogateEscape(NotForTheCBackend):
    """A read holds a high surrogate escape without a low one after it (a lone surrogate, or a pair the read
    cannot tell from one), or the C backend could not decode a string (a lone low surrogate)."""


class OpenersPiledUp(TranscriptError):
    """More than :data:`OPENERS_BETWEEN_MESSAGES` ``[`` and ``{`` since the last message: the stream's depth is
    to be measured before it is parsed (module docstring)."""


# A high surrogate escape without a low one after it. It may also be text after an escaped backslash (``\\ud800``),
# which the pure-Python backend then reads as the text it is: a reading again, not a refusal.
_LONE_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")
_ESCAPE_TAIL = 11  # a high escape that starts in a read's last 11 bytes is judged with the next read's start


class _Watched:
    """The reader a parser is handed. With ``limit``, it counts the ``[`` and ``{`` it passes on since
    :meth:`settled` and raises :class:`OpenersPiledUp` before passing on a read that takes the count past it. A
    parser reads ahead at most the read it is parsing, so after a message is given, the levels open are at most
    those its read opened: :meth:`settled` starts the count again from that read's. With ``surrogates`` (for the
    C backend), it raises :class:`SurrogateEscape` before passing on a read with a lone high surrogate escape."""

    def __init__(self, raw: _Replay, limit: int | None, *, surrogates: bool) -> None:
        self.raw, self.limit, self.surrogates = raw, limit, surrogates
        self.count = self.last = 0
        self.tail = b""  # the last bytes of the read before, where an escape may have started

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        if self.limit is not None:
            self.last = data.count(b"[") + data.count(b"{")
            self.count += self.last
            if self.count > self.limit:
                raise OpenersPiledUp(f"more than {self.limit} '[' and '{{' since the last message: the "
                                     "transcript's depth is to be measured first (transcript_stream.messages_from)")
        if self.surrogates:
            self._watch_escapes(data)
        return data

    def _watch_escapes(self, data: bytes) -> None:
        tail = self.tail
        if b"\\ud" in data or b"\\uD" in data or b"\\" in tail:
            text = tail + data
            decided = len(text) - _ESCAPE_TAIL if data else len(text)  # at the end every escape is decided
            if any(found.start() < decided for found in _LONE_HIGH.finditer(text)):
                raise SurrogateEscape("a surrogate escape the C backend reads as '?': the stream is to be read "
                                      "again by the pure-Python backend (transcript_stream.messages_from)")
        self.tail = (tail + data)[-_ESCAPE_TAIL:] if len(data) < _ESCAPE_TAIL else data[-_ESCAPE_TAIL:]

    def settled(self) -> None:
        self.count = self.last


def _python_backend() -> Any:
    return ijson.get_backend("python")


def _refused_integer(exc: Exception) -> bool:
    """yajl's own error, whose text starts with its reason (the input's excerpt follows it)."""
    return str(exc).startswith("parse error: integer overflow")


def _other_backend(backend: Any, refused: NotForTheCBackend) -> Any:
    """The pure-Python backend, after the C one could not read the stream (``refused`` again if it was not the C
    one)."""
    if backend is not None:
        raise refused
    return _python_backend()


Opener = Callable[[], AbstractContextManager[IO[bytes]]]


def messages_from(open_source: Opener) -> Iterator[dict[str, Any]]:
    """:func:`iter_messages` of the stream ``open_source()`` opens, opened again when it has to be read
    another way (module docstring): by the pure-Python backend when it holds an integer outside 64 bits,
    without the count of openers once its depth was measured. Each new reading goes on after the messages
    already given."""
    given, backend, counted = 0, None, True
    while True:
        try:
            with open_source() as raw:
                for index, message in enumerate(iter_messages(raw, backend=backend, counted=counted)):
                    if index >= given:
                        yield message
                        given += 1
            return
        except NotForTheCBackend as refused:
            backend = _other_backend(backend, refused)
        except OpenersPiledUp:
            backend = _refuse_too_deep(open_source, backend)
            counted = False


def fields_from(open_source: Opener) -> dict[str, Any]:
    """:func:`read_fields` of the stream ``open_source()`` opens, read again as :func:`messages_from` reads."""
    backend, counted = None, True
    while True:
        try:
            with open_source() as raw:
                return read_fields(raw, backend=backend, counted=counted)
        except NotForTheCBackend as refused:
            backend = _other_backend(backend, refused)
        except OpenersPiledUp:
            backend = _refuse_too_deep(open_source, backend)
            counted = False


_DEPTH_STEPS = {"start_map": 1, "start_array": 1, "end_map": -1, "end_array": -1, "map_key": 0, "null": 0,
                "boolean": 0, "integer": 0, "double": 0, "number": 0, "string": 0}


def _refuse_too_deep(open_source: Opener, backend: Any) -> Any:
    """A :class:`TranscriptError` when the stream ``open_source()`` opens has more levels open at once than a
    transcript whose messages are within the API's depth can have: the messages' own (their levels 0 to
    ``MAX_BODY_DEPTH``), the array's and an object's. Measured from ijson's events, which name no path, one
    level a step; the backend the stream is to be read by (the pure-Python one when the C one refuses an
    integer)."""
    while True:
        try:
            with open_source() as raw:
                _kind, reader = _sniff(raw)
                try:
                    events = (backend or ijson).basic_parse(reader, use_float=True, buf_size=READ_BYTES)
                    deepest = max(accumulate(map(_DEPTH_STEPS.__getitem__, map(itemgetter(0), events)), initial=0))
                except (ijson.JSONError, ValueError) as exc:
                    raise _not_json(exc) from exc
        except NotForTheCBackend as refused:
            backend = _other_backend(backend, refused)
            continue
        if deepest > MAX_BODY_DEPTH + 3:
            raise TranscriptError(f"the transcript is nested deeper than its messages may be ({MAX_BODY_DEPTH} levels)")
        return backend


def iter_messages(raw: IO[bytes], *, backend: Any = None, counted: bool = True) -> Iterator[dict[str, Any]]:
    """The messages of a transcript stream, one at a time (numbers as float/int, never Decimal); ``backend``:
    an ijson backend (default: ijson's own, its C one); ``counted``: the parser's reader counts openers
    (:class:`_Watched`). A :class:`NotForTheCBackend` when the C backend reads the stream otherwise than
    ``json.loads``, :class:`OpenersPiledUp` when the count passes its limit (:func:`messages_from` then reads
    on)."""
    kind, replay = _sniff(raw)
    try:
        if kind == "jsonl":
            yield from _jsonl(replay)
            return
        prefix = "item" if kind == "array" else "messages.item"
        reader = _Watched(replay, OPENERS_BETWEEN_MESSAGES if counted else None, surrogates=backend is None)
        for index, message in enumerate((backend or ijson).items(reader, prefix, use_float=True,
                                                                 buf_size=READ_BYTES)):
            if not isinstance(message, dict):
                raise TranscriptError(f"message {index} is not a JSON object")
            if _deeper_than(message, MAX_BODY_DEPTH):  # the limits of bounded_loads (docs/reliability.md)
                raise TranscriptError(f"message {index} is nested deeper than {MAX_BODY_DEPTH} levels")
            if backend is not None:  # the pure-Python backend keeps lone surrogates, which the API refuses
                _check_text(message, f"message {index}")
            reader.settled()
            yield message
    except TranscriptError:
        raise
    except (ijson.JSONError, ValueError) as exc:  # ValueError: a number Python refuses to convert
        raise _not_json(exc) from exc


def _deeper_than(message: dict[str, Any], limit: int) -> bool:
    """``jsonutil.depth_exceeds`` of a message as the parser builds it (plain dicts and lists, none held twice),
    a level at a time with a loop over each container: on messages of a few small containers, as transcripts'
    are, about 0.6 of the time (0.09 s against 0.15 s for 64 MB of corpus messages)."""
    level, nodes = 0, [message]
    while nodes:
        if level > limit:
            return True
        deeper = []
        for node in nodes:
            for child in (node.values() if type(node) is dict else node):
                if type(child) is dict or type(child) is list:
                    deeper.append(child)
        nodes, level = deeper, level + 1
    return False


def _check_text(value: Any, where: str) -> None:
    """The API's check of a request's text (``jsonutil.ensure_utf8_encodable``): a lone surrogate is refused."""
    try:
        ensure_utf8_encodable(value)
    except ValueError as exc:
        raise TranscriptError(f"{where}: {exc}") from None


def _not_json(exc: Exception) -> TranscriptError:
    if isinstance(exc, UnicodeDecodeError):  # the C backend's UTF-8 of a lone low surrogate escape
        return SurrogateEscape("a string the C backend cannot decode: the stream is to be read again by the "
                               "pure-Python backend (transcript_stream.messages_from)")
    if isinstance(exc, ijson.JSONError) and _refused_integer(exc):
        return IntegerOutside64Bits("an integer outside 64 bits: the stream is to be read again by the "
                                    "pure-Python backend (transcript_stream.messages_from)")
    return TranscriptError(f"not JSON: {str(exc)[:200]}")


def read_fields(raw: IO[bytes], *, backend: Any = None, counted: bool = True) -> dict[str, Any]:
    """The request fields next to ``messages`` in an object transcript (``{}`` for arrays and JSONL);
    ``backend`` and ``counted`` as for :func:`iter_messages` (the count starts again at each message's end and
    each member of the object)."""
    kind, replay = _sniff(raw)
    if kind != "object":
        return {}
    fields: dict[str, Any] = {}
    builder: Any = None
    key = None
    reader = _Watched(replay, OPENERS_BETWEEN_MESSAGES if counted else None, surrogates=backend is None)
    try:
        for prefix, event, value in (backend or ijson).parse(reader, use_float=True, buf_size=READ_BYTES):
            if prefix == "" or prefix == "messages.item" and event == "end_map":
                reader.settled()
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
    except TranscriptError:
        raise
    except (ijson.JSONError, ValueError) as exc:
        raise _not_json(exc) from exc
    if backend is not None:
        _check_text(fields, "the request fields")
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
        if b"\\ud" in line or b"\\uD" in line:  # a surrogate escape: paired, or lone as the API refuses
            _check_text(record, f"line {number}")
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
