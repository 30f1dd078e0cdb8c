"""Admission: every bound, op, arity, sort and parameter rule rejects with an ``ir: `` message."""

from __future__ import annotations

import math
from typing import Any

import pytest

from compactor.policy import PolicyAdmissionError, admit_policy

NEXT = {"action": "next_candidate"}


def policy(pred: Any = None, scorer: Any = None, selector: Any = None, xform: Any = None,
           failplan: Any = None) -> list[Any]:
    slots = [pred, scorer, selector, xform, failplan]
    defaults = [["top"], ["zero"], ["argmax"], ["id"], ["always", NEXT]]
    return ["policy", *(default if slot is None else slot for slot, default in zip(slots, defaults))]


def rejected(term: Any, **kwargs: Any) -> str:
    with pytest.raises(PolicyAdmissionError) as info:
        admit_policy(term, **kwargs)
    message = str(info.value)
    assert message.startswith("ir: ")
    return message


def nested_not(depth: int) -> list[Any]:
    term: list[Any] = ["top"]
    for _ in range(depth):
        term = ["not", term]
    return term


def test_depth_bound() -> None:
    admit_policy(policy(pred=nested_not(62)))  # policy + 62 nots + top = 64 levels
    assert "max depth 64" in rejected(policy(pred=nested_not(63)))


def test_hostile_depth_is_rejected_without_recursion_error() -> None:
    assert "max depth" in rejected(policy(pred=nested_not(100_000)))


def test_size_bound() -> None:
    admit_policy(policy(pred=["and", *[["top"]] * 4090]))  # policy + and + 4090 + 4 other slots = 4096
    assert "max size 4096" in rejected(policy(pred=["and", *[["top"]] * 4091]))


@pytest.mark.parametrize("term, needle", [
    (policy(pred=["frobnicate"]), "unknown op 'frobnicate'"),
    (policy(pred=["not"]), "not takes 1 argument(s), got 0"),
    (policy(pred=["and"]), "and needs at least one argument"),
    (policy(pred=["cmp", "price_in", "le"]), "cmp takes 3 argument(s), got 2"),
    (policy(pred=["field", "price_in"]), "expected Pred, got Scorer"),
    (policy(scorer=["top"]), "expected Scorer, got Pred"),
    (policy(pred=["and", ["top"], ["zero"]]), "expected Pred, got Scorer"),
    (policy(selector=["top_k", 2, ["zero"]]), "expected Selector, got Scorer"),
    (policy(pred="top"), "a term is [op, ...] with a string op"),
    (policy(pred=[]), "a term is [op, ...] with a string op"),
    (policy(pred=[1]), "a term is [op, ...] with a string op"),
    (["zero"], "expected Policy, got Scorer"),
    (["and", ["top"]], "expected Policy, got Pred"),
    (["policy", ["top"]], "policy takes 5 argument(s), got 1"),
])
def test_shape_and_sort_errors(term: Any, needle: str) -> None:
    assert needle in rejected(term)


def test_error_names_the_path() -> None:
    assert rejected(policy(pred=["and", ["top"], ["nope"]])).startswith("ir: $.policy[1].and[2]: unknown op 'nope'")


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan, 10**400, True, "1"])
def test_non_finite_or_non_numbers_rejected(number: Any) -> None:
    assert "finite number" in rejected(policy(pred=["cmp", "price_in", "le", number]))
    assert "finite number" in rejected(policy(scorer=["lit", number]))


@pytest.mark.parametrize("pred, needle", [
    (["is", "cache_hot"], "undeclared field 'cache_hot'"),
    (["cmp", "nope", "le", 1], "undeclared field 'nope'"),
    (["is", "price_in"], "field 'price_in' has sort Num, expected Bool"),
    (["cmp", "has_tee", "eq", 1], "field 'has_tee' has sort Bool, expected Num"),
    (["cmp", "price_in", "lte", 1], "expected a relation"),
    (["tier_eq", "gold"], "unknown tier 'gold'"),
    (["min_tier", 3], "unknown tier 3"),
    (["family_eq", 5], "expected a string (Family)"),
    (["provider_eq", None], "expected a string (Provider)"),
    (["served_by_eq", 1], "expected a string (ServedBy)"),
    (["has_cap", ["tools"]], "expected a string (Capability)"),
    # a relation or tier that is an array or a record (no set member: it was a TypeError, a 500)
    (["cmp", "price_in", ["le"], 1], "expected a relation"),
    (["cmp", "price_in", {"le": 1}, 1], "expected a relation"),
    (["tier_eq", ["partner"]], "unknown tier ['partner']"),
])
def test_parameter_errors(pred: Any, needle: str) -> None:
    assert needle in rejected(policy(pred=pred))


def test_host_declared_fields() -> None:
    term = policy(pred=["is", "cache_hot"], scorer=["field", "bench_rank"])
    admit_policy(term, fields={"cache_hot": "Bool", "bench_rank": "Num"})
    assert "undeclared field 'cache_hot'" in rejected(term)


@pytest.mark.parametrize("selector, ok", [
    (["top_k", 1, ["argmax"]], True),
    (["top_k", 3.0, ["ordered"]], True),
    (["top_k", 0, ["argmax"]], False),
    (["top_k", 1.5, ["argmax"]], False),
    (["top_k", -2, ["argmax"]], False),
    (["sample", 0.5], True),
    (["sample", "hot"], False),
    (["prefer", ["is", "no_log"], ["argmax"]], True),
    (["prefer", ["zero"], ["argmax"]], False),
    (["chain", [{"provider": "p", "model": "m"}, {"provider_id": "q", "model_family": "f"}]], True),
    (["chain", [{"provider": "p"}]], False),
    (["chain", [{"provider": "p", "model": "m", "extra": 1}]], False),
    (["chain", [{"provider": "p", "provider_id": "p", "model": "m"}]], False),
    (["chain", {"provider": "p", "model": "m"}], False),
])
def test_selector_parameters(selector: Any, ok: bool) -> None:
    if ok:
        admit_policy(policy(selector=selector))
    else:
        rejected(policy(selector=selector))


@pytest.mark.parametrize("xform, ok", [
    (["seq", ["set_param", "max_tokens", 4096], ["inject_seed", "seed"], ["clamp_param", "temperature", 0, 1],
      ["jitter", "top_p", 0.1], ["filter_text", ["NFKC", {"max_len": 10}]], ["filter_image", []],
      ["custom", "strip"], ["when", ["is", "no_log"], ["id"]]], True),
    (["set_param", "temperature", None], False),
    (["set_param", "temperature", [1]], False),
    (["clamp_param", "temperature", 0, math.inf], False),
    (["filter_text", "NFKC"], False),
    (["filter_text", [{}]], False),
    (["filter_text", [{"k": "v"}]], False),
    (["custom", 3], False),
    (["when", ["zero"], ["id"]], False),
    (["seq"], False),
])
def test_xform_parameters(xform: Any, ok: bool) -> None:
    if ok:
        admit_policy(policy(xform=xform))
    else:
        rejected(policy(xform=xform))


@pytest.mark.parametrize("action, needle", [
    ({"action": "retry"}, "Action.action invalid"),
    ({}, "Action.action invalid"),
    ("next_candidate", "Action must be a record"),
    ({"action": "retry_same", "then_action": "explode"}, "Action.then_action invalid"),
    ({"action": "retry_same", "attempts": 0}, "attempts must be an integer >= 1"),
    ({"action": "retry_same", "attempts": 1.5}, "attempts must be an integer >= 1"),
    ({"action": "retry_same", "attempts": True}, "attempts must be an integer >= 1"),
    ({"action": "retry_same", "backoff_ms": -1}, "backoff_ms must be a number >= 0"),
    ({"action": "retry_same", "backoff_ms": "1s"}, "backoff_ms must be a number >= 0"),
    ({"action": "retry_same", "backoff_ms": [100, -5]}, "backoff_ms entries must be numbers >= 0"),
    ({"action": "retry_same", "open_breaker_ms": math.nan}, "open_breaker_ms must be a number >= 0"),
    ({"action": "abort", "note": "why"}, "Action key 'note' must map to a finite number"),
    # an action that is an array or a record (no set member: it was a TypeError, a 500)
    ({"action": []}, "Action.action invalid: []"),
    ({"action": {"name": "abort"}}, "Action.action invalid"),
    ({"action": "retry_same", "then_action": ["abort"]}, "Action.then_action invalid"),
])
def test_action_records(action: Any, needle: str) -> None:
    assert needle in rejected(policy(failplan=["always", action]))


def test_valid_action_records() -> None:
    plan = ["override", ["always", {"action": "retry_same", "attempts": 2, "backoff_ms": [100, 200],
                                    "then_action": "abort", "open_breaker_ms": 1000, "mark_unavailable_ms": 5}],
            "auth_error", {"action": "disable_provider"}]
    admit_policy(policy(failplan=plan))
    assert "expected a string (FailReason)" in rejected(policy(failplan=["override", ["always", NEXT], 1, NEXT]))
    assert "expected FailPlan, got Pred" in rejected(policy(failplan=["override", ["top"], "x", NEXT]))


def test_every_signature_op_admits() -> None:
    pred = ["and", ["top"], ["or", ["bot"], ["meets_req"]], ["not", ["scope_matches"]], ["is", "has_tee"],
            ["cmp", "latency_ms", "lt", 100], ["tier_eq", "partner"], ["min_tier", "marketplace"],
            ["family_eq", "f"], ["provider_eq", "p"], ["served_by_eq", "s"], ["has_cap", "tools"]]
    scorer = ["add", ["zero"], ["scale", 2, ["field", "tok_s"]], ["gate", ["is", "no_log"], ["lit", 1]],
              ["neg", ["normalize", ["field", "price_out"]]], ["clamp", 0, 1, ["field", "success_rate"]]]
    admit_policy(policy(pred=pred, scorer=scorer, selector=["top_k", 2, ["prefer", ["top"], ["sample", 1]]]))
    for selector in (["argmax"], ["ordered"], ["chain", []]):
        admit_policy(policy(selector=selector))


def test_tuples_are_accepted_like_lists() -> None:
    assert admit_policy(tuple(policy(pred=("is", "no_log")))).encoding == admit_policy(
        policy(pred=["is", "no_log"])).encoding
