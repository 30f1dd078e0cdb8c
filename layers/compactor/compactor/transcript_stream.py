"""Reading and writing transcripts as streams (docs/scale.md): no whole-file copy in memory.

The formats of :mod:`compactor.transcripts` (a JSON array of messages, an object with a ``messages``
array and request fields, JSONL of messages or Claude Code session records), read incrementally with
``ijson`` from any binary file-like object (a local file, an S3 body). Writing produces one message
per line inside a JSON array, which reads back with the same functions. Read with :func:`messages_from`
and :func:`fields_from`, which are given a way to open the stream again: a stream is read again another way
when ijson's fast path cannot read it as the API reads a request (``json.loads`` and its checks):

* **Numbers.** ijson's C backend, with its numbers as floats (the fast path), refuses an integer outside 64
  bits ("integer overflow"), which the API reads. The stream is then read by ijson's pure-Python backend
  (its items about 12–15 times slower, for such transcripts only), whose messages are checked for what the
  API refuses and that backend takes: a float out of range. The C backend with
  Decimal numbers would read them, but crashes the process (a segmentation fault, ijson 3.6.0) on an integer
  longer than Python converts (4,300 digits). Neither backend gives a number's text, so a number literal longer
  than the API reads (``jsonutil.MAX_NUMBER_CHARS``: a float of 150 digits, which they read as its float) is looked
  for in the bytes: a read holding digits that may be one (a third of them in a row) sends the stream to a reading
  that skips the strings and measures the literals outside them (:class:`_Literals`), which refuses it in
  ``bounded_loads``' words.
* **Lone surrogates** (an escape such as ``"\\ud83d"`` without its pair, which no UTF-8 text can carry): the
  C backend reads a lone high one as ``?`` and fails on a lone low one. A read holding a high escape without
  a low one after it (after an even run of backslashes), or that the C backend cannot decode, is read again by
  the pure-Python backend, which keeps them for the API's check to refuse. The messages of each JSONL line with
  a ``\\ud`` escape are checked the same way.
* **Paths.** ijson's items name every event by its path from the root and hold the name of each open level,
  so memory grows with depth times the length of the names: 20,000 levels of ``[`` (40 KB) held about 1 GB,
  and 120 levels of 40 KB keys (4.8 MB, within the API's depth) 570 MB. So the parser is handed a reader
  that counts the ``[`` and ``{`` (in strings too: an over-count) and the bytes it passes on since the last
  message was given (:class:`_Watched`), which bound the levels open and their names. Past
  :data:`PATH_NAMES_BUDGET`, the stream is read again from its parser's events, which name no path
  (:func:`_path_free_messages`: slower, its memory the message being built), refusing a level deeper than
  the API's as soon as it opens. The request fields are always read that way.
* **Keys named twice.** ijson's builders keep the last value of a key an object names twice, which the API refuses
  (``jsonutil.bounded_loads``). Every builder here is given a map type of ours (:func:`_keys_once`) that notes a key
  set twice, and the message is refused as the API refuses it; the maps in its lists are given their plain dicts as
  the message's depth is checked (:func:`_as_loaded`). That costs a Python call for every key: a run reads the same
  bytes several times, so only a reading of bytes no reading has yet checked whole needs it (``keys_checked``;
  :class:`CheckedOnce`, :func:`opener`); the others read plain dicts (docs/performance.md "Streamed reading").
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import IO, Any

import ijson

from compactor.jsonutil import (
    BYTE_ORDER_MARK, LONG_NUMBER, MAX_BODY_DEPTH, MAX_NUMBER_CHARS, SECOND_BYTE_ORDER_MARK, JSONLimitError,
    bounded_loads, dense_dumps, ensure_utf8_encodable, repeated_key_message,
)
from compactor.formats import FORMAT_NAMES, WINDOWED_FORMATS
from compactor.formats.base import foreign_item, foreign_refusal, format_refusal, other_format
from compactor.transcripts import (
    FILE_FIELDS, NotChat, NotJSON, Transcript, TranscriptError, _jsonl_record_messages, item_format,
)

PEEK_BYTES = 1 << 20
"""How far a first line is looked at to tell JSONL from one JSON document."""
READ_BYTES = 16_384
"""What the parser reads at a time: a quarter of ijson's default, so that the count of a read holding a
message's end and the next messages' start stays small (parsing about 2% slower)."""
PATH_NAMES_BUDGET = 128 * 2 ** 20
"""How much the parser's names of the open levels may hold at most, bounded from the reader's count since the
last message: levels ``(openers + 2)`` times the longest name ``(bytes + 6 × openers + 14)`` characters, at the
most bytes a character the reads since then can make a name store: 2 for ASCII (escapes within the Basic
Multilingual Plane), 4 for other text or a surrogate pair's escape (module docstring). Past it the stream is
read path-free."""
MAX_LEVELS = MAX_BODY_DEPTH + 3
"""The most levels a transcript opens at once: a message's levels 0 to ``MAX_BODY_DEPTH``, the array's and an
object's (the path-free reading refuses a deeper one as it opens)."""


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


_UTF8_BOM = BYTE_ORDER_MARK.encode()


def _sniff(raw: IO[bytes]) -> tuple[str, _Replay]:
    """``array``, ``object`` or ``jsonl``, and a reader positioned at the start."""
    head = raw.read(PEEK_BYTES)
    if head.startswith(_UTF8_BOM):
        head = head[3:]
        if head.startswith(_UTF8_BOM):
            raise NotJSON(SECOND_BYTE_ORDER_MARK)
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
        except JSONLimitError as exc:
            if not exc.syntax:  # JSON over a limit (a key twice, too deep): a line the JSONL reading refuses
                return "jsonl", _Replay(head, raw)
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


class LongNumberRun(TranscriptError):
    """A read holds digits that may be a number literal longer than the API reads: the stream is to be read again with
    the literals measured (:class:`_Literals`; module docstring)."""


class PathsTooLong(TranscriptError):
    """The parser's names of the open levels could pass :data:`PATH_NAMES_BUDGET`: the stream is to be read
    path-free (module docstring)."""


# A high surrogate escape (group 1) without a low one after it, after an even run of backslashes (after an odd one,
# the escape's backslash is an escaped one and ``u`` text), so code that writes such escapes as text (``\\ud83d``
# in its JSON) does not send its stream to the slower reading.
_LONE_HIGH = re.compile(rb"(?<!\\)(?:\\\\)*(\\u[dD][89abAB][0-9a-fA-F]{2})(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")
_RUN_HELD_MAX = 4096  # a longer run of backslashes at a read's end goes on whole: its escapes judged without parity
_ESCAPE_TAIL = 11  # a high escape that starts in a read's last 11 bytes is judged with the next read's start
# Whether a read holds a high surrogate escape: one regular expression's pass (about 7 µs for 16 KiB here), where
# looking for ``\ud`` and ``\uD`` took two passes of about 12 µs each.
_HIGH_ESCAPE = re.compile(rb"\\u[dD][89abAB]")


# A number literal longer than MAX_NUMBER_CHARS, at a position outside any string: a run of the characters numbers are
# made of, that long, from a digit or a minus sign and a digit (in a valid JSON text outside strings, such a run is one
# number literal). Such a literal holds at least _DIGIT_RUN digits in a row: of its at least 101 characters, at most 4
# are no digit (a sign, the point, the exponent's e and sign), so one of its at most 3 runs of digits holds a third
# of the others at least.
_LONG_LITERAL = re.compile(rb"(?=[-+.0-9eE]{%d})-?[0-9]" % (MAX_NUMBER_CHARS + 1))
_DIGIT_RUN = b"0" * ((MAX_NUMBER_CHARS + 1 - 4 + 2) // 3)
# A read's marks (one bytes.translate): its digits as 0, its '[' and '{' as '[' (the reader's count of openers), the
# rest as spaces.
_MARKS = bytes(0x30 if 0x30 <= code <= 0x39 else 0x5B if code in b"[{" else 0x20 for code in range(256))
_EDGE = len(_DIGIT_RUN) - 1  # a run of digits cut by a read's start: at most this many of them in the read
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.S)  # up to a closing quote, or a last lone backslash
_QUOTE_OR_LONG_LITERAL = re.compile(rb'"|' + _LONG_LITERAL.pattern)
_NUMBER_CHARACTERS = b"-+.0123456789eE"


def _escaped_quotes(data: bytes) -> int:
    """How many of the quotes in ``data`` follow an odd run of backslashes (a run that starts in it): the pairs of
    backslashes taken out, as JSON pairs them from a run's start, the quotes after the one left (two passes in C,
    about 10 µs a 16 KiB read of corpus messages; counting the quotes after 1, 2, 3 … backslashes took 37 µs, and a
    regular expression's search for the runs 100 µs)."""
    return data.replace(b"\\\\", b"").count(b'\\"') if b'\\"' in data else 0


class _Literals:
    """Whether the reads of a stream, one after the other, hold a number literal longer than
    :data:`~compactor.jsonutil.MAX_NUMBER_CHARS` characters outside its strings, which the API refuses
    (``jsonutil.bounded_loads``) and ijson's backends read as the number (neither gives a number's text).

    Where its strings end is followed read by read in C: the quotes a read holds, less those after an odd run of
    backslashes, toggle it (:func:`_escaped_quotes`). A read is measured only when it may hold such a literal: a
    number cut by its start, or :data:`_DIGIT_RUN` digits in a row in its marks, and then the characters of a literal
    that long (:data:`_LONG_LITERAL`). Measured, its strings are
    skipped by a regular expression each and the literals outside them looked at; the run of number characters at a
    read's end goes on with the next read's."""

    def __init__(self) -> None:
        self.in_string = self.escaped = False  # inside a string at the last read's end; after its lone backslash
        self.carry = b""  # the number characters at the last read's end, outside any string

    def too_long(self, data: bytes, marks: bytes) -> bool:
        """Whether ``data`` (``marks`` its :data:`_MARKS`) ends a literal longer than the API reads."""
        # A literal that starts in the read holds its run of digits in it; one that goes on from the last read, in
        # the number it carries.
        if (self.carry or _DIGIT_RUN in marks) and \
                _LONG_LITERAL.search(self.carry + data if self.carry else data) is not None:
            return self._measured(data)
        self._followed(data)
        return False

    def _followed(self, data: bytes) -> None:
        """The state after ``data``, which ends no literal that long: where its strings end, its last number."""
        body = data
        if self.escaped:  # the last read ended with a lone backslash, in a string: this one's first byte is escaped
            body, self.escaped = data[1:], False
        quotes = body.count(b'"')
        if quotes:
            quotes -= _escaped_quotes(body)
        was_in_string, self.in_string = self.in_string, self.in_string ^ (quotes % 2 == 1)
        if self.in_string:
            self.escaped, self.carry = (len(body) - len(body.rstrip(b"\\"))) % 2 == 1, b""
            return
        number = body[len(body.rstrip(_NUMBER_CHARACTERS)):]
        if len(number) == len(body) and not was_in_string:  # the number the last read ended with goes on
            number = self.carry + number
        self.carry = number[-MAX_NUMBER_CHARS:]

    def _measured(self, data: bytes) -> bool:
        text, at = data, 0
        if self.in_string:
            past = self._past_string(text, 0)
            if past is None:
                return False
            at = past
        else:
            text, self.carry = self.carry + data, b""
        while True:
            found = _QUOTE_OR_LONG_LITERAL.search(text, at)
            if found is None:
                rest = text[at:]
                self.carry = rest[len(rest.rstrip(_NUMBER_CHARACTERS)):][-MAX_NUMBER_CHARS:]
                return False
            if found.group() != b'"':
                return True
            past = self._past_string(text, found.end())
            if past is None:
                return False
            at = past

    def _past_string(self, text: bytes, at: int) -> int | None:
        """Where the string going on at ``at`` ends (after its closing quote), or None when it goes on past ``text``."""
        if self.escaped:  # the last read ended with a backslash: this one starts with the character it escapes
            self.escaped = False
            at += 1
        end = _STRING_BODY.match(text, at).end() if at < len(text) else len(text)  # type: ignore[union-attr]
        if end < len(text) and text[end] == 0x22:
            self.in_string = False
            return end + 1
        self.in_string, self.escaped = True, end < len(text)  # stopped at a backslash, the read's last byte
        return None


class _Watched:
    """The reader a parser is handed. ``counted``: it counts the ``[`` and ``{`` and the bytes it passes on since
    :meth:`settled`, and stops before a read that takes the bound they give past :data:`PATH_NAMES_BUDGET`. A
    parser reads ahead at most the read it is parsing, so after a message is given, the levels open are at most
    those its read opened: :meth:`settled` starts the count again from that read's. ``surrogates`` (for the C
    backend): it stops before a read with a lone high surrogate escape. ``literals``: it stops before a read with a
    number literal longer than the API reads (:class:`_Literals`); else before a read that may hold one
    (:meth:`_long_literal`), to be read again so. A read's last bytes from the run of
    backslashes that reaches its last 11 are held back for the next read: an escape there is passed on only once
    its pair, or its lack of one, and the backslashes before it have been seen.

    To stop, it answers the end of the stream (the parser then fails on an incomplete document, as a parser
    does, instead of being left inside a string) and keeps the reason in :attr:`stopped`, which the reading
    raises in place of the parser's error."""

    def __init__(self, raw: _Replay, *, counted: bool, surrogates: bool, literals: bool = False) -> None:
        self.raw, self.counted, self.surrogates = raw, counted, surrogates
        self.literals = _Literals() if literals else None
        self.tail = self.edge = b""  # the last bytes passed on and their marks, for a literal cut between two reads
        self.marks: bytes | None = None  # the last read's marks (:data:`_MARKS`), when it was marked
        self.openers = self.size = self.last_openers = self.last_size = 0
        self.wide = self.last_wide = False  # text since the last message that names may store at 4 bytes a character
        self.escaped = False  # whether the last read judged held a high surrogate escape
        self.held = b""  # a read's last bytes from a backslash, passed on with the next read
        self.stopped: TranscriptError | None = None

    def read(self, size: int = -1) -> bytes:
        if self.stopped is not None:
            return b""
        data = self._read(size)
        if self.surrogates:
            data = self._judged(data, size)
            if self.stopped is not None:
                return b""
        self.marks = None
        if data and self._long_literal(data):
            return b""
        if self.counted:
            marks = self.marks
            self.last_openers = marks.count(b"[") if marks is not None else data.count(b"[") + data.count(b"{")
            self.last_size = len(data)
            self.last_wide = not data.isascii() or (self.escaped if self.surrogates else
                                                    _HIGH_ESCAPE.search(data) is not None)
            self.openers += self.last_openers
            self.size += self.last_size
            self.wide |= self.last_wide
            if (self.openers + 2) * (4 if self.wide else 2) * (self.size + 6 * self.openers + 14) > PATH_NAMES_BUDGET:
                self.stopped = PathsTooLong(f"{self.openers} '[' and '{{' in {self.size} bytes since the last "
                                            "message: the transcript is to be read path-free")
                return b""
        return data

    def _read(self, size: int) -> bytes:
        """The next bytes of the stream; none, and :attr:`stopped`, when they hold a form feed or a vertical tab.
        ijson's C backend reads them as whitespace between values; in JSON, and so for the API, they are no
        whitespace, and a string holds them only escaped: no JSON text holds one as a byte (two scans in C of each
        read, docs/scale.md "Streaming")."""
        data = self.raw.read(size)
        if b"\x0c" in data or b"\x0b" in data:
            self.stopped = NotJSON("not JSON: a raw form feed or vertical tab (JSON's whitespace is space, "
                                   "tab, newline and return; a string holds them escaped)")
            return b""
        return data

    def _judged(self, data: bytes, size: int) -> bytes:
        """What of the bytes held and ``data`` goes on: all of them at the stream's end, else those before the run
        of backslashes that reaches their last 11 (at most :data:`_RUN_HELD_MAX` of it held; more is read when
        nothing would go on). :attr:`stopped` when what goes on holds a lone high surrogate escape."""
        while True:
            text = self.held + data if self.held else data
            if not data:  # the end: every escape is whole
                cut = len(text)
            else:
                slash = text.find(b"\\", len(text) - _ESCAPE_TAIL)
                cut = len(text) if slash < 0 else slash
                start = cut
                while start > 0 and text[start - 1] == 0x5C and cut - start < _RUN_HELD_MAX:  # the run's start
                    start -= 1
                cut = start if start == 0 or text[start - 1] != 0x5C else cut
            self.held = text[cut:]
            if cut or not data:
                break
            data = self._read(size)
        self.escaped = _HIGH_ESCAPE.search(text) is not None
        if self.escaped and any(found.start(1) < cut for found in _LONE_HIGH.finditer(text)):
            self.stopped = SurrogateEscape("a surrogate escape the C backend reads as '?': the stream is to be "
                                           "read again by the pure-Python backend")
        return text if cut == len(text) else text[:cut]

    def _long_literal(self, data: bytes) -> bool:
        """Whether ``data`` stops the stream (:attr:`stopped`): a number literal longer than the API reads in it, or
        when the literals are not measured, digits that may be one."""
        self.marks = marks = data.translate(_MARKS)
        if self.literals is not None:
            if self.literals.too_long(data, marks):
                self.stopped = NotJSON(LONG_NUMBER)  # bounded_loads' words, as a whole reading refuses the text
                return True
            return False
        # Digits that may be one, in a string or not: a run of _DIGIT_RUN in the read's marks (one translate in C, whose
        # marks the count of openers reuses: about 3 µs a 16 KiB read more than that count alone) or in the last read's
        # last 100 and this one's start (a literal that ends its first 101 characters in this read has its run there);
        # then the characters of a literal that long.
        tail, edge = self.tail, self.edge
        self.tail = data[-MAX_NUMBER_CHARS:] if len(data) >= MAX_NUMBER_CHARS else (tail + data)[-MAX_NUMBER_CHARS:]
        self.edge = marks[-MAX_NUMBER_CHARS:] if len(marks) >= MAX_NUMBER_CHARS else (edge + marks)[-MAX_NUMBER_CHARS:]
        if (_DIGIT_RUN in marks or _DIGIT_RUN in edge + marks[:_EDGE]) and \
                _LONG_LITERAL.search(tail + data) is not None:
            self.stopped = LongNumberRun("digits that may be a number literal longer than the API reads: the stream "
                                         "is to be read again with its literals measured")
            return True
        return False

    def settled(self) -> None:
        self.openers, self.size, self.wide = self.last_openers, self.last_size, self.last_wide

    def taken(self) -> TranscriptError | None:
        """:attr:`stopped`, which the reading raises, no longer held here. Held, it made a cycle the collector cannot
        free: the reason's traceback holds the reading's frames (and through them every frame of the run it was raised
        in, with their locals: a windowed plan's scan of the whole transcript), those frames hold the parser, and
        ijson's C parser holds this reader's ``read`` without telling the collector. Every stream read again another
        way (a path too long, a surrogate escape, a long number) or refused by this reader left it all in memory for
        the container's life: a Lambda container that planned a 100 MB ``anthropic-messages`` job kept 19 MB more
        for good, one more each job (docs/scale.md, "Streaming")."""
        stopped, self.stopped = self.stopped, None
        return stopped


def _python_backend() -> Any:
    return ijson.get_backend("python")


def _other_backend(backend: Any, refused: NotForTheCBackend) -> Any:
    """The pure-Python backend, after the C one could not read the stream (``refused`` again if it was not the C
    one)."""
    if backend is not None:
        raise refused
    return _python_backend()


Opener = Callable[[], AbstractContextManager[IO[bytes]]]


def messages_from(open_source: Opener, format: str | None = None, *,
                  keys_checked: bool = True) -> Iterator[dict[str, Any]]:
    """The messages of the stream ``open_source()`` opens, one at a time (numbers as ``json.loads`` makes them:
    int and float, never Decimal), as the API would take them; the stream is opened again when it has to be
    read another way (module docstring), and each new reading goes on after the messages already given.
    ``format``: one of ``WINDOWED_FORMATS`` (None: ``openai-chat``); an item of another format is :class:`NotChat`
    (naming ``anthropic-messages`` when it is one, so that a stream read as chat can be read again as that), and
    an ``anthropic-messages`` message whose role is neither ``user`` nor ``assistant`` is refused as the API
    refuses it (``Dialect.validate``). ``keys_checked=False`` skips the refusal of a key named twice inside a
    message (a Python call for every key: module docstring), only for bytes a checked reading has gone through whole
    (:class:`CheckedOnce`) or that :class:`ArrayWriter` wrote; a repeated key then keeps its last value."""
    anthropic = format == "anthropic-messages"
    read = format or "openai-chat"

    def refusal() -> str | None:
        """The words the whole reading's validation refuses the items with (``format_refusal``), all of them read
        again: only a refusal asks, and a stream naming no format read again in another (an Anthropic message met
        read as chat) asks nothing unless its caller does (``NotChat.refusal``)."""
        return format_refusal(_read(open_source, keys_checked), read, "messages")

    for index, message in enumerate(_read(open_source, keys_checked)):
        if foreign_item(message) is not None:  # another program's record (Dialect.validate), in the whole reading's words
            raise TranscriptError(foreign_refusal(message, f"messages[{index}]") or "")
        other = item_format(message)
        if other is not None and not (anthropic and other == "anthropic-messages"):
            raise NotChat(f"message {index} is an {other} item", other if other == "anthropic-messages" else None,
                          refusal=refusal)
        if anthropic and (refused := other_format(message, format, f"messages[{index}]")):
            # a Chat Completions message (Dialect.validate), in the whole reading's words (items of two formats)
            raise TranscriptError(refusal() or refused)
        if anthropic and message.get("role") not in ("user", "assistant"):
            raise TranscriptError(f"message {index}: role must be 'user' or 'assistant' in "
                                  "anthropic-messages (the system prompt is the top-level 'system')")
        yield message


def _read(open_source: Opener, keys_checked: bool) -> Iterator[dict[str, Any]]:
    """The messages of the stream ``open_source()`` opens, unchecked (:func:`messages_from`); the stream is opened
    again when it has to be read another way (module docstring), each new reading going on after the messages
    already given."""
    given, backend, path_free, literals = 0, None, False, False
    while True:
        try:
            with open_source() as raw:
                for index, message in enumerate(_messages(raw, backend, path_free=path_free,
                                                          keys_checked=keys_checked, literals=literals)):
                    if index >= given:
                        yield message
                        given += 1
            return
        except NotForTheCBackend as refused:
            backend = _other_backend(backend, refused)
        except PathsTooLong:
            path_free = True
        except LongNumberRun:
            literals = True


def fields_from(open_source: Opener) -> dict[str, Any]:
    """The request fields next to ``messages`` in the object transcript ``open_source()`` opens (``{}`` for
    arrays and JSONL), ``restorable`` among them, read path-free; opened again by the pure-Python backend when the
    C one cannot read it. A ``format`` of ``WINDOWED_FORMATS`` is among the fields (a named ``openai-chat`` too, so
    that its reader does not read it again as the format its messages show), and an unknown one, which the caller's
    validation of the request refuses as a whole reading's does; another known one is :class:`NotChat`."""
    backend, literals = None, False
    while True:
        try:
            with open_source() as raw:
                return _fields(raw, backend, literals)
        except NotForTheCBackend as refused:
            backend = _other_backend(backend, refused)
        except LongNumberRun:
            literals = True


def whole_read_mode(open_source: Opener, fields: dict[str, Any], defaults: dict[str, Any] | None = None) -> str:
    """The mode the transcript ``open_source()`` opens runs in when read whole, its ``fields`` (:func:`fields_from`)
    over ``defaults``: the one ``Transcript.compact_body`` sends, a request body's inferred as the API infers it
    (``seal`` without a ``mode`` or a ``decision_policy_ir``), a bare transcript's ``decision`` (docs/behaviour.md,
    "Compaction modes"). The streamed and windowed readings follow it (docs/scale.md): they compacted a request
    body naming neither in decision mode, which the same body read whole sealed."""
    from compactor.compaction.modes import infer

    with open_source() as raw:
        kind, _ = _sniff(raw)
    return infer(Transcript("openai-chat", [], dict(fields), request_body=kind == "object").compact_body(defaults))


def _messages(raw: IO[bytes], backend: Any, *, path_free: bool = False, keys_checked: bool = True,
              literals: bool = False) -> Iterator[dict[str, Any]]:
    """The messages of one reading of ``raw`` by ``backend`` (None: ijson's default, its C one): its items with
    the reader counting, or ``path_free``; their maps of :func:`_keys_once` when ``keys_checked``, else plain dicts.
    A :class:`NotForTheCBackend`, :class:`PathsTooLong` or :class:`LongNumberRun` when it is to be read another way
    (:func:`messages_from`); ``literals``: its number literals measured."""
    kind, replay = _sniff(raw)
    if kind == "jsonl":
        try:
            yield from _jsonl(replay)
        except (NotChat, NotJSON):
            raise
        except TranscriptError as exc:  # JSONL is no JSON document the API reads, whatever its lines hold (NotJSON)
            raise NotJSON(str(exc)) from exc
        return
    reader = _Watched(replay, counted=not path_free, surrogates=backend is None, literals=literals)
    keyed = _keys_once() if keys_checked else None
    mapped = keyed or dict
    # The body's levels, as bounded_loads counts them from its root (docs/reliability.md): a message is at level 1 of
    # an array, at level 2 of an object (its messages array at 1). It was given all 128 of its own, so a message 1
    # or 2 levels too deep for the API, the S3 path's whole reading and compactor compact below 32 MiB was compacted.
    message_levels = MAX_BODY_DEPTH - (1 if kind == "array" else 2)
    read = 0  # messages read whole: where a document that is not JSON broke
    try:
        if path_free:
            items = _path_free_messages(reader, kind, backend, keyed)
        else:
            items = (backend or ijson).items(reader, "item" if kind == "array" else "messages.item",
                                             use_float=True, buf_size=READ_BYTES, map_type=keyed)
        for index, message in enumerate(items):
            if type(message) is not mapped:
                raise TranscriptError(f"message {index} is not a JSON object")
            if keyed is not None:
                keyed.refuse_repeated()
            message = _as_loaded(message, keyed, message_levels)  # the limits of bounded_loads (docs/reliability.md)
            if message is None:
                raise NotJSON(f"message {index} is nested deeper than {MAX_BODY_DEPTH} levels (the body's)")
            if backend is not None:  # the pure-Python backend takes what the API refuses
                _check_as_api(message, f"message {index}")
            reader.settled()
            read += 1
            yield message
    except TranscriptError:
        raise
    except (ijson.JSONError, ValueError) as exc:  # ValueError: a number Python refuses to convert
        raise reader.taken() or _not_json(exc, read) from exc
    if reader.stopped is not None:  # stopped on a read the document did not need (blank after its end)
        raise reader.taken()


def _keys_once() -> Any:
    """The map type ijson's builders are given in one reading (C or pure-Python items, the path-free reading, the request
    fields), a class made for it: a map holds a plain dict (``plain``), which its parent map holds in its place, and
    notes a key set twice, which the builders would otherwise overwrite; ``refuse_repeated()`` then refuses it as the
    API words it. Noted, not raised: an exception raised inside the C backend's builder comes out as a
    ``SystemError``. A list holds the maps themselves (the builders make their lists): :func:`_as_loaded` puts their
    dicts in their place. A Python call for every map and every key set (docs/performance.md "Streamed reading")."""
    repeated: list[str] = []

    class KeysOnce:
        __slots__ = ("plain",)

        def __init__(self) -> None:
            self.plain: dict[str, Any] = {}

        def __setitem__(self, key: str, value: Any) -> None:
            plain = self.plain
            if key in plain:
                repeated.append(key)
            plain[key] = value.plain if type(value) is KeysOnce else value

        @staticmethod
        def refuse_repeated() -> None:
            if repeated:
                raise NotJSON(repeated_key_message(repeated[0]))

    return KeysOnce


def _as_loaded(value: Any, keyed: Any, limit: int) -> Any:
    """``value`` (a builder's, its maps of the type ``keyed``: :func:`_keys_once`; None: plain dicts) as
    ``json.loads`` builds it, the dict of each map in a list put in the map's place; None when a container sits
    deeper than ``limit`` (the root is level 0: ``jsonutil.depth_exceeds``). A level at a time, with a loop over each container: the depth check the
    messages had before, which finds the maps in lists as it goes."""
    if type(value) is keyed:
        value = value.plain
    elif type(value) is not list and type(value) is not dict:
        return value
    level, nodes = 0, [value]
    while nodes:
        if level > limit:
            return None
        deeper = []
        for node in nodes:
            if type(node) is list:
                for at, child in enumerate(node):
                    kind = type(child)
                    if kind is keyed:
                        node[at] = child = child.plain
                        deeper.append(child)
                    elif kind is dict or kind is list:
                        deeper.append(child)
            else:
                for child in node.values():
                    if type(child) is dict or type(child) is list:
                        deeper.append(child)
        nodes, level = deeper, level + 1
    return value


_STARTS = frozenset(("start_map", "start_array"))
_ENDS = frozenset(("end_map", "end_array"))


def _path_free_messages(reader: _Watched, kind: str, backend: Any, keyed: Any) -> Iterator[Any]:
    """The values ijson's items give (the root array's, or those named ``messages.item`` in an object: the
    ``messages`` array's items, a ``messages`` object's ``item`` members and a root ``messages.item`` member),
    built from the parser's events, which name no path; a level past :data:`MAX_LEVELS` is refused as it opens.
    The same values as the items, so a reading that goes on from here skips the messages given before; their maps
    of type ``keyed`` (:func:`_keys_once`; None: dicts), as the items'."""
    events = (backend or ijson).basic_parse(reader, use_float=True, buf_size=READ_BYTES)
    depth, item_depth, builder = 0, 0, None
    root_key = inner_key = opened = None  # the member of the root, of a messages object; how messages opened
    for event, value in events:
        if builder is not None:  # inside an item
            builder.event(event, value)
            if event in _STARTS:
                depth += 1
                _refuse_past_levels(depth)
            elif event in _ENDS:
                depth -= 1
                if depth == item_depth:
                    yield builder.value
                    builder = None
            continue
        if event == "map_key":
            if depth == 1:
                root_key = value
            elif depth == 2:
                inner_key = value
            continue
        if event in _ENDS:  # ``opened`` is set anew when a later messages member opens
            depth -= 1
            continue
        if kind == "array":
            at_item = depth == 1
        else:
            at_item = (depth == 1 and root_key == "messages.item") or (depth == 2 and root_key == "messages" and (
                opened == "start_array" or opened == "start_map" and inner_key == "item"))
        if event not in _STARTS:
            if at_item:
                yield value  # a scalar item: not a message, which the reading refuses
            continue
        if at_item:
            builder, item_depth = ijson.ObjectBuilder(map_type=keyed), depth
            builder.event(event, value)
        elif depth == 1 and root_key == "messages":
            opened = event
        depth += 1
        _refuse_past_levels(depth)


def _refuse_past_levels(depth: int) -> None:
    if depth > MAX_LEVELS:
        raise NotJSON(f"the transcript is nested deeper than its messages may be ({MAX_BODY_DEPTH} levels)")


def _fields(raw: IO[bytes], backend: Any, literals: bool = False) -> dict[str, Any]:
    """The request fields of one reading of ``raw`` by ``backend``, from the parser's events (path-free, a level
    past :data:`MAX_LEVELS` refused as it opens); a member named twice, or a key named twice inside a member's value,
    is refused, as the API refuses it."""
    kind, replay = _sniff(raw)
    if kind != "object":
        return {}
    reader = _Watched(replay, counted=False, surrogates=backend is None, literals=literals)
    fields: dict[str, Any] = {}
    depth, key, builder, messages_value = 0, None, None, False
    members: set[str] = set()
    keyed = _keys_once()
    try:
        for event, value in (backend or ijson).basic_parse(reader, use_float=True, buf_size=READ_BYTES):
            if messages_value:
                if event != "start_array":
                    raise TranscriptError("the transcript's 'messages' is not an array")
                messages_value = False
            if event in _STARTS:
                depth += 1
                _refuse_past_levels(depth)
                if depth > MAX_BODY_DEPTH + 1:  # the body's level depth - 1, past bounded_loads' (its root is 0)
                    raise NotJSON(f"JSON nested deeper than {MAX_BODY_DEPTH} levels")
            elif event in _ENDS:
                depth -= 1
            if depth == 1 and event == "map_key":  # a member of the object
                if value in members:  # the API refuses it (bounded_loads); items would give both messages arrays
                    raise NotJSON(repeated_key_message(value))
                members.add(value)
                if value == "messages.item":  # ijson's items would give it as a message
                    raise TranscriptError("the transcript has a member named 'messages.item', which a stream cannot "
                                          "tell from its messages")
                messages_value = value == "messages"
                key = value if value in FILE_FIELDS else None
                continue
            if key is None:
                continue
            if builder is None:
                builder = ijson.ObjectBuilder(map_type=keyed)
            builder.event(event, value)
            if depth == 1:  # the member's value is whole: a scalar, or its container closed
                keyed.refuse_repeated()
                fields[key], key, builder = _as_loaded(builder.value, keyed, MAX_LEVELS), None, None
    except TranscriptError:
        raise
    except (ijson.JSONError, ValueError) as exc:
        raise reader.taken() or _not_json(exc) from exc
    if reader.stopped is not None:
        raise reader.taken()
    # A format that is null (or another false value) is no format, as a file read whole takes it (transcripts.
    # read_transcript): it was an "unknown format 'None'", so the same file was compacted under the CLI's streaming
    # threshold or the S3 path's inline size and refused above them.
    # A named openai-chat stays among them: a stream that names it is not read again as the format its messages
    # show (docs/formats.md), as a whole read honours it; it was dropped, and an openai-chat body holding Anthropic
    # blocks was compacted as anthropic-messages over the CLI's streaming threshold and in S3 windowed jobs.
    # A format no reader knows stays among them too, for the request's validation to refuse as it refuses the file or
    # object read whole (422 "the transcript's request fields failed validation", the CLI's "invalid request:
    # format: ..."): the stream refused it in words of its own ("not a transcript: unknown format 'x'; one of ...").
    named = fields.pop("format", None)
    if named:
        if named in FORMAT_NAMES and named not in WINDOWED_FORMATS:
            raise NotChat(f"the transcript's format is {named}")
        fields["format"] = named
    if "messages" not in members:
        if "input" in members:
            raise NotChat("the transcript is an openai-responses request body (its items in 'input')")
        raise TranscriptError("expected a JSON array of messages, an object with a 'messages' array, or JSONL")
    if backend is not None:
        _check_as_api(fields, "the request fields")
    return fields


def _check_as_api(value: Any, where: str) -> None:
    """What the API refuses in a request and the pure-Python backend takes: a lone surrogate and a float out of
    range (``jsonutil.ensure_utf8_encodable``, whose encoding refuses the float). A number literal longer than the API
    reads never gets here: the reader stops before it (:class:`_Watched`)."""
    try:
        nodes = [value]
        while nodes:
            node = nodes.pop()
            for child in (node.values() if type(node) is dict else node if type(node) is list else ()):
                if type(child) is float and not math.isfinite(child):
                    raise NotJSON(f"{where}: number out of range: {child}")
                if type(child) is dict or type(child) is list:
                    nodes.append(child)
        ensure_utf8_encodable(value)
    except NotJSON:
        raise
    except ValueError as exc:
        raise TranscriptError(f"{where}: {exc}") from None


def _refused_integer(exc: Exception) -> bool:
    """yajl's own error, whose text starts with its reason (the input's excerpt follows it)."""
    return str(exc).startswith("parse error: integer overflow")


# What a stream that is not UTF-8 is refused with, as the CLI and the S3 path refuse the file or object read whole
# ("not UTF-8 text"): ijson's C backend said "not JSON: b'lexical error: invalid bytes in UTF8 string.\n ...'" (its
# bytes' repr), the pure-Python one "not JSON: 'utf-8' codec can't decode byte 0xed in position 31 ..." (a position
# in one read).
NOT_UTF8 = "not UTF-8 text (an invalid byte in a string)"


def _not_json(exc: Exception, read: int | None = None) -> TranscriptError:
    """Why a document's reading failed, in one line, after its ``read`` messages when they are counted: yajl's text (the
    C backend's) goes on with lines of the input around the place and an arrow under it, which a failure record
    (``failed/<rel>``, the job's status) held as they were ("not JSON: parse error: premature EOF\\n   ...\\n
    (right here) ------^\\n"), and said nowhere how far the document read."""
    if isinstance(exc, UnicodeDecodeError):  # the C backend's UTF-8 of a lone low surrogate escape, or bytes that are
        # no UTF-8 (ED A0 80): the pure-Python backend tells them apart
        return SurrogateEscape("a string the C backend cannot decode: the stream is to be read again by the "
                               "pure-Python backend")
    if isinstance(exc, ijson.JSONError) and _refused_integer(exc):
        return IntegerOutside64Bits("an integer outside 64 bits: the stream is to be read again by the "
                                    "pure-Python backend")
    reason = exc.args[0] if isinstance(exc, ijson.JSONError) and exc.args else exc
    if isinstance(reason, UnicodeDecodeError) or (
            isinstance(reason, bytes) and reason.startswith(b"lexical error: invalid bytes in UTF8 string")):
        return NotJSON(NOT_UTF8)
    text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    text = text.strip().split("\n", 1)[0].strip()[:200]
    return NotJSON(f"not JSON: {text}" + ("" if read is None else f" (after {read} messages read whole)"))


def _jsonl(reader: _Replay) -> Iterator[dict[str, Any]]:
    buffered = _lines(reader)
    for number, line in enumerate(buffered, start=1):
        if not line.strip():
            continue
        try:
            record = bounded_loads(line)
        except JSONLimitError as exc:
            raise NotJSON(f"line {number} is not JSON: {exc.placed(line=False)}") from exc
        messages = _jsonl_record_messages(record, number)
        if b"\\ud" in line or b"\\uD" in line:  # a surrogate escape: paired, or lone as the API refuses
            _check_as_api(messages, f"line {number}")  # the messages, not the record's bookkeeping
        yield from messages


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


class CheckedOnce:
    """A run's readings of the messages of the stream ``open_source()`` opens (the caller's bytes, read several
    times: the scan, its second read, the windows, the result): their keys checked (:func:`messages_from`) until one
    reading has gone through the stream whole, the readings after it unchecked. ``open_source`` must open the same
    bytes each time (:func:`opener`, an object version)."""

    def __init__(self, open_source: Opener, format: str | None = None) -> None:
        self.open_source, self.format = open_source, format
        self.checked_whole = False

    def __call__(self) -> Iterator[dict[str, Any]]:
        checked = not self.checked_whole
        yield from messages_from(self.open_source, self.format, keys_checked=checked)
        self.checked_whole = True  # a reading abandoned or refused leaves the next one checked


class FileChanged(TranscriptError):
    """The file a run reads several times is not the one it read first."""


CHANGED = "changed while it was compacted (it is read several times): run again once nothing writes it"


class _Digested:
    """A file read through, a CRC-32 of the bytes it gives kept (:attr:`crc`; zlib's, about 1.4 GB/s here: a reading of
    32 MB of corpus messages took 0.222 s against 0.213 s without it, 0.250 s with BLAKE2); :attr:`ended` once a read
    gave none (or read the rest). A CRC sees every edit of 32 consecutive bits or fewer, and others but
    once in about four billion: a file changed by accident, not by someone forging a collision with their own file."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.crc, self.ended = handle, 0, False

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.crc = zlib.crc32(data, self.crc)
        self.ended |= size < 0 or (size > 0 and not data)  # a read of 0 bytes gives none at any place (_Replay's)
        return data


def opener(path: str) -> Opener:
    """A callable opening ``path`` for reading, once per pass. Each opening is the file as first opened (its
    device, inode, size and modification time, when it opens and when its reading ends), and each reading that goes
    through it whole read the bytes the first such reading read (a CRC-32 of what it read: a file edited in place
    keeping its size and modification time passed the first check), else a :class:`FileChanged`: a run's
    windows were cut from its first readings, and its readings after the first whole one skip the key check
    (:class:`CheckedOnce`). A reading left before its end is compared by the first check only."""
    first: list[tuple[int, int, int, int]] = []
    whole: list[int] = []  # the CRC of the first reading that went through the file

    def same(handle: IO[bytes]) -> None:
        stat = os.fstat(handle.fileno())
        seen = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if not first:
            first.append(seen)
        elif seen != first[0]:
            raise FileChanged(CHANGED)  # the caller names the file, as it names it for every refusal

    @contextmanager
    def opened() -> Iterator[IO[bytes]]:
        with open(path, "rb") as handle:
            same(handle)
            digested = _Digested(handle)
            yield digested  # type: ignore[misc]
            same(handle)
            if digested.ended:
                if not whole:
                    whole.append(digested.crc)
                elif digested.crc != whole[0]:
                    raise FileChanged(CHANGED)

    return opened
