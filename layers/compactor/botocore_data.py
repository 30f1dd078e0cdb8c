"""Trim botocore's data to the AWS services the layer calls (run by the Makefile at build time, never
shipped; docs/performance.md#botocore-data).

Usage: ``python botocore_data.py DATA_DIR SERVICE... [--operations SERVICE=OPERATION,...]...`` (DATA_DIR
is ``botocore/data``).

Removes every service directory but the named ones, and from each partition of ``endpoints.json`` every
service but theirs (found under the endpoint prefix their latest model declares, as botocore looks
them up). The kept services' models lose the text of their documentation (botocore reads it only to
write docstrings); models and endpoint rule sets are stored as compact, uncompressed JSON (botocore
reads them before the first request of each client); everything else of them is kept as it is, so a
kept service resolves and behaves as with the full data. With ``--operations``, a service's models keep
only the operations named and the shapes they use (botocore parses a client's whole model and makes a
method of each operation: S3 has 116, the layer calls a few). A name botocore does not know is an error.
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


def shape_names(value: Any) -> set[str]:
    """The shapes ``value`` (an operation or a shape of a model) names, at any depth."""
    if isinstance(value, dict):
        named = {value["shape"]} if isinstance(value.get("shape"), str) else set()
        return named.union(*(shape_names(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(shape_names(item) for item in value))
    return set()


def with_operations(model: dict[str, Any], operations: set[str]) -> dict[str, Any]:
    """``model`` with only ``operations`` and the shapes they reach; an operation it lacks is an error."""
    unknown = sorted(operations - set(model["operations"]))
    if unknown:
        raise SystemExit(f"{model['metadata']['endpointPrefix']} has no operation {', '.join(unknown)}")
    kept = {name: spec for name, spec in model["operations"].items() if name in operations}
    reached: set[str] = set()
    pending = shape_names(kept)
    while pending:
        name = pending.pop()
        if name not in reached:
            reached.add(name)
            pending |= shape_names(model["shapes"][name])
    return {**model, "operations": kept,
            "shapes": {name: spec for name, spec in model["shapes"].items() if name in reached}}


def slim_models(service_dir: Path, operations: set[str] | None = None) -> str:
    """Rewrite each ``service-2`` model of the service with its documentation emptied (and only
    ``operations``, when given) and each endpoint rule set as it is, both as compact plain JSON (a
    gzipped S3 rule set costs 1 ms to inflate and its indentation another to parse); the
    ``endpointPrefix`` of its latest API version."""
    prefix = None
    for version in sorted(p for p in service_dir.iterdir() if p.is_dir()):  # the latest last, as botocore picks
        rules = read_data(version, "endpoint-rule-set-1")
        if rules is not None:
            write_compact(version, "endpoint-rule-set-1", rules)
        model = read_data(version, "service-2")
        if model is None:
            continue
        if operations is not None:
            model = with_operations(model, operations)
        write_compact(version, "service-2", undocumented(model))
        prefix = str(model["metadata"]["endpointPrefix"])
    if prefix is None:
        raise SystemExit(f"botocore has no service model for {service_dir.name}")
    return prefix


def trim(data: Path, services: set[str], operations: dict[str, set[str]] | None = None) -> None:
    operations = operations or {}
    unknown = sorted(name for name in services | set(operations) if not (data / name).is_dir())
    if unknown:
        raise SystemExit(f"botocore has no data for {', '.join(unknown)}")
    if set(operations) - services:
        raise SystemExit(f"operations of a service not kept: {', '.join(sorted(set(operations) - services))}")
    for path in data.iterdir():
        if path.is_dir() and path.name not in services:
            shutil.rmtree(path)
    prefixes = {slim_models(data / name, operations.get(name)) for name in services}
    endpoints_file = data / "endpoints.json"
    endpoints = json.loads(endpoints_file.read_text(encoding="utf-8"))
    for partition in endpoints["partitions"]:
        partition["services"] = {name: spec for name, spec in partition["services"].items() if name in prefixes}
    endpoints_file.write_text(json.dumps(endpoints, separators=(",", ":")), encoding="utf-8")


def parse_operations(args: list[str]) -> dict[str, set[str]]:
    """``SERVICE=OPERATION,...`` arguments as a mapping."""
    parsed: dict[str, set[str]] = {}
    for arg in args:
        service, sep, names = arg.partition("=")
        if not sep or not names:
            raise SystemExit(f"--operations takes SERVICE=OPERATION,..., not {arg!r}")
        parsed.setdefault(service, set()).update(names.split(","))
    return parsed


if __name__ == "__main__":
    args = sys.argv[1:]
    split = args.index("--operations") if "--operations" in args else len(args)
    if split < 2:
        raise SystemExit(__doc__)
    trim(Path(args[0]), set(args[1:split]), parse_operations(args[split + 1:]))
