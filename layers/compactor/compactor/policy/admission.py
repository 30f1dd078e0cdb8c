"""Admission: total validation of a Σ_pol term before anything runs.

Checks shape, known operations, arity, sorts, parameter values, declared fields and the resource
bounds (depth ≤ 64, ≤ 4096 nodes). Every failure raises :class:`PolicyAdmissionError` whose
message starts with ``ir: `` followed by the JSON-path-like location of the offending node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..jsonutil import is_finite_number
from .fields import FieldDecl
from .signature import (
    ACTIONS,
    MAX_DEPTH,
    MAX_NODES,
    OPERATIONAL_SORTS,
    OPS,
    RELATIONS,
    TIER_ORDER,
)

_STRING_SORTS = frozenset({
    "Family", "Provider", "ServedBy", "Capability", "ParamName", "Sym", "FailReason",
})
_ACTION_CORE_KEYS = frozenset({"action", "then_action", "attempts", "backoff_ms", "open_breaker_ms"})
_CHAIN_PROVIDER_KEYS = ("provider", "provider_id")
_CHAIN_MODEL_KEYS = ("model", "model_family")


class PolicyAdmissionError(ValueError):
    """A term failed admission; ``str(error)`` starts with ``ir: `` (or ``ir.constrain: ``)."""




def _non_negative(value: Any) -> bool:
    return is_finite_number(value) and value >= 0


def _is_action(value: Any) -> bool:
    """A known action name (any JSON value may come: an array or a record is no name, and no set member)."""
    return isinstance(value, str) and value in ACTIONS


def _check_action(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "Action must be a record"
    if not _is_action(value.get("action")):
        return f"Action.action invalid: {value.get('action')!r}"
    if "then_action" in value and not _is_action(value["then_action"]):
        return f"Action.then_action invalid: {value['then_action']!r}"
    if "attempts" in value:
        attempts = value["attempts"]
        if not (is_finite_number(attempts) and float(attempts).is_integer() and attempts >= 1):
            return "Action.attempts must be an integer >= 1"
    if "backoff_ms" in value:
        backoff = value["backoff_ms"]
        if isinstance(backoff, list):
            if not all(_non_negative(step) for step in backoff):
                return "Action.backoff_ms entries must be numbers >= 0"
        elif not _non_negative(backoff):
            return "Action.backoff_ms must be a number >= 0 or an array of them"
    if "open_breaker_ms" in value and not _non_negative(value["open_breaker_ms"]):
        return "Action.open_breaker_ms must be a number >= 0"
    for key, knob in value.items():
        if key not in _ACTION_CORE_KEYS and not (isinstance(key, str) and is_finite_number(knob)):
            return f"Action key {key!r} must map to a finite number"
    return None


def _check_recipe(value: Any) -> str | None:
    if not isinstance(value, list):
        return "Recipe must be an array"
    for index, step in enumerate(value, start=1):
        if isinstance(step, str):
            continue
        if not isinstance(step, dict) or not step:
            return f"Recipe[{index}] must be a string or a non-empty flat record"
        if not all(isinstance(k, str) and is_finite_number(v) for k, v in step.items()):
            return f"Recipe[{index}] must map string keys to numbers"
    return None


def _check_chain(value: Any) -> str | None:
    if not isinstance(value, list):
        return "Chain must be an array"
    allowed = set(_CHAIN_PROVIDER_KEYS + _CHAIN_MODEL_KEYS)
    for index, entry in enumerate(value, start=1):
        if not isinstance(entry, dict) or set(entry) - allowed:
            return f"Chain[{index}] must be a record of provider= and model= only"
        providers = [entry[k] for k in _CHAIN_PROVIDER_KEYS if k in entry]
        models = [entry[k] for k in _CHAIN_MODEL_KEYS if k in entry]
        if len(providers) != 1 or len(models) != 1 or not all(
            isinstance(v, str) for v in providers + models
        ):
            return f"Chain[{index}] must be {{provider=, model=}}"
    return None


def _check_param(sort: str, value: Any, schema: Mapping[str, FieldDecl]) -> str | None:
    """An error text for a parameter that does not fit its sort, else None."""
    if sort == "Num":
        return None if is_finite_number(value) else "expected a finite number"
    if sort == "Count":
        ok = is_finite_number(value) and float(value).is_integer() and value >= 1
        return None if ok else "expected a positive integer count"
    if sort == "Rel":
        return None if isinstance(value, str) and value in RELATIONS else "expected a relation (lt|le|eq|ne|ge|gt)"
    if sort in ("NumField", "BoolField"):
        if not isinstance(value, str):
            return "expected a field name"
        decl = schema.get(value)
        if decl is None:
            return f"undeclared field '{value}'"
        wanted = "Num" if sort == "NumField" else "Bool"
        return None if decl.sort == wanted else f"field '{value}' has sort {decl.sort}, expected {wanted}"
    if sort == "Tier":
        return None if isinstance(value, str) and value in TIER_ORDER else f"unknown tier {value!r}"
    if sort in _STRING_SORTS:
        return None if isinstance(value, str) else f"expected a string ({sort})"
    if sort == "Scalar":
        ok = isinstance(value, (str, bool)) or is_finite_number(value)
        return None if ok else "expected a scalar (number|string|boolean)"
    if sort == "Action":
        return _check_action(value)
    if sort == "Recipe":
        return _check_recipe(value)
    if sort == "Chain":
        return _check_chain(value)
    raise AssertionError(f"unknown parameter sort {sort}")


class _Checker:
    def __init__(self, schema: Mapping[str, FieldDecl]) -> None:
        self.schema = schema
        self.nodes = 0

    def fail(self, path: str, message: str) -> PolicyAdmissionError:
        return PolicyAdmissionError(f"ir: {path}: {message}")

    def sort_of(self, term: Any, path: str, depth: int) -> str:
        if depth > MAX_DEPTH:
            raise self.fail(path, f"term exceeds max depth {MAX_DEPTH}")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(path, f"term exceeds max size {MAX_NODES} nodes")
        if not isinstance(term, (list, tuple)) or not term or not isinstance(term[0], str):
            raise self.fail(path, "a term is [op, ...] with a string op")
        op = term[0]
        spec = OPS.get(op)
        if spec is None:
            raise self.fail(path, f"unknown op '{op}'")
        args = term[1:]
        if spec.variadic is not None:
            if not args:
                raise self.fail(path, f"{op} needs at least one argument")
            for index, child in enumerate(args, start=1):
                self.expect(child, spec.variadic, f"{path}.{op}[{index}]", depth)
            return spec.out
        if len(args) != len(spec.ins):
            raise self.fail(path, f"{op} takes {len(spec.ins)} argument(s), got {len(args)}")
        for index, (sort, arg) in enumerate(zip(spec.ins, args), start=1):
            arg_path = f"{path}.{op}[{index}]"
            if sort in OPERATIONAL_SORTS:
                self.expect(arg, sort, arg_path, depth)
            elif (error := _check_param(sort, arg, self.schema)) is not None:
                raise self.fail(arg_path, error)
        return spec.out

    def expect(self, term: Any, wanted: str, path: str, depth: int) -> None:
        got = self.sort_of(term, path, depth + 1)
        if got != wanted:
            raise self.fail(path, f"expected {wanted}, got {got}")


def check_term(term: Any, schema: Mapping[str, FieldDecl], *, sort: str | None = None) -> str:
    """Validate ``term`` against the signature and field schema; return its sort.

    With ``sort`` the term must have that sort. Raises :class:`PolicyAdmissionError`.
    """
    checker = _Checker(schema)
    got = checker.sort_of(term, "$", 1)
    if sort is not None and got != sort:
        raise checker.fail("$", f"expected {sort}, got {got}")
    return got
