"""The fan-out state machine executed by moto's ASL interpreter, every Lambda task dispatched in-process.

* moto runs the real ``infra/statemachine/batch_fanout.asl.json`` (``DefinitionSubstitutions``
  applied as CloudFormation would) when opted in with ``execute_state_machine``.
* moto never runs Lambda code: its Step Functions interpreter's Lambda invokes go to
  ``flow_worker.handler`` (the real handler, imported as Lambda imports it), answered like Lambda
  (``FunctionError`` + error payload when it raises), through ``tests/fakes/lambda_dispatch.py``.
* moto has no ``StartSyncExecution``: :class:`MotoSyncStepFunctions` gives the runner that method by
  ``start_execution`` + polling ``describe_execution`` until the execution stops, and answers in the
  ``StartSyncExecution`` shape. Production uses the real ``start_sync_execution``.
* One router with a frozen clock (every ``latency_ms`` is 0) serves the CompactFunction side and the
  workers, so inline and fan-out answers can be compared byte for byte.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws

from compactor import container
from compactor_aws import s3_store
from compactor_cli.lambda_runtime import load_handler
from compactor.router import Router
from fakes.lambda_dispatch import LambdaDispatch
from fakes.routers import frozen_router

REPO = Path(__file__).resolve().parents[2]
ASL_PATH = REPO / "infra" / "statemachine" / "batch_fanout.asl.json"
REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "compactor-transcripts-test"
WORKER_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:compactor-FlowWorkerFunction"
MOTO_CONFIG = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}


def asl_definition(worker_arn: str = WORKER_ARN) -> str:
    """The definition with its ``DefinitionSubstitutions`` applied."""
    text = ASL_PATH.read_text(encoding="utf-8")
    return text.replace("${FlowWorkerFunctionArn}", worker_arn).replace("${Partition}", "aws")


@pytest.fixture(scope="session")
def worker_module() -> ModuleType:
    """``functions/flow_worker/flow_worker.py`` imported as Lambda imports it (module ``flow_worker``)."""
    load_handler(REPO / "functions" / "flow_worker", "flow_worker.handler")
    return sys.modules["flow_worker"]


class MotoSyncStepFunctions:
    """A Step Functions client whose ``start_sync_execution`` runs on moto's ``start_execution``."""

    def __init__(self, client: Any, poll_s: float = 0.01, limit_s: float = 60.0) -> None:
        self.client = client
        self.poll_s = poll_s
        self.limit_s = limit_s
        self.inputs: list[dict[str, Any]] = []

    def start_sync_execution(self, *, stateMachineArn: str, input: str, name: str | None = None,
                             **_: Any) -> dict[str, Any]:
        self.inputs.append(json.loads(input))
        arn = self.client.start_execution(stateMachineArn=stateMachineArn, input=input,
                                          **({"name": name} if name else {}))["executionArn"]
        stop = time.monotonic() + self.limit_s
        while True:
            described = self.client.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING" or time.monotonic() > stop:
                break
            time.sleep(self.poll_s)
        answer = {"executionArn": arn, "status": described["status"]}
        for key in ("output", "error", "cause"):
            if key in described:
                answer[key] = described[key]
        return answer


@dataclass
class FanOutAws:
    """The mocked account: bucket, state machine, sync client, and the worker dispatch."""

    s3: Any
    stepfunctions: MotoSyncStepFunctions
    state_machine_arn: str
    dispatch: LambdaDispatch
    router: Router


@pytest.fixture
def fanout_aws(monkeypatch: pytest.MonkeyPatch, worker_module: ModuleType) -> Iterator[FanOutAws]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    with mock_aws(config=MOTO_CONFIG):
        import boto3

        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.create_state_machine(
            name="compactor-BatchFanOut", definition=asl_definition(), type="EXPRESS",
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/compactor-BatchFanOutRole")["stateMachineArn"]
        dispatch = LambdaDispatch(worker_module, WORKER_ARN, "FlowWorkerFunction", timeout_s=60).install(monkeypatch)
        s3_store.reset_client()  # a client created inside the mock
        router = frozen_router()
        monkeypatch.setattr(container.ROUTER, "value", router)
        yield FanOutAws(s3=s3, stepfunctions=MotoSyncStepFunctions(sfn), state_machine_arn=arn,
                        dispatch=dispatch, router=router)


@pytest.fixture(autouse=True)
def no_collector_pause() -> Iterator[None]:
    """These tests hold moto executions to wall-clock budgets of a few hundred milliseconds; a full
    garbage collection in the middle (up to a second on a loaded machine after a long session) is not what
    they measure. Collect first, then keep the collector paused for the test."""
    import gc

    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
