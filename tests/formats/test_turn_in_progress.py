"""``anthropic-messages``: the final assistant message of the turn in progress keeps its thinking intact and
no new item lands next to it, yet an autonomous loop after one prompt still compacts (docs/formats.md
"Hidden reasoning")."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor.compaction.mask import mask
from compactor.compaction.seal import plan_seal
from compactor.formats import get_dialect
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event, decision_policy
from .validity import PROBLEMS, cdump

ANTHROPIC = get_dialect("anthropic-messages")


def _cycle(n: int, thinking: bool = True) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": f"plan {n} " * 30, "signature": f"sig{n}"}]
    content = (content if thinking else []) + [
        {"type": "text", "text": f"Reading file {n}. " * 10},
        {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"path": f"src/f{n}.py"}}]
    return [{"role": "assistant", "content": content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}",
                                          "content": f"line {n} of the file " * 60}]}]


def _loop(cycles: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing parser tests, then run them."}]
    for n in range(cycles):
        items += _cycle(n)
    return items


def _compact(module: ModuleType, context: LocalLambdaContext, body: dict[str, Any]) -> dict[str, Any]:
    response = module.handler(api_event("/compact", body), context)
    assert response["statusCode"] == 200, response["body"]
    return json.loads(response["body"])


def test_the_dialect_protects_the_last_two_units_of_the_turn_in_progress() -> None:
    items = _loop(5)
    units = ANTHROPIC.split_units(items)

    assert ANTHROPIC.protected_tail_start(items, units) == len(items) - 4  # the last two cycles
    finished = items + [{"role": "assistant", "content": "All green."}, {"role": "user", "content": "Thanks!"}]
    assert ANTHROPIC.protected_tail_start(finished, ANTHROPIC.split_units(finished)) is None  # no turn in progress
    stopped = items + [_cycle(5)[0]]  # the final assistant message's call not answered yet
    assert ANTHROPIC.protected_tail_start(stopped, ANTHROPIC.split_units(stopped)) == len(items) - 2


@pytest.mark.parametrize("keep_recent", [1, None])
def test_the_final_assistant_thinking_survives_a_compaction_that_summarizes_all_it_can(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, keep_recent: int | None) -> None:
    items = _loop(12)
    request: dict[str, Any] = {"format": "anthropic-messages", "messages": items, "target_ratio": 0.05,
                               "decision_policy_ir": decision_policy()}
    if keep_recent is not None:
        request["keep_recent"] = keep_recent
    body = _compact(compact_module, lambda_context, request)

    output = body["messages"]
    assert body["compacted"] is True and PROBLEMS["anthropic-messages"](output) == []
    # The final assistant message (thinking, signature and all) and the cycle before it come back as they were:
    # the item before the final assistant message is the caller's own tool_result, never a new summary.
    assert [cdump(m) for m in output[-4:]] == [cdump(m) for m in items[-4:]]
    changed = [e for e in body["compaction"]["fragments"] if e["action"] != "keep"]
    assert len(changed) >= 8  # everything else that could be summarized or archived was


def _split_final_response() -> list[dict[str, Any]]:
    """A loop whose final response is stored as two assistant messages without a shared ``id`` (its thinking and
    text, then its call): the API merges them into one final assistant message."""
    items = _loop(6)
    return items + [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "run them " * 30, "signature": "sigF"},
                                          {"type": "text", "text": "Now I run the tests."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_F", "name": "Bash", "input": {"c": "pytest"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_F", "content": "12 passed"}]}]


def test_the_final_assistant_message_merged_from_several_keeps_its_thinking_first(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    """Before, only the unit holding the last assistant message and the one before it (the thinking and text
    message) were protected, so the summaries of the cycles before landed right before the thinking message: the
    API merged them into the final assistant message, which then began with text instead of its thinking."""
    items = _split_final_response()
    units = ANTHROPIC.split_units(items)
    assert ANTHROPIC.protected_tail_start(items, units) == len(items) - 5  # the cycle before the final response

    body = _compact(compact_module, lambda_context, {"format": "anthropic-messages", "messages": items,
                                                     "keep_recent": 1, "target_ratio": 0.01,
                                                     "decision_policy_ir": decision_policy()})
    output = body["messages"]
    assert body["compacted"] is True and PROBLEMS["anthropic-messages"](output) == []
    assert [cdump(m) for m in output[-5:]] == [cdump(m) for m in items[-5:]]
    assert output[-4]["role"] == "user"  # the final message follows the caller's own tool_result, no summary


def _results_with_the_users_words(apart: bool = False) -> list[dict[str, Any]]:
    """A loop whose last user turn carries the final call's result and the human's words beside it (Claude Code's
    "[Request interrupted by user for tool use]" and reminders, an agent passing the user's words on): in the same
    message, or (``apart``) in a message of its own after the results, as Claude Code stores them, which the API
    combines with the results into one user turn."""
    items = _loop(8)
    words = {"type": "text", "text": "[Request interrupted by user for tool use]"}
    if apart:
        return [*items, {"role": "user", "content": [words]}]
    items[-1] = {"role": "user", "content": [*items[-1]["content"], words]}
    return items


@pytest.mark.parametrize("keep_recent", [1, 2])
@pytest.mark.parametrize("apart", [False, True], ids=["same-message", "message-of-its-own"])
def test_results_sent_with_the_humans_words_keep_the_turn_in_progress(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, apart: bool, keep_recent: int) -> None:
    """The Messages API wants the final assistant message to start with its thinking while the last user turn
    carries tool results, text beside them or not. Such a message counted as a human turn ending the turn in
    progress, so nothing more was protected: the cycle before the final message was summarized, its summary merged
    into the final assistant message, and the answer began that message with text (the API's 400 "Expected
    `thinking` or `redacted_thinking`, but found `text`"). The words in a message of their own after the results
    (Claude Code's records of an interruption) still ended the turn after that was fixed: the API combines them with
    the results into one user turn."""
    items = _results_with_the_users_words(apart)
    final = len(items) - 2 - apart  # the final assistant message, its result (and the words) after it
    assert ANTHROPIC.protected_tail_start(items, ANTHROPIC.split_units(items)) == final - 2
    facts = ANTHROPIC.stream_facts()
    for item in items:
        facts.add(item)
    assert facts.tail_start(facts.units()) == final - 2  # windows agree

    body = _compact(compact_module, lambda_context, {"format": "anthropic-messages", "messages": items,
                                                     "keep_recent": keep_recent, "target_ratio": 0.01,
                                                     "decision_policy_ir": decision_policy()})
    output = body["messages"]
    assert body["compacted"] is True and PROBLEMS["anthropic-messages"](output) == []
    # the final assistant message, thinking first, follows the caller's own tool_result, never a new summary
    assert [cdump(m) for m in output[final - 2 - len(items):]] == [cdump(m) for m in items[final - 2:]]


def test_the_human_s_own_turn_after_the_results_still_ends_the_turn() -> None:
    """Only a user turn carrying tool results keeps the turn going: the human's own words after the final assistant
    message, with no results (the calls answered earlier), end it, and nothing more is protected."""
    items = [*_loop(4), {"role": "assistant", "content": [{"type": "text", "text": "All green."}]},
             {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
             {"role": "user", "content": "Now the README."}]
    assert ANTHROPIC.protected_tail_start(items, ANTHROPIC.split_units(items)) is None
    assert PROBLEMS["anthropic-messages"](items) == []


def test_an_autonomous_loop_of_200_cycles_after_one_prompt_still_compacts(
        compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    items = _loop(200)
    body = _compact(compact_module, lambda_context, {"format": "anthropic-messages", "messages": items,
                                                     "decision_policy_ir": decision_policy()})

    report = body["compaction"]
    assert body["compacted"] is True and PROBLEMS["anthropic-messages"](body["messages"]) == []
    changed = [e for e in report["fragments"] if e["action"] != "keep"]
    # most of the 200 cycles summarized or archived (one request takes at most 128 candidates: fragment_limit)
    assert len(changed) > 100, report["reasons"]
    assert report["output_bytes"] < report["original_bytes"] / 2
    assert [cdump(m) for m in body["messages"][-4:]] == [cdump(m) for m in items[-4:]]


def test_mask_and_seal_keep_the_same_tail() -> None:
    items = _loop(6)

    _, masked = mask(items, keep_recent=1, pinned_indices=None, dialect=ANTHROPIC)
    plan = plan_seal(items, keep_recent=1, dialect=ANTHROPIC)

    assert max(m.index for m in masked) == len(items) - 5  # the cycle before the last two is the last masked
    assert plan is not None and plan.recent == items[-4:]
