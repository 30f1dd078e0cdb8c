"""Reference semantics of a policy over offers: filter, score, select (docs/behaviour.md#the-policy-language).

* **Pred** verdicts carry the reason of the first failure (``cmp:price_in:le``, ``not``, ``or``,
  ``missing_capability:json_mode`` …), which becomes the rejection reason.
* **Scorers** are population-relative. Infinite observations (an unpriced offer reads
  ``price_in = +inf``) stay infinite through ``neg``/``scale``/``add``, so ``neg(field price_in)``
  and ``neg(normalize(field price_in))`` both rank unpriced offers last. ``normalize`` is the
  min–max over the *finite* scores (degenerate → 0; ±inf keep their sign, so one unpriced offer
  cannot flatten the prices of all the others); ``gate`` sets a failing offer's score to exactly 0;
  a sum of +inf and −inf (undefined) scores −inf.
* **Selectors** return the whole failover order: ``argmax`` (score descending, input order on
  ties), ``ordered``, ``sample`` (rank-geometric with the pinned MINSTD generator), ``chain``
  (whitelist in chain order), ``top_k`` and ``prefer`` (offers satisfying the Pred first, each group
  in the inner order).
* **Xforms** do not change requests here: the request types carry no sampling parameters, so every
  Xform is admitted, normalised and encoded (it is part of the identity) and applied as identity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence

from ..providers.base import Offer
from ..records import record
from .admitted import Policy
from .fields import FieldDecl, observe
from .normal_form import Term
from .signature import TIER_ORDER

# A request need and the offer observation (capability flag) that satisfies it.
CAPABILITY_FLAGS: Mapping[str, str] = {
    "tools": "supports_tools",
    "vision": "supports_vision",
    "json_mode": "supports_json_mode",
    "seed": "supports_seed",
}
DEFAULT_TIER = "fallback"
_MINSTD_MODULUS = 2147483647
_MINSTD_MULTIPLIER = 16807


@record(frozen=True)
class Requirements:
    """The request's requirement block that ``meets_req`` checks (first failure is the reason)."""

    needs: frozenset[str] = frozenset()
    min_context: float | None = None
    model_family: str | None = None
    tier: str | None = None
    tee_required: bool = False
    no_log: bool = False
    min_tok_s: float | None = None
    scope: str | None = None


@record(frozen=True)
class RankedOffer:
    """An offer the filter kept and its score."""

    offer: Offer
    score: float


@record(frozen=True)
class Rejection:
    """An offer the filter refused and why."""

    offer: Offer
    reason: str


@record(frozen=True)
class Ranking:
    """``ranked``: the failover order with scores; ``rejected``: offers the filter refused."""

    ranked: tuple[RankedOffer, ...]
    rejected: tuple[Rejection, ...]


@record(frozen=True)
class _Context:
    """What a policy term reads an offer's fields with."""

    fields: Mapping[str, FieldDecl]
    requirements: Requirements

    def value(self, offer: Offer, name: str) -> float | bool:
        return observe(offer, name, self.fields[name])


def _flag(offer: Offer, name: str) -> bool:
    return bool(offer.observations.get(name))


def _tier(offer: Offer) -> str:
    tier = offer.observations.get("tier")
    return tier if isinstance(tier, str) else DEFAULT_TIER


def _tier_rank(tier: str) -> int:
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else -1


def meets_requirements(offer: Offer, requirements: Requirements) -> str | None:
    """docs/behaviour.md#the-policy-language ``meets_req``: ``None`` when satisfied, else the first failure's reason."""
    for need in sorted(requirements.needs):
        flag = CAPABILITY_FLAGS.get(need)
        if flag is not None and not _flag(offer, flag):
            return f"missing_capability:{need}"
    if requirements.min_context is not None:
        context = observe(offer, "context", FieldDecl("Num", 0.0))
        if context < requirements.min_context:
            return "min_context"
    if requirements.model_family is not None and offer.family != requirements.model_family:
        return "model_family"
    if requirements.tier is not None and _tier(offer) != requirements.tier:
        return "tier"
    if requirements.tee_required and not _flag(offer, "has_tee"):
        return "tee_required"
    if requirements.no_log and not (_flag(offer, "no_log") or _flag(offer, "has_tee")):
        return "no_log"
    if requirements.min_tok_s is not None:
        tok_s = offer.observations.get("tok_s")
        if not isinstance(tok_s, (int, float)) or isinstance(tok_s, bool) or tok_s < requirements.min_tok_s:
            return "min_tok_s"
    return None


def _scope_matches(offer: Offer, requirements: Requirements) -> bool:
    """An offer without a ``scope`` observation serves every scope; one with it only that scope."""
    scope = offer.observations.get("scope")
    return requirements.scope is None or scope is None or scope == requirements.scope


_RELATIONS: Mapping[str, Callable[[float, float], bool]] = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "ge": lambda a, b: a >= b,
    "gt": lambda a, b: a > b,
}


def pred_failure(term: Term, offer: Offer, ctx: _Context) -> str | None:
    """Evaluate a Pred: ``None`` when it holds, else the rejection reason."""
    op = term[0]
    if op == "top":
        return None
    if op == "bot":
        return "bot"
    if op == "and":
        return next((r for child in term[1:] if (r := pred_failure(child, offer, ctx))), None)
    if op == "or":
        return None if any(pred_failure(c, offer, ctx) is None for c in term[1:]) else "or"
    if op == "not":
        return "not" if pred_failure(term[1], offer, ctx) is None else None
    if op == "meets_req":
        return meets_requirements(offer, ctx.requirements)
    if op == "scope_matches":
        return None if _scope_matches(offer, ctx.requirements) else "scope"
    if op == "is":
        return None if ctx.value(offer, term[1]) else f"is:{term[1]}"
    if op == "cmp":
        _, name, rel, number = term
        return None if _RELATIONS[rel](ctx.value(offer, name), number) else f"cmp:{name}:{rel}"
    if op == "tier_eq":
        return None if _tier(offer) == term[1] else "tier"
    if op == "min_tier":
        return None if _tier_rank(_tier(offer)) >= _tier_rank(term[1]) else "min_tier"
    if op == "family_eq":
        return None if offer.family == term[1] else "model_family"
    if op == "provider_eq":
        return None if offer.provider == term[1] else "provider"
    if op == "served_by_eq":
        served_by = offer.observations.get("served_by") or offer.provider
        return None if served_by == term[1] else "served_by"
    if op == "has_cap":
        capability = term[1]
        flag = CAPABILITY_FLAGS.get(capability, capability)
        return None if _flag(offer, flag) else f"missing_capability:{capability}"
    raise AssertionError(f"not a Pred op: {op}")


def _sum(values: Iterator[float]) -> float:
    """Left-to-right IEEE addition (children in normal-form order); +inf + −inf scores −inf."""
    total = sum(values, 0.0)
    return -math.inf if math.isnan(total) else total


def _normalize(values: list[float]) -> list[float]:
    finite = [v for v in values if math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = high - low
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append(v)
        elif span <= 0:
            out.append(0.0)
        else:
            out.append((v - low) / span)
    return out


def scores(term: Term, offers: Sequence[Offer], ctx: _Context) -> list[float]:
    """Evaluate a Scorer over the population of offers that passed the filter."""
    op = term[0]
    if op == "zero":
        return [0.0] * len(offers)
    if op == "lit":
        return [float(term[1])] * len(offers)
    if op == "field":
        return [float(ctx.value(offer, term[1])) for offer in offers]
    if op == "add":
        columns = [scores(child, offers, ctx) for child in term[1:]]
        return [_sum(column[i] for column in columns) for i in range(len(offers))]
    if op == "scale":
        return [term[1] * v for v in scores(term[2], offers, ctx)]
    if op == "gate":
        inner = scores(term[2], offers, ctx)
        return [v if pred_failure(term[1], o, ctx) is None else 0.0 for o, v in zip(offers, inner)]
    if op == "neg":
        return [1.0 - v for v in scores(term[1], offers, ctx)]
    if op == "normalize":
        return _normalize(scores(term[1], offers, ctx))
    if op == "clamp":
        low, high = term[1], term[2]
        return [min(max(v, low), high) for v in scores(term[3], offers, ctx)]
    raise AssertionError(f"not a Scorer op: {op}")


class Minstd:
    """The pinned MINSTD generator: seed mod (2^31−1) (non-positive → +2^31−2), four warm-up steps,
    floats ``state / (2^31−1)`` in (0, 1)."""

    def __init__(self, seed: int = 0) -> None:
        state = seed % _MINSTD_MODULUS
        self._state = state if state > 0 else state + _MINSTD_MODULUS - 1
        for _ in range(4):
            self._step()

    def _step(self) -> int:
        self._state = (self._state * _MINSTD_MULTIPLIER) % _MINSTD_MODULUS
        return self._state

    def __call__(self) -> float:
        return self._step() / _MINSTD_MODULUS


def _argmax(entries: list[RankedOffer]) -> list[RankedOffer]:
    return sorted(entries, key=lambda entry: -entry.score)  # stable: input order on ties


def _sample(entries: list[RankedOffer], temperature: float, seed: int) -> list[RankedOffer]:
    t = max(temperature, 0.0)
    q = t / (t + 1.0)
    pool: list[tuple[float, RankedOffer]] = []
    weight = 1.0
    for entry in _argmax(entries):
        pool.append((weight, entry))
        weight *= q
    rng = Minstd(seed)
    out: list[RankedOffer] = []
    while pool:
        target = rng() * sum(w for w, _ in pool)
        pick, cumulative = len(pool) - 1, 0.0
        for index, (w, _) in enumerate(pool):
            cumulative += w
            if target <= cumulative:
                pick = index
                break
        out.append(pool.pop(pick)[1])
    return out


def _chain(entries: list[RankedOffer], chain: list[dict[str, str]]) -> list[RankedOffer]:
    def priority(offer: Offer) -> int | None:
        for index, link in enumerate(chain):
            provider = link.get("provider", link.get("provider_id"))
            model = link.get("model", link.get("model_family"))
            if offer.provider == provider and model in (offer.family, offer.model):
                return index
        return None

    keyed = [(p, e) for e in entries if (p := priority(e.offer)) is not None]
    return [entry for _, entry in sorted(keyed, key=lambda pair: pair[0])]


def select(term: Term, entries: list[RankedOffer], ctx: _Context, seed: int) -> list[RankedOffer]:
    """Evaluate a Selector: the full failover order."""
    op = term[0]
    if op == "argmax":
        return _argmax(entries)
    if op == "ordered":
        return list(entries)
    if op == "sample":
        return _sample(entries, float(term[1]), seed)
    if op == "chain":
        return _chain(entries, term[1])
    if op == "top_k":
        return select(term[2], entries, ctx, seed)[: int(term[1])]
    if op == "prefer":
        inner = select(term[2], entries, ctx, seed)
        preferred = [e for e in inner if pred_failure(term[1], e.offer, ctx) is None]
        return preferred + [e for e in inner if pred_failure(term[1], e.offer, ctx) is not None]
    raise AssertionError(f"not a Selector op: {op}")


def rank(policy: Policy, offers: Sequence[Offer], requirements: Requirements = Requirements(), *,
         seed: int | None = None) -> Ranking:
    """Filter, score and order ``offers`` by ``policy`` (offers in catalog order)."""
    ctx = _Context(policy.fields, requirements)
    passed: list[Offer] = []
    rejected: list[Rejection] = []
    for offer in offers:
        reason = pred_failure(policy.pred, offer, ctx)
        if reason is None:
            passed.append(offer)
        else:
            rejected.append(Rejection(offer, reason))
    entries = [RankedOffer(o, s) for o, s in zip(passed, scores(policy.scorer, passed, ctx))]
    ordered = select(policy.selector, entries, ctx, 0 if seed is None else seed)
    return Ranking(ranked=tuple(ordered), rejected=tuple(rejected))
