"""An S3 object's job runs as the caller it is billed to (an API upload's key, else ``s3:<bucket>``), so one upload's
provider faults change that caller's routing only (docs/reliability.md#isolation-one-callers-failures-are-that-callers).
Every job of a container used to run as one caller: one upload's 429 disabled the provider for every other upload."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor import container, jobs, service
from compactor.budget import Deadline
from compactor.caller import current_caller
from compactor.providers.base import ChatRequest, Offer
from compactor.providers.registry import transport_for
from compactor.router import Router
from compactor_aws.s3_store import S3Store
from compactor_cli.lambda_runtime import LocalLambdaContext
from fakes.provider_server import FakeProviderServer, Reply

from .conftest import BUCKET, put_and_event, transcript

TOO_LARGE = Reply(429, {"error": {"message": "Request too large for pa-model on tokens per min (TPM)",
                                  "code": "rate_limit_exceeded"}})
# A FailPlan that disables a provider after any failure: after a 429, for the caller whose call it was (300 s).
DISABLING = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
             ["argmax"], ["id"], ["always", {"action": "disable_provider"}]]


def offer(fake: FakeProviderServer, offer_id: str, provider: str, price_in: float) -> Offer:
    return Offer(id=offer_id, provider=provider, family=f"{provider}-fam", model=f"{provider}-model",
                 protocol="chat", transport="openai", base_url=fake.base_url, price_in=price_in, price_out=1.0)


async def no_wait(seconds: float) -> None:
    return None


def upload(s3: Any, caller: str) -> dict[str, Any]:
    """An API upload of ``caller`` (its job record and object), and the S3 event of the object."""
    status, created = jobs.create_upload(S3Store(s3), BUCKET, caller, lambda *args: "https://presigned")
    assert status == 201
    body = json.dumps({"mode": "mask", "messages": transcript()})  # mask mode: the job itself calls no model
    return put_and_event(s3, "incoming/" + jobs.upload_rel(caller, created["job_id"]), body)


def test_one_uploads_provider_faults_leave_another_uploads_routing_alone(
        s3: Any, s3_module: ModuleType, fake_provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    router = Router([offer(fake_provider, "a/chat", "pa", 1.0), offer(fake_provider, "b/chat", "pb", 2.0)],
                    transport_for=transport_for, sleep=no_wait)
    monkeypatch.setattr(container.ROUTER, "value", router)
    routed: list[tuple[str | None, Any]] = []
    compact_call = service.compact_call

    async def routing_first(request: Any, **options: Any) -> Any:
        """Each job makes one routed call under the disabling FailPlan before its compaction."""
        result = await router.chat(router.admit_policy(DISABLING), ChatRequest(messages=[{"role": "user",
                                                                                         "content": "hi"}]),
                                   deadline=Deadline.after_ms(10_000))
        routed.append((current_caller.get(), result))
        return await compact_call(request, **options)

    monkeypatch.setattr(service, "compact_call", routing_first)
    first, second = upload(s3, "key-first"), upload(s3, "key-second")
    context = LocalLambdaContext("S3CompactFunction", 300)

    fake_provider.enqueue(TOO_LARGE)  # the first upload's call to the cheaper offer: 429, its own request's fault
    assert s3_module.handler(first, context)["results"][0]["result"] == "compacted"
    assert s3_module.handler(second, context)["results"][0]["result"] == "compacted"

    (first_caller, first_call), (second_caller, second_call) = routed
    assert (first_caller, second_caller) == ("key-first", "key-second")  # the callers they are billed to
    assert first_call.ok and first_call.chosen.id == "b/chat"
    assert [e.get("scope") for e in first_call.trace["decision_path"] if e["event"] == "provider_disabled"] == [
        "caller"]
    # The second upload still routes to the cheaper offer: the first one's 429 disabled it for the first only.
    assert second_call.ok and second_call.chosen.id == "a/chat" and second_call.trace["rejected"] == []


def test_an_object_written_straight_to_the_bucket_runs_as_the_bucket(
        s3: Any, s3_module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []
    compact_call = service.compact_call

    async def watched(request: Any, **options: Any) -> Any:
        seen.append(current_caller.get())
        return await compact_call(request, **options)

    monkeypatch.setattr(service, "compact_call", watched)
    event = put_and_event(s3, "incoming/direct.json", json.dumps({"mode": "mask", "messages": transcript()}))
    assert s3_module.handler(event, LocalLambdaContext("S3CompactFunction", 300))["results"][0]["result"] == \
        "compacted"
    assert seen == [f"s3:{BUCKET}"] and current_caller.get() is None  # and not left set after the job
