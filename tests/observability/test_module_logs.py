"""The layer's module loggers write the functions' Powertools JSON lines, as Lambda runs them.

Lambda's runtime gives the root logger a handler; Powertools filters out of it every record whose logger
name contains the service name (``compactor``). The ``compactor_aws`` modules (ledger, S3 store, batch
fan-out) log with ``logging.getLogger(__name__)``: their warnings reached only that root handler and were
written nowhere. Each function is imported in a fresh interpreter with such a root handler installed first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO

PROBE = """
import logging, sys
root_handler = logging.StreamHandler(sys.stdout)  # the Lambda runtime's, installed before the handler loads
root_handler.setFormatter(logging.Formatter("ROOT %(name)s %(message)s"))
logging.getLogger().addHandler(root_handler)
import {module} as function
function.logger.set_correlation_id("corr-7f3a")
function.logger.append_keys(key="incoming/a.json")
logging.getLogger("compactor_aws.ledger").warning("ledger index unreadable")
logging.getLogger("compactor_aws.stepfunctions_runner").warning("fan-out component 1 degraded")
logging.getLogger("compactor.billing").warning("usage ledger line skipped")
logging.getLogger("compactor_aws.s3_store").info("an info line")
"""


@pytest.mark.parametrize("module", ["compact", "s3_compact", "window_jobs", "flow_worker"])
def test_layer_module_warnings_are_json_lines_with_the_correlation(module: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "functions" / module), str(REPO / "layers" / "compactor"), os.environ.get("PYTHONPATH", "")]),
        "POWERTOOLS_LOG_LEVEL": "WARNING"}
    env.pop("POWERTOOLS_SERVICE_NAME", None)
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], env=env, capture_output=True,
                          text=True, timeout=120, check=True)

    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert not [line for line in lines if line.startswith("ROOT")], lines  # each written once, as JSON
    records = [json.loads(line) for line in lines]
    assert [record["message"] for record in records] == [
        "ledger index unreadable", "fan-out component 1 degraded", "usage ledger line skipped"]
    assert all(record["correlation_id"] == "corr-7f3a" and record["key"] == "incoming/a.json"
               and record["service"] == "compactor" and record["level"] == "WARNING" for record in records)


OWN_LINE = """
function.logger.warning("the function's own line")
"""


@pytest.mark.parametrize("service", ["payments", "compactor-prod", "compactor.api"])
@pytest.mark.parametrize("module", ["compact", "s3_compact"])
def test_each_line_is_written_once_whatever_the_service_name(module: str, service: str) -> None:
    """A deployment's own service name (``POWERTOOLS_SERVICE_NAME``): the Lambda runtime's root handler filters
    only the service's name, so the routed package loggers' records used to be written twice, once as JSON by
    the Powertools handler and once more by the root handler (and a dotted service's own lines twice as JSON)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "functions" / module), str(REPO / "layers" / "compactor"), os.environ.get("PYTHONPATH", "")]),
        "POWERTOOLS_LOG_LEVEL": "WARNING", "POWERTOOLS_SERVICE_NAME": service}
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module) + OWN_LINE], env=env,
                          capture_output=True, text=True, timeout=120, check=True)

    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert not [line for line in lines if line.startswith("ROOT")], lines
    records = [json.loads(line) for line in lines]
    assert [record["message"] for record in records] == [
        "ledger index unreadable", "fan-out component 1 degraded", "usage ledger line skipped",
        "the function's own line"], lines
    assert all(record["service"] == service and record["correlation_id"] == "corr-7f3a" for record in records)
