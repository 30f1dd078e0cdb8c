"""The observation vocabulary: the named fields through which a policy sees an offer.

Core fields and their defaults when an offer does not report them are fixed by Σ_pol; a host may
declare more boolean or numeric fields (``{"cache_hot": "Bool"}``). Terms observing undeclared
fields are rejected at admission.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal

from ..providers.base import Offer
from ..records import record

FieldSort = Literal["Num", "Bool"]


@record(frozen=True)
class FieldDecl:
    """A declared observation field: its sort and the value used when an offer lacks it."""

    sort: FieldSort
    default: float | bool


CORE_FIELDS: Mapping[str, FieldDecl] = MappingProxyType({
    "price_in": FieldDecl("Num", math.inf),
    "price_out": FieldDecl("Num", math.inf),
    "latency_ms": FieldDecl("Num", math.inf),
    "tok_s": FieldDecl("Num", 0.0),
    "success_rate": FieldDecl("Num", 1.0),
    "credits": FieldDecl("Num", 0.0),
    "context": FieldDecl("Num", 0.0),
    "has_tee": FieldDecl("Bool", False),
    "no_log": FieldDecl("Bool", False),
    "breaker_open": FieldDecl("Bool", False),
    "disabled": FieldDecl("Bool", False),
})

FieldDeclarations = Mapping[str, "FieldDecl | FieldSort"]


def field_schema(extra: FieldDeclarations | None = None) -> Mapping[str, FieldDecl]:
    """Core fields plus host declarations (a sort name gets the default ``False`` / ``0``).

    Raises ``ValueError`` for an unknown sort or an attempt to redeclare a core field differently.
    """
    schema = dict(CORE_FIELDS)
    for name, decl in (extra or {}).items():
        if isinstance(decl, str):
            if decl not in ("Num", "Bool"):
                raise ValueError(f"field {name!r}: sort must be 'Num' or 'Bool', got {decl!r}")
            decl = FieldDecl(decl, 0.0 if decl == "Num" else False)
        if name in CORE_FIELDS and CORE_FIELDS[name].sort != decl.sort:
            raise ValueError(f"field {name!r} is a core {CORE_FIELDS[name].sort} field")
        schema.setdefault(name, decl)
    return MappingProxyType(schema)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def observe(offer: Offer, name: str, decl: FieldDecl) -> float | bool:
    """The value of one field for an offer: prices from the offer, the rest from its observations.

    A missing value, or one of the wrong type (or NaN), reads as the declared default.
    """
    if name == "price_in":
        value: Any = offer.price_in
    elif name == "price_out":
        value = offer.price_out
    else:
        value = offer.observations.get(name)
    if decl.sort == "Bool":
        return value if isinstance(value, bool) else bool(decl.default)
    if _is_number(value) and not math.isnan(value):
        return float(value)
    return float(decl.default)


def fields_observed_in(offers: Iterable[Offer]) -> dict[str, FieldSort]:
    """Declarations for the extra boolean/numeric observations a catalog's offers carry.

    A field whose values have different sorts across offers is left undeclared; string-valued
    observations (``tier``, ``served_by``, ``scope``) are attributes, not fields.
    """
    sorts: dict[str, set[FieldSort]] = {}
    for offer in offers:
        for name, value in offer.observations.items():
            if name in CORE_FIELDS:
                continue
            if isinstance(value, bool):
                sorts.setdefault(name, set()).add("Bool")
            elif _is_number(value):
                sorts.setdefault(name, set()).add("Num")
    return {name: next(iter(found)) for name, found in sorts.items() if len(found) == 1}
