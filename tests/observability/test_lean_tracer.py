"""The X-Ray SDK is imported only where tracing is on (docs/performance.md): importing it builds two
botocore X-Ray clients for its sampler, a cold-start cost the local server, the CLI and the tests skip.
Each case runs in a fresh interpreter, since Powertools keeps the tracer's configuration per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
sys.path[:0] = [{functions!r}]
import {module} as handler_module
from compactor_aws.routes.common import tracer as api_tracer
tracer = getattr(handler_module, "tracer", api_tracer)
with tracer.provider.in_subsegment("## probe") as subsegment:
    subsegment.put_annotation("probe", True)
patcher = sys.modules.get("aws_xray_sdk.core.patcher")
print(json.dumps({{"xray": "aws_xray_sdk.core" in sys.modules, "disabled": bool(tracer.disabled),
                  "provider": type(tracer.provider).__module__,
                  "patched": sorted(patcher._PATCHED_MODULES) if patcher else [],
                  "loaded": sorted(name for name in ("requests", "sqlite3") if name in sys.modules)}}))
"""


def probe(module: str, **env: str) -> dict[str, object]:
    environ = {key: value for key, value in os.environ.items()
               if key not in ("LAMBDA_TASK_ROOT", "POWERTOOLS_TRACE_DISABLED", "AWS_SAM_LOCAL")}
    done = subprocess.run([sys.executable, "-c", _PROBE.format(functions=str(REPO / "functions" / module),
                                                                module=module)],
                          capture_output=True, text=True, env={**environ, **env}, cwd=REPO, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["compact", "s3_compact"])
def test_outside_lambda_the_handler_never_imports_the_xray_sdk(module: str) -> None:
    seen = probe(module)

    assert seen == {"xray": False, "disabled": True, "provider": "compactor_aws.observability", "patched": [],
                    "loaded": []}


def test_trace_disabled_in_lambda_never_imports_the_xray_sdk() -> None:
    assert probe("compact", LAMBDA_TASK_ROOT="/var/task", POWERTOOLS_TRACE_DISABLED="true")["xray"] is False


def test_in_lambda_the_tracer_is_powertools_on_the_xray_recorder() -> None:
    seen = probe("compact", LAMBDA_TASK_ROOT="/var/task", AWS_XRAY_CONTEXT_MISSING="IGNORE_ERROR")

    assert seen["xray"] is True and seen["disabled"] is False
    assert str(seen["provider"]).startswith("aws_xray_sdk")
    # Only what the functions call out with is patched: no other library the SDK knows is imported for it.
    assert seen["patched"] == ["botocore", "httpx"] and seen["loaded"] == []
