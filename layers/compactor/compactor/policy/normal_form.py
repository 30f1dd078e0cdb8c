"""The Σ_pol normal form: one canonical representative per equivalence class of terms.

Equations (and nothing else; there is no arithmetic on numbers):

* AC ops (``and``, ``or``, ``add``) flatten, drop their unit, collapse on an absorbing element and
  sort children by canonical encoding; an empty result is the unit, a single child stands alone;
* ``seq`` flattens and drops ``id`` (order kept);
* ``not(not p) = p``, ``not(top) = bot``, ``not(bot) = top``;
* ``scale(1, s) = s``; ``scale(0, s) = scale(a, zero) = zero``;
* ``gate(top, s) = s``; ``gate(bot, s) = gate(p, zero) = zero``;
* ``normalize(normalize(s)) = normalize(s)``;
* a FailPlan becomes ``always(base)`` wrapped by overrides sorted by reason (outer override wins,
  overrides equal to the base dropped).

Input must already be admitted (:func:`compactor.policy.admission.check_term`).
"""

from __future__ import annotations

import copy
from typing import Any

from .encoding import encode_param, encode_term
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
        overrides.setdefault(reason, action)  # the outermost override of a reason wins
        current = inner
    base = current[1]
    base_key = encode_param(base)
    result: Term = ["always", base]
    for reason in sorted(overrides):
        if encode_param(overrides[reason]) != base_key:
            result = ["override", result, reason, overrides[reason]]
    return result


def normalize(term: Any) -> Term:
    """Return the normal form of an admitted term as fresh JSON-compatible lists."""
    op = term[0]
    spec = OPS[op]
    if spec.variadic is not None:
        return _variadic(op, list(term[1:]))
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
        if inner[0] in ("top", "bot"):
            return ["bot" if inner[0] == "top" else "top"]
    elif op == "scale":
        weight, scorer = term[1], term[2]
        if weight == 0 or scorer[0] == "zero":
            return ["zero"]
        if weight == 1:
            return scorer
    elif op == "gate":
        pred, scorer = term[1], term[2]
        if pred[0] == "top":
            return scorer
        if pred[0] == "bot" or scorer[0] == "zero":
            return ["zero"]
    elif op == "normalize":
        if term[1][0] == "normalize":
            return term[1]
    elif op in ("always", "override"):
        return _failplan(term)
    return term
