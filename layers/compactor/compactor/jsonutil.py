"""JSON helpers shared by every layer: the two byte measures, strict parsing and depth bounds.

* dense size (the REFERENCE's "compact size"): UTF-8 bytes of JSON with ``,``/``:`` separators and
  non-ASCII emitted raw.
* ASCII wire size: bytes of JSON with default separators and every non-ASCII character escaped.
"""

from __future__ import annotations

import json
import math
from typing import Any

_DENSE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_WIRE = json.JSONEncoder(ensure_ascii=True, allow_nan=False)


def dense_dumps(value: Any) -> str:
    """Dense JSON text (separators ``,``/``:``, non-ASCII raw, NaN/Infinity rejected)."""
    return _DENSE.encode(value)


def dense_size(value: Any) -> int:
    """UTF-8 byte length of :func:`dense_dumps`."""
    return len(dense_dumps(value).encode("utf-8"))


def ascii_dumps(value: Any) -> str:
    """JSON with default separators and all non-ASCII escaped (``json.dumps`` defaults)."""
    return _WIRE.encode(value)


def ascii_wire_size(value: Any) -> int:
    """Byte length of :func:`ascii_dumps` (pure ASCII, so characters == bytes)."""
    return len(ascii_dumps(value))


def ensure_utf8_encodable(value: Any) -> None:
    """Raise ``ValueError`` when a string in ``value`` holds a lone surrogate (a valid JSON escape such as
    ``"\\ud800"`` that no UTF-8 text can carry, so no size can be measured and no answer written)."""
    try:
        dense_dumps(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("text must be valid Unicode: it contains a lone surrogate "
                         f"(\\u{ord(exc.object[exc.start]):04x})") from None


class StrictJSONError(ValueError):
    """Raised by :func:`strict_loads` for duplicate keys, non-finite numbers or bad syntax."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError(f"duplicate key: {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"non-finite number: {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"non-finite number: {text}")
    return value


def strict_loads(text: str | bytes) -> Any:
    """Parse JSON rejecting duplicate keys, NaN/Infinity and overflowing numbers."""
    try:
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except StrictJSONError:
        raise
    except (ValueError, RecursionError) as exc:
        raise StrictJSONError(str(exc)) from exc


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when a container sits at a level deeper than ``limit`` (the root is level 0)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            if level > limit:
                return True
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            if level > limit:
                return True
            stack.extend((child, level + 1) for child in node)
    return False
