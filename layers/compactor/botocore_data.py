"""Trim botocore's data to the AWS services the layer calls (run by the Makefile at build time, never
shipped; docs/performance.md#botocore-data).

Usage: ``python botocore_data.py DATA_DIR SERVICE...`` (DATA_DIR is ``botocore/data``).

Removes every service directory but the named ones, and from each partition of ``endpoints.json`` every
service but theirs (found under the endpoint prefix their latest model declares, as botocore looks
them up). The kept services' models lose the text of their documentation (botocore reads it only to
write docstrings); models and endpoint rule sets are stored as compact, uncompressed JSON (botocore
reads them before the first request of each client); everything else of them is kept as it is, so a
kept service resolves and behaves as with the full data. A name botocore does not know is an error.
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


def read_data(version: Path, name: str) -> Any | None:
    """The JSON document ``name`` of one API version, plain or gzipped (removing the gzipped file)."""
    compressed, plain = version / f"{name}.json.gz", version / f"{name}.json"
    if compressed.is_file():
        with gzip.open(compressed, "rt", encoding="utf-8") as stream:
            data = json.load(stream)
        compressed.unlink()
        return data
    return json.loads(plain.read_text(encoding="utf-8")) if plain.is_file() else None


def write_compact(version: Path, name: str, data: Any) -> None:
    """``data`` as plain JSON without whitespace (botocore looks for ``.json`` before ``.json.gz``)."""
    (version / f"{name}.json").write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")


def slim_models(service_dir: Path) -> str:
    """Rewrite each ``service-2`` model of the service with its documentation emptied and each endpoint
    rule set as it is, both as compact plain JSON (a gzipped S3 rule set costs 1 ms to inflate and its
    indentation another to parse); the ``endpointPrefix`` of its latest API version."""
    prefix = None
    for version in sorted(p for p in service_dir.iterdir() if p.is_dir()):  # the latest last, as botocore picks
        rules = read_data(version, "endpoint-rule-set-1")
        if rules is not None:
            write_compact(version, "endpoint-rule-set-1", rules)
        model = read_data(version, "service-2")
        if model is None:
            continue
        write_compact(version, "service-2", undocumented(model))
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
