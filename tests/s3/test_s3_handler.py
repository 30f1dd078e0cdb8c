"""The S3CompactFunction handler against moto S3: put an object, build the real S3 event, call the handler,
read the result objects (moto drops bucket notifications, so the tests deliver the event themselves)."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext
from compactor.object_jobs import MAX_OBJECT_BYTES

from .conftest import BUCKET, DEMO_TRANSCRIPT, keys, put_and_event, read_json, s3_event, transcript


def run(module: ModuleType, event: dict[str, Any], context: LocalLambdaContext) -> list[dict[str, Any]]:
    return module.handler(event, context)["results"]


def test_decision_mode_with_the_offline_offers_writes_the_compact_response(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    event = put_and_event(s3, "incoming/run-1.json", DEMO_TRANSCRIPT.read_bytes())

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "compacted" and result["key"] == "compacted/run-1.json" and result["status"] == 200
    body, response = read_json(s3, "compacted/run-1.json")
    assert response["ContentType"] == "application/json"
    source = event["Records"][0]["s3"]["object"]
    assert response["Metadata"]["source-version-id"] == source["versionId"]
    assert response["Metadata"]["source-etag"] == source["eTag"]
    assert response["Metadata"]["compactor-status"] == "200"
    assert body["compacted"] is True
    compaction = body["compaction"]
    assert compaction["output_bytes"] < compaction["original_bytes"]
    assert {fragment["action"] for fragment in compaction["fragments"]} <= {"keep", "summarize", "archive"}
    assert body["x_router"]["provider"] == "flow"
    assert keys(s3, "failed/") == []
    assert keys(s3, "incoming/") == ["incoming/run-1.json"]  # nothing written back under incoming/



def test_each_compaction_run_writes_one_billing_record(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, caplog: pytest.LogCaptureFixture) -> None:
    event = put_and_event(s3, "incoming/billed.json", json.dumps(transcript()))

    run(s3_module, event, lambda_context)
    run(s3_module, event, lambda_context)  # skipped: nothing run, nothing billed

    billing = [record.billing for record in caplog.records if getattr(record, "record_type", None) == "billing"]
    assert len(billing) == 1
    assert billing[0]["route"] == "s3_compact" and billing[0]["mode"] == "decision" and billing[0]["status"] == 200
    assert billing[0]["request_id"] == lambda_context.aws_request_id
    assert billing[0]["api_key_id"] == f"s3:{BUCKET}"  # who the ledger entry bills (docs/billing.md)


def test_legacy_request_body_runs_the_seal(s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    body = {"messages": transcript(), "keep_recent": 2, "decision_policy_ir": None}
    event = put_and_event(s3, "incoming/legacy.json", json.dumps(body))

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "compacted"
    output, _ = read_json(s3, "compacted/legacy.json")
    assert "compaction" not in output and output["compacted"] is True
    assert output["messages"][1]["content"].startswith("[Earlier conversation, sealed summary]\n")
    assert output["messages"][-2:] == body["messages"][-2:]


@pytest.mark.parametrize("key", [
    "incoming/team a/run 1.json",
    "incoming/équipe/トランスクリプト №1.json",
    "incoming/odd+name%41 (copy).json",
])
def test_url_encoded_keys_map_to_the_same_relative_key(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, key: str) -> None:
    event = put_and_event(s3, key, json.dumps(transcript(4, 300)))
    assert event["Records"][0]["s3"]["object"]["key"] != key  # the event carries it encoded

    [result] = run(s3_module, event, lambda_context)

    expected = "compacted/" + key.removeprefix("incoming/")
    assert result["result"] == "compacted" and result["key"] == expected
    assert keys(s3, "compacted/") == [expected]


@pytest.mark.parametrize(("key", "text"), [
    ("incoming/bare.json", json.dumps(transcript())),
    ("incoming/body.json", json.dumps({"messages": transcript(), "mode": "decision", "target_ratio": 0.5,
                                         "keep_recent": 1})),
    ("incoming/lines.jsonl", "\n".join(json.dumps(message) for message in transcript())),
])
def test_bare_array_request_body_and_jsonl_are_all_transcripts(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, key: str, text: str) -> None:
    event = put_and_event(s3, key, text)

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "compacted", result
    output, _ = read_json(s3, "compacted/" + key.removeprefix("incoming/"))
    assert output["compaction"]["original_bytes"] > output["compaction"]["output_bytes"]
    expected_ratio = 0.5 if key.endswith("body.json") else 0.1
    assert output["compaction"]["target_ratio"] == expected_ratio


def test_defaults_come_from_configuration_and_the_object_wins(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_S3_DEFAULTS", json.dumps({"target_ratio": 0.25, "keep_recent": 3}))
    bare = put_and_event(s3, "incoming/bare.json", json.dumps(transcript()))
    own = put_and_event(s3, "incoming/own.json", json.dumps({"messages": transcript(), "mode": "decision",
                                                              "target_ratio": 0.5}))

    run(s3_module, bare, lambda_context)
    run(s3_module, own, lambda_context)

    assert read_json(s3, "compacted/bare.json")[0]["compaction"]["target_ratio"] == 0.25
    assert read_json(s3, "compacted/own.json")[0]["compaction"]["target_ratio"] == 0.5


def test_seal_mode_default_for_bare_transcripts(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_S3_DEFAULTS", json.dumps({"mode": "seal", "keep_recent": 2}))
    event = put_and_event(s3, "incoming/bare.json", json.dumps(transcript()))

    run(s3_module, event, lambda_context)

    output, _ = read_json(s3, "compacted/bare.json")
    assert "compaction" not in output
    assert output["messages"][1]["content"].startswith("[Earlier conversation, sealed summary]\n")


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_bad_configuration_raises_before_reading(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_S3_DEFAULTS", '{"mode": "fast"}')
    event = put_and_event(s3, "incoming/a.json", json.dumps(transcript()))

    with pytest.raises(ValueError, match="mode"):
        run(s3_module, event, lambda_context)
    assert keys(s3, "compacted/") == keys(s3, "failed/") == []


def test_invalid_json_is_recorded_under_failed_with_its_source(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    event = put_and_event(s3, "incoming/broken.json", '{"messages": [')

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "failed" and result["status"] == 422
    body, response = read_json(s3, "failed/broken.json")
    source = event["Records"][0]["s3"]["object"]
    assert body["source"] == {"bucket": BUCKET, "key": "incoming/broken.json", "version_id": source["versionId"],
                              "etag": source["eTag"]}
    assert body["status"] == 422
    assert set(body["error"]) == {"message", "type", "code"}
    assert body["detail"][0]["type"] == "json_invalid" and body["detail"][0]["loc"][0] == "body"
    assert response["Metadata"]["compactor-status"] == "422"
    assert keys(s3, "compacted/") == []


def test_schema_errors_use_the_api_shapes(s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    bad_ratio = put_and_event(s3, "incoming/ratio.json", json.dumps({"messages": transcript(), "target_ratio": 3}))
    bad_pins = put_and_event(s3, "incoming/pins.json", json.dumps({"messages": transcript(), "mode": "decision",
                                                            "pinned_indices": [99]}))

    run(s3_module, bad_ratio, lambda_context)
    run(s3_module, bad_pins, lambda_context)

    ratio, _ = read_json(s3, "failed/ratio.json")
    assert ratio["status"] == 422
    assert ratio["detail"][0]["type"] == "less_than_equal" and ratio["detail"][0]["loc"] == ["body", "target_ratio"]
    pins, _ = read_json(s3, "failed/pins.json")
    assert pins["status"] == 400
    assert pins["error"] == {"message": "pinned_indices must reference existing messages",
                             "type": "invalid_request_error", "code": None}
    assert "detail" not in pins


def test_processing_the_same_version_twice_keeps_the_same_bytes_and_writes_once(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    event = put_and_event(s3, "incoming/twice.json", DEMO_TRANSCRIPT.read_bytes())
    bad = put_and_event(s3, "incoming/bad.json", "not json at all")

    first = run(s3_module, event, lambda_context) + run(s3_module, bad, lambda_context)
    stored = {key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in ("compacted/twice.json",
                                                                                  "failed/bad.json")}
    second = run(s3_module, event, lambda_context) + run(s3_module, bad, lambda_context)

    assert [item["result"] for item in first] == ["compacted", "failed"]
    assert [(item["result"], item["reason"]) for item in second] == [("skipped", "already processed")] * 2
    for key, data in stored.items():
        versions = s3.list_object_versions(Bucket=BUCKET, Prefix=key)["Versions"]
        assert len(versions) == 1, key  # no second write
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data


def test_a_new_version_is_processed_and_an_older_event_never_overwrites_it(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    old = put_and_event(s3, "incoming/v.json", json.dumps(transcript(4, 300)), sequencer="0065A1B2C3D4E5F601")
    new = put_and_event(s3, "incoming/v.json", json.dumps(transcript(6, 300)), sequencer="0065A1B2C3D4E5F6FF")

    assert run(s3_module, new, lambda_context)[0]["result"] == "compacted"
    late = run(s3_module, old, lambda_context)[0]

    assert (late["result"], late["reason"]) == ("skipped", "a newer version was processed")
    _, response = read_json(s3, "compacted/v.json")
    assert response["Metadata"]["source-version-id"] == new["Records"][0]["s3"]["object"]["versionId"]


@pytest.mark.parametrize("key", ["compacted/x.json", "failed/x.json", "fanout/x.json", "incoming/", "elsewhere.json"])
def test_keys_outside_incoming_are_ignored(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, key: str) -> None:
    event = put_and_event(s3, key, json.dumps(transcript()))
    before = keys(s3)

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "skipped"
    assert keys(s3) == before


def test_non_create_events_are_ignored(s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    event = s3_event(BUCKET, "incoming/gone.json", event_name="ObjectRemoved:Delete")

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "skipped" and keys(s3) == []


def test_a_transcript_over_the_api_limit_is_accepted(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    text = json.dumps(transcript(n_assistant=350, size=20_000))
    assert len(text) > 6 * 1024 * 1024
    event = put_and_event(s3, "incoming/big.json", text)

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "compacted"
    output, _ = read_json(s3, "compacted/big.json")
    assert output["compaction"]["original_bytes"] > 6 * 1024 * 1024
    assert output["compaction"]["output_bytes"] < output["compaction"]["original_bytes"]


def test_an_object_over_the_cap_fails_clearly_without_being_read(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor import object_jobs

    monkeypatch.setattr(object_jobs, "MAX_OBJECT_BYTES", 1000)
    event = put_and_event(s3, "incoming/huge.json", json.dumps(transcript()))

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "failed" and result["status"] == 413
    body, _ = read_json(s3, "failed/huge.json")
    assert body["error"]["code"] == "request_too_large" and "1000" in body["error"]["message"]


def test_the_size_cap_is_far_above_the_api_limit() -> None:
    assert MAX_OBJECT_BYTES == 64 * 1024 * 1024


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_storage_errors_raise_for_the_async_retries(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    from botocore.exceptions import ClientError

    event = s3_event("no-such-bucket", "incoming/a.json", version_id="v1", etag="abc")

    with pytest.raises(ClientError):
        run(s3_module, event, lambda_context)


def test_mask_mode_through_the_s3_path(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_S3_DEFAULTS", json.dumps({"mode": "mask", "keep_recent": 2}))
    event = put_and_event(s3, "incoming/masked.json", DEMO_TRANSCRIPT.read_bytes())

    [result] = run(s3_module, event, lambda_context)

    assert result["result"] == "compacted" and result["status"] == 200
    output, _ = read_json(s3, "compacted/masked.json")
    assert output["compaction"]["mode"] == "mask" and output["compaction"]["masked"]
    assert output["compaction"]["output_bytes"] < output["compaction"]["original_bytes"]
    assert "x_router" not in output


def test_each_delivery_reads_the_object_once(s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """The handler sends the GetObject before the idempotency record is written and the job takes that
    answer; a redelivered event, answered by the record, closes it unread."""
    from compactor_aws import s3_store

    event = put_and_event(s3, "incoming/once.json", json.dumps(transcript()))
    gets: list[str] = []
    s3_store.s3_client().meta.events.register("provide-client-params.s3.GetObject",
                                              lambda params, **_: gets.append(params["Key"]))

    first = run(s3_module, event, lambda_context)
    again = run(s3_module, event, lambda_context)

    assert [first[0]["result"], again[0]["result"]] == ["compacted", "skipped"]
    assert gets == ["incoming/once.json"] * 2


def test_inline_windows_each_have_their_own_flow_budget(
        s3: Any, s3_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """An object under ``S3InlineMaxBytes`` over one request's limits is compacted in windows in the function, each
    with its own flow budget as a windowed job's worker has (docs/scale.md). They shared one: with models slower
    than the budget allows for a few windows in turn, the windows after the first four kept their units whole
    (a 5 MB transcript of 8 windows, a 4 s budget and 2.5 s before the models answered: 54% kept, against 9%)."""
    import asyncio

    from compactor import container
    from compactor.compaction import windows
    from fakes.routers import frozen_router
    from scale import transcripts

    monkeypatch.setattr(container.ROUTER, "value", frozen_router())
    data = json.dumps(list(transcripts.messages(5_000_000))).encode()
    expected = run(s3_module, put_and_event(s3, "incoming/quick.json", data), lambda_context)
    assert expected[0]["result"] == "compacted"
    quick, _ = read_json(s3, "compacted/quick.json")
    assert quick["compaction"]["windows"]["passes"][0]["windows"] > windows.DEFAULT_CONCURRENCY

    monkeypatch.setenv("COMPACTOR_FLOW_BUDGET_MS", "3000")
    run_flow = windows.run_flow

    async def slow_flow(*args: Any, **kwargs: Any) -> Any:  # half the budget gone before a window's models answer
        await asyncio.sleep(1.5)
        return await run_flow(*args, **kwargs)

    monkeypatch.setattr(windows, "run_flow", slow_flow)
    [result] = run(s3_module, put_and_event(s3, "incoming/slow.json", data), lambda_context)
    assert result["result"] == "compacted"
    slow, _ = read_json(s3, "compacted/slow.json")
    assert slow["messages"] == quick["messages"] and slow["compaction"] == quick["compaction"]


def test_what_ended_the_last_attempt_is_named_by_its_kind() -> None:
    """The cause a ``failed/<rel>`` record of a job Lambda gave up on names: never the error's message."""
    from compactor_aws.s3_events import gave_up_cause as cause

    assert cause({"requestContext": {"condition": "RetriesExhausted"},
                  "responsePayload": {"errorType": "ClientError", "errorMessage": "secret content"}}) == "ClientError"
    assert cause({"requestContext": {"condition": "RetriesExhausted"},
                  "responsePayload": {"errorMessage": "2026-12-03T16:00:00Z r-1 Task timed out after 300.00 seconds"}}
                 ) == "timeout"
    assert cause({"requestContext": {"condition": "EventAgeExceeded"}}) == "EventAgeExceeded"
    assert cause({}) is None


def test_the_destination_records_nothing_for_events_without_new_objects(
        s3: Any, gave_up_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": BUCKET}
    removed = s3_event(BUCKET, "incoming/a.json", version_id="v1", etag="abc", event_name="ObjectRemoved:Delete")
    for payload in (test_event, removed):
        invocation = {"requestContext": {"condition": "RetriesExhausted"}, "requestPayload": payload}
        answer = gave_up_module.handler(invocation, lambda_context)
        assert answer == {"cause": "RetriesExhausted", "results": []}
    assert keys(s3, "failed/") == []
