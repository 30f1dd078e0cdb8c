"""The S3 path: one ledger entry per object version, written after the result is stored."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor_aws.s3_store import S3Store
from compactor_cli.lambda_runtime import LocalLambdaContext

from ..s3.conftest import BUCKET, put_and_event, s3_module, transcript  # noqa: F401 (fixture)
from .conftest import IDEMPOTENCY_TABLE, ledger_down, table_entries


@pytest.fixture
def bucket(aws: dict[str, Any], s3_module: ModuleType) -> Any:
    aws["s3"].create_bucket(Bucket=BUCKET)
    aws["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    return aws["s3"]


def invoke(module: ModuleType, event: dict[str, Any]) -> list[dict[str, Any]]:
    return module.handler(event, LocalLambdaContext("S3CompactFunction", 300))["results"]


def ledger(aws: dict[str, Any]) -> list[dict[str, Any]]:
    return table_entries(aws["dynamodb"])


def test_a_store_failure_then_the_retry_bills_once(aws: dict[str, Any], bucket: Any, s3_module: ModuleType,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    event = put_and_event(bucket, "incoming/t.json", json.dumps(transcript()))
    real_put = S3Store.put_if
    failures = [RuntimeError("S3 PutObject failed")]

    def flaky_put(self: S3Store, *args: Any, **kwargs: Any) -> bool:
        if failures:
            raise failures.pop()
        return real_put(self, *args, **kwargs)

    monkeypatch.setattr(S3Store, "put_if", flaky_put)
    with pytest.raises(RuntimeError):
        invoke(s3_module, event)  # Lambda retries the asynchronous invocation
    assert ledger(aws) == []

    retried = invoke(s3_module, event)
    redelivered = invoke(s3_module, event)

    assert retried[0]["result"] == "compacted"
    assert redelivered[0]["result"] == "skipped"
    items = ledger(aws)
    assert len(items) == 1
    assert items[0]["api_key_id"]["S"] == f"s3:{BUCKET}" and items[0]["route"]["S"] == "s3_compact"
    assert int(items[0]["bytes_in"]["N"]) > int(items[0]["bytes_out"]["N"])


def test_a_ledger_failure_is_retried_and_bills_once(aws: dict[str, Any], bucket: Any, s3_module: ModuleType,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    event = put_and_event(bucket, "incoming/l.json", json.dumps(transcript()))
    ledger_down(monkeypatch, once=True)
    with pytest.raises(RuntimeError):
        invoke(s3_module, event)
    versions = bucket.list_object_versions(Bucket=BUCKET, Prefix="compacted/l.json")["Versions"]

    invoke(s3_module, event)

    assert len(ledger(aws)) == 1
    assert bucket.list_object_versions(Bucket=BUCKET, Prefix="compacted/l.json")["Versions"] == versions


def test_bad_content_is_not_billed(aws: dict[str, Any], bucket: Any, s3_module: ModuleType) -> None:
    assert invoke(s3_module, put_and_event(bucket, "incoming/bad.json", "not json"))[0]["result"] == "failed"
    assert ledger(aws) == []


def test_a_concurrent_duplicate_delivery_runs_the_job_once(aws: dict[str, Any]) -> None:
    import threading

    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

    from compactor import billing as core_billing
    from compactor.object_jobs import Source
    from compactor_aws import billing

    source = Source(BUCKET, "incoming/dup.json", version_id="v1", etag="e1")
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []
    facts = core_billing.billing_facts(route="s3_compact", mode="decision", bytes_in=9, bytes_out=3, model_calls=2,
                                       cost_usd=0.002)

    def job() -> tuple[dict[str, Any], dict[str, Any] | None]:
        runs.append(1)
        started.set()
        assert release.wait(10)
        return {"result": "compacted", "key": "compacted/dup.json", "status": 200}, facts

    first: list[dict[str, Any]] = []
    thread = threading.Thread(target=lambda: first.append(billing.run_object_job(source, job)))
    thread.start()
    assert started.wait(10)
    with pytest.raises(IdempotencyAlreadyInProgressError):  # this delivery fails; Lambda retries it later
        billing.run_object_job(source, job)
    release.set()
    thread.join(10)
    retried = billing.run_object_job(source, job)

    assert first[0]["result"] == "compacted" and retried["result"] == "skipped"
    assert len(runs) == 1 and len(ledger(aws)) == 1


def test_an_inline_api_upload_bills_the_uploading_key(aws: dict[str, Any], bucket: Any,
                                                      s3_module: ModuleType) -> None:
    from compactor import jobs

    caller = "uploaderkeyid"
    status, created = jobs.create_upload(S3Store(), BUCKET, caller, lambda *args: "https://presigned")
    assert status == 201
    event = put_and_event(bucket, "incoming/" + jobs.upload_rel(caller, created["job_id"]), json.dumps(transcript()))
    assert invoke(s3_module, event)[0]["result"] == "compacted"
    plain = put_and_event(bucket, "incoming/plain.json", json.dumps(transcript()))
    assert invoke(s3_module, plain)[0]["result"] == "compacted"
    assert sorted(item["api_key_id"]["S"] for item in ledger(aws)) == sorted([caller, f"s3:{BUCKET}"])


def _job_runs(runs: list[str]) -> Any:
    from compactor import billing as core_billing

    facts = core_billing.billing_facts(route="s3_compact", mode="decision", bytes_in=9, bytes_out=3, model_calls=2,
                                       cost_usd=0.002)

    def job() -> tuple[dict[str, Any], dict[str, Any] | None]:
        runs.append("job")
        return {"result": "compacted", "key": "compacted/p.json", "status": 200}, facts

    return job


def test_prepare_runs_while_the_in_progress_record_is_written(aws: dict[str, Any],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-progress write waits on a thread while ``prepare`` runs on the caller's: the write here only
    proceeds once ``prepare`` has started (it would wait forever if the two ran one after the other), and
    the job still runs only after the write, once; a redelivery finds the record and runs no job."""
    import threading

    from compactor.object_jobs import Source
    from compactor_aws import billing

    source = Source(BUCKET, "incoming/p.json", version_id="v1", etag="e1")
    client = billing.backends().layer.client
    real_put = client.put_item
    prepared = threading.Event()
    events: list[str] = []

    def put_item(**kwargs: Any) -> Any:
        if kwargs["TableName"] == IDEMPOTENCY_TABLE:
            events.append(f"put on {'caller' if threading.current_thread() is caller else 'a thread'}")
            assert prepared.wait(10), "the in-progress write waited for prepare: they did not overlap"
        return real_put(**kwargs)

    def prepare() -> None:
        events.append(f"prepare on {'caller' if threading.current_thread() is caller else 'a thread'}")
        prepared.set()

    caller = threading.current_thread()
    monkeypatch.setattr(client, "put_item", put_item)
    outcome = billing.run_object_job(source, _job_runs(events), prepare=prepare)

    assert outcome["result"] == "compacted"
    assert sorted(events[:2]) == ["prepare on caller", "put on a thread"] and events[2:] == ["job"]
    assert len(ledger(aws)) == 1

    events.clear()
    prepared.clear()
    redelivered = billing.run_object_job(source, _job_runs(events), prepare=prepare)
    assert redelivered["result"] == "skipped" and "job" not in events and len(ledger(aws)) == 1


def test_a_failing_prepare_changes_nothing(aws: dict[str, Any]) -> None:
    from compactor.object_jobs import Source
    from compactor_aws import billing

    def prepare() -> None:
        raise ImportError("no such module")

    runs: list[str] = []
    source = Source(BUCKET, "incoming/f.json", version_id="v1", etag="e1")
    assert billing.run_object_job(source, _job_runs(runs), prepare=prepare)["result"] == "compacted"
    assert runs == ["job"] and len(ledger(aws)) == 1


def test_a_failing_in_progress_write_fails_as_before(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The write's error reaches the caller as Powertools reports it; the job never runs."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError

    from compactor.object_jobs import Source
    from compactor_aws import billing

    monkeypatch.setattr(billing.backends().layer, "table_name", "no-such-table")
    runs: list[str] = []
    prepared: list[int] = []
    with pytest.raises(IdempotencyPersistenceLayerError):
        billing.run_object_job(Source(BUCKET, "incoming/w.json", version_id="v1", etag="e1"), _job_runs(runs),
                               prepare=lambda: prepared.append(1))
    assert runs == [] and prepared == [1] and ledger(aws) == []
