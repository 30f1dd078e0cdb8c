"""The batch limits of decision mode (``decision_payload_limit``, ``summary_reply_limit``,
``summary_record_limit`` and ``summary_limits``) equal the straightforward computation (the policy admitted
and ranked for every limit) on random catalogs, whatever they skip (docs/performance.md)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.compaction import decision
from compactor.compaction.decision import (
    SUMMARY_PROMPT_TOKENS, decision_payload_limit, summary_limits, summary_record_limit, summary_reply_limit)
from compactor.compaction.preparation import DECISION_PAYLOAD_MAX_BYTES, MAX_SUMMARY_RECORD_BYTES
from compactor.compaction.preset import generation_tokens
from compactor.policy import PolicyAdmissionError
from compactor.policy.defaults import DEFAULT_CHAT_POLICY
from compactor.providers.base import Offer
from compactor.router import BYTES_PER_TOKEN_ESTIMATE, DECISION_PROMPT_TOKENS, Router

PROVIDERS = ("a", "b", "c")
# Around every cap's edge, and small ones that leave no room at all.
FULL = (decision._PAYLOAD_FULL_CONTEXT, decision._REPLY_FULL_CONTEXT, decision._RECORD_FULL_CONTEXT)
CONTEXTS = st.one_of(st.none(), st.sampled_from(sorted({c + d for c in FULL for d in (-2, -1, 0, 1, 2)})),
                     st.integers(min_value=-5, max_value=60_000), st.sampled_from([True, "8000", 0, 1_000_000]))


def only(provider: str) -> list[Any]:
    return ["policy", ["provider_eq", provider], ["neg", ["field", "price_in"]], ["top_k", 4, ["argmax"]], ["id"],
            ["always", {"action": "next_candidate"}]]


POLICIES = st.one_of(st.none(), st.sampled_from(PROVIDERS).map(only), st.just(["not", "a policy"]),
                     st.just(DEFAULT_CHAT_POLICY))


@st.composite
def offers(draw: Any) -> list[Offer]:
    made = []
    for index in range(draw(st.integers(min_value=0, max_value=5))):
        protocol = draw(st.sampled_from(["chat", "decisions"]))
        context = draw(CONTEXTS)
        observations: dict[str, Any] = {"supports_json_mode": True}
        if context is not None:
            observations["context"] = context
        if draw(st.booleans()) and draw(st.booleans()):
            observations["disabled"] = True
        made.append(Offer(id=f"o{index}", provider=draw(st.sampled_from(PROVIDERS)), family="f", model="m",
                          protocol=protocol, transport="t", price_in=float(index), price_out=1.0,
                          observations=observations))
    return made


def reference_context(router: Router, protocol: str, policy_ir: Any) -> int | None:
    try:
        policy = router.admit_policy(policy_ir)
    except PolicyAdmissionError:
        return router.smallest_context(protocol)
    return router.smallest_context(protocol, policy)


def reference_payload(router: Router, policy_ir: Any) -> int:
    context = reference_context(router, "decisions", decision.default_decision_policy() if policy_ir is None
                                else policy_ir)
    if context is None:
        return DECISION_PAYLOAD_MAX_BYTES
    return max(0, min(DECISION_PAYLOAD_MAX_BYTES, (context - DECISION_PROMPT_TOKENS) * BYTES_PER_TOKEN_ESTIMATE))


def reference_reply(router: Router, policy_ir: Any, max_tokens: int | None) -> int:
    if max_tokens:
        return generation_tokens(max_tokens)
    context = reference_context(router, "chat", DEFAULT_CHAT_POLICY if policy_ir is None else policy_ir)
    return generation_tokens(None) if context is None else min(generation_tokens(None), max(512, context // 4))


def reference_record(router: Router, policy_ir: Any, max_tokens: int | None) -> int:
    context = reference_context(router, "chat", DEFAULT_CHAT_POLICY if policy_ir is None else policy_ir)
    if context is None:
        return MAX_SUMMARY_RECORD_BYTES
    reply = reference_reply(router, policy_ir, max_tokens)
    room = (context - reply - SUMMARY_PROMPT_TOKENS) * BYTES_PER_TOKEN_ESTIMATE
    return max(0, min(MAX_SUMMARY_RECORD_BYTES, room * 4 // 5))


def router_of(catalog: list[Offer]) -> Router:
    return Router(catalog, transport_for=lambda offer: None)  # type: ignore[arg-type,return-value]


@settings(max_examples=400, deadline=None)
@given(offers(), POLICIES, POLICIES, st.one_of(st.none(), st.integers(min_value=0, max_value=9000)))
def test_limits_equal_the_straightforward_computation(catalog: list[Offer], decision_policy: Any, chat_policy: Any,
                                                      max_tokens: int | None) -> None:
    expected = (reference_payload(router_of(catalog), decision_policy),
                reference_reply(router_of(catalog), chat_policy, max_tokens),
                reference_record(router_of(catalog), chat_policy, max_tokens))
    assert (decision_payload_limit(router_of(catalog), decision_policy),
            summary_reply_limit(router_of(catalog), chat_policy, max_tokens),
            summary_record_limit(router_of(catalog), chat_policy, max_tokens)) == expected
    assert summary_limits(router_of(catalog), chat_policy, max_tokens) == expected[1:]


def test_a_catalog_whose_contexts_reach_every_cap_is_answered_without_ranking() -> None:
    catalog = [Offer(id=f"{protocol}-big", provider="a", family="f", model="m", protocol=protocol, transport="t",
                     price_in=0.0, price_out=0.0, observations={"context": max(FULL)})
               for protocol in ("chat", "decisions")]
    router = router_of(catalog)
    assert (decision_payload_limit(router), summary_limits(router)) == (
        DECISION_PAYLOAD_MAX_BYTES, (generation_tokens(None), MAX_SUMMARY_RECORD_BYTES))
    assert not router._admitted and not router._rankings  # nothing the answer could not use
    small = router_of([*catalog, Offer(id="small", provider="b", family="f", model="m", protocol="chat",
                                       transport="t", price_in=0.0, price_out=0.0,
                                       observations={"context": decision._REPLY_FULL_CONTEXT})])
    assert summary_limits(small, only("a")) == (generation_tokens(None), MAX_SUMMARY_RECORD_BYTES)
    assert small._admitted and small._rankings  # below the record's cap: the policy decides which offers count


def test_each_cap_starts_exactly_at_its_full_context() -> None:
    """Just below a cap's full context the policy's own offers decide; from it on any offer does."""
    for full in FULL:
        for below in (full - 1, full):
            catalog = [Offer(id=f"{protocol}-{provider}", provider=provider, family="f", model="m", protocol=protocol,
                             transport="t", price_in=0.0, price_out=0.0, observations={"context": context})
                       for protocol in ("chat", "decisions") for provider, context in (("b", below), ("a", full + 5))]
            for max_tokens in (None, 700):
                assert (decision_payload_limit(router_of(catalog), only("a")),
                        summary_reply_limit(router_of(catalog), only("a"), max_tokens),
                        summary_limits(router_of(catalog), only("a"), max_tokens)) == (
                    reference_payload(router_of(catalog), only("a")),
                    reference_reply(router_of(catalog), only("a"), max_tokens),
                    (reference_reply(router_of(catalog), only("a"), max_tokens),
                     reference_record(router_of(catalog), only("a"), max_tokens)))
