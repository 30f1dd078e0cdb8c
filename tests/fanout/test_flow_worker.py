"""``flow_worker.handler`` on its own: the sample event, inline vs S3 results, the deadline it runs under."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import ModuleType

import pytest

from compactor.budget import Deadline
from compactor_cli.lambda_runtime import LocalLambdaContext
from compactor.flow import admit_flow, run_flow
from compactor.flow.partition import partition_flow
from compactor.flow.result import result_to_json

from .conftest import BUCKET, FanOutAws
from .test_partition import preset_flow
from scenarios.helpers import fixture_t

REPO = Path(__file__).resolve().parents[2]
EVENT = json.loads((REPO / "tests" / "events" / "flow-worker.json").read_text(encoding="utf-8"))


# The sample event, and the same fields flat beside "bucket" as an earlier deployment's state machine passes
# them (CloudFormation updates the worker first): both read the payload from S3.
FLAT_EVENT = {"bucket": EVENT["bucket"], "key": EVENT["item"]["key"], "result_key": EVENT["item"]["result_key"],
              "deadline_epoch_ms": EVENT["deadline_epoch_ms"]}


@pytest.mark.parametrize("event", [EVENT, FLAT_EVENT], ids=["item", "flat"])
def test_sample_event_runs_one_component_like_the_inline_scheduler(fanout_aws: FanOutAws, worker_module: ModuleType,
                                                                   event: dict[str, object]) -> None:
    flow_ir, flow_input = preset_flow(fixture_t(), 1)
    router = fanout_aws.router
    flow = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    component = partition_flow(flow, router.admit_policy).components[0]
    payload = component.payload(flow_input)
    assert EVENT["bucket"] == BUCKET
    fanout_aws.s3.put_object(Bucket=BUCKET, Key=EVENT["item"]["key"], Body=json.dumps(payload).encode())

    answer = worker_module.handler(event, LocalLambdaContext("FlowWorkerFunction", timeout_s=60))

    expected = asyncio.run(run_flow(component.admitted, payload["flow_input"], router=router,
                                    deadline=Deadline.after_ms(40_000)))
    result = answer.get("result")
    if result is None:  # too large to answer inline: written next to the payload
        assert answer == {"status": "done", "result_key": EVENT["item"]["result_key"]}
        result = json.loads(fanout_aws.s3.get_object(Bucket=BUCKET, Key=EVENT["item"]["result_key"])["Body"].read())
    assert answer["status"] == "done"
    assert json.dumps(result) == json.dumps(result_to_json(expected))


def test_an_inline_payload_runs_without_touching_s3(fanout_aws: FanOutAws, worker_module: ModuleType,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    flow_ir, flow_input = preset_flow(fixture_t(), 1)
    router = fanout_aws.router
    flow = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    component = partition_flow(flow, router.admit_policy).components[0]
    payload = component.payload(flow_input)

    def no_s3() -> None:
        raise AssertionError("the payload was in the event")

    from compactor_aws import s3_store

    monkeypatch.setattr(s3_store, "s3_client", no_s3)  # the worker imports it where it reads or writes S3
    event = {**EVENT, "item": {**EVENT["item"], "key": None, "payload": json.dumps(payload)}}
    answer = worker_module.handler(event, LocalLambdaContext("FlowWorkerFunction", timeout_s=60))

    expected = asyncio.run(run_flow(component.admitted, payload["flow_input"], router=router,
                                    deadline=Deadline.after_ms(40_000)))
    assert answer == {"status": "done", "result": result_to_json(expected)}
    assert json.dumps(answer["result"]) == json.dumps(result_to_json(expected))


def test_the_worker_runs_the_flow_as_the_payloads_caller(fanout_aws: FanOutAws, worker_module: ModuleType,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.caller import current_caller

    flow_ir, flow_input = preset_flow(fixture_t(), 1)
    router = fanout_aws.router
    flow = admit_flow(flow_ir, admit_policy=router.admit_policy, flow_input=flow_input)
    payload = {**partition_flow(flow, router.admit_policy).components[0].payload(flow_input), "caller": "key-a"}
    seen: list[str | None] = []
    real_run_flow = worker_module.run_flow

    async def recording_run_flow(*args: object, **kwargs: object) -> object:
        seen.append(current_caller.get())
        return await real_run_flow(*args, **kwargs)

    monkeypatch.setattr(worker_module, "run_flow", recording_run_flow)
    event = {**EVENT, "item": {**EVENT["item"], "key": None, "payload": json.dumps(payload)}}
    assert worker_module.handler(event, LocalLambdaContext("FlowWorkerFunction", timeout_s=60))["status"] == "done"
    assert seen == ["key-a"] and current_caller.get() is None


def test_worker_deadline_is_the_callers_capped_by_its_own_time(worker_module: ModuleType) -> None:
    now_ms = int(time.time() * 1000)
    short = worker_module.worker_deadline({"deadline_epoch_ms": now_ms + 5_000},
                                          LocalLambdaContext("FlowWorkerFunction", timeout_s=60))
    assert 4_000 <= short.remaining_ms() <= 5_000
    capped = worker_module.worker_deadline({"deadline_epoch_ms": now_ms + 50_000},
                                           LocalLambdaContext("FlowWorkerFunction", timeout_s=10))
    assert capped.remaining_ms() <= 10_000 - worker_module.WORKER_MARGIN_MS
    past = worker_module.worker_deadline({"deadline_epoch_ms": now_ms - 1}, None)
    assert past.expired


def test_a_payload_that_fails_admission_raises(fanout_aws: FanOutAws, worker_module: ModuleType) -> None:
    fanout_aws.s3.put_object(Bucket=BUCKET, Key=EVENT["item"]["key"], Body=b'{"flow_ir": ["flow", {}]}')
    with pytest.raises(Exception, match="nodes"):
        worker_module.handler(EVENT, LocalLambdaContext("FlowWorkerFunction", timeout_s=60))
