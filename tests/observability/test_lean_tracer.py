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
                  "loaded": sorted(name for name in ("requests", "sqlite3", "httpx") if name in sys.modules)}}))
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
    # Only what the functions call out with is patched: no other library the SDK knows is imported for it,
    # and not httpx under the bundled catalog, whose offers are all built in (no HTTP call to trace).
    assert seen["patched"] == ["botocore"] and seen["loaded"] == []


_HTTP_CATALOG = ('{"offers": [{"id": "x/chat", "provider": "x", "family": "f", "model": "m", "protocol": "chat", '
                 '"transport": "openai", "base_url": "http://192.0.2.1/v1"}]}')


@pytest.mark.parametrize("module", ["compact", "s3_compact"])
def test_in_lambda_httpx_is_not_patched_where_the_catalog_calls_out_over_http(module: str, tmp_path: Path) -> None:
    # The SDK's httpx patch keeps a sampled invocation's subsegments in one stack per thread, which the request's
    # concurrent model calls on one event loop share (the next test): it was patched for a catalog with HTTP offers.
    catalog = tmp_path / "catalog.json"
    catalog.write_text(_HTTP_CATALOG)

    seen = probe(module, LAMBDA_TASK_ROOT="/var/task", AWS_XRAY_CONTEXT_MISSING="IGNORE_ERROR",
                 COMPACTOR_CATALOG=str(catalog))

    assert seen["patched"] == ["botocore"] and seen["loaded"] == []


_CONCURRENT_CALLS = """
import asyncio, json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
sys.path[:0] = [{functions!r}]
import compact  # its tracer patches what the container calls out with, as at a deployed init
import httpx

class Slow(BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(0.05)
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{{server.server_address[1]}}/"

async def calls():
    async with httpx.AsyncClient() as client:
        async def one():
            try:
                return (await client.get(url)).status_code
            except Exception as exc:
                return type(exc).__name__
        return await asyncio.gather(*(one() for _ in range(16)))

print(json.dumps(asyncio.run(calls())))
"""


def test_a_sampled_invocations_concurrent_http_calls_all_succeed(tmp_path: Path) -> None:
    # With tracing on (template.yaml: Tracing: Active) and the invocation sampled, the SDK's httpx patch ended one
    # call's subsegment under another's: 5 of these 16 calls failed with AlreadyEndedException, and a deployed
    # request's model calls, which run so, fell back and kept their batches.
    catalog = tmp_path / "catalog.json"
    catalog.write_text(_HTTP_CATALOG)
    environ = {key: value for key, value in os.environ.items()
               if key not in ("LAMBDA_TASK_ROOT", "POWERTOOLS_TRACE_DISABLED", "AWS_SAM_LOCAL")}
    done = subprocess.run(
        [sys.executable, "-c", _CONCURRENT_CALLS.format(functions=str(REPO / "functions" / "compact"))],
        capture_output=True, text=True, cwd=REPO, check=True,
        env={**environ, "LAMBDA_TASK_ROOT": "/var/task", "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
             "COMPACTOR_CATALOG": str(catalog), "AWS_REGION": "us-east-1",
             "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"})

    assert json.loads(done.stdout.strip().splitlines()[-1]) == [200] * 16


def test_in_lambda_a_catalog_that_fails_to_load_still_imports_the_handler(tmp_path: Path) -> None:
    seen = probe("compact", LAMBDA_TASK_ROOT="/var/task", AWS_XRAY_CONTEXT_MISSING="IGNORE_ERROR",
                 COMPACTOR_CATALOG=str(tmp_path / "missing.json"))

    assert seen["patched"] == ["botocore"]
