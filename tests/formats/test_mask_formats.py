"""``mask`` in every format: the same protection as the other modes, a placeholder per output measured on
that output, and only where the format accepts a string in the output's place (docs/behaviour.md#mask)."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from compactor.compaction.mask import mask
from compactor.formats import get_dialect
from compactor.jsonutil import dense_size
from compactor_cli.lambda_runtime import LocalLambdaContext

from .conftest import api_event
from .validity import PROBLEMS

BIG = "x" * 2000
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 3000}}


def _use(call_id: str, name: str = "Read") -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": {}}]}


def _result(call_id: str, content: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def _chat_call(call_id: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}


def _masked_indexes(items: list[dict[str, Any]], fmt: str, pins: list[int] | None = None) -> list[int]:
    return [m.index for m in mask(items, keep_recent=1, pinned_indices=pins, dialect=get_dialect(fmt))[1]]


def test_an_anthropic_human_turn_holding_tool_results_is_pinned_by_default() -> None:
    items = [{"role": "user", "content": "go"}, _use("a"),
             {"role": "user", "content": [_result("a", BIG), {"type": "text", "text": "Stop and use git instead."}]},
             _use("b"), {"role": "user", "content": [_result("b", BIG)]}, _use("c"),
             {"role": "user", "content": [_result("c", BIG)]}, _use("d"), {"role": "user", "content": [_result("d", BIG)]}]

    # the last two cycles (indexes 5 to 8) are the protected tail of the turn in progress
    assert _masked_indexes(items, "anthropic-messages") == [4]
    assert _masked_indexes(items, "anthropic-messages", pins=[0]) == [2, 4]  # explicit pins replace the default


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic-messages", "openai-responses"])
def test_an_explicit_pin_protects_the_whole_unit_holding_it(fmt: str) -> None:
    if fmt == "openai-chat":
        items = [{"role": "user", "content": "go"}, _chat_call("a"), {"role": "tool", "tool_call_id": "a", "content": BIG},
                 _chat_call("b"), {"role": "tool", "tool_call_id": "b", "content": BIG}, {"role": "assistant", "content": "ok"}]
    elif fmt == "anthropic-messages":
        items = [{"role": "user", "content": "go"}, _use("a"), {"role": "user", "content": [_result("a", BIG)]},
                 _use("b"), {"role": "user", "content": [_result("b", BIG)]}, {"role": "assistant", "content": "ok"},
                 {"role": "user", "content": "thanks"}]  # a finished turn: no turn in progress to protect
    else:
        items = [{"type": "message", "role": "user", "content": "go"}]
        for call in ("a", "b"):
            items += [{"type": "function_call", "call_id": call, "name": "exec", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": call, "output": BIG}]
        items.append({"type": "message", "role": "assistant", "content": "ok"})

    assert _masked_indexes(items, fmt) == [2, 4]
    assert _masked_indexes(items, fmt, pins=[1]) == [4]  # the call is pinned: its result stays with it
    assert _masked_indexes(items, fmt, pins=[4]) == [2]


def test_responses_developer_and_system_messages_are_never_masked_even_without_default_pins() -> None:
    items = [{"type": "message", "role": "developer", "content": BIG},
             {"type": "function_call", "call_id": "a", "name": "exec", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "a", "output": BIG},
             {"type": "message", "role": "assistant", "content": "ok"}]

    output, masked = mask(items, keep_recent=1, pinned_indices=[], dialect=get_dialect("openai-responses"))

    assert [m.index for m in masked] == [2] and output[0] is items[0]


def test_each_output_gets_its_own_placeholder_and_size_and_a_small_one_stays() -> None:
    blocks = [{"type": "text", "text": "see"}, IMAGE]
    items = [{"role": "user", "content": "go"},
             {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "shot", "input": {}},
                                               {"type": "tool_use", "id": "b", "name": "ls", "input": {}}]},
             {"role": "user", "content": [_result("a", blocks), _result("b", "ok")]},
             {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]

    output, masked = mask(items, keep_recent=1, pinned_indices=None, dialect=get_dialect("anthropic-messages"))

    assert [(m.tool_call_id, m.original_bytes) for m in masked] == [("a", dense_size(blocks))]
    first, second = output[2]["content"]
    assert first["content"] == f"[output of shot (call a) omitted by compaction: {dense_size(blocks)} bytes]"
    assert second == _result("b", "ok")  # a placeholder would be larger than "ok"


def test_a_chat_tool_message_with_a_list_of_parts_is_masked_to_a_string_of_its_size() -> None:
    parts = [{"type": "text", "text": "y" * 800}, {"type": "image_url", "image_url": {"url": "data:" + "A" * 2000}}]
    items = [{"role": "user", "content": "go"}, _chat_call("a"), {"role": "tool", "tool_call_id": "a", "content": parts},
             {"role": "assistant", "content": "done"}]

    output, masked = mask(items, keep_recent=1, pinned_indices=None, dialect=get_dialect("openai-chat"))

    assert [(m.index, m.original_bytes) for m in masked] == [(2, dense_size(parts))]
    assert output[2]["content"] == f"[output of bash (call a) omitted by compaction: {dense_size(parts)} bytes]"


def _compact(module: ModuleType, context: LocalLambdaContext, body: dict[str, Any]) -> tuple[int, Any]:
    response = module.handler(api_event("/compact", body), context)
    return response["statusCode"], json.loads(response["body"])


def test_structured_outputs_are_masked_to_a_type_the_api_accepts(compact_module: ModuleType,
                                                                  lambda_context: LocalLambdaContext) -> None:
    search = {"type": "web_search_tool_result", "tool_use_id": "s",
              "content": [{"type": "web_search_result", "url": "https://e.x", "title": "t",
                           "encrypted_content": "E" * 2000}]}
    anthropic = [{"role": "user", "content": "go"}, _use("a", "shot"),
                 {"role": "user", "content": [_result("a", [{"type": "text", "text": "see"}, IMAGE])]},
                 {"role": "assistant", "content": [
                     {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"query": "q"}}, search]},
                 {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
    status, body = _compact(compact_module, lambda_context,
                            {"format": "anthropic-messages", "messages": anthropic, "mode": "mask", "keep_recent": 1})

    assert status == 200 and PROBLEMS["anthropic-messages"](body["messages"]) == []
    assert isinstance(body["messages"][2]["content"][0]["content"], str)
    assert body["messages"][3] == anthropic[3]  # a server tool's typed result stays

    screenshot = {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "A" * 3000}
    responses = [{"type": "message", "role": "user", "content": "go"},
                 {"type": "computer_call", "call_id": "k", "action": {"type": "screenshot"}},
                 {"type": "computer_call_output", "call_id": "k", "output": screenshot},
                 {"type": "function_call", "call_id": "f", "name": "shot", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "f", "output": [
                     {"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "data:" + "B" * 3000}]},
                 {"type": "message", "role": "assistant", "content": "done"}]
    status, body = _compact(compact_module, lambda_context,
                            {"format": "openai-responses", "input": responses, "mode": "mask", "keep_recent": 1})

    assert status == 200 and PROBLEMS["openai-responses"](body["input"]) == []
    assert body["input"][2] == responses[2]  # a computer_call_output's output must stay a screenshot object
    # A list of content parts keeps its shape: one input_text part holding the placeholder.
    assert [part["type"] for part in body["input"][4]["output"]] == ["input_text"]
    assert "omitted by compaction" in body["input"][4]["output"][0]["text"]
    assert [m["index"] for m in body["compaction"]["masked"]] == [4]


def test_mask_keeps_an_anthropic_result_that_loads_deferred_tools() -> None:
    """A tool search's result (Claude Code's ToolSearch) is a list of ``tool_reference`` blocks that load the
    deferred tools the later calls use: masking it, as mask did when the list outgrew the placeholder, unloaded
    them while their calls stayed. It stays; the other outputs are masked as before."""
    references = [{"type": "tool_reference", "tool_name": f"TaskTool{n}"} for n in range(8)]
    items = [{"role": "user", "content": "plan the work"}, _use("s", "ToolSearch"),
             {"role": "user", "content": [_result("s", references)]},
             _use("a", "TaskTool1"), {"role": "user", "content": [_result("a", BIG)]},
             _use("b", "TaskTool2"), {"role": "user", "content": [_result("b", BIG)]},
             {"role": "assistant", "content": "Planned."}, {"role": "user", "content": "thanks"}]
    assert dense_size(references) > 200  # larger than its placeholder would be

    output, masked = mask(items, keep_recent=1, pinned_indices=None, dialect=get_dialect("anthropic-messages"))
    assert [m.index for m in masked] == [4, 6]
    assert output[2] == items[2]
