"""Ranking semantics: every Pred, Scorer and Selector, meets_req, and the default policies."""

from __future__ import annotations

import math
from typing import Any

import pytest

from compactor.policy import DEFAULT_CHAT_POLICY, DEFAULT_DECISIONS_POLICY, admit_policy
from compactor.policy.ranking import Minstd, Requirements, meets_requirements, rank
from compactor.providers.base import Offer

NEXT = {"action": "next_candidate"}


def offer(offer_id: str, *, provider: str | None = None, family: str = "fam", model: str | None = None,
          price_in: float | None = None, price_out: float | None = None, **observations: Any) -> Offer:
    return Offer(id=offer_id, provider=provider or offer_id, family=family, model=model or family, protocol="chat",
                 transport="openai", price_in=price_in, price_out=price_out, observations=observations)


def ranked_ids(term: list[Any], offers: list[Offer], requirements: Requirements = Requirements(), *,
               seed: int | None = None, fields: dict[str, str] | None = None) -> list[str]:
    return [e.offer.id for e in rank(admit_policy(term, fields=fields), offers, requirements, seed=seed).ranked]


def verdicts(pred: list[Any], offers: list[Offer], requirements: Requirements = Requirements(),
             fields: dict[str, str] | None = None) -> dict[str, str | None]:
    ranking = rank(admit_policy(["policy", pred, ["zero"], ["ordered"], ["id"], ["always", NEXT]], fields=fields),
                   offers, requirements)
    return {**{e.offer.id: None for e in ranking.ranked}, **{r.offer.id: r.reason for r in ranking.rejected}}


def scored(scorer: list[Any], offers: list[Offer]) -> list[float]:
    ranking = rank(admit_policy(["policy", ["top"], scorer, ["ordered"], ["id"], ["always", NEXT]]), offers)
    return [e.score for e in ranking.ranked]


# -- Preds -----------------------------------------------------------------------------------

GOLD = offer("gold", provider="pa", family="big", price_in=3, tier="partner", has_tee=True, context=8000,
             supports_tools=True, served_by="peer-1")
CHEAP = offer("cheap", provider="pb", family="small", price_in=0.5, tier="marketplace", no_log=True, breaker_open=True)
BARE = offer("bare", provider="pc", family="small")
OFFERS = [GOLD, CHEAP, BARE]


@pytest.mark.parametrize("pred, expected", [
    (["top"], {"gold": None, "cheap": None, "bare": None}),
    (["bot"], {"gold": "bot", "cheap": "bot", "bare": "bot"}),
    (["is", "has_tee"], {"gold": None, "cheap": "is:has_tee", "bare": "is:has_tee"}),
    (["not", ["is", "breaker_open"]], {"gold": None, "cheap": "not", "bare": None}),
    (["cmp", "price_in", "le", 1], {"gold": "cmp:price_in:le", "cheap": None, "bare": "cmp:price_in:le"}),
    (["cmp", "price_in", "gt", 1], {"gold": None, "cheap": "cmp:price_in:gt", "bare": None}),  # unpriced = +inf
    (["cmp", "context", "ge", 1], {"gold": None, "cheap": "cmp:context:ge", "bare": "cmp:context:ge"}),
    (["cmp", "success_rate", "eq", 1], {"gold": None, "cheap": None, "bare": None}),
    (["cmp", "tok_s", "ne", 0], {"gold": "cmp:tok_s:ne", "cheap": "cmp:tok_s:ne", "bare": "cmp:tok_s:ne"}),
    (["cmp", "latency_ms", "lt", 1e9], {"gold": "cmp:latency_ms:lt", "cheap": "cmp:latency_ms:lt",
                                         "bare": "cmp:latency_ms:lt"}),
    (["tier_eq", "fallback"], {"gold": "tier", "cheap": "tier", "bare": None}),
    (["min_tier", "marketplace"], {"gold": None, "cheap": None, "bare": "min_tier"}),
    (["family_eq", "small"], {"gold": "model_family", "cheap": None, "bare": None}),
    (["provider_eq", "pa"], {"gold": None, "cheap": "provider", "bare": "provider"}),
    (["served_by_eq", "peer-1"], {"gold": None, "cheap": "served_by", "bare": "served_by"}),
    (["served_by_eq", "pc"], {"gold": "served_by", "cheap": "served_by", "bare": None}),
    (["has_cap", "tools"], {"gold": None, "cheap": "missing_capability:tools", "bare": "missing_capability:tools"}),
    (["and", ["is", "no_log"], ["family_eq", "small"]], {"gold": "model_family", "cheap": None, "bare": "is:no_log"}),
    (["or", ["is", "has_tee"], ["is", "no_log"]], {"gold": None, "cheap": None, "bare": "or"}),
    (["scope_matches"], {"gold": None, "cheap": None, "bare": None}),
])
def test_preds(pred: list[Any], expected: dict[str, str | None]) -> None:
    assert verdicts(pred, OFFERS) == expected


def test_and_reports_first_failure_in_normal_form_order() -> None:
    # normal form sorts (cmp …) before (is …)
    assert verdicts(["and", ["is", "has_tee"], ["cmp", "price_in", "le", 0]], [BARE]) == {"bare": "cmp:price_in:le"}


def test_scope_matches() -> None:
    scoped = offer("scoped", scope="eu")
    assert verdicts(["scope_matches"], [scoped, BARE], Requirements(scope="us")) == {"scoped": "scope", "bare": None}
    assert verdicts(["scope_matches"], [scoped], Requirements(scope="eu")) == {"scoped": None}


def test_declared_field_defaults() -> None:
    hot = offer("hot", cache_hot=True)
    assert verdicts(["is", "cache_hot"], [hot, BARE], fields={"cache_hot": "Bool"}) == {
        "hot": None, "bare": "is:cache_hot"}


def test_wrongly_typed_observations_read_as_defaults() -> None:
    odd = offer("odd", context="lots", has_tee="yes", success_rate=math.nan)
    assert verdicts(["cmp", "context", "eq", 0], [odd]) == {"odd": None}
    assert verdicts(["is", "has_tee"], [odd]) == {"odd": "is:has_tee"}
    assert verdicts(["cmp", "success_rate", "eq", 1], [odd]) == {"odd": None}


# -- meets_req -------------------------------------------------------------------------------

@pytest.mark.parametrize("requirements, reason", [
    (Requirements(), None),
    (Requirements(needs=frozenset({"json_mode"})), "missing_capability:json_mode"),
    (Requirements(needs=frozenset({"vision", "tools"})), "missing_capability:tools"),
    (Requirements(needs=frozenset({"seed"})), "missing_capability:seed"),
    (Requirements(needs=frozenset({"telepathy"})), None),  # needs without a capability flag are ignored
    (Requirements(min_context=10_000), "min_context"),
    (Requirements(model_family="other"), "model_family"),
    (Requirements(tier="partner"), "tier"),
    (Requirements(tee_required=True), "tee_required"),
    (Requirements(no_log=True), "no_log"),
    (Requirements(min_tok_s=10), "min_tok_s"),
])
def test_meets_req_failures(requirements: Requirements, reason: str | None) -> None:
    assert meets_requirements(offer("x", context=8000), requirements) == reason


def test_meets_req_passes_when_satisfied_and_reports_first_failure() -> None:
    rich = offer("rich", family="f", context=32000, supports_json_mode=True, supports_tools=True,
                 supports_vision=True, supports_seed=True, tier="partner", has_tee=True, tok_s=50)
    everything = Requirements(needs=frozenset({"json_mode", "tools", "vision", "seed"}), min_context=32000,
                              model_family="f", tier="partner", tee_required=True, no_log=True, min_tok_s=50)
    assert meets_requirements(rich, everything) is None  # has_tee satisfies no_log
    assert meets_requirements(offer("x"), everything) == "missing_capability:json_mode"
    assert meets_requirements(offer("x", supports_json_mode=True, supports_tools=True, supports_vision=True,
                                    supports_seed=True), everything) == "min_context"


def test_meets_req_in_a_policy_filters_json_mode() -> None:
    offers = [offer("plain", price_in=0.1), offer("json", price_in=5, supports_json_mode=True)]
    ranking = rank(admit_policy(DEFAULT_CHAT_POLICY), offers, Requirements(needs=frozenset({"json_mode"})))
    assert [e.offer.id for e in ranking.ranked] == ["json"]
    assert [(r.offer.id, r.reason) for r in ranking.rejected] == [("plain", "missing_capability:json_mode")]


# -- Scorers ---------------------------------------------------------------------------------

PRICED = [offer("a", price_in=2), offer("b", price_in=4), offer("c", price_in=3), offer("u")]


@pytest.mark.parametrize("scorer, expected", [
    (["zero"], [0, 0, 0, 0]),
    (["lit", 2.5], [2.5, 2.5, 2.5, 2.5]),
    (["field", "price_in"], [2, 4, 3, math.inf]),
    (["neg", ["field", "price_in"]], [-1, -3, -2, -math.inf]),
    (["normalize", ["field", "price_in"]], [0, 1, 0.5, math.inf]),
    (["neg", ["normalize", ["field", "price_in"]]], [1, 0, 0.5, -math.inf]),
    (["scale", 2, ["field", "price_in"]], [4, 8, 6, math.inf]),
    (["scale", -1, ["field", "price_in"]], [-2, -4, -3, -math.inf]),
    (["add", ["field", "price_in"], ["lit", 1]], [3, 5, 4, math.inf]),
    (["add", ["field", "price_in"], ["neg", ["field", "price_in"]]], [1, 1, 1, -math.inf]),  # inf − inf
    (["clamp", 2.5, 3.5, ["field", "price_in"]], [2.5, 3.5, 3, 3.5]),
    (["gate", ["cmp", "price_in", "le", 3], ["field", "price_in"]], [2, 0, 3, 0]),
    (["gate", ["cmp", "price_in", "le", 3], ["neg", ["field", "price_in"]]], [-1, 0, -2, 0]),
    (["field", "success_rate"], [1, 1, 1, 1]),
])
def test_scorers(scorer: list[Any], expected: list[float]) -> None:
    assert scored(scorer, PRICED) == expected


def test_normalize_degenerate_population() -> None:
    assert scored(["normalize", ["field", "context"]], [offer("a", context=5), offer("b", context=5)]) == [0, 0]
    assert scored(["normalize", ["field", "price_in"]], [offer("a"), offer("b")]) == [math.inf, math.inf]


def test_unpriced_offers_rank_last_under_both_default_scorers() -> None:
    for term in (DEFAULT_CHAT_POLICY, DEFAULT_DECISIONS_POLICY):
        assert ranked_ids(term, PRICED) == ["a", "c", "b", "u"]


def test_conformance_policy_decision() -> None:
    # The public sigma-pol/v2 "argmax-gate" vector: scores [4800.4, 0], p3 rejected by min_tier.
    offers = [offer("p1", price_in=3, context=8000, tier="partner"),
              offer("p2", context=8000, tier="marketplace", breaker_open=True),
              offer("p3", context=8000, tier="fallback")]
    term = ["policy", ["min_tier", "marketplace"],
            ["gate", ["not", ["is", "breaker_open"]],
             ["add", ["scale", 0.6, ["field", "context"]], ["scale", 0.4, ["neg", ["normalize", ["field", "price_in"]]]]]],
            ["argmax"], ["id"], ["always", NEXT]]
    ranking = rank(admit_policy(term), offers)
    assert [(e.offer.id, e.score) for e in ranking.ranked] == [("p1", pytest.approx(4800.4, abs=1e-12)), ("p2", 0)]
    assert [(r.offer.id, r.reason) for r in ranking.rejected] == [("p3", "min_tier")]


# -- Selectors -------------------------------------------------------------------------------

def policy_with(selector: list[Any], scorer: list[Any] | None = None) -> list[Any]:
    return ["policy", ["top"], scorer or ["neg", ["field", "price_in"]], selector, ["id"], ["always", NEXT]]


TIED = [offer("t1", price_in=1), offer("t2", price_in=1), offer("t3", price_in=1), offer("t0", price_in=0.5)]


def test_argmax_is_stable_on_ties() -> None:
    assert ranked_ids(policy_with(["argmax"]), TIED) == ["t0", "t1", "t2", "t3"]


def test_ordered_keeps_input_order() -> None:
    assert ranked_ids(policy_with(["ordered"]), TIED) == ["t1", "t2", "t3", "t0"]


def test_top_k() -> None:
    assert ranked_ids(policy_with(["top_k", 2, ["argmax"]]), TIED) == ["t0", "t1"]
    assert ranked_ids(policy_with(["top_k", 10, ["ordered"]]), TIED) == ["t1", "t2", "t3", "t0"]


def test_prefer_moves_matching_offers_first_in_inner_order() -> None:
    offers = [offer("x", price_in=1, breaker_open=True), offer("y", price_in=2), offer("z", price_in=3)]
    assert ranked_ids(DEFAULT_DECISIONS_POLICY, offers) == ["y", "z", "x"]
    assert ranked_ids(policy_with(["prefer", ["cmp", "price_in", "ge", 2], ["ordered"]]), offers) == ["y", "z", "x"]


def test_chain_is_a_priority_whitelist() -> None:
    offers = [offer("a", provider="pa", family="fa"), offer("b", provider="pb", family="fb", model="mb"),
              offer("c", provider="pc", family="fc")]
    chain = [{"provider": "pb", "model": "mb"}, {"provider_id": "pa", "model_family": "fa"}]
    assert ranked_ids(policy_with(["chain", chain]), offers) == ["b", "a"]


def test_sample_is_seeded_and_a_permutation() -> None:
    offers = [offer(f"o{i}", price_in=i) for i in range(6)]
    term = policy_with(["sample", 2.0])
    first = ranked_ids(term, offers, seed=7)
    assert ranked_ids(term, offers, seed=7) == first
    assert sorted(first) == sorted(o.id for o in offers)
    assert len({tuple(ranked_ids(term, offers, seed=s)) for s in range(20)}) > 1


def test_sample_with_zero_temperature_is_argmax() -> None:
    offers = [offer(f"o{i}", price_in=i) for i in range(5)]
    for seed in range(5):
        assert ranked_ids(policy_with(["sample", 0]), offers, seed=seed) == ranked_ids(policy_with(["argmax"]), offers)


def test_sample_conformance_vector() -> None:
    offers = [offer("p1", context=8000), offer("p2", context=8000), offer("p3", context=8000)]
    assert ranked_ids(policy_with(["sample", 0.5], ["field", "context"]), offers, seed=42) == ["p1", "p2", "p3"]


def test_minstd_generator() -> None:
    rng = Minstd(1)
    state = 1
    for _ in range(4):
        state = state * 16807 % 2147483647
    expected = state * 16807 % 2147483647
    assert rng() == expected / 2147483647
    assert 0 < Minstd(0)() < 1 and Minstd(0)() == Minstd(2147483646)()


def test_xforms_do_not_change_ranking() -> None:
    term = ["policy", ["top"], ["neg", ["field", "price_in"]], ["argmax"],
            ["seq", ["set_param", "temperature", 0], ["jitter", "top_p", 0.1]], ["always", NEXT]]
    assert ranked_ids(term, PRICED) == ["a", "c", "b", "u"]
