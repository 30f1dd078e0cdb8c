"""Tables the layer computes at import, stored by the built layer
(docs/performance.md#the-workers-cold-start-seventh-round-issue-11).

:func:`value` returns ``compute(*args)``. The layer's recipe (``python -m compactor.build_cache``) stores each
result asked for at import in ``values.cache``, under a key made of the name, the arguments and the compiled
code of ``compute`` (its bytecode, names and constants, nested functions included, not its file or lines): a
stored result is used only for the very function and arguments that made it. A changed function, other
arguments, a file of another Python, or no file at all (the source tree, the tests) compute as before.

The key does not cover the globals or helpers ``compute`` reads: a ``compute`` must depend on its arguments
and the standard library only (``identity._weights`` reads ``accumulate``, ``repeat`` and ``float``), or
carry whatever else it depends on in its arguments.
"""

from __future__ import annotations

import marshal
import os
from collections.abc import Callable
from types import CodeType
from typing import Any, TypeVar

T = TypeVar("T")

CACHE_FILE = os.path.join(os.path.dirname(__file__), "values.cache")
"""The stored results: the bytecode magic number of the Python that wrote it, then a marshalled
``{(name, args, code key): result}``."""
ASKED: list[tuple[str, tuple[Any, ...], Callable[..., Any]]] = []
"""Every ``(name, args, compute)`` asked for so far: what the layer's recipe stores."""
_stored: dict[Any, Any] | None = None
_MISSING = object()


def code_key(code: CodeType) -> tuple[Any, ...]:
    """What ``code`` computes, without where it was compiled: its bytecode, names and constants (nested code
    by its own key)."""
    return (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
            tuple(code_key(const) if isinstance(const, CodeType) else (type(const).__name__, const)
                  for const in code.co_consts))


def key(name: str, args: tuple[Any, ...], compute: Callable[..., Any]) -> tuple[Any, ...]:
    return (name, args, code_key(compute.__code__))


def value(name: str, args: tuple[Any, ...], compute: Callable[..., T]) -> T:
    """``compute(*args)``: the stored result when the built layer holds one for this name, arguments and code."""
    global _stored
    ASKED.append((name, args, compute))
    stored = _stored
    if stored is None:
        stored = _stored = load(CACHE_FILE)
    if stored:
        found = stored.get(key(name, args, compute), _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[no-any-return]
    return compute(*args)


def read_file(path: str) -> Any:
    """What a file of :func:`file_bytes` in ``path`` holds; None when there is none, another Python wrote it or
    it is damaged (the reader of every stored file of the built layer)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
        from _frozen_importlib_external import MAGIC_NUMBER  # importlib.util's, without importing it

        if not data.startswith(MAGIC_NUMBER):
            return None
        return marshal.loads(data[len(MAGIC_NUMBER):])
    except (OSError, ValueError, EOFError, TypeError):
        return None


def file_bytes(stored: Any) -> bytes:
    """A stored file's content: the bytecode magic number of this Python, then ``stored`` marshalled."""
    from _frozen_importlib_external import MAGIC_NUMBER

    return MAGIC_NUMBER + marshal.dumps(stored)


def load(path: str) -> dict[Any, Any]:
    """The stored results in ``path``; empty when there is none or another Python wrote it."""
    stored = read_file(path)
    return stored if isinstance(stored, dict) else {}


def dump(asked: list[tuple[str, tuple[Any, ...], Callable[..., Any]]]) -> bytes:
    """The file's content: each result asked for, kept only when marshal gives it back equal and of its type."""
    results = {}
    for name, args, compute in asked:
        result = compute(*args)
        try:
            again = marshal.loads(marshal.dumps(result))
        except ValueError:
            continue
        if type(again) is type(result) and again == result:
            results[key(name, args, compute)] = result
    return file_bytes(results)
