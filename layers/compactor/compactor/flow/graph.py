"""The admitted form of a flow: nodes in canonical order with resolved inputs and admitted policies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..records import record

INPUT, OUTPUT, LLM, DECISION, DATA = "input", "output", "llm", "decision", "data"
KINDS = (INPUT, OUTPUT, LLM, DECISION, DATA)
MODEL_KINDS = frozenset({LLM, DECISION})


class PolicyTermLike(Protocol):
    """A normal-form policy (``policy.Policy``)."""

    @property
    def term(self) -> Any: ...


class AdmittedPolicyLike(Protocol):
    """What the runtime needs from an admitted Σ_pol policy (the router's ``AdmittedPolicy``)."""

    @property
    def policy(self) -> PolicyTermLike: ...

    @property
    def encoding(self) -> str:
        """The sigma-pol/v2 encoding, host envelope included."""
        ...

    @property
    def fingerprint(self) -> str: ...


@record(frozen=True, slots=True)
class AdmittedRouting:
    """The admitted ``routing`` record of a decision-routed llm node (docs/behaviour.md#decision-routing), defaults applied."""

    policy: AdmittedPolicyLike  # the routing decision's policy (decisions protocol)
    instructions: str
    descriptions: Mapping[str, str]  # choice id -> description, in submitted order
    choices: Mapping[str, AdmittedPolicyLike]  # choice id -> the policy that runs the generation
    fallback: str  # a choice id
    min_confidence: float
    timeout_ms: int
    key: str  # the routing key of the node's encoding


@record(frozen=True, slots=True)
class FlowNode:
    """One admitted node. ``spec`` is the submitted node object: read it, never mutate it."""

    index: int  # canonical number: the node's id is ``n<index>``
    label: str  # the id the node had in the submitted term
    kind: str
    inputs: tuple[int, ...]  # canonical numbers of the predecessors, in their semantic order
    spec: Mapping[str, Any]
    policy: AdmittedPolicyLike | None
    encoding: str  # this node's part of the sigma-flow/v1 encoding
    routing: AdmittedRouting | None = None  # decision-routed llm nodes only
    # decision nodes: the questions' ASCII wire size, measured when they passed the host validation at
    # admission (its states are checked against the 32 000-byte bound with it: docs/performance.md)
    questions_bytes: int | None = None

    @property
    def cid(self) -> str:
        """The canonical id ``n<index>``."""
        return f"n{self.index}"

    def option(self, key: str, default: Any = None) -> Any:
        """A node option as submitted, or ``default``."""
        return self.spec.get(key, default)


# Each field's slot setter, in field order: :func:`flow_node` sets them directly.
_FLOW_NODE_SLOTS = tuple(FlowNode.__dict__[name].__set__ for name in (
    "index", "label", "kind", "inputs", "spec", "policy", "encoding", "routing", "questions_bytes"))


def flow_node(index: int, label: str, kind: str, inputs: tuple[int, ...], spec: Mapping[str, Any],
              policy: AdmittedPolicyLike | None, encoding: str, routing: AdmittedRouting | None = None,
              questions_bytes: int | None = None) -> FlowNode:
    """``FlowNode(...)`` of these fields, made with each slot set directly: the frozen record's ``__init__``
    sets every field through ``object.__setattr__``, about twice the time for a node, and admission makes
    one per node (docs/performance.md). The same node as the constructor's (a test compares them)."""
    node = _new(FlowNode)
    set_index, set_label, set_kind, set_inputs, set_spec, set_policy, set_encoding, set_routing, set_bytes = \
        _FLOW_NODE_SLOTS
    set_index(node, index)
    set_label(node, label)
    set_kind(node, kind)
    set_inputs(node, inputs)
    set_spec(node, spec)
    set_policy(node, policy)
    set_encoding(node, encoding)
    set_routing(node, routing)
    set_bytes(node, questions_bytes)
    return node


_new = object.__new__


@record(frozen=True, slots=True)
class AdmittedFlow:
    """A flow that passed admission, with its canonical identity. ``nodes[k].index == k``."""

    nodes: tuple[FlowNode, ...]
    successors: tuple[tuple[int, ...], ...]  # per canonical index, the nodes that read it
    typed: bool
    encoding: str  # sigma-flow/v1 encoding
    fingerprint: str  # double-hash fingerprint of the encoding

    @property
    def identity(self) -> str:
        """SHA-256 of the encoding, computed when asked: a run, a response and a record read only the
        fingerprint, so admission does not hash the encoding a second time (docs/performance.md)."""
        from ..identity import sha256_identity  # where the fingerprint's module is loaded already

        return sha256_identity(self.encoding)

    @property
    def input_node(self) -> FlowNode:
        return self.nodes[0]

    @property
    def output_node(self) -> FlowNode:
        return self.nodes[-1]
