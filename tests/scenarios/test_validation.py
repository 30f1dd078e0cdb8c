"""Request validation of ``POST /v1/compact`` through ``compactor serve`` (docs/behaviour.md#errors): every error
is answered before any model call."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import DECISION_POLICY, Stack
from .helpers import bulky

MESSAGES = [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "Fix it."}, bulky(2), bulky(3),
            {"role": "assistant", "content": "Done."}]
BAD_POLICY = ["policy", ["no_such_pred"], ["zero"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]


@pytest.mark.parametrize("decision_mode", [False, True], ids=["legacy", "decision"])
@pytest.mark.parametrize("body, error_type, field", [
    ({"messages": MESSAGES, "target_ratio": 0}, "greater_than", "target_ratio"),
    ({"messages": MESSAGES, "target_ratio": 1.5}, "less_than_equal", "target_ratio"),
    ({"keep_recent": 1}, "missing", "messages"),
    ({"messages": MESSAGES, "pinned_indices": ["first"]}, "int_type", "pinned_indices"),
    ({"messages": "not a list"}, "list_type", "messages"),
])
def test_schema_violations_are_422(stack: Stack, decision_mode: bool, body: dict[str, Any], error_type: str,
                                   field: str) -> None:
    if decision_mode:
        body = {**body, "decision_policy_ir": DECISION_POLICY}

    response = stack.post(body)

    assert response.status_code == 422
    detail = response.json()["detail"]
    assert any(item["type"] == error_type and field in item["loc"] for item in detail), detail
    assert stack.fake.requests == []


def test_body_that_is_not_json_is_422(stack: Stack) -> None:
    response = stack.post(b"{messages: nope")

    assert response.status_code == 422 and isinstance(response.json()["detail"], list)


@pytest.mark.parametrize("pins", [[-1], [len(MESSAGES)], [0, 99]])
def test_pins_outside_the_messages_are_400_with_null_code(stack: Stack, pins: list[int]) -> None:
    response = stack.post({"messages": MESSAGES, "decision_policy_ir": DECISION_POLICY, "pinned_indices": pins})

    assert response.status_code == 400
    assert response.json() == {"error": {"message": "pinned_indices must reference existing messages",
                                         "type": "invalid_request_error", "code": None}}
    assert stack.fake.requests == []


@pytest.mark.parametrize("fields", [
    {"decision_policy_ir": BAD_POLICY},
    {"decision_policy_ir": ["zero"]},
    {"decision_policy_ir": DECISION_POLICY, "policy_ir": BAD_POLICY},
], ids=["bad-decision-policy", "decision-policy-not-a-policy", "bad-generation-policy"])
def test_generated_flow_rejected_at_admission_is_400_invalid_flow(stack: Stack, fields: dict[str, Any]) -> None:
    response = stack.post({"messages": MESSAGES, "keep_recent": 1, **fields})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith("flow_ir rejected at admission: ") and len(error["message"]) > 32
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_flow")
    assert stack.fake.requests == []


@pytest.mark.parametrize("fields, field", [
    ({"decision_policy_ir": BAD_POLICY}, "decision_policy_ir"),
    ({"decision_policy_ir": ["zero"]}, "decision_policy_ir"),
    ({"decision_policy_ir": DECISION_POLICY, "policy_ir": BAD_POLICY}, "policy_ir"),
    ({"mode": "decision", "policy_ir": ["policy"]}, "policy_ir"),
], ids=["bad-decision-policy", "decision-policy-not-a-policy", "bad-generation-policy", "generation-policy-no-slots"])
def test_a_refused_policy_is_named_by_the_request_field_that_carried_it(stack: Stack, fields: dict[str, Any],
                                                                        field: str) -> None:
    # It named a node of the flow decision mode builds ('node "batch_0_classify": policy rejected: ...', or
    # "batch_0_generate" for policy_ir), which the caller never wrote, and not the field to fix.
    response = stack.post({"messages": MESSAGES, "keep_recent": 1, **fields})

    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message.startswith(f"flow_ir rejected at admission: {field}: ir: "), message
    assert "batch_" not in message and "node" not in message, message
    assert stack.fake.requests == []


def test_a_negative_max_tokens_is_refused_as_sent_before_any_flow(stack: Stack) -> None:
    # It used to reach the generated flow's admission: 400 invalid_flow naming a node the caller never wrote.
    response = stack.post({"messages": MESSAGES, "keep_recent": 1, "decision_policy_ir": DECISION_POLICY,
                           "max_tokens": -5})

    assert response.status_code == 400
    assert response.json()["error"] == {"message": "max_tokens must not be negative",
                                        "type": "invalid_request_error", "code": "invalid_max_tokens"}
    assert stack.fake.requests == []


def test_bad_policy_is_never_examined_without_candidate_fragments(stack: Stack) -> None:
    messages = [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "Fix it."},
                {"role": "assistant", "content": "Done."}]

    response = stack.post({"messages": messages, "decision_policy_ir": BAD_POLICY, "policy_ir": BAD_POLICY,
                           "keep_recent": 1})

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"messages", "compacted", "compaction"}
    assert body["messages"] == messages and body["compacted"] is False
    assert stack.fake.requests == []


def test_unknown_fields_are_ignored(stack: Stack) -> None:
    response = stack.post({"messages": MESSAGES[:2], "decision_policy_ir": DECISION_POLICY, "surprise": {"x": 1}})

    assert response.status_code == 200 and response.json()["messages"] == MESSAGES[:2]
