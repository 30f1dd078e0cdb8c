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
from compactor.compaction.preparation import Batch, batch_questions, batch_state
from compactor.flow.values import JSONTextMap, WireSized
from compactor.jsonutil import ascii_wire_size, utf8_len

PRESET_PATH = Path(__file__).resolve().parent.parent / "presets" / "selective-compaction.json"
MAX_GENERATION_TOKENS = 4096
CAP_PLACEHOLDER, TOTAL_PLACEHOLDER, NAMES_PLACEHOLDER = "$CAP", "$TOTAL", "$NAMES"
NAMES_LINE = "\nNames used again later in the transcript (keep them where the item mentions them): "
# Said to the summarizer when an item of the batch is the bounded view of a unit too big for the summary record
# (formats/bounded.py; docs/behaviour.md "Limits and reasons").
PARTIAL_LINE = ("\nSome items show only the head and tail of a long output (and lines of its middle), what is left out "
                "replaced by lines \"[… N bytes omitted …]\": summarise what is shown and say that the rest of that "
                "output was not read.")
# A batch's summaries may take, together, the budget for each item plus NAME_BYTES times the bytes of the
# names later messages use again (the salience hint), and one summary up to SUMMARY_CAP_MIN of that total
# whatever the budget: the summarizer spends the bytes where the errors and the names used later are
# (docs/offline-offers.md "Targets").
NAME_BYTES, SUMMARY_CAP_MIN = 2, 2048
# Tokens of a summary reply per byte of its summaries: 1/4 token a byte, plus JSON keys and escaping.
_REPLY_TOKENS_PER_BYTE = 5 / 16
_REPLY_TOKENS_OVERHEAD = 64


def summary_limits(budget: int, items: int, names: list[str]) -> tuple[int, int]:
    """``(cap, total)`` of a batch of ``items`` summaries whose hint lists ``names``: the per-summary cap
    and the batch's byte total."""
    total = budget * items + NAME_BYTES * (utf8_len("".join(names)) + 2 * len(names))  # each name quoted
    return max(budget, min(SUMMARY_CAP_MIN, total)), total


def reply_tokens(total: int) -> int:
    """``max_tokens`` of a summary call whose summaries may take ``total`` bytes (at least the preset's
    512, at most 4096)."""
    return min(MAX_GENERATION_TOKENS, max(512, int(total * _REPLY_TOKENS_PER_BYTE) + _REPLY_TOKENS_OVERHEAD))


def reply_bytes(tokens: int) -> int:
    """Bytes of summaries a summary reply of ``tokens`` tokens holds (the inverse of :func:`reply_tokens`)."""
    return max(0, int((tokens - _REPLY_TOKENS_OVERHEAD) / _REPLY_TOKENS_PER_BYTE))


def requested_max_tokens(request: Any) -> int | None:
    """The summary calls' ``max_tokens`` a ``CompactRequest`` asks for; None when it does not set it (each
    call then gets room for its batch's total, :func:`reply_tokens`)."""
    return request.max_tokens if "max_tokens" in request.model_fields_set else None


def summary_system(template: str, budget: int, batch: Batch) -> tuple[str, int, int]:
    """The summary prompt of one batch, its per-summary cap and its total: the prompt states the total,
    the cap and the salience hint (docs/offline-offers.md)."""
    cap, total = summary_limits(budget, len(batch.candidates), batch.names)
    names = NAMES_LINE + ", ".join(batch.names) if batch.names else ""
    text = (template.replace(CAP_PLACEHOLDER, str(cap)).replace(TOTAL_PLACEHOLDER, str(total))
            .replace(NAMES_PLACEHOLDER, names))
    if any(c.omitted for c in batch.candidates):
        text += PARTIAL_LINE
    return text, cap, total


def generation_tokens(max_tokens: int | None, total: int | None = None, reply_max: int = MAX_GENERATION_TOKENS
                      ) -> int:
    """The summary node's ``max_tokens``: the request's, at most 4096; when the request does not set it
    (:func:`requested_max_tokens`), room for a batch whose summaries may take ``total`` bytes
    (:func:`reply_tokens`) up to ``reply_max``, or with no batch at hand ``reply_max``."""
    if max_tokens:
        return min(max_tokens, MAX_GENERATION_TOKENS)
    return min(reply_max, reply_tokens(total)) if total is not None else min(reply_max, MAX_GENERATION_TOKENS)


@lru_cache(maxsize=1)
def load_preset() -> dict[str, Any]:
    with PRESET_PATH.open(encoding="utf-8") as handle:
        return json.load(handle)


def question_template() -> dict[str, Any]:
    return load_preset()["question"]


def materialise(batches: list[Batch], *, instructions: list[Any], recent_evidence: list[str], budget: int,
                decision_policy: Any, generation_policy: Any, max_tokens: int | None,
                reply_max: int = MAX_GENERATION_TOKENS) -> tuple[list[Any], dict[str, Any]]:
    """The flow term and flow input for these batches (docs/behaviour.md#decision "Flow graph"); each summary
    node's ``max_tokens`` is the request's, else room for its batch's total up to ``reply_max``."""
    template_nodes: dict[str, dict[str, Any]] = load_preset()["flow"][1]
    nodes: dict[str, Any] = {"input": {"kind": "input"}}
    flow_input: dict[str, Any] = {}
    patches: list[str] = []
    state_wire = _StateWire(instructions, recent_evidence)
    for index, batch in enumerate(batches):
        key = f"batch_{index}"
        # An item is the dense JSON text of the unit's model view, one whole text: the summary prompt embeds it
        # as JSON (the generate node's ``embed_json_text``) without parsing it (docs/performance.md).
        flow_input[key] = {"state": WireSized(batch_state(instructions, recent_evidence, batch.candidates, batch.later),
                                              state_wire.of(batch)),
                           "items": JSONTextMap({c.unit.id: c.item for c in batch.candidates}, whole=True)}
        for name, template in template_nodes.items():
            if template["kind"] in ("input", "output"):
                continue
            node = dict(template)
            node["inputs"] = [i if i == "input" else f"{key}_{i}" for i in template["inputs"]]
            if node.get("operation") == "project":
                node["path"] = [key, *template["path"]]
            if name == "classify":
                node["questions"] = batch_questions(batch.candidates)
                node["policy"] = decision_policy  # shared, never copied: admission only reads the term
                if len(batches) == 1:  # no other call repeats its prefix: caching it would only cost the write
                    node.pop("cache_prefix", None)
            elif name == "generate":
                node["policy"] = generation_policy if generation_policy is not None else DEFAULT_CHAT_POLICY
                node["system"], cap, total = summary_system(template["system"], budget, batch)
                node["max_tokens"] = generation_tokens(max_tokens, total, reply_max)
                # The same limits and names as data, for transports that take them (the built-in summarizer).
                node["max_string_bytes"], node["max_total_string_bytes"] = cap, total
                if batch.names:
                    node["keep_names"] = batch.names
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


class _StateWire:
    """The ASCII wire size of a batch's decision state from the sizes the preparation measured, so that the
    decision node does not encode the state again for its byte bound (docs/performance.md)."""

    _LATER = len(', "later": ')

    def __init__(self, instructions: list[Any], recent_evidence: list[str]) -> None:
        self.base = ascii_wire_size(batch_state(instructions, recent_evidence, []))  # "fragments": [] included
        self.questions: dict[int, tuple[Any, int]] = {}  # the preparation's question objects, by id

    def of(self, batch: Batch) -> int:
        """A candidate's ``decision_bytes`` are its fragment entry and its question entry (``"<id>": <question>``)."""
        size = self.base + 2 * max(0, len(batch.candidates) - 1)
        for cand in batch.candidates:
            size += cand.decision_bytes - len(cand.unit.id) - 4 - self._question_bytes(cand.question)
        if batch.later:  # measured by the preparation, which chose the block by its size
            size += self._LATER + (ascii_wire_size(batch.later) if batch.later_bytes is None else batch.later_bytes)
        return size

    def _question_bytes(self, question: Any) -> int:
        known = self.questions.get(id(question))
        if known is None or known[0] is not question:
            known = self.questions[id(question)] = (question, ascii_wire_size(question))
        return known[1]


def default_decision_policy() -> Any:
    """The preset's own decision policy: what decision mode uses when a request names none."""
    return copy.deepcopy(load_preset()["flow"][1]["classify"]["policy"])
