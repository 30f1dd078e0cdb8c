"""Decision mode through ``compactor serve``: every per-fragment case of docs/behaviour.md#decision."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fakes.provider_server import chat_reply, decision_reply

from .conftest import OMIT, Stack, decision_cost
from .helpers import bulky, compact_json, flow_nodes, manifest, model_nodes, size, summary, tool_unit

SYSTEM = {"role": "system", "content": "Be careful."}
TASK = {"role": "user", "content": "Fix the bug."}
DONE = {"role": "assistant", "content": "Done."}


def transcript(candidates: int, n: int = 1500) -> list[dict[str, Any]]:
    """system, user, ``candidates`` bulky assistant messages (fragment_2 …), a short last message."""
    return [SYSTEM, TASK, *(bulky(i, n) for i in range(2, 2 + candidates)), DONE]


def test_units_crossing_the_tail_are_kept_whole(stack: Stack) -> None:
    messages = [SYSTEM, TASK, *tool_unit("c0", "cat a.py", "q" * 1500), bulky(4),
                *tool_unit("c1", "ls -R", "z" * 1500, results=2)]  # the last unit (5–8) crosses into the tail

    body = stack.compact(messages, keep_recent=2)

    assert body["messages"] == [SYSTEM, TASK, summary("fragment_2", "Evidence fragment_2"),
                                summary("fragment_4", "Evidence fragment_4"), *messages[5:]]
    assert body["compaction"]["fragments"] == manifest(
        [(0, 1, "keep", "pinned"), (1, 2, "keep", "pinned"), (2, 4, "summarize"), (4, 5, "summarize"),
         (5, 8, "keep", "recent_tail")])
    decision, = stack.requests("decisions")
    assert list(decision["questions"]) == ["fragment_2", "fragment_4"]
    tail = compact_json(messages[5:])
    assert decision["state"]["recent_evidence"] == [tail[:500] + "[excerpt]" + tail[-500:]]
    summaries, = stack.requests("summaries")
    # each item embedded as its JSON (the generate node's embed_json_text), not as a quoted string
    assert json.loads(summaries["messages"][1]["content"]) == {"fragment_2": messages[2:4], "fragment_4": messages[4:5]}


def test_bad_or_expanding_summaries_keep_their_units(stack: Stack) -> None:
    note = {"role": "assistant", "content": "A short note about the plan, not worth much compaction at all."}
    messages = [*transcript(7)[:-1], note, DONE]  # candidates fragment_2 … fragment_8, note = fragment_9
    expanding = "n" * (size(note["content"]) - 2)  # shorter than the item, but the summary message is larger
    answers: dict[str, Any] = {
        "fragment_2": "a" * 5000,  # longer than the original
        "fragment_3": "b" * 1025,  # over the cap: 8 items × the 128-byte budget (docs/differences.md)
        "fragment_4": "   ",  # blank
        "fragment_5": 42,  # not a string
        "fragment_6": "",  # empty
        "fragment_7": "c" * 1024,  # exactly the cap: accepted
        "fragment_8": OMIT,  # not answered
        "fragment_9": expanding,
    }
    stack.script.summary_for = lambda fid, item: answers[fid]

    body = stack.compact(messages, keep_recent=1)

    summaries, = stack.requests("summaries")
    assert "at most 1024 UTF-8 bytes, and all summaries together at most 1024" in summaries["messages"][0]["content"]
    assert len(expanding) < len(compact_json([note])) and size(summary("fragment_9", expanding)) >= size([note])
    assert body["messages"] == [*messages[:7], summary("fragment_7", "c" * 1024), *messages[8:]]
    assert [f["action"] for f in body["compaction"]["fragments"]] == [
        "keep", "keep", "keep", "keep", "keep", "keep", "keep", "summarize", "keep", "keep", "keep"]
    assert body["compacted"] is True and body["x_router"]["cost_usd"] is not None


def test_unparseable_summary_keeps_the_batch_but_not_its_cost(stack: Stack) -> None:
    stack.script.summary_reply_for = lambda req: chat_reply("{not json", cost=0.004)

    body = stack.compact(transcript(3), keep_recent=1)

    assert body["messages"] == transcript(3) and body["compacted"] is False
    generate, = model_nodes(body, "llm")
    assert generate["fallback"] == "input" and "bad_response" in generate["error"]
    # A billed response keeps its cost even if its JSON was rejected (docs/behaviour.md#cost-rules).
    assert generate["cost_reported"] == 0.004
    assert body["x_router"]["cost_usd"] == round(decision_cost() + 0.004, 6)


def test_the_report_counts_the_nodes_that_fell_back_by_kind(stack: Stack) -> None:
    # The units were kept as `model_kept`, the reason a decider's own keep has too, and `reasons` lists preparation
    # limits only: an agent learned that its summarizer's answers were unusable from x_router's trace alone, node by
    # node, and a windowed run's answer (the S3 path's, the CLI's --json) said it nowhere.
    stack.script.summary_reply_for = lambda req: chat_reply("{not json")

    body = stack.compact(transcript(3), keep_recent=1)

    assert body["compacted"] is False and body["compaction"]["fallbacks"] == {"bad_response": 1}
    assert [f["reason"] for f in body["compaction"]["fragments"][2:5]] == ["model_kept"] * 3


def test_a_report_without_fallbacks_has_no_fallbacks_field(stack: Stack) -> None:
    body = stack.compact(transcript(3), keep_recent=1)

    assert body["compacted"] is True and "fallbacks" not in body["compaction"]


def test_invented_summary_id_keeps_the_whole_batch_and_its_archives(stack: Stack) -> None:
    messages = transcript(10)  # batch 0 = fragment_2 … fragment_9, batch 1 = fragment_10, fragment_11
    stack.script.choices = {"fragment_2": "archive", "fragment_10": "archive"}

    def reply(request: dict[str, Any]) -> Any:
        items = json.loads(request["messages"][1]["content"])
        answer = {fid: f"Evidence {fid}" for fid in items}
        if "fragment_3" in items:
            answer["fragment_99"] = "invented"
        return chat_reply(json.dumps(answer))

    stack.script.summary_reply_for = reply

    body = stack.compact(messages, keep_recent=1)

    assert body["messages"] == [*messages[:10], summary("fragment_11", "Evidence fragment_11"), messages[12]]
    assert [f["action"] for f in body["compaction"]["fragments"]] == ["keep"] * 10 + ["archive", "summarize", "keep"]
    assert len(stack.requests("decisions")) == 2 and len(stack.requests("summaries")) == 2
    failed = [n for n in flow_nodes(body) if n.get("fallback")]
    assert len(failed) == 1 and failed[0]["kind"] == "data" and "fragment_99" in failed[0]["error"]
    assert body["x_router"]["cost_usd"] is not None and "failed_node" not in body["x_router"]["decision_trace"]


@pytest.mark.parametrize("other", ["keep", "archive"])
def test_summary_for_a_fragment_not_selected_keeps_the_whole_batch(stack: Stack, other: str) -> None:
    # The summarizer answers for the whole batch although the decider selected only fragment_3: the other
    # fragments were kept (or archived) and must not be replaced (docs/behaviour.md#decision "Reassembly").
    messages = transcript(10)  # batch 0 = fragment_2 … fragment_9, batch 1 = fragment_10, fragment_11
    stack.script.default_choice = other
    stack.script.choices = {"fragment_3": "summarize", "fragment_10": "summarize"}

    def reply(request: dict[str, Any]) -> Any:
        items = json.loads(request["messages"][1]["content"])
        every = ([f"fragment_{i}" for i in range(2, 10)] if "fragment_3" in items else list(items))
        return chat_reply(json.dumps({fid: f"Evidence {fid}" for fid in every}))

    stack.script.summary_reply_for = reply

    body = stack.compact(messages, keep_recent=1)

    summaries = stack.requests("summaries")
    assert sorted(list(json.loads(s["messages"][1]["content"])) for s in summaries) == [["fragment_10"], ["fragment_3"]]
    tail = [summary("fragment_10", "Evidence fragment_10")] + ([] if other == "archive" else [messages[11]])
    assert body["messages"] == [*messages[:10], *tail, messages[12]]
    actions = [f["action"] for f in body["compaction"]["fragments"]]
    assert actions == ["keep"] * 10 + ["summarize", "archive" if other == "archive" else "keep", "keep"]
    failed = [n for n in flow_nodes(body) if n.get("fallback")]
    assert len(failed) == 1 and failed[0]["kind"] == "data" and "is not in the scope" in failed[0]["error"]


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda a: a["fragment_3"].update(choice="compress"), id="invented-label"),
    pytest.param(lambda a: a.pop("fragment_3"), id="missing-answer"),
    pytest.param(lambda a: a.update(fragment_77={"type": "choice", "choice": "keep"}), id="unasked-answer"),
    pytest.param(lambda a: a["fragment_3"].update(type="score"), id="wrong-type"),
])
def test_invalid_decisions_keep_the_batch(stack: Stack, mutate: Any) -> None:
    messages = transcript(10)
    stack.script.choices = {"fragment_4": "archive"}

    def reply(request: dict[str, Any]) -> Any:
        answers = {fid: {"type": "choice", "choice": "archive" if fid == "fragment_4" else "summarize"}
                   for fid in request["questions"]}
        if "fragment_3" in answers:
            mutate(answers)
        return decision_reply(answers)

    stack.script.decision_reply_for = reply

    body = stack.compact(messages, keep_recent=1)

    assert body["messages"] == [*messages[:10], summary("fragment_10", "Evidence fragment_10"),
                                summary("fragment_11", "Evidence fragment_11"), messages[12]]
    assert [f["action"] for f in body["compaction"]["fragments"]] == ["keep"] * 10 + ["summarize"] * 2 + ["keep"]
    assert len(stack.requests("decisions")) == 2 and len(stack.requests("summaries")) == 1
    classify = [n for n in model_nodes(body, "decision") if n.get("fallback")]
    assert len(classify) == 1 and "invalid_decision" in classify[0]["error"]
    skipped = [n for n in model_nodes(body, "llm") if n.get("skipped")]
    assert len(skipped) == 1 and skipped[0]["cost_reported"] == 0


def test_all_keep_is_not_compacted(stack: Stack) -> None:
    messages = transcript(4)
    stack.script.default_choice = "keep"

    body = stack.compact(messages, keep_recent=1)

    assert body["messages"] == messages and body["compacted"] is False
    assert body["compaction"]["fragments"] == manifest([(0, 1, "keep", "pinned"), (1, 2, "keep", "pinned")]
                                                       + [(i, i + 1, "keep") for i in range(2, 6)] + [(6, 7, "keep", "recent_tail")])
    assert body["compaction"]["first_changed_index"] is None
    assert body["compaction"]["output_bytes"] == body["compaction"]["original_bytes"] == size(messages)
    assert body["compaction"]["target_met"] is False
    assert stack.requests("chat") == []
    assert all(n["skipped"] for n in model_nodes(body, "llm"))
    assert body["x_router"]["cost_usd"] == round(decision_cost(), 6)
    assert body["usage"] == {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}


def test_all_archive_leaves_only_protected_messages(stack: Stack) -> None:
    messages = transcript(4)
    stack.script.default_choice = "archive"

    body = stack.compact(messages, keep_recent=1)

    assert body["messages"] == [SYSTEM, TASK, DONE] and body["compacted"] is True
    assert body["compaction"]["fragments"] == manifest(
        [(0, 1, "keep", "pinned"), (1, 2, "keep", "pinned")] + [(i, i + 1, "archive") for i in range(2, 6)]
        + [(6, 7, "keep", "recent_tail")])
    assert body["compaction"]["output_bytes"] == size([SYSTEM, TASK, DONE])
    assert body["compaction"]["target_met"] is True
    assert stack.requests("chat") == []


def test_excerpted_fragments_are_summarised_from_the_full_item_but_never_archived(stack: Stack) -> None:
    big = {"role": "assistant", "content": "log start " + "w" * 5000 + " log end"}
    messages = [SYSTEM, TASK, big, bulky(3), DONE]
    stack.script.choices = {"fragment_2": "summarize", "fragment_3": "archive"}

    body = stack.compact(messages, keep_recent=1)

    decision, = stack.requests("decisions")
    evidence = json.dumps([big])
    assert decision["state"]["fragments"][0] == {
        "id": "fragment_2", "bytes": len(compact_json([big]).encode()),
        "evidence": evidence[:1000] + "[excerpt; full item goes only to summary]" + evidence[-1000:]}
    assert decision["state"]["fragments"][1] == {"id": "fragment_3", "bytes": len(compact_json([bulky(3)]).encode()),
                                                 "evidence": json.dumps([bulky(3)])}
    assert set(decision["questions"]["fragment_2"]["criteria"]) == {"keep", "summarize"}
    assert set(decision["questions"]["fragment_3"]["criteria"]) == {"keep", "summarize", "archive"}
    summaries, = stack.requests("summaries")
    assert json.loads(summaries["messages"][1]["content"]) == {"fragment_2": [big]}
    assert body["messages"] == [SYSTEM, TASK, summary("fragment_2", "Evidence fragment_2"), DONE]


def test_archive_answer_for_an_excerpted_fragment_keeps_the_batch(stack: Stack) -> None:
    big = {"role": "assistant", "content": "w" * 5000}
    messages = [SYSTEM, TASK, big, bulky(3), DONE]
    stack.script.default_choice = "archive"

    body = stack.compact(messages, keep_recent=1)

    assert body["messages"] == messages and body["compacted"] is False
    classify, = model_nodes(body, "decision")
    assert classify["fallback"] == "input" and "unknown_choice" in classify["error"]


def test_non_ascii_evidence_is_excerpted_by_its_ascii_length(stack: Stack) -> None:
    accented = {"role": "assistant", "content": "é" * 400}  # 800 UTF-8 bytes, 2 400 escaped characters
    messages = [SYSTEM, TASK, accented, DONE]
    stack.script.default_choice = "keep"

    stack.compact(messages, keep_recent=1)

    decision, = stack.requests("decisions")
    evidence = json.dumps([accented])
    assert len(compact_json([accented])) < 2000 < len(evidence)
    assert decision["state"]["fragments"] == [
        {"id": "fragment_2", "bytes": len(compact_json([accented]).encode()),
         "evidence": evidence[:1000] + "[excerpt; full item goes only to summary]" + evidence[-1000:]}]
    assert "archive" not in decision["questions"]["fragment_2"]["criteria"]


def test_huge_recent_tail_is_excerpted_in_the_evidence_and_kept_verbatim(stack: Stack) -> None:
    huge = {"role": "assistant", "content": "tail " + "r" * 6000 + " end"}
    messages = [SYSTEM, TASK, bulky(2), bulky(3), huge, DONE]

    body = stack.compact(messages, keep_recent=2)

    decision, = stack.requests("decisions")
    text = compact_json([huge])
    assert decision["state"]["recent_evidence"] == [text[:500] + "[excerpt]" + text[-500:], compact_json([DONE])]
    assert body["messages"] == [SYSTEM, TASK, summary("fragment_2", "Evidence fragment_2"),
                                summary("fragment_3", "Evidence fragment_3"), huge, DONE]
    # the target never overrides protected content
    assert body["compaction"]["target_met"] is False and body["compaction"]["reasons"] == []


@pytest.mark.parametrize("system_size, pins", [(33_000, None), (10, [1])], ids=["system", "pinned-user"])
def test_oversized_instructions_are_bounded_in_the_state_and_never_block(stack: Stack, system_size: int,
                                                                         pins: list[int] | None) -> None:
    messages = [{"role": "system", "content": "s" * system_size}, {"role": "user", "content": "u" * 33_000},
                bulky(2), bulky(3), DONE]
    if pins is None:
        messages[1] = TASK

    body = stack.compact(messages, keep_recent=1, pinned_indices=pins)

    decision, = stack.requests("decisions")
    assert list(decision["questions"]) == ["fragment_2", "fragment_3"]
    assert body["compaction"]["reasons"] == []
    assert body["messages"][:2] == messages[:2]  # the pins come back byte-identical
    assert [f["action"] for f in body["compaction"]["fragments"]] == ["keep", "keep", "summarize", "summarize", "keep"]
    shown = decision["state"]["instructions"]
    assert [m["role"] for m in shown] == ["system", "user"]
    assert any("characters of this pinned message omitted" in m["content"] for m in shown)


def test_only_protected_messages_make_no_call_and_omit_cost_keys(stack: Stack) -> None:
    messages = [SYSTEM, TASK, bulky(2), {"role": "user", "content": "Next."}, DONE]

    body = stack.compact(messages, keep_recent=2, pinned_indices=[1, 2])

    assert set(body) == {"messages", "compacted", "compaction"}
    assert body["messages"] == messages and body["compaction"]["reasons"] == []
    assert stack.fake.requests == []


@pytest.mark.parametrize("pins, instructions, candidates", [
    (None, [0, 1, 3, 5], [2, 4, 6]),
    ([3], [0, 3, 5], [1, 2, 4, 6]),
    ([], [0, 5], [1, 2, 3, 4, 6]),
    ([2, 1], [0, 1, 2, 5], [3, 4, 6]),
], ids=["default-users", "explicit-replaces-users", "empty-keeps-system-developer", "explicit-assistant"])
def test_explicit_and_default_pins(stack: Stack, pins: list[int] | None, instructions: list[int],
                                   candidates: list[int]) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Task A."}, bulky(2), {"role": "user", "content": "Also B."},
                bulky(4), {"role": "developer", "content": "Dev note."}, bulky(6), DONE]
    stack.script.summary_for = lambda fid, item: f"S{fid[9:]}"

    body = stack.compact(messages, keep_recent=1, pinned_indices=pins)

    decision, = stack.requests("decisions")
    shown = decision["state"]["instructions"]  # a bounded view: long pins are excerpted, their size stated
    assert [m["role"] for m in shown] == [messages[i]["role"] for i in instructions]
    for view, i in zip(shown, instructions):
        original = messages[i]["content"]
        assert view["content"] == original or (
            "of this pinned message omitted" in view["content"]
            and original.startswith(view["content"].split(" [... ", 1)[0]))
    assert list(decision["questions"]) == [f"fragment_{i}" for i in candidates]
    actions = [f["action"] for f in body["compaction"]["fragments"]]
    for i in instructions + [7]:
        assert actions[i] == "keep" and messages[i] in body["messages"]
    for i in candidates:  # small user messages would expand as summaries: kept; bulky ones are summarised
        expected = "summarize" if messages[i]["role"] == "assistant" else "keep"
        assert actions[i] == expected
