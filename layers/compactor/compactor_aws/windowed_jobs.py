"""Starting windowed jobs (docs/scale.md): an S3 object too large for one invocation becomes one
execution of ``WindowedJobStateMachine``, named after the object version (``compactor.large_jobs.job_id``):
Step Functions answers a repeated StartExecution (a redelivered event) with the execution already there."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Final

from compactor.object_jobs import Launcher, Outcome, Source

STATE_MACHINE_ENV: Final = "COMPACTOR_WINDOWED_STATE_MACHINE_ARN"
CONCURRENCY_ENV: Final = "COMPACTOR_WINDOW_CONCURRENCY"
INLINE_MAX_ENV: Final = "COMPACTOR_S3_INLINE_MAX_BYTES"
DEFAULT_CONCURRENCY: Final = 40
DEFAULT_INLINE_MAX_BYTES: Final = 8 * 1024 * 1024


def launcher(env: Mapping[str, str] | None = None, client: Any = None, *, caller: str | None = None) -> Launcher | None:
    """Starts the state machine when ``COMPACTOR_WINDOWED_STATE_MACHINE_ARN`` is set, else None
    (large objects then get the 413 record). The job's windows run as ``caller``, the one it is billed to
    (``compactor_aws.billing.billed_caller``; docs/reliability.md#isolation-one-callers-failures-are-that-callers)."""
    source_env = os.environ if env is None else env
    arn = source_env.get(STATE_MACHINE_ENV)
    if not arn:
        return None
    concurrency = int(source_env.get(CONCURRENCY_ENV) or DEFAULT_CONCURRENCY)

    def launch(source: Source) -> Outcome:
        from compactor import large_jobs  # only a large object needs it (docs/performance.md#where-the-time-goes)
        from compactor_aws import aws_session

        sfn = client or aws_session.client("stepfunctions")
        name = large_jobs.job_id(source)
        try:
            started = large_jobs.job_input(source, max_concurrency=concurrency, caller=caller,
                                           inline_max_bytes=inline_max_bytes(source_env))
            sfn.start_execution(stateMachineArn=arn, name=name, input=json.dumps(started))
        except sfn.exceptions.ExecutionAlreadyExists:
            return Outcome("skipped", source, reason="windowed job already started")
        return Outcome("started", source, reason=f"windowed job {name}")
    return launch


OWNING = frozenset({"RUNNING", "PENDING_REDRIVE", "SUCCEEDED"})
"""States of a windowed job's execution in which it writes, or has written, its object version's outcome: its result or
its own failure (RecordFailure). One that failed, timed out or was aborted may have written none."""


def owns(source: Source, env: Mapping[str, str] | None = None, client: Any = None, *, size: int | None = None) -> bool:
    """Whether the windowed job of this object version (its execution, named after it) is running or ended done,
    so that its outcome is the job's (``compactor.object_jobs.record_gave_up``): the S3 function's attempts may all
    crash after one of them started it. False without a state machine (``COMPACTOR_WINDOWED_STATE_MACHINE_ARN``), and
    without asking Step Functions for an object of ``size`` bytes (its event's) that is not over
    ``COMPACTOR_S3_INLINE_MAX_BYTES``: the S3 function reads such an object inline and starts no job for it (one
    ``DescribeExecution`` for every object Lambda gave up on, most of them small)."""
    env = os.environ if env is None else env
    arn = env.get(STATE_MACHINE_ENV)
    if not arn or (size is not None and size <= inline_max_bytes(env)):
        return False
    from compactor import large_jobs
    from compactor_aws import aws_session

    sfn = client or aws_session.client("stepfunctions")
    prefix, _, name = arn.rpartition(":stateMachine:")
    try:
        status = sfn.describe_execution(executionArn=f"{prefix}:execution:{name}:{large_jobs.job_id(source)}")["status"]
    except sfn.exceptions.ExecutionDoesNotExist:
        return False
    return status in OWNING


ENDED: Final = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})
"""Ends of a windowed job's execution that may leave its object version with no outcome: RecordFailure catches a step's
failure, not an operator's StopExecution, the execution's TimeoutSeconds, a runtime error (``States.Runtime``, which
no Catch takes) or RecordFailure's own failure after its retries."""


def ended_step(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``fail`` step RecordFailure runs (``compactor.large_jobs.fail``) for EventBridge's "Step Functions Execution
    Status Change" event of a windowed job's execution that ended failed, timed out or aborted, so that its object
    version's outcome is written whichever way it ended (docs/scale.md#one-outcome-per-object); the error it names is
    the status, or a failed execution's error. None for another status, or an execution whose input holds no job (a
    Distributed Map's child). The job is the execution's input, which the event holds (it is a few hundred bytes:
    EventBridge leaves out inputs past 248 KB)."""
    detail = event.get("detail") or {}
    status = detail.get("status")
    if status not in ENDED:
        return None
    if not (detail.get("inputDetails") or {}).get("included", True):
        raise ValueError(f"the event of execution {detail.get('executionArn')} holds no input")
    started = json.loads(detail.get("input") or "null")
    job = started.get("job") if isinstance(started, dict) else None
    if not isinstance(job, dict):
        return None
    error = detail.get("error") if status == "FAILED" else None
    return {"step": "fail", "job": job, "error": {"Error": error if isinstance(error, str) and error else status}}


def inline_max_bytes(env: Mapping[str, str] | None = None) -> int:
    source_env = os.environ if env is None else env
    return int(source_env.get(INLINE_MAX_ENV) or DEFAULT_INLINE_MAX_BYTES)
