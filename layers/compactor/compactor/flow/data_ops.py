"""The pure data operations of typed flows (docs/behaviour.md#the-flow-ir): ``project``, ``select``, ``overlay``,
``union``. Values are shared, never copied or mutated: outputs are new maps over the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..jsonutil import utf8_len
from .values import MAX_VALUE_BYTES, JSONTextMap

MAX_RECORD_KEYS: Final = 128
MAX_RECORD_KEY_BYTES: Final = 128


class DataOpError(Exception):
    """A data operation could not produce a value; ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def record_map(value: Any, what: str) -> dict[str, Any]:
    """``value`` if it is a record map (object, ≤ 128 keys of 1–128 UTF-8 bytes), else DataOpError."""
    if not isinstance(value, dict):
        raise DataOpError(f"{what} must be a record map (an object), got {type(value).__name__}")
    if len(value) > MAX_RECORD_KEYS:
        raise DataOpError(f"{what} has {len(value)} keys; a record map has at most {MAX_RECORD_KEYS}")
    if not _record_keys(value):
        raise DataOpError(f"{what} has a key that is not 1–{MAX_RECORD_KEY_BYTES} bytes")
    return value


def _record_keys(value: dict[Any, Any]) -> bool:
    """Every key is a string of 1–128 UTF-8 bytes. Keys that are all ASCII (their join is: a non-string key
    fails the join) are measured by their lengths in C; the empty key is looked up (docs/performance.md)."""
    if not value:
        return True
    try:
        joined = "".join(value)
    except TypeError:
        return False
    if joined.isascii():
        return "" not in value and max(map(len, value)) <= MAX_RECORD_KEY_BYTES
    return all(1 <= utf8_len(key) <= MAX_RECORD_KEY_BYTES for key in value)


def project(value: Any, path: Sequence[str]) -> Any:
    """Walk object keys along ``path``; a missing key or a non-object on the way is an error."""
    current = value
    for depth, key in enumerate(path):
        if not isinstance(current, dict):
            raise DataOpError(f"project: step {depth + 1} ({key!r}) reads from a non-object")
        if key not in current:
            raise DataOpError(f"project: missing key {key!r} at step {depth + 1}")
        current = current[key]
    return current


def select(records: Any, answers: Any, field: str, equals: str) -> dict[str, Any]:
    """``records[k]`` for every k whose ``answers[k]`` is an object with ``answers[k][field] == equals`` (a
    :class:`JSONTextMap` of records gives one)."""
    records = record_map(records, "select records")
    answers = record_map(answers, "select answers")
    out: dict[str, Any] = records.like() if type(records) is JSONTextMap else {}
    for key, record in records.items():
        answer = answers.get(key)
        if isinstance(answer, dict) and answer.get(field) == equals:
            out[key] = record
    return out


def overlay(base: Any, replacements: Any, removals: Any = None, scope: Any = None, *,
            min_string_bytes: int | None = None, max_string_bytes: int | None = None,
            only_shrink: bool | None = None) -> dict[str, Any]:
    """``base`` with ``replacements`` applied and ``removals`` dropped (removals win).

    Keys of replacements or removals that are not in base are an error, and so is, with a ``scope``
    (the record map a reply was asked about), a replacement key that is not in scope: a reply that
    answers for something it was not given is not taken at all. With any byte option a
    replacement is accepted only if it is a string of ``min..max`` UTF-8 bytes and, with
    ``only_shrink``, the original is a string too and the replacement strictly shorter in bytes;
    otherwise the original stays. Without byte options any replacement, ``null`` included, is taken.
    """
    base = record_map(base, "overlay base")
    replacements = record_map(replacements, "overlay replacements")
    removed = record_map(removals, "overlay removals") if removals is not None else {}
    for what, keys in (("replacement", replacements), ("removal", removed)):
        stray = next((key for key in keys if key not in base), None)
        if stray is not None:
            raise DataOpError(f"overlay: {what} key {stray!r} is not in the base")
    if scope is not None:
        scope = record_map(scope, "overlay scope")
        stray = next((key for key in replacements if key not in scope), None)
        if stray is not None:
            raise DataOpError(f"overlay: replacement key {stray!r} is not in the scope")
    checked = min_string_bytes is not None or max_string_bytes is not None or bool(only_shrink)
    low = min_string_bytes or 0
    high = MAX_VALUE_BYTES if max_string_bytes is None else max_string_bytes
    out: dict[str, Any] = {}
    for key, original in base.items():
        if key in removed:
            continue
        if key not in replacements:
            out[key] = original
            continue
        candidate = replacements[key]
        if checked and not _acceptable(candidate, original, low, high, bool(only_shrink)):
            out[key] = original
        else:
            out[key] = candidate
    return out


def _acceptable(candidate: Any, original: Any, low: int, high: int, only_shrink: bool) -> bool:
    if not isinstance(candidate, str):
        return False
    size = utf8_len(candidate)
    if not low <= size <= high:
        return False
    if only_shrink:
        return isinstance(original, str) and size < utf8_len(original)
    return True


def union(maps: Sequence[Any]) -> dict[str, Any]:
    """The disjoint union of 1–32 record maps; a key present twice is an error."""
    out: dict[str, Any] = {}
    for position, value in enumerate(maps, start=1):
        for key, item in record_map(value, f"union input {position}").items():
            if key in out:
                raise DataOpError(f"union: key {key!r} appears in more than one input")
            out[key] = item
    return record_map(out, "union output")


def apply(operation: str, options: Mapping[str, Any], values: Sequence[Any]) -> Any:
    """Run ``operation`` with the node ``options`` on the ordered input ``values``."""
    if operation == "project":
        return project(values[0], options["path"])
    if operation == "select":
        return select(values[0], values[1], options["field"], options["equals"])
    if operation == "overlay":
        return overlay(values[0], values[1], values[2] if len(values) > 2 else None,
                       values[3] if len(values) > 3 else None,
                       min_string_bytes=options.get("min_string_bytes"),
                       max_string_bytes=options.get("max_string_bytes"),
                       only_shrink=options.get("only_shrink"))
    if operation == "union":
        return union(values)
    raise DataOpError(f"unknown operation {operation!r}")
