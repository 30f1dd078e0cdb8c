"""Property tests of decision-mode compaction (docs/behaviour.md#decision) on generated transcripts, with
adversarial models behind the real Router, flow runtime and compaction code.

The model is an in-memory :class:`ScriptedTransport`; everything between the request and the
transport runs for real. Besides the structural invariants (``invariants.check_decision_body``), the
main property recomputes the exact expected outcome of every unit from what the fake model was asked
and answered (an oracle written from docs/behaviour.md, not from the code).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import event, given, strategies as st

from compactor import service
from compactor.budget import Deadline
from compactor.compaction.preparation import EVIDENCE_EXCERPT_OVER
from compactor.compaction.preset import load_preset
from compactor.models import CompactRequest

from .fakes import (
    ANSWER_KINDS, DECISION_MODES, FAILING_SUMMARY_MODES, SUMMARY_KINDS, SUMMARY_MODES, VALID_ANSWER_KINDS,
    Script, ScriptedTransport, pick, scripted_router, start_of,
)
from .invariants import SUMMARY_MARKER, Plan, cdump, check_decision_body, csize, plan_for, utf8_len
from .strategies import FAST, ci_settings, requests

FAST_WIDE = ci_settings(300)

DECISION_POLICY = load_preset()["flow"][1]["classify"]["policy"]
LONG = 600_000  # ms: never reached; the fake answers at once


def scripts(validate: bool = True) -> st.SearchStrategy[Script]:
    """Mostly well-behaved models (so summaries and archives happen), often adversarial ones."""
    return st.builds(
        Script,
        answer_kinds=st.sampled_from([["summarize"], ["summarize", "archive"], ["keep", "summarize", "archive"],
                                      ["archive"]])
        | st.lists(st.sampled_from(sorted(VALID_ANSWER_KINDS)), min_size=1, max_size=4)
        | st.lists(st.sampled_from(ANSWER_KINDS), min_size=1, max_size=6),
        decision_modes=st.just(["answer"]) | st.lists(st.sampled_from(DECISION_MODES), min_size=1, max_size=3),
        summary_kinds=st.sampled_from([["short"], ["short", "unicode"], ["half", "short"]])
        | st.lists(st.sampled_from(SUMMARY_KINDS), min_size=1, max_size=5),
        summary_modes=st.just(["object"]) | st.lists(st.sampled_from(SUMMARY_MODES), min_size=1, max_size=3),
        validate=st.just(validate),
    )


def run(req: dict[str, Any], transport: ScriptedTransport, *, deadline_ms: float = LONG
        ) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, body and each unit's reason code (from the ``units`` event)."""
    request = CompactRequest(**req, decision_policy_ir=DECISION_POLICY)
    reasons: dict[str, str] = {}

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "units":
            reasons.update({unit["id"]: unit["reason"] for unit in event["units"]})

    async def go() -> tuple[int, dict[str, Any]]:
        return await service.compact(request, deadline=Deadline.after_ms(deadline_ms),
                                     router=scripted_router(transport), on_event=on_event)

    status, body = asyncio.run(go())
    return status, body, reasons


def check(req: dict[str, Any], body: dict[str, Any], reasons: dict[str, str]) -> dict[int, list[dict[str, Any]]]:
    return check_decision_body(req["messages"], body, keep_recent=req["keep_recent"],
                               pinned_indices=req["pinned_indices"], target_ratio=req["target_ratio"],
                               reasons=reasons)


# -- the oracle ----------------------------------------------------------------------------------

def decision_valid(transport: ScriptedTransport, call: Any) -> bool:
    """Answer validation (docs/behaviour.md#native-decisions) for what the script answered: every id
    answered with a listed choice."""
    if call.mode != "answer":
        return False
    for fid in call.ids:
        kind = pick(transport.script.answer_kinds, start_of(fid))
        if kind not in VALID_ANSWER_KINDS:
            return False
        if kind == "archive" and "archive" not in call.questions[fid]["criteria"]:
            return False  # an excerpted fragment's question has no archive choice
    return True


def acceptable(summary: Any, original: str, budget: int) -> bool:
    """The patch overlay's test (docs/behaviour.md#data-operations, `overlay` with `only_shrink`)."""
    return isinstance(summary, str) and 1 <= utf8_len(summary) <= budget and utf8_len(summary) < utf8_len(original)


def expected_outcome(messages: list[dict[str, Any]], plan: Plan, transport: ScriptedTransport
                     ) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The output and per-unit actions that docs/behaviour.md#decision (reassembly) implies for what
    the fake model answered."""
    items = {f"fragment_{s}": cdump(messages[s:e]) for s, e in plan.units}
    values: dict[str, Any] = {}
    included: set[str] = set()
    for call in transport.decisions:
        batch = list(call.ids)
        included.update(batch)
        patch = {fid: items[fid] for fid in batch}
        if not decision_valid(transport, call):
            values.update(patch)  # classify falls back to its input: the whole batch is kept
            continue
        assert call.answers is not None
        choice = {fid: call.answers[fid]["choice"] for fid in batch}
        selected = {fid for fid in batch if choice[fid] == "summarize"}
        replacements: dict[str, Any] = {}
        cap = plan.budget
        if selected:
            chat = next((c for c in transport.chats if set(c.items) == selected), None)
            if chat is not None and chat.mode not in FAILING_SUMMARY_MODES:
                if not isinstance(chat.value, dict) or any(k not in selected for k in chat.value):
                    values.update(patch)  # the overlay fails (a key outside its scope, the selected
                    continue  # fragments): the whole batch is kept, archives too
                replacements = chat.value
                # the batch's cap: its budget, or more with the batch's total and names (compaction/preset.py)
                cap = chat.cap or plan.budget
            # else generate fell back to the selected originals, which the overlay rejects
        for fid in batch:
            if choice[fid] == "archive":
                del patch[fid]
            elif fid in replacements and acceptable(replacements[fid], items[fid], cap):
                patch[fid] = replacements[fid]
        values.update(patch)

    output: list[dict[str, Any]] = []
    actions: dict[int, str] = {}
    for start, end in plan.units:
        fid, original = f"fragment_{start}", messages[start:end]
        action, emitted = "keep", original
        if fid in included:
            if fid not in values:
                action, emitted = "archive", []
            elif values[fid] != items[fid] and isinstance(values[fid], str) and values[fid].strip():
                summary = {"role": "assistant", "content": SUMMARY_MARKER.format(id=fid) + values[fid]}
                if csize(summary) < csize(original):
                    action, emitted = "summarize", [summary]
        actions[start] = action
        output.extend(emitted)
    if csize(output) >= csize(messages):  # expansion guard
        return messages, {start: "keep" for start, _ in plan.units}
    return output, actions


# -- properties ----------------------------------------------------------------------------------

@FAST_WIDE
@given(req=requests(), script=scripts())
def test_adversarial_models_never_break_the_invariants_and_the_outcome_is_exact(req, script):
    transport = ScriptedTransport(script)
    status, body, reasons = run(req, transport)
    assert status == 200, body
    check(req, body, reasons)
    plan = plan_for(req["messages"], keep_recent=req["keep_recent"], pinned_indices=req["pinned_indices"],
                    target_ratio=req["target_ratio"])
    asked = {fid for call in transport.decisions for fid in call.ids}
    assert not asked & {f"fragment_{s}" for s in plan.protected}, "a protected unit reached the decider"
    for call in transport.decisions:  # unseen evidence cannot authorise deletion
        for fid in call.ids:
            s, e = next(u for u in plan.units if u[0] == start_of(fid))
            has_archive = "archive" in call.questions[fid]["criteria"]
            assert has_archive is (len(json.dumps(req["messages"][s:e])) <= EVIDENCE_EXCERPT_OVER)
    output, actions = expected_outcome(req["messages"], plan, transport)
    assert {e["start"]: e["action"] for e in body["compaction"]["fragments"]} == actions
    for action in sorted(set(actions.values())):
        event(f"some unit: {action}")
    event(f"decision calls: {min(len(transport.decisions), 3)}")
    assert cdump(body["messages"]) == cdump(output)


@FAST
@given(req=requests(), script=scripts(validate=False))
def test_unvalidated_answers_reaching_the_flow_still_keep_the_structure(req, script):
    """A transport that does not validate decision answers (raw maps with invented labels, missing
    ids, non-objects …): protected content, order, tool pairing and byte bounds still hold.
    (Archiving from an excerpt is checked separately: see test_model_failures.)"""
    transport = ScriptedTransport(script)
    status, body, _ = run(req, transport)
    assert status == 200, body
    messages = req["messages"]
    plan = plan_for(messages, keep_recent=req["keep_recent"], pinned_indices=req["pinned_indices"],
                    target_ratio=req["target_ratio"])
    from .invariants import check_tool_pairing, walk_output

    report = body["compaction"]
    walk_output(messages, body["messages"], report["fragments"])
    actions = {e["start"]: e["action"] for e in report["fragments"]}
    assert all(actions[s] == "keep" for s in plan.protected)
    check_tool_pairing(messages, body["messages"])
    assert report["output_bytes"] == csize(body["messages"]) <= report["original_bytes"] == csize(messages)
    assert body["compacted"] is (body["messages"] != messages)


@FAST
@given(req=requests(max_blocks=12), script=scripts())
def test_an_expired_budget_keeps_everything(req, script):
    """No time left: every model node is skipped, every unit kept, and the body is still well formed."""
    transport = ScriptedTransport(script)
    status, body, reasons = run(req, transport, deadline_ms=0)
    assert status == 200
    check(req, body, reasons)
    assert transport.decisions == [] and transport.chats == []
    assert body["messages"] == req["messages"] and body["compacted"] is False
    assert {e["action"] for e in body["compaction"]["fragments"]} <= {"keep"}
