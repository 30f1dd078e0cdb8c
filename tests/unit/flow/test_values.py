"""The prompt view of flow values (``flow.values.view_of``): an object of ``JSONText`` values is quoted member
by member, and must give exactly the dense JSON the encoder gives (docs/performance.md)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.flow.values import JSONText, view_of
from compactor.jsonutil import ascii_dumps, dense_dumps

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)
KEYS = st.text(max_size=12) | st.sampled_from(["fragment_0", 'a"b', "a\\b", "tab\there", "é", "\x7f", "\u2028"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, st.tuples(JSON_VALUES, st.booleans()), min_size=1, max_size=6))
def test_an_object_of_json_texts_views_as_its_dense_json(members: dict[str, tuple[Any, bool]]) -> None:
    """Dense and ASCII texts of any JSON value (strings with quotes, backslashes, control characters and
    non-ASCII in them), and joins and cuts of them, quoted as the encoder quotes them."""
    value = {key: JSONText((dense_dumps if dense else ascii_dumps)(item)) for key, (item, dense) in members.items()}
    cut = {key: JSONText(text[: len(text) // 2] + "," + text) for key, text in value.items()}
    for each in (value, cut):
        assert view_of(each) == dense_dumps(each) == dense_dumps({key: str(text) for key, text in each.items()})


def test_other_values_view_as_before() -> None:
    """Strings as they are; objects with any plain member, empty objects and lists through the encoder."""
    marked = JSONText('{"a":"x\\"y"}')
    assert view_of(marked) is marked
    for value in ({"a": marked, "b": "plain"}, {}, [marked], {"a": {"b": marked}}):
        assert view_of(value) == dense_dumps(value)
    assert marked.quoted() == dense_dumps(str(marked))
