"""Salience hints of decision mode: the names (identifiers and paths) of a batch that a later message uses
again (later than the message where the name occurs, inside the batch or after it). They go into the
summary prompt so that any summarizer, model or built-in, keeps them (docs/offline-offers.md)."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator
from typing import Any

from compactor.chat import Message, call_function, content_text
from compactor.jsonutil import (
    MAX_BODY_DEPTH, ascii_wire_size, dense_dumps, dense_size, depth_exceeds, embedded_json, json_text_size, spaced_dumps)
from compactor.patterns import pattern

MAX_NAMES = 160
MAX_NAMES_BYTES = 3000
_TOKEN = pattern(r"[A-Za-z_~./][\w./~@+-]*")  # stored by the layer's build (compactor.patterns)
_IDENTIFIER = pattern(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _is_name(token: str) -> bool:
    """Paths (``a/b``, ``x.py``) and code-like identifiers (snake_case, camelCase, dotted); not words."""
    if len(token) < 4 or len(token) > 120:
        return False
    if "/" in token:
        return "//" not in token and _has_letter(token)
    return bool(_IDENTIFIER.fullmatch(token)) and is_code_identifier(token)


def is_code_identifier(token: str) -> bool:
    """Whether a word-like token reads as code: dotted, snake_case, or camelCase/PascalCase with an
    inner capital (``x.y``, ``read_file``, ``parseArgs``); not an ordinary word."""
    if "." in token:
        return True
    core = token.strip("_")
    if "_" in core:
        return _has_letter(core)
    if core.isascii():  # as below, by case changes in C (the ASCII letters are the ASCII characters with a case)
        rest = core[1:]
        return rest.lower() != rest and core.upper() != core
    return any(c.isupper() for c in core[1:]) and any(c.islower() for c in core)


def _has_letter(token: str) -> bool:
    """``any(c.isalpha() for c in token)``, for an ASCII token by its case changes in C: the ASCII letters are the
    ASCII characters with a case (a generator per token cost about 1 µs of judging each new path;
    docs/performance.md)."""
    if token.isascii():
        return token.upper() != token or token.lower() != token
    return any(c.isalpha() for c in token)


_TAG = pattern(r"</?[A-Za-z_][\w-]*>")


# The tokens are what ``_TOKEN.findall`` finds: in each run of _RUN_CHARS, the run without the characters
# no token starts with (_NOT_START) at its front. ``translate`` and ``split`` cut a text into those runs at
# C speed, without the regex engine's work per character, and each distinct run is judged once
# (docs/performance.md). The translation is of bytes, by a 256-byte table: ``str.translate`` by a mapping
# costs a few microseconds a call even on a short text.
_RUN_CHARS = frozenset(string.ascii_letters + string.digits + "_./~@+-")
_NOT_START = "0123456789@+-"
_BYTE_SEPARATORS = bytes(code if code >= 0x80 or chr(code) in _RUN_CHARS else 0x20 for code in range(256))
# An ASCII text is translated by this table instead: the same runs (``str.split`` takes \x1c for whitespace, as it
# takes a space), but the control characters that the ``unicode_escape`` codec escapes otherwise than the JSON
# encoder (all but tab, newline and return) and DEL become \x1c, so that a translated content without \x1c may be
# escaped by the codec (:func:`escapes_plainly`, ``jsonutil.dense_plain_str``; docs/performance.md). ``bytes.split``
# takes no \x1c for whitespace: texts that are not ASCII keep _BYTE_SEPARATORS.
_ODD_CONTROLS = bytes([*range(0x09), 0x0b, 0x0c, *range(0x0e, 0x20), 0x7f])
_ASCII_SEPARATORS = bytes(0x1c if code in _ODD_CONTROLS else separator
                          for code, separator in enumerate(_BYTE_SEPARATORS))


def token_name(token: str) -> str:
    """The name a token may be: without the punctuation that ends a sentence or a list item, and, when it is not
    a path, without its leading dots: ``.FancyArrowPatch`` (a reST reference), ``.getEffectiveLevel`` (the call
    after ``getLogger()``) and ``.pytest_cache`` name what a later ``FancyArrowPatch``, ``getEffectiveLevel`` or
    ``pytest_cache`` names (``./x.py`` and ``.github/ci.yml`` stay as they are)."""
    name = token.rstrip(".,:;")
    return name.lstrip(".") if name[:1] == "." and "/" not in name else name


def _run_names(run: str | bytes) -> tuple[str, ...]:
    """The names of the tokens in one run (an ASCII run holds at most one token; a run with non-ASCII
    characters, which may or may not be word characters, is read with ``_TOKEN``)."""
    if isinstance(run, bytes):
        if not run.isascii():
            return tuple(name for name in map(token_name, _TOKEN.findall(run.decode("utf-8", "surrogatepass")))
                         if _is_name(name))
        run = run.decode("ascii")
    name = token_name(run.lstrip(_NOT_START))
    return (name,) if _is_name(name) else ()


# Each distinct run is judged once and the verdicts are kept as sets, so that a text's names come from set
# operations in C instead of a call per run (docs/performance.md): every run judged, those that are a name
# as they are, and the other runs that hold names with their names. The same runs recur across the messages
# of a transcript and across requests. The verdicts are bounded by size as well as by count (docs/performance.md,
# "The salience verdicts' memory"): a run over _KEPT_RUN_MAX characters (bytes, in a text that is not ASCII) is
# judged each time it is met and never kept (a caller's base64 image is one run of megabytes; a name is at most
# 120 characters), and once the verdicts hold over _JUDGED_MAX runs or _HELD_CHARS_MAX characters, new empty
# verdicts replace them (a pure function of the run; a scan in another thread keeps the verdicts it started with).
_JUDGED_MAX = 1 << 16
_KEPT_RUN_MAX = 1024
_HELD_CHARS_MAX = 1 << 21


class _Verdicts:
    __slots__ = ("judged", "named", "self_named", "other", "chars")

    def __init__(self) -> None:
        self.judged: set[str | bytes] = set()
        self.named: set[str | bytes] = set()  # the runs that are or hold names: ``self_named`` and ``other``'s
        self.self_named: set[str | bytes] = set()
        self.other: dict[str | bytes, tuple[str, ...]] = {}
        self.chars = 0  # the characters (bytes, for a bytes run) of the runs in ``judged``

    def judge(self, runs: set[str | bytes]) -> list[str | bytes] | None:
        """Judge ``runs`` (none of them judged yet) and keep their verdicts, but for the runs over _KEPT_RUN_MAX
        characters, which are returned unjudged (None when there are none such). The lengths are added up in this
        loop, not by a ``sum(map(len, runs))`` before it, which costs more on the one or two new runs that most
        calls judge (docs/performance.md)."""
        chars = 0
        long_runs: list[str | bytes] | None = None
        for run in runs:
            size = len(run)
            if size > _KEPT_RUN_MAX:
                if long_runs is None:
                    long_runs = []
                long_runs.append(run)
                continue
            chars += size
            if type(run) is str and _plain_word(run):
                continue
            names = _run_names(run)
            if isinstance(run, str) and names == (run,):
                self.self_named.add(run)
                self.named.add(run)
            elif names:
                self.other[run] = names
                self.named.add(run)
        self.chars += chars
        if long_runs is None:
            self.judged.update(runs)
            return None
        self.judged.update(runs.difference(long_runs))
        return long_runs


def _names_unkept(runs: list[str | bytes]) -> set[str]:
    """The names in ``runs``, judged without keeping a verdict (the runs over _KEPT_RUN_MAX characters)."""
    return {name for run in runs if type(run) is not str or not _plain_word(run) for name in _run_names(run)}


def _plain_word(run: str) -> bool:
    """Whether an ASCII run certainly holds no name: without its trailing dots it has no ``/``, ``.`` or
    ``_`` and no capital after its first character (a name is a path, dotted, snake_case or has an inner
    capital, and its text is a part of the run after the first character and before the dots). Words,
    capitalised words and numbers, most runs of real text, are so judged without the full test; any other
    run goes to it (docs/performance.md)."""
    word = run.rstrip(".")
    if "/" in word or "." in word or "_" in word:
        return False
    rest = word[1:]
    return rest == rest.lower()


_verdicts = _Verdicts()


# A longer text is cut a piece of about _PIECE_CHARS characters at a time, each piece ending before one of
# _CUT_AT (separators: no run spans one) found within _CUT_SEARCH characters (else the piece is the whole
# rest), and each piece's list of runs is freed before the next is made. Cut whole, the 332 KB output of
# compact_overhead.py's request made about 29,000 strings at once, which took fresh arenas of the allocator and
# some 400-500 page faults of the thread on every request (docs/performance.md).
_PIECE_CHARS = 32_768
_CUT_SEARCH = 4096
# Where a piece may end, in the order looked for: a space or a newline, else (a long line of minified JSON, say)
# a double quote or a comma; all of them separators.
_CUT_AT = (" ", "\n", '"', ",")


def _piece_ends(text: str) -> Iterator[int]:
    """Where each piece of a long text ends, the last at the text's end: about _PIECE_CHARS characters on, before
    the first of _CUT_AT found in the next _CUT_SEARCH characters, else at the end."""
    size, find = len(text), text.find
    end = 0
    while end < size:
        end += _PIECE_CHARS
        if end < size:
            for separator in _CUT_AT:
                cut = find(separator, end, end + _CUT_SEARCH)
                if cut >= 0:
                    break
            end = cut if cut >= 0 else size
        else:
            end = size
        yield end


def _split_runs(text: str, is_ascii: bool) -> list[str] | list[bytes]:
    """The runs of ``text``: every separator becomes whitespace, then split. As str when the text (or the whole
    text it is a piece of) is ASCII, str.split cutting faster than bytes.split; else as bytes, split at the same
    ASCII characters (a multi-byte character holds none in UTF-8)."""
    if is_ascii:
        return translated(text).decode("ascii").split()
    return text.encode("utf-8", "surrogatepass").translate(_BYTE_SEPARATORS).split()


def translated(text: str) -> bytes:
    """The translation an ASCII ``text`` is cut into runs from (``.decode("ascii").split()``), for a caller that
    keeps it: the preparation translates a message's content when it encodes it (:func:`escapes_plainly`) and
    scans it later (:func:`names_in_translated`)."""
    return text.encode("ascii").translate(_ASCII_SEPARATORS)


def escapes_plainly(translation: bytes) -> bool:
    """Whether the text of a :func:`translated` has no control character but tab, newline and return, and no
    DEL: then the ``unicode_escape`` codec escapes it as the JSON encoder does, double quotes aside
    (``jsonutil.dense_plain_str``)."""
    return b"\x1c" not in translation


def _long_runs(text: str) -> set[str | bytes]:
    """The distinct runs of a text over _PIECE_CHARS characters, as :func:`names_in` finds those of a shorter
    one (the same runs, of the same type), a piece at a time."""
    is_ascii = text.isascii()
    runs: set[str | bytes] = set()
    start = 0
    for end in _piece_ends(text):
        runs.update(_split_runs(text[start:end], is_ascii))
        start = end
    return runs


def names_in(text: str) -> set[str]:
    """The paths and code identifiers in ``text`` (HTML/XML-like tags left out)."""
    if "<" in text:
        text = _TAG.sub(" ", text)
    return _names_of(_long_runs(text) if len(text) > _PIECE_CHARS else set(_split_runs(text, text.isascii())))


def name_offsets(text: str, names: set[str] | frozenset[str], most: int = 64) -> list[int]:
    """Where ``names`` stand in ``text``, in order: the offsets of the first ``most`` occurrences of each name
    that is one of the text's runs (as :func:`names_in` cuts them). Its runs are split once, in C, and each name
    found by ``str.find``: the lines of a bounded view's middle that name what later messages use (preparation)."""
    runs: Any = _split_runs(text, text.isascii())
    if runs and type(runs[0]) is bytes:
        runs = [run.decode("utf-8", "surrogatepass") for run in runs]
    offsets: list[int] = []
    for name in names.intersection(runs):
        at = text.find(name)
        for _ in range(most):
            if at < 0:
                break
            offsets.append(at)
            at = text.find(name, at + len(name))
    offsets.sort()
    return offsets


def names_in_translated(translation: bytes) -> set[str]:
    """:func:`names_in` of an ASCII text without ``<`` of at most _PIECE_CHARS characters, from its
    :func:`translated` (which the caller made already)."""
    return _names_of(set(translation.decode("ascii").split()))


def _names_of(runs: set[str | bytes]) -> set[str]:
    """The names in a text's distinct runs."""
    global _verdicts
    verdicts = _verdicts
    unjudged = runs - verdicts.judged
    if unjudged:
        long_runs = verdicts.judge(unjudged)
        if len(verdicts.judged) > _JUDGED_MAX or verdicts.chars > _HELD_CHARS_MAX:
            _verdicts = _Verdicts()  # this text's names come from the full verdicts, the next text's from new ones
        if long_runs is not None:  # rare: the other runs' names as usual (judged now, or again if just replaced)
            return _names_of(runs.difference(long_runs)) | _names_unkept(long_runs)
    # One pass over the runs for those with names (a real text has thousands of distinct runs, few of them
    # with names); which of those are names as they are is then a small intersection (docs/performance.md).
    hits = runs & verdicts.named
    found = hits & verdicts.self_named  # str runs only: a bytes run's names are among the other runs'
    if len(found) != len(hits):
        for run in hits - found:
            found.update(verdicts.other[run])
    return found  # type: ignore[return-value]


def message_names(message: Message, dense_text: str | None = None) -> set[str]:
    """The names in a message's content and tool calls; ``dense_text``: the message's dense JSON when the
    caller has it, from which the calls' JSON is cut instead of encoded again (:func:`_calls_json`)."""
    text = content_text(message.get("content")) if isinstance(message, dict) else ""
    if isinstance(message, dict) and message.get("tool_calls"):
        text += " " + _calls_json(message, dense_text).replace("\\n", " ").replace('\\"', '"')
    elif isinstance(message, dict) and isinstance(message.get("function_call"), dict):  # the deprecated single call
        text += " " + dense_dumps(message["function_call"]).replace("\\n", " ").replace('\\"', '"')
    return names_in(text)


_CALLS_KEY = '"tool_calls":'


def _calls_json(message: Message, dense_text: str | None) -> str:
    """``dense_dumps(message["tool_calls"])``; cut from ``dense_text`` (``dense_dumps(message)``) when the calls
    are the message's last member and their key's text occurs once in it: that occurrence is then the
    member's key, and the calls' JSON runs from it to the closing brace (docs/performance.md)."""
    if dense_text is not None and next(reversed(message)) == "tool_calls" and dense_text.count(_CALLS_KEY) == 1:
        return dense_text[dense_text.index(_CALLS_KEY) + len(_CALLS_KEY):-1]
    return dense_dumps(message["tool_calls"])


def last_uses(names: list[set[str]]) -> dict[str, int]:
    """The index of the last message using each name (``names[i]``: message i's names)."""
    return {name: index for index, found in enumerate(names) for name in found}


def hint_order(names: set[str]) -> list[str]:
    """Paths and dotted names first, then the other names, each in alphabetical order."""
    paths = {name for name in names if "/" in name or "." in name}
    return sorted(paths) + sorted(names - paths)


def batch_hint(names: list[str]) -> list[str]:
    """The names that fit the hint's bounds, in the given order."""
    chosen: list[str] = []
    size = 0
    for name in names[:MAX_NAMES]:
        size += len(name.encode("utf-8")) + 2
        if size > MAX_NAMES_BYTES:
            break
        chosen.append(name)
    return chosen


_FENCED = pattern(r"```[\w-]*[ \t]*\n.*?```", re.DOTALL)
MAX_ACTION_CHARS = 600
MAX_ARGUMENT_CHARS = 200


def _shortened(text: str) -> str:
    """A long argument cut to its first line (a heredoc keeps its ``cat > path <<EOF`` header)."""
    if len(text) <= MAX_ARGUMENT_CHARS:
        return text
    return text.split("\n", 1)[0][:MAX_ARGUMENT_CHARS] + " …"


# json.loads' own C scanner: ``json.loads`` wraps it in two Python calls and a whitespace regex, about half
# of what parsing a call's short arguments costs (docs/performance.md).
_SCAN_JSON = json.JSONDecoder().scan_once
# A container at a level deeper than MAX_BODY_DEPTH (the root is level 0) sits inside MAX_BODY_DEPTH + 1 others, so
# its JSON text holds at least 2 * (MAX_BODY_DEPTH + 2) brackets: a shorter text is not looked into for its depth
# (a call's arguments are mostly short; docs/performance.md).
_DEPTH_TEXT_MIN = 2 * (MAX_BODY_DEPTH + 2)


def _parsed_arguments(arguments: str) -> Any:
    """``json.loads(arguments)``, and ``arguments`` itself when it is not JSON or is nested deeper than a
    request may be (:func:`compactor.jsonutil.embedded_json`). The scanner alone settles a text that is one
    shallow JSON value from its first character to its last (what ``json.loads`` then returns); anything else
    (surrounding whitespace, a byte order mark, extra data, an error) goes through ``embedded_json``."""
    try:
        value, end = _SCAN_JSON(arguments, 0)
        if end == len(arguments) and (end < _DEPTH_TEXT_MIN or not depth_exceeds(value, MAX_BODY_DEPTH)):
            return value
    except Exception:  # noqa: BLE001 - embedded_json below says what it is
        pass
    parsed, value = embedded_json(arguments)
    return value if parsed else arguments


def _short_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call_function(call) or {}  # a function's call, or a custom tool's
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        parsed = _parsed_arguments(arguments)
        if len(arguments) <= MAX_ARGUMENT_CHARS:  # no string in it is longer than the text: nothing to cut
            return {"type": "function", "function": {"name": function.get("name"), "arguments": spaced_dumps(parsed)}}
    else:
        parsed = arguments
    if isinstance(parsed, dict):
        parsed = {k: _shortened(v) if isinstance(v, str) else v for k, v in parsed.items()}
    elif isinstance(parsed, str):
        parsed = _shortened(parsed)
    return {"type": "function", "function": {"name": function.get("name"),
                                             "arguments": spaced_dumps(parsed)}}


def action_message(message: Message) -> Message | None:
    """An assistant message reduced to what it did: its tool calls (without ids, long arguments cut to
    their first line), or its fenced commands; None when it did nothing or is still too long to quote."""
    action = quoted_action(message)
    return action[1] if action else None


def quoted_action(message: Message) -> tuple[str, Message] | None:
    """:func:`action_message` with its dense JSON, which the ``later`` block quotes (measured once)."""
    action = _action(message)
    return action[:2] if action else None


# The dense JSON of a reduced tool-call action up to its calls (the calls' JSON and ``}`` follow).
_CALLS_PREFIX = '{"role":"assistant","content":null,"tool_calls":'


def _action(message: Message) -> tuple[str, Message, str | None] | None:
    """:func:`quoted_action` and, for tool calls, the calls' dense JSON: the action's JSON is built around it
    (the same text as encoding the whole action) and its names are read from it."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    calls = message.get("tool_calls")
    if not calls and isinstance(message.get("function_call"), dict):  # the deprecated single call, quoted as one
        calls = [{"type": "function", "function": message["function_call"]}]
    calls_json = None
    if isinstance(calls, list) and calls:
        short = [_short_call(c) for c in calls if isinstance(c, dict)]
        reduced: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": short}
        calls_json = dense_dumps(short)
        quoted = _CALLS_PREFIX + calls_json + "}"
    else:
        text = content_text(message.get("content"))
        blocks = _FENCED.findall(text) if "```" in text else []
        if not blocks:
            return None
        cut = [block if len(block) <= MAX_ARGUMENT_CHARS else _shortened(block) + "\n```" for block in blocks]
        reduced = {"role": "assistant", "content": "\n".join(cut)}
        quoted = dense_dumps(reduced)
    return (quoted, reduced, calls_json) if len(quoted) <= MAX_ACTION_CHARS else None


def quoted_actions(messages: list[Message], start: int) -> list[tuple[int, str, set[str]]]:
    """The actions among ``messages[start:]``: each one's index, dense JSON (:func:`quoted_action`) and
    names (:func:`message_names` of the action), the names read from the calls' JSON instead of encoding the
    calls again (docs/performance.md)."""
    actions = []
    for index in range(start, len(messages)):
        message = messages[index]
        if not isinstance(message, dict) or message.get("role") != "assistant":  # _action's own test, first
            continue
        action = _action(message)
        if action is None:
            continue
        quoted, reduced, calls_json = action
        if calls_json is None:
            names = names_in(reduced["content"])
        elif reduced["tool_calls"]:
            names = names_in(" " + calls_json.replace("\\n", " ").replace('\\"', '"'))
        else:
            names = set()
        actions.append((index, quoted, names))
    return actions


def later_block(names: list[str], actions: list[str], limit: int) -> dict[str, Any]:
    """``{"names_used_later": […], "later_actions": […]}`` within ``limit`` ASCII wire bytes (the most
    recent actions first, then in transcript order); empty when there is nothing to say."""
    return sized_later_block(names, actions, limit)[0]


def text_wire_size(text: str) -> int:
    """``ascii_wire_size`` of a JSON text (from the dense or ASCII encoder) as a string value: counted, not
    encoded, when it is ASCII without a DEL (``jsonutil.json_text_size``; the dense encoder writes DEL as it
    is, the ASCII one as ``\\u007f``)."""
    return json_text_size(text) if text.isascii() and "\x7f" not in text else ascii_wire_size(text)


# What ``"later_actions": []`` adds to a block's ASCII wire size: ``, "later_actions": []`` after its other
# members, or the whole ``{"later_actions": []}`` of an empty block (the same length).
_NO_ACTIONS_WIRE = len(', "later_actions": []')


def sized_later_block(names: list[str], actions: list[str], limit: int, action_sizes: list[int] | None = None
                      ) -> tuple[dict[str, Any], int]:
    """:func:`later_block` and its ASCII wire size; ``action_sizes``: each action's ``ascii_wire_size`` when
    the caller measured them (once per request, not once per batch: :func:`text_wire_size`). The block of
    names is encoded once (again only when it is cut), and the sizes with actions are sums of measured parts."""
    if action_sizes is None:
        action_sizes = [ascii_wire_size(action) for action in actions]
    block: dict[str, Any] = {}
    names_size = 2  # the block's wire size before any action: ``{}``, or its names
    if names:
        block["names_used_later"] = list(names)
        names_size = ascii_wire_size(block)
        while block["names_used_later"] and names_size > limit // 2:
            block["names_used_later"] = block["names_used_later"][:len(block["names_used_later"]) * 3 // 4]
            names_size = ascii_wire_size(block)
    # Each action measured once: the block with k actions is the block with none, the actions and k-1 ", ".
    size, count = (names_size if block else 0) + _NO_ACTIONS_WIRE, 0
    for action_size in reversed(action_sizes):
        added = action_size + (2 if count else 0)
        if size + added > limit:
            break
        size, count = size + added, count + 1
    names_left = block.get("names_used_later")
    if count:
        block["later_actions"] = actions[len(actions) - count:]
    if not names_left:
        block.pop("names_used_later", None)
    if not count:  # the block of names, or ``{}``
        size = names_size if names_left else 2
    elif names_left == []:  # else ``size`` is the block's own
        size = ascii_wire_size(block)
    return (block, size) if size <= limit else ({}, 2)


def later_dense_size(block: dict[str, Any], wire_size: int) -> int:
    """The dense size of a ``later`` block (:func:`sized_later_block`) from its ASCII wire size, without encoding
    it when its strings are ASCII without a DEL: both forms then write them alike, and the wire form has one
    more byte after each ``:`` and after each ``,`` between members and between a list's strings
    (docs/performance.md)."""
    lists = block.values()
    joined = "".join(["".join(strings) for strings in lists])
    if not block or not joined.isascii() or "\x7f" in joined:
        return dense_size(block)
    return wire_size - 2 * len(block) + 1 - sum([len(strings) - 1 for strings in lists if strings])
