"""What CompactFunction writes for a call, end to end through the handler with the offline offers:
EMF metric blobs on stdout and Powertools JSON log lines, including the billing record."""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import Output, api_event, corpus_messages, dimension_sets, metric_names, value

REQUEST_ID = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"  # requestContext.requestId of tests/events
API_KEY_ID = "k1l2m3n4o5"
API_KEY_VALUE = "example-api-key-not-a-secret"
MARKER = "TRANSCRIPT-MARKER-7f3a"


def marked_transcript(count: int = 14) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for index in range(count):
        messages.append({"role": "user" if index % 2 == 0 else "assistant",
                         "content": f"{MARKER} step {index} " + "detail " * 40})
    return messages


@pytest.fixture
def invoke(compact_module: ModuleType, lambda_context: LocalLambdaContext, caplog: pytest.LogCaptureFixture,
           capsys: pytest.CaptureFixture[str]):
    def run(event: dict[str, Any]) -> tuple[dict[str, Any], Output]:
        capsys.readouterr()
        caplog.clear()
        with caplog.at_level(logging.INFO):
            response = compact_module.handler(event, lambda_context)
        return response, Output(compact_module, caplog, capsys)

    return run


def test_legacy_call_emits_call_metrics_with_small_dimensions(invoke) -> None:
    response, output = invoke(api_event("compact-legacy", {"messages": marked_transcript(), "keep_recent": 2}))

    assert response["statusCode"] == 200
    blob = output.call_blob()
    assert dimension_sets(blob) == [["mode", "route", "service"]]
    assert (blob["service"], blob["route"], blob["mode"]) == ("compactor", "compact", "seal")
    assert blob["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Compactor"
    assert {"Calls", "BytesIn", "BytesOut", "BytesSaved", "ModelCalls", "Fallbacks", "CostUsd"} <= metric_names(blob)
    assert value(blob, "Calls") == 1 and value(blob, "ModelCalls") == 1 and value(blob, "Fallbacks") == 0
    bytes_in, bytes_out = value(blob, "BytesIn"), value(blob, "BytesOut")
    assert bytes_in > bytes_out and value(blob, "BytesSaved") == bytes_in - bytes_out
    assert value(blob, "CostUsd") == 0.0  # built-in offers are free
    assert "TargetMet" not in blob  # only decision mode has a target
    # the handler's own request counters stay in their own blob
    requests = [b for b in output.emf if "Requests" in b]
    assert len(requests) == 1 and "route" not in requests[0] and "Requests" not in blob
    # with dimension service (docs/deploy.md), the logger's, also where POWERTOOLS_SERVICE_NAME is unset (it had none)
    assert dimension_sets(requests[0]) == [["service"]] and requests[0]["service"] == "compactor"


def test_decision_call_metrics_come_from_compaction_and_flow_nodes(invoke) -> None:
    response, output = invoke(api_event("compact-legacy", {"messages": corpus_messages(), "decision_policy_ir": [
        "policy", ["meets_req"], ["field", "context"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]}))

    assert response["statusCode"] == 200
    blob = output.call_blob()
    assert (blob["route"], blob["mode"]) == ("compact", "decision")
    assert value(blob, "TargetMet") in (0, 1) and value(blob, "ModelCalls") > 0
    assert value(blob, "BytesSaved") == value(blob, "BytesIn") - value(blob, "BytesOut") > 0
    (billing,) = output.billing()
    assert billing["model_calls"] == value(blob, "ModelCalls") and billing["flow_fingerprint"]
    assert billing["target_met"] is bool(value(blob, "TargetMet"))


def test_billing_record_identifies_the_caller_and_the_request_without_content(invoke) -> None:
    response, output = invoke(api_event("compact-legacy", {"messages": marked_transcript(), "keep_recent": 2}))

    assert response["statusCode"] == 200
    (line,) = output.billing_lines()
    billing = line["billing"]
    assert line["message"] == "billing" and line["level"] == "INFO" and billing["version"] == 1
    assert billing["request_id"] == REQUEST_ID and billing["api_key_id"] == API_KEY_ID
    assert billing["route"] == "compact" and billing["mode"] == "seal" and billing["status"] == 200
    assert billing["model_calls"] == 1 and billing["cost_usd"] == 0.0 and billing["cost_known"] is True
    assert billing["bytes_in"] > billing["bytes_out"] > 0 and billing["request_bytes"] > billing["bytes_in"] // 2
    assert billing["response_bytes"] == len(response["body"].encode("utf-8"))
    # every line carries the API Gateway request id (correlation) and the Lambda request id
    assert all(entry["correlation_id"] == REQUEST_ID and entry["function_request_id"] for entry in output.logs)
    # no transcript text, no key value anywhere: logs or metric lines
    assert MARKER not in output.everything and API_KEY_VALUE not in output.everything


def test_billing_record_survives_a_raised_log_level(compact_module: ModuleType, invoke) -> None:
    previous = compact_module.logger.log_level
    compact_module.logger.setLevel("WARNING")
    try:
        _, output = invoke(api_event("compact-legacy", {"messages": marked_transcript(), "keep_recent": 2}))
    finally:
        compact_module.logger.setLevel(previous)

    (line,) = output.billing_lines()
    assert line["level"] == "WARNING" and line["billing"]["api_key_id"] == API_KEY_ID


def test_rejected_requests_are_billed_with_zero_calls(invoke) -> None:
    response, output = invoke(api_event("compact-legacy", {"messages": marked_transcript(), "pinned_indices": [99],
                                                           "decision_policy_ir": ["policy", ["meets_req"]]}))

    assert response["statusCode"] == 400
    (billing,) = output.billing()
    assert billing["status"] == 400 and billing["model_calls"] == 0 and billing["bytes_in"] is None
    assert value(output.call_blob(), "ModelCalls") == 0
    assert billing["cost_usd"] == 0.0 and billing["bytes_out"] is None and billing["target_met"] is None


def test_flows_route_is_metered_as_mode_flow(invoke) -> None:
    event = api_event("flows", None)
    event["body"] = api_event_body("flows")
    response, output = invoke(event)

    assert response["statusCode"] == 200
    blob = output.call_blob()
    assert (blob["route"], blob["mode"]) == ("flows", "flow")
    (billing,) = output.billing()
    assert billing["bytes_in"] == len(event["body"].encode()) and billing["bytes_out"] == billing["response_bytes"]


def test_health_checks_and_validation_failures_are_not_billed(invoke) -> None:
    _, health = invoke(api_event("healthz", None))
    _, invalid = invoke(api_event("compact-legacy", {"messages": "not a list"}))

    assert health.billing() == [] and invalid.billing() == []
    assert [blob for blob in health.emf + invalid.emf if "route" in blob] == []


def api_event_body(name: str) -> str:
    import json

    from .conftest import EVENTS

    return json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))["body"]
