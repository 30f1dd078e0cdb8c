"""The handlers end their init with ``compactor.container.freeze_init_objects``
(docs/performance.md#the-collector-after-init): what init loaded leaves the cyclic collector's
generations, so the full collection a first request triggers no longer scans every imported package.
Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import gc, json, sys
sys.path[:0] = [{functions!r}]
import {module}
print(json.dumps({{"frozen": gc.get_freeze_count(), "young": len(gc.get_objects())}}))
"""


@pytest.mark.parametrize("module", ["compact", "s3_compact", "flow_worker", "window_jobs"])
def test_the_handler_freezes_what_its_init_loaded(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(functions=str(REPO / "functions" / module),
                                                                module=module)],
                          capture_output=True, text=True, cwd=REPO, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen["frozen"] > 10_000 and seen["young"] < seen["frozen"] / 10


# Every import of the handler's init, with whether the collector was on when it started.
_IMPORTS_PROBE = """
import gc, json, sys
sys.path[:0] = [{functions!r}]
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        seen.append([name, gc.isenabled()])
        return None
sys.meta_path.insert(0, Watch())
import {module}
print(json.dumps({{"seen": seen, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}}))
"""
OWN = {"compactor", "compactor_aws"}
# What the worker's third-party packages load when imported alone, in a fresh interpreter.
_THIRD_PARTY_PROBE = """
import json, sys
before = set(sys.modules)
from aws_lambda_powertools import Logger
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_worker_imports_only_its_own_modules_with_the_collector_paused() -> None:
    """``collector_paused`` keeps the collector off around the worker's own imports only: a module its
    third-party packages also load, imported inside it, would be imported cheaper than the baseline imports
    it (docs/performance.md#the-workers-cold-start-eighth-round-issue-11). And the worker's init imports no
    boto3 and no botocore client machinery: a batch carried in the execution makes no AWS call
    (docs/performance.md#what-a-deployed-function-reads-thirteenth-round-issue-11)."""
    probe = _IMPORTS_PROBE.format(functions=str(REPO / "functions" / "flow_worker"), module="flow_worker")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    paused = [name for name, enabled in seen["seen"] if not enabled]
    third_party = set(json.loads(subprocess.run([sys.executable, "-c", _THIRD_PARTY_PROBE], capture_output=True,
                                                text=True, cwd=REPO, check=True).stdout.strip().splitlines()[-1]))

    assert seen["enabled"] and seen["frozen"] > 10_000
    assert {"compactor.flow", "compactor.router", "asyncio"} <= set(paused)
    assert [name for name in paused if name.split(".")[0] not in OWN and name in third_party] == []
    assert [name for name, _ in seen["seen"] if name.split(".")[0] == "boto3" or name.startswith("botocore.")] == []
    assert [name for name in paused if name.split(".")[0] not in OWN
            and name.split(".")[0] not in sys.stdlib_module_names] == []  # third-party ones load before the pause


# What the windowed jobs' worker's third-party packages load when imported alone, in a fresh interpreter.
_WINDOW_THIRD_PARTY_PROBE = """
import json, sys
before = set(sys.modules)
import boto3
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_window_worker_imports_only_its_own_modules_with_the_collector_paused() -> None:
    """The windowed jobs' worker pauses the collector around its own imports as the fan-out worker does
    (docs/performance.md#the-three-rows-above-the-goal-twenty-second-round-issue-11): boto3 and Powertools load before
    the pause, and nothing they load is imported inside it."""
    probe = _IMPORTS_PROBE.format(functions=str(REPO / "functions" / "window_jobs"), module="window_jobs")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    paused = [name for name, enabled in seen["seen"] if not enabled]
    third_party = set(json.loads(subprocess.run([sys.executable, "-c", _WINDOW_THIRD_PARTY_PROBE],
                                                capture_output=True, text=True, cwd=REPO,
                                                check=True).stdout.strip().splitlines()[-1]))

    assert seen["enabled"] and seen["frozen"] > 10_000
    assert {"compactor.large_jobs", "compactor_aws.s3_store", "asyncio"} <= set(paused)
    assert [name for name in paused if name.split(".")[0] not in OWN and name in third_party] == []
    assert [name for name in paused if name.split(".")[0] not in OWN
            and name.split(".")[0] not in sys.stdlib_module_names] == []  # third-party ones load before the pause


def test_collector_paused_freezes_what_its_block_loaded_and_restores_the_collector() -> None:
    probe = """
import gc, json
from compactor.container import collector_paused
out = {}
with collector_paused():
    out["inside"] = gc.isenabled()
    kept = [[i] for i in range(50_000)]
out["after"] = gc.isenabled()
out["frozen"] = gc.get_freeze_count()
gc.disable()
with collector_paused():
    pass
out["stays_off"] = not gc.isenabled()
gc.enable()
before = gc.get_freeze_count()
try:
    with collector_paused():
        raise KeyError("import failed")
except KeyError:
    pass
out["failed_enabled"] = gc.isenabled()
out["failed_frozen_more"] = gc.get_freeze_count() - before
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out == {"inside": False, "after": True, "frozen": out["frozen"], "stays_off": True,
                   "failed_enabled": True, "failed_frozen_more": 0}
    assert out["frozen"] > 50_000
