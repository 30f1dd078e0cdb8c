"""Normal form laws, canonical encoding, number rendering and identities."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.identity import fingerprint
from compactor.policy import PolicyAdmissionError, admit_policy, encode_number, with_envelope
from compactor.policy.admission import check_term
from compactor.policy.encoding import encode
from compactor.policy.fields import field_schema
from compactor.policy.normal_form import normalize

NEXT = {"action": "next_candidate"}
GOLDEN_TERM = ["policy", ["meets_req"], ["field", "context"], ["argmax"], ["id"], ["always", NEXT]]
GOLDEN_ENCODING = ('sigma-pol/v2:(policy (meets_req) (field "context") (argmax) (id) '
                   '(always {"action":"next_candidate"}))')


def encoded(term: Any) -> str:
    """Encoding of the normal form of any admitted term (any sort)."""
    check_term(term, field_schema())
    return encode(normalize(term))


def body(term: Any) -> str:
    return encoded(term).removeprefix("sigma-pol/v2:")


# -- golden vectors --------------------------------------------------------------------------

def test_reference_golden_policy_encoding() -> None:
    policy = admit_policy(GOLDEN_TERM)
    assert policy.encoding == GOLDEN_ENCODING
    assert policy.identity == hashlib.sha256(GOLDEN_ENCODING.encode()).hexdigest()
    assert policy.fingerprint == fingerprint(GOLDEN_ENCODING)


# Vectors of the public sigma-pol/v2 conformance suite (encoding + fingerprint).
@pytest.mark.parametrize("term, encoding, expected_fingerprint", [
    (["and", ["meets_req"], ["is", "has_tee"], ["cmp", "price_in", "le", 5]],
     '(and (cmp "price_in" "le" 5) (is "has_tee") (meets_req))', "1723965313-18551162"),
    (["and", ["cmp", "context", "ge", 0.10000000000000001], ["cmp", "context", "ge", 4000]],
     '(and (cmp "context" "ge" 0.10000000000000001) (cmp "context" "ge" 4000))', "1629580888-107822111"),
    (["and", ["cmp", "context", "ge", 1.0000000000000001e-05], ["cmp", "price_out", "le", 2.5000000000000002e-10],
      ["cmp", "context", "le", 1e+100]],
     '(and (cmp "context" "ge" 1.0000000000000001e-05) (cmp "context" "le" 1e+100) '
     '(cmp "price_out" "le" 2.5000000000000002e-10))', "2101217329-364613294"),
    (["override", ["override", ["override", ["always", NEXT], "rate_limit", {"action": "abort"}],
                   "auth_error", {"action": "disable_provider"}], "rate_limit", {"action": "disable_provider"}],
     '(override (override (always {"action":"next_candidate"}) "auth_error" {"action":"disable_provider"}) '
     '"rate_limit" {"action":"disable_provider"})', "1478743874-1033577434"),
    (["or", ["family_eq", "gpt-5.5"], ["family_eq", "claude-opus-4-8"]],
     '(or (family_eq "claude-opus-4-8") (family_eq "gpt-5.5"))', "1578544077-859188145"),
    (["seq", ["set_param", "max_tokens", 4096], ["inject_seed", "seed"], ["clamp_param", "temperature", 0, 1],
      ["jitter", "top_p", 0.10000000000000001], ["filter_text", ["NFKC", "RmZeroWidth"]]],
     '(seq (set_param "max_tokens" 4096) (inject_seed "seed") (clamp_param "temperature" 0 1) '
     '(jitter "top_p" 0.10000000000000001) (filter_text ["NFKC","RmZeroWidth"]))', "1458839758-144644307"),
    (["policy", ["top"], ["field", "context"], ["top_k", 2, ["argmax"]], ["id"], ["always", NEXT]],
     '(policy (top) (field "context") (top_k 2 (argmax)) (id) (always {"action":"next_candidate"}))',
     "1678125052-626723119"),
])
def test_conformance_vectors(term: Any, encoding: str, expected_fingerprint: str) -> None:
    assert encoded(term) == "sigma-pol/v2:" + encoding
    assert fingerprint(encoded(term)) == expected_fingerprint


# -- numbers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (0, "0"), (-0.0, "0"), (0.0, "0"), (5, "5"), (5.0, "5"), (-7.0, "-7"), (4096, "4096"),
    (2**53, "9007199254740992"), (float(2**53), "9007199254740992"), (-(2**53), "-9007199254740992"),
    (2**53 + 2, "9007199254740994"), (float(2**54), "18014398509481984"),
    (1e100, "1e+100"), (1e16, "10000000000000000"), (1e300, "1.0000000000000001e+300"),
    (0.1, "0.10000000000000001"), (0.5, "0.5"), (-2.5, "-2.5"),
    (1e-05, "1.0000000000000001e-05"), (2.5e-10, "2.5000000000000002e-10"), (1.5e-300, "1.5000000000000001e-300"),
])
def test_number_rendering(value: float, text: str) -> None:
    assert encode_number(value) == text


def test_integral_beyond_two_pow_53_uses_g_format() -> None:
    assert encode_number(2.0**60) == "%.17g" % 2.0**60 == "1.152921504606847e+18"


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), True])
def test_unrepresentable_numbers(value: Any) -> None:
    with pytest.raises(ValueError):
        encode_number(value)


def test_strings_records_and_arrays() -> None:
    term = ["seq", ["set_param", "stop", 'a"b\\c\nd\te\rf'], ["set_param", "flag", True],
            ["filter_text", ["x", {"b": 1, "a": 2.5}]]]
    assert body(term) == ('(seq (set_param "stop" "a\\"b\\\\c\\nd\\te\\rf") (set_param "flag" true) '
                          '(filter_text ["x",{"a":2.5,"b":1}]))')


# -- equations -------------------------------------------------------------------------------

@pytest.mark.parametrize("term, normal", [
    (["and", ["top"], ["is", "no_log"]], '(is "no_log")'),
    (["and", ["top"], ["top"]], "(top)"),
    (["and", ["is", "no_log"], ["bot"]], "(bot)"),
    (["or", ["is", "no_log"], ["top"]], "(top)"),
    (["or", ["bot"], ["bot"]], "(bot)"),
    (["and", ["is", "no_log"], ["and", ["is", "has_tee"], ["and", ["meets_req"]]]],
     '(and (is "has_tee") (is "no_log") (meets_req))'),
    (["not", ["not", ["is", "no_log"]]], '(is "no_log")'),
    (["not", ["not", ["not", ["is", "no_log"]]]], '(not (is "no_log"))'),
    # Only the rewrites docs/behaviour.md#the-policy-language lists: no constant folding under `not`, `scale` or `gate`.
    (["not", ["top"]], "(not (top))"),
    (["not", ["bot"]], "(not (bot))"),
    (["and", ["not", ["bot"]], ["meets_req"]], "(and (meets_req) (not (bot)))"),
    (["add", ["zero"], ["field", "tok_s"]], '(field "tok_s")'),
    (["add", ["zero"], ["zero"]], "(zero)"),
    (["add", ["lit", 2], ["add", ["lit", 1], ["lit", 3]]], "(add (lit 1) (lit 2) (lit 3))"),
    (["scale", 1, ["field", "tok_s"]], '(field "tok_s")'),
    (["scale", 1.0, ["field", "tok_s"]], '(field "tok_s")'),
    (["scale", 0, ["field", "tok_s"]], "(zero)"),
    (["scale", -0.0, ["field", "tok_s"]], "(zero)"),
    (["scale", 3, ["zero"]], "(scale 3 (zero))"),
    (["scale", 2, ["scale", 3, ["lit", 1]]], "(scale 2 (scale 3 (lit 1)))"),
    (["gate", ["top"], ["field", "tok_s"]], '(field "tok_s")'),
    (["gate", ["bot"], ["field", "tok_s"]], '(gate (bot) (field "tok_s"))'),
    (["gate", ["is", "no_log"], ["zero"]], '(gate (is "no_log") (zero))'),
    (["gate", ["and", ["top"]], ["lit", 1]], "(lit 1)"),
    (["normalize", ["normalize", ["normalize", ["field", "tok_s"]]]], '(normalize (field "tok_s"))'),
    (["neg", ["neg", ["lit", 1]]], "(neg (neg (lit 1)))"),
    (["seq", ["id"], ["custom", "b"], ["seq", ["custom", "a"], ["id"]]], '(seq (custom "b") (custom "a"))'),
    (["seq", ["id"], ["id"]], "(id)"),
    (["seq", ["custom", "a"]], '(custom "a")'),
    (["when", ["not", ["not", ["top"]]], ["seq", ["id"]]], "(when (top) (id))"),
    (["top_k", 2, ["prefer", ["and", ["top"], ["is", "no_log"]], ["argmax"]]],
     '(top_k 2 (prefer (is "no_log") (argmax)))'),
    (["override", ["always", NEXT], "timeout", NEXT], '(always {"action":"next_candidate"})'),
    (["override", ["override", ["always", {"action": "abort"}], "timeout", {"action": "retry_same", "attempts": 2}],
      "auth_error", {"action": "disable_provider"}],
     '(override (override (always {"action":"abort"}) "auth_error" {"action":"disable_provider"}) '
     '"timeout" {"action":"retry_same","attempts":2})'),
])
def test_equations(term: Any, normal: str) -> None:
    assert body(term) == normal


def test_normalize_does_not_mutate_input() -> None:
    term = ["and", ["is", "no_log"], ["and", ["top"], ["is", "has_tee"]]]
    snapshot = repr(term)
    normalize(term)
    assert repr(term) == snapshot


def test_normal_form_is_json_term_and_readmits() -> None:
    policy = admit_policy(["policy", ["and", ["top"], ["meets_req"]], ["scale", 1, ["lit", 2]], ["argmax"],
                           ["seq", ["id"]], ["always", NEXT]])
    assert policy.term == ["policy", ["meets_req"], ["lit", 2], ["argmax"], ["id"], ["always", NEXT]]
    assert admit_policy(policy.term) == policy


def test_equal_policies_share_identity() -> None:
    a = admit_policy(["policy", ["and", ["is", "no_log"], ["meets_req"]], ["zero"], ["argmax"], ["id"],
                      ["always", NEXT]])
    b = admit_policy(["policy", ["and", ["meets_req"], ["not", ["not", ["is", "no_log"]]]], ["zero"], ["argmax"],
                      ["id"], ["always", NEXT]])
    assert a == b and hash(a) == hash(b) and a.identity == b.identity and a.fingerprint == b.fingerprint


# -- envelope --------------------------------------------------------------------------------

def test_with_envelope_composes_and_renormalises() -> None:
    policy = admit_policy(GOLDEN_TERM)
    composed = with_envelope(policy, ["and", ["not", ["is", "disabled"]], ["top"]])
    assert composed.pred == ["and", ["meets_req"], ["not", ["is", "disabled"]]]
    assert composed.fingerprint != policy.fingerprint
    assert with_envelope(policy, None) is policy
    assert with_envelope(admit_policy(["policy", ["top"], ["zero"], ["argmax"], ["id"], ["always", NEXT]]),
                         ["bot"]).pred == ["bot"]


def test_with_envelope_rejects_non_pred() -> None:
    with pytest.raises(PolicyAdmissionError, match=r"^ir\.constrain: \$: expected Pred, got Scorer"):
        with_envelope(admit_policy(GOLDEN_TERM), ["zero"])


# -- properties ------------------------------------------------------------------------------

BOOL_FIELDS = ["has_tee", "no_log", "breaker_open", "disabled"]
NUM_FIELDS = ["price_in", "price_out", "latency_ms", "context"]
numbers = st.one_of(st.integers(-5, 5), st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e-5, 2.5, 1e20]))

preds = st.recursive(
    st.one_of(
        st.just(["top"]), st.just(["bot"]), st.just(["meets_req"]),
        st.builds(lambda f: ["is", f], st.sampled_from(BOOL_FIELDS)),
        st.builds(lambda f, r, n: ["cmp", f, r, n], st.sampled_from(NUM_FIELDS),
                  st.sampled_from(["lt", "le", "eq", "ge"]), numbers),
        st.builds(lambda p: ["provider_eq", p], st.sampled_from(["a", "b"])),
    ),
    lambda children: st.one_of(
        st.builds(lambda xs: ["and", *xs], st.lists(children, min_size=1, max_size=4)),
        st.builds(lambda xs: ["or", *xs], st.lists(children, min_size=1, max_size=4)),
        st.builds(lambda x: ["not", x], children),
    ),
    max_leaves=12,
)
scorers = st.recursive(
    st.one_of(st.just(["zero"]), st.builds(lambda n: ["lit", n], numbers),
              st.builds(lambda f: ["field", f], st.sampled_from(NUM_FIELDS))),
    lambda children: st.one_of(
        st.builds(lambda xs: ["add", *xs], st.lists(children, min_size=1, max_size=4)),
        st.builds(lambda n, s: ["scale", n, s], numbers, children),
        st.builds(lambda p, s: ["gate", p, s], preds, children),
        st.builds(lambda s: ["neg", s], children),
        st.builds(lambda s: ["normalize", s], children),
    ),
    max_leaves=10,
)
actions = st.builds(lambda a: {"action": a}, st.sampled_from(["next_candidate", "abort", "disable_provider"]))
failplans = st.recursive(
    st.builds(lambda a: ["always", a], actions),
    lambda inner: st.builds(lambda p, r, a: ["override", p, r, a], inner,
                            st.sampled_from(["timeout", "auth_error", "unknown"]), actions),
    max_leaves=5,
)
policies = st.builds(lambda p, s, f: ["policy", p, s, ["argmax"], ["id"], f], preds, scorers, failplans)


def shuffled_ac(term: Any, data: st.DataObject) -> Any:
    """Permute the children of every AC node (recursively)."""
    if not isinstance(term, list) or not term or not isinstance(term[0], str):
        return term
    children = [shuffled_ac(x, data) for x in term[1:]]
    if term[0] in ("and", "or", "add"):
        children = data.draw(st.permutations(children))
    return [term[0], *children]


@settings(max_examples=200, deadline=None)
@given(policies)
def test_normal_form_is_idempotent(term: Any) -> None:
    policy = admit_policy(term)
    assert admit_policy(policy.term).encoding == policy.encoding


@settings(max_examples=200, deadline=None)
@given(policies, st.data())
def test_ac_children_order_is_irrelevant(term: Any, data: st.DataObject) -> None:
    assert admit_policy(shuffled_ac(term, data)).encoding == admit_policy(term).encoding


@settings(max_examples=100, deadline=None)
@given(preds, preds, preds)
def test_and_is_associative_and_commutative(a: Any, b: Any, c: Any) -> None:
    assert encoded(["and", a, ["and", b, c]]) == encoded(["and", ["and", c, a], b])
    assert encoded(["or", a, ["or", b, c]]) == encoded(["or", c, ["or", b, a]])


@settings(max_examples=100, deadline=None)
@given(preds, scorers)
def test_units_and_involution(p: Any, s: Any) -> None:
    assert encoded(["and", p, ["top"]]) == encoded(p)
    assert encoded(["or", p, ["bot"]]) == encoded(p)
    assert encoded(["not", ["not", p]]) == encoded(p)
    assert encoded(["add", s, ["zero"]]) == encoded(s)
    assert encoded(["scale", 1, s]) == encoded(s)
    assert encoded(["scale", 0, s]) == encoded(["zero"])
    assert encoded(["gate", ["top"], s]) == encoded(s)
    assert encoded(["normalize", ["normalize", s]]) == encoded(["normalize", s])


@settings(max_examples=100, deadline=None)
@given(failplans)
def test_failplan_normal_form_classifies_like_the_input(plan: Any) -> None:
    from compactor.policy import FailPlan

    def classify_raw(term: Any, kind: str) -> Any:
        while term[0] == "override":
            if term[2] == kind:
                return term[3]
            term = term[1]
        return None

    def expected(kind: str) -> Any:
        base = plan
        while base[0] == "override":
            base = base[1]
        return classify_raw(plan, kind) or classify_raw(plan, "unknown") or base[1]

    normal = FailPlan.from_term(normalize(plan))
    for kind in ("timeout", "auth_error", "rate_limit"):
        assert normal.action_for(kind).action == expected(kind)["action"]
