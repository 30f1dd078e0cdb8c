"""``compactor.records.record`` behaves as ``dataclasses.dataclass`` on the same class definitions
(docs/performance.md#dataclasses-built-cheaper): random definitions, both decorators, every observable
compared."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import pkgutil
import sys
from dataclasses import KW_ONLY as AliasedKwOnly
from dataclasses import InitVar as AliasedInitVar
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compactor
from compactor import records
from compactor.records import record

DEFAULTS = [0, 1, "a", None, (), (1, 2), frozenset({3})]
FACTORIES = [list, dict, lambda: [1], tuple]


@st.composite
def definitions(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(0, 5))
    specs = []
    for i in range(n):
        kind = draw(st.sampled_from(["plain", "default", "factory", "field_default"]))
        specs.append({
            "name": f"f{i}", "kind": kind,
            "default": draw(st.sampled_from(DEFAULTS)), "factory": draw(st.sampled_from(FACTORIES)),
            "init": draw(st.booleans()) if kind != "plain" else draw(st.sampled_from([True, True, False])),
            "repr": draw(st.booleans()), "compare": draw(st.booleans()),
            "hash": draw(st.sampled_from([None, True, False])),
            "type": draw(st.sampled_from(["int", "Any", "list[int] | None"])),
        })
    return {"fields": specs, "frozen": draw(st.booleans()), "eq": draw(st.booleans()), "slots": draw(st.booleans()),
            "post_init": draw(st.booleans()), "classvar": draw(st.booleans()),
            "doc": draw(st.sampled_from(["A record.", None]))}


def make(definition: dict[str, Any], decorate: Any) -> Any:
    """The class ``definition`` describes, decorated; or the exception decorating raised."""
    namespace: dict[str, Any] = {"__annotations__": {}, "__module__": __name__, "__qualname__": "Rec",
                                 "__doc__": definition["doc"]}
    for spec in definition["fields"]:
        namespace["__annotations__"][spec["name"]] = spec["type"]
        options = {"init": spec["init"], "repr": spec["repr"], "compare": spec["compare"], "hash": spec["hash"]}
        if spec["kind"] == "default":
            namespace[spec["name"]] = spec["default"]
        elif spec["kind"] == "factory":
            namespace[spec["name"]] = dataclasses.field(default_factory=spec["factory"], **options)
        elif spec["kind"] == "field_default":
            namespace[spec["name"]] = dataclasses.field(default=spec["default"], **options)
        elif not spec["init"]:
            namespace[spec["name"]] = dataclasses.field(**options)
    if definition["classvar"]:
        namespace["__annotations__"]["shared"] = "ClassVar[int]"
        namespace["shared"] = 7
    if definition["post_init"]:
        def __post_init__(self: Any) -> None:
            object.__setattr__(self, "seen", True)
        namespace["__post_init__"] = __post_init__
    cls = type("Rec", (), namespace)
    try:
        return decorate(cls, frozen=definition["frozen"], eq=definition["eq"], slots=definition["slots"])
    except TypeError as exc:
        return exc


def std(cls: type, *, frozen: bool, eq: bool, slots: bool) -> type:
    return dataclasses.dataclass(cls, frozen=frozen, eq=eq, slots=slots)


def fast(cls: type, *, frozen: bool, eq: bool, slots: bool) -> type:
    return record(frozen=frozen, eq=eq, slots=slots)(cls)


def outcome(action: Any) -> Any:
    try:
        return ("ok", action())
    except Exception as exc:  # the same exception, type and message, on both sides
        return ("raised", type(exc).__name__, str(exc))


def state(obj: Any, definition: dict[str, Any]) -> str:
    """The instance's attributes (fields, ``seen``, ``other``), read one by one (slotted ones have no ``vars``)."""
    names = [f["name"] for f in definition["fields"]] + ["seen", "other"]
    return repr([(name, outcome(lambda: getattr(obj, name))) for name in names]
                + [outcome(lambda: sorted(vars(obj)))])


def pickled(obj: Any) -> str:
    globals()["Rec"] = type(obj)  # where pickle looks the class up by its name
    try:
        return repr(pickle.loads(pickle.dumps(obj)))
    finally:
        del globals()["Rec"]


def observe(cls: Any, definition: dict[str, Any]) -> list[Any]:
    """Everything a caller can see of the class and of instances made with the same arguments."""
    if isinstance(cls, Exception):
        return [type(cls).__name__, str(cls)]
    params = cls.__dataclass_params__
    seen: list[Any] = [
        str(inspect.signature(cls)), cls.__init__.__annotations__, cls.__init__.__qualname__,
        cls.__init__.__module__, cls.__doc__, cls.__match_args__, cls.__hash__ is None,
        cls.__dict__.get("__slots__"), cls.__qualname__, "__getstate__" in vars(cls),
        [(p, getattr(params, p)) for p in ("init", "repr", "eq", "order", "unsafe_hash", "frozen")],
        [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash, f.kw_only)
         for f in dataclasses.fields(cls)],
        sorted(name for name in vars(cls) if not name.startswith("__")),
        [getattr(cls, name).__qualname__ for name in ("__init__", "__repr__", "__eq__", "__setattr__")
         if name in vars(cls)],
    ]
    init = [f for f in definition["fields"] if f["init"]]
    for values in ([i * 10 for i in range(len(init))], [[i] for i in range(len(init))], [None] * len(init)):
        a = outcome(lambda: cls(*values))
        b = outcome(lambda: cls(**{f["name"]: v for f, v in zip(init, values)}))
        seen += [a[0], b[0]]
        if a[0] != "ok":
            seen.append(a)
            continue
        one, two = a[1], b[1]
        checks = [lambda: state(one, definition), lambda: repr(one), lambda: pickled(one),
                  lambda: one == two, lambda: one != two, lambda: one == 3, lambda: hash(one) == hash(two),
                  lambda: "identity" if hash(one) == object.__hash__(one) else hash(one),
                  lambda: dataclasses.asdict(one), lambda: dataclasses.astuple(one),
                  lambda: repr(dataclasses.replace(one)), lambda: state(copy.deepcopy(one), definition)]
        seen += [outcome(check) for check in checks]
        for name in [f["name"] for f in definition["fields"]] + ["other"]:
            seen += [outcome(lambda: setattr(one, name, 5)), outcome(lambda: delattr(one, name)),
                     state(one, definition)]
        if not definition["frozen"] and definition["fields"]:
            setattr(one, definition["fields"][0]["name"], one)  # a recursive repr
            seen.append(outcome(lambda: repr(one)))
    return seen


@settings(max_examples=400, deadline=None)
@given(definitions())
def test_record_is_dataclass(definition: dict[str, Any]) -> None:
    assert observe(make(definition, fast), definition) == observe(make(definition, std), definition)


@settings(max_examples=100, deadline=None)
@given(definitions())
def test_subclasses_and_pickles_as_dataclass(definition: dict[str, Any]) -> None:
    """A plain subclass of a record, and a record's instances through pickle, as a dataclass's."""
    results = []
    for decorate in (fast, std):
        cls = make(definition, decorate)
        if isinstance(cls, Exception):
            results.append(type(cls))
            continue
        sub = type("Sub", (cls,), {"__module__": __name__})
        init = [f for f in definition["fields"] if f["init"]]
        instance = outcome(lambda: sub(*range(len(init))))
        results += [instance[0], outcome(lambda: setattr(instance[1], "extra", 1)) if instance[0] == "ok" else None,
                    outcome(lambda: repr(instance[1])) if instance[0] == "ok" else None]
    assert results[: len(results) // 2] == results[len(results) // 2:]


def test_records_pickle() -> None:
    from compactor.budget import Deadline

    deadline = Deadline.after_ms(1000)
    assert pickle.loads(pickle.dumps(deadline)) == deadline


def test_unsupported_definitions_are_dataclasses() -> None:
    """What ``record`` does not build itself goes to ``dataclass`` as it is."""
    @record
    class WithOwnRepr:
        """r"""
        x: int

        def __repr__(self) -> str:
            return "mine"

    @record
    class Undocumented:
        x: int = 1

    assert repr(WithOwnRepr(1)) == "mine" and WithOwnRepr(1) == WithOwnRepr(1)
    assert Undocumented.__doc__ == "Undocumented(x: 'int' = 1)"


def test_init_vars_and_kw_only_under_other_names_are_dataclasses() -> None:
    """An ``InitVar`` or ``KW_ONLY`` imported under another name (the annotations are strings here) is
    still recognised, so its class gets ``dataclass``'s own ``__init__``."""
    @record
    class Scaled:
        """s"""
        x: int
        scale: AliasedInitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            self.x *= scale

    @record
    class KeywordOnly:
        """k"""
        x: int
        _: AliasedKwOnly
        y: int = 0

    @record
    class ByModule:
        """m"""
        x: int
        scale: dataclasses.InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            self.x *= scale

    assert Scaled(3, 5).x == 15 and ByModule(3, 5).x == 15
    assert KeywordOnly(1, y=2).y == 2
    with pytest.raises(TypeError):
        KeywordOnly(1, 2)
    for cls in (Scaled, KeywordOnly, ByModule):
        assert cls.__repr__.__code__.co_filename != records.__file__  # dataclass's own methods


def test_layer_records_are_built_by_record() -> None:
    """Every class of the layer decorated ``@record`` got the cheap methods (its ``__repr__`` is the one
    ``compactor.records`` builds), so no class silently pays for ``dataclass`` again."""
    for info in pkgutil.walk_packages(compactor.__path__, "compactor."):
        importlib.import_module(info.name)
    classes = [cls for name, module in list(sys.modules.items()) if name.split(".")[0] == "compactor"
               for cls in vars(module).values()
               if isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls)]
    decorated = [cls for cls in classes if inspect.getsource(cls).startswith("@record")]
    assert len(decorated) >= 40
    assert [cls for cls in decorated if cls.__repr__.__code__.co_filename != records.__file__] == []
