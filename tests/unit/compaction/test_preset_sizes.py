"""What the preset's flow input carries for the flow run (docs/performance.md, "After the preparation"): each
batch's decision state with its ASCII wire size computed from the preparation's sizes, and the items marked as
JSON text. Both must be exactly what encoding them gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.compaction.preparation import prepare
from compactor.compaction.preset import materialise, question_template
from compactor.compaction.reassembly import (compaction_report, ratio_limits, reassemble, summary_message,
                                             text_item_overhead)
from compactor.decision_validation import validate_payload, validate_state
from compactor.flow.values import JSONTextMap, WireSized, view_of
from compactor.formats import FORMAT_NAMES, get_dialect
from compactor.jsonutil import ascii_wire_size, dense_dumps, dense_size, dense_str_size

from .fixtures import CORPUS_FILES, corpus_messages

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=3000)


def _check(messages: list[Any], keep_recent: int) -> int:
    prep = prepare(messages, keep_recent=keep_recent, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    flow_ir, flow_input = materialise(prep.batches, instructions=prep.instructions,
                                      recent_evidence=prep.recent_evidence, budget=prep.budget,
                                      decision_policy=["policy"], generation_policy=None, max_tokens=None)
    for key, entry in flow_input.items():
        state, questions = entry["state"], flow_ir[1][f"{key}_classify"]["questions"]
        assert type(state) is WireSized and state.wire_bytes == ascii_wire_size(state)
        payload = {"state": state, "questions": questions}
        validate_payload(payload)
        assert validate_state(state, questions, state.wire_bytes) == ascii_wire_size(payload)
        assert type(entry["items"]) is JSONTextMap
        assert view_of(entry["items"]) == dense_dumps(dict(entry["items"]))
    return len(flow_input)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(_text, min_size=2, max_size=20), st.integers(min_value=1, max_value=4), _text)
def test_the_state_size_and_the_items_view_equal_their_encodings(contents: list[str], keep_recent: int,
                                                                  pinned: str) -> None:
    messages = [{"role": "user", "content": pinned}] + [
        {"role": "assistant", "content": text, **({"n": i} if i % 2 else {})} for i, text in enumerate(contents)]
    _check(messages, keep_recent)


def test_the_state_size_and_the_items_view_equal_their_encodings_on_the_corpus() -> None:
    batches = 0
    for name in CORPUS_FILES:
        messages = corpus_messages(name)
        batches += _check(messages["messages"] if isinstance(messages, dict) else messages, keep_recent=4)
    assert batches


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(_text, min_size=2, max_size=20), st.lists(st.sampled_from(["keep", "summary", "archive", "long"])),
       st.booleans())
def test_the_output_sizes_reassembly_gives_the_report_are_the_items_sizes(contents: list[str], answers: list[str],
                                                                          restorable: bool) -> None:
    """Reassembly measures each output item once; the report reads those sizes (docs/performance.md)."""
    messages = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": text} for text in contents] + [
        {"role": "assistant", "content": "[Summary of an earlier step] kept as it is"}]
    prep = prepare(messages, keep_recent=1, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    values: dict[str, Any] = {}
    for index, cand in enumerate(c for batch in prep.batches for c in batch.candidates):
        answer = answers[index % len(answers)] if answers else "summary"
        if answer != "archive":
            values[cand.unit.id] = {"keep": cand.item, "summary": f"ran {index}; ok é\n\"q\"",
                                    "long": cand.item + "x" * 3000}[answer]
    for flow_values in (values, None):
        output, manifest, output_bytes, sizes = reassemble(messages, prep, flow_values, restorable=restorable)
        assert sizes == [dense_size(m) for m in output] and output_bytes == dense_size(output)
        assert (compaction_report(messages, output, output_bytes, prep, manifest, 0.1, "f", sizes)
                == compaction_report(messages, output, output_bytes, prep, manifest, 0.1, "f"))


def reference_reassembly(messages: list[dict[str, Any]], prep: Any, values: dict[str, Any] | None,
                         restorable: bool, decided: dict[str, str]) -> tuple[Any, ...]:
    """Reassembly by its definition: each unit through :func:`unit_outcome`, its original measured anew."""
    from compactor.archives import handle_of
    from compactor.compaction.reassembly import _unsent_reason, unit_outcome, unit_reason

    items = {c.unit.id: c.item for batch in prep.batches for c in batch.candidates}
    output: list[Any] = []
    manifest: list[dict[str, Any]] = []
    for unit in prep.units:
        original = messages[unit.start:unit.end]
        item = items.get(unit.id)
        handle = handle_of(original) if item is not None and values is not None and restorable else None
        action, emitted = unit_outcome(unit.id, original, item, values, handle=handle)
        output.extend(emitted)
        entry = {"id": unit.id, "start": unit.start, "end": unit.end, "action": action,
                 "reason": unit_reason(unit.id, item, values, action) or _unsent_reason(unit.id, prep)}
        if handle and action != "keep":
            entry["handle"] = handle
        if item is not None and values is not None and unit.id in decided:
            entry["decider_reason"] = decided[unit.id]
        manifest.append(entry)
    if dense_size(output) >= prep.original_bytes:
        output = messages
        for entry in manifest:
            if entry["action"] != "keep":
                entry["action"], entry["reason"] = "keep", "expansion_guard"
            entry.pop("handle", None)
    return output, manifest, dense_size(output)


@settings(max_examples=60, deadline=None)
@given(st.lists(_text, min_size=2, max_size=20), st.lists(st.sampled_from(["keep", "summary", "archive", "long",
                                                                           "blank", "number", "edge0", "edge1"])),
       st.booleans(), st.integers(min_value=0, max_value=4), st.booleans())
def test_reassembly_equals_its_definition(contents: list[str], answers: list[str], restorable: bool,
                                          keep_recent: int, pinned: bool) -> None:
    """Units no model saw are kept without being looked into, and a unit's size is summed only when a
    summary is compared with it (docs/performance.md): the same output, manifest and size."""
    from compactor.compaction.reassembly import SUMMARY_MARKER, text_item_overhead
    from compactor.formats import get_dialect
    from compactor.jsonutil import dense_str_size

    messages = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": text} for text in contents]
    prep = prepare(messages, keep_recent=keep_recent, target_ratio=0.1, pinned_indices=[1] if pinned else None,
                   question_template=question_template())
    values: dict[str, Any] = {}
    decided: dict[str, str] = {}
    for index, cand in enumerate(c for batch in prep.batches for c in batch.candidates):
        answer = answers[index % len(answers)] if answers else "summary"
        if index % 3:
            decided[cand.unit.id] = f"because {index}"
        if answer.startswith("edge"):  # a summary as large as its unit, or one byte smaller
            marker = SUMMARY_MARKER.format(id=cand.unit.id)
            room = (dense_size(messages[cand.unit.start:cand.unit.end]) - int(answer[4:])
                    - text_item_overhead(get_dialect(None)) - dense_str_size(marker))
            values[cand.unit.id] = "y" * room if room > 0 else "z"
        elif answer != "archive":
            values[cand.unit.id] = {"keep": cand.item, "summary": f"ran {index}; ok é\n\"q\"", "blank": " \n",
                                    "long": cand.item + "x" * 3000, "number": 7}[answer]
    for flow_values in (values, None):
        output, manifest, output_bytes, sizes = reassemble(messages, prep, flow_values, restorable=restorable,
                                                           decided=decided)
        assert (output, manifest, output_bytes) == reference_reassembly(messages, prep, flow_values, restorable,
                                                                        decided)
        assert ratio_limits(messages, output, prep, manifest, sizes) == reference_ratio_limits(
            messages, output, prep, manifest)


def reference_ratio_limits(messages: list[dict[str, Any]], output: list[dict[str, Any]], prep: Any,
                           manifest: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's ``limits`` by their definition: every unit and output item measured anew."""
    parts = {"pins": 0, "tail": 0, "kept_units": 0, "summaries": 0}
    for unit, entry in zip(prep.units, manifest):
        size = dense_size(messages[unit.start:unit.end]) - 1  # its messages and a comma after each
        if unit.id in prep.pinned:
            parts["pins"] += size
        elif unit.id in prep.protected:
            parts["tail"] += size
        elif entry["action"] == "keep":
            parts["kept_units"] += size
    parts["summaries"] = sum(dense_size(m) + 1 for m in output  # the items written: not one of the request's
                             if not any(m is original for original in messages))
    floor = 2 + parts["pins"] + parts["tail"]
    return {**{f"{name}_bytes": size for name, size in parts.items()},
            "smallest_ratio": round(min(floor, prep.original_bytes) / max(1, prep.original_bytes), 4),
            "limited_by": max(parts, key=lambda name: parts[name]) if any(parts.values()) else None,
            "request_limits": sorted(set(prep.reasons))}


def test_reassembly_at_the_size_edge_equals_its_definition() -> None:
    """Summaries as large as their unit and a few bytes smaller, beside short ones that keep the expansion
    guard off: the unit's size, summed from its messages' sizes only then, decides as measured anew."""
    from compactor.compaction.reassembly import SUMMARY_MARKER, text_item_overhead
    from compactor.formats import get_dialect
    from compactor.jsonutil import dense_str_size

    messages = [{"role": "user", "content": "task"}]
    for index in range(16):
        messages += [{"role": "assistant", "content": f"step {index} " * 40}] * (1 + index % 3)
    prep = prepare(messages, keep_recent=1, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    values: dict[str, Any] = {}
    for index, cand in enumerate(c for batch in prep.batches for c in batch.candidates):
        room = (dense_size(messages[cand.unit.start:cand.unit.end]) - index // 2 % 3
                - text_item_overhead(get_dialect(None)) - dense_str_size(SUMMARY_MARKER.format(id=cand.unit.id)))
        values[cand.unit.id] = "y" * room if index % 2 else "short"
    output, manifest, output_bytes, _ = reassemble(messages, prep, values)
    assert {entry["reason"] for entry in manifest} >= {"summarized", "summary_refused"}
    assert (output, manifest, output_bytes) == reference_reassembly(messages, prep, values, False, {})


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FORMAT_NAMES), st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60),
       st.one_of(st.none(), st.text(max_size=12).map(lambda s: "h-" + s)))
def test_a_summary_message_is_sized_from_its_text(format_name: str, text: str, handle: str | None) -> None:
    """Reassembly sizes a summary message as its dialect's item overhead plus its text's dense string
    size (docs/performance.md): each dialect's text item holds the text once, as it is."""
    dialect = get_dialect(format_name)
    message = summary_message("u7", text, dialect, handle)
    texts = [value for value in _strings(message) if value.startswith("[Summary of u7;")]
    assert len(texts) == 1 and texts[0].endswith(text)
    assert dense_size(message) == text_item_overhead(dialect) + dense_str_size(texts[0]) \
        == len(dense_dumps(message).encode())


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=5000), st.integers(min_value=1, max_value=16),
       st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30), max_size=40))
def test_summary_limits_measure_the_names_as_defined(budget: int, items: int, names: list[str]) -> None:
    """The names' bytes from their join (docs/performance.md): each name's UTF-8 bytes and its two quotes."""
    from compactor.compaction.preset import NAME_BYTES, SUMMARY_CAP_MIN, summary_limits

    total = budget * items + NAME_BYTES * sum(len(name.encode("utf-8")) + 2 for name in names)
    assert summary_limits(budget, items, names) == (max(budget, min(SUMMARY_CAP_MIN, total)), total)
