"""Admission (docs/behaviour.md#flow-admission): every malformed flow is rejected before any effect."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.flow import FlowAdmissionError, admit_flow

from .fake_router import FakeRouter
from .triage import FLOW_INPUT, POLICY, QUESTION, triage_flow

ROUTER = FakeRouter()
LLM = {"kind": "llm", "inputs": ["input"], "system": "Answer.", "policy": POLICY}


def admit(flow: Any, **kwargs: Any):
    return admit_flow(flow, admit_policy=ROUTER.admit_policy, **kwargs)


def rejected(flow: Any, **kwargs: Any) -> str:
    with pytest.raises(FlowAdmissionError) as info:
        admit(flow, **kwargs)
    return info.value.message


def legacy(**nodes: Any) -> list[Any]:
    base: dict[str, Any] = {"input": {"kind": "input"}, "a": dict(LLM), "output": {"kind": "output", "inputs": ["a"]}}
    base.update(nodes)
    return ["flow", {key: value for key, value in base.items() if value is not None}]


def test_triage_flow_is_admitted_with_canonical_ids() -> None:
    admitted = admit(triage_flow(), flow_input=FLOW_INPUT)
    assert admitted.typed
    assert [node.cid for node in admitted.nodes] == [f"n{i}" for i in range(8)]
    assert admitted.nodes[0].kind == "input" and admitted.nodes[-1].kind == "output"


def test_legacy_flow_is_untyped() -> None:
    assert not admit(legacy()).typed
    assert admit(legacy(), flow_input="hello").typed


def _question(**changes: Any) -> dict[str, Any]:
    question = copy.deepcopy(QUESTION)
    question.update(changes)
    return question


MALFORMED: list[tuple[str, Any, str]] = [
    ("not a list", {"flow": {}}, 'a flow term is ["flow"'),
    ("wrong tag", ["graph", {"input": {"kind": "input"}}], 'a flow term is ["flow"'),
    ("map not object", ["flow", []], 'a flow term is ["flow"'),
    ("extra element", ["flow", {}, {}], 'a flow term is ["flow"'),
    ("no nodes", ["flow", {}], "a flow has 1–256 nodes, got 0"),
    ("non-string id", ["flow", {1: {"kind": "input"}}], "node ids must be strings"),
    ("node not object", legacy(a=["llm"]), 'node "a": a node must be an object'),
    ("unknown kind", legacy(a={**LLM, "kind": "tool"}), 'node "a": unknown kind "tool"'),
    ("missing kind", legacy(a={"inputs": ["input"]}), 'node "a": unknown kind null'),
    ("inputs not array", legacy(a={**LLM, "inputs": "input"}), "inputs must be an array of node ids"),
    ("inputs not strings", legacy(a={**LLM, "inputs": ["input", None]}), "inputs must be an array of node ids"),
    ("inputs on the input node", legacy(input={"kind": "input", "inputs": ["a"]}), "takes no inputs"),
    ("unknown llm key", legacy(a={**LLM, "temperature": 0}), "option 'temperature' is not allowed on an llm node"),
    ("data option on llm", legacy(a={**LLM, "operation": "union"}), "option 'operation' is not allowed on an llm"),
    ("questions on llm", legacy(a={**LLM, "questions": {}}), "option 'questions' is not allowed"),
    ("reply bound without json", legacy(a={**LLM, "max_string_bytes": 10}), 'max_string_bytes needs output_format "json"'),
    ("reply bound of 0", legacy(a={**LLM, "output_format": "json", "max_total_string_bytes": 0}),
     "max_total_string_bytes must be an integer 1–1048576"),
    ("reply bound not an int", legacy(a={**LLM, "output_format": "json", "max_string_bytes": 1.5}),
     "max_string_bytes must be an integer 1–1048576"),
    ("names without json", legacy(a={**LLM, "keep_names": ["read_file"]}), 'keep_names needs output_format "json"'),
    ("embedding not a boolean", legacy(a={**LLM, "embed_json_text": "yes"}), "embed_json_text must be a boolean"),
    ("names not a list", legacy(a={**LLM, "output_format": "json", "keep_names": "read_file"}),
     "keep_names must be 1–256 strings of 1–512 bytes"),
    ("no names", legacy(a={**LLM, "output_format": "json", "keep_names": []}),
     "keep_names must be 1–256 strings of 1–512 bytes"),
    ("a name not a string", legacy(a={**LLM, "output_format": "json", "keep_names": ["a", 5]}),
     "keep_names must be 1–256 strings of 1–512 bytes"),
    ("a name too long", legacy(a={**LLM, "output_format": "json", "keep_names": ["é" * 257]}),
     "keep_names must be 1–256 strings of 1–512 bytes"),
    ("too many names", legacy(a={**LLM, "output_format": "json", "keep_names": [f"n{i}" for i in range(257)]}),
     "keep_names must be 1–256 strings of 1–512 bytes"),
    ("key on output", legacy(output={"kind": "output", "inputs": ["a"], "skip_empty": True}),
     "option 'skip_empty' is not allowed on an output node"),
    ("bad output_format", legacy(a={**LLM, "output_format": "yaml"}), 'output_format must be "json"'),
    ("bad on_error", legacy(a={**LLM, "on_error": "skip"}), 'on_error must be "input"'),
    ("bad context", legacy(a={**LLM, "context": "all"}), 'context must be "inputs"'),
    ("non-boolean skip_empty", legacy(a={**LLM, "skip_empty": 1}), "skip_empty must be a boolean"),
    ("max_tokens 0", legacy(a={**LLM, "max_tokens": 0}), "max_tokens must be an integer 1–4096"),
    ("max_tokens 4097", legacy(a={**LLM, "max_tokens": 4097}), "max_tokens must be an integer 1–4096"),
    ("max_tokens float", legacy(a={**LLM, "max_tokens": 12.5}), "max_tokens must be an integer 1–4096"),
    ("max_tokens bool", legacy(a={**LLM, "max_tokens": True}), "max_tokens must be an integer 1–4096"),
    ("timeout_ms 0", legacy(a={**LLM, "timeout_ms": 0}), "timeout_ms must be an integer 1–40000"),
    ("timeout_ms 40001", legacy(a={**LLM, "timeout_ms": 40001}), "timeout_ms must be an integer 1–40000"),
    ("system missing", legacy(a={k: v for k, v in LLM.items() if k != "system"}), "system must be a string"),
    ("system not string", legacy(a={**LLM, "system": ["Answer."]}), "system must be a string"),
    ("template not string", legacy(a={**LLM, "template": 3}), "template must be a string"),
    ("policy missing", legacy(a={k: v for k, v in LLM.items() if k != "policy"}), "an llm node needs a policy"),
    ("policy not a Policy", legacy(a={**LLM, "policy": ["zero"]}), 'node "a": policy rejected: ir: '),
    ("policy unknown op", legacy(a={**LLM, "policy": ["policy", ["frobnicate"], ["zero"], ["argmax"], ["id"],
                                                      ["always", {"action": "next_candidate"}]]}),
     "frobnicate"),
    ("routing", legacy(a={**LLM, "routing": {}}), "routing"),
    ("no input node", ["flow", {"a": {**LLM, "inputs": ["a"]}, "output": {"kind": "output", "inputs": ["a"]}}],
     "exactly one input node, got 0"),
    ("two input nodes", legacy(other={"kind": "input"}), "exactly one input node, got 2"),
    ("no output node", ["flow", {"input": {"kind": "input"}, "a": dict(LLM)}], "exactly one output node, got 0"),
    ("two output nodes", legacy(out2={"kind": "output", "inputs": ["a"]}), "exactly one output node, got 2"),
    ("output without input", legacy(output={"kind": "output", "inputs": []}), "exactly 1 input"),
    ("output with two inputs", legacy(output={"kind": "output", "inputs": ["a", "input"]}), "exactly 1 input"),
    ("output referenced", legacy(b={**LLM, "inputs": ["output"]}), "the output node cannot be an input"),
    ("model node without inputs", legacy(a={**LLM, "inputs": []}), "an llm node takes 1–32 inputs"),
    ("model node with 33 inputs", legacy(a={**LLM, "inputs": ["input"] * 33}), "an llm node takes 1–32 inputs"),
    ("dangling reference", legacy(a={**LLM, "inputs": ["nowhere"]}), 'input "nowhere" is not a node'),
    ("cycle", legacy(a={**LLM, "inputs": ["input", "b"]}, b={**LLM, "inputs": ["a"]}), "cycle"),
    ("self loop", legacy(a={**LLM, "inputs": ["a"]}), "cycle"),
    ("orphan", legacy(dangling={**LLM, "inputs": ["input"]}), 'node "dangling": not on a path'),
]


@pytest.mark.parametrize(("flow", "expected"), [(f, m) for _, f, m in MALFORMED],
                         ids=[name for name, _, _ in MALFORMED])
def test_malformed_flow_is_rejected(flow: Any, expected: str) -> None:
    assert expected in rejected(flow)


def test_too_many_nodes() -> None:
    nodes = {f"x{i}": {**LLM, "inputs": ["input"]} for i in range(255)}
    nodes.update({"input": {"kind": "input"}, "output": {"kind": "output", "inputs": ["x0"]}})
    assert "a flow has 1–256 nodes, got 257" in rejected(["flow", nodes])


DECISION_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown key", {"template": "$1"}, "option 'template' is not allowed on a decision node"),
    ("output_format", {"output_format": "json"}, "option 'output_format' is not allowed"),
    ("no questions", {"questions": {}}, "questions must be an object with 1–32 questions"),
    ("33 questions", {"questions": {f"q{i}": QUESTION for i in range(33)}}, "1–32 questions"),
    ("question name too long", {"questions": {"q" * 65: QUESTION}}, "question names must be 1–64 bytes"),
    ("question not object", {"questions": {"q": "support?"}}, "must be an object"),
    ("no instructions", {"questions": {"q": _question(instructions="")}}, "instructions must be 1–2000 bytes"),
    ("instructions over 2000 bytes", {"questions": {"q": _question(instructions="é" * 1001)}},
     "instructions must be 1–2000 bytes"),
    ("unknown type", {"questions": {"q": _question(type="rank")}}, "type must be choice, score or noul"),
    ("no criteria", {"questions": {"q": _question(criteria={})}}, "choice criteria must be an object"),
    ("empty description", {"questions": {"q": _question(criteria={"a": ""})}}, "criterion descriptions"),
    ("score with one", {"questions": {"q": _question(type="score", criteria=["low"])}}, "score criteria"),
    ("noul wrong keys", {"questions": {"q": _question(type="noul", criteria={"yes": "y", "no": "n"})}},
     "noul criteria"),
    ("unsupported question field (host)", {"questions": {"q": _question(weight=2)}}, "Unsupported question field."),
    ("over 32000 bytes (host)", {"questions": {f"q{i}": _question(instructions="x" * 1990) for i in range(17)}},
     "Decision request exceeds 32000 bytes."),
    ("bad skip_empty", {"skip_empty": "yes"}, "skip_empty must be a boolean"),
    ("timeout too large", {"timeout_ms": 50000}, "timeout_ms must be an integer 1–40000"),
    ("policy missing", {"policy": None}, "a decision node needs a policy"),
    ("cache_prefix not a list", {"cache_prefix": "t1"}, "cache_prefix must be an array of 1–16 distinct names"),
    ("cache_prefix empty", {"cache_prefix": []}, "cache_prefix must be an array"),
    ("cache_prefix repeats", {"cache_prefix": ["t1", "t1"]}, "cache_prefix must be an array"),
    ("cache_prefix empty name", {"cache_prefix": [""]}, "cache_prefix must be an array"),
    ("cache_prefix 17 names", {"cache_prefix": [f"m{i}" for i in range(17)]}, "cache_prefix must be an array"),
]


@pytest.mark.parametrize(("changes", "expected"), [(c, m) for _, c, m in DECISION_CASES],
                         ids=[name for name, _, _ in DECISION_CASES])
def test_malformed_decision_node_is_rejected(changes: dict[str, Any], expected: str) -> None:
    message = rejected(triage_flow(classify=changes), flow_input=FLOW_INPUT)
    assert message.startswith('node "classify": ')
    assert expected in message


DATA_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("unknown operation", "tickets", {"operation": "filter"}, "operation must be one of"),
    ("unknown key", "tickets", {"equals": "x"}, "option 'equals' is not allowed on a data node"),
    ("empty path", "tickets", {"path": []}, "path must be 1–16 strings"),
    ("17 path steps", "tickets", {"path": ["a"] * 17}, "path must be 1–16 strings"),
    ("path step too long", "tickets", {"path": ["a" * 129]}, "path must be 1–16 strings"),
    ("path step not string", "tickets", {"path": [1]}, "path must be 1–16 strings"),
    ("project two inputs", "tickets", {"inputs": ["input", "input"]}, "project takes 1 inputs, got 2"),
    ("select missing equals", "support", {"equals": None}, "equals must be a string of 1–128 bytes"),
    ("select empty field", "support", {"field": ""}, "field must be a string of 1–128 bytes"),
    ("select one input", "support", {"inputs": ["tickets"]}, "select takes 2 inputs, got 1"),
    ("overlay five inputs", "answered", {"inputs": ["tickets", "draft", "spam", "support", "tickets"]},
     "overlay takes 2–4 inputs, got 5"),
    ("overlay max 0", "answered", {"max_string_bytes": 0}, "max_string_bytes must be an integer 1–1048576"),
    ("overlay min above max", "answered", {"min_string_bytes": 201}, "min_string_bytes must be an integer 1–200"),
    ("overlay only_shrink", "answered", {"only_shrink": "yes"}, "only_shrink must be a boolean"),
    ("bad on_error", "answered", {"on_error": "skip"}, 'on_error must be "input"'),
    ("skip_empty on data", "answered", {"skip_empty": True}, "option 'skip_empty' is not allowed on a data node"),
]


@pytest.mark.parametrize(("node", "changes", "expected"), [(n, c, m) for _, n, c, m in DATA_CASES],
                         ids=[name for name, *_ in DATA_CASES])
def test_malformed_data_node_is_rejected(node: str, changes: dict[str, Any], expected: str) -> None:
    message = rejected(triage_flow(**{node: changes}), flow_input=FLOW_INPUT)
    assert message.startswith(f'node "{node}": ') and expected in message


def test_union_arity() -> None:
    flow = legacy(u={"kind": "data", "operation": "union", "inputs": ["input"] * 33},
                  output={"kind": "output", "inputs": ["u"]}, a=None)
    assert "a data node takes 1–32 inputs" in rejected(flow)


def test_typed_flow_term_over_one_mebibyte() -> None:
    flow = triage_flow(draft={"system": "x" * 1_048_576})
    assert rejected(flow).startswith("flow_ir exceeds 1048576 bytes")


def test_untyped_flow_term_has_no_size_bound() -> None:
    admit(legacy(a={**LLM, "system": "x" * 1_048_576}))


def test_typed_flow_term_deeper_than_32() -> None:
    pred: Any = ["meets_req"]
    for _ in range(30):
        pred = ["not", pred]
    deep = ["policy", pred, ["zero"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]
    assert "flow_ir is nested deeper than 32 levels" in rejected(triage_flow(draft={"policy": deep}))


def nested(levels: int) -> Any:
    """A list whose innermost list sits ``levels - 1`` levels below it."""
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(("flow_input", "expected"), [
    (3, "flow_input must be an object, an array or a string"),
    ({"blob": "x" * 1_048_576}, "flow_input exceeds 1048576 bytes"),
    (["a", nested(33)], "flow_input is nested deeper than 32 levels"),
    ({"n": float("nan")}, "flow_input is not finite JSON"),
])
def test_bad_flow_input(flow_input: Any, expected: str) -> None:
    assert expected in rejected(triage_flow(), flow_input=flow_input)


def test_flow_input_at_the_bounds_is_admitted() -> None:
    admit(triage_flow(), flow_input={"tickets": {}, "deep": nested(32)})
    admit(triage_flow(), flow_input="x" * (1_048_576 - 2))


def test_identical_policies_are_admitted_once() -> None:
    seen: list[Any] = []

    def counting(term: Any):
        seen.append(term)
        return ROUTER.admit_policy(term)

    admit_flow(triage_flow(), admit_policy=counting, flow_input=FLOW_INPUT)
    assert len(seen) == 1


@pytest.mark.parametrize("operation", [["union"], {"op": "union"}, 7, None])
def test_non_string_operation_is_an_admission_error(operation: Any) -> None:
    flow = ["flow", {"input": {"kind": "input"},
                     "d": {"kind": "data", "operation": operation, "inputs": ["input"]},
                     "output": {"kind": "output", "inputs": ["d"]}}]
    assert "operation must be one of" in rejected(flow)


def test_lone_surrogate_in_an_untyped_term_is_an_admission_error() -> None:
    assert "lone surrogate" in rejected(legacy(a={**LLM, "system": "a\ud800b"}))


def test_exactly_32_inputs_and_256_nodes_are_admitted() -> None:
    sources = {f"s{i}": {"kind": "data", "operation": "project", "inputs": ["input"], "path": [f"k{i}"]}
               for i in range(32)}
    flow = ["flow", {"input": {"kind": "input"}, **sources,
                     "u": {"kind": "data", "operation": "union", "inputs": list(sources)},
                     "output": {"kind": "output", "inputs": ["u"]}}]
    admit(flow)
    chain = {"input": {"kind": "input"}}
    previous = "input"
    for i in range(254):
        chain[f"p{i}"] = {"kind": "data", "operation": "union", "inputs": [previous]}
        previous = f"p{i}"
    chain["output"] = {"kind": "output", "inputs": [previous]}
    assert len(chain) == 256
    admit(["flow", chain])


def test_cache_prefix_is_a_hint_outside_the_identity() -> None:
    """Where a provider's prompt cache may end changes what is sent, never what the flow computes."""
    hinted = admit(triage_flow(classify={"cache_prefix": ["t1", "t2"]}), flow_input=FLOW_INPUT)
    plain = admit(triage_flow(), flow_input=FLOW_INPUT)
    assert hinted.identity == plain.identity and hinted.fingerprint == plain.fingerprint


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=255), st.text(max_size=5), st.sampled_from(["llm", "decision", "data"]),
       st.lists(st.integers(min_value=0, max_value=255), max_size=4).map(tuple),
       st.dictionaries(st.text(max_size=3), st.integers(), max_size=3), st.text(max_size=20),
       st.none() | st.integers(min_value=0, max_value=32_000))
def test_flow_node_is_the_constructors_node(index: int, label: str, kind: str, inputs: tuple[int, ...],
                                             spec: dict[str, int], encoding: str, questions_bytes: int | None) -> None:
    """``graph.flow_node`` (admission's nodes, made slot by slot) equals ``FlowNode(...)`` field by field and
    as a whole, and is as frozen."""
    import dataclasses

    from compactor.flow.graph import FlowNode, flow_node

    policy, routing = object(), object()
    made = flow_node(index, label, kind, inputs, spec, policy, encoding, routing, questions_bytes)  # type: ignore[arg-type]
    expected = FlowNode(index=index, label=label, kind=kind, inputs=inputs, spec=spec, policy=policy,  # type: ignore[arg-type]
                        encoding=encoding, routing=routing, questions_bytes=questions_bytes)  # type: ignore[arg-type]
    assert type(made) is FlowNode and made == expected and repr(made) == repr(expected)
    assert [getattr(made, f.name) for f in dataclasses.fields(FlowNode)] == \
        [getattr(expected, f.name) for f in dataclasses.fields(FlowNode)]
    defaults = flow_node(index, label, kind, inputs, spec, policy, encoding)  # type: ignore[arg-type]
    assert defaults.routing is None and defaults.questions_bytes is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.index = index + 1  # type: ignore[misc]


def test_an_error_quotes_a_long_node_id_shortened_and_keeps_its_problem() -> None:
    label = "n" * 4_000_000
    flow = triage_flow()
    flow[1][label] = {"kind": "nonsense", "inputs": ["input"]}

    message = rejected(flow)

    assert message.startswith('node "' + "n" * 80 + '…": unknown kind "nonsense"') and len(message) < 300
