"""Splitting an admitted flow into independent components and merging their results back.

A flow whose output reads one ``data`` node (the *join*, e.g. a ``union``) can be cut there: the
nodes above the join fall into connected components (sub-graphs that share nothing but the input
node). Each component becomes a self-contained flow (its own input node, its nodes with their
submitted labels, an output reading the component's *sink*, the one join input inside it), plus the
slice of the flow input its readers need. The components can then run anywhere (another thread,
process or machine) with :func:`scheduler.run_flow` (their results travel as
:func:`~.result.result_to_json`); :func:`merge_results` maps their traces back to
the canonical ids of the whole flow, runs the join locally and returns exactly the
:class:`~.result.FlowResult` that running the whole flow in one scheduler produces: same
``flow_nodes`` entries in the same order, same fingerprint, same cost and token aggregation.

Differences from one scheduler, by construction: components never cancel one another (a node that
fails without ``on_error`` in one component does not stop the others; the flow still fails at that
node), and a component that cannot be run remotely is replaced by :func:`unavailable_result`, the
run in which every model call of that component failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..budget import Deadline
from ..records import record
from .admit import admit_flow
from .execute import FAILED, execute_node
from .graph import DATA, INPUT, OUTPUT, AdmittedFlow, AdmittedPolicyLike, FlowNode
from .result import FlowResult
from .scheduler import run_flow
from .trace import aggregate
from .values import MISSING

# The local run standing in for an unavailable component has no real calls to wait for.
UNAVAILABLE_RUN_BUDGET_MS: Final = 60_000
# Compiled on first use by ``re``'s cache, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_CANCELLED_AT = r"(flow stopped at node )(n\d+)"


class ComponentUnavailable(Exception):
    """Raised for every model call of a component that could not be run where it was sent."""


@record(frozen=True)
class Component:
    """One independent sub-graph as a self-contained flow."""

    index: int
    flow_ir: list[Any]  # ["flow", {...}] with the submitted labels
    admitted: AdmittedFlow  # its own canonical identity (ids differ from the whole flow's)
    sink: int  # canonical index, in the whole flow, of the node its output reads
    to_whole: Mapping[str, str]  # component canonical id -> whole-flow canonical id

    def input_slice(self, whole: Any) -> Any:
        """The part of the whole flow's input value this component's readers can see."""
        readers = [node for node in self.admitted.nodes if 0 in node.inputs]
        return input_slice(readers, whole)

    def payload(self, start_value: Any, conversation: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """What a worker needs to run this component: ``{"flow_ir", "flow_input", "conversation"?}``."""
        body: dict[str, Any] = {"flow_ir": self.flow_ir, "flow_input": self.input_slice(start_value)}
        if conversation:
            body["conversation"] = [dict(message) for message in conversation]
        return body


@record(frozen=True)
class Partition:
    """A flow cut at its join into independent components."""

    flow: AdmittedFlow
    join: FlowNode
    components: tuple[Component, ...]
    component_of: Mapping[int, int]  # whole-flow index of a join input -> component index


def partition_flow(flow: AdmittedFlow, admit_policy: Callable[[Any], AdmittedPolicyLike]) -> Partition | None:
    """The components of ``flow``, or ``None`` when it has no join to cut at: the output does not
    read a data node, or some component feeds the join through more than one node."""
    nodes = flow.nodes
    join = nodes[flow.output_node.inputs[0]]
    if join.kind != DATA:
        return None
    owner = _ancestor_groups(flow, join)
    groups: dict[int, list[int]] = {}
    for index, root in owner.items():
        groups.setdefault(root, []).append(index)
    sinks: dict[int, set[int]] = {}
    for source in join.inputs:
        if source == 0:
            return None  # the join reads the input itself: nothing independent above it
        sinks.setdefault(owner[source], set()).add(source)
    if any(len(found) != 1 for found in sinks.values()):
        return None
    components: list[Component] = []
    component_of: dict[int, int] = {}
    roots = sorted(groups, key=lambda root: min(groups[root]))
    for number, root in enumerate(roots):
        (sink,) = sinks[root]
        members = sorted(groups[root])
        flow_ir = _component_term(flow, members, sink)
        admitted = admit_flow(flow_ir, admit_policy=admit_policy)
        by_label = {node.label: node.index for node in nodes}
        to_whole = {node.cid: f"n{by_label[node.label]}" for node in admitted.nodes
                    if node.kind not in (INPUT, OUTPUT)}
        components.append(Component(number, flow_ir, admitted, sink, to_whole))
        component_of[sink] = number
    return Partition(flow, join, tuple(components), component_of)


def _ancestor_groups(flow: AdmittedFlow, join: FlowNode) -> dict[int, int]:
    """Union-find over the nodes other than input, join and output: nodes connected by an edge
    share a group. Returns node index -> group root."""
    parent: dict[int, int] = {}

    def find(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    inner = [node for node in flow.nodes if node.kind not in (INPUT, OUTPUT) and node.index != join.index]
    for node in inner:
        parent[node.index] = node.index
    for node in inner:
        for source in node.inputs:
            if source in parent:
                a, b = find(source), find(node.index)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return {index: find(index) for index in parent}


def _component_term(flow: AdmittedFlow, members: Sequence[int], sink: int) -> list[Any]:
    inputs, output = flow.input_node, flow.output_node
    nodes: dict[str, Any] = {inputs.label: dict(inputs.spec)}
    for index in members:
        nodes[flow.nodes[index].label] = dict(flow.nodes[index].spec)
    nodes[output.label] = {"kind": OUTPUT, "inputs": [flow.nodes[sink].label]}
    return ["flow", nodes]


def input_slice(readers: Sequence[FlowNode], value: Any) -> Any:
    """``value`` reduced to the paths its readers project; the whole value unless every reader is a
    ``project`` data node and the value is an object. Projections see exactly what they would see
    in the whole value (missing keys and non-objects on the way included)."""
    if not isinstance(value, dict) or not readers:
        return value
    if any(node.kind != DATA or node.spec.get("operation") != "project" for node in readers):
        return value
    sliced: dict[str, Any] = {}
    for node in readers:
        _copy_path(value, sliced, list(node.spec["path"]))
    return sliced


def _copy_path(source: dict[str, Any], target: dict[str, Any], path: list[str]) -> None:
    key = path[0]
    if key not in source:
        return
    value = source[key]
    if len(path) == 1 or not isinstance(value, dict):
        target[key] = value
        return
    child = target.get(key)
    if child is value:
        return  # already copied whole
    if child is None:
        child = target[key] = {}
    _copy_path(value, child, path[1:])


async def unavailable_result(component: Component, start_value: Any, reason: str, *,
                             conversation: Sequence[Mapping[str, Any]] = ()) -> FlowResult:
    """The component's result when none came back: every model call fails with ``reason``
    (``on_error`` fallbacks apply, their cost is unknown), data nodes run as usual."""
    return await run_flow(component.admitted, component.input_slice(start_value),
                          router=_UnavailableRouter(reason), conversation=conversation,
                          deadline=Deadline.after_ms(UNAVAILABLE_RUN_BUDGET_MS))


class _UnavailableRouter:
    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def chat(self, *_: Any, **__: Any) -> Any:
        raise ComponentUnavailable(self.reason)

    async def decide(self, *_: Any, **__: Any) -> Any:
        raise ComponentUnavailable(self.reason)


async def merge_results(partition: Partition, results: Sequence[FlowResult], *, router: Any, deadline: Deadline,
                        on_event: Callable[[dict[str, Any]], None] | None = None) -> FlowResult:
    """The whole flow's result from its components' results (in component order)."""
    flow = partition.flow
    entries: dict[int, dict[str, Any]] = {}
    reasons: dict[str, str] = {}
    failure: tuple[str, str | None, str | None, float | None] | None = None
    for component, result in zip(partition.components, results, strict=True):
        if result.fingerprint != component.admitted.fingerprint:
            raise ValueError(f"component {component.index} result is for another flow")
        reasons.update(result.answer_reasons)
        for entry in result.flow_nodes:
            mapped = remap_entry(entry, component.to_whole)
            entries[int(mapped["node"][1:])] = mapped
        if not result.ok and failure is None:
            failure = (component.to_whole[result.failed_node or ""], result.error_kind, result.error_message,
                       result.retry_after_s)
    output: Any = None
    if failure is None:
        join = partition.join
        values = [results[partition.component_of[source]].output for source in join.inputs]
        _emit(on_event, "node_started", join)
        outcome = await execute_node(join, values, router=router, deadline=deadline)
        entries[join.index] = outcome.entry
        _emit(on_event, "node_finished", join, outcome=outcome.status,
              **({"error": outcome.error_message} if outcome.error_message else {}))
        if outcome.status == FAILED:
            failure = (join.cid, outcome.error_kind, outcome.error_message, outcome.retry_after_s)
        else:
            output = outcome.value
    listed = [entries[index] for index in sorted(entries)]
    totals = aggregate(listed)
    common = dict(flow_nodes=listed, fingerprint=flow.fingerprint, cost_usd=totals.cost_usd,
                  tokens_in=totals.tokens_in, tokens_out=totals.tokens_out, tokens_cached=totals.tokens_cached,
                  answer_reasons=dict(sorted(reasons.items())))
    if failure is not None:
        node, kind, message, retry_after_s = failure
        return FlowResult(ok=False, output=None, failed_node=node, error_kind=kind, error_message=message,
                          retry_after_s=retry_after_s, **common)
    return FlowResult(ok=True, output=output, failed_node=None, error_kind=None, error_message=None, **common)


def remap_entry(entry: Mapping[str, Any], to_whole: Mapping[str, str]) -> dict[str, Any]:
    """A component's ``flow_nodes`` entry with the whole flow's canonical ids."""
    mapped = dict(entry)
    mapped["node"] = to_whole[entry["node"]]
    mapped["inputs"] = [to_whole.get(source, source) for source in entry.get("inputs", [])]
    error = mapped.get("error")
    if isinstance(error, str):
        mapped["error"] = re.sub(_CANCELLED_AT, lambda m: m.group(1) + to_whole.get(m.group(2), m.group(2)), error)
    return mapped


def _emit(on_event: Callable[[dict[str, Any]], None] | None, event: str, node: FlowNode, **details: Any) -> None:
    if on_event is not None:
        on_event({"event": event, "node": node.cid, "label": node.label, "kind": node.kind, **details})


def start_value(flow_input: Any, conversation: Sequence[Mapping[str, Any]]) -> Any:
    """The input node's value, as :func:`run_flow` computes it."""
    from .scheduler import last_user_text

    return flow_input if flow_input is not MISSING else last_user_text(conversation)
