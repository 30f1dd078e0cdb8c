"""``record``: :func:`dataclasses.dataclass` with its methods built cheaper at class creation
(docs/performance.md#dataclasses-built-cheaper).

On Python 3.12 ``dataclass`` compiles every generated method from source when the class is created,
one ``exec`` each: six for a frozen class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ``__delattr__``), about 0.35 ms; the records a cold start creates cost milliseconds.
``record`` compiles only ``__init__`` (its signature is the class's own and must stay exactly as
``dataclass`` makes it) and builds the other methods as closures over the class and its fields, which
behave as the generated ones: the same comparisons on the same tuples, the same hash, the same repr
(``...`` for a recursive one), the same ``FrozenInstanceError``. ``dataclasses`` itself still collects the
fields, so ``fields()``, ``replace()``, ``asdict()``, ``__match_args__`` and ``__dataclass_params__`` are
the standard ones.

``record`` takes ``frozen``, ``eq`` and ``slots``; a class that uses anything else (``kw_only``,
``InitVar``, dataclass bases, its own dunder methods, no docstring, a field named like a name the
generated ``__init__`` uses) is handed to ``dataclass`` unchanged. ``tests/unit/test_records.py`` holds every
``record`` equal to ``dataclass`` on the same definitions.

In the built layer even ``__init__`` is not compiled: the layer's recipe stores the code of every record's
``__init__`` source beside this module (``records.cache``, written by ``python -m compactor.build_cache``),
and a source found there is run from its stored code, which is what compiling it gives (the same source,
file name and flags, compiled by :func:`compile_source`). A source the file does not hold, a file of another
Python's bytecode, or no file at all (the source tree, tests) compiles as before
(docs/performance.md#the-workers-cold-start-seventh-round-issue-11).
"""

from __future__ import annotations

import _thread
import marshal
import os
import sys
from dataclasses import KW_ONLY, MISSING, Field, FrozenInstanceError, InitVar, dataclass, fields, is_dataclass
from operator import attrgetter
from types import CodeType
from typing import Any, Callable, TypeVar, overload

T = TypeVar("T", bound=type)

_OWN_METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")
_RESERVED = frozenset({"self", "__record_object_setattr", "__record_factory"})


class _FactoryDefault:
    """The default shown for a field with a ``default_factory`` (``dataclass`` shows ``<factory>``)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _FactoryDefault()

CACHE_FILE = os.path.join(os.path.dirname(__file__), "records.cache")
"""The stored code of the layer's ``__init__`` sources: the bytecode magic number of the Python that wrote it,
then a marshalled ``{module name: marshalled {source: code}}`` (each module's part loaded with its first record)."""
_cache: dict[str, Any] | None = None


def compile_source(source: str) -> CodeType:
    """The code of a generated ``__init__`` source, as ``exec`` of the source in this module compiles it (this
    module's future flags included): what :func:`_code` runs and what the layer's recipe stores."""
    return compile(source, "<string>", "exec")


def load_cache(path: str) -> dict[str, Any]:
    """The stored code by module, from ``path``; empty when there is none or another Python wrote it."""
    from compactor.stored_values import read_file

    cache = read_file(path)
    return cache if isinstance(cache, dict) else {}


def _code(source: str, module: str) -> CodeType:
    """The code of ``source`` (a record of ``module``): the stored one when the layer holds it, else compiled."""
    global _cache
    cache = _cache
    if cache is None:
        cache = _cache = load_cache(CACHE_FILE)
    codes = cache.get(module)
    if isinstance(codes, bytes):  # the module's part, loaded with its first record
        try:
            codes = marshal.loads(codes)
        except (ValueError, EOFError, TypeError):
            codes = {}
        cache[module] = codes
    code = codes.get(source) if isinstance(codes, dict) else None
    return code if isinstance(code, CodeType) else compile_source(source)


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, frozen: bool = False, eq: bool = True, slots: bool = False) -> Callable[[T], T]: ...
def record(cls: Any = None, /, *, frozen: bool = False, eq: bool = True, slots: bool = False) -> Any:
    """``@record``, ``@record(frozen=True)``, ``@record(frozen=True, eq=False, slots=True)`` …: as ``@dataclass``."""

    def wrap(cls: T) -> T:
        return _build(cls, frozen=frozen, eq=eq, slots=slots)

    return wrap if cls is None else wrap(cls)


def _supported(cls: type, eq: bool) -> bool:
    annotations = cls.__dict__.get("__annotations__", {})
    own = _OWN_METHODS if eq else ("__init__", "__repr__", "__setattr__", "__delattr__")
    namespace = vars(sys.modules[cls.__module__]) if cls.__module__ in sys.modules else {}
    return (cls.__doc__ is not None
            and not any(name in cls.__dict__ for name in own)
            and not any(is_dataclass(base) for base in cls.__mro__[1:])
            and not any(name in _RESERVED or _is_special(kind, namespace) for name, kind in annotations.items())
            and not any(isinstance(value, Field) and value.kw_only is True for value in cls.__dict__.values()))


def _is_special(kind: Any, namespace: dict[str, Any]) -> bool:
    """Whether an annotation is an ``InitVar`` or ``KW_ONLY``, also under another name: a string annotation's
    leading name (``IV[int]``, ``dc.KW_ONLY``) is looked up in the class's module, as ``dataclass`` does."""
    if isinstance(kind, str):
        if "InitVar" in kind or "KW_ONLY" in kind:
            return True
        head = kind.split("[", 1)[0].strip()
        first, _, rest = head.partition(".")
        kind = namespace.get(first)
        if rest and kind is not None:
            kind = getattr(kind, rest, None)
    return kind is InitVar or kind is KW_ONLY or isinstance(kind, InitVar)


def _build(cls: T, *, frozen: bool, eq: bool, slots: bool) -> T:
    if not _supported(cls, eq):
        return dataclass(cls, frozen=frozen, eq=eq, slots=slots)
    # The fields, match args and params (and the class with slots); no method compiled.
    original, cls = cls, dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    declared = fields(cls)
    params = cls.__dataclass_params__
    params.init, params.repr, params.eq, params.frozen = True, True, eq, frozen
    _set(cls, "__init__", _init(cls, declared, frozen, slots))
    _set(cls, "__repr__", _repr([f.name for f in declared if f.repr]))
    if eq:
        _set(cls, "__eq__", _eq([f.name for f in declared if f.compare]))
        if frozen:
            _set(cls, "__hash__", _hash([f.name for f in declared
                                         if (f.compare if f.hash is None else f.hash)]))
        else:
            cls.__hash__ = None  # type: ignore[assignment]  # as dataclass: equal by value, so unhashable
    if frozen:
        # With slots, dataclass builds these for the class it then copies into the slotted one, and so
        # do these: an instance's other attributes then meet super() of a class it is no instance of.
        names = frozenset(f.name for f in declared)
        _set(cls, "__setattr__", _frozen_setattr(original, names))
        _set(cls, "__delattr__", _frozen_delattr(original, names))
        if slots:  # pickling, as dataclass provides it for frozen classes with slots
            if "__getstate__" not in original.__dict__:
                cls.__getstate__ = _slots_getstate  # type: ignore[attr-defined]
            if "__setstate__" not in original.__dict__:
                cls.__setstate__ = _slots_setstate  # type: ignore[attr-defined]
    return cls


def _slots_getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in fields(self)]


def _slots_setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(fields(self), state):
        object.__setattr__(self, f.name, value)


def _set(cls: type, name: str, function: Any) -> None:
    function.__qualname__ = f"{cls.__qualname__}.{function.__name__}"
    setattr(cls, name, function)


def _init(cls: type, declared: tuple[Any, ...], frozen: bool, slots: bool) -> Any:
    """``__init__`` compiled from source: the same parameters, defaults, annotations and assignments as
    ``dataclass`` generates (positional-or-keyword parameters in field order)."""
    closure: dict[str, Any] = {"__record_object_setattr": object.__setattr__, "__record_factory": _FACTORY}
    parameters, lines = [], []
    seen_default = False
    for f in declared:
        if f.init:
            if f.default is not MISSING or f.default_factory is not MISSING:
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
    for f in declared:
        value = f.name
        if f.default_factory is not MISSING:
            closure[f"__record_default_{f.name}"] = f.default_factory
            value = (f"__record_default_{f.name}() if {f.name} is __record_factory else {f.name}" if f.init
                     else f"__record_default_{f.name}()")
        elif not f.init:
            if not slots or f.default is MISSING:
                continue  # the class attribute holds the default
            closure[f"__record_default_{f.name}"] = f.default  # a slotted class has no class attribute
            value = f"__record_default_{f.name}"
        if f.init:
            default = ""
            if f.default_factory is not MISSING:
                default = "=__record_factory"
            elif f.default is not MISSING:
                closure[f"__record_default_{f.name}"] = f.default
                default = f"=__record_default_{f.name}"
            parameters.append(f"{f.name}{default}")
        lines.append(f"__record_object_setattr(self,{f.name!r},{value})" if frozen else f"self.{f.name}={value}")
    if hasattr(cls, "__post_init__"):
        lines.append("self.__post_init__()")
    body = "\n".join(f"  {line}" for line in lines or ["pass"])
    source = (f"def __record_build__({', '.join(closure)}):\n"
              f" def __init__({', '.join(['self', *parameters])}):\n{body}\n"
              f" return __init__")
    module = sys.modules.get(cls.__module__)
    namespace: dict[str, Any] = {}
    exec(_code(source, cls.__module__), module.__dict__ if module is not None else {}, namespace)  # noqa: S102
    function = namespace["__record_build__"](**closure)
    function.__annotations__ = {**{f.name: f.type for f in declared if f.init}, "return": None}
    return function


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple ``(obj.a, obj.b, ...)`` of ``names`` (one C call; ``attrgetter`` of one name is no tuple)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        getter = attrgetter(names[0])
        return lambda obj: (getter(obj),)
    return attrgetter(*names)


def _repr(names: list[str]) -> Any:
    values = _values(names)
    shown = ", ".join(f"{name}=%r" for name in names)  # %r is repr(), as dataclass's !r
    running: set[tuple[int, int]] = set()

    def __repr__(self: Any) -> str:
        key = id(self), _thread.get_ident()
        if key in running:
            return "..."
        running.add(key)
        try:
            return f"{self.__class__.__qualname__}({shown % values(self)})"
        finally:
            running.discard(key)

    return __repr__


def _eq(names: list[str]) -> Any:
    values = _values(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(names: list[str]) -> Any:
    values = _values(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen_setattr(cls: type, names: frozenset[str]) -> Any:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(cls: type, names: frozenset[str]) -> Any:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__
