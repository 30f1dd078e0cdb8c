"""Which Lambda handlers plug the AWS provider adapters into the core (``compactor_aws/__init__``: the
``bedrock`` transport and Secrets Manager keys) and which stay without them: the authorizer imports
``compactor.caller`` alone (docs/deploy.md#the-authorizer). Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
sys.path[:0] = [{functions!r}]
import {module}
loaded = sorted(name for name in sys.modules if name == "asyncio" or name.split(".")[0] in ("compactor", "compactor_aws"))
adapters = None
if "compactor.providers.registry" in sys.modules:
    from compactor.providers import keys, registry
    adapters = {{"bedrock": "bedrock" in registry._factories, "secrets": keys._secret_resolver is not None}}
print(json.dumps({{"loaded": loaded, "adapters": adapters}}))
"""


def imported(module: str, functions: Path | None = None) -> dict[str, object]:
    probe = _PROBE.format(functions=str(functions or REPO), module=module)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_authorizer_loads_neither_asyncio_nor_the_providers_nor_the_adapters() -> None:
    seen = imported("authorizer", REPO / "functions" / "authorizer")

    assert seen["adapters"] is None
    assert seen["loaded"] == ["compactor", "compactor.caller"]


@pytest.mark.parametrize("module", ["compact", "s3_compact", "flow_worker", "window_jobs"])
def test_every_other_handler_installs_the_adapters(module: str) -> None:
    assert imported(module, REPO / "functions" / module)["adapters"] == {"bedrock": True, "secrets": True}


# The CLI's main() imports compactor_aws itself; serve and the adapters' caller name install them on import.
@pytest.mark.parametrize("module", ["compactor_cli.serve", "compactor_aws.caller"])
def test_compactor_serve_and_the_adapters_caller_module_install_them(module: str) -> None:
    assert imported(module)["adapters"] == {"bedrock": True, "secrets": True}


def test_the_s3_functions_destination_loads_billing_only_when_it_bills() -> None:
    """``S3CompactGaveUpFunction`` bills a job whose result was written (docs/billing.md) and imports billing for it
    then only: its usual invocation, a job that crashed, starts as light as before."""
    loaded = imported("s3_gave_up", REPO / "functions" / "s3_gave_up")["loaded"]

    assert "compactor.object_jobs" in loaded
    assert {"compactor.billing", "compactor_aws.billing", "compactor_aws.idempotency",
            "compactor_aws.ledger"}.isdisjoint(loaded)
