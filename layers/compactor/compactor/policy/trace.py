"""Trimming of decision traces for responses (docs/behaviour.md#the-x_router-block-and-usage ``decision_trace``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

TRACE_LIST_CAP = 10
_UNKNOWN_REASON = "unknown"
OPERATOR_DETAIL = "operator_detail"
"""A ``decision_path`` event's words for the operator only (``ProviderError.detail``: which key variable or secret
could not be had): in the routing trace the operator's tools read, left out of every trimmed trace (the answer's)."""


def _reason(entry: Any) -> str:
    reason = entry.get("reason") if isinstance(entry, dict) else None
    return reason if isinstance(reason, str) else _UNKNOWN_REASON


def _total(trace: dict[str, Any], key: str, entries: list[Any]) -> int:
    total = trace.get(key)
    return total if isinstance(total, int) and not isinstance(total, bool) else len(entries)


def trim_decision_trace(trace: Any) -> Any:
    """Cap ``ranked``/``rejected`` at 10 entries, adding ``ranked_total``, ``rejected_total`` and
    ``rejected_reasons`` (count per reason; non-string reasons count as ``"unknown"``).

    Applied recursively to every ``flow_nodes[i].decision_trace`` (and ``flow_nodes[i].routing.
    decision_trace``). ``decision_path`` keeps every event, its events without :data:`OPERATOR_DETAIL`; the
    input is not mutated, and trimming a trimmed trace changes nothing. Anything that is not a dict is returned
    as it is.
    """
    if not isinstance(trace, dict):
        return trace
    out = dict(trace)
    path = trace.get("decision_path")
    if isinstance(path, list) and any(isinstance(event, dict) and OPERATOR_DETAIL in event for event in path):
        out["decision_path"] = [{key: value for key, value in event.items() if key != OPERATOR_DETAIL}
                                if isinstance(event, dict) else event for event in path]
    ranked = trace.get("ranked")
    if isinstance(ranked, list):
        out["ranked_total"] = _total(trace, "ranked_total", ranked)
        out["ranked"] = ranked[:TRACE_LIST_CAP]
    rejected = trace.get("rejected")
    if isinstance(rejected, list):
        out["rejected_total"] = _total(trace, "rejected_total", rejected)
        if not isinstance(trace.get("rejected_reasons"), dict):  # (a Counter costs more than the empty map)
            out["rejected_reasons"] = dict(Counter(_reason(entry) for entry in rejected)) if rejected else {}
        out["rejected"] = rejected[:TRACE_LIST_CAP]
    nodes = trace.get("flow_nodes")
    if isinstance(nodes, list):
        out["flow_nodes"] = [_trim_node(node) for node in nodes]
    return out


def _trim_node(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    out = node
    if isinstance(node.get("decision_trace"), dict):
        out = {**out, "decision_trace": trim_decision_trace(node["decision_trace"])}
    routing = node.get("routing")  # a decision-routed llm node's routing decision
    if isinstance(routing, dict) and isinstance(routing.get("decision_trace"), dict):
        out = {**out, "routing": {**routing, "decision_trace": trim_decision_trace(routing["decision_trace"])}}
    return out
