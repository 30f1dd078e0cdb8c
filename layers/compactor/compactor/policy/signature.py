"""The Σ_pol signature as data: every operation, its argument sorts and its result sort.

Operational sorts (``Pred``, ``Scorer``, ``Selector``, ``Xform``, ``FailPlan``, ``Policy``) mark
argument positions that hold subterms; every other sort names a parameter carried inline. AC and
associative operations are declared variadic with their unit (and absorbing element), so the
normal form is driven by this table rather than by per-operation code.
"""

from __future__ import annotations

from ..records import record

VERSION = "sigma-pol/v2"

PRED, SCORER, SELECTOR, XFORM, FAILPLAN, POLICY = (
    "Pred", "Scorer", "Selector", "Xform", "FailPlan", "Policy",
)
OPERATIONAL_SORTS = frozenset({PRED, SCORER, SELECTOR, XFORM, FAILPLAN, POLICY})

RELATIONS = frozenset({"lt", "le", "eq", "ne", "ge", "gt"})
# Default tier order, lowest first.
TIER_ORDER = ("fallback", "marketplace", "partner")
ACTIONS = frozenset({
    "retry_same", "next_candidate", "next_provider_same_model", "disable_provider", "abort",
})

MAX_DEPTH = 64
MAX_NODES = 4096


@record(frozen=True)
class OpSpec:
    """One operation: result sort plus either fixed argument sorts or one variadic child sort."""

    out: str
    ins: tuple[str, ...] = ()
    variadic: str | None = None
    commutative: bool = False  # AC: children sorted by canonical encoding
    unit: str | None = None
    absorbing: str | None = None


def _op(out: str, *ins: str) -> OpSpec:
    return OpSpec(out=out, ins=ins)


OPS: dict[str, OpSpec] = {
    # Pred: boolean algebra over candidate observations.
    "top": _op(PRED),
    "bot": _op(PRED),
    "and": OpSpec(PRED, variadic=PRED, commutative=True, unit="top", absorbing="bot"),
    "or": OpSpec(PRED, variadic=PRED, commutative=True, unit="bot", absorbing="top"),
    "not": _op(PRED, PRED),
    "meets_req": _op(PRED),
    "scope_matches": _op(PRED),
    "is": _op(PRED, "BoolField"),
    "cmp": _op(PRED, "NumField", "Rel", "Num"),
    "tier_eq": _op(PRED, "Tier"),
    "min_tier": _op(PRED, "Tier"),
    "family_eq": _op(PRED, "Family"),
    "provider_eq": _op(PRED, "Provider"),
    "served_by_eq": _op(PRED, "ServedBy"),
    "has_cap": _op(PRED, "Capability"),
    # Scorer: population-relative scores.
    "zero": _op(SCORER),
    "add": OpSpec(SCORER, variadic=SCORER, commutative=True, unit="zero"),
    "scale": _op(SCORER, "Num", SCORER),
    "gate": _op(SCORER, PRED, SCORER),
    "neg": _op(SCORER, SCORER),
    "normalize": _op(SCORER, SCORER),
    "clamp": _op(SCORER, "Num", "Num", SCORER),
    "field": _op(SCORER, "NumField"),
    "lit": _op(SCORER, "Num"),
    # Selector: scored population -> failover order.
    "argmax": _op(SELECTOR),
    "ordered": _op(SELECTOR),
    "sample": _op(SELECTOR, "Num"),
    "chain": _op(SELECTOR, "Chain"),
    "top_k": _op(SELECTOR, "Count", SELECTOR),
    "prefer": _op(SELECTOR, PRED, SELECTOR),
    # Xform: request transforms (a monoid under seq).
    "id": _op(XFORM),
    "seq": OpSpec(XFORM, variadic=XFORM, unit="id"),
    "set_param": _op(XFORM, "ParamName", "Scalar"),
    "inject_seed": _op(XFORM, "ParamName"),
    "clamp_param": _op(XFORM, "ParamName", "Num", "Num"),
    "jitter": _op(XFORM, "ParamName", "Num"),
    "filter_text": _op(XFORM, "Recipe"),
    "filter_image": _op(XFORM, "Recipe"),
    "custom": _op(XFORM, "Sym"),
    "when": _op(XFORM, PRED, XFORM),
    # FailPlan: error kind -> Action.
    "always": _op(FAILPLAN, "Action"),
    "override": _op(FAILPLAN, FAILPLAN, "FailReason", "Action"),
    # The single Policy constructor: five slots.
    "policy": _op(POLICY, PRED, SCORER, SELECTOR, XFORM, FAILPLAN),
}
