"""The ticket-triage flow: classify tickets with a decision, select ``support``, draft JSON replies
from the inputs only (skipped when nothing is selected), overlay the replies and drop spam."""

from __future__ import annotations

import copy
from typing import Any

POLICY = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
          ["top_k", 4, ["argmax"]], ["id"], ["always", {"action": "next_candidate"}]]
TICKETS = {
    "t1": "The printer on floor 3 is on fire again and nobody answers the phone at facilities.",
    "t2": "Please reset my password, I have been locked out of the VPN since this morning.",
    "t3": "Buy cheap watches now!!! Limited offer, click the link.",
}
FLOW_INPUT = {"tickets": TICKETS}
QUESTION = {
    "type": "choice",
    "instructions": "Route this ticket to the queue that should handle it.",
    "criteria": {"support": "Needs a reply from the support desk", "billing": "About invoices or payments",
                 "spam": "Unsolicited advertising"},
}
DRAFT_SYSTEM = ("Write a short first reply for each ticket. Return only a JSON object mapping each "
                "ticket id to its reply.")


def triage_flow(**overrides: dict[str, Any]) -> list[Any]:
    """The flow term; ``overrides`` maps a node id to option updates (``None`` values delete)."""
    nodes: dict[str, dict[str, Any]] = {
        "input": {"kind": "input"},
        "tickets": {"kind": "data", "operation": "project", "inputs": ["input"], "path": ["tickets"]},
        "classify": {"kind": "decision", "inputs": ["tickets"], "policy": POLICY,
                     "questions": {ticket: QUESTION for ticket in TICKETS}, "on_error": "input",
                     "timeout_ms": 7000},
        "support": {"kind": "data", "operation": "select", "inputs": ["tickets", "classify"],
                    "field": "choice", "equals": "support"},
        "draft": {"kind": "llm", "inputs": ["support"], "policy": POLICY, "system": DRAFT_SYSTEM,
                  "context": "inputs", "output_format": "json", "skip_empty": True, "on_error": "input",
                  "max_tokens": 256, "timeout_ms": 20000},
        "spam": {"kind": "data", "operation": "select", "inputs": ["tickets", "classify"],
                 "field": "choice", "equals": "spam"},
        "answered": {"kind": "data", "operation": "overlay", "inputs": ["tickets", "draft", "spam"],
                     "min_string_bytes": 1, "max_string_bytes": 200, "only_shrink": True, "on_error": "input"},
        "output": {"kind": "output", "inputs": ["answered"]},
    }
    nodes = copy.deepcopy(nodes)
    for node_id, changes in overrides.items():
        for key, value in changes.items():
            if value is None:
                nodes[node_id].pop(key, None)
            else:
                nodes[node_id][key] = value
    return ["flow", nodes]


def relabel(flow: list[Any], names: dict[str, str]) -> list[Any]:
    """The same flow with node ids renamed (ids missing from ``names`` keep theirs)."""
    nodes = {}
    for node_id, node in flow[1].items():
        renamed = dict(node)
        if "inputs" in node:
            renamed["inputs"] = [names.get(source, source) for source in node["inputs"]]
        nodes[names.get(node_id, node_id)] = renamed
    return ["flow", nodes]
