"""The selective-compaction preset (``presets/selective-compaction.json``) and its pure materialisation.

The preset holds one batch's nodes; :func:`materialise` instantiates them once per batch and unions
the patches. No I/O beyond reading the bundled preset once, no model calls.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from compactor.policy.defaults import DEFAULT_CHAT_POLICY
from compactor.compaction.preparation import Batch, batch_items, batch_questions, batch_state

PRESET_PATH = Path(__file__).resolve().parent.parent / "presets" / "selective-compaction.json"
MAX_GENERATION_TOKENS = 4096
CAP_PLACEHOLDER, TOTAL_PLACEHOLDER, NAMES_PLACEHOLDER = "$CAP", "$TOTAL", "$NAMES"
NAMES_LINE = "\nNames used again later in the transcript (keep them where the item mentions them): "


def summary_system(template: str, budget: int, batch: Batch) -> tuple[str, int]:
    """The summary prompt of one batch and its per-summary cap (the budget): the batch's byte total, the
    cap, and the salience hint (docs/offline-offers.md)."""
    total = budget * len(batch.candidates)
    cap = budget
    names = NAMES_LINE + ", ".join(batch.names) if batch.names else ""
    text = (template.replace(CAP_PLACEHOLDER, str(cap)).replace(TOTAL_PLACEHOLDER, str(total))
            .replace(NAMES_PLACEHOLDER, names))
    return text, cap


def generation_tokens(max_tokens: int | None) -> int:
    """The summary node's ``max_tokens``: the request's (512 when unset), at most 4096."""
    return min(max_tokens or 512, MAX_GENERATION_TOKENS)


@lru_cache(maxsize=1)
def load_preset() -> dict[str, Any]:
    with PRESET_PATH.open(encoding="utf-8") as handle:
        return json.load(handle)


def question_template() -> dict[str, Any]:
    return load_preset()["question"]


def materialise(batches: list[Batch], *, instructions: list[Any], recent_evidence: list[str], budget: int,
                decision_policy: Any, generation_policy: Any, max_tokens: int | None
                ) -> tuple[list[Any], dict[str, Any]]:
    """The flow term and flow input for these batches (docs/behaviour.md#decision "Flow graph")."""
    template_nodes: dict[str, dict[str, Any]] = load_preset()["flow"][1]
    nodes: dict[str, Any] = {"input": {"kind": "input"}}
    flow_input: dict[str, Any] = {}
    tokens = generation_tokens(max_tokens)
    patches: list[str] = []
    for index, batch in enumerate(batches):
        key = f"batch_{index}"
        flow_input[key] = {"state": batch_state(instructions, recent_evidence, batch.candidates, batch.later),
                           "items": batch_items(batch.candidates)}
        for name, template in template_nodes.items():
            if template["kind"] in ("input", "output"):
                continue
            node = dict(template)
            node["inputs"] = [i if i == "input" else f"{key}_{i}" for i in template["inputs"]]
            if node.get("operation") == "project":
                node["path"] = [key, *template["path"]]
            if name == "classify":
                node["questions"] = batch_questions(batch.candidates)
                node["policy"] = copy.deepcopy(decision_policy)
            elif name == "generate":
                node["policy"] = copy.deepcopy(generation_policy if generation_policy is not None
                                               else DEFAULT_CHAT_POLICY)
                node["max_tokens"] = tokens
                node["system"], cap = summary_system(template["system"], budget, batch)
            elif name == "patch":
                node["max_string_bytes"] = cap
                patches.append(f"{key}_{name}")
            nodes[f"{key}_{name}"] = node
    if patches:
        nodes["merged"] = {"kind": "data", "operation": "union", "inputs": patches}
        nodes["output"] = {"kind": "output", "inputs": ["merged"]}
    else:
        nodes["output"] = {"kind": "output", "inputs": ["input"]}
    return ["flow", nodes], flow_input


def default_decision_policy() -> Any:
    """The preset's own decision policy: what decision mode uses when a request names none."""
    return copy.deepcopy(load_preset()["flow"][1]["classify"]["policy"])
