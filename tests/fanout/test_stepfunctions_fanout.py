"""``BatchFanOut=stepfunctions`` end to end: the real ASL executed by moto, every Map iteration's Lambda
task dispatched in-process to ``flow_worker.handler``, and ``/v1/compact`` answered by the real
``CompactFunction`` handler; the answer must be byte-identical to inline mode's."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compactor import service
from compactor.budget import Deadline
from compactor_cli.lambda_runtime import LocalLambdaContext, load_handler
from compactor.transcripts import parse_transcript
from compactor.http_api import rest_proxy_event
from compactor.models import CompactRequest
from compactor_aws import stepfunctions_runner
from compactor_aws.stepfunctions_runner import StepFunctionsFlowRunner
from fakes.log_lines import lines_written
from scenarios.helpers import fixture_t

from .conftest import BUCKET, FanOutAws

pytestmark = pytest.mark.usefixtures("batches_of_eight")  # a fan-out of several batches, one per worker

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"
POLICY = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
          ["top_k", 4, ["argmax"]], ["id"], ["always", {"action": "next_candidate"}]]


def fixture_t_body() -> dict[str, Any]:
    return {"messages": fixture_t(), "keep_recent": 1, "decision_policy_ir": POLICY}


def corpus_body() -> dict[str, Any]:
    messages = parse_transcript(CORPUS.read_text(encoding="utf-8"))[0]
    return {"messages": messages, "keep_recent": 6, "decision_policy_ir": POLICY}


@pytest.fixture(scope="module")
def compact_module() -> ModuleType:
    load_handler(REPO / "functions" / "compact", "compact.handler")
    import sys

    return sys.modules["compact"]


def runner(aws: FanOutAws) -> StepFunctionsFlowRunner:
    return StepFunctionsFlowRunner(aws.state_machine_arn, BUCKET, stepfunctions=aws.stepfunctions, s3=aws.s3)


def post_compact(compact_module: ModuleType, body: dict[str, Any]) -> tuple[int, str]:
    event = rest_proxy_event(method="POST", resource_path="/compact", query={},
                             headers=[("content-type", "application/json")], body=json.dumps(body).encode())
    response = compact_module.handler(event, LocalLambdaContext("CompactFunction", timeout_s=60))
    return response["statusCode"], response["body"]


@pytest.mark.parametrize("make_body", [fixture_t_body, corpus_body], ids=["fixture_t", "corpus"])
@pytest.mark.parametrize("inline_budget", [None, 0, "one"], ids=["payloads-inline", "payloads-in-s3", "mixed"])
def test_handler_answers_byte_identical_in_both_modes(fanout_aws: FanOutAws, compact_module: ModuleType,
                                                      monkeypatch: pytest.MonkeyPatch, make_body: Any,
                                                      inline_budget: int | str | None) -> None:
    body = make_body()
    planned: list[tuple[list[dict[str, Any]], dict[str, str]]] = []
    real_map_items = stepfunctions_runner.map_items

    def recording_map_items(payloads: Any, run: str, budget: int | None = None) -> Any:
        if inline_budget == "one":  # room for the smallest payload only: one batch inline, the others in S3
            budget = min(len(json.dumps(text)) for text in payloads)
        elif inline_budget is not None:
            budget = inline_budget
        planned.append(real_map_items(payloads, run, budget))
        return planned[-1]

    monkeypatch.setattr(stepfunctions_runner, "map_items", recording_map_items)
    monkeypatch.setenv("COMPACTOR_BATCH_FANOUT", "inline")
    inline_status, inline = post_compact(compact_module, body)
    assert fanout_aws.dispatch.events == []

    monkeypatch.setenv("COMPACTOR_BATCH_FANOUT", "stepfunctions")
    monkeypatch.setenv(stepfunctions_runner.STATE_MACHINE_ENV, fanout_aws.state_machine_arn)
    monkeypatch.setenv(stepfunctions_runner.BUCKET_ENV, BUCKET)
    monkeypatch.setattr(stepfunctions_runner, "_configured", {
        (fanout_aws.state_machine_arn, BUCKET): runner(fanout_aws)})
    fanned_status, fanned = post_compact(compact_module, body)

    assert inline_status == fanned_status == 200
    assert fanned == inline  # output, manifest, fingerprint, costs, usage, traces: byte for byte
    parsed = json.loads(inline)
    batches = len([n for n in parsed["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"])
    assert batches >= 2 and len(fanout_aws.dispatch.events) == batches  # one Map iteration per batch
    (items, uploads), = planned
    carried = [item for item in items if item["payload"] is not None]
    if inline_budget is None:  # the smallest payloads, as many as fit in the default budget
        sizes = sorted(len(json.dumps(item["payload"] or uploads[item["key"]])) for item in items)
        used = sum(sizes[:len(carried)])
        assert carried and used <= stepfunctions_runner.INLINE_PAYLOADS_MAX_BYTES
        assert len(carried) == len(items) or used + sizes[len(carried)] > stepfunctions_runner.INLINE_PAYLOADS_MAX_BYTES
        assert sum(len(json.dumps(item["payload"])) for item in carried) == used
    else:
        assert len(carried) == {0: 0, "one": 1}[inline_budget]
    assert all(item["key"] is None for item in carried)
    keys = {obj["Key"] for obj in fanout_aws.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}
    assert all(key.startswith("fanout/") for key in keys)  # scratch objects only under fanout/
    payload_keys = {key for key in keys if not key.endswith(".result.json")}
    assert payload_keys == set(uploads) == {item["key"] for item in items if item["payload"] is None}
    received = sorted((event["item"] for event in fanout_aws.dispatch.events), key=lambda item: item["result_key"])
    assert received == sorted(items, key=lambda item: item["result_key"])  # each item, whole, through the ASL


async def test_large_results_travel_through_s3(fanout_aws: FanOutAws, worker_module: ModuleType,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "INLINE_RESULT_MAX_BYTES", 0)
    request = CompactRequest(**fixture_t_body())
    inline = await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router)
    fanned = await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router,
                                   flow_runner=runner(fanout_aws))
    assert json.dumps(fanned) == json.dumps(inline)
    keys = [obj["Key"] for obj in fanout_aws.s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert len([key for key in keys if key.endswith(".result.json")]) == 2


class ReadsTogether:
    """The test's S3 client, whose ``get_object`` answers only once ``parties`` reads are in flight at once."""

    def __init__(self, s3: Any, parties: int) -> None:
        self._s3, self.arrived = s3, threading.Barrier(parties, timeout=10)

    def get_object(self, **kwargs: Any) -> Any:
        self.arrived.wait()  # a read made alone breaks the barrier: its result is unreadable, its batch kept
        return self._s3.get_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


async def test_large_results_are_read_from_s3_together(fanout_aws: FanOutAws, worker_module: ModuleType,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each large result is a read from S3; they were awaited one after another, each waiting for the one
    before it. Here neither read answers until both are in flight."""
    monkeypatch.setattr(worker_module, "INLINE_RESULT_MAX_BYTES", 0)
    request = CompactRequest(**fixture_t_body())
    inline = await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router)
    s3 = ReadsTogether(fanout_aws.s3, parties=2)  # fixture_t's two batches
    fanned = await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router,
                                   flow_runner=StepFunctionsFlowRunner(fanout_aws.state_machine_arn, BUCKET,
                                                                       stepfunctions=fanout_aws.stepfunctions, s3=s3))
    assert json.dumps(fanned) == json.dumps(inline)
    assert s3.arrived.n_waiting == 0 and not s3.arrived.broken


def test_the_containers_s3_client_keeps_a_connection_for_every_call_in_flight(fanout_aws: FanOutAws) -> None:
    """The result reads and uploads in flight at once each keep their connection: with botocore's default of
    10, every further one opened a connection (a TLS handshake) that urllib3 discarded with a warning."""
    from compactor_aws import background, s3_store

    assert s3_store.s3_client().meta.config.max_pool_connections == background.CALLS_IN_FLIGHT
    assert stepfunctions_runner.UPLOAD_THREADS <= background.CALLS_IN_FLIGHT


async def test_an_earlier_deployments_items_run_on_this_state_machine(fanout_aws: FanOutAws,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # CloudFormation updates the state machine before CompactFunction: for a while the function of the earlier
    # deployment sends items without "payload", every payload in S3. The Map passes each item whole, so they run.
    def earlier_items(payloads: Any, run: str, budget: int | None = None) -> Any:
        uploads = {f"{run}{index}.json": text for index, text in enumerate(payloads)}
        return [{"key": f"{run}{index}.json", "result_key": f"{run}{index}.result.json"}
                for index in range(len(payloads))], uploads

    monkeypatch.setattr(stepfunctions_runner, "map_items", earlier_items)
    request = CompactRequest(**fixture_t_body())
    inline = await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router)
    fanned = await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router,
                                   flow_runner=runner(fanout_aws))
    assert json.dumps(fanned) == json.dumps(inline)
    assert len(fanout_aws.dispatch.events) == 2 and all("payload" not in e["item"] for e in fanout_aws.dispatch.events)


async def test_a_failing_worker_degrades_only_its_batch_to_keep(fanout_aws: FanOutAws) -> None:
    fanout_aws.dispatch.fail = lambda event: event["item"]["result_key"].endswith("/1.result.json")
    request = CompactRequest(**fixture_t_body())
    inline = (await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router))[1]
    status, fanned = await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router,
                                           flow_runner=runner(fanout_aws))
    assert status == 200
    actions = {f["id"]: f["action"] for f in fanned["compaction"]["fragments"]}
    inline_actions = {f["id"]: f["action"] for f in inline["compaction"]["fragments"]}
    batch_1 = {"fragment_10", "fragment_11"}  # docs/behaviour.md#worked-example-fixture-t
    assert all(actions[fid] == "keep" for fid in batch_1)
    assert {k: v for k, v in actions.items() if k not in batch_1} == {
        k: v for k, v in inline_actions.items() if k not in batch_1}
    assert fanned["messages"][10:12] == fixture_t()[10:12]
    nodes = fanned["x_router"]["decision_trace"]["flow_nodes"]
    failed = [n for n in nodes if n.get("fallback") == "input" and n["kind"] == "decision"]
    assert len(failed) == 1 and "worker failed: RuntimeError" in failed[0]["error"]
    assert fanned["x_router"]["cost_usd"] is None  # what the crashed worker spent is unknown
    assert "flow_error" not in fanned["x_router"]["decision_trace"]


class FrozenDeadline(Deadline):
    """Always 12.345 s left: the runner's arithmetic is under test, not how fast this machine prepares."""

    def remaining_s(self) -> float:
        return 12.345


async def test_the_remaining_budget_reaches_every_worker(fanout_aws: FanOutAws, worker_module: ModuleType,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real_run_flow = worker_module.run_flow

    async def recording_run_flow(*args: Any, deadline: Deadline, **kwargs: Any) -> Any:
        seen.append(deadline.remaining_ms())
        return await real_run_flow(*args, deadline=deadline, **kwargs)

    monkeypatch.setattr(worker_module, "run_flow", recording_run_flow)
    request = CompactRequest(**fixture_t_body())
    before_ms = int(time.time() * 1000)
    await service.compact(request, deadline=FrozenDeadline(time.monotonic() + 3600), router=fanout_aws.router,
                          flow_runner=runner(fanout_aws))
    after_ms = int(time.time() * 1000)
    (execution_input,) = fanout_aws.stepfunctions.inputs
    # 12.345 s left: Task timeout floor(12.345) - 1 - the retry's wait = 10 s; workers stop 0.5 s before it.
    assert execution_input["timeout_s"] == 10 and execution_input["retry"] is True
    assert before_ms + 9_000 <= execution_input["deadline_epoch_ms"] <= after_ms + 9_500
    events = fanout_aws.dispatch.events
    assert len(events) == 2 and {e["deadline_epoch_ms"] for e in events} == {execution_input["deadline_epoch_ms"]}
    # What a worker sees is the execution's deadline less its own dispatch delay, which a loaded machine
    # stretches: well above any default, never above the 9.5 s sent.
    assert len(seen) == 2 and all(5_000 <= remaining <= 9_500 for remaining in seen)


async def test_every_workers_payload_names_the_caller(fanout_aws: FanOutAws, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's router keeps a caller's provider faults to that caller, as the API's does (docs/reliability.md):
    the payloads say whose request they are, inline or in S3."""
    from compactor.caller import calling_as

    texts: list[str] = []
    real_map_items = stepfunctions_runner.map_items

    def recording_map_items(payloads: Any, run: str, budget: int | None = None) -> Any:
        texts.extend(payloads)
        return real_map_items(payloads, run, budget)

    monkeypatch.setattr(stepfunctions_runner, "map_items", recording_map_items)
    with calling_as("key-a"):
        await service.compact(CompactRequest(**fixture_t_body()), deadline=Deadline.after_ms(40_000),
                              router=fanout_aws.router, flow_runner=runner(fanout_aws))
    assert len(texts) == 2 and all(json.loads(text)["caller"] == "key-a" for text in texts)


@pytest.mark.parametrize("remaining_ms", [1, 400, 999, 1_000, 1_500, 1_999, 2_000, 2_999, 3_000, 6_999, 7_000,
                                          7_999, 8_000, 12_345, 25_000, 40_000, 59_999])
def test_every_task_ends_before_the_caller_stops_waiting(remaining_ms: int) -> None:
    timing = stepfunctions_runner.fanout_timing(remaining_ms)
    assert timing.wait_s == remaining_ms / 1000 + stepfunctions_runner.GRACE_S
    assert isinstance(timing.timeout_s, int) and timing.timeout_s >= 1  # Step Functions takes whole seconds
    # The whole Task, retry wait included, ends strictly before the caller's wait does.
    task_s = timing.timeout_s + (stepfunctions_runner.RETRY_WAIT_S if timing.retry else 0)
    assert task_s < timing.wait_s
    if remaining_ms >= 2_000:
        assert task_s <= remaining_ms / 1000 - 1 + 1e-9  # at least GRACE_S + 1 s of margin
    # Workers stop before their Task times out, and never after the request's deadline.
    assert 0 <= timing.worker_budget_ms <= min(remaining_ms, timing.timeout_s * 1000 - 500)
    assert timing.retry == (remaining_ms >= 7_000)
    if timing.retry:
        assert timing.timeout_s >= stepfunctions_runner.RETRY_MIN_TIMEOUT_S


async def test_little_time_left_runs_the_task_without_retry(fanout_aws: FanOutAws,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # "Too little time to retry" is RETRY_MIN_TIMEOUT_S; raising it to 60 s takes the no-retry branch with a
    # 20 s budget, so the workers get a ~18 s Task timeout (a real 3 s budget left ~0.5 s: flaky under load).
    # The branch's arithmetic for small budgets is covered by test_every_task_ends_before_the_caller_stops_waiting.
    monkeypatch.setattr(stepfunctions_runner, "RETRY_MIN_TIMEOUT_S", 60)
    status, body = await service.compact(CompactRequest(**fixture_t_body()), deadline=Deadline.after_ms(20_000),
                                         router=fanout_aws.router, flow_runner=runner(fanout_aws))
    (execution_input,) = fanout_aws.stepfunctions.inputs
    assert execution_input["retry"] is False and 10 <= execution_input["timeout_s"] <= 19
    assert status == 200 and len(fanout_aws.dispatch.events) == 2
    assert all(n.get("error") is None for n in body["x_router"]["decision_trace"]["flow_nodes"]
               if n["kind"] == "decision")


async def test_an_execution_that_outlives_the_budget_keeps_every_batch(fanout_aws: FanOutAws,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    class Hanging:
        def start_sync_execution(self, **_: Any) -> dict[str, Any]:
            time.sleep(3)
            return {"status": "SUCCEEDED", "output": "[]"}

    late = StepFunctionsFlowRunner(fanout_aws.state_machine_arn, BUCKET, stepfunctions=Hanging(), s3=fanout_aws.s3)
    monkeypatch.setattr(stepfunctions_runner, "GRACE_S", 0.1)
    started = time.monotonic()
    status, body = await service.compact(CompactRequest(**fixture_t_body()), deadline=Deadline.after_ms(300),
                                         router=fanout_aws.router, flow_runner=late)
    elapsed = time.monotonic() - started
    assert status == 200 and elapsed < 2.5
    assert body["messages"] == fixture_t() and body["compacted"] is False
    assert all(f["action"] == "keep" for f in body["compaction"]["fragments"])
    decisions = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"]
    assert len(decisions) == 2 and all("fan-out: TimeoutError" in n["error"] for n in decisions)


async def test_a_failed_execution_keeps_every_batch(fanout_aws: FanOutAws) -> None:
    class Failing:
        def start_sync_execution(self, **_: Any) -> dict[str, Any]:
            return {"status": "TIMED_OUT", "error": "States.Timeout"}

    broken = StepFunctionsFlowRunner(fanout_aws.state_machine_arn, BUCKET, stepfunctions=Failing(), s3=fanout_aws.s3)
    status, body = await service.compact(CompactRequest(**fixture_t_body()), deadline=Deadline.after_ms(40_000),
                                         router=fanout_aws.router, flow_runner=broken)
    assert status == 200 and body["messages"] == fixture_t()
    assert all(f["action"] == "keep" for f in body["compaction"]["fragments"])


async def test_a_spent_budget_runs_inline_without_calls(fanout_aws: FanOutAws) -> None:
    request = CompactRequest(**fixture_t_body())
    inline = await service.compact(request, deadline=Deadline.after_ms(0), router=fanout_aws.router)
    fanned = await service.compact(request, deadline=Deadline.after_ms(0), router=fanout_aws.router,
                                   flow_runner=runner(fanout_aws))
    assert json.dumps(fanned) == json.dumps(inline) and fanout_aws.dispatch.events == []
    assert fanout_aws.stepfunctions.inputs == []


def test_runner_is_configured_from_the_environment() -> None:
    env = {"COMPACTOR_BATCH_FANOUT": "stepfunctions", "COMPACTOR_STATE_MACHINE_ARN": "arn:sm",
           "COMPACTOR_FANOUT_BUCKET": "b"}
    configured = stepfunctions_runner.runner_from_env(env)
    assert configured is not None and (configured.state_machine_arn, configured.bucket) == ("arn:sm", "b")
    assert stepfunctions_runner.runner_from_env({**env, "COMPACTOR_BATCH_FANOUT": "inline"}) is None
    assert stepfunctions_runner.runner_from_env({"COMPACTOR_BATCH_FANOUT": "stepfunctions"}) is None
    # `compactor invoke` resolves the machine to its logical id: run inline instead of failing every batch
    assert stepfunctions_runner.runner_from_env({**env, "COMPACTOR_STATE_MACHINE_ARN": "BatchFanOutStateMachine"}) \
        is None


async def test_a_late_worker_times_out_in_the_map_and_only_its_batch_is_kept(
        fanout_aws: FanOutAws, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Map's Task timeout (4 s here) is what stops the late batch: it blocks until the test ends, never
    # on a sleep racing the clock. The caller waits 60 s and the request's budget is 30 s, so only the Task
    # timeout can fire; batch 0 has the whole 3.5 s worker budget to answer (it needs well under 1 s idle).
    # How timings follow from the budget is covered by test_every_task_ends_before_the_caller_stops_waiting.
    monkeypatch.setattr(stepfunctions_runner, "fanout_timing", lambda remaining_ms: stepfunctions_runner.FanOutTiming(
        wait_s=60.0, timeout_s=4, worker_budget_ms=3_500, retry=False))
    real_invoke = fanout_aws.dispatch.invoke
    released = threading.Event()

    def late_second_batch(parameters: dict[str, Any], region: str, state_credentials: Any) -> dict[str, Any]:
        if json.loads(parameters["Payload"])["item"]["result_key"].endswith("/1.result.json"):
            released.wait(60)
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": {"errorMessage": "too late"}}
        return real_invoke(parameters, region, state_credentials)

    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", late_second_batch)
    try:
        status, body = await service.compact(CompactRequest(**fixture_t_body()), deadline=Deadline.after_ms(30_000),
                                             router=fanout_aws.router, flow_runner=runner(fanout_aws))
    finally:
        released.set()
    assert status == 200
    actions = {f["id"]: f["action"] for f in body["compaction"]["fragments"]}
    assert actions["fragment_10"] == actions["fragment_11"] == "keep"
    assert actions["fragment_2"] == "summarize"  # batch 0 answered in time
    decisions = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"]
    errors = sorted(n.get("error", "") for n in decisions)
    assert errors[0] == "" and "worker failed: States.Timeout" in errors[1]  # one per batch, in canonical order


async def test_every_workers_lines_name_the_execution(fanout_aws: FanOutAws, worker_module: ModuleType) -> None:
    """A worker's log lines named no execution: an operator could not tell which execution's lines they were.
    The state machine passes ``$$.Execution.Id``, and every line of the invocation carries it (the handler is
    called again, alone, since the Map's iterations share one logger in one process here, never in Lambda)."""
    await service.compact(CompactRequest(**fixture_t_body()), deadline=Deadline.after_ms(40_000),
                          router=fanout_aws.router, flow_runner=runner(fanout_aws))
    (execution,) = fanout_aws.stepfunctions.client.list_executions(
        stateMachineArn=fanout_aws.state_machine_arn)["executions"]
    events = fanout_aws.dispatch.events
    assert len(events) == 2 and all(event["execution_id"] == execution["executionArn"] for event in events)
    with lines_written(worker_module.logger) as lines:
        await asyncio.to_thread(worker_module.handler,
                                {**events[0], "deadline_epoch_ms": int(time.time() * 1000) + 30_000},
                                LocalLambdaContext("FlowWorkerFunction", timeout_s=60))
        worker_module.logger.info("a later invocation's line")
    assert [line["message"] for line in lines] == ["flow ran", "a later invocation's line"]
    assert lines[0]["execution_id"] == execution["executionArn"] and "execution_id" not in lines[1]


async def test_a_fan_out_makes_the_tally_of_a_crashed_calls_cost_unknown(fanout_aws: FanOutAws) -> None:
    """The workers' model calls are in no tally of this process: a call that crashed after its batches fanned out
    has an unknown cost (docs/billing.md, "A failed call's fields"), where the inline run's is known."""
    from compactor.call_record import counting_calls

    request = CompactRequest(**fixture_t_body())
    with counting_calls() as inline:
        await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router)
    with counting_calls() as fanned:
        await service.compact(request, deadline=Deadline.after_ms(40_000), router=fanout_aws.router,
                              flow_runner=runner(fanout_aws))
    assert fanout_aws.stepfunctions.inputs  # it fanned out
    assert inline.model_calls and inline.cost is not None
    assert fanned.elsewhere and fanned.cost is None
