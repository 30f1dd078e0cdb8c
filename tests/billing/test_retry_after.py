"""``Retry-After`` on the billed routes' "retry later" answers (docs/behaviour.md#retry-after): the 409 of a key whose
first request still runs and the 503 of an unavailable idempotency store, through the API handler on moto DynamoDB;
and on API Gateway's own 429 past a key's rate (template.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compactor.errors import RETRY_AFTER, RETRY_LATER_S
from compactor_cli.sam_template import Template, load_template

from .conftest import idempotency_store_down_once
from .test_api_billing import TRANSCRIPT, call, event

BODIES = {"/compact": {"messages": TRANSCRIPT},
          "/flows/normalize": {"flow_ir": ["flow", {"input": {"kind": "input"},
                                                    "output": {"kind": "output", "inputs": ["input"]}}]}}


def retry_after(response: dict[str, Any]) -> list[str] | None:
    return (response.get("multiValueHeaders") or {}).get(RETRY_AFTER)


@pytest.mark.parametrize("path", sorted(BODIES))
def test_a_store_down_and_a_key_still_running_answer_when_to_retry(
        aws: dict[str, Any], compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    # Both answers said "retry later" in their message only: an agent retrying had no wait to go by.
    idempotency_store_down_once(monkeypatch)
    ev = event("POST", path, body=BODIES[path], headers={"Idempotency-Key": "when"})

    unkept = call(compact_module, ev)  # computed, but its answer could not be stored: 503
    held = call(compact_module, dict(ev))  # the key stays in progress until the Lambda's remaining time has passed

    assert (unkept["statusCode"], json.loads(unkept["body"])["error"]["code"]) == (503, "idempotency_unavailable")
    assert (held["statusCode"], json.loads(held["body"])["error"]["code"]) == (409, "idempotency_in_progress")
    assert retry_after(unkept) == retry_after(held) == [str(RETRY_LATER_S)]


def test_an_answer_that_asks_no_wait_has_no_retry_after(aws: dict[str, Any], compact_module: ModuleType) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "plain"})

    first, replay = call(compact_module, ev), call(compact_module, dict(ev))

    assert first["statusCode"] == replay["statusCode"] == 200
    assert retry_after(first) is None and retry_after(replay) is None


def test_the_stages_429_past_a_keys_rate_says_when_to_retry_and_the_quotas_does_not() -> None:
    # API Gateway's own 429s came without any header: a throttled agent had no wait to go by.
    template = Path(__file__).resolve().parents[2] / "template.yaml"
    responses = Template.load(template).resources["CompactApi"]["Properties"]["GatewayResponses"]
    throttled = responses["THROTTLED"]

    assert throttled["StatusCode"] == 429
    assert throttled["ResponseParameters"]["Headers"] == {RETRY_AFTER: "'1'"}  # a static value, in single quotes
    assert throttled["ResponseTemplates"]["application/json"] == '{"message":$context.error.messageString}'
    assert load_template(template)["Parameters"]["KeyRateLimit"]["MinValue"] >= 1  # a token back within the second
    assert "QUOTA_EXCEEDED" not in responses  # the month's quota frees next month: no wait a header can say
