"""Admission of a flow term (docs/behaviour.md#flow-admission): every check runs before any effect.

Core rules (shape, kinds, options, arity, references, acyclicity, every node on an input→output
path, policies, decision questions, decision routing of llm nodes) then the host rules for typed flows (term and ``flow_input``
≤ 1 MiB and depth ≤ 32, decision questions through the host decision validation). A failure raises
:class:`FlowAdmissionError`; the HTTP layer answers ``flow_ir rejected at admission: <message>``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from itertools import chain
from types import MappingProxyType
from typing import Any, Final

from ..decision_validation import DecisionValidationError, validate_payload, validate_questions
from ..identity import fingerprint
from ..jsonutil import dense_dumps, depth_exceeds, ensure_utf8_encodable, utf8_len
from ..policy.admission import PolicyAdmissionError
from . import node_options as opts
from .canonical import Memo, canonical_order, content_key, flow_encoding, node_encoding, routing_key
from .graph import (
    DATA,
    DECISION,
    INPUT,
    KINDS,
    LLM,
    MODEL_KINDS,
    OUTPUT,
    AdmittedFlow,
    AdmittedPolicyLike,
    AdmittedRouting,
    FlowNode,
    flow_node,
)
from .decision_routing import ROUTE_QUESTION, route_question
from .values import MISSING, bounds_problem

MAX_NODES: Final = 256


class FlowAdmissionError(ValueError):
    """A flow term or flow input failed admission; ``message`` is safe to show callers."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_LABEL_QUOTED_MAX = 80  # characters of a node id an error quotes: the problem after it stays in view


def _node_error(label: str, problem: str) -> FlowAdmissionError:
    shown = label if len(label) <= _LABEL_QUOTED_MAX else label[:_LABEL_QUOTED_MAX] + "…"
    return FlowAdmissionError(f"node {json.dumps(shown, ensure_ascii=False)}: {problem}")


def admit_flow(flow_ir: Any, *, admit_policy: Callable[[Any], AdmittedPolicyLike],
               flow_input: Any = MISSING, flow_input_bytes: int | None = None,
               cache: AdmissionCache | None = None) -> AdmittedFlow:
    """Validate ``flow_ir`` (and ``flow_input`` when given), admit every node policy with
    ``admit_policy`` and compute the canonical identity. Raises :class:`FlowAdmissionError`.
    ``flow_input_bytes``: the dense size of a ``flow_input`` the host built from JSON values it measured
    itself, so that its size bound is checked without encoding it again (docs/performance.md).
    ``cache``: the host's :class:`AdmissionCache` (one per ``admit_policy``): a term admitted before is
    not admitted again, only the flow input is checked (docs/performance.md)."""
    text = None if cache is None else _exact_text(flow_ir)
    if cache is None or text is None:
        return _admit(flow_ir, admit_policy, flow_input, flow_input_bytes, None)
    key = (flow_input is not MISSING, text[0])
    known = cache.get(key, flow_ir)
    if known is not None:
        if flow_input is not MISSING:  # the term passed every check before this one when it was admitted
            _check_flow_input(flow_input, flow_input_bytes)
        return known
    admitted = _admit(flow_ir, admit_policy, flow_input, flow_input_bytes, text[1], _policy_free_texts(flow_ir))
    cache.put(key, admitted)
    return admitted


def _exact_text(flow_ir: Any) -> tuple[str, int] | None:
    """The dense JSON text of a term and its UTF-8 size, or None when it has none (admission says why)."""
    try:
        text = dense_dumps(flow_ir)
        return text, utf8_len(text)
    except (TypeError, ValueError, RecursionError):  # not JSON, NaN/Infinity, a lone surrogate, a cycle
        return None


def _policy_free_texts(flow_ir: Any) -> dict[str, str]:
    """The text of each node of a term that has a text (:func:`_exact_text`) and says it is an input, output
    or data node: the nodes whose facts are kept. Only a term the cache misses needs them."""
    nodes = flow_ir[1] if type(flow_ir) is list and len(flow_ir) == 2 and type(flow_ir[1]) is dict else {}
    return {label: dense_dumps(node) for label, node in nodes.items()
            if type(node) is dict and type(node.get("kind")) is str and node["kind"] in _POLICY_FREE}


_POLICY_FREE: Final = frozenset({INPUT, OUTPUT, DATA})


class _NodeFacts:
    """What admission learnt of a node that carries no policy (an input, output or data node), a pure
    function of the node's content whatever its flow or host: that it passed the node checks, whether it
    makes a flow typed, and its content key (docs/performance.md). ``node``: the node parsed from its
    text, never handed out; a hit needs an equal node (the text does not tell a tuple from a list)."""

    __slots__ = ("node", "typed", "key")

    def __init__(self, text: str, typed: bool, key: str) -> None:
        self.node, self.typed, self.key = json.loads(text), typed, key


# The facts of the policy-free nodes this process admitted, by the node's dense JSON text: the nodes a host's
# flows repeat (per-batch projections, selections and overlays) are checked and keyed once. Bounded by count
# and by size (docs/performance.md "The admission and policy memos' memory"): a node whose text is over
# _NODE_TEXT_KEPT_MAX characters is checked each time and never kept (the preset's longest is 240: a caller's
# megabyte-long node id in an output node's inputs is not), and once the facts hold over _NODE_FACTS_KEPT nodes
# or _NODE_FACTS_CHARS_MAX characters of texts and keys, they are emptied. _node_facts_chars: those characters.
_NODE_FACTS: dict[str, _NodeFacts] = {}
_NODE_FACTS_KEPT: Final = 4096
_NODE_TEXT_KEPT_MAX: Final = 4096
_NODE_FACTS_CHARS_MAX: Final = 1 << 20
_node_facts_chars = 0


def _known_facts(node_texts: Mapping[str, str] | None, label: Any, node: Any) -> _NodeFacts | None:
    text = None if node_texts is None else node_texts.get(label)
    facts = None if text is None else _NODE_FACTS.get(text)
    return facts if facts is not None and facts.node == node else None


def _admit(flow_ir: Any, admit_policy: Callable[[Any], AdmittedPolicyLike], flow_input: Any,
           flow_input_bytes: int | None, flow_ir_bytes: int | None,
           node_texts: Mapping[str, str] | None = None) -> AdmittedFlow:
    """Admission itself; ``flow_ir_bytes``: the term's dense size when it was measured already;
    ``node_texts``: the dense JSON text of the nodes whose facts may be known (:func:`_policy_free_texts`)."""
    nodes = _nodes_of(flow_ir)
    inputs: dict[str, list[str]] = {}
    known: dict[str, _NodeFacts] = {}
    for label, node in nodes.items():
        facts = _known_facts(node_texts, label, node)
        if facts is not None:  # an equal node passed these checks before
            known[label] = facts
            inputs[label] = node.get("inputs", [])
        else:
            inputs[label] = _check_node(label, node)
    typed = flow_input is not MISSING or any(
        known[label].typed if label in known else _makes_typed(node) for label, node in nodes.items())
    if typed:  # known nodes hold no container below their own level: the others decide the depth
        problem = bounds_problem(flow_ir, "flow_ir", flow_ir_bytes, ["flow", {
            label: node for label, node in nodes.items() if label not in known}] if known else MISSING)
        if problem:
            raise FlowAdmissionError(problem)
    elif flow_ir_bytes is None:  # a measured term was encoded to UTF-8 already
        try:
            ensure_utf8_encodable(flow_ir)
        except ValueError as exc:
            raise FlowAdmissionError(f"flow_ir: {exc}") from None
    if flow_input is not MISSING:
        _check_flow_input(flow_input, flow_input_bytes)
    input_label = _checked_graph(nodes, inputs)
    admit = _PolicyAdmitter(admit_policy)
    policies = _admit_policies(nodes, admit)
    routings = _admit_routings(nodes, admit)
    questions_bytes = _check_questions_for_host(nodes)
    admitted, keys = _canonicalise(nodes, inputs, input_label, policies, routings, typed,
                                   {label: facts.key for label, facts in known.items()}, questions_bytes)
    if node_texts is not None:
        _remember_facts(nodes, node_texts, known, keys)
    return admitted


def _remember_facts(nodes: Mapping[str, Any], node_texts: Mapping[str, str], known: Mapping[str, _NodeFacts],
                    keys: Mapping[str, str]) -> None:
    """Keep the facts of the admitted flow's policy-free nodes that were not known yet (``keys``: every
    node's content key)."""
    global _node_facts_chars
    for label, node in nodes.items():
        text = node_texts.get(label)  # None: a node (or node map) of a dict subclass, whose text was not kept
        if (text is None or len(text) > _NODE_TEXT_KEPT_MAX or node["kind"] not in _POLICY_FREE or label in known
                or depth_exceeds(node, 1)):
            continue  # (a policy-free node that passes its checks holds lists of names at most)
        key = keys[label]
        size = len(text) + len(key)
        if len(_NODE_FACTS) >= _NODE_FACTS_KEPT or _node_facts_chars + size > _NODE_FACTS_CHARS_MAX:
            _NODE_FACTS.clear()
            _node_facts_chars = 0
        if text not in _NODE_FACTS:  # (an equal text of a node that is not equal: a tuple for a list)
            _node_facts_chars += size
        _NODE_FACTS[text] = _NodeFacts(text, _makes_typed(node), key)


def _nodes_of(flow_ir: Any) -> dict[str, Any]:
    if not (isinstance(flow_ir, list) and len(flow_ir) == 2 and flow_ir[0] == "flow"
            and isinstance(flow_ir[1], dict)):
        raise FlowAdmissionError('a flow term is ["flow", {<id>: <node>, ...}]')
    nodes = flow_ir[1]
    if not 1 <= len(nodes) <= MAX_NODES:
        raise FlowAdmissionError(f"a flow has 1–{MAX_NODES} nodes, got {len(nodes)}")
    for label in nodes:
        if not isinstance(label, str):
            raise FlowAdmissionError("node ids must be strings")
    return nodes


def _check_node(label: str, node: Any) -> list[str]:
    """Kind, allowed keys, option values and input arity of one node; returns its input labels."""
    if not isinstance(node, dict):
        raise _node_error(label, "a node must be an object")
    kind = node.get("kind")
    if kind not in KINDS:
        raise _node_error(label, f"unknown kind {json.dumps(kind)}; kinds are {', '.join(KINDS)}")
    raw_inputs = node.get("inputs", [])
    if not isinstance(raw_inputs, list) or not all(isinstance(source, str) for source in raw_inputs):
        raise _node_error(label, "inputs must be an array of node ids")
    problem = (opts.unknown_key_problem(kind, node)
               or (opts.common_option_problem(node) if kind in (LLM, DECISION, DATA) else None)
               or (opts.llm_option_problem(node) if kind == LLM else None)
               or (opts.data_option_problem(node) if kind == DATA else None)
               or (opts.decision_option_problem(node) if kind == DECISION else None)
               or opts.arity_problem(kind, node, len(raw_inputs)))
    if kind in MODEL_KINDS and "policy" not in node:
        problem = problem or f"{opts.a_kind(kind)} needs a policy"
    if problem:
        raise _node_error(label, problem)
    return raw_inputs


def _makes_typed(node: Mapping[str, Any]) -> bool:
    return node["kind"] in (DATA, DECISION) or any(key in node for key in opts.TYPING_LLM_OPTIONS)


def _check_flow_input(flow_input: Any, size: int | None) -> None:
    if not isinstance(flow_input, (dict, list, str)):
        raise FlowAdmissionError("flow_input must be an object, an array or a string")
    problem = bounds_problem(flow_input, "flow_input", size)
    if problem:
        raise FlowAdmissionError(problem)


# The wirings (ids, kinds and inputs of every node, in order) that passed the graph checks, with their input
# node's id: a host's flows of the same shape are wired alike (docs/performance.md). Bounded by count and by
# size (docs/performance.md "The admission and policy memos' memory"): a wiring whose names are over
# _WIRING_CHARS_KEPT_MAX characters (:func:`_wiring_chars`) is checked each time and never kept (the preset's
# largest, 227 nodes, counts 19,388), and once the wirings hold over _WIRINGS_KEPT wirings or
# _WIRINGS_CHARS_MAX characters, they are emptied. _wirings_chars: those characters.
_WIRINGS: dict[tuple[tuple[str, str, tuple[str, ...]], ...], str] = {}
_WIRINGS_KEPT: Final = 1024
_WIRING_CHARS_KEPT_MAX: Final = 1 << 16
_WIRINGS_CHARS_MAX: Final = 1 << 20
_wirings_chars = 0


def _wiring_chars(wiring: tuple[tuple[str, str, tuple[str, ...]], ...]) -> int:
    """The characters of a wiring's ids, kinds and inputs, each id and input counted 16 more (a name's object
    takes about 50 bytes whatever its length)."""
    labels, kinds, sources = zip(*wiring)
    names = [*labels, *chain.from_iterable(sources)]
    return sum(map(len, names)) + 16 * len(names) + sum(map(len, kinds))


def _checked_graph(nodes: Mapping[str, Any], inputs: Mapping[str, list[str]]) -> str:
    """:func:`_check_graph`, once per wiring."""
    global _wirings_chars
    wiring = tuple([(label, node["kind"], tuple(inputs[label])) for label, node in nodes.items()])
    known = _WIRINGS.get(wiring)
    if known is not None:
        return known
    input_label = _check_graph(nodes, inputs)
    size = _wiring_chars(wiring)
    if size > _WIRING_CHARS_KEPT_MAX:
        return input_label
    if len(_WIRINGS) >= _WIRINGS_KEPT or _wirings_chars + size > _WIRINGS_CHARS_MAX:
        _WIRINGS.clear()
        _wirings_chars = 0
    _WIRINGS[wiring] = input_label
    _wirings_chars += size
    return input_label


def _check_graph(nodes: Mapping[str, Any], inputs: Mapping[str, list[str]]) -> str:
    """One input, one output read by nobody, closed references, no cycle, no orphan. Returns the
    input node's label."""
    by_kind: dict[str, list[str]] = {INPUT: [], OUTPUT: []}
    for label, node in nodes.items():
        by_kind.setdefault(node["kind"], []).append(label)
    for kind in (INPUT, OUTPUT):
        if len(by_kind[kind]) != 1:
            raise FlowAdmissionError(f"a flow has exactly one {kind} node, got {len(by_kind[kind])}")
    (input_label,), (output_label,) = by_kind[INPUT], by_kind[OUTPUT]
    readers: dict[str, set[str]] = {label: set() for label in nodes}
    for label, sources in inputs.items():
        for source in sources:
            if source not in nodes:
                raise _node_error(label, f"input {json.dumps(source, ensure_ascii=False)} is not a node")
            if source == output_label:
                raise _node_error(label, "the output node cannot be an input")
            readers[source].add(label)
    _check_acyclic(inputs, readers)
    reached = _closure(input_label, readers)
    feeding = _closure(output_label, {label: set(sources) for label, sources in inputs.items()})
    for label in nodes:
        if label not in reached or label not in feeding:
            raise _node_error(label, "not on a path from the input node to the output node")
    return input_label


def _check_acyclic(inputs: Mapping[str, list[str]], readers: Mapping[str, set[str]]) -> None:
    waiting = {label: len(set(sources)) for label, sources in inputs.items()}
    ready = [label for label, count in waiting.items() if count == 0]
    seen = 0
    while ready:
        label = ready.pop()
        seen += 1
        for reader in readers[label]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                ready.append(reader)
    if seen != len(inputs):
        stuck = sorted(label for label, count in waiting.items() if count > 0)
        raise _node_error(stuck[0], "the flow has a cycle through this node")


def _closure(start: str, edges: Mapping[str, set[str]]) -> set[str]:
    seen, stack = {start}, [start]
    while stack:
        for nxt in edges[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


class _PolicyAdmitter:
    """Admits policy terms with the host callable; identical terms are admitted once."""

    def __init__(self, admit_policy: Callable[[Any], AdmittedPolicyLike]) -> None:
        self.admit_policy = admit_policy
        self.by_text: dict[str, AdmittedPolicyLike] = {}
        # A term object that several nodes share is not even serialised again (the term is not changed
        # during admission; it is kept here, so its id is not reused meanwhile).
        self.by_id: dict[int, tuple[Any, AdmittedPolicyLike]] = {}

    def __call__(self, label: str, term: Any, what: str = "policy") -> AdmittedPolicyLike:
        known = self.by_id.get(id(term))
        if known is not None and known[0] is term:
            return known[1]
        try:
            text = dense_dumps(term)
        except (TypeError, ValueError) as exc:
            raise _node_error(label, f"{what} is not finite JSON ({exc})") from exc
        if text not in self.by_text:
            try:
                self.by_text[text] = self.admit_policy(term)
            except PolicyAdmissionError as exc:
                raise _node_error(label, f"{what} rejected: {exc}") from exc
        self.by_id[id(term)] = (term, self.by_text[text])
        return self.by_text[text]


def _admit_policies(nodes: Mapping[str, Any], admit: _PolicyAdmitter) -> dict[str, AdmittedPolicyLike]:
    """Admit each model node's policy."""
    return {label: admit(label, node["policy"]) for label, node in nodes.items() if node["kind"] in MODEL_KINDS}


def _admit_routings(nodes: Mapping[str, Any], admit: _PolicyAdmitter) -> dict[str, AdmittedRouting]:
    """Admit the routing policy and every choice policy of each decision-routed llm node, check its
    route question against the host decision validation and compute its routing key."""
    routings: dict[str, AdmittedRouting] = {}
    for label, node in nodes.items():
        routing = node.get("routing") if node["kind"] == LLM else None
        if routing is None:
            continue
        policy = admit(label, routing["policy"], "routing policy")
        choices = {choice_id: admit(label, choice["policy"], f"routing choice {choice_id!r} policy")
                   for choice_id, choice in routing["choices"].items()}
        # read-only: an admitted flow may be handed to several callers (AdmissionCache)
        descriptions = MappingProxyType({choice_id: choice["description"]
                                         for choice_id, choice in routing["choices"].items()})
        try:
            validate_payload({"state": {}, "questions": {
                ROUTE_QUESTION: route_question(routing["instructions"], descriptions)}})
        except DecisionValidationError as exc:
            raise _node_error(label, f"routing question: {exc.message}") from exc
        key = routing_key(routing, policy.encoding, {choice_id: p.encoding for choice_id, p in choices.items()})
        routings[label] = AdmittedRouting(
            policy=policy, instructions=routing["instructions"], descriptions=descriptions,
            choices=MappingProxyType(choices),
            fallback=routing["fallback"], min_confidence=routing.get("min_confidence", opts.DEFAULT_MIN_CONFIDENCE),
            timeout_ms=routing.get("timeout_ms", opts.DEFAULT_ROUTING_TIMEOUT_MS), key=key)
    return routings


def _check_questions_for_host(nodes: Mapping[str, Any]) -> dict[str, int]:
    """Every decision node's questions pass the host decision validation (32 000-byte bound included);
    returns their wire sizes by node (``FlowNode.questions_bytes``)."""
    sizes: dict[str, int] = {}
    for label, node in nodes.items():
        if node["kind"] != DECISION:
            continue
        try:
            sizes[label] = validate_questions(node["questions"])
        except DecisionValidationError as exc:
            raise _node_error(label, exc.message) from exc
    return sizes


def _canonicalise(nodes: Mapping[str, Any], inputs: Mapping[str, list[str]], input_label: str,
                  policies: Mapping[str, AdmittedPolicyLike], routings: Mapping[str, AdmittedRouting],
                  typed: bool, known_keys: Mapping[str, str],
                  questions_bytes: Mapping[str, int]) -> tuple[AdmittedFlow, dict[str, str]]:
    """The admitted flow and each node's content key; ``known_keys``: those known already (of nodes equal
    to nodes admitted before)."""
    memo: Memo = {}  # tables shared between nodes are encoded once
    keys = {label: known_keys[label] if label in known_keys else
            content_key(node["kind"], node, policies[label].encoding if label in policies else None,
                        routings[label].key if label in routings else None, memo)
            for label, node in nodes.items()}
    order = canonical_order(keys, inputs, input_label)
    number = {label: index for index, label in enumerate(order)}
    successors: list[list[int]] = [[] for _ in order]
    flow_nodes: list[FlowNode] = []
    for index, label in enumerate(order):
        node_inputs = tuple([number[source] for source in inputs[label]])
        if len(node_inputs) == 1:  # most nodes read one node
            successors[node_inputs[0]].append(index)
        else:
            for source in sorted(set(node_inputs)):
                successors[source].append(index)
        flow_nodes.append(flow_node(
            index, label, nodes[label]["kind"], node_inputs, nodes[label], policies.get(label),
            node_encoding(keys[label], index, node_inputs), routings.get(label), questions_bytes.get(label)))
    encoding = flow_encoding([node.encoding for node in flow_nodes])
    return AdmittedFlow(
        nodes=tuple(flow_nodes), successors=tuple(tuple(s) for s in successors), typed=typed,
        encoding=encoding, fingerprint=fingerprint(encoding)), keys


class AdmissionCache:
    """Admitted flows of one host, by the exact content of their term (docs/performance.md).

    Admission is a pure function of the term, of whether a flow input comes with it (the input itself is
    checked on every call) and of the host's policy admission, which is fixed for the host that owns the
    cache (its catalog's router). An entry is found by the term's dense JSON text and used only when the
    stored term equals the caller's (so a tuple or an integer key, which the text does not tell apart
    from a list or a string key, misses). A hit returns a new :class:`AdmittedFlow` whose nodes carry
    the caller's own node objects; what it shares with other callers is immutable. Bounded: the least
    recently used entries go first beyond ``entries`` flows or ``text_chars`` characters of terms.
    """

    def __init__(self, entries: int = 32, text_chars: int = 4_000_000) -> None:
        self.entries, self.text_chars = entries, text_chars
        self.hits = self.misses = 0
        self._flows: OrderedDict[tuple[bool, str], _Entry] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._flows)

    def get(self, key: tuple[bool, str], flow_ir: Any) -> AdmittedFlow | None:
        with self._lock:
            entry = self._flows.get(key)
            if entry is not None:
                self._flows.move_to_end(key)
        found = entry is not None and entry.matches(key[1], flow_ir)
        with self._lock:
            if found:
                self.hits += 1
            else:
                self.misses += 1
        return entry.for_caller(flow_ir[1]) if found and entry is not None else None

    def put(self, key: tuple[bool, str], admitted: AdmittedFlow) -> None:
        size = len(key[1])
        if size > self.text_chars:
            return
        entry = _Entry(admitted)
        with self._lock:
            if key in self._flows:
                return
            self._flows[key] = entry
            self._chars += size
            while len(self._flows) > self.entries or self._chars > self.text_chars:
                old, _ = self._flows.popitem(last=False)
                self._chars -= len(old[1])


class _Entry:
    """One admitted flow and the term it was admitted from: the cache's own copy, parsed from the text
    when the text is first seen again. The flow's node objects are the first caller's: never handed out
    again (a hit takes the hitting caller's) and never read."""

    __slots__ = ("flow", "term")

    def __init__(self, admitted: AdmittedFlow) -> None:
        self.flow = admitted
        self.term: Any = None

    def matches(self, text: str, flow_ir: Any) -> bool:
        if self.term is None:
            self.term = json.loads(text)  # never handed out: no caller can change it
        return bool(self.term == flow_ir)

    def for_caller(self, nodes: Mapping[str, Any]) -> AdmittedFlow:
        flow = self.flow
        return AdmittedFlow(
            nodes=tuple(flow_node(node.index, node.label, node.kind, node.inputs, nodes[node.label], node.policy,
                                  node.encoding, node.routing, node.questions_bytes) for node in flow.nodes),
            successors=flow.successors, typed=flow.typed, encoding=flow.encoding, fingerprint=flow.fingerprint)
