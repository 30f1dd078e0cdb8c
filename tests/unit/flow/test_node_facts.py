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
from compactor.flow.values import MISSING
from compactor.jsonutil import dense_dumps
from compactor.router import Router

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
    saved = dict(admission._NODE_FACTS), dict(admission._WIRINGS), admission._node_facts_chars, admission._wirings_chars
    forget()
    try:
        return outcome(copy.deepcopy(term), None, flow_input)
    finally:
        forget()
        admission._NODE_FACTS.update(saved[0])
        admission._WIRINGS.update(saved[1])
        admission._node_facts_chars, admission._wirings_chars = saved[2], saved[3]


def forget() -> None:
    """Empty the node facts and the wirings, with their counts of characters."""
    admission._NODE_FACTS.clear()
    admission._WIRINGS.clear()
    admission._node_facts_chars = admission._wirings_chars = 0


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
    forget()
    outcome(triage_flow(), AdmissionCache())
    kept = {json.loads(text)["kind"] for text in admission._NODE_FACTS}
    assert kept == {"input", "output", "data"} and len(admission._NODE_FACTS) == 6


def test_the_facts_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(admission, "_NODE_FACTS_KEPT", 3)
    forget()
    for bound in (100, 101, 102):
        outcome(triage_flow(answered={"max_string_bytes": bound}), AdmissionCache())
        assert len(admission._NODE_FACTS) <= 3


def facts_chars() -> int:
    """The characters the node facts hold, counted from the facts themselves."""
    return sum(len(text) + len(facts.key) for text, facts in admission._NODE_FACTS.items())


def wirings_chars() -> int:
    """The characters the wirings hold (each id and input counted 16 more), counted from the wirings themselves."""
    return sum(len(label) + 16 + len(kind) + sum(len(source) + 16 for source in sources)
               for wiring in admission._WIRINGS for label, kind, sources in wiring)


def within_bounds() -> bool:
    return (facts_chars() == admission._node_facts_chars <= admission._NODE_FACTS_CHARS_MAX
            and all(len(text) <= admission._NODE_TEXT_KEPT_MAX for text in admission._NODE_FACTS)
            and len(admission._NODE_FACTS) <= admission._NODE_FACTS_KEPT
            and wirings_chars() == admission._wirings_chars <= admission._WIRINGS_CHARS_MAX
            and all(admission._wiring_chars(wiring) <= admission._WIRING_CHARS_KEPT_MAX for wiring in admission._WIRINGS)
            and len(admission._WIRINGS) <= admission._WIRINGS_KEPT)


def post_flows(flow_ir: Any, flow_input: Any = None) -> Any:
    """``POST /v1/flows``'s core (its request's flow run) on the container's kind of router."""
    from compactor.budget import Deadline
    from compactor.container import run_sync
    from compactor.flows_service import run_flows_request

    return run_sync(run_flows_request({"flow_ir": flow_ir, "flow_input": flow_input}, router=FLOWS_ROUTER,
                                      deadline=Deadline.after_ms(20_000)))


def passthrough(label: str) -> list[Any]:
    """The audit's flow (docs/performance.md "The admission and policy memos' memory"): an input node with a
    caller's id, read by the output node."""
    return ["flow", {label: {"kind": "input"}, "out": {"kind": "output", "inputs": [label]}}]


FLOWS_ROUTER = Router([], transport_for=lambda offer: None)  # a real router: it has the admission cache


def test_flows_of_long_node_ids_leave_the_facts_and_wirings_within_their_bounds() -> None:
    """Distinct flows through ``POST /v1/flows``'s core, untyped and typed, with node ids of 40,000 characters
    (over both kept sizes), of 3,900 (kept: their facts and wirings fill the characters bounds) and of 2 MB
    (untyped: no 1 MiB term bound): what the facts and the wirings hold stays within their bounds (counted
    from what they hold), and the small nodes and wiring of a real flow are kept and hit afterwards."""
    forget()
    held = []
    for i in range(400):
        size = 40_000 if i % 4 == 0 else 3_900
        label = f"{i}-" + "n" * size
        record = post_flows(passthrough(label), None if i % 2 else "hello")
        assert record.status == 200, record
        assert within_bounds(), i
        assert all(len(text) < 4_000 for text in admission._NODE_FACTS)  # the 40,000-character ids are not kept
        held.append((admission._node_facts_chars, admission._wirings_chars))
    for bound, counts in ((admission._NODE_FACTS_CHARS_MAX, [facts for facts, _ in held]),
                          (admission._WIRINGS_CHARS_MAX, [wirings for _, wirings in held])):
        top = counts.index(max(counts))
        assert max(counts) > bound - 8_000 and min(counts[top:]) < 8_000  # the bound was reached, and emptied
    for i in range(3):
        assert post_flows(passthrough(f"big-{i}-" + "n" * 2_000_000)).status == 200
        assert within_bounds()
    # A real flow's small nodes and wiring are kept and found again: a second admission (a new admission cache)
    # checks only its model nodes and not its graph.
    term = triage_flow()
    expected = fresh_outcome(term)
    assert same_outcome(outcome(copy.deepcopy(term), AdmissionCache()), expected)
    texts = admission._policy_free_texts(term)
    assert texts and all(text in admission._NODE_FACTS for text in texts.values())
    checked: list[Any] = []
    real_node, real_graph = admission._check_node, admission._check_graph
    admission._check_node = lambda label, node: checked.append(label) or real_node(label, node)  # type: ignore
    admission._check_graph = lambda *args: checked.append("graph") or real_graph(*args)  # type: ignore
    try:
        assert same_outcome(outcome(copy.deepcopy(term), AdmissionCache()), expected)
    finally:
        admission._check_node, admission._check_graph = real_node, real_graph  # type: ignore
    assert sorted(checked) == sorted(set(term[1]) - set(texts))  # the model nodes only
    assert within_bounds()


def test_a_node_and_a_wiring_at_their_kept_sizes_are_kept_and_one_character_more_is_not() -> None:
    base = len(dense_dumps({"kind": "output", "inputs": [""]}))
    for label in ("n" * (admission._NODE_TEXT_KEPT_MAX - base), "n" * (admission._NODE_TEXT_KEPT_MAX - base + 1)):
        forget()
        outcome(passthrough(label), AdmissionCache(), MISSING)
        text = dense_dumps({"kind": "output", "inputs": [label]})
        assert (text in admission._NODE_FACTS) is (len(text) <= admission._NODE_TEXT_KEPT_MAX) and within_bounds()
    # The wiring of passthrough(label): the id twice and "out", 16 more each, the kinds' 11 characters.
    length = (admission._WIRING_CHARS_KEPT_MAX - 62) // 2
    for label, kept in (("w" * length, True), ("w" * (length + 1), False)):
        forget()
        outcome(passthrough(label), AdmissionCache(), MISSING)
        assert admission._wiring_chars(((label, "input", ()), ("out", "output", (label,)))) == 2 * len(label) + 62
        assert bool(admission._WIRINGS) is kept and within_bounds()


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
