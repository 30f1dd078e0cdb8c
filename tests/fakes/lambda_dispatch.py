"""Lambda tasks of a moto-executed state machine, run in-process.

moto's Step Functions interpreter (``execute_state_machine``) never runs Lambda code: it calls
``lambda_eval_utils._invoke_lambda_function``. :meth:`LambdaDispatch.install` patches that to call the
real handler module (imported as Lambda imports it, ``compactor_cli.lambda_runtime.load_handler``) and
to answer as Lambda does: the handler's JSON result, or ``FunctionError: Unhandled`` with the error
payload when it raises. Used by the fan-out (tests/fanout) and windowed-job (tests/scale) tests.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

from compactor_cli.lambda_runtime import LocalLambdaContext


@dataclass
class LambdaDispatch:
    """Routes the interpreter's invokes of ``function_arn`` to ``module.handler``; records every event.

    ``fail`` (event -> bool) makes chosen invocations raise ``RuntimeError("worker crashed")``, as a
    crashing function would."""

    module: ModuleType
    function_arn: str
    function_name: str
    timeout_s: int
    events: list[dict[str, Any]] = field(default_factory=list)
    fail: Callable[[dict[str, Any]], bool] = lambda event: False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, parameters: dict[str, Any], region: str, state_credentials: Any) -> dict[str, Any]:
        assert parameters["FunctionName"] == self.function_arn
        event = json.loads(parameters["Payload"])
        with self.lock:
            self.events.append(event)
        try:
            if self.fail(event):
                raise RuntimeError("worker crashed")
            payload = self.module.handler(event, LocalLambdaContext(self.function_name, timeout_s=self.timeout_s))
        except Exception as exc:  # what Lambda reports for an unhandled error
            return {"StatusCode": 200, "FunctionError": "Unhandled",
                    "Payload": {"errorMessage": str(exc), "errorType": type(exc).__name__,
                                "stackTrace": traceback.format_tb(exc.__traceback__)}}
        return {"StatusCode": 200, "ExecutedVersion": "$LATEST", "Payload": json.loads(json.dumps(payload))}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> LambdaDispatch:
        """Make moto's interpreter invoke through this dispatch (for the test's duration)."""
        from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

        monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", self.invoke)
        return self
