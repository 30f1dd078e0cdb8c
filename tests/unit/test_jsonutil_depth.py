"""``jsonutil.depth_exceeds`` equals the recursive definition of a value's depth (docs/performance.md)."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.jsonutil import depth_exceeds


class Record(dict):  # type: ignore[type-arg]
    """A dict subclass (as flow values' JSONTextMap and WireSized are): a container."""


class Items(list):  # type: ignore[type-arg]
    """A list subclass: a container."""


def depth(value: Any, known: dict[int, int] | None = None) -> int:
    """The deepest level a container sits at (the root is level 0), -1 for a value with no container; tuples,
    strings and numbers are leaves. (``known``: the depths of shared subterms, by id.)"""
    known = {} if known is None else known
    if id(value) in known:
        return known[id(value)]
    if isinstance(value, dict):
        result = max([0, *(depth(child, known) + 1 for child in value.values())])
    elif isinstance(value, list):
        result = max([0, *(depth(child, known) + 1 for child in value)])
    else:
        return -1
    known[id(value)] = result
    return result


_leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.tuples(st.integers())
_values = st.recursive(
    _leaves,
    lambda inner: (st.lists(inner, max_size=24) | st.dictionaries(st.text(max_size=3), inner, max_size=24)
                   | st.lists(inner, max_size=20).map(Items)
                   | st.dictionaries(st.text(max_size=3), inner, max_size=20).map(Record)),
    max_leaves=120)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_values, st.integers(min_value=0, max_value=12))
def test_depth_exceeds_equals_the_recursive_definition(value: Any, limit: int) -> None:
    assert depth_exceeds(value, limit) is (depth(value) > limit)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(_values, st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=40))
def test_wide_levels_and_shared_subterms(value: Any, width: int, levels: int) -> None:
    """Levels of many children (found by their types in C) and of few, with one subterm held many times."""
    nested: Any = value
    for level in range(levels):
        nested = [nested] * width + ["x"] * (level % 3) if level % 2 else {str(i): nested for i in range(width)}
    for limit in (0, levels - 1, levels, levels + 1, levels + depth(value), levels + depth(value) + 1):
        assert depth_exceeds(nested, limit) is (depth(nested) > limit)
