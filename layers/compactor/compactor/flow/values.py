"""Typed flow values: the dense JSON text used for sizes and views, and the flow-input sentinel.

The dense form of ``jsonutil`` (separators ``,``/``:``, non-ASCII raw, NaN/Infinity rejected) is the
serialisation behind every byte bound of the flow IR.
"""

from __future__ import annotations

import enum
from typing import Any, Final

from ..jsonutil import dense_dumps, dense_size, depth_exceeds

MAX_VALUE_BYTES: Final = 1_048_576
MAX_VALUE_DEPTH: Final = 32


class Missing(enum.Enum):
    """Marks an absent ``flow_input`` (distinct from a JSON ``null``)."""

    MISSING = "MISSING"


MISSING: Final = Missing.MISSING


def bounds_problem(value: Any, what: str, size: int | None = None) -> str | None:
    """Why ``value`` breaks the 1 MiB / depth-32 bounds of flow data, or ``None`` when it fits. ``size``:
    its dense size when the caller measured it already (then it is not encoded again)."""
    if size is None:
        try:
            size = dense_size(value)
        except (TypeError, ValueError) as exc:
            return f"{what} is not finite JSON ({exc})"
    if size > MAX_VALUE_BYTES:
        return f"{what} exceeds {MAX_VALUE_BYTES} bytes ({size})"
    if depth_exceeds(value, MAX_VALUE_DEPTH):
        return f"{what} is nested deeper than {MAX_VALUE_DEPTH} levels"
    return None


def view_of(value: Any) -> str:
    """The text an llm prompt shows for a value: strings as they are, anything else as dense JSON."""
    return value if isinstance(value, str) else dense_dumps(value)


def is_empty_container(value: Any) -> bool:
    """True for ``{}`` and ``[]`` (what ``skip_empty`` skips on)."""
    return isinstance(value, (dict, list)) and not value
