"""Trim botocore's data to the AWS services the layer calls (run by the Makefile at build time, never
shipped; docs/performance.md#botocore-data).

Usage: ``python botocore_data.py DATA_DIR SERVICE...`` (DATA_DIR is ``botocore/data``).

Removes every service directory but the named ones, and from each partition of ``endpoints.json`` every
service but theirs (found under the endpoint prefix their latest model declares, as botocore looks
them up). The kept services' models lose the text of their documentation (botocore reads it only to
write docstrings) and are stored uncompressed; everything else of them is kept as it is, so a kept service
resolves and behaves as with the full data. A name botocore does not know is an error.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path
from typing import Any


DOCUMENTATION = frozenset({"documentation", "documentationUrl"})


def undocumented(value: Any) -> Any:
    """``value`` with the documentation of its objects emptied, at any depth (the keys stay: botocore
    requires some of them)."""
    if isinstance(value, dict):
        return {key: "" if key in DOCUMENTATION else undocumented(item) for key, item in value.items()}
    if isinstance(value, list):
        return [undocumented(item) for item in value]
    return value


def slim_models(service_dir: Path) -> str:
    """Rewrite each ``service-2`` model of the service with its documentation emptied, as plain JSON (botocore
    looks for ``.json`` before ``.json.gz``); the ``endpointPrefix`` of its latest API version."""
    prefix = None
    for version in sorted(p for p in service_dir.iterdir() if p.is_dir()):  # the latest last, as botocore picks
        compressed, plain = version / "service-2.json.gz", version / "service-2.json"
        if compressed.is_file():
            with gzip.open(compressed, "rt", encoding="utf-8") as stream:
                model = json.load(stream)
            compressed.unlink()
        elif plain.is_file():
            model = json.loads(plain.read_text(encoding="utf-8"))
        else:
            continue
        plain.write_text(json.dumps(undocumented(model), separators=(",", ":")), encoding="utf-8")
        prefix = str(model["metadata"]["endpointPrefix"])
    if prefix is None:
        raise SystemExit(f"botocore has no service model for {service_dir.name}")
    return prefix


def trim(data: Path, services: set[str]) -> None:
    unknown = sorted(name for name in services if not (data / name).is_dir())
    if unknown:
        raise SystemExit(f"botocore has no data for {', '.join(unknown)}")
    for path in data.iterdir():
        if path.is_dir() and path.name not in services:
            shutil.rmtree(path)
    prefixes = {slim_models(data / name) for name in services}
    endpoints_file = data / "endpoints.json"
    endpoints = json.loads(endpoints_file.read_text(encoding="utf-8"))
    for partition in endpoints["partitions"]:
        partition["services"] = {name: spec for name, spec in partition["services"].items() if name in prefixes}
    endpoints_file.write_text(json.dumps(endpoints, separators=(",", ":")), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    trim(Path(sys.argv[1]), set(sys.argv[2:]))
