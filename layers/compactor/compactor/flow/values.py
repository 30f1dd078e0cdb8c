"""Typed flow values: the dense JSON text used for sizes and views, and the flow-input sentinel.

The dense form of ``jsonutil`` (separators ``,``/``:``, non-ASCII raw, NaN/Infinity rejected) is the
serialisation behind every byte bound of the flow IR.
"""

from __future__ import annotations

import enum
from typing import Any, Final

from ..jsonutil import dense_dumps, dense_size, depth_exceeds, holds_json_container, json_text_escaped

MAX_VALUE_BYTES: Final = 1_048_576
MAX_VALUE_DEPTH: Final = 32


class Missing(enum.Enum):
    """Marks an absent ``flow_input`` (distinct from a JSON ``null``)."""

    MISSING = "MISSING"


MISSING: Final = Missing.MISSING


def bounds_problem(value: Any, what: str, size: int | None = None, depth_of: Any = MISSING) -> str | None:
    """Why ``value`` breaks the 1 MiB / depth-32 bounds of flow data, or ``None`` when it fits. ``size``:
    its dense size when the caller measured it already (then it is not encoded again); ``depth_of``: a part
    of ``value`` that is deeper than 32 levels exactly when ``value`` is (its depth is looked into instead)."""
    if size is None:
        try:
            size = dense_size(value)
        except (TypeError, ValueError) as exc:
            return f"{what} is not finite JSON ({exc})"
    if size > MAX_VALUE_BYTES:
        return f"{what} exceeds {MAX_VALUE_BYTES} bytes ({size})"
    if depth_exceeds(value if depth_of is MISSING else depth_of, MAX_VALUE_DEPTH):
        return f"{what} is nested deeper than {MAX_VALUE_DEPTH} levels"
    return None


class JSONTextMap(dict):  # type: ignore[type-arg]
    """An object whose values are strings that are themselves JSON text from an encoder that escapes every
    control character (dense or ASCII JSON, or joins or cuts of such texts), so that quoting one as a JSON
    string only escapes ``"`` and ``\\``. A host that built the map from such texts marks it (it cannot be
    checked without the scan it saves); a prompt then quotes its values with two ``str.replace`` instead of
    the JSON encoder's escape of every character, for the same text, and ``select`` keeps the mark (a
    subset of the values). Otherwise a plain object (docs/performance.md).

    ``whole``: each value is one whole JSON text (no join or cut), so a prompt that embeds JSON text
    (:func:`embedded_view`) takes it without parsing it."""

    __slots__ = ("whole",)

    def __init__(self, value: Any = (), whole: bool = False) -> None:
        super().__init__(value)
        self.whole = whole

    def like(self) -> JSONTextMap:
        """An empty map with this one's mark, for a subset of its members (``select``)."""
        return JSONTextMap(whole=self.whole)


class WireSized(dict):  # type: ignore[type-arg]
    """An object that carries its ASCII wire size (``jsonutil.ascii_wire_size``: default separators, every
    non-ASCII character escaped) as ``wire_bytes``, computed by the host that built it from the measured
    sizes of its parts. A decision node whose state carries it checks the request's byte bound without
    encoding the state again (docs/performance.md); the runtime never changes a value, so the size stays
    true. Otherwise a plain object."""

    __slots__ = ("wire_bytes",)

    def __init__(self, value: dict[str, Any], wire_bytes: int) -> None:
        super().__init__(value)
        self.wire_bytes = wire_bytes


def _quoted_key(key: str) -> str:
    if key.isascii() and key.isprintable() and '"' not in key and "\\" not in key:
        return '"' + key + '"'
    return dense_dumps(key)


def view_of(value: Any, embed_json_text: bool = False) -> str:
    """The text an llm prompt shows for a value: strings as they are, anything else as dense JSON (a
    :class:`JSONTextMap` quoted member by member: the same text). ``embed_json_text`` (an llm node's option,
    docs/behaviour.md "Node values"): an object's members whose strings hold a JSON array or object are shown
    as that JSON, not quoted again (:func:`embedded_view`)."""
    if isinstance(value, str):
        return value
    if embed_json_text and isinstance(value, dict) and all(type(key) is str for key in value):
        return embedded_view(value)
    if (type(value) is JSONTextMap and all(type(key) is str for key in value)
            and all(type(item) is str for item in value.values())):
        parts = ["{"]
        for key, item in value.items():
            parts += (",", _quoted_key(key), ':"', json_text_escaped(item), '"')
        parts[1:2] = []  # no comma before the first member (an empty map is "{}")
        parts.append("}")
        return "".join(parts)
    return dense_dumps(value)


def embedded_view(value: dict[str, Any]) -> str:
    """The dense JSON of ``value`` with each member whose string holds a JSON array or object shown as that JSON
    text (the model reads the JSON once, not escaped inside a string: docs/performance.md "Model input"). A
    string that starts with ``[`` or ``{`` is taken as it is when it parses as JSON (strictly: no key twice, no
    ``NaN``, no number past a float's range, at most ``MAX_BODY_DEPTH`` levels deep), or without parsing in a
    :class:`JSONTextMap` marked ``whole`` (the host's word). Every other member is shown as dense JSON, as without
    the option."""
    marked = type(value) is JSONTextMap and value.whole
    parts = []
    for key, item in value.items():
        shown = item if type(item) is str and _holds_container(item, marked) else dense_dumps(item)
        parts.append(_quoted_key(key) + ":" + shown)
    return "{" + ",".join(parts) + "}"


def _holds_container(text: str, marked: bool) -> bool:
    return text[:1] in ("[", "{") if marked else holds_json_container(text)


def is_empty_container(value: Any) -> bool:
    """True for ``{}`` and ``[]`` (what ``skip_empty`` skips on)."""
    return isinstance(value, (dict, list)) and not value
