"""``openai-responses``: OpenAI Responses API input items (docs/formats.md).

Calls and results are items paired by ``call_id``: ``function_call`` with ``function_call_output``,
``custom_tool_call`` with ``custom_tool_call_output`` (any ``*_call`` with its ``*_call_output``); a
unit holds the calls of one turn with every output answering them. A ``reasoning`` item joins the item
after it. ``system`` and ``developer`` messages are always protected, ``user`` messages by default;
the request's top-level ``instructions`` are outside the items and never touched.

``reasoning`` items never reach the models (their summaries would leak into visible text); a unit that
is summarized or archived loses them, which the Responses API allows (a kept call keeps its reasoning,
both are in the same unit).
"""

from __future__ import annotations

import json
from typing import Any

from compactor.compaction.units import Unit
from compactor.markers import tool_call_line
from compactor.formats.base import Dialect, Item, Placeholder, block_text, paired_units

HIDDEN = ("reasoning",)
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text")


# Outputs that may be a list of content parts or a string: a list output of these is masked to a string.
LIST_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def kind_of(item: Item) -> str:
    """An item's type; a bare ``{"role", "content"}`` item is a message."""
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    return "message" if "role" in item else ""


def _opens(item: Item) -> set[str]:
    call = item.get("call_id")
    kind = kind_of(item)
    return {call} if isinstance(call, str) and kind.endswith("_call") else set()


def _closes(item: Item) -> set[str]:
    call = item.get("call_id")
    return {call} if isinstance(call, str) and kind_of(item).endswith("_call_output") else set()


def _message_role(item: Item) -> Any:
    return item.get("role") if kind_of(item) == "message" else None


class OpenAIResponses(Dialect):
    name = "openai-responses"
    items_field = "input"
    chat_items = False

    def validate(self, items: list[Item]) -> None:
        for index, item in enumerate(items):
            if not kind_of(item):
                raise ValueError(f"input[{index}]: an item needs a 'type' (or a 'role' for a message)")

    def split_units(self, items: list[Item]) -> list[Unit]:
        return paired_units(items, opens=_opens, closes=_closes, leads=lambda i: kind_of(i) in HIDDEN,
                            same_turn=lambda a, b: False)

    def always_pinned(self, items: list[Item]) -> set[int]:
        return {i for i, m in enumerate(items) if _message_role(m) in ("system", "developer")}

    def default_pins(self, items: list[Item]) -> set[int]:
        return {i for i, m in enumerate(items) if _message_role(m) == "user"}

    def model_view(self, items: list[Item]) -> list[Item]:
        return [item for item in items if kind_of(item) not in HIDDEN]

    def text_item(self, role: str, text: str) -> Item:
        if role == "assistant":
            return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}

    def render_line(self, item: Item) -> str:
        kind = kind_of(item)
        if kind == "message":
            return f"{item.get('role')}: {block_text(item.get('content'), TEXT_PARTS)}"
        if kind.endswith("_call_output"):
            output = item.get("output")
            return f"tool: {output if isinstance(output, str) else block_text(output, TEXT_PARTS)}"
        if kind.endswith("_call"):
            args = item.get("arguments", item.get("input", item.get("action")))
            shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            return f"assistant: {tool_call_line(item.get('name', kind), shown)}"
        return "" if kind in HIDDEN else f"{kind}: {json.dumps(item, ensure_ascii=False)}"

    def call_names(self, items: list[Item]) -> dict[str, str]:
        return {item["call_id"]: str(item.get("name", kind_of(item))) for item in items
                if isinstance(item.get("call_id"), str) and kind_of(item).endswith("_call")}

    def masked(self, items: list[Item], index: int, placeholder: Placeholder) -> Item | None:
        """A ``*_call_output`` item, its ``call_id`` kept, where a string is a valid ``output``: a string output,
        or the list of content parts of a ``function_call_output`` / ``custom_tool_call_output``. A typed
        output (a ``computer_call_output``'s screenshot object, …) stays."""
        item = items[index]
        kind, output = kind_of(item), item.get("output")
        if not kind.endswith("_call_output") or not (isinstance(output, str)
                                                     or (isinstance(output, list) and kind in LIST_OUTPUTS)):
            return None
        call_id = item.get("call_id")
        text = placeholder(call_id if isinstance(call_id, str) else None, output)
        return None if text is None else {**item, "output": text}


DIALECT = OpenAIResponses()
