"""FailPlan classification: override by reason, else ``unknown``, else the base action."""

from __future__ import annotations

from compactor.policy import Action, FailPlan, admit_policy

NEXT = {"action": "next_candidate"}


def plan_of(failplan: list) -> FailPlan:
    return admit_policy(["policy", ["top"], ["zero"], ["argmax"], ["id"], failplan]).fail_plan


def test_conformance_classification() -> None:
    plan = plan_of(["override", ["override", ["always", NEXT], "auth_error", {"action": "disable_provider"}],
                    "server_error", {"action": "retry_same", "attempts": 2, "backoff_ms": 500}])
    assert plan.action_for("auth_error") == Action("disable_provider")
    assert plan.action_for("server_error") == Action("retry_same", attempts=2, backoff_ms=(500.0,))
    assert plan.action_for("rate_limit") == Action("next_candidate")


def test_unknown_override_is_the_fallback() -> None:
    plan = plan_of(["override", ["override", ["always", NEXT], "unknown", {"action": "abort"}],
                    "timeout", {"action": "retry_same"}])
    assert plan.action_for("timeout").action == "retry_same"
    assert plan.action_for("bad_response").action == "abort"
    assert plan.action_for(None).action == "abort"


def test_outer_override_wins() -> None:
    plan = plan_of(["override", ["override", ["always", NEXT], "timeout", {"action": "abort"}],
                    "timeout", {"action": "disable_provider"}])
    assert plan.action_for("timeout").action == "disable_provider"


def test_default_plan_is_next_candidate() -> None:
    assert FailPlan().action_for("timeout") == Action("next_candidate")


def test_action_defaults_and_backoff_steps() -> None:
    action = Action.from_record({"action": "retry_same", "attempts": 3, "backoff_ms": [100, 200],
                                 "then_action": "abort", "open_breaker_ms": 50})
    assert (action.then_action, action.attempts, action.open_breaker_ms) == ("abort", 3, 50)
    assert [action.backoff_before_retry(n) for n in (1, 2, 3)] == [100.0, 200.0, 200.0]
    assert Action.from_record({"action": "retry_same"}).backoff_before_retry(1) == 0.0
    assert Action.from_record({"action": "retry_same", "backoff_ms": 75}).backoff_before_retry(4) == 75.0
    assert Action.from_record({"action": "abort"}).then_action == "next_candidate"
