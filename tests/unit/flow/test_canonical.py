"""Canonical identity (docs/behaviour.md#canonical-identity): golden vector, typed options encoding, rename
invariance."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.flow import admit_flow, normalize_flow
from compactor.flow.canonical import encode_typed, lua_number, quote

from .fake_router import FakeRouter
from .triage import FLOW_INPUT, POLICY, triage_flow, relabel

ROUTER = FakeRouter()
GOLDEN_POLICY = ["policy", ["meets_req"], ["field", "context"], ["argmax"], ["id"],
                 ["always", {"action": "next_candidate"}]]
GOLDEN = ('sigma-flow/v1:((input n0) (llm n1 system="Answer." policy=sigma-pol/v2:(policy (meets_req) '
          '(field "context") (argmax) (id) (always {"action":"next_candidate"})) inputs=[n0]) (output n2 inputs=[n1]))')


def admit(flow: Any):
    return admit_flow(flow, admit_policy=ROUTER.admit_policy)


def golden_flow(**labels: str) -> list[Any]:
    i, a, o = labels.get("i", "input"), labels.get("a", "answer"), labels.get("o", "output")
    return ["flow", {i: {"kind": "input"},
                     a: {"kind": "llm", "inputs": [i], "system": "Answer.", "policy": GOLDEN_POLICY},
                     o: {"kind": "output", "inputs": [a]}}]


def expected_fingerprint(encoding: str) -> str:
    h1, h2 = 5381, 52711
    for byte in encoding.encode("utf-8"):
        h1 = (h1 * 31 + byte) % 2147483647
        h2 = (h2 * 37 + byte) % 2147483629
    return f"{h1}-{h2}"


def test_golden_legacy_vector() -> None:
    admitted = admit(golden_flow())
    assert admitted.encoding == GOLDEN
    assert admitted.fingerprint == expected_fingerprint(GOLDEN)
    assert admitted.identity == hashlib.sha256(GOLDEN.encode()).hexdigest()
    assert admit(golden_flow(i="start", a="x", o="end")).encoding == GOLDEN


def test_normalize_output() -> None:
    normalized = normalize_flow(admit(golden_flow(a="x")))
    assert normalized == {
        "flow_ir": ["flow", {"n0": {"kind": "input"},
                             "n1": {"kind": "llm", "inputs": ["n0"], "system": "Answer.", "policy": GOLDEN_POLICY},
                             "n2": {"kind": "output", "inputs": ["n1"]}}],
        "encoded": GOLDEN, "fingerprint": expected_fingerprint(GOLDEN), "version": "sigma-flow/v1"}


def test_normalized_term_readmits_to_the_same_encoding() -> None:
    first = admit_flow(triage_flow(), admit_policy=ROUTER.admit_policy, flow_input=FLOW_INPUT)
    again = admit(normalize_flow(first)["flow_ir"])
    assert again.encoding == first.encoding


def test_policies_are_normalised_in_identity() -> None:
    reordered = ["policy", ["and", ["not", ["is", "disabled"]], ["meets_req"], ["top"]]] + POLICY[2:]
    assert admit(triage_flow(draft={"policy": reordered})).encoding == admit(triage_flow()).encoding


def test_typed_option_encoding() -> None:
    assert encode_typed({"operation": "select", "field": "choice", "equals": "x"}) == (
        "t3:s5:fields6:choices6:equalss1:xs9:operations6:select")
    assert encode_typed({"path": ["a", "bé"]}) == "t1:s4:patht2:n1:s1:an2:s3:bé"
    assert encode_typed({"skip_empty": True, "only_shrink": False, "max_tokens": 512}) == (
        "t3:s10:max_tokensn512:s10:skip_emptyb1s11:only_shrinkb0")
    # keys sort as encoded strings: "n10:" < "n11:" < "n1:" < "n2:"
    assert encode_typed(list("abcdefghijk"))[:30] == "t11:n10:s1:jn11:s1:kn1:s1:an2:"
    assert encode_typed({"criteria": None, "type": "noul"}) == "t1:s4:types4:noul"


def test_triage_node_encodings() -> None:
    admitted = admit_flow(triage_flow(), admit_policy=ROUTER.admit_policy, flow_input=FLOW_INPUT)
    encodings = [node.encoding for node in admitted.nodes]
    assert encodings[0] == "(input n0)"
    assert encodings[1] == "(data n1 data=t2:s4:patht1:n1:s7:ticketss9:operations7:project inputs=[n0])"
    assert encodings[-1] == "(output n7 inputs=[n6])"
    draft = next(n for n in admitted.nodes if n.label == "draft")
    assert draft.encoding.startswith('(llm n')
    assert ' system="Write a short first reply' in draft.encoding and " data=t6:" in draft.encoding


@pytest.mark.parametrize(("value", "text"), [
    (512, "512"), (-3, "-3"), (0.5, "0.5"), (2.0, "2.0"), (1e20, "1e+20"), (0.1, "0.1"), (1 / 3, "0.33333333333333"),
])
def test_lua_number(value: float, text: str) -> None:
    assert lua_number(value) == text


def test_quote_escapes() -> None:
    assert quote('a"b\\c\nd\re\tf') == '"a\\"b\\\\c\\nd\\re\\tf"'


SEMANTIC_CHANGES = [
    {"support": {"equals": "billing"}},
    {"draft": {"skip_empty": False}},
    {"draft": {"skip_empty": None}},
    {"draft": {"max_tokens": 255}},
    {"draft": {"system": "Reply briefly."}},
    {"draft": {"template": "$1"}},
    {"draft": {"context": None}},
    {"draft": {"on_error": None}},
    {"classify": {"questions": {"t1": {"type": "noul", "instructions": "Urgent?"}}}},
    {"classify": {"timeout_ms": 7001}},
    {"answered": {"max_string_bytes": 199}},
    {"answered": {"min_string_bytes": 2}},
    {"answered": {"only_shrink": False}},
    {"support": {"inputs": ["classify", "tickets"]}},
    {"draft": {"policy": ["policy", ["meets_req"], ["zero"], ["argmax"], ["id"], ["always", {"action": "abort"}]]}},
]


@pytest.mark.parametrize("changes", SEMANTIC_CHANGES, ids=[str(c) for c in SEMANTIC_CHANGES])
def test_every_semantic_option_changes_the_fingerprint(changes: dict[str, Any]) -> None:
    base = admit(triage_flow())
    changed = admit(triage_flow(**changes))
    assert changed.fingerprint != base.fingerprint
    assert changed.encoding != base.encoding


LABELS = ["input", "tickets", "classify", "support", "draft", "spam", "answered", "output"]


@settings(max_examples=60, deadline=None)
@given(st.permutations(list(range(100, 108))), st.sampled_from(["", "x", "Z_", "é"]))
def test_renaming_never_changes_identity(numbers: list[int], prefix: str) -> None:
    names = {label: f"{prefix}{n}" for label, n in zip(LABELS, numbers)}
    base = admit(triage_flow())
    renamed = admit(relabel(triage_flow(), names))
    assert renamed.encoding == base.encoding and renamed.fingerprint == base.fingerprint
    assert [n.kind for n in renamed.nodes] == [n.kind for n in base.nodes]


def _twin_chains(first: str, second: str) -> list[Any]:
    """Two chains whose heads are identical; only the nodes below them differ."""
    head = {"kind": "llm", "inputs": ["input"], "system": "Same.", "policy": GOLDEN_POLICY}
    return ["flow", {
        "input": {"kind": "input"},
        first: dict(head),
        second: dict(head),
        "x_tail": {"kind": "llm", "inputs": [first], "system": "x", "policy": GOLDEN_POLICY},
        "y_tail": {"kind": "llm", "inputs": [second], "system": "y", "policy": GOLDEN_POLICY},
        "join": {"kind": "llm", "inputs": ["x_tail", "y_tail"], "system": "join", "policy": GOLDEN_POLICY},
        "output": {"kind": "output", "inputs": ["join"]},
    }]


def test_ties_between_identical_nodes_do_not_depend_on_names() -> None:
    assert admit(_twin_chains("a", "b")).encoding == admit(_twin_chains("b", "a")).encoding


def reference_typed(value: Any) -> str:
    """The typed encoding by its definition: one call per value, keys sorted with their items."""
    from collections.abc import Mapping, Sequence

    if isinstance(value, str):
        return f"s{len(value.encode('utf-8'))}:{value}"
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, (int, float)):
        return f"n{lua_number(value)}:"
    if isinstance(value, Mapping):
        pairs = [(reference_typed(key), reference_typed(item)) for key, item in value.items() if item is not None]
    elif isinstance(value, Sequence):
        pairs = [(f"n{position}:", reference_typed(item)) for position, item in enumerate(value, start=1)
                 if item is not None]
    else:
        raise TypeError(type(value).__name__)
    return f"t{len(pairs)}:" + "".join(key + item for key, item in sorted(pairs))


class IntLike(int):
    """An int subclass (as an IntEnum would be): encoded through the general path."""


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**20, max_value=10**20),
                    st.integers(min_value=0, max_value=50).map(IntLike),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                    st.sampled_from(["é", "日本", "a\"b", "\u2028", ""]))
TYPED_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=14), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.one_of(st.text(max_size=6), st.integers(min_value=-3, max_value=3)), inner, max_size=12)),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(TYPED_VALUES)
def test_typed_encoding_equals_its_definition(value: Any) -> None:
    table = {"a": value, "b": [value, value], "c": {"x": value}}  # shared subvalues, encoded once with a memo
    try:
        expected = reference_typed(table)
    except TypeError:
        return
    assert encode_typed(table) == expected
    assert encode_typed(table, {}) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(alphabet=st.characters(max_codepoint=127), max_size=8), st.sampled_from(["é", ""])),
                max_size=40), st.booleans())
def test_a_list_of_strings_equals_its_definition(names: list[str], shared: bool) -> None:
    """A list of ASCII strings (names, paths) takes its members in the order of their keys without building
    pairs (``n10:`` sorts before ``n2:``); any other list takes the pairs. Both equal the definition."""
    table = {"names": names, "again": names} if shared else {"names": names}
    assert encode_typed(names) == reference_typed(names)
    assert encode_typed(table, {}) == reference_typed(table)
    assert encode_typed([*names, None]) == reference_typed([*names, None])
