"""``seal`` never seals an always-pinned item: ``developer`` messages are protected like ``system`` ones
(docs/behaviour.md#seal, docs/formats.md)."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor.compaction.seal import plan_seal
from compactor.formats import get_dialect
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event
from .validity import cdump

RULE = "DEVELOPER-RULE: never push to main"


def _turns(count: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for n in range(count):
        turns += [{"role": "user", "content": f"Step {n}: " + "please look at the parser " * 20},
                  {"role": "assistant", "content": f"Done step {n}. " + "I read the file and fixed it " * 20}]
    return turns


@pytest.mark.parametrize("head", [
    [{"role": "developer", "content": RULE}],
    [{"role": "system", "content": "You are helpful."}, {"role": "developer", "content": RULE}],
])
def test_leading_developer_messages_are_frozen_like_system_ones(head: list[dict[str, Any]]) -> None:
    items = head + _turns(4)

    plan = plan_seal(items, keep_recent=2, dialect=get_dialect("openai-chat"))

    assert plan is not None and plan.frozen == head and plan.held == []
    assert all(m["role"] == "user" or m["role"] == "assistant" for m in plan.aged)


def test_a_developer_message_in_the_middle_is_held_not_sealed() -> None:
    middle = {"role": "developer", "content": RULE}
    items = [{"role": "system", "content": "sys"}, *_turns(2), middle, *_turns(2)]

    plan = plan_seal(items, keep_recent=2, dialect=get_dialect("openai-chat"))

    assert plan is not None and plan.held == [middle] and middle not in plan.aged
    assert plan.frozen + plan.aged[:4] + plan.held + plan.aged[4:] + plan.recent == items


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
def test_seal_keeps_every_developer_message_verbatim_and_out_of_the_summary(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str) -> None:
    first = {"role": "developer", "content": RULE + " (first)"}
    middle = {"role": "developer", "content": RULE + " (middle)"}
    items = [first, *_turns(3), middle, *_turns(3)]
    field = "messages"
    if fmt == "openai-responses":
        items = [{"type": "message", **m} for m in items]
        first, middle, field = items[0], items[7], "input"
    response = compact_module.handler(api_event("/compact", {
        "format": fmt, field: items, "mode": "seal", "keep_recent": 2}), lambda_context)
    body = json.loads(response["body"])

    assert response["statusCode"] == 200 and body["compacted"] is True, body
    output = body[field]
    assert cdump(output[0]) == cdump(first) and cdump(output[2]) == cdump(middle)
    assert "[Earlier conversation, sealed summary]" in cdump(output[1]) and RULE not in cdump(output[1])
    assert [cdump(m) for m in output[-2:]] == [cdump(m) for m in items[-2:]]


def _as_format(items: list[dict[str, Any]], fmt: str) -> list[dict[str, Any]]:
    if fmt == "openai-responses":
        return [{"type": "message", **m} for m in items]
    if fmt == "anthropic-messages":
        return [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in items]
    return items


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic-messages"])
def test_each_seal_of_a_growing_conversation_carries_the_earlier_seal_forward(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str) -> None:
    """An agent seals, goes on from the answer, and seals again: the second seal folds the first summary into
    its own. The sealed summary was a ``system`` (``developer``) item, always pinned, so every seal kept all the
    earlier ones verbatim and added one more: ten seals, ten summaries, none carried forward."""
    field = "input" if fmt == "openai-responses" else "messages"
    head = [] if fmt == "anthropic-messages" else [{"role": "system", "content": "You are a coding agent."}]
    context = _as_format(head + [{"role": "user", "content": "Task: make the parser accept empty input."}], fmt)
    for round_ in range(4):
        context = context + _as_format(_turns(4), fmt)
        response = compact_module.handler(api_event("/compact", {
            "format": fmt, field: context, "mode": "seal", "keep_recent": 2}), lambda_context)
        body = json.loads(response["body"])
        assert response["statusCode"] == 200 and body["compacted"] is True, body
        context = body[field]
        seals = [item for item in context if "[Earlier conversation, sealed summary]" in cdump(item)]
        assert len(seals) == 1, f"round {round_}: {len(seals)} sealed summaries"
        if round_:
            assert "\nearlier: " in cdump(seals[0]).replace("\\n", "\n")
    assert context[:len(head)] == _as_format(head, fmt)


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic-messages"])
def test_a_sealed_answer_sealed_again_with_nothing_new_comes_back_unchanged_without_a_model_call(
        compact_module: ModuleType, lambda_context: LocalLambdaContext, fmt: str) -> None:
    """Once an earlier seal's summary was sealed with the middle, a sealed answer sent again (a retry, a harness that
    compacts before every call) had that summary alone between its head and its tail: the seal summarized the
    summary on its own, a billed model call for a lossier summary of the same conversation. Before, the summary was
    always pinned and there was nothing to seal."""
    field = "input" if fmt == "openai-responses" else "messages"
    head = [] if fmt == "anthropic-messages" else [{"role": "system", "content": "You are a coding agent."}]
    context = _as_format(head + [{"role": "user", "content": "Task: make the parser accept empty input."}]
                         + _turns(4), fmt)

    def sealed(items: list[dict[str, Any]]) -> dict[str, Any]:
        response = compact_module.handler(api_event("/compact", {
            "format": fmt, field: items, "mode": "seal", "keep_recent": 2}), lambda_context)
        assert response["statusCode"] == 200, response["body"]
        return json.loads(response["body"])

    first = sealed(context)
    assert first["compacted"] is True
    again = sealed(first[field])
    assert again == {field: first[field], "compacted": False}, again  # no x_router: no model was called
