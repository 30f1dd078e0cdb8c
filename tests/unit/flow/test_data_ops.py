"""The data operations (docs/behaviour.md#data-operations): project, select, overlay, union and record-map bounds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.flow.data_ops import DataOpError, apply, overlay, project, record_map, select, union


def test_project_walks_object_keys() -> None:
    value = {"a": {"b": {"c": [1, 2]}}}
    assert project(value, ["a", "b", "c"]) is value["a"]["b"]["c"]


@pytest.mark.parametrize(("value", "path", "message"), [
    ({"a": {}}, ["a", "b"], "missing key 'b' at step 2"),
    ({"a": [1]}, ["a", "0"], "step 2 ('0') reads from a non-object"),
    ("text", ["a"], "reads from a non-object"),
])
def test_project_errors(value: Any, path: list[str], message: str) -> None:
    with pytest.raises(DataOpError, match=message.replace("(", r"\(").replace(")", r"\)")):
        project(value, path)


def test_select_keeps_matching_answers_and_shares_values() -> None:
    records = {"a": {"big": "x"}, "b": "B", "c": "C", "d": "D"}
    answers = {"a": {"choice": "yes"}, "b": {"choice": "no"}, "c": "yes", "e": {"choice": "yes"}}
    out = select(records, answers, "choice", "yes")
    assert out == {"a": {"big": "x"}}
    assert out["a"] is records["a"]


def test_select_with_a_non_answer_object_selects_nothing() -> None:
    assert select({"a": "A"}, {"instructions": [], "other": 1}, "choice", "yes") == {}


@pytest.mark.parametrize(("records", "answers", "what"), [
    ([], {}, "select records"),
    ({}, "answers", "select answers"),
    ({f"k{i}": i for i in range(129)}, {}, "select records has 129 keys"),
    ({"": 1}, {}, "select records has a key that is not 1–128 bytes"),
    ({"é" * 65: 1}, {}, "select records has a key"),
])
def test_select_checks_record_maps(records: Any, answers: Any, what: str) -> None:
    with pytest.raises(DataOpError, match=what):
        select(records, answers, "choice", "yes")


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=130), st.sampled_from(["", "a" * 128, "a" * 129, "é" * 64, "é" * 65]),
                                 st.integers(), st.none()), st.none(), max_size=5))
def test_record_map_keys_are_checked_as_the_definition_says(value: dict[Any, Any]) -> None:
    """The keys' check (lengths in C for ASCII keys) accepts exactly what checking each key does."""
    expected = all(isinstance(key, str) and 1 <= len(key.encode("utf-8", "surrogatepass")) <= 128 for key in value)
    try:
        record_map(value, "x")
        accepted = True
    except DataOpError as exc:
        assert exc.message == "x has a key that is not 1–128 bytes"
        accepted = False
    assert accepted == expected


def test_record_map_bounds_are_inclusive() -> None:
    value = {("k" * 127) + str(i % 10) if i < 10 else f"k{i}": i for i in range(128)}
    assert record_map(value, "x") is value


def test_overlay_without_byte_options_takes_any_replacement() -> None:
    base = {"a": "A", "b": "B", "c": "C"}
    assert overlay(base, {"a": None, "b": {"x": 1}}) == {"a": None, "b": {"x": 1}, "c": "C"}


def test_overlay_removals_win_and_keep_base_order() -> None:
    base = {"a": "AAAA", "b": "BBBB", "c": "CCCC"}
    out = overlay(base, {"c": "C", "a": "A"}, {"a": True}, min_string_bytes=1, max_string_bytes=10,
                  only_shrink=True)
    assert list(out.items()) == [("b", "BBBB"), ("c", "C")]


@pytest.mark.parametrize(("replacement", "accepted"), [
    ("short", True),
    ("", False),  # below min_string_bytes
    ("x" * 11, False),  # above max_string_bytes
    ("é" * 6, False),  # 12 bytes although 6 characters
    (None, False),
    (5, False),
])
def test_overlay_byte_bounds(replacement: Any, accepted: bool) -> None:
    base = {"a": "the original text"}
    out = overlay(base, {"a": replacement}, min_string_bytes=1, max_string_bytes=10)
    assert out["a"] == (replacement if accepted else "the original text")


def test_overlay_only_shrink_needs_strictly_fewer_bytes_than_a_string_original() -> None:
    base = {"same": "abcd", "shorter": "abcd", "number": 7, "multibyte": "ab"}
    replacements = {"same": "wxyz", "shorter": "abc", "number": "1", "multibyte": "é"}
    out = overlay(base, replacements, only_shrink=True)
    assert out == {"same": "abcd", "shorter": "abc", "number": 7, "multibyte": "ab"}


def test_overlay_default_bounds_with_only_min() -> None:
    assert overlay({"a": "x"}, {"a": "y" * 5}, min_string_bytes=2) == {"a": "yyyyy"}
    assert overlay({"a": "x"}, {"a": "y"}, min_string_bytes=2) == {"a": "x"}


def test_overlay_scope_bounds_the_replacement_keys() -> None:
    base = {"a": "AAAA", "b": "BBBB", "c": "CCCC"}
    assert overlay(base, {"a": "A"}, {"c": True}, {"a": "AAAA"}) == {"a": "A", "b": "BBBB"}
    with pytest.raises(DataOpError, match="replacement key 'b' is not in the scope"):
        overlay(base, {"a": "A", "b": "B"}, {}, {"a": "AAAA"})  # answered for a key it was not asked about
    with pytest.raises(DataOpError, match="overlay scope must be a record map"):
        overlay(base, {}, {}, ["a"])
    node = {"operation": "overlay", "only_shrink": True}
    with pytest.raises(DataOpError, match="not in the scope"):
        apply("overlay", node, [base, {"b": "B"}, {}, {"a": "AAAA"}])


@pytest.mark.parametrize(("replacements", "removals", "message"), [
    ({"z": "new"}, None, "replacement key 'z' is not in the base"),
    ({}, {"z": True}, "removal key 'z' is not in the base"),
    ("not a map", None, "overlay replacements must be a record map"),
    ({}, [], "overlay removals must be a record map"),
])
def test_overlay_errors(replacements: Any, removals: Any, message: str) -> None:
    with pytest.raises(DataOpError, match=message):
        overlay({"a": "A"}, replacements, removals)


def test_union_is_disjoint() -> None:
    assert union([{"a": 1}, {}, {"b": 2}]) == {"a": 1, "b": 2}
    with pytest.raises(DataOpError, match="key 'a' appears in more than one input"):
        union([{"a": 1}, {"a": 2}])
    with pytest.raises(DataOpError, match="union input 2 must be a record map"):
        union([{"a": 1}, "b"])


def test_union_output_is_a_record_map() -> None:
    halves = [{f"a{i}": i for i in range(64)}, {f"b{i}": i for i in range(65)}]
    with pytest.raises(DataOpError, match="union output has 129 keys"):
        union(halves)


def test_apply_dispatches_with_node_options() -> None:
    node = {"operation": "overlay", "max_string_bytes": 3}
    assert apply("overlay", node, [{"a": "long"}, {"a": "abc"}]) == {"a": "abc"}
    assert apply("project", {"path": ["a"]}, [{"a": 1}]) == 1
    assert apply("select", {"field": "f", "equals": "v"}, [{"a": 1}, {"a": {"f": "v"}}]) == {"a": 1}
    assert apply("union", {}, [{"a": 1}, {"b": 2}]) == {"a": 1, "b": 2}


@pytest.mark.parametrize("on_error", [False, True])
@pytest.mark.parametrize(("spec", "values", "value", "error"), [
    ({"operation": "project", "path": ["a"]}, [{"a": [1]}], [1], None),
    ({"operation": "select", "field": "choice", "equals": "x"}, [{"k": "v", "j": "w"}, {"k": {"choice": "x"}}],
     {"k": "v"}, None),
    ({"operation": "union"}, [{"a": 1}, {"a": 2}], None, "data_error: union: key 'a' appears in more than one input"),
    ({"operation": "overlay", "max_string_bytes": 9}, [{"k": "long text"}, {"k": "\ud800"}], None,
     "data_error: value is not valid Unicode (lone surrogate)"),
])
def test_a_data_node_runs_inline_as_it_ran_as_a_coroutine(spec: dict[str, Any], values: list[Any], value: Any,
                                                           error: str | None, on_error: bool) -> None:
    """The scheduler runs a data node without a coroutine (``execute.execute_data_node``, docs/performance.md):
    the same value, trace entry (keys in the same order), status and error as ``execute_node``'s data path."""
    import asyncio

    from compactor.budget import Deadline
    from compactor.flow.execute import FAILED, FALLBACK, OK, execute_data_node, execute_node
    from compactor.flow.graph import flow_node

    spec = {"kind": "data", "inputs": [f"x{i}" for i in range(len(values))], **spec,
            **({"on_error": "input"} if on_error else {})}
    node = flow_node(3, "label", "data", tuple(range(len(values))), spec, None, "")
    expected_entry: dict[str, Any] = {"node": "n3", "kind": "data", "inputs": [f"n{i}" for i in range(len(values))],
                                      "cost_reported": 0}
    if error is not None:
        expected_entry["error"] = error
        if on_error:
            expected_entry["fallback"] = "input"
    for outcome in (execute_data_node(node, values),
                    asyncio.run(execute_node(node, values, router=None, deadline=Deadline.after_ms(1000)))):  # type: ignore[arg-type]
        assert outcome.entry == expected_entry and list(outcome.entry) == list(expected_entry)
        if error is None:
            assert (outcome.value, outcome.status, outcome.error_kind, outcome.error_message) == (value, OK, None, None)
        else:
            assert outcome.status == (FALLBACK if on_error else FAILED)
            assert outcome.value == (values[0] if on_error else None)
            assert (outcome.error_kind, outcome.error_message) == ("data_error", error)
        assert outcome.tool_calls is None
