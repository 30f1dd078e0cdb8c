"""Decision-mode reassembly (REFERENCE §3.4) and the compaction report (§2.2, CONTRACT §2.1)."""

from __future__ import annotations

from typing import Any

from compactor.chat import Message
from compactor.jsonutil import dense_size
from compactor.compaction.preparation import Preparation

SUMMARY_MARKER = "[Summary of {id}; original retained by caller]\n"
MAX_MANIFEST_ENTRIES = 1_000
"""Most ``fragments`` entries a report lists; past it, ``keep`` entries (what an unlisted unit does) are
left out first and ``fragments_omitted`` counts what is missing (docs/reliability.md)."""
MAX_REASONS = 100


def summary_message(fragment_id: str, text: str) -> Message:
    return {"role": "assistant", "content": SUMMARY_MARKER.format(id=fragment_id) + text}


def unit_outcome(unit_id: str, original: list[Message], item: str | None, values: dict[str, Any] | None
                 ) -> tuple[str, list[Message]]:
    """What one unit becomes: ``keep`` (its messages), ``archive`` (nothing) or ``summarize`` (one summary
    message, only when smaller than the unit). ``item`` is the unit's text when it was a candidate of a
    flow that answered ``values``."""
    if item is None or values is None:
        return "keep", original
    if unit_id not in values:
        return "archive", []
    value = values[unit_id]
    if isinstance(value, str) and value != item and value.strip():
        candidate = summary_message(unit_id, value)
        if dense_size(candidate) < len(item.encode("utf-8")):
            return "summarize", [candidate]
    return "keep", original


def reassemble(messages: list[Message], prep: Preparation, values: dict[str, Any] | None
               ) -> tuple[list[Message], list[dict[str, Any]], int]:
    """Output messages, the manifest (one entry per unit, in order) and the output's compact size."""
    items = {c.unit.id: c.item for batch in prep.batches for c in batch.candidates} if values is not None else {}
    output: list[Message] = []
    manifest: list[dict[str, Any]] = []
    for unit in prep.units:
        original = messages[unit.start:unit.end]
        action, emitted = unit_outcome(unit.id, original, items.get(unit.id), values)
        output.extend(emitted)
        manifest.append({"id": unit.id, "start": unit.start, "end": unit.end, "action": action})
    output_bytes = dense_size(output)
    if output_bytes >= prep.original_bytes:  # expansion guard
        output, output_bytes = messages, prep.original_bytes
        for entry in manifest:
            entry["action"] = "keep"
    return output, manifest, output_bytes


def first_changed_index(original: list[Message], output: list[Message]) -> int | None:
    for index, (a, b) in enumerate(zip(original, output)):
        if a != b:
            return index
    if len(original) == len(output):
        return None
    return min(len(original), len(output))


def preserved_prefix_bytes(messages: list[Message], changed: int | None, original_bytes: int) -> int:
    """Bytes of the dense JSON transcript shared with the output: ``[m0,…,mk-1,`` (as long as the JSON
    of those k messages), ``[`` alone when the first message changed, everything when nothing did."""
    if changed is None:
        return original_bytes
    return dense_size(messages[:changed]) if changed else 1


def compaction_report(messages: list[Message], output: list[Message], output_bytes: int, prep: Preparation,
                      manifest: list[dict[str, Any]], target_ratio: float,
                      fingerprint: str | None) -> dict[str, Any]:
    changed = first_changed_index(messages, output)
    fragments = bounded_manifest(manifest)
    report = {
        "original_bytes": prep.original_bytes,
        "output_bytes": output_bytes,
        "target_bytes": prep.target_bytes,
        "target_ratio": target_ratio,
        "target_met": output_bytes <= prep.target_bytes,
        "fragments": fragments,
        "reasons": list(prep.reasons)[:MAX_REASONS],
        "flow_fingerprint": fingerprint,
        "first_changed_index": changed,
        "preserved_prefix_bytes": preserved_prefix_bytes(messages, changed, prep.original_bytes),
        "limits": ratio_limits(messages, output, prep, manifest),
    }
    if len(fragments) < len(manifest):
        report["fragments_omitted"] = len(manifest) - len(fragments)
    return report


def ratio_limits(messages: list[Message], output: list[Message], prep: Preparation,
                 manifest: list[dict[str, Any]]) -> dict[str, Any]:
    """What the output's bytes are made of, and the smallest ratio this request could reach (every
    candidate archived): docs/offline-offers.md "Targets"."""
    parts = {"pins": 0, "tail": 0, "kept_units": 0, "summaries": 0}
    for unit, entry in zip(prep.units, manifest):
        size = sum(dense_size(m) + 1 for m in messages[unit.start:unit.end])
        if unit.id in prep.pinned:
            parts["pins"] += size
        elif unit.id in prep.protected:
            parts["tail"] += size
        elif entry["action"] == "keep":
            parts["kept_units"] += size
    parts["summaries"] = sum(dense_size(m) + 1 for m in output
                             if isinstance(m.get("content"), str) and m["content"].startswith("[Summary of "))
    floor = 2 + parts["pins"] + parts["tail"]
    return {**{f"{name}_bytes": size for name, size in parts.items()},
            "smallest_ratio": round(min(floor, prep.original_bytes) / max(1, prep.original_bytes), 4),
            "limited_by": max(parts, key=lambda name: parts[name]) if any(parts.values()) else None,
            "request_limits": sorted(set(prep.reasons))}


def bounded_manifest(manifest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifest, or at most :data:`MAX_MANIFEST_ENTRIES` of it: changed units first, in order."""
    if len(manifest) <= MAX_MANIFEST_ENTRIES:
        return manifest
    changed = [entry for entry in manifest if entry["action"] != "keep"]
    if len(changed) >= MAX_MANIFEST_ENTRIES:
        return changed[:MAX_MANIFEST_ENTRIES]
    keeps_left = MAX_MANIFEST_ENTRIES - len(changed)
    bounded = []
    for entry in manifest:
        if entry["action"] == "keep":
            if keeps_left <= 0:
                continue
            keeps_left -= 1
        bounded.append(entry)
    return bounded
