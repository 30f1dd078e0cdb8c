"""JSON helpers shared by every layer: the two byte measures, strict parsing and depth bounds.

* dense size (the reference's "compact size", docs/behaviour.md#requests-and-responses): UTF-8 bytes of JSON with ``,``/``:`` separators and
  non-ASCII emitted raw.
* ASCII wire size: bytes of JSON with default separators and every non-ASCII character escaped.
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Callable
from itertools import chain, compress
from typing import Any

from compactor.patterns import pattern


def _encoder(item_separator: str, key_separator: str, ensure_ascii: bool, allow_nan: bool = False
             ) -> Callable[[Any], str]:
    """``json.JSONEncoder(...).encode`` with those settings, made once.

    ``JSONEncoder.encode`` builds a new C encoder (and a closure) on every call, which costs more than
    encoding a small value; the hot path encodes about a thousand values per request (docs/performance.md).
    The encoder made here is reused: its output is the same text, and the same ``ValueError`` (NaN,
    Infinity, unless allowed) and ``TypeError`` (what JSON cannot hold). It does not look for reference cycles (the values
    are trees: parsed JSON and what the code builds from it), so a cycle raises ``RecursionError``."""
    reference = json.JSONEncoder(separators=(item_separator, key_separator), ensure_ascii=ensure_ascii,
                                 allow_nan=allow_nan, check_circular=False)
    make = json.encoder.c_make_encoder
    if make is None:  # an interpreter without the C accelerator
        return reference.encode
    escape = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    encode = make(None, reference.default, escape, None, key_separator, item_separator, False, False, allow_nan)
    join = "".join

    def encoded(value: Any) -> str:
        return join(encode(value, 0))

    return encoded


_dense = _encoder(",", ":", ensure_ascii=False)
_wire = _encoder(", ", ": ", ensure_ascii=True)
_spaced = _encoder(", ", ": ", ensure_ascii=False, allow_nan=True)


def dense_dumps(value: Any) -> str:
    """Dense JSON text (separators ``,``/``:``, non-ASCII raw, NaN/Infinity rejected)."""
    return _dense(value)


def dense_size(value: Any) -> int:
    """UTF-8 byte length of :func:`dense_dumps`."""
    return utf8_len(_dense(value))


def utf8_len(text: str) -> int:
    """UTF-8 byte length of a string (ASCII fast path)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


# What the dense encoder writes as it is among the ASCII characters: all but the control characters, ``"``
# and ``\\``. Of those, ``"``, ``\\``, backspace, form feed, newline, return and tab take a two-character
# escape, every other control character a six-character ``\\u00XX``.
_UNESCAPED_ASCII = bytes(code for code in range(0x20, 0x80) if code not in b'"\\')
_SHORT_ESCAPED = b'"\\\b\f\n\r\t'


def dense_str_size(text: str) -> int:
    """:func:`dense_size` of a string, without encoding it when it is ASCII: its length, the two quotes, one
    more byte for each character with a short escape and five more for each other control character
    (docs/performance.md)."""
    if not text.isascii():
        return utf8_len(_dense(text))
    escaped = text.encode("ascii").translate(None, _UNESCAPED_ASCII)
    if not escaped:
        return len(text) + 2
    long_escaped = len(escaped.translate(None, _SHORT_ESCAPED))
    return len(text) + 2 + len(escaped) + 4 * long_escaped


def json_text_size(text: str) -> int:
    """:func:`dense_size` of ``text`` when ``text`` is JSON text from :func:`dense_dumps` or
    :func:`ascii_dumps` (or cut from it), computed instead of re-encoded: the encoders escape every
    control character, so quoting it only adds its two quotes and a backslash before each ``"`` and ``\\``.
    For ASCII text without a DEL (``\\x7f``, which the ASCII encoder escapes and the dense one does not) it is
    also the :func:`ascii_wire_size` (docs/performance.md)."""
    return utf8_len(text) + 2 + text.count('"') + text.count("\\")


def json_text_escaped(text: str) -> str:
    """:func:`dense_dumps` of ``text`` without its two quotes, when ``text`` is JSON text as in
    :func:`json_text_size`: only ``"`` and ``\\`` are escaped (two ``str.replace``; docs/performance.md)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def dense_plain_str(text: str) -> str:
    """:func:`dense_dumps` of an ASCII ``text`` whose only control characters are tab, newline and return, and
    which holds no DEL (the caller knows it: ``salience.escapes_plainly``). The ``unicode_escape`` codec then
    writes what the encoder writes (``\\\\``, ``\\t``, ``\\n``, ``\\r``, the rest as it is) but for the
    double quotes, which it leaves as they are; one pass in C, about twice as fast as the encoder's escape on
    real tool outputs (docs/performance.md)."""
    return '"' + _plain_escaped(text) + '"'


def _plain_escaped(text: str) -> str:
    return text.encode("unicode_escape").replace(b'"', b'\\"').decode("ascii")


def dense_with_plain_member_at(value: dict[Any, Any], key: str, text: str) -> tuple[str, int]:
    """:func:`dense_dumps` of a ``value`` whose member ``key`` is the string ``text`` as in :func:`dense_plain_str`
    (the members up to it encoded with an empty string in its place, those after it apart: a member's text does
    not depend on the others; the string written into its quotes), and where the string's escaped text starts in
    it (after its opening quote; when ``key`` is the last member, that text ends before the closing ``"}``)."""
    if next(reversed(value)) == key:  # the last member: one encoding, which ends with its ``""}``
        head = _dense({**value, key: ""})[:-2]
        return "".join([head, _plain_escaped(text), '"}']), len(head)
    keys = list(value)
    at = keys.index(key)
    head = _dense({**{k: value[k] for k in keys[:at]}, key: ""})[:-2]  # up to the member's opening quote
    after = _dense({k: value[k] for k in keys[at + 1:]})  # ``{`` and the members after it
    return "".join([head, _plain_escaped(text), '",', after[1:]]), len(head)


# A model call's body (:func:`dense_body`): the strings of at least BODY_QUOTED_MIN characters among the members of
# its dicts and lists of at most _BODY_WALKED_MEMBERS members within _BODY_WALKED_LEVELS levels (a chat message's
# content: its prompt) are quoted by replacements when none of their UTF-8 bytes is a control character (which a
# translation deleting _NOT_CONTROL finds).
BODY_QUOTED_MIN = 2048
_BODY_WALKED_MEMBERS = 8
_BODY_WALKED_LEVELS = 3
_NOT_CONTROL = bytes(range(0x20, 0x100))


def dense_body(value: Any) -> bytes:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")``, the body of
    every HTTP model call (``providers.http.post_json``): the same bytes, and the same errors.

    The encoder looks at every character of a string to escape it. A string without a control character needs
    only a backslash before each ``"`` and ``\\``: a ``bytes.translate`` of its UTF-8 finds whether it holds one,
    and two ``bytes.replace`` write the escapes, in about two fifths of the encoder's time on a summary prompt (the JSON
    text of a batch's items, about 50 KB a call; docs/performance.md, "The calls' bodies"). So the body's first
    levels are put together here: a dict with string keys or a list of at most 8 members, within three levels (a
    chat body, its messages, each message), member by member, a long string in it quoted so, everything else by
    the dense encoder (a container of more members, such as a decision's questions, whole: walking it costs more
    than it saves). A key of another type, or any error: the body is encoded by ``json.dumps``, which raises what
    it raised."""
    out: list[str] = []
    try:
        _body_parts(value, out, _BODY_WALKED_LEVELS)
        return "".join(out).encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # a lone surrogate's UnicodeEncodeError among them
        pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _body_parts(value: Any, out: list[str], levels: int) -> None:
    kind = type(value)
    if kind is str:
        data = value.encode("utf-8") if len(value) >= BODY_QUOTED_MIN else None  # a lone surrogate raises here
        if data is None or data.translate(None, _NOT_CONTROL):  # short, or a control character: the encoder's
            out.append(_dense(value))
        else:  # on the UTF-8, where a replacement costs about a third of what it costs on the text
            out += ('"', data.replace(b"\\", b"\\\\").replace(b'"', b'\\"').decode("utf-8"), '"')
    elif levels and (kind is dict or kind is list) and 0 < len(value) <= _BODY_WALKED_MEMBERS:
        separator = "{" if kind is dict else "["
        if kind is dict:
            for key, item in value.items():
                if type(key) is not str:
                    raise TypeError("a key that is not a string")  # json.dumps's rules for it
                out += (separator, _dense(key), ":")
                separator = ","
                _body_parts(item, out, levels - 1)
            out.append("}")
        else:
            for item in value:
                out.append(separator)
                separator = ","
                _body_parts(item, out, levels - 1)
            out.append("]")
    else:
        out.append(_dense(value))


def dense_join(texts: list[str]) -> str:
    """:func:`dense_dumps` of a list, from the dense texts of its elements."""
    return "[" + ",".join(texts) + "]"


def dense_join_size(sizes: list[int]) -> int:
    """:func:`dense_size` of a list (or an object), from the dense sizes of its elements (members)."""
    return 2 + sum(sizes) + max(0, len(sizes) - 1)


def dense_size_bound(value: Any) -> int | None:
    """An upper bound of :func:`dense_size` found without encoding: at most 6 bytes a string character
    (a ``\\u`` escape), plus quotes, separators and the numbers' and literals' text. None when ``value`` holds
    anything but strings, finite numbers, booleans, null, lists and string-keyed objects."""
    total, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            total += 6 * len(node) + 2
        elif node is None or isinstance(node, bool):
            total += 5
        elif isinstance(node, int):
            if not -10**20 < node < 10**20:
                return None
            total += 21
        elif isinstance(node, float):
            if not math.isfinite(node):
                return None
            total += 24  # the longest float repr, e.g. -2.2250738585072014e-308
        elif isinstance(node, dict):
            total += 2 + 2 * len(node)
            for key, item in node.items():
                if not isinstance(key, str):
                    return None
                total += 6 * len(key) + 2
                stack.append(item)
        elif isinstance(node, list):
            total += 2 + len(node)
            stack.extend(node)
        else:
            return None
    return total


def ascii_dumps(value: Any) -> str:
    """JSON with default separators and all non-ASCII escaped (``json.dumps`` defaults)."""
    return _wire(value)


def ascii_wire_size(value: Any) -> int:
    """Byte length of :func:`ascii_dumps` (pure ASCII, so characters == bytes)."""
    return len(_wire(value))


def spaced_dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)``: default separators, non-ASCII raw, NaN written as such."""
    return _spaced(value)


def ensure_utf8_encodable(value: Any) -> None:
    """Raise ``ValueError`` when a string in ``value`` holds a lone surrogate (a valid JSON escape such as
    ``"\\ud800"`` that no UTF-8 text can carry, so no size can be measured and no answer written).

    Plain JSON is checked string by string (an ASCII string holds none) instead of being serialised once
    more (docs/performance.md); anything else is encoded and raises what encoding raises."""
    if _plain_and_encodable(value):
        return
    try:
        dense_dumps(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("text must be valid Unicode: it contains a lone surrogate "
                         f"(\\u{ord(exc.object[exc.start]):04x}){_first_unencodable_item(value)}") from None


def _first_unencodable_item(value: Any) -> str:
    """Where a list's lone surrogate is (`` in its item 3``), so a 422 about a transcript's ``messages`` names the
    message; ``""`` for anything else. Only on the failure path: each item is encoded until one raises."""
    if type(value) is not list:
        return ""
    for index, item in enumerate(value):
        try:
            dense_dumps(item).encode("utf-8")
        except UnicodeEncodeError:
            return f" in its item {index}"
        except (TypeError, ValueError):
            return ""
    return ""


# Ints of up to this many bits have far fewer decimal digits than Python's conversion limit (4300 by default).
_PLAIN_INT_BITS = 4000


def _plain_and_encodable(value: Any) -> bool:
    """True when ``value`` is plain JSON (string keys, finite floats, ints of a few thousand bits, each
    container held once) whose every string encodes to UTF-8, found by looking at each string instead of
    encoding the whole value; False when it is not, or may not be (the caller then encodes it and raises
    what encoding raises)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is str:
            if not node.isascii() and not _encodable(node):
                return False
        elif kind is dict or kind is list:
            if id(node) in seen:  # shared (or a cycle): let the encoder judge
                return False
            seen.add(id(node))
            if kind is dict:
                for key in node:
                    if type(key) is not str or not (key.isascii() or _encodable(key)):
                        return False
                stack.extend(node.values())
            else:
                stack.extend(node)
        elif kind is float:
            if not math.isfinite(node):
                return False
        elif kind is int:
            if node.bit_length() > _PLAIN_INT_BITS:  # past it, the encoder may refuse the int's digits
                return False
        elif node is not None and kind is not bool:
            return False
    return True


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_safe(text: str) -> str:
    """``text`` with every lone surrogate replaced by ``?``: short text from outside (a provider's error
    message) that must reach traces and answers, which UTF-8 writes (docs/reliability.md "Bounded answers")."""
    if text.isascii() or _encodable(text):
        return text
    return text.encode("utf-8", "replace").decode("utf-8")


# The escape of a UTF-16 surrogate: the only way JSON text that is valid UTF-8 holds a lone one.
_SURROGATE_ESCAPE = pattern(r"\\u[dD][89abcdefABCDEF]")


def ensure_parsed_encodable(text: str, value: Any) -> None:
    """:func:`ensure_utf8_encodable` of ``value`` parsed from the JSON ``text`` (itself valid Unicode): the value
    is walked only when the text holds a surrogate's escape, else no string in it can hold one."""
    if _SURROGATE_ESCAPE.search(text) is not None:
        ensure_utf8_encodable(value)  # an escaped lone surrogate ("\\ud800") parses but is no text


class NestedTooDeep(ValueError):
    """JSON nested deeper than a reader's bound, or than the parser's recursion reads: :func:`loads_within`."""

    def __init__(self, max_depth: int | None) -> None:
        super().__init__(f"JSON nested deeper than {max_depth} levels" if max_depth is not None
                         else "JSON nested deeper than the parser reads")


def loads_within(text: str | bytes, *, max_depth: int | None = None, decode: Callable[[Any], Any] = json.loads) -> Any:
    """``decode(text)`` (``json.loads``, or a decoder of ours), where JSON nested deeper than ``max_depth`` (the root is
    level 0; None: as deep as the parser reads) is a :class:`NestedTooDeep`, a ``ValueError`` as text that is not JSON
    is. The one place a JSON reader meets nesting past the parser's recursion: ``json.loads`` raises
    ``RecursionError`` there (``[`` repeated 100,000 times), not ``ValueError``, which escaped its callers as a 500,
    an unclassified provider failure or a traceback (docs/reliability.md). Every reader of JSON that may be nested
    that deep reads through it: :func:`bounded_loads`, :func:`strict_loads`, :func:`embedded_json`, the providers'
    error bodies."""
    try:
        value = decode(text)
    except RecursionError:
        raise NestedTooDeep(max_depth) from None
    if max_depth is not None and depth_exceeds(value, max_depth):
        raise NestedTooDeep(max_depth)
    return value


class StrictJSONError(ValueError):
    """Raised by :func:`strict_loads` for duplicate keys, non-finite numbers or bad syntax."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # in C: the keys are looked at one by one only when one repeats
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError(f"duplicate key: {key!r}")
            seen.add(key)
    return out


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of ``pairs``, or :class:`_DuplicateKey` when a key repeats (bounded_loads' ``object_pairs_hook``:
    about 0.15 ms on the 900 KB request's 650 objects, docs/performance.md)."""
    value = dict(pairs)  # in C: the keys are looked at one by one only when one repeats
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return value


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"non-finite number: {name}")


def is_finite_number(value: Any) -> bool:
    """True for an int or float (not a bool) that is finite: the one "is a number" test of the code base."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a double
        return False


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"non-finite number: {text}")
    return value


_STRICT_DECODER: json.JSONDecoder | None = None


def strict_loads(text: str | bytes) -> Any:
    """Parse JSON rejecting duplicate keys, NaN/Infinity and overflowing numbers. A ``str`` is decoded by
    one decoder made on first use (``json.loads`` with these hooks makes a decoder on every call, about
    1.3 µs); bytes, and text with a byte order mark, go through ``json.loads`` as before."""
    global _STRICT_DECODER
    try:
        if type(text) is str and not text.startswith("\ufeff"):
            if _STRICT_DECODER is None:
                _STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_reject_constant,
                                                   parse_float=_finite_float)
            return loads_within(text, decode=_STRICT_DECODER.decode)
        return loads_within(text, decode=_strict_json_loads)
    except StrictJSONError:
        raise
    except ValueError as exc:  # NestedTooDeep among them
        raise StrictJSONError(str(exc)) from exc


def _strict_json_loads(text: str | bytes) -> Any:
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant,
                      parse_float=_finite_float)


def strict_loads_utf8(data: str | bytes) -> Any:
    """:func:`strict_loads` of JSON that must be UTF-8 text, as a model provider's answer must be to reach an
    answer Compactor writes (docs/reliability.md "Bounded answers"): bytes that are not UTF-8 (such as ED A0 80,
    a surrogate encoded as if it were a character, which ``json.loads`` of bytes lets through), a ``str`` holding
    a surrogate, and a string escaping a lone surrogate (``"\\ud800"``) are a :class:`StrictJSONError` too. Bytes
    are decoded once, as ``json.loads`` would (a leading byte order mark is skipped). A short text is searched for
    a surrogate's escape (:func:`ensure_parsed_encodable`), a longer one's value checked string by string: a
    decision answer holds many small objects, a chat answer few strings in many bytes (docs/performance.md)."""
    if type(data) is str:
        text = data
        if not text.isascii() and not _encodable(text):
            raise StrictJSONError("text is not valid Unicode (lone surrogate)")
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        if text.startswith("\ufeff"):
            text = text[1:]
    value = strict_loads(text)
    try:
        if len(text) <= _ESCAPE_SEARCHED_MAX:
            ensure_parsed_encodable(text, value)
        else:
            ensure_utf8_encodable(value)
    except ValueError as exc:
        raise StrictJSONError(str(exc)) from None
    return value


# The longest answer text searched for a surrogate's escape rather than walked (about 4 µs of search here, what a
# walk of a chat answer's few strings costs; a decision answer's walk takes about 12 µs at 1 KB).
_ESCAPE_SEARCHED_MAX = 8192


MAX_BODY_DEPTH = 128
"""Deepest container nesting a request body or S3 object may have (the root is level 0)."""
MAX_NUMBER_CHARS = 100
"""Longest number literal a request body or S3 object may hold (Python refuses ints past 4,300 digits)."""
LONG_NUMBER = f"number literal longer than {MAX_NUMBER_CHARS} characters"
"""How every reader refuses a number literal past :data:`MAX_NUMBER_CHARS` (:func:`bounded_loads`, the streamed
reading: ``transcript_stream``)."""


BYTE_ORDER_MARK = "\ufeff"
SECOND_BYTE_ORDER_MARK = "two byte order marks at the start: a body or file has at most one"
"""Why a text is refused that starts with a byte order mark after the one every reader skips: every path says it
(the API, the S3 path, the CLI, the streamed reading), where json.loads said "Unexpected UTF-8 BOM (decode using
utf-8-sig)" and the S3 path and the CLI read the transcript (docs/behaviour.md#requests-and-responses)."""


class JSONLimitError(json.JSONDecodeError):
    """Raised by :func:`bounded_loads`: syntax errors and the depth/number limits, with a clear message.

    A ``JSONDecodeError`` so that JSON decoders' callers (Powertools' body parsing) answer it as bad JSON."""

    def __init__(self, message: str, doc: str = "", pos: int = 0, *, syntax: bool = False) -> None:
        super().__init__(message, doc, pos)
        self.msg = message  # without JSONDecodeError's " : line 1 column 1 (char 0)" suffix
        self.syntax = syntax  # True: not JSON at all; False: JSON over a limit

    def placed(self, *, line: bool = True) -> str:
        """The message with where the parser stopped, for a syntax error: ``Expecting ',' delimiter at line 5001,
        column 1`` (``line=False``: ``at column 1``, in a line of JSONL); a limit's message as it is. :attr:`msg` alone
        read "line 646 is not JSON: Invalid control character at" (json's words wait for the place), and a document
        broken at its 5,001st line gave no line at all."""
        if not self.syntax or not self.doc:
            return self.msg
        where = f"line {self.lineno}, column {self.colno}" if line else f"column {self.colno}"
        return f"{self.msg} {where}" if self.msg.endswith(" at") else f"{self.msg} at {where}"


def _bounded_number(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_bounded(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise JSONLimitError(LONG_NUMBER)
        value = parse(text)
        if isinstance(value, float) and not math.isfinite(value):
            raise JSONLimitError(f"number out of range: {text[:40]}")
        return value

    return parse_bounded


_BOUNDED_INT = _bounded_number(int)
_BOUNDED_FLOAT = _bounded_number(float)


def _no_constant(name: str) -> Any:
    raise JSONLimitError(f"{name} is not JSON")


def bounded_loads(text: str | bytes, *, max_depth: int = MAX_BODY_DEPTH) -> Any:
    """Parse untrusted JSON (request bodies, S3 objects) within limits (docs/reliability.md).

    Nesting deeper than ``max_depth``, number literals over :data:`MAX_NUMBER_CHARS` characters,
    ``NaN``/``Infinity`` and overflowing floats raise :class:`JSONLimitError` (a ``JSONDecodeError``),
    never ``RecursionError`` or ``ValueError``. An object naming a key twice raises it too (naming the key):
    ``json.loads`` keeps the last value and drops the other without a word, so a body with two ``messages``
    compacted one transcript and lost the other (docs/behaviour.md#requests-and-responses).
    A leading byte order mark is skipped, in text as in bytes (``json.loads`` skips it only in bytes): every
    path reads a body or file that starts with one as the JSON after it (docs/behaviour.md#requests-and-responses).
    Bytes must be UTF-8, as a body or file read whole must be: ``json.loads`` read UTF-16 and UTF-32 too and let a
    surrogate encoded as if it were a character (ED A0 80) through as a lone surrogate, and named an invalid byte
    an "unreadable number".
    """
    if type(text) is not str:
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONLimitError(f"not UTF-8 text (an invalid byte at offset {exc.start})") from None
    if text.startswith(BYTE_ORDER_MARK):
        text = text[1:]
        if text.startswith(BYTE_ORDER_MARK):
            raise JSONLimitError(SECOND_BYTE_ORDER_MARK, syntax=True)
    try:
        return loads_within(text, max_depth=max_depth, decode=_bounded_json_loads)
    except JSONLimitError:
        raise
    except _DuplicateKey as repeated:
        raise JSONLimitError(repeated_key_message(repeated.key)) from None
    except json.JSONDecodeError as exc:
        raise JSONLimitError(exc.msg, exc.doc, exc.pos, syntax=True) from None
    except NestedTooDeep as exc:
        raise JSONLimitError(str(exc)) from None
    except ValueError as exc:  # a number Python refuses to convert
        raise JSONLimitError(f"unreadable number: {str(exc)[:80]}") from None


def _bounded_json_loads(text: str) -> Any:
    return json.loads(text, parse_int=_BOUNDED_INT, parse_float=_BOUNDED_FLOAT, parse_constant=_no_constant,
                      object_pairs_hook=_unique_pairs)


def repeated_key_message(key: str) -> str:
    """How every reader of a request body names a key that one of its objects names twice (the key cut to 80
    characters)."""
    shown = key if len(key) <= 80 else key[:80] + "…"
    return f"the key {json.dumps(shown, ensure_ascii=False)} appears twice in one object: send each key once"


def embedded_json(text: str, *, max_depth: int = MAX_BODY_DEPTH) -> tuple[bool, Any]:
    """``(True, value)`` for ``text`` holding one JSON value (``json.loads``), else ``(False, None)``: not
    JSON, or nested deeper than ``max_depth`` (the request's own bound, docs/reliability.md). For JSON a
    transcript carries inside a string (a tool call's ``arguments``), which the request's depth check does not
    see: parsed as it was, a string of 10,000 ``[`` raised ``RecursionError`` and failed the request with a
    500 (docs/behaviour.md#errors)."""
    try:
        return True, loads_within(text, max_depth=max_depth)
    except ValueError:  # NestedTooDeep among them
        return False, None


def holds_json_container(text: str) -> bool:
    """Whether ``text`` is one JSON array or object, parsed strictly (no key twice, no ``NaN``, no number past a
    float's range) and at most ``MAX_BODY_DEPTH`` levels deep: what a prompt shows as that JSON instead of quoting
    it (docs/performance.md "Model input"). The bound is fixed: how deep the parser itself reads depends on the
    interpreter and on the caller's C stack, and the same text must make the same prompt in every process."""
    if text[:1] not in ("[", "{"):
        return False
    # A text of at most MAX_BODY_DEPTH brackets (most evidence, 1,200 characters at most) cannot be deeper: its depth
    # is not looked into again once parsed, which took most of the time (docs/performance.md "Model input").
    shallow = text.count("[") + text.count("{") <= MAX_BODY_DEPTH
    try:
        value = strict_loads(text) if shallow else loads_within(text, max_depth=MAX_BODY_DEPTH, decode=strict_loads)
    except ValueError:  # not JSON, or nested deeper than a body may be
        return False
    return isinstance(value, (list, dict))


class _ContainerTypes(dict):  # type: ignore[type-arg]
    """Whether a type is a ``dict`` or ``list`` (or a subclass of one), by type, learnt on first sight."""

    def __missing__(self, kind: type) -> bool:
        if len(self) >= 256:  # a process's value types are few; bounded all the same
            self.clear()
        self[kind] = answer = issubclass(kind, (dict, list))
        return answer


_is_container_type = _ContainerTypes().__getitem__
_MANY_CHILDREN = 16


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when a container sits at a level deeper than ``limit`` (the root is level 0); a container is a
    value whose type is ``dict`` or ``list`` or a subclass of one.

    One level at a time, and only containers are looked into. A level of many children finds its containers
    by their types in C (``map``, ``compress``) instead of one ``isinstance`` a child in a comprehension: a
    900 KB request's flow input (about 1,100 values) is walked in about two thirds of the time
    (docs/performance.md)."""
    level, containers = 0, [value] if _is_container_type(type(value)) else []
    while containers:
        if level > limit:
            return True
        if len(containers) == 1:
            node = containers[0]
            children: Any = node.values() if isinstance(node, dict) else node
        else:
            children = list(chain.from_iterable([node.values() if isinstance(node, dict) else node
                                                 for node in containers]))
        # a container held several times at one level (shared subterms) is looked into once
        if len(children) < _MANY_CHILDREN:
            containers = list({id(child): child for child in children if _is_container_type(type(child))}.values())
        else:
            containers = list({id(child): child for child in compress(
                children, map(_is_container_type, map(type, children)))}.values())
        level += 1
    return False
