"""Canonical encoding of Σ_pol terms: ``sigma-pol/v2:`` + ``(op arg …)``.

Parameters render as: numbers by the normative number grammar (:func:`encode_number`), strings
quoted with ``\\`` ``"`` newline, carriage return and tab escaped (the same bytes as JSON quoting
for every string without other control characters), booleans ``true``/``false``, arrays
``[a,b]`` and records ``{"k":v}`` with keys sorted. The encoding of a normal-form term is the
policy's identity input.
"""

from __future__ import annotations

import math
from typing import Any

from .signature import OPERATIONAL_SORTS, OPS, VERSION

_INTEGRAL_LIMIT = 2**53
_STRING_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def encode_number(value: int | float) -> str:
    """Integral values with ``|v| <= 2**53`` in fixed notation (``-0`` → ``0``); others ``%.17g``.

    Python's ``%.17g`` already writes the exponent as ``e±dd`` (at least two digits), as the grammar
    requires. Non-finite values are not representable.
    """
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"not an encodable number: {value!r}")
    if value == 0:
        return "0"
    if float(value).is_integer() and abs(value) <= _INTEGRAL_LIMIT:
        return str(int(value))
    return "%.17g" % float(value)


def encode_string(value: str) -> str:
    """Quote a string with the five escapes of the encoding grammar."""
    return '"' + value.translate(_STRING_ESCAPES) + '"'


def encode_param(value: Any) -> str:
    """Encode a parameter value (number, string, boolean, array or record)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return encode_number(value)
    if isinstance(value, str):
        return encode_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(encode_param(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(
            encode_string(key) + ":" + encode_param(value[key]) for key in sorted(value)
        ) + "}"
    raise ValueError(f"cannot encode parameter of type {type(value).__name__}")


def encode_term(term: list[Any]) -> str:
    """``(op arg …)`` without the version prefix (also the sort key of AC children)."""
    op = term[0]
    spec = OPS[op]
    if spec.variadic is not None:
        parts = [encode_term(child) for child in term[1:]]
    else:
        parts = [
            encode_term(arg) if sort in OPERATIONAL_SORTS else encode_param(arg)
            for sort, arg in zip(spec.ins, term[1:], strict=True)
        ]
    return "(" + " ".join([op, *parts]) + ")"


def encode(term: list[Any]) -> str:
    """The version-prefixed canonical encoding of an (already normalised) term."""
    return f"{VERSION}:{encode_term(term)}"
