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


@pytest.mark.parametrize("module", ["compact", "s3_compact", "flow_worker"])
def test_the_handler_freezes_what_its_init_loaded(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(functions=str(REPO / "functions" / module),
                                                                module=module)],
                          capture_output=True, text=True, cwd=REPO, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen["frozen"] > 10_000 and seen["young"] < seen["frozen"] / 10
