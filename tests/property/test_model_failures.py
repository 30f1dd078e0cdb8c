"""Hand-picked adversarial cases for decision mode, through the real Router and flow runtime with an
in-memory model: timeouts, hangs, invalid answers, the worked example of fixture T, pins and
request edges. Each body is also checked against every invariant."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from compactor import service
from compactor.budget import Deadline
from compactor.compaction.preset import load_preset
from compactor.models import CompactRequest

from .fakes import Script, ScriptedTransport, scripted_router
from .invariants import check_decision_body, csize

DECISION_POLICY = load_preset()["flow"][1]["classify"]["policy"]


def script(answers: list[str], *, decision: str = "answer", summary_kind: str = "short", summary: str = "object",
           validate: bool = True, hang: bool = False) -> Script:
    return Script(answer_kinds=answers, decision_modes=[decision], summary_kinds=[summary_kind],
                  summary_modes=[summary], validate=validate, hang=hang)


async def compact(messages: list[dict[str, Any]], transport: ScriptedTransport, *, deadline_ms: float = 600_000,
                  **fields: Any) -> tuple[int, dict[str, Any]]:
    fields.setdefault("decision_policy_ir", DECISION_POLICY)
    request = CompactRequest(messages=messages, **fields)
    return await service.compact(request, deadline=Deadline.after_ms(deadline_ms), router=scripted_router(transport))


def actions(body: dict[str, Any]) -> list[str]:
    return [entry["action"] for entry in body["compaction"]["fragments"]]


def flow_nodes(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["x_router"]["decision_trace"]["flow_nodes"]


def tool_call(call_id: str, command: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def transcript() -> list[dict[str, Any]]:
    """system, user task, a big excerpted message, two small candidates, a parallel tool unit, a tail."""
    return [
        {"role": "system", "content": "Keep instructions 🧪."},
        {"role": "user", "content": "Fix the bug in src/app.py."},
        {"role": "assistant", "content": "listing " + "x" * 3000},  # fragment_2: excerpted (> 2000 chars)
        {"role": "assistant", "content": "note " + "y" * 400},  # fragment_3
        {"role": "assistant", "content": None, "tool_calls": [tool_call("a", "ls"), tool_call("b", "cat x")]},
        {"role": "tool", "tool_call_id": "b", "content": "contents of x " + "z" * 300},
        {"role": "tool", "tool_call_id": "a", "content": "app.py\nx\n" + "w" * 300},  # fragment_4 = [4, 7)
        {"role": "assistant", "content": "Current state."},
    ]


T_FIXTURE = ([{"role": "system", "content": "Keep instructions."}, {"role": "user", "content": "Complete the task."}]
             + [{"role": "assistant", "content": f"fact_{i} " + "x" * 1800} for i in range(10)]
             + [{"role": "assistant", "content": "Current state."}])


@pytest.mark.usefixtures("batches_of_eight")  # its premise: several batches
async def test_reference_worked_example_fixture_t() -> None:
    """docs/behaviour.md#worked-example-fixture-t: two batches, budget 128, every fragment summarised,
    18 555 → 1 219 bytes."""
    transport = ScriptedTransport(script(["summarize"], summary_kind="evidence"))
    status, body = await compact(T_FIXTURE, transport, keep_recent=1, target_ratio=0.1, max_tokens=512)
    assert status == 200
    check_decision_body(T_FIXTURE, body, keep_recent=1, target_ratio=0.1)
    report = body["compaction"]
    assert (report["original_bytes"], report["target_bytes"], report["output_bytes"]) == (18_555, 1_855, 1_219)
    assert report["target_met"] is True and report["reasons"] == []
    assert actions(body) == ["keep", "keep"] + ["summarize"] * 10 + ["keep"]
    assert [call.ids for call in transport.decisions] == [
        tuple(f"fragment_{i}" for i in range(2, 10)), ("fragment_10", "fragment_11")]
    assert body["messages"][2] == {"role": "assistant",
                                   "content": "[Summary of fragment_2; original retained by caller]\nEvidence fragment_2"}
    assert csize(body["messages"][2]) == 106
    assert report["first_changed_index"] == 2 and report["preserved_prefix_bytes"] == csize(T_FIXTURE[:2])


@pytest.mark.parametrize("decision", ["raise", "timeout", "no_model", "extra_id"])
async def test_a_failed_or_invalid_decision_keeps_the_batch(decision: str) -> None:
    messages = transcript()
    transport = ScriptedTransport(script(["summarize"], decision=decision))
    status, body = await compact(messages, transport, keep_recent=1)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1)
    assert body["messages"] == messages and body["compacted"] is False
    assert transport.chats == []  # nothing selected, generate skipped
    classify = next(node for node in flow_nodes(body) if node["kind"] == "decision")
    assert classify["fallback"] == "input" and classify["error"]


@pytest.mark.parametrize("summary", ["raise", "timeout", "non_json", "duplicate_keys", "length", "tool_calls",
                                     "empty_text", "nan", "deep"])
async def test_a_failed_summary_keeps_the_selected_units_and_archives_still_apply(summary: str) -> None:
    messages = transcript()
    # Answers are keyed on start % 5: fragment_2 (excerpt) and fragment_4 summarize, fragment_3 archive.
    transport = ScriptedTransport(script(["keep", "keep", "summarize", "archive", "summarize"], summary=summary))
    status, body = await compact(messages, transport, keep_recent=1)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1)
    assert actions(body) == ["keep", "keep", "keep", "archive", "keep", "keep"]
    assert body["messages"] == messages[:3] + messages[4:]
    generate = next(node for node in flow_nodes(body) if node["kind"] == "llm")
    assert generate["fallback"] == "input" and generate["error"]


@pytest.mark.parametrize("summary", ["invented_id", "empty_key", "array", "string_json"])
async def test_a_summary_outside_the_batch_keeps_the_whole_batch_archives_too(summary: str) -> None:
    messages = transcript()
    transport = ScriptedTransport(script(["keep", "keep", "summarize", "archive", "summarize"], summary=summary))
    status, body = await compact(messages, transport, keep_recent=1)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1)
    assert body["messages"] == messages and set(actions(body)) == {"keep"}


async def test_archive_for_an_excerpt_is_an_invalid_answer_and_keeps_the_batch() -> None:
    messages = transcript()
    transport = ScriptedTransport(script(["archive"]))
    status, body = await compact(messages, transport, keep_recent=1)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1)
    (call,) = transport.decisions
    assert "archive" not in call.questions["fragment_2"]["criteria"]
    assert "archive" in call.questions["fragment_3"]["criteria"]
    assert body["messages"] == messages  # fragment_3's valid archive goes with the invalid batch


async def test_an_unvalidated_archive_of_an_excerpt_is_still_refused() -> None:
    messages = transcript()
    transport = ScriptedTransport(script(["archive"], validate=False))
    status, body = await compact(messages, transport, keep_recent=1)
    assert status == 200
    assert actions(body)[2] == "keep"  # fragment_2's decision saw only an excerpt


async def test_an_unvalidated_answer_map_with_missing_ids_keeps_the_batch() -> None:
    messages = transcript()
    transport = ScriptedTransport(script(["keep", "keep", "summarize", "missing", "summarize"], validate=False))
    status, body = await compact(messages, transport, keep_recent=1)
    assert status == 200
    assert body["messages"] == messages


async def test_a_hanging_model_is_cut_by_the_shared_deadline() -> None:
    messages = transcript()
    transport = ScriptedTransport(script(["summarize"], hang=True))
    status, body = await compact(messages, transport, keep_recent=1, deadline_ms=150)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1)
    assert body["messages"] == messages
    assert body["x_router"]["cost_usd"] is None  # a cancelled call's cost is unknown


async def test_a_tool_unit_crossing_the_tail_is_kept_whole() -> None:
    messages = transcript()[:7]  # ends with the parallel results; keep_recent=1 touches only the last result
    transport = ScriptedTransport(script(["summarize"]))
    status, body = await compact(messages, transport, keep_recent=1)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1)
    assert actions(body)[-1] == "keep" and body["messages"][-3:] == messages[4:7]
    assert all("fragment_4" not in call.ids for call in transport.decisions)


async def test_explicit_pins_replace_the_user_default_but_never_unpin_system() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "developer", "content": "d " + "q" * 300},
                {"role": "user", "content": "observation " + "o" * 400}, {"role": "user", "content": "task"},
                {"role": "assistant", "content": "done"}]
    transport = ScriptedTransport(script(["summarize"]))
    status, body = await compact(messages, transport, keep_recent=1, pinned_indices=[3])
    assert status == 200
    check_decision_body(messages, body, keep_recent=1, pinned_indices=[3])
    (call,) = transport.decisions
    assert call.ids == ("fragment_2",)  # the user observation is a candidate, the developer message is not
    assert actions(body) == ["keep", "keep", "summarize", "keep", "keep"]


@pytest.mark.parametrize("pins", [[-1], [5], [0, 99]])
async def test_bad_pins_are_refused_before_any_call(pins: list[int]) -> None:
    transport = ScriptedTransport(script(["summarize"]))
    status, body = await compact(transcript()[:5], transport, pinned_indices=pins)
    assert status == 400
    assert body == {"error": {"message": "pinned_indices must reference existing messages",
                              "type": "invalid_request_error", "code": None}}
    assert transport.decisions == [] and transport.chats == []


async def test_an_invalid_decision_policy_is_refused_only_when_a_batch_exists() -> None:
    bad = ["policy", ["nonsense"], ["zero"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]
    status, body = await compact(transcript(), ScriptedTransport(script(["keep"])), keep_recent=1,
                                 decision_policy_ir=bad)
    assert status == 400 and body["error"]["code"] == "invalid_flow"
    assert body["error"]["message"].startswith("flow_ir rejected at admission: ")
    only_protected = transcript()[:2]
    status, body = await compact(only_protected, ScriptedTransport(script(["keep"])), decision_policy_ir=bad)
    assert status == 200 and body["messages"] == only_protected and "x_router" not in body


@pytest.mark.parametrize("messages", [[], [{"role": "assistant", "content": None}],
                                      [{"role": "tool", "tool_call_id": "x"}] * 3])
async def test_degenerate_transcripts(messages: list[dict[str, Any]]) -> None:
    status, body = await compact(messages, ScriptedTransport(script(["archive"])), keep_recent=0)
    assert status == 200
    check_decision_body(messages, body, keep_recent=0)


def test_a_lone_surrogate_is_refused_at_validation_not_a_crash() -> None:
    """A valid JSON escape such as \\ud800 that no UTF-8 text can carry fails request validation (a 422
    at the API, see tests/unit/api) instead of crashing size measurement."""
    with pytest.raises(ValidationError, match="lone surrogate"):
        CompactRequest.model_validate(json.loads('{"messages": [{"role": "user", "content": "a\\ud800b"}]}'))


@pytest.mark.usefixtures("batches_of_eight")  # its premise: several batches
async def test_concurrent_batches_are_independent() -> None:
    """Many batches at once (one per 8 fragments): one batch's failure never spills into another."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    messages += [{"role": "assistant", "content": f"step {i} " + "p" * 500} for i in range(40)]
    messages.append({"role": "assistant", "content": "end"})
    # Batches start at fragment_2, 10, 18, 26, 34: decision modes cycle on the first start % 3.
    transport = ScriptedTransport(Script(answer_kinds=["summarize"], decision_modes=["answer", "raise", "timeout"],
                                         summary_kinds=["short"], summary_modes=["object"]))
    status, body = await compact(messages, transport, keep_recent=1, target_ratio=0.5)
    assert status == 200
    check_decision_body(messages, body, keep_recent=1, target_ratio=0.5)
    modes = {call.ids[0]: call.mode for call in transport.decisions}
    assert len(modes) == 5
    for entry in body["compaction"]["fragments"][2:-1]:
        batch_first = f"fragment_{2 + (entry['start'] - 2) // 8 * 8}"
        assert entry["action"] == ("summarize" if modes[batch_first] == "answer" else "keep")
