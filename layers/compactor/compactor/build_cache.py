"""Writes the built layer's stored code (docs/performance.md#the-workers-cold-start-seventh-round-issue-11):
``compactor/records.cache``, the code of every record's ``__init__`` source (``compactor.records``),
``compactor/patterns.cache``, the program of every pattern of ``compactor.patterns``, and
``compactor/values.cache``, the tables of ``compactor.stored_values``; a cold start runs or reads them instead
of compiling or computing.

Run by the layer's recipe (``layers/compactor/Makefile``) from the layer's ``python/`` directory, after the
packages' bytecode: ``python -B -m compactor.build_cache compactor``. It imports every module of the layer's
packages, compiles each ``__init__`` source a record asks for, as ``compactor.records`` would, and stores the
code by module and source; then the program of every pattern and the result of every table the modules
asked for. A module that cannot be imported here (a dependency built for another platform) is reported and
left out: its records and patterns compile and its tables compute at init, as without the files.
"""

from __future__ import annotations

import importlib
import marshal
import os
import pkgutil
import sys
from types import CodeType

from compactor import patterns, records, stored_values

PACKAGES = ("compactor", "compactor_aws")


def collect(packages: tuple[str, ...] = PACKAGES) -> dict[str, dict[str, CodeType]]:
    """Import every module of ``packages``; the code of each record's ``__init__`` source, by module (and the
    patterns they ask for in ``compactor.patterns.ASKED``)."""
    codes: dict[str, dict[str, CodeType]] = {}
    stored = records._code

    def capture(source: str, module: str) -> CodeType:
        code = codes.setdefault(module, {}).get(source)
        if code is None:
            code = codes[module][source] = records.compile_source(source)
        return code

    records._code = capture
    try:
        for package in packages:
            for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}.",
                                              onerror=lambda name: _skipped(name, sys.exc_info()[1])):
                try:
                    importlib.import_module(info.name)
                except Exception as error:  # noqa: BLE001  # the module's records compile at init instead
                    _skipped(info.name, error)
    finally:
        records._code = stored
    return codes


def _skipped(module: str, error: BaseException | None) -> None:
    print(f"build_cache: {module} not imported ({error!r}): its records, patterns and tables are made at init",
          file=sys.stderr)


def dump(codes: dict[str, dict[str, CodeType]]) -> bytes:
    """``records.cache``'s content (``compactor.records.CACHE_FILE`` describes it)."""
    return stored_values.file_bytes({module: marshal.dumps(dict(sorted(sources.items())))
                                         for module, sources in sorted(codes.items())})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:  # no default: files written into a source tree would be read by its tests and serve
        print("usage: python -m compactor.build_cache DIRECTORY (the built layer's compactor/ package)",
              file=sys.stderr)
        return 2
    directory = args[0]
    codes = collect()
    with open(os.path.join(directory, os.path.basename(records.CACHE_FILE)), "wb") as file:
        file.write(dump(codes))
    with open(os.path.join(directory, os.path.basename(patterns.CACHE_FILE)), "wb") as file:
        file.write(patterns.dump(patterns.ASKED))
    with open(os.path.join(directory, os.path.basename(stored_values.CACHE_FILE)), "wb") as file:
        file.write(stored_values.dump(stored_values.ASKED))
    print(f"build_cache: {sum(map(len, codes.values()))} records' __init__ of {len(codes)} modules, "
          f"{len(set(patterns.ASKED))} patterns, {len(stored_values.ASKED)} tables -> {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
