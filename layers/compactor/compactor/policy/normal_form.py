"""The Σ_pol normal form: one canonical representative per equivalence class of terms.

Equations (and nothing else; there is no arithmetic on numbers and no other constant folding,
docs/behaviour.md#the-policy-language):

* AC ops (``and``, ``or``, ``add``) flatten, drop their unit, collapse on an absorbing element and
  sort children by canonical encoding; an empty result is the unit, a single child stands alone;
* ``seq`` flattens and drops ``id`` (order kept);
* ``not(not p) = p``;
* ``scale(1, s) = s``; ``scale(0, s) = zero``;
* ``gate(top, s) = s``;
* ``normalize(normalize(s)) = normalize(s)``;
* a FailPlan becomes ``always(base)`` wrapped by overrides sorted by reason (outer override wins,
  overrides equal to the action they would fall back to dropped: the base, or the ``unknown``
  override when there is one — dropping only base-equal ones would change what such a plan does).

Input must already be admitted (:func:`.admission.check_term`).
"""

from __future__ import annotations

import copy
from typing import Any

from .encoding import encode_param, encode_term
from .failplan import UNKNOWN_REASON
from .signature import OPERATIONAL_SORTS, OPS

Term = list[Any]


def _copy_param(value: Any) -> Any:
    if isinstance(value, tuple):
        value = list(value)
    return copy.deepcopy(value)


def _variadic(op: str, children: list[Any]) -> Term:
    spec = OPS[op]
    kept: list[Term] = []
    for raw in children:
        child = normalize(raw)
        if child[0] == op:
            kept.extend(child[1:])
        elif child[0] == spec.unit:
            continue
        elif spec.absorbing is not None and child[0] == spec.absorbing:
            return [spec.absorbing]
        else:
            kept.append(child)
    if not kept:
        return [spec.unit]
    if len(kept) == 1:
        return kept[0]
    if spec.commutative:
        kept.sort(key=encode_term)
    return [op, *kept]


def _failplan(term: Term) -> Term:
    overrides: dict[str, Any] = {}
    current = term
    while current[0] == "override":
        _, inner, reason, action = current
        overrides.setdefault(reason, _copy_param(action))  # the outermost override of a reason wins
        current = inner
    base = _copy_param(current[1])
    # A reason without an override falls back to the `unknown` override, else to the base, so an
    # override equal to its fallback is redundant. (With no `unknown` override this is exactly
    # "drop overrides equal to the base"; with one, an override equal to the base still matters.)
    unknown_key = encode_param(overrides.get(UNKNOWN_REASON, base))
    base_key = encode_param(base)
    result: Term = ["always", base]
    for reason in sorted(overrides):
        fallback_key = base_key if reason == UNKNOWN_REASON else unknown_key
        if encode_param(overrides[reason]) != fallback_key:
            result = ["override", result, reason, overrides[reason]]
    return result


def normalize(term: Any) -> Term:
    """Return the normal form of an admitted term as fresh JSON-compatible lists."""
    op = term[0]
    spec = OPS[op]
    if spec.variadic is not None:
        return _variadic(op, list(term[1:]))
    if op in ("always", "override"):
        return _failplan(term)  # the whole chain at once: an inner override's fate depends on outer ones
    out: Term = [op]
    for sort, arg in zip(spec.ins, term[1:], strict=True):
        out.append(normalize(arg) if sort in OPERATIONAL_SORTS else _copy_param(arg))
    return _simplify(out)


def _simplify(term: Term) -> Term:
    op = term[0]
    if op == "not":
        inner = term[1]
        if inner[0] == "not":
            return inner[1]
    elif op == "scale":
        weight, scorer = term[1], term[2]
        if weight == 0:
            return ["zero"]
        if weight == 1:
            return scorer
    elif op == "gate":
        pred, scorer = term[1], term[2]
        if pred[0] == "top":
            return scorer
    elif op == "normalize":
        if term[1][0] == "normalize":
            return term[1]
    return term
