"""Decision-mode reassembly (docs/behaviour.md#decision) and the compaction report (docs/behaviour.md#requests-and-responses)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from compactor.chat import Message
from compactor.jsonutil import dense_join_size, dense_size, dense_str_size
from compactor.compaction.preparation import Preparation
from compactor.formats import get_dialect
from compactor.formats.base import Dialect

SUMMARY_MARKER = "[Summary of {id}; original retained by caller]\n"
MAX_MANIFEST_ENTRIES = 1_000
"""Most ``fragments`` entries a report lists; past it, ``keep`` entries (what an unlisted unit does) are
left out first and ``fragments_omitted`` counts what is missing (docs/reliability.md)."""
MAX_REASONS = 100
RESTORABLE_SUMMARY_MARKER = "[Summary of {id}; restorable: {handle}]\n"
RESTORABLE_PLACEHOLDER = "[Archived {id}; restorable: {handle}]"

# Why each unit got its action (docs/report.md). Reasons travel in the manifest entries, in the response's
# manifest too (an additive field), and reach local tooling through the ``units`` event (the whole manifest).
# A unit a decider judged also carries ``decider_reason``, the decider's own short reason, when it gave one
# (the built-in decider always does: docs/offline-offers.md "Reasons in the manifest").
UNIT_REASONS = {
    "pinned": "keep: holds a pinned message (system/developer always; the human's turns unless pins are given)",
    "recent_tail": "keep: inside the protected recent tail (keep_recent)",
    "not_sent": "keep: left out of every batch by a preparation limit (see compaction.reasons)",
    "flow_failed": "keep: the flow failed as a whole, so every unit is kept",
    "model_kept": "keep: the decider chose keep, a model call of its batch fell back to the original, or the "
                  "summary was refused (empty, over the byte budget or not smaller) and the original put back",
    "summary_refused": "keep: the summary was blank or, with its marker line, not smaller than the original",
    "summarized": "summarize: the decider chose summarize and the summary is smaller",
    "archived": "archive: the decider chose archive; the caller keeps the original",
    "expansion_guard": "keep: the output would not have been smaller than the input, so nothing changed",
}


def summary_message(fragment_id: str, text: str, dialect: Dialect | None = None, handle: str | None = None
                    ) -> Message:
    """The item replacing a summarized unit; with a ``handle`` its marker names it (docs/archives.md)."""
    return (dialect or get_dialect(None)).text_item("assistant", _summary_text(fragment_id, text, handle))


def _summary_text(fragment_id: str, text: str, handle: str | None) -> str:
    marker = (RESTORABLE_SUMMARY_MARKER.format(id=fragment_id, handle=handle) if handle
              else SUMMARY_MARKER.format(id=fragment_id))
    return marker + text


def text_item_overhead(dialect: Dialect) -> int:
    """What an assistant text item of ``dialect`` adds to its text's dense JSON string: its
    :func:`dense_size` is this plus :func:`dense_str_size` of the text, since every dialect's item holds
    the text once, as it is (docs/performance.md; a test holds this for every dialect)."""
    return dense_size(dialect.text_item("assistant", "")) - 2


def unit_outcome(unit_id: str, original: list[Message], item: str | None, values: dict[str, Any] | None,
                 dialect: Dialect | None = None, handle: str | None = None,
                 original_bytes: int | None = None) -> tuple[str, list[Message]]:
    """What one unit becomes: ``keep`` (its messages), ``archive`` (nothing, or with a ``handle`` a short
    placeholder naming it) or ``summarize`` (one summary message, only when smaller than the unit, whose
    dense size is ``original_bytes`` when the caller knows it).
    ``item`` is the unit's text when it was a candidate of a flow that answered ``values``."""
    dialect = dialect or get_dialect(None)
    action, emitted, _ = _measured_outcome(unit_id, original, item, values, dialect, handle, original_bytes,
                                           text_item_overhead(dialect))
    return action, emitted


def _measured_outcome(unit_id: str, original: list[Message], item: str | None, values: dict[str, Any] | None,
                      dialect: Dialect, handle: str | None, original_bytes: int | list[int] | None,
                      item_overhead: int) -> tuple[str, list[Message], int | None]:
    """:func:`unit_outcome` with the dense size of a summary message (measured to compare it), else None;
    ``item_overhead``: :func:`text_item_overhead` of ``dialect``; ``original_bytes`` may also be the dense
    sizes of the unit's messages (their join is summed only when a summary is compared with it)."""
    if item is None or values is None:
        return "keep", original, None
    if unit_id not in values:
        placeholder = RESTORABLE_PLACEHOLDER.format(id=unit_id, handle=handle)
        return "archive", [dialect.text_item("assistant", placeholder)] if handle else [], None
    value = values[unit_id]
    if isinstance(value, str) and value != item and value.strip():
        text = _summary_text(unit_id, value, handle)
        size = item_overhead + dense_str_size(text)
        if original_bytes is None:
            original_bytes = dense_size(original)
        elif type(original_bytes) is list:
            original_bytes = dense_join_size(original_bytes)
        if size < original_bytes:
            return "summarize", [dialect.text_item("assistant", text)], size
    return "keep", original, None


def unit_reason(unit_id: str, item: str | None, values: dict[str, Any] | None, action: str) -> str | None:
    """The reason code of a candidate's outcome (``UNIT_REASONS``); None for a unit no flow was asked about."""
    if item is None:
        return None
    if values is None:
        return "flow_failed"
    if action != "keep":
        return "summarized" if action == "summarize" else "archived"
    return "model_kept" if values.get(unit_id) == item else "summary_refused"


def _unsent_reason(unit_id: str, prep: Preparation) -> str:
    """The reason of a unit no model saw: protected (a pin, else the tail) or left out by a limit."""
    if unit_id not in prep.protected:
        return "not_sent"
    return "pinned" if unit_id in prep.pinned else "recent_tail"


def reassemble(messages: list[Message], prep: Preparation, values: dict[str, Any] | None,
               dialect: Dialect | None = None, restorable: bool = False,
               decided: dict[str, str] | None = None
               ) -> tuple[list[Message], list[dict[str, Any]], int, list[int]]:
    """Output items, the manifest (one entry per unit, in order, each with its ``reason``, and its
    ``decider_reason`` from ``decided`` (by unit id) when a decision covered it), the output's compact
    size and the compact size of each output item (the report reads them instead of measuring again).

    ``restorable``: a summarized unit's marker and an archived unit's placeholder carry the handle of
    its original, also in its manifest entry (``handle``); storing the originals is the caller's part."""
    # The archives only where handles are written (docs/performance.md#request-models-regexes-and-docstrings-issue-11)
    if restorable:
        from compactor.archives import handle_of

    dialect = dialect or get_dialect(None)
    item_overhead = text_item_overhead(dialect)
    sizes = message_sizes(messages, prep)
    items = {c.unit.id: c.item for batch in prep.batches for c in batch.candidates}
    output: list[Message] = []
    output_sizes: list[int] = []  # dense size of each output message: the originals' are known already
    manifest: list[dict[str, Any]] = []
    for unit in prep.units:
        unit_id, start, end = unit.id, unit.start, unit.end
        original, unit_sizes = messages[start:end], sizes[start:end]
        item = items.get(unit_id)
        if item is None:  # no model saw it: kept as it is
            action, reason = "keep", _unsent_reason(unit_id, prep)
            output.extend(original)
            output_sizes.extend(unit_sizes)
            manifest.append({"id": unit_id, "start": start, "end": end, "action": action, "reason": reason})
            continue
        handle = handle_of(original) if values is not None and restorable else None
        action, emitted, summary_bytes = _measured_outcome(
            unit_id, original, item, values, dialect, handle, unit_sizes, item_overhead)
        reason = unit_reason(unit_id, item, values, action)
        output.extend(emitted)
        output_sizes.extend(unit_sizes if emitted is original
                            else [summary_bytes] if summary_bytes is not None else map(dense_size, emitted))
        entry = {"id": unit_id, "start": start, "end": end, "action": action, "reason": reason}
        if handle and action != "keep":
            entry["handle"] = handle
        if values is not None and decided and unit_id in decided:
            entry["decider_reason"] = decided[unit_id]
        manifest.append(entry)
    output_bytes = dense_join_size(output_sizes)
    if output_bytes >= prep.original_bytes:  # expansion guard
        output, output_bytes, output_sizes = messages, prep.original_bytes, sizes
        for entry in manifest:
            if entry["action"] != "keep":
                entry["action"], entry["reason"] = "keep", "expansion_guard"
            entry.pop("handle", None)
    return output, manifest, output_bytes, output_sizes


def message_sizes(messages: list[Message], prep: Preparation) -> list[int]:
    """The dense size of each message: measured once by the preparation (docs/performance.md)."""
    if len(prep.message_sizes) == len(messages):
        return prep.message_sizes
    return [dense_size(m) for m in messages]


def first_changed_index(original: list[Message], output: list[Message]) -> int | None:
    for index, (a, b) in enumerate(zip(original, output)):
        if a != b:
            return index
    if len(original) == len(output):
        return None
    return min(len(original), len(output))


def preserved_prefix_bytes(messages: list[Message], changed: int | None, original_bytes: int,
                           sizes: list[int] | None = None) -> int:
    """Bytes of the dense JSON transcript shared with the output: ``[m0,…,mk-1,`` (as long as the JSON
    of those k messages; ``sizes``: the messages' dense sizes when known), ``[`` alone when the first
    message changed, everything when nothing did."""
    if changed is None:
        return original_bytes
    if not changed:
        return 1
    return dense_join_size(sizes[:changed]) if sizes is not None else dense_size(messages[:changed])


def compaction_report(messages: list[Message], output: list[Message], output_bytes: int, prep: Preparation,
                      manifest: list[dict[str, Any]], target_ratio: float,
                      fingerprint: str | None, output_sizes: list[int] | None = None) -> dict[str, Any]:
    """The ``compaction`` block; ``output_sizes``: the compact size of each output item when the caller
    measured them (:func:`reassemble`)."""
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
        "preserved_prefix_bytes": preserved_prefix_bytes(messages, changed, prep.original_bytes,
                                                         message_sizes(messages, prep)),
        "limits": ratio_limits(messages, output, prep, manifest, output_sizes),
    }
    if len(fragments) < len(manifest):
        report["fragments_omitted"] = len(manifest) - len(fragments)
    return report


def with_fallbacks(report: dict[str, Any], fallbacks: Iterable[str]) -> dict[str, Any]:
    """``report`` (a ``compaction`` block) with ``fallbacks``, the flow nodes that fell back or failed counted by error
    kind (``{"auth_error": 4}``; the kinds of ``call_record.flow_facts``, which billing counts), when there are any:
    their units were kept (``model_kept``, or ``flow_failed`` for the whole flow), and the answer said so only in
    ``x_router``'s trace, node by node, or, for a windowed run, nowhere (docs/report.md)."""
    counts = Counter(fallbacks)
    if counts:
        report["fallbacks"] = dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return report


def ratio_limits(messages: list[Message], output: list[Message], prep: Preparation,
                 manifest: list[dict[str, Any]], output_sizes: list[int] | None = None) -> dict[str, Any]:
    """What the output's bytes are made of, and the smallest ratio this request could reach (every
    candidate archived): docs/offline-offers.md "Targets". ``output_sizes`` as in :func:`compaction_report`."""
    parts = {"pins": 0, "tail": 0, "kept_units": 0, "summaries": 0}
    sizes = message_sizes(messages, prep)
    for unit, entry in zip(prep.units, manifest):  # a unit's size only where it counts (not a changed one)
        if unit.id in prep.pinned:
            part = "pins"
        elif unit.id in prep.protected:
            part = "tail"
        elif entry["action"] == "keep":
            part = "kept_units"
        else:
            continue
        parts[part] += sum(sizes[unit.start:unit.end]) + unit.end - unit.start
    if output_sizes is None or len(output_sizes) != len(output):
        output_sizes = [dense_size(m) for m in output]
    parts["summaries"] = sum(output_sizes[i] + 1 for i in written_indexes(manifest))
    floor = 2 + parts["pins"] + parts["tail"]
    return {**{f"{name}_bytes": size for name, size in parts.items()},
            "smallest_ratio": round(min(floor, prep.original_bytes) / max(1, prep.original_bytes), 4),
            "limited_by": max(parts, key=lambda name: parts[name]) if any(parts.values()) else None,
            "request_limits": sorted(set(prep.reasons))}


def written_indexes(manifest: list[dict[str, Any]]) -> list[int]:
    """Where the output holds an item this compaction wrote (a summary, or a restorable archive's
    placeholder), read from the manifest (every unit, in order) rather than from the items' text, so it
    holds in every format (a summary's text is nested in content blocks outside ``openai-chat``) and a
    kept item that merely reads like a summary (an earlier compaction's) is not counted."""
    written, position = [], 0
    for entry in manifest:
        if entry["action"] == "keep":
            position += entry["end"] - entry["start"]
        elif entry["action"] == "summarize" or "handle" in entry:
            written.append(position)
            position += 1
    return written


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
