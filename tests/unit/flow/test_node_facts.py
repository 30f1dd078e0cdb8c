"""Facts of policy-free nodes and known wirings (docs/performance.md): a node equal to one admitted before is
not checked or keyed again, a wiring that passed the graph checks is not checked again, and admission answers
exactly what it answers without them (same flow, same error)."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.flow import AdmissionCache, FlowAdmissionError, admit_flow
from compactor.flow import admit as admission
from compactor.jsonutil import dense_dumps

from .fake_router import FakeRouter
from .test_admission_cache import same_admission
from .triage import FLOW_INPUT, triage_flow

ROUTER = FakeRouter()


def outcome(term: Any, cache: AdmissionCache | None, flow_input: Any = FLOW_INPUT) -> Any:
    try:
        return admit_flow(term, admit_policy=ROUTER.admit_policy, flow_input=flow_input, cache=cache)
    except FlowAdmissionError as exc:
        return exc.message


def fresh_outcome(term: Any, flow_input: Any = FLOW_INPUT) -> Any:
    """Admission with nothing known: no node facts, no wirings (the process's are put back afterwards)."""
    saved = dict(admission._NODE_FACTS), dict(admission._WIRINGS)
    admission._NODE_FACTS.clear()
    admission._WIRINGS.clear()
    try:
        return outcome(copy.deepcopy(term), None, flow_input)
    finally:
        admission._NODE_FACTS.update(saved[0])
        admission._WIRINGS.update(saved[1])


def same_outcome(got: Any, expected: Any) -> bool:
    return got == expected if isinstance(expected, str) else not isinstance(got, str) and same_admission(got, expected)


# Option values of the triage flow's data nodes: valid ones, invalid ones, and ones whose JSON text equals a
# valid one's (a tuple for a list, a float for an integer would not: its text differs).
NAMES = st.sampled_from(["tickets", "classify", "draft", "choice", "support", "spam", "x" * 129, "", "é", 'a"b'])
VALUES = st.one_of(
    NAMES, st.integers(min_value=-1, max_value=300), st.sampled_from([1.0, 200.0, True, False, None]),
    st.lists(NAMES, max_size=3), st.lists(NAMES, max_size=3).map(tuple))
DATA_NODES = ("tickets", "support", "spam", "answered")
OPTIONS = ("path", "field", "equals", "min_string_bytes", "max_string_bytes", "only_shrink", "operation", "inputs",
           "on_error", "kind")
CHANGES = st.dictionaries(st.sampled_from(DATA_NODES), st.dictionaries(st.sampled_from(OPTIONS), VALUES, max_size=2),
                          max_size=2)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CHANGES, min_size=1, max_size=4))
def test_known_nodes_change_no_outcome(changes: list[dict[str, dict[str, Any]]]) -> None:
    """Flows of changed data nodes, each admitted after the others (so their nodes are known), admit to what
    a fresh admission (which knows no node) gives: the flow, or the same error."""
    for change in [{}, *changes]:
        term = triage_flow(**{node: {key: value for key, value in options.items() if value is not None}
                              for node, options in change.items()})
        expected = fresh_outcome(term)
        assert same_outcome(outcome(term, AdmissionCache()), expected), change
        assert same_outcome(outcome(copy.deepcopy(term), None), expected), change  # known wirings only


def test_a_tuple_where_a_known_node_has_a_list_is_still_rejected() -> None:
    outcome(triage_flow(), AdmissionCache())
    text = dense_dumps(triage_flow()[1]["spam"])
    assert text in admission._NODE_FACTS  # the select node is known now
    tuple_inputs = triage_flow(spam={"inputs": ("tickets", "classify")})
    assert outcome(tuple_inputs, AdmissionCache()) == 'node "spam": inputs must be an array of node ids'


def test_dict_subclass_node_maps_and_nodes_admit_as_plain_dicts() -> None:
    """A node map or a node of a ``dict`` subclass has no kept text: it is admitted as a fresh admission
    admits it, with and without the cache (it raised ``KeyError`` with the cache once)."""
    from collections import OrderedDict

    plain = triage_flow()
    expected = fresh_outcome(plain)
    as_map = ["flow", OrderedDict(copy.deepcopy(plain[1]))]
    as_node = copy.deepcopy(plain)
    as_node[1]["tickets"] = OrderedDict(as_node[1]["tickets"])
    for term in (as_map, as_node):
        for cache in (AdmissionCache(), None):
            assert same_outcome(outcome(term, cache), expected), (term, cache)


def test_only_policy_free_nodes_are_kept() -> None:
    admission._NODE_FACTS.clear()
    outcome(triage_flow(), AdmissionCache())
    kept = {json.loads(text)["kind"] for text in admission._NODE_FACTS}
    assert kept == {"input", "output", "data"} and len(admission._NODE_FACTS) == 6


def test_the_facts_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(admission, "_NODE_FACTS_KEPT", 3)
    admission._NODE_FACTS.clear()
    for bound in (100, 101, 102):
        outcome(triage_flow(answered={"max_string_bytes": bound}), AdmissionCache())
        assert len(admission._NODE_FACTS) <= 3


LABELS = st.text(min_size=1, max_size=6)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=8)
NODES = JSON | st.builds(lambda kind, rest: {**rest, "kind": kind},
                         st.sampled_from(["input", "output", "data", "llm", "decision", "tool"]),
                         st.dictionaries(st.text(max_size=4), JSON, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(LABELS, NODES, max_size=4))
def test_the_term_text_and_the_policy_free_nodes_texts(nodes: dict[str, Any]) -> None:
    term = ["flow", nodes]
    text = admission._exact_text(term)
    assert text is not None
    assert text[0] == dense_dumps(term) and text[1] == len(text[0].encode("utf-8"))
    assert admission._policy_free_texts(term) == {label: dense_dumps(node) for label, node in nodes.items()
                       if isinstance(node, dict) and node.get("kind") in ("input", "output", "data")}
