"""The layer's regular expressions, built from stored programs in the built layer
(docs/performance.md#the-workers-cold-start-seventh-round-issue-11).

``re.compile`` parses a pattern and compiles it to the regex engine's program in Python (``re._parser``,
``re._compiler``), 0.05–0.8 ms a pattern: the offline offers' patterns cost a worker's first request about
4 ms. The layer's recipe stores the program of every pattern made by :func:`pattern` or :func:`lazy`
(``patterns.cache``, written by ``python -m compactor.build_cache``), each checked at the build to give the
pattern ``re.compile`` gives (equal: the same source, flags and program). A pattern found there is built from
its program by the engine's own constructor, as ``re.compile`` ends; any other (a pattern changed after the
build, a file of another Python minor version or regex engine, no file at all as in the source tree and the tests) is
``re.compile``'s.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

import _sre

from compactor.stored_values import file_bytes, read_file

CACHE_FILE = os.path.join(os.path.dirname(__file__), "patterns.cache")
"""The stored programs: the bytecode magic number of the Python that wrote it, then a marshalled
``((_sre.MAGIC, sys.implementation.cache_tag), {(source, flags): (flags, code, groups, groupindex, indexgroup)})``, the values
being ``_sre.compile``'s arguments."""
ASKED: list[tuple[str, int]] = []
"""Every ``(source, flags)`` asked for so far, lazy ones included: what the layer's recipe stores."""
_stored: dict[tuple[str, int], tuple[Any, ...]] | None = None


def pattern(source: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(source, flags)``: built from the stored program when the layer holds it."""
    global _stored
    key = (source, int(flags))
    ASKED.append(key)
    stored = _stored
    if stored is None:
        stored = _stored = load(CACHE_FILE)
    program = stored.get(key)
    if program is not None:
        try:
            return _sre.compile(source, *program)
        except (TypeError, ValueError, RuntimeError):  # a damaged program: compiled instead
            pass
    return re.compile(source, flags)


def lazy(source: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """A cached accessor of :func:`pattern`, built on first use (asked for now, so the build stores it)."""
    ASKED.append((source, int(flags)))
    return cache(lambda: pattern(source, flags))


def program(source: str, flags: int = 0) -> tuple[Any, ...]:
    """What ``re.compile(source, flags)`` hands to the engine's constructor (``re._compiler.compile``)."""
    from re import _compiler, _parser

    flags = int(flags)
    parsed = _parser.parse(source, flags)
    code = [int(op) for op in _compiler._code(parsed, flags)]  # its opcodes are an int subclass
    indexgroup: list[str | None] = [None] * parsed.state.groups
    for name, index in parsed.state.groupdict.items():
        indexgroup[index] = name
    return (int(flags | parsed.state.flags), code, parsed.state.groups - 1, dict(parsed.state.groupdict),
            tuple(indexgroup))


# The regex engine whose programs a file holds, and the Python (implementation and minor version) that wrote it,
# as the file's bytecode magic number says it too. Not the patch release: the layer is built on the operator's
# machine with its Python 3.12 and runs on Lambda's, another patch release that AWS also updates in place, so a
# file keyed on ``sys.version`` was never read on Lambda. A program is trusted across patch releases as the
# layer's own bytecode is (compiled by the build's Python, run by Lambda's): both are checked at the build
# (:func:`dump`) and read by an engine of the same ``_sre.MAGIC`` (docs/performance.md).
_ENGINE = (_sre.MAGIC, sys.implementation.cache_tag)


def load(path: str) -> dict[tuple[str, int], tuple[Any, ...]]:
    """The stored programs in ``path``; empty when there is none or another Python or engine wrote it."""
    try:
        engine, programs = read_file(path)
    except (ValueError, TypeError):  # none, damaged, or not a pair
        return {}
    return programs if engine == _ENGINE and isinstance(programs, dict) else {}


def dump(keys: list[tuple[str, int]]) -> bytes:
    """The file's content for ``keys``: each program checked to give ``re.compile``'s pattern, else left out."""
    programs = {}
    for source, flags in sorted({(source, int(flags)) for source, flags in keys}):
        try:
            stored = program(source, flags)
            built, compiled = _sre.compile(source, *stored), re.compile(source, flags)
            # == compares the source, flags and program; the groups' names are compared apart
            if built == compiled and (built.groups, built.groupindex) == (compiled.groups, compiled.groupindex):
                programs[source, flags] = stored
        except Exception:  # noqa: BLE001  # another Python's re internals: this pattern compiles at init
            continue
    return file_bytes((_ENGINE, programs))
