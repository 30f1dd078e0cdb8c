"""The prompt view of flow values (``flow.values.view_of``): a ``JSONTextMap`` is quoted member by member, and
must give exactly the dense JSON the encoder gives (docs/performance.md)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.flow.data_ops import apply
from compactor.flow.values import JSONTextMap, view_of
from compactor.jsonutil import ascii_dumps, dense_dumps

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)
KEYS = st.text(max_size=12) | st.sampled_from(["fragment_0", 'a"b', "a\\b", "tab\there", "é", "\x7f", "\u2028"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, st.tuples(JSON_VALUES, st.booleans()), max_size=6))
def test_a_map_of_json_texts_views_as_its_dense_json(members: dict[str, tuple[Any, bool]]) -> None:
    """Dense and ASCII texts of any JSON value (strings with quotes, backslashes, control characters and
    non-ASCII in them), and joins and cuts of them, quoted as the encoder quotes them."""
    texts = {key: (dense_dumps if dense else ascii_dumps)(item) for key, (item, dense) in members.items()}
    for each in (texts, {key: text[: len(text) // 2] + "," + text for key, text in texts.items()}):
        assert view_of(JSONTextMap(each)) == dense_dumps(each)


def test_select_keeps_the_mark_and_other_values_view_as_before() -> None:
    items = JSONTextMap({"a": '{"x":"y\\"z"}', "b": "[1]", "c": '"q"'})
    answers = {"a": {"choice": "s"}, "b": {"choice": "k"}, "c": {"choice": "s"}}
    selected = apply("select", {"field": "choice", "equals": "s"}, [items, answers])
    assert type(selected) is JSONTextMap and selected == {"a": items["a"], "c": items["c"]}
    assert type(apply("select", {"field": "choice", "equals": "s"}, [dict(items), answers])) is dict
    assert view_of(selected) == dense_dumps(dict(selected))
    for value in ({"a": '{"x":"y"}'}, {}, [items], {"a": {"b": items}}, JSONTextMap({"a": 1})):
        assert view_of(value) == dense_dumps(value)


def _embedded(texts: dict[str, str]) -> str:
    """What ``embed_json_text`` shows: the dense JSON of the map with each string holding a JSON array or
    object as that JSON."""
    values = {}
    for key, text in texts.items():
        parsed = json.loads(text) if text[:1] in ("[", "{") else None
        values[key] = parsed if isinstance(parsed, (list, dict)) else text
    return dense_dumps(values)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS.filter(bool), JSON_VALUES, max_size=6))
def test_embedding_json_text_shows_arrays_and_objects_as_json_marked_or_not(members: dict[str, Any]) -> None:
    """``embed_json_text``: a member whose string holds a JSON array or object is shown as that JSON (the model
    reads it once, not escaped again), the same text whether the host marked the map whole (no parse) or the map
    crossed a process boundary as plain JSON (a Step Functions worker's flow input: parsed); ``select`` keeps the
    mark. Other members are quoted as before."""
    texts = {key: dense_dumps(item) for key, item in members.items()}
    expected = _embedded(texts)
    marked = JSONTextMap(texts, whole=True)
    assert view_of(marked, embed_json_text=True) == expected
    assert view_of(dict(texts), embed_json_text=True) == expected
    assert view_of(JSONTextMap(texts), embed_json_text=True) == expected
    answers = {key: {"choice": "s"} for key in texts}
    selected = apply("select", {"field": "choice", "equals": "s"}, [marked, answers])
    assert type(selected) is JSONTextMap and selected.whole
    assert view_of(marked, embed_json_text=False) == dense_dumps(texts)


def test_embedding_json_text_quotes_what_is_not_one_json_array_or_object() -> None:
    """Only a string that parses as a JSON array or object is embedded (a cut, a number, a string, text that
    merely starts with a bracket, one nested past what the parser reads, a key named twice); other values and
    non-objects are shown as dense JSON."""
    deep = "[" * 100_000 + "]" * 100_000
    texts = {"cut": '[{"a":1}', "number": "12", "text": "[note] done", "deep": deep, "twice": '{"a":1,"a":2}',
             "spaced": ' [1]', "nan": "[NaN]", "list": '[{"role":"tool","content":"x\\"y"}]', "other": 3}
    expected = {**texts, "list": [{"role": "tool", "content": 'x"y'}]}
    assert json.loads(view_of(texts, embed_json_text=True)) == expected
    assert json.loads(view_of(JSONTextMap(texts), embed_json_text=True)) == expected  # a cut is not whole JSON
    for value in (['[1]'], '[1]', {"a": {"b": "[1]"}}):
        assert view_of(value, embed_json_text=True) == view_of(value)


def test_embedding_json_text_does_not_depend_on_how_deep_the_parser_reads_here() -> None:
    """A string holding JSON deeper than a body may be (``MAX_BODY_DEPTH``) is quoted, whatever the stack it is shown
    from. It was embedded when the parser could read it: about 1,500 levels at the top of the stack, 1,100 under 200
    levels of calls through C (a host's callbacks), another number on another interpreter, so the same value made one
    prompt in one process and another in the next."""
    from compactor.jsonutil import MAX_BODY_DEPTH

    def nested(levels: int) -> str:  # its deepest container at level ``levels`` (the root is level 0)
        return "[" * (levels + 1) + "]" * (levels + 1)

    def shown_under_c_calls(value: Any, calls: int) -> str:
        return view_of(value, embed_json_text=True) if calls == 0 else list(
            map(lambda _: shown_under_c_calls(value, calls - 1), [0]))[0]

    deep = {"x": nested(1_200)}
    assert view_of(deep, embed_json_text=True) == shown_under_c_calls(deep, 200) == dense_dumps(deep)  # quoted
    assert view_of({"x": nested(MAX_BODY_DEPTH)}, embed_json_text=True) == '{"x":' + nested(MAX_BODY_DEPTH) + "}"
    assert view_of({"x": nested(MAX_BODY_DEPTH + 1)}, embed_json_text=True) == dense_dumps({"x": nested(129)})
