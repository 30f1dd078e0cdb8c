"""The deprecated chat ``function_call`` (one call per assistant message, answered by a ``function``
message): paired, masked and rendered like ``tool_calls`` (docs/formats.md)."""

from __future__ import annotations

import json
from typing import Any

from compactor.compaction.mask import mask
from compactor.compaction.seal import plan_seal, render_lines
from compactor.compaction.windows import group_units
from compactor.formats import get_dialect

CHAT = get_dialect("openai-chat")
OUTPUT = "72F and sunny " * 40


def _legacy() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Weather in Boston?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": '{"city": "Boston"}'}},
        {"role": "function", "name": "get_weather", "content": OUTPUT},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "Thanks"},
    ]


def test_a_function_call_and_its_function_answer_are_one_unit() -> None:
    items = _legacy()

    assert [(u.start, u.end) for u in CHAT.split_units(items)] == [(0, 1), (1, 2), (2, 4), (4, 5), (5, 6)]
    assert [(u.start, u.end) for u, _ in group_units(items)] == [(0, 1), (1, 2), (2, 4), (4, 5), (5, 6)]


def test_the_seal_tail_never_starts_with_an_orphaned_function_answer() -> None:
    plan = plan_seal(_legacy()[:4], keep_recent=1, dialect=CHAT)

    assert plan is not None and plan.recent[0].get("function_call") is not None and len(plan.recent) == 2


def test_mask_masks_the_function_answer() -> None:
    items = _legacy()
    output, masked = mask(items, keep_recent=1, pinned_indices=None, dialect=CHAT)

    assert [m.index for m in masked] == [3]
    assert output[3]["role"] == "function" and output[3]["name"] == "get_weather"
    assert "omitted by compaction" in output[3]["content"] and OUTPUT not in output[3]["content"]


def test_the_function_answers_placeholder_and_report_name_the_function() -> None:
    output, masked = mask(_legacy(), keep_recent=1, pinned_indices=None, dialect=CHAT)

    size = len(json.dumps(OUTPUT))
    assert output[3]["content"] == f"[output of get_weather omitted by compaction: {size} bytes]"
    assert [(m.tool_call_id, m.name, m.original_bytes) for m in masked] == [(None, "get_weather", size)]


def test_a_tool_message_named_by_its_sender_is_named_by_its_call() -> None:
    # ``name`` names a tool message's sender in some clients: the call's own name is the tool's
    items = [{"role": "user", "content": "go"},
             {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                 "name": "bash", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "name": "runner", "content": OUTPUT},
             {"role": "assistant", "content": "done"}]
    output, masked = mask(items, keep_recent=1, pinned_indices=None, dialect=CHAT)

    assert output[2]["content"].startswith("[output of bash (call c1) omitted") and masked[0].name == "bash"


def test_seal_renders_the_legacy_call() -> None:
    lines = render_lines(_legacy()[2:4], CHAT)

    assert 'get_weather({"city": "Boston"})' in lines[0]
