"""Trim botocore's data to the AWS services the layer calls (run by the Makefile at build time, never
shipped; docs/performance.md#botocore-data).

Usage: ``python botocore_data.py DATA_DIR SERVICE...`` (DATA_DIR is ``botocore/data``).

Removes every service directory but the named ones, and from each partition of ``endpoints.json`` every
service but theirs (found under the endpoint prefix their latest model declares, as botocore looks
them up). What is kept is kept whole, so a kept service resolves and behaves as with the full data.
A name botocore does not know is an error.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path


def endpoint_prefix(service_dir: Path) -> str:
    """The ``endpointPrefix`` of the service's latest API version (botocore's choice: the greatest)."""
    latest = max(p for p in service_dir.iterdir() if p.is_dir())
    for name, read in (("service-2.json.gz", gzip.open), ("service-2.json", open)):
        if (latest / name).is_file():
            with read(latest / name, "rt", encoding="utf-8") as model:
                return str(json.load(model)["metadata"]["endpointPrefix"])
    raise SystemExit(f"botocore has no service model for {service_dir.name}")


def trim(data: Path, services: set[str]) -> None:
    unknown = sorted(name for name in services if not (data / name).is_dir())
    if unknown:
        raise SystemExit(f"botocore has no data for {', '.join(unknown)}")
    prefixes = {endpoint_prefix(data / name) for name in services}
    for path in data.iterdir():
        if path.is_dir() and path.name not in services:
            shutil.rmtree(path)
    endpoints_file = data / "endpoints.json"
    endpoints = json.loads(endpoints_file.read_text(encoding="utf-8"))
    for partition in endpoints["partitions"]:
        partition["services"] = {name: spec for name, spec in partition["services"].items() if name in prefixes}
    endpoints_file.write_text(json.dumps(endpoints, separators=(",", ":")), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    trim(Path(sys.argv[1]), set(sys.argv[2:]))
