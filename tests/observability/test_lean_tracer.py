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
def test_in_lambda_httpx_is_patched_where_the_catalog_calls_out_over_http(module: str, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(_HTTP_CATALOG)

    seen = probe(module, LAMBDA_TASK_ROOT="/var/task", AWS_XRAY_CONTEXT_MISSING="IGNORE_ERROR",
                 COMPACTOR_CATALOG=str(catalog))

    assert seen["patched"] == ["botocore", "httpx"] and seen["loaded"] == ["httpx"]


def test_in_lambda_a_catalog_that_fails_to_load_patches_both_and_the_handler_still_imports(tmp_path: Path) -> None:
    seen = probe("compact", LAMBDA_TASK_ROOT="/var/task", AWS_XRAY_CONTEXT_MISSING="IGNORE_ERROR",
                 COMPACTOR_CATALOG=str(tmp_path / "missing.json"))

    assert seen["patched"] == ["botocore", "httpx"]


def test_the_traced_libraries_follow_each_transport_of_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.catalog import reset_catalog_cache
    from compactor.providers.registry import TRANSPORTS
    from compactor_aws.observability import traced_libraries

    offers = {
        "openai": {"protocol": "chat", "base_url": "http://192.0.2.1/v1"},
        "anthropic": {"protocol": "chat", "base_url": "http://192.0.2.1"},
        "decisions": {"protocol": "decisions", "base_url": "http://192.0.2.1"},
        "chat-decisions": {"protocol": "decisions", "base_url": "http://192.0.2.1/v1"},
        "bedrock": {"protocol": "chat", "region": "us-east-1"},
        "builtin": {"protocol": "chat"},
    }
    assert offers.keys() == TRANSPORTS.keys()  # a new transport is named here too
    try:
        for transport, fields in offers.items():
            catalog = tmp_path / f"{transport}.json"
            catalog.write_text(json.dumps({"offers": [
                {"id": f"x/{transport}", "provider": "x", "family": "f", "model": "m", "transport": transport,
                 **fields}]}))
            monkeypatch.setenv("COMPACTOR_CATALOG", str(catalog))
            reset_catalog_cache()
            expected = ("botocore", "httpx") if transport not in ("bedrock", "builtin") else ("botocore",)
            assert traced_libraries() == expected, transport
    finally:
        monkeypatch.undo()
        reset_catalog_cache()
