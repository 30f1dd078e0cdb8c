"""Decision-mode reassembly (REFERENCE §3.4) and the compaction report (§2.2, CONTRACT §2.1)."""

from __future__ import annotations

from typing import Any

from ..jsonutil import compact_dumps, compact_size
from ..chat import Message
from .preparation import Preparation

SUMMARY_MARKER = "[Summary of {id}; original retained by caller]\n"


def summary_message(fragment_id: str, text: str) -> Message:
    return {"role": "assistant", "content": SUMMARY_MARKER.format(id=fragment_id) + text}


def reassemble(messages: list[Message], prep: Preparation, values: dict[str, Any] | None
               ) -> tuple[list[Message], list[dict[str, Any]]]:
    """Output messages and the manifest (one entry per unit, in order)."""
    included = prep.included if values is not None else set()
    output: list[Message] = []
    manifest: list[dict[str, Any]] = []
    for unit in prep.units:
        original = messages[unit.start:unit.end]
        action = "keep"
        emitted: list[Message] = original
        if unit.id in included:
            assert values is not None
            if unit.id not in values:
                action, emitted = "archive", []
            else:
                value = values[unit.id]
                if value != compact_dumps(original) and isinstance(value, str) and value.strip():
                    candidate = summary_message(unit.id, value)
                    if compact_size(candidate) < compact_size(original):
                        action, emitted = "summarize", [candidate]
        output.extend(emitted)
        manifest.append({"id": unit.id, "start": unit.start, "end": unit.end, "action": action})
    if compact_size(output) >= prep.original_bytes:  # expansion guard
        output = messages
        for entry in manifest:
            entry["action"] = "keep"
    return output, manifest


def first_changed_index(original: list[Message], output: list[Message]) -> int | None:
    for index, (a, b) in enumerate(zip(original, output)):
        if a != b:
            return index
    if len(original) == len(output):
        return None
    return min(len(original), len(output))


def compaction_report(messages: list[Message], output: list[Message], prep: Preparation,
                      manifest: list[dict[str, Any]], target_ratio: float,
                      fingerprint: str | None) -> dict[str, Any]:
    output_bytes = compact_size(output)
    changed = first_changed_index(messages, output)
    return {
        "original_bytes": prep.original_bytes,
        "output_bytes": output_bytes,
        "target_bytes": prep.target_bytes,
        "target_ratio": target_ratio,
        "target_met": output_bytes <= prep.target_bytes,
        "fragments": manifest,
        "reasons": list(prep.reasons),
        "flow_fingerprint": fingerprint,
        "first_changed_index": changed,
        "preserved_prefix_bytes": prep.original_bytes if changed is None else compact_size(messages[:changed]),
    }
