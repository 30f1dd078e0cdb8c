"""Idempotency-Key and the usage ledger through the API handler, on moto DynamoDB and S3."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from compactor import billing as core_billing
from compactor import http_api, idempotency
from compactor_aws import billing
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import IDEMPOTENCY_TABLE, RESPONSES_BUCKET, ledger_down, table_entries

TRANSCRIPT = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Done."}]
KEY_A, KEY_B = "key-id-alpha", "key-id-bravo"


def event(method: str, path: str, *, body: Any = None, caller: str | None = KEY_A,
          headers: dict[str, str] | None = None, query: dict[str, str] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    out = http_api.rest_proxy_event(method=method, resource_path=path, query={k: [v] for k, v in (query or {}).items()},
                                    headers=[("Content-Type", "application/json"), *(headers or {}).items()], body=data)
    if caller is not None:
        out["requestContext"]["identity"]["apiKeyId"] = caller
    return out


@pytest.fixture
def counted(compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the compactions the handler really runs."""
    from compactor import service

    calls: list[int] = []
    real = service.handle_compact

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "handle_compact", counting)
    return calls


def call(module: ModuleType, ev: dict[str, Any]) -> dict[str, Any]:
    return module.handler(ev, LocalLambdaContext("CompactFunction", 60))


def replayed(response: dict[str, Any]) -> bool:
    return (response.get("multiValueHeaders") or {}).get(billing.REPLAYED_HEADER) == ["true"]


def usage(module: ModuleType, caller: str | None, **query: str) -> dict[str, Any]:
    response = call(module, event("GET", "/usage", caller=caller, query=query))
    assert response["statusCode"] == 200, response["body"]
    return json.loads(response["body"])


def answered_while_computing(first: dict[str, Any], other: dict[str, Any], compute: Callable[[], billing.Computed]
                             ) -> tuple[list[billing.Answer], billing.Answer]:
    """``first`` answered in a thread whose computation (``compute``) waits once started, ``other`` answered in the
    meantime, then the computation let go: the list of first's answer (empty if it never came) and other's answer."""
    started, release = threading.Event(), threading.Event()

    def held() -> billing.Computed:
        started.set()
        assert release.wait(10)
        return compute()

    answers: list[billing.Answer] = []
    thread = threading.Thread(target=lambda: answers.append(billing.answer_call(first, "compact", held)))
    thread.start()
    assert started.wait(10)
    meanwhile = billing.answer_call(other, "compact", held)
    release.set()
    thread.join(10)
    return answers, meanwhile


def ledger_items(aws: dict[str, Any]) -> list[dict[str, Any]]:
    return table_entries(aws["dynamodb"])


def test_a_retry_under_the_same_key_replays_the_bytes_without_a_second_compaction_or_charge(
        aws: dict[str, Any], compact_module: ModuleType, counted: list[int]) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "retry-1"})

    first, second = call(compact_module, ev), call(compact_module, dict(ev))

    assert first["statusCode"] == second["statusCode"] == 200
    assert first["body"] == second["body"]
    assert replayed(second) and not replayed(first)
    assert len(counted) == 1
    items = ledger_items(aws)
    assert len(items) == 1
    assert items[0]["api_key_id"]["S"] == KEY_A and items[0]["idempotency_key"]["S"] == "retry-1"
    assert items[0]["route"]["S"] == "compact" and items[0]["mode"]["S"] == "seal"


def test_the_same_key_with_another_body_is_422_and_changes_nothing(
        aws: dict[str, Any], compact_module: ModuleType, counted: list[int]) -> None:
    headers = {"Idempotency-Key": "reused"}
    first = call(compact_module, event("POST", "/compact", body={"messages": TRANSCRIPT}, headers=headers))
    other = call(compact_module, event("POST", "/compact", body={"messages": TRANSCRIPT[:1]}, headers=headers))

    assert first["statusCode"] == 200
    assert other["statusCode"] == 422
    assert json.loads(other["body"])["error"]["code"] == "idempotency_key_reused"
    assert len(counted) == 1 and len(ledger_items(aws)) == 1


def test_keys_are_scoped_per_caller(aws: dict[str, Any], compact_module: ModuleType, counted: list[int]) -> None:
    headers = {"Idempotency-Key": "shared-name"}
    for caller in (KEY_A, KEY_B):
        assert call(compact_module, event("POST", "/compact", body={"messages": TRANSCRIPT}, caller=caller,
                                          headers=headers))["statusCode"] == 200

    assert len(counted) == 2
    assert sorted(item["api_key_id"]["S"] for item in ledger_items(aws)) == [KEY_A, KEY_B]
    assert [day["calls"] for day in usage(compact_module, KEY_A)["days"]] == [1]
    assert usage(compact_module, "key-id-charlie")["days"] == []


@pytest.mark.parametrize("value", ["", " ", "x" * 256, "caf\u00e9"])
def test_a_malformed_key_is_400_before_any_work(aws: dict[str, Any], compact_module: ModuleType,
                                                counted: list[int], value: str) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT})
    ev["headers"]["Idempotency-Key"] = value

    response = call(compact_module, ev)

    assert response["statusCode"] == 400
    assert json.loads(response["body"])["error"]["code"] == "invalid_idempotency_key"
    assert counted == [] and ledger_items(aws) == []


def test_a_concurrent_duplicate_is_409_and_the_later_retry_replays(aws: dict[str, Any]) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "dup"})
    computed: list[int] = []
    facts = core_billing.billing_facts(route="compact", mode="legacy", bytes_in=10, bytes_out=4, model_calls=1,
                                       cost_usd=0.001)

    def compute() -> billing.Computed:
        computed.append(1)
        return billing.Computed(200, '{"ok":true}', facts)

    answers, duplicate = answered_while_computing(ev, ev, compute)
    retry = billing.answer_call(ev, "compact", compute)

    assert duplicate.status == 409 and json.loads(duplicate.body)["error"]["code"] == "idempotency_in_progress"
    assert answers[0].body == retry.body == '{"ok":true}' and retry.headers == {billing.REPLAYED_HEADER: "true"}
    assert len(computed) == 1 and len(ledger_items(aws)) == 1


def test_a_response_too_large_for_an_item_is_kept_in_s3_by_version(aws: dict[str, Any]) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "big"})
    body = json.dumps({"messages": ["x" * (idempotency.MAX_INLINE_RESPONSE_BYTES + 10)]})
    facts = core_billing.billing_facts(route="compact", mode="legacy", bytes_in=1, bytes_out=1, model_calls=0,
                                       cost_usd=0.0)

    first = billing.answer_call(ev, "compact", lambda: billing.Computed(200, body, facts))
    second = billing.answer_call(ev, "compact", lambda: pytest.fail("recomputed"))

    assert first.body == second.body == body
    versions = aws["s3"].list_object_versions(Bucket=RESPONSES_BUCKET, Prefix="idempotency/")["Versions"]
    assert len(versions) == 1
    item = aws["dynamodb"].scan(TableName=IDEMPOTENCY_TABLE)["Items"][0]
    stored = json.loads(item["data"]["S"])
    assert "body" not in stored and stored["body_ref"]["version_id"] == versions[0]["VersionId"]
    assert len(item["data"]["S"]) < 2000


def test_a_server_error_is_neither_stored_nor_billed(aws: dict[str, Any]) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "flaky"})
    facts = core_billing.billing_facts(route="compact", mode="legacy", bytes_in=1, bytes_out=1, model_calls=1,
                                       cost_usd=None)
    answers = iter([billing.Computed(500, '{"error":{}}'), billing.Computed(200, '{"ok":1}', facts)])

    first = billing.answer_call(ev, "compact", lambda: next(answers))
    second = billing.answer_call(ev, "compact", lambda: next(answers))

    assert (first.status, second.status, second.body) == (500, 200, '{"ok":1}')
    items = ledger_items(aws)
    assert len(items) == 1 and items[0]["cost_known"]["BOOL"] is False and "cost_usd" not in items[0]


@pytest.mark.parametrize("key", [None, "too-large"])
def test_an_answer_too_large_to_send_is_413_and_neither_billed_nor_stored(
        aws: dict[str, Any], compact_module: ModuleType, counted: list[int], monkeypatch: pytest.MonkeyPatch,
        key: str | None) -> None:
    # The handler swapped in the 413 after the route had billed the call and stored its oversized answer.
    monkeypatch.setattr(http_api, "MAX_RESPONSE_BYTES", 2_000)
    messages = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "x" * 3_000}]
    ev = event("POST", "/compact", body={"messages": messages, "mode": "mask"},
               headers={"Idempotency-Key": key} if key else {})

    first, second = call(compact_module, ev), call(compact_module, dict(ev))

    for answer in (first, second):
        assert answer["statusCode"] == 413
        assert json.loads(answer["body"])["error"]["code"] == "response_too_large"
    assert ledger_items(aws) == [] and usage(compact_module, KEY_A)["days"] == []
    if key:  # a retry gets the same small 413 back, without computing again
        assert replayed(second) and len(counted) == 1
        stored = json.loads(aws["dynamodb"].scan(TableName=IDEMPOTENCY_TABLE)["Items"][0]["data"]["S"])
        assert stored["status"] == 413 and stored["facts"] is None and len(stored["body"]) < 300


def test_a_ledger_failure_fails_the_call_and_the_retry_bills_it_once(
        aws: dict[str, Any], compact_module: ModuleType, counted: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    ledger_down(monkeypatch, once=True)
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "ledger-down"})

    first, second = call(compact_module, ev), call(compact_module, dict(ev))

    assert first["statusCode"] == 500 and second["statusCode"] == 200
    assert len(counted) == 1 and len(ledger_items(aws)) == 1


def test_calls_without_a_key_are_billed_once_each(aws: dict[str, Any], compact_module: ModuleType,
                                                  counted: list[int]) -> None:
    for _ in range(2):
        assert call(compact_module, event("POST", "/compact", body={"messages": TRANSCRIPT}))["statusCode"] == 200

    assert len(counted) == 2 and len(ledger_items(aws)) == 2
    assert usage(compact_module, KEY_A)["days"][0]["calls"] == 2


@pytest.mark.parametrize("idempotency_key", [None, "metrics-down"])
def test_a_call_whose_metrics_cannot_be_written_is_still_billed_once(
        aws: dict[str, Any], compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        idempotency_key: str | None) -> None:
    from compactor_aws import observability

    def unavailable(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("metrics unavailable")

    monkeypatch.setattr(observability, "emit_metrics", unavailable)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers=headers)

    assert call(compact_module, ev)["statusCode"] == 200
    if idempotency_key:
        assert replayed(call(compact_module, dict(ev)))

    items = ledger_items(aws)  # was none: a failure to observe the call left it unbilled
    assert len(items) == 1 and items[0]["route"]["S"] == "compact"
    assert usage(compact_module, KEY_A)["days"][0]["calls"] == 1


@pytest.mark.parametrize("identity", ["api key", "authorizer principal", "none"])
def test_the_billing_log_line_names_the_caller_the_ledger_bills(
        aws: dict[str, Any], compact_module: ModuleType, caplog: pytest.LogCaptureFixture, identity: str) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, caller=KEY_A if identity == "api key" else None)
    if identity == "authorizer principal":
        ev["requestContext"]["authorizer"] = {"principalId": "key-0123456789abcdef01234567"}
    caplog.clear()

    assert call(compact_module, ev)["statusCode"] == 200

    (billed,) = [record.billing for record in caplog.records if getattr(record, "record_type", None) == "billing"]
    (item,) = ledger_items(aws)
    assert billed["api_key_id"] == item["api_key_id"]["S"]  # was null for the principal and for anonymous


def test_ledger_totals_equal_the_sum_of_the_billing_records(
        aws: dict[str, Any], compact_module: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    long = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"step {i} " + "y" * 400} for i in range(12)]
    requests = [({"messages": TRANSCRIPT}, "a"), ({"messages": long, "keep_recent": 2}, "b"),
                ({"messages": long, "keep_recent": 2}, "b"), ({"messages": long}, None), ({"messages": TRANSCRIPT}, "a")]
    caplog.clear()
    for body, key in requests:
        headers = {"Idempotency-Key": key} if key else {}
        assert call(compact_module, event("POST", "/compact", body=body, headers=headers))["statusCode"] == 200
    records = [record.billing for record in caplog.records if getattr(record, "record_type", None) == "billing"]

    days = usage(compact_module, KEY_A)["days"]
    assert len(records) == 3  # the two replays were not computed again
    assert sum(day["calls"] for day in days) == len(records)
    for field in ("bytes_in", "bytes_out", "model_calls"):
        assert sum(day[field] for day in days) == sum(record[field] or 0 for record in records), field
    assert sum(day["bytes_saved"] for day in days) == sum(record["bytes_saved"] or 0 for record in records)


@pytest.mark.parametrize(("query", "message"), [
    ({"from": "2026-13-01", "to": "2026-12-01"}, "from must be a date"),
    ({"from": "2026-12-02", "to": "2026-12-01"}, "after"),
    ({"from": "2024-01-01", "to": "2026-01-01"}, "spans more than"),
])
def test_a_bad_usage_range_is_422(compact_module: ModuleType, query: dict[str, str], message: str) -> None:
    response = call(compact_module, event("GET", "/usage", query=query))

    assert response["statusCode"] == 422
    assert message in json.loads(response["body"])["error"]["message"]


def test_a_usage_range_with_both_bounds_bad_names_both(compact_module: ModuleType) -> None:
    """It named ``to`` alone: a caller who fixed it met ``from`` on the next call."""
    response = call(compact_module, event("GET", "/usage", query={"from": "2026-13-01", "to": "yesterday"}))

    assert response["statusCode"] == 422
    error = json.loads(response["body"])["error"]
    assert error["code"] == "invalid_usage_range"
    assert error["message"] == "from must be a date YYYY-MM-DD; to must be a date YYYY-MM-DD"


def usage_event(query: dict[str, list[str]], *, single: bool = True) -> dict[str, Any]:
    ev = http_api.rest_proxy_event(method="GET", resource_path="/usage", query=query, headers=[], body=b"")
    ev["requestContext"]["identity"]["apiKeyId"] = KEY_A
    if not single:  # a hand-made event with the multi-value field only
        ev["queryStringParameters"] = None
    return ev


@pytest.mark.parametrize("single", [True, False])
def test_a_usage_bound_given_twice_is_422_naming_it(compact_module: ModuleType, single: bool) -> None:
    """The last ``from`` was taken (the one ``queryStringParameters`` holds), and an event with
    ``multiValueQueryStringParameters`` alone was answered for the default range."""
    query = {"from": ["2026-01-01", "2026-02-01"], "to": ["2026-03-01", "bad"]}

    response = call(compact_module, usage_event(query, single=single))

    assert response["statusCode"] == 422
    assert json.loads(response["body"])["error"]["message"] == (
        "from is given 2 times: give it once; to is given 2 times: give it once")


def test_a_usage_bound_given_twice_alike_is_that_bound(compact_module: ModuleType) -> None:
    response = call(compact_module, usage_event({"from": ["2026-01-01"] * 2, "to": ["2026-01-31"]}, single=False))

    assert response["statusCode"] == 200, response["body"]
    assert json.loads(response["body"])["from"] == "2026-01-01"


def test_two_different_idempotency_keys_are_400(aws: dict[str, Any], compact_module: ModuleType,
                                                counted: list[int]) -> None:
    """The last was taken: a retry that sent them in the other order was computed and billed again."""
    headers = [("Content-Type", "application/json"), ("Idempotency-Key", "first"), ("Idempotency-Key", "second")]
    ev = http_api.rest_proxy_event(method="POST", resource_path="/compact", query={}, headers=headers,
                                   body=json.dumps({"messages": TRANSCRIPT}).encode())

    response = call(compact_module, ev)

    assert response["statusCode"] == 400
    error = json.loads(response["body"])["error"]
    assert error["code"] == "invalid_idempotency_key"
    assert error["message"] == "the header Idempotency-Key was sent with 2 different values: send it once"
    assert counted == [] and ledger_items(aws) == []


# ------------------------------------------- a key computed again after its TTL (docs/billing.md)

def expire_records(aws: dict[str, Any]) -> None:
    """Every stored idempotency record's TTL has passed (DynamoDB treats a record as absent from its expiry,
    before its TTL deletes it)."""
    import time

    for item in aws["dynamodb"].scan(TableName=IDEMPOTENCY_TABLE)["Items"]:
        aws["dynamodb"].update_item(TableName=IDEMPOTENCY_TABLE, Key={"id": item["id"]},
                                    UpdateExpression="SET expiration = :past",
                                    ExpressionAttributeValues={":past": {"N": str(int(time.time()) - 1)}})


def test_a_key_computed_again_after_its_ttl_is_billed_again_and_its_replays_are_not(
        aws: dict[str, Any], compact_module: ModuleType, counted: list[int]) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "daily"})

    first = call(compact_module, ev)
    expire_records(aws)
    again = call(compact_module, dict(ev))  # the same UTC day, as with any TTL under a day
    billing.reset_backends()  # another Lambda instance replays it
    replay = call(compact_module, dict(ev))

    assert first["statusCode"] == again["statusCode"] == replay["statusCode"] == 200
    assert not replayed(again) and replayed(replay) and replay["body"] == again["body"]
    assert len(counted) == 2
    items = ledger_items(aws)
    assert len(items) == 2 and len({item["sk"]["S"] for item in items}) == 2
    assert all(item["idempotency_key"]["S"] == "daily" for item in items)
    assert sum(day["calls"] for day in usage(compact_module, KEY_A)["days"]) == 2


def test_a_ledger_failure_after_a_recomputation_is_billed_once_by_the_retry(
        aws: dict[str, Any], compact_module: ModuleType, counted: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "down-later"})
    assert call(compact_module, ev)["statusCode"] == 200
    expire_records(aws)
    ledger_down(monkeypatch, once=True)
    failed = call(compact_module, dict(ev))
    retry = call(compact_module, dict(ev))
    later = call(compact_module, dict(ev))

    assert failed["statusCode"] == 500 and retry["statusCode"] == later["statusCode"] == 200
    assert replayed(retry) and replayed(later)
    assert len(counted) == 2 and len(ledger_items(aws)) == 2  # the first computation's and the second's


def test_a_record_stored_before_entry_ids_were_kept_replays_under_its_old_id(
        aws: dict[str, Any], compact_module: ModuleType, counted: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    # Deployed ledgers hold entries idem:<scope hash> of records without an entry_id (written before issue 11's
    # fourteenth round): a replay of such a record after the upgrade must not bill the call a second time.
    real_stored = billing._stored

    def old_stored(*args: Any) -> dict[str, Any]:
        record = real_stored(*args)
        del record["entry_id"]
        return record

    monkeypatch.setattr(billing, "_stored", old_stored)
    ev = event("POST", "/compact", body={"messages": TRANSCRIPT}, headers={"Idempotency-Key": "before"})
    assert call(compact_module, ev)["statusCode"] == 200
    monkeypatch.setattr(billing, "_stored", real_stored)
    scope = idempotency.scope_id(KEY_A, "compact", "before")
    assert [item["entry_id"]["S"] for item in ledger_items(aws)] == [f"idem:{scope}"]

    replay = call(compact_module, dict(ev))

    assert replayed(replay) and len(counted) == 1
    assert [item["entry_id"]["S"] for item in ledger_items(aws)] == [f"idem:{scope}"]
