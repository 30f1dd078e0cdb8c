"""The admission cache (docs/performance.md): a term admitted before is taken from the host's cache, any
change of what admission reads misses it, and nothing one caller does reaches another."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from compactor.flow import AdmissionCache, FlowAdmissionError, admit_flow, normalize_flow
from compactor.flow.values import MISSING
from compactor.jsonutil import ascii_wire_size

from .fake_router import FakeRouter
from .test_routing_nodes import routed_flow
from .triage import FLOW_INPUT, POLICY, triage_flow


class CountingAdmission:
    """The fake router's policy admission, counting its calls."""

    def __init__(self) -> None:
        self.router, self.calls = FakeRouter(), 0

    def __call__(self, term: Any) -> Any:
        self.calls += 1
        return self.router.admit_policy(term)


def admit(flow: Any, cache: AdmissionCache | None, policies: Any, flow_input: Any = FLOW_INPUT) -> Any:
    return admit_flow(flow, admit_policy=policies, flow_input=flow_input, cache=cache)


def same_admission(a: Any, b: Any) -> bool:
    def node(n: Any) -> tuple[Any, ...]:
        return n.index, n.label, n.kind, n.inputs, n.encoding, n.policy, dict(n.spec), n.questions_bytes

    return (a.encoding, a.identity, a.fingerprint, a.typed, a.successors) == (
        b.encoding, b.identity, b.fingerprint, b.typed, b.successors) and [node(n) for n in a.nodes] == [
        node(n) for n in b.nodes]


def test_a_second_identical_term_is_admitted_from_the_cache() -> None:
    cache, policies = AdmissionCache(), CountingAdmission()
    first = admit(triage_flow(), cache, policies)
    calls = policies.calls
    second_term = triage_flow()  # equal content, other objects
    second = admit(second_term, cache, policies)
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)
    assert policies.calls == calls  # no policy admitted again
    uncached = admit(triage_flow(), None, CountingAdmission())
    assert same_admission(second, uncached) and same_admission(first, uncached)
    # the hit's nodes are the second caller's own node objects, as a fresh admission's would be
    assert all(node.spec is second_term[1][node.label] for node in second.nodes)
    assert normalize_flow(second) == normalize_flow(uncached)
    # a decision node carries its questions' wire size, measured at admission, to its runs
    sized = [(n.questions_bytes, ascii_wire_size(n.spec["questions"])) for n in second.nodes if n.kind == "decision"]
    assert sized and all(carried == measured for carried, measured in sized)
    assert all(n.questions_bytes is None for n in second.nodes if n.kind != "decision")


def test_decision_routed_terms_are_cached_with_read_only_routing() -> None:
    cache, policies = AdmissionCache(), CountingAdmission()
    admit(routed_flow(), cache, policies, MISSING)
    again = admit(routed_flow(), cache, policies, MISSING)
    assert cache.hits == 1
    routing = again.nodes[1].routing
    with pytest.raises(TypeError):
        routing.descriptions["fast"] = "changed"  # type: ignore[index]
    with pytest.raises(TypeError):
        routing.choices["fast"] = routing.choices["strong"]  # type: ignore[index]
    assert normalize_flow(again) == normalize_flow(admit(routed_flow(), None, CountingAdmission(), MISSING))


def changed_terms() -> list[tuple[str, Any, Any]]:
    """(what changed, term, flow input): each differs from the triage flow with its input in one respect."""
    reordered = triage_flow()
    reordered[1]["answered"]["inputs"] = ["tickets", "spam", "draft"]
    renamed = triage_flow()
    renamed[1]["sorted"] = renamed[1].pop("classify")
    for node in renamed[1].values():
        node["inputs"] = ["sorted" if i == "classify" else i for i in node.get("inputs", [])]
    tuple_inputs = triage_flow()
    tuple_inputs[1]["draft"]["inputs"] = ("support",)  # the same JSON text as a list: admission rejects it
    other_policy = copy.deepcopy(POLICY)
    other_policy[2] = ["field", "price_in"]
    return [
        ("an option", triage_flow(draft={"max_tokens": 257}), FLOW_INPUT),
        ("a policy", triage_flow(draft={"policy": other_policy}), FLOW_INPUT),
        ("a question", triage_flow(classify={"questions": {"t1": {"type": "noul", "instructions": "Urgent?"}}}),
         FLOW_INPUT),
        ("a prompt", triage_flow(draft={"system": "Reply briefly."}), FLOW_INPUT),
        ("the order of inputs", reordered, FLOW_INPUT),
        ("a node id", renamed, FLOW_INPUT),
        ("a list that is a tuple", tuple_inputs, FLOW_INPUT),
        ("an int where a float was", triage_flow(answered={"max_string_bytes": 200.0}), FLOW_INPUT),
        ("no flow input", triage_flow(), MISSING),
    ]


@pytest.mark.parametrize(("what", "term", "flow_input"), changed_terms(), ids=[c[0] for c in changed_terms()])
def test_any_change_of_what_admission_reads_misses_the_cache(what: str, term: Any, flow_input: Any) -> None:
    cache = AdmissionCache()
    admit(triage_flow(), cache, CountingAdmission())
    try:
        expected: Any = admit(copy.deepcopy(term), None, CountingAdmission(), flow_input)
    except FlowAdmissionError as exc:
        expected = exc.message
    try:
        got: Any = admit(term, cache, CountingAdmission(), flow_input)
    except FlowAdmissionError as exc:
        got = exc.message
    assert cache.hits == 0
    assert got == expected if isinstance(expected, str) else same_admission(got, expected)


def test_another_host_has_its_own_cache() -> None:
    first, second = AdmissionCache(), AdmissionCache()
    admit(triage_flow(), first, CountingAdmission())
    policies = CountingAdmission()
    admit(triage_flow(), second, policies)
    assert (second.hits, first.hits) == (0, 0) and policies.calls > 0


def test_the_flow_input_is_checked_on_every_hit() -> None:
    cache = AdmissionCache()
    admit(triage_flow(), cache, CountingAdmission())
    with pytest.raises(FlowAdmissionError) as info:
        admit(triage_flow(), cache, CountingAdmission(), {"tickets": "x" * 1_048_577})
    assert cache.hits == 1 and "flow_input exceeds 1048576 bytes" in info.value.message


def test_rejected_terms_are_not_cached() -> None:
    cache = AdmissionCache()
    bad = triage_flow(draft={"max_tokens": 0})
    for _ in range(2):
        with pytest.raises(FlowAdmissionError):
            admit(copy.deepcopy(bad), cache, CountingAdmission())
    assert (len(cache), cache.hits) == (0, 0)


def test_what_one_caller_changes_never_reaches_another() -> None:
    cache, policies = AdmissionCache(), CountingAdmission()
    uncached = admit(triage_flow(), None, CountingAdmission())
    term = triage_flow()
    first = admit(term, cache, policies)
    # the first caller changes its term and what admission handed it
    term[1]["draft"]["system"] = "Leak this."
    term[1]["classify"]["questions"]["t1"] = {"type": "noul", "instructions": "Leaked?"}
    first.nodes[0].spec["injected"] = True  # type: ignore[index]
    second = admit(triage_flow(), cache, policies)
    assert cache.hits == 1 and same_admission(second, uncached)
    # the second caller's changes do not reach a third
    for node in second.nodes:
        node.spec.clear()  # type: ignore[attr-defined]
    third = admit(triage_flow(), cache, policies)
    assert cache.hits == 2 and same_admission(third, uncached)
    # the changed term is another term: it misses, and is admitted as what it now says
    del term[1]["input"]["injected"]
    changed = admit(term, cache, policies)
    assert cache.hits == 2 and changed.encoding != uncached.encoding


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = AdmissionCache(entries=2)
    terms = [triage_flow(draft={"max_tokens": 100 + i}) for i in range(3)]
    for term in terms[:2]:
        admit(copy.deepcopy(term), cache, CountingAdmission())
    admit(copy.deepcopy(terms[0]), cache, CountingAdmission())  # used again: the second is the oldest now
    admit(copy.deepcopy(terms[2]), cache, CountingAdmission())
    assert len(cache) == 2 and cache.hits == 1
    admit(copy.deepcopy(terms[0]), cache, CountingAdmission())
    admit(copy.deepcopy(terms[1]), cache, CountingAdmission())
    assert cache.hits == 2  # the first stayed, the second was dropped
    small = AdmissionCache(text_chars=100)
    admit(triage_flow(), small, CountingAdmission())
    assert len(small) == 0  # a term over the text bound is not kept
